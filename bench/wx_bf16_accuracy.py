#!/usr/bin/env python3
"""Would keeping W_x x in bf16 hold the bf16 contract? A CPU study for the torch user's GRU step.

The bf16 GRU step today keeps the gate pre-activations W_x x + b in f32 (12 bytes per
token-channel read by every Newton step, the adjoint Jacobian and the VJP; 1.6 GB at S1).
pararnn-torch keeps them in bf16. This study answers, before any kernel changes, whether the
trajectory and the gradients stay inside the contract's bf16 bands (contracts/src/tolerance.cpp:
trajectory atol 1e-2; gradient_diag atol 2e-2, rtol 1e-2) when the pre-activations are rounded
to bf16 once after the f32 GEMM, the recurrence then running in f32 (what a converged Newton
solve computes) and the output rounded to bf16:

- the reference: the recurrence in f64 from the same bf16 x and parameters (the oracle's
  arithmetic: W_x x in f64);
- "f32": the pre-activations kept in f32 (today's kernels);
- "bf16": the pre-activations rounded to bf16 (the lever); the backward evaluates the gates at the
  rounded values and passes the gradient through the rounding unchanged.

The module is pararnn-torch's ParaGRU(d, d) in bf16 (its own initialisation), x = scale · N(0, 1)
rounded to bf16: the benchmark's inputs at scale 1, larger pre-activations at scale 4. Prints one
JSON object: max_abs per quantity and its ratio to the band (worst over the gradients: error /
(atol + rtol · max|reference|)); each row also goes to stderr as it completes.

Usage: PYTHONPATH=<pararnn-torch> bench/wx_bf16_accuracy.py [--scale 1 4] [--time 4096]
       [--grad-time 1024] [--batch 4] [--d 256]
"""
import argparse
import json
import sys

import torch

import pararnn  # pararnn-torch 0.17.4

TRAJECTORY_ATOL = 1e-2  # contracts/src/tolerance.cpp: bf16 trajectory
GRADIENT_ATOL, GRADIENT_RTOL = 2e-2, 1e-2  # bf16 gradient_diag


def module(d):
    torch.manual_seed(0)
    return pararnn.ParaGRU(d, d).to(torch.bfloat16)


def recurrence(a, wx, dtype, d):
    """H of the GRU-diag recurrence from h = 0, in dtype, a Python loop over t (differentiable)."""
    h = torch.zeros(wx.shape[0], d, dtype=dtype)
    out = []
    for t in range(wx.shape[1]):
        z = torch.sigmoid(a[0] * h + wx[:, t, :d])
        r = torch.sigmoid(a[1] * h + wx[:, t, d:2 * d])
        n = torch.tanh(a[2] * (h * r) + wx[:, t, 2 * d:])
        h = h + z * (n - h)
        out.append(h)
    return torch.stack(out, 1)


def run(cell, x, dtype, keep_bf16, grad):
    d = cell.hidden_size
    leaves = {"x": x.to(dtype), "W": cell.W_x.weight.detach().to(dtype), "b": cell.W_x.bias.detach().to(dtype)}
    for name in ("a_z", "a_r", "a_n"):  # the clamp of App. C.1 as the module applies it
        leaves[name] = getattr(cell, name).detach().to(dtype)
    leaves = {k: v.clone().requires_grad_(grad) for k, v in leaves.items()}
    cap = cell.max_recurrent_norm
    a = [leaves[n].clamp(-cap, cap) if cap is not None else leaves[n] for n in ("a_z", "a_r", "a_n")]
    wx = leaves["x"] @ leaves["W"].T + leaves["b"]
    if keep_bf16:
        wx = wx + (wx.detach().to(torch.bfloat16).to(dtype) - wx.detach())
    H = recurrence(a, wx, dtype, d)
    if not grad:
        return H, None
    H.sum().backward()
    return H, {k: v.grad for k, v in leaves.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, nargs="+", default=[1.0, 4.0])
    p.add_argument("--time", type=int, default=4096)
    p.add_argument("--grad-time", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--d", type=int, default=256)
    args = p.parse_args()
    cell = module(args.d)
    rows = []
    for scale in args.scale:
        torch.manual_seed(1)
        x = (scale * torch.randn(args.batch, args.time, args.d)).to(torch.bfloat16)
        ref, _ = run(cell, x, torch.float64, False, False)
        row = {"scale": scale, "time": args.time, "trajectory_atol": TRAJECTORY_ATOL}
        for keep in (False, True):
            H, _ = run(cell, x, torch.float32, keep, False)
            err = (H.to(torch.bfloat16).double() - ref).abs().max().item()
            row[f"trajectory_{'bf16' if keep else 'f32'}"] = {"max_abs": err, "over_band": err / TRAJECTORY_ATOL}
        xg = x[:, :args.grad_time]
        _, gref = run(cell, xg, torch.float64, False, True)
        for keep in (False, True):
            _, g = run(cell, xg, torch.float32, keep, True)
            per = {k: (g[k].double() - gref[k]).abs().max().item() for k in gref}
            worst = max(per[k] / (GRADIENT_ATOL + GRADIENT_RTOL * gref[k].abs().max().item()) for k in gref)
            row[f"gradients_{'bf16' if keep else 'f32'}"] = {"time": args.grad_time, "max_abs": per, "worst_over_band": worst}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)  # progress
    print(json.dumps({"study": "W_x x kept in bf16, GRU-diag bf16", "batch": args.batch, "d": args.d, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
