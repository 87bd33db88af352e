#!/usr/bin/env python3
"""An ssd or selective_scan finding confirmed without our oracle (issue 56): mamba-ssm's own reference,
run in f64 on an op case's inputs, against mamba-ssm's answer, against `pararnn oracle`'s output
and against the same-dtype floor (`pararnn solve`). For each output (out, final_states) it prints
how far our oracle is from the library's reference, and for the answer and the floor each, the
largest error against that reference and how many values lie outside the case's tau measured
against it (rtol * max(|ref|, RMS(ref)), the rule of docs/ops/README.md).

Usage: scripts/ops-confirm-mamba.py CASE ANSWER ORACLE FLOOR RTOL [--device cpu|cuda] [--grad-rtol R]
       (on a machine with torch, einops and mamba-ssm's files; the reference runs on the CPU
       unless --device cuda; ORACLE and FLOOR may be paths that do not exist: then those lines
       say "absent")

With --grad-rtol, the gradients too: torch's autograd through the same f64 reference gives
grad.<input> of L = sum(out) (or the case's own cotangent grad.out) for every floating input the
case carries (x, dt, A, B, C, D, z, dt_bias, initial_states), reported as the outputs are at
tau = R * max(|ref|, RMS(ref)) (Metric::op_gradient's rtol: f32 2e-4, f16 and bf16 1e-2).

The reference: mamba_ssm.modules.ssd_minimal.ssd_minimal_discrete(X, A, B, C, block_len,
initial_states), Listing 1 of the Mamba-2 paper as the library ships it, which scans the
discretized SSM (X = x * dt, A_t = A * dt, B and C per head). Around it, in f64, the steps that
mamba_chunk_scan_combined and its own reference ssd_chunk_scan_combined_ref
(mamba_ssm/ops/triton/ssd_combined.py) apply: dt + dt_bias, softplus when dt_softplus (torch's
softplus, threshold 20, as the kernel's), each group's B and C for its n_heads / n_groups heads,
out = y + D * x, then out * silu(z). The length is padded to a multiple of block_len with x = 0
and dt = 0 (A_t = 0: the state is carried unchanged, so the outputs kept and the final state are
exact). A packed case (cu_seqlens) runs each sequence alone, from its own initial state.
mamba_ssm/__init__.py imports the CUDA extension; like the adapter, this imports the Triton and
module files without it (python/pararnn_judge/solvers/mamba.py, import_library).
selective_scan: mamba_ssm.ops.selective_scan_interface.selective_scan_ref(u, delta, A, B, C, D, z,
delta_bias, delta_softplus, return_last_state=True), the library's pure-torch reference of
selective_scan_fn, in f64 (its .float() calls return .double() for the call), -> out [B, D, L],
last_state [B, D, N]; gradients of L = sum(out) (selective_scan_fn does not differentiate its
last state). Its module imports the CUDA extension selective_scan_cuda at the top, which the
reference never calls: where the extension is not importable, a stand-in module of that name
with no attributes is put in sys.modules for the import (said on stdout), so any use of the
extension would fail loudly, never pass.
Refused before importing torch (exit 2, naming the argument): another op, a missing input,
bad usage. Exit 0 when it ran (the numbers are the result, never a verdict), 3 without
torch or mamba-ssm.
"""
import importlib.util
import os
import sys

# The mamba adapter (its safetensors reader and import_library), loaded by path under another name.
_spec = importlib.util.spec_from_file_location(
    "mamba_adapter", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "pararnn_judge",
                                  "solvers", "mamba.py"))
adapter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(adapter)
# What the confirmations share (scripts/ops_confirm.py), loaded by path as well.
_spec = importlib.util.spec_from_file_location(
    "ops_confirm", os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops_confirm.py"))
confirm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(confirm)

INPUTS = ("x", "dt", "A", "B", "C")
OPTIONAL = ("D", "z", "dt_bias", "initial_states", "cu_seqlens")
BLOCK_LEN = 64
SELECTIVE_INPUTS = ("u", "delta", "A", "B", "C")
SELECTIVE_OPTIONAL = ("D", "z", "delta_bias")


class Unsupported(Exception):
    """A case the reference cannot confirm, named."""


def plan(metadata, headers):
    """What the reference run needs of a case, without importing torch (tested without it)."""
    op = metadata.get("op")
    if op == "selective_scan":
        for name in SELECTIVE_INPUTS:
            if name not in headers:
                raise Unsupported(f"tensor '{name}': required by selective_scan_ref (absent)")
        return {"op": op, "softplus": metadata.get("delta_softplus", "False") in adapter.TRUE,
                "optional": tuple(n for n in SELECTIVE_OPTIONAL if n in headers)}
    if op != "ssd":
        raise Unsupported(f"metadata 'op': mamba-ssm's references confirm ssd and selective_scan (got {op!r})")
    for name in INPUTS:
        if name not in headers:
            raise Unsupported(f"tensor '{name}': required by ssd_minimal_discrete (absent)")
    heads, groups = headers["x"][1][2], headers["B"][1][2]
    if groups < 1 or heads % groups != 0:
        raise Unsupported(f"tensor 'B': its {groups} groups must divide the {heads} heads of x")
    return {"op": op, "softplus": metadata.get("dt_softplus", "False") in adapter.TRUE,
            "optional": tuple(n for n in OPTIONAL if n in headers), "heads_per_group": heads // groups}


def import_reference():
    adapter.import_library("mamba_ssm.ops.triton.ssd_combined")  # the package without its __init__.py
    import importlib
    return importlib.import_module("mamba_ssm.modules.ssd_minimal").ssd_minimal_discrete


def selective_scan_ref():
    """mamba-ssm's selective_scan_ref, its module imported without the CUDA extension if need be."""
    import importlib
    import types
    try:
        importlib.import_module("selective_scan_cuda")
    except ImportError:
        sys.modules["selective_scan_cuda"] = types.ModuleType("selective_scan_cuda")
        print("selective_scan_cuda (mamba-ssm's CUDA extension) is not importable: a stand-in without "
              "attributes is imported in its place; selective_scan_ref does not use it")
    adapter.import_library("mamba_ssm.ops.triton.ssd_combined")  # the package without its __init__.py
    return importlib.import_module("mamba_ssm.ops.selective_scan_interface").selective_scan_ref


def selective_scan_in_f64(torch, call, case, device, gradients):
    """(out [B, D, L], last_state [B, D, N]) of selective_scan_ref in f64 (+ gradients of sum(out))."""
    ref = selective_scan_ref()
    t = {n: case[n].double().to(device).requires_grad_(gradients) for n in SELECTIVE_INPUTS + call["optional"]}
    float_ = torch.Tensor.float
    torch.Tensor.float = lambda self: self.double()
    try:
        out, state = ref(*(t[n] for n in SELECTIVE_INPUTS), D=t.get("D"), z=t.get("z"),
                         delta_bias=t.get("delta_bias"), delta_softplus=call["softplus"], return_last_state=True)
    finally:
        torch.Tensor.float = float_
    if out.dtype != torch.float64 or state.dtype != torch.float64:
        raise RuntimeError(f"selective_scan_ref did not run in f64 (out {out.dtype}, last state {state.dtype})")
    if not gradients:
        return out.detach().cpu(), state.detach().cpu()
    return out.detach().cpu(), state.detach().cpu(), confirm.gradients(torch, {"out": out}, t, case, device)


def reference_in_f64(torch, call, case, device, gradients=False):
    """(out [B, T, H, P], final_states [N, H, P, S]) of the reference in f64; with `gradients`,
    also {"grad.<input>": ...} of L = sum(out) (or the case's grad.out) by torch's autograd."""
    if call["op"] == "selective_scan":
        return selective_scan_in_f64(torch, call, case, device, gradients)
    import torch.nn.functional as F
    ssd_minimal_discrete = import_reference()
    t = {n: case[n].double().to(device).requires_grad_(gradients)
         for n in INPUTS + call["optional"] if n != "cu_seqlens" and n in case}
    dt = t["dt"] + t["dt_bias"] if "dt_bias" in t else t["dt"]
    if call["softplus"]:
        dt = F.softplus(dt)
    X = t["x"] * dt[..., None]
    A = t["A"] * dt  # A per head, dt [B, T, H]
    B = t["B"].repeat_interleave(call["heads_per_group"], dim=2)
    C = t["C"].repeat_interleave(call["heads_per_group"], dim=2)
    cu = case.get("cu_seqlens")
    length = t["x"].shape[1]
    bounds = [(0, length)] if cu is None else list(zip(cu[:-1].tolist(), cu[1:].tolist()))
    h0 = t.get("initial_states")
    ys, states = [], []
    for n, (begin, end) in enumerate(bounds):
        pad = (-(end - begin)) % BLOCK_LEN
        parts = [a[:, begin:end] for a in (X, A, B, C)]
        parts = [torch.cat([a, a.new_zeros((a.shape[0], pad) + tuple(a.shape[2:]))], 1) for a in parts]
        initial = None
        if h0 is not None:
            initial = (h0[n:n + 1] if cu is not None else h0)[:, None]
        y, state = ssd_minimal_discrete(*parts, BLOCK_LEN, initial_states=initial)
        ys.append(y[:, :end - begin])
        states.append(state)
    y = torch.cat(ys, 1)
    if "D" in t:
        D = t["D"]
        y = y + t["x"] * (D[:, None] if D.dim() == 1 else D)
    if "z" in t:
        y = y * F.silu(t["z"])
    state = torch.cat(states, 0)
    if y.dtype != torch.float64 or state.dtype != torch.float64:
        raise RuntimeError(f"ssd_minimal_discrete did not run in f64 (out {y.dtype}, final state {state.dtype})")
    if not gradients:
        return y.detach().cpu(), state.detach().cpu()
    return y.detach().cpu(), state.detach().cpu(), confirm.gradients(torch, {"out": y}, t, case, device)


def load():
    import torch
    import einops  # noqa: F401 (ssd_minimal's)
    import_reference()
    return torch


def main(argv):
    return confirm.run(argv, "ops-confirm-mamba", __doc__, adapter, plan, (Unsupported,),
                       "torch, einops and mamba-ssm's files", load, reference_in_f64,
                       lambda call: ("mamba_ssm.ops.selective_scan_interface.selective_scan_ref"
                                     if call["op"] == "selective_scan" else
                                     f"mamba_ssm.modules.ssd_minimal.ssd_minimal_discrete (block_len {BLOCK_LEN})"),
                       lambda call: ("out", "last_state") if call["op"] == "selective_scan" else ("out", "final_states"),
                       "mamba-ssm's reference")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
