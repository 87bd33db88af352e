#!/usr/bin/env python3
"""An op finding confirmed without our oracle (issue 56): fla's own naive recurrent reference, run
in f64 on an op case's inputs, against fla's answer, against `pararnn oracle`'s output and against
the same-dtype floor (`pararnn solve`). For each output (o, final_state) it prints how far our
oracle is from the library's own reference, and for the answer and the floor each, the largest
error against that reference and how many values lie outside the case's tau measured against it
(rtol * max(|ref|, RMS(ref)), the rule of docs/ops/README.md).

Usage: scripts/ops-confirm-fla.py CASE ANSWER ORACLE FLOOR RTOL [--device cpu|cuda] [--grad-rtol R]
       (on a machine with torch and fla; the references run on the CPU unless --device cuda)

With --grad-rtol, the gradients too: torch's autograd through the same f64 reference gives
grad.<input> of L = sum(o) + sum(final_state) (or the case's own cotangents grad.o and
grad.final_state where it carries them, as `pararnn oracle --grad` takes them) for every input of
the call and initial_state, and each grad.<input> of the answer, the oracle and the floor is
reported as the outputs are, at tau = R * max(|ref|, RMS(ref)) (Metric::op_gradient's rtol:
f32 2e-4, f16 and bf16 1e-2). A gradient the answer lacks is printed "absent". gla's reference
adds initial_state into an f32 state (`new_zeros(..., dtype=torch.float32)`) before its first
step, so its own grad.initial_state is rounded to f32 on the way back (our oracle's was 9.1e-9
from it at |ref| 0.64 on a bf16 case; the other gradients 2e-15).

fla's naive references (flash-linear-attention 0.6.0), each called with the case's tensors:
  gla               fla.ops.gla.naive.naive_recurrent_gla(q, k, v, gk=g, initial_state, ...)
                    (its scale is K^-0.5, fixed)
  simple_gla        fla.ops.simple_gla.naive.naive_recurrent_simple_gla(q, k, v, g, scale, ...)
  delta_rule        fla.ops.delta_rule.naive.delta_rule_recurrence(q, k, v, beta, ...) in its
                    [B, H, T, ...] layout (its scale is K^-0.5, fixed)
  gated_delta_rule  fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule(q, k, v, beta,
                    g, scale, ...)
  dplr_delta_rule   fla.ops.generalized_delta_rule.dplr.naive.dplr_recurrence(q, k, v, alpha=a,
                    beta=b, gk, ...) in its [B, H, T, ...] layout (its scale is K^-0.5, fixed: a
                    case's other scale is passed as q * (scale * K^0.5), inside the autograd graph)
  rwkv7             the same dplr_recurrence, as fla's chunk_rwkv7 calls chunk_dplr_delta_rule:
                    q = r, gk = w, scale 1 (so q = r * K^0.5), alpha = a, beta = b
They compute in f32 (`.float()`, `.to(torch.float32)`); for the call, Tensor.float returns
.double() and Tensor.to maps float32 to float64, and the outputs are checked to be f64. A packed
case (cu_seqlens) runs each sequence alone from its own initial_state.
Refused before importing torch (exit 2, naming the argument): another op, qk l2-normalisation in
the kernel (no naive reference takes it), a scale other than K^-0.5 where the reference fixes it,
an f64 initial_state for gla (its reference holds the state in f32 before the first step).
Exit 0 when it ran (the numbers are the result, never a verdict), 2 on bad usage or a case it
cannot confirm, 3 without torch or fla.
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
# What the confirmations share (scripts/ops_confirm.py), loaded by path as well.
_spec = importlib.util.spec_from_file_location(
    "ops_confirm", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_confirm.py"))
confirm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(confirm)

# op -> (module, function, the case's inputs in its positional order, how it takes the scale
#        (True: an argument; False: fixed at K^-0.5, another refused; "q": fixed, another folded
#        into q), whether it wants the [B, H, T, ...] layout)
REFERENCES = {
    "gla": ("fla.ops.gla.naive", "naive_recurrent_gla", ("q", "k", "v", "g"), False, False),
    "simple_gla": ("fla.ops.simple_gla.naive", "naive_recurrent_simple_gla", ("q", "k", "v", "g"), True, False),
    "delta_rule": ("fla.ops.delta_rule.naive", "delta_rule_recurrence", ("q", "k", "v", "beta"), False, True),
    "gated_delta_rule": ("fla.ops.gated_delta_rule.naive", "naive_recurrent_gated_delta_rule",
                         ("q", "k", "v", "beta", "g"), True, False),
    "dplr_delta_rule": ("fla.ops.generalized_delta_rule.dplr.naive", "dplr_recurrence",
                        ("q", "k", "v", "a", "b", "gk"), "q", True),
    "rwkv7": ("fla.ops.generalized_delta_rule.dplr.naive", "dplr_recurrence",
              ("r", "k", "v", "a", "b", "w"), "q", True),
}


class Unsupported(Exception):
    """A case the naive references cannot confirm, named."""


def plan(metadata, headers):
    """The reference call a case asks for, without importing torch (tested without it)."""
    op = metadata.get("op")
    if op not in REFERENCES:
        raise Unsupported(f"metadata 'op': fla's naive references are confirmed for {', '.join(REFERENCES)} (got {op!r})")
    module, function, inputs, takes_scale, head_first = REFERENCES[op]
    for name in inputs:
        if name not in headers:
            raise Unsupported(f"tensor '{name}': required by {function} (absent)")
    if metadata.get("use_qk_l2norm_in_kernel", "False") in ("True", "true", "1"):
        raise Unsupported(f"metadata 'use_qk_l2norm_in_kernel': {function} takes no qk l2-normalisation (got True)")
    k_dim = headers[inputs[0]][1][-1]
    default = k_dim ** -0.5
    scale = metadata.get("scale", "None")
    scale = (1.0 if op == "rwkv7" else default) if scale in adapter.ABSENT else float(scale)
    if takes_scale is False and abs(scale - default) > 1e-12 * default:
        raise Unsupported(f"metadata 'scale': {function} fixes the scale at K^-0.5 = {default:.6g} (got {scale!r})")
    if op == "gla" and headers.get("initial_state", ("F32",))[0] == "F64":
        raise Unsupported("tensor 'initial_state': naive_recurrent_gla holds it in f32 before the first step (got F64)")
    return {"module": module, "function": function, "inputs": inputs, "scale": scale if takes_scale is True else None,
            "q_factor": scale / default if takes_scale == "q" else None, "head_first": head_first, "op": op}


def reference_in_f64(torch, call, case, device, gradients=False):
    """(o [B, T, H, V], final_state [N, H, K, V]) of fla's naive reference in f64; with
    `gradients`, also {"grad.<input>": ...} of L (the module's docstring) by torch's autograd."""
    import importlib
    function = getattr(importlib.import_module(call["module"]), call["function"])
    float_, to = torch.Tensor.float, torch.Tensor.to

    def to_f64(self, *args, **kwargs):
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if kwargs.get("dtype") is torch.float32:
            kwargs["dtype"] = torch.float64
        return to(self, *args, **kwargs)

    tensors = {n: case[n].double().to(device).requires_grad_(gradients) for n in call["inputs"]}
    h0 = case.get("initial_state")
    if h0 is not None:
        h0 = h0.double().to(device).requires_grad_(gradients)
    cu = case.get("cu_seqlens")
    bounds = [(0, tensors[call["inputs"][0]].shape[1])] if cu is None else list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    outputs, states = [], []
    torch.Tensor.float, torch.Tensor.to = lambda self: self.double(), to_f64
    try:
        for n, (begin, end) in enumerate(bounds):
            args = [tensors[name][:, begin:end] for name in call["inputs"]]
            if call["q_factor"] is not None:
                args[0] = args[0] * call["q_factor"]  # the reference's fixed K^-0.5 times this is the case's scale
            if call["head_first"]:
                args = [a.transpose(1, 2).contiguous() for a in args]
            kwargs = {"output_final_state": True}
            if h0 is not None:
                kwargs["initial_state"] = h0[n:n + 1] if cu is not None else h0
            if call["scale"] is not None:
                kwargs["scale"] = call["scale"]
            o, state = function(*args, **kwargs)
            if call["head_first"]:
                o = o.transpose(1, 2)
            outputs.append(o)
            states.append(state)
        o, state = torch.cat(outputs, 1), torch.cat(states, 0)
        if o.dtype != torch.float64 or state.dtype != torch.float64:
            raise RuntimeError(f"{call['function']} did not run in f64 (o {o.dtype}, final state {state.dtype})")
        if not gradients:
            return o.detach().cpu(), state.detach().cpu()
        leaves = dict(tensors, **({"initial_state": h0} if h0 is not None else {}))
        grads = confirm.gradients(torch, {"o": o, "final_state": state}, leaves, case, device)
    finally:
        torch.Tensor.float, torch.Tensor.to = float_, to
    return o.detach().cpu(), state.detach().cpu(), grads


def load():
    import torch
    import fla  # noqa: F401 (the library, not the adapter: this folder is not on sys.path)
    return torch


def main(argv):
    return confirm.run(argv, "ops-confirm-fla", __doc__, adapter, plan, (Unsupported,),
                       "torch and flash-linear-attention", load, reference_in_f64,
                       lambda call: f"{call['module']}.{call['function']}", ("o", "final_state"),
                       "fla's naive reference")


if __name__ == "__main__":
    # This folder (scripts/) holds no fla.py; the adapter is loaded by path above.
    sys.exit(main(sys.argv))
