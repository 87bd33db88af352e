#!/usr/bin/env python3
"""An op finding confirmed without our oracle (issue 56): fla's own naive recurrent reference
(fla.ops.gla.naive.naive_recurrent_gla), run in f64 on a GLA case's inputs, against fla's answer
and against `pararnn oracle`'s output. Prints, for o: max |oracle - naive f64| (how far our oracle
is from the library's own reference), and for the answer and the same-dtype floor each, the
largest error against the naive f64 reference and how many values lie outside the case's tau
(rtol * max(|ref|, RMS(ref)), the rule of docs/ops/README.md) measured against that reference.
The naive reference is run in f64 by making its `.float()` calls `.double()` for the call.

Usage: scripts/ops-confirm-fla.py CASE ANSWER ORACLE FLOOR RTOL   (on a machine with torch and fla)
Exit 0 when it ran (the numbers are the result), 2 on bad usage or an unsupported case.
"""
import importlib.util
import os
import sys

# The fla adapter's safetensors reader (standard library), loaded under another name than "fla".
_spec = importlib.util.spec_from_file_location(
    "fla_adapter", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "pararnn_judge",
                                "solvers", "fla.py"))
adapter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter)


def main(argv):
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    from fla.ops.gla.naive import naive_recurrent_gla
    case, answer, oracle, floor = (adapter.read_tensors(torch, p) for p in argv[1:5])
    rtol = float(argv[5])
    _, metadata = adapter.read_header(argv[1])
    if metadata.get("op") != "gla" or "cu_seqlens" in case:
        print("ops-confirm-fla: a gla case without cu_seqlens only", file=sys.stderr)
        return 2
    original = torch.Tensor.float
    torch.Tensor.float = lambda self: self.double()
    try:
        args = [case[n].double().cuda() for n in ("q", "k", "v", "g")]
        h0 = case.get("initial_state")
        ref, _ = naive_recurrent_gla(*args, initial_state=None if h0 is None else h0.double().cuda(),
                                     output_final_state=True)
    finally:
        torch.Tensor.float = original
    ref = ref.double().cpu()
    scale = torch.maximum(ref.abs(), ref.pow(2).mean().sqrt())
    print(f"o: oracle vs fla's naive reference in f64: max |diff| {(oracle['o'].double() - ref).abs().max().item():.3e}")
    for name, result in (("answer", answer), ("floor", floor)):
        err = (result["o"].double() - ref).abs()
        outside = int((err > rtol * scale).sum().item())
        print(f"o: {name} vs the naive f64 reference: max error {err.max().item():.3e}, "
              f"{outside} of {err.numel()} values outside tau (rtol {rtol})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
