#!/usr/bin/env python3
"""Time the installed peer libraries (pararnn-torch, accelerated-scan, flashrnn) on a GPU.

One command:  python3 bench/peers/run_peers.py --out DIR
writes DIR/peers.json and prints a short table. Every measurement runs inside its own
try/except: a failing peer (or a failing shape) is recorded as {"error": ...} and the run goes on.
Steps that JIT-compile CUDA with nvcc (accelerated-scan's warp scan, flashrnn's CUDA backends)
and flashrnn's Triton autotune run in a child process under a timeout (--jit-timeout).

Only the peers' installed packages are called; nothing of theirs is copied here.
See bench/peers/README.md for the measurement list and how to install the wheels.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib
import importlib.metadata as _md
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

SCHEMA_VERSION = 1
PEER_DISTS = {
    "pararnn-torch": "pararnn-torch",
    "accelerated-scan": "accelerated-scan",
    "flashrnn": "flashrnn",
}

try:
    import torch
except Exception as exc:  # pragma: no cover - reported in the JSON
    torch = None
    _TORCH_ERROR = f"{type(exc).__name__}: {exc}"
else:
    _TORCH_ERROR = None


# --------------------------------------------------------------------------------------------
# helpers


def _err(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    tail = "".join(tb[-3:]).strip()
    return f"{type(exc).__name__}: {exc}"[:800] + ("\n" + tail[-1200:] if tail else "")


def _version(dist: str) -> str | None:
    try:
        return _md.version(dist)
    except Exception:
        return None


class Ctx:
    """Run-wide settings: device, shapes, timing counts, entries."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.warmup = args.warmup
        self.runs = args.runs
        self.small = args.small
        self.entries: list[dict] = []
        # S1: GRU-diag B 8, T 65536, d_h = d_in = 256 (small: a CPU-sized stand-in)
        if args.small:
            self.s1 = dict(B=2, T=256, d=16)
            self.slstm = dict(B=2, T=128, d=16)
            self.scan = dict(B=2, D=8, T=1024)
            self.decode_batches = [1, 4]
            self.check_window = 64
        else:
            self.s1 = dict(B=8, T=65536, d=256)
            self.slstm = dict(B=8, T=4096, d=256)
            self.scan = dict(B=8, D=256, T=65536)
            self.decode_batches = [1, 8, 32, 64, 128, 256]
            self.check_window = 2048
        if args.T is not None:
            self.s1["T"] = args.T

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def add(self, entry: dict) -> dict:
        base = {
            "id": None,
            "peer": None,
            "what": None,
            "shape": None,
            "dtype": None,
            "ms": None,
            "runs": 0,
            "notes": "",
            "check": None,
        }
        base.update(entry)
        self.entries.append(base)
        _print_row(base)
        return base


def time_fn(ctx: Ctx, fn, *, warmup: int | None = None, runs: int | None = None, inner: int = 1):
    """Median ms of ``fn`` (``inner`` calls per timed sample, divided out).

    CUDA: one pair of events around each sample, device synchronised before and after.
    CPU: perf_counter.
    """
    warmup = ctx.warmup if warmup is None else warmup
    runs = ctx.runs if runs is None else runs
    for _ in range(warmup):
        fn()
    ctx.sync()
    samples = []
    for _ in range(runs):
        if ctx.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(ctx.device)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            torch.cuda.synchronize(ctx.device)
            samples.append(start.elapsed_time(end) / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / inner)
    return {
        "ms": statistics.median(samples),
        "ms_min": min(samples),
        "ms_max": max(samples),
        "runs": runs,
    }


def _free(ctx: Ctx) -> None:
    import gc

    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()


def _maxabs(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def _call_filtered(fn, /, *args, _dropped=None, **kwargs):
    """Call ``fn`` with only the keyword arguments its signature accepts."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    keep = {k: v for k, v in kwargs.items() if k in params}
    if _dropped is not None:
        _dropped.extend(k for k in kwargs if k not in params)
    return fn(*args, **keep)


def _dtype_name(dt) -> str:
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64"}[dt]


def _print_row(e: dict) -> None:
    ms = e.get("ms")
    ms_s = f"{ms:10.3f}" if isinstance(ms, (int, float)) else "         -"
    err = e.get("error")
    chk = e.get("check")
    if isinstance(chk, dict):
        parts = []
        for k, v in chk.items():
            if isinstance(v, float):
                parts.append(f"{k}={v:.2e}")
            elif isinstance(v, (int, str, bool)) and len(str(v)) < 30:
                parts.append(f"{k}={v}")
        chk_s = " ".join(parts)[:70]
    else:
        chk_s = "" if chk is None else str(chk)[:70]
    tail = ("ERROR " + str(err).splitlines()[0][:90]) if err else chk_s
    print(f"{e.get('id', '?'):<28} {str(e.get('dtype') or ''):<5} {ms_s} ms  {tail}", flush=True)


def guarded(ctx: Ctx, ident: str, peer: str, what: str, shape, dtype, body):
    """Run ``body() -> dict`` (timing + check fields); on failure record the error."""
    entry = {"id": ident, "peer": peer, "what": what, "shape": shape, "dtype": dtype}
    t0 = time.time()
    try:
        entry.update(body())
    except BaseException as exc:  # noqa: BLE001 - one peer never kills the run
        if isinstance(exc, KeyboardInterrupt):
            raise
        entry["error"] = _err(exc)
    entry["wall_s"] = round(time.time() - t0, 3)
    _free(ctx)
    return ctx.add(entry)


# --------------------------------------------------------------------------------------------
# pararnn-torch


def _pararnn():
    import pararnn  # noqa: F401

    return pararnn


def _newton_config(pararnn, dropped: list, **kw):
    """NewtonConfig with the fields this version knows; unknown ones are listed in ``dropped``."""
    cls = pararnn.NewtonConfig
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None
    if names is None:
        return _call_filtered(cls, _dropped=dropped, **kw)
    keep = {k: v for k, v in kw.items() if k in names}
    dropped.extend(k for k in kw if k not in names)
    return cls(**keep)


def _bench_config(pararnn, dropped, **extra):
    # Fixed K = 3, no host-side residual check inside the timed call (the library's own
    # "benches" setting: residual_atol=None, residual_fail=None).
    kw = dict(max_iters=3, scan_backend="auto", residual_atol=None, residual_fail=None)
    kw.update(extra)
    return _newton_config(pararnn, dropped, **kw)


def _make_cell(pararnn, kind: str, d_in: int, d_h: int, device, dtype, seed: int = 0):
    torch.manual_seed(seed)
    cls = {"gru": pararnn.ParaGRU, "lstm": pararnn.ParaLSTM, "slstm": pararnn.ParaSLSTM}[kind]
    cell = _call_filtered(cls, input_size=d_in, hidden_size=d_h, device=device, dtype=torch.float32)
    cell = cell.to(device=device, dtype=dtype)
    return cell


def _make_x(B, T, d, device, dtype, seed=1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(B, T, d, generator=g).to(device=device, dtype=dtype)


def _resolved_backend(pararnn, cell, x, cfg) -> str | None:
    try:
        stats = pararnn.NewtonStats()
        with torch.no_grad():
            pararnn.newton_apply(cell, x[:, : min(64, x.shape[1])], cfg, stats=stats)
        return getattr(stats, "scan_backend", None)
    except Exception as exc:
        return f"? ({type(exc).__name__})"


def _sequential_check(ctx: Ctx, pararnn, cell, x, H, *, window: int | None = None) -> dict:
    """Newton H vs pararnn-torch's own sequential unroll (``sequential_apply``), in f32.

    Head window: t in [0, W) from the zero state. Tail window: t in [T-W, T) started from the
    Newton state at T-W-1 (checks the far end of the sequence without a full-length unroll).
    """
    W = min(window or ctx.check_window, x.shape[1])
    T = x.shape[1]
    ref_cell = cell
    if next(cell.parameters()).dtype != torch.float32:
        import copy

        ref_cell = copy.deepcopy(cell).float()
    xf = x.detach().float()
    Hf = H.detach().float()
    out = {"oracle": "pararnn.sequential_apply (f32)", "window": W}
    with torch.no_grad():
        ref_head = pararnn.sequential_apply(ref_cell, xf[:, :W])
        out["max_abs_head"] = _maxabs(ref_head, Hf[:, :W])
        if T > W:
            h0 = Hf[:, T - W - 1].contiguous()
            ref_tail = pararnn.sequential_apply(ref_cell, xf[:, T - W :], h0)
            out["max_abs_tail"] = _maxabs(ref_tail, Hf[:, T - W :])
    out["max_abs_diff"] = max(v for k, v in out.items() if k.startswith("max_abs_") and isinstance(v, float))
    out["finite"] = bool(torch.isfinite(Hf).all())
    return out


def _residual(pararnn, cell, x, cfg_default_kw: dict) -> dict:
    """Library-reported residual max|F(H)| after its default K through NewtonStats."""
    dropped: list = []
    cfg = _newton_config(pararnn, dropped, residual_fail=None, **cfg_default_kw)
    stats = pararnn.NewtonStats()
    with torch.no_grad():
        pararnn.newton_apply(cell, x, cfg, stats=stats)
    return {
        "max_residual": float(getattr(stats, "max_residual", float("nan"))),
        "iters": int(getattr(stats, "iters", -1)),
        "scan_backend": getattr(stats, "scan_backend", None),
        "picard_iters": int(getattr(stats, "picard_iters", 0) or 0),
    }


def bench_pararnn_forward(ctx: Ctx, pararnn, kind: str, ident_base: str, dims: dict, dtype, *, solve=True):
    """Forward: gates-precomputed solve (fused_newton on W_x(x)) and end to end (newton_apply)."""
    B, T, d = dims["B"], dims["T"], dims["d"]
    dn = _dtype_name(dtype)
    shape = {"B": B, "T": T, "d_in": d, "d_h": d}
    peer = "pararnn-torch"
    state = {}

    def setup():
        if "cell" not in state:
            state["cell"] = _make_cell(pararnn, kind, d, d, ctx.device, dtype)
            state["x"] = _make_x(B, T, d, ctx.device, dtype)
        return state["cell"], state["x"]

    # end to end: W_x GEMM + fused Newton K=3 (newton_apply, no grad)
    def e2e():
        cell, x = setup()
        dropped: list = []
        cfg = _bench_config(pararnn, dropped)
        backend = _resolved_backend(pararnn, cell, x, cfg)

        def fn():
            with torch.no_grad():
                return pararnn.newton_apply(cell, x, cfg)

        t = time_fn(ctx, fn)
        with torch.no_grad():
            H = fn()
        ctx.sync()
        state["H"] = H
        check = _sequential_check(ctx, pararnn, cell, x, H)
        try:
            check.update({"library_" + k: v for k, v in _residual(pararnn, cell, x, {}).items()})
        except Exception as exc:
            check["library_residual_error"] = _err(exc)
        notes = (
            f"newton_apply(cell, x, NewtonConfig(max_iters=3, scan_backend='auto', residual_atol=None, "
            f"residual_fail=None)) under no_grad; resolved backend {backend}; includes the W_x GEMM"
        )
        if dropped:
            notes += f"; config fields unknown to this version dropped: {dropped}"
        return {**t, "notes": notes, "check": check, "backend": backend}

    guarded(ctx, f"{ident_base}.e2e", peer, f"{kind} forward end to end (W_x GEMM + Newton K=3)", shape, dn, e2e)

    # library default config: also counts its own post-solve residual pass (residual_fail=1.0)
    def e2e_default():
        cell, x = setup()

        def fn():
            with torch.no_grad():
                return pararnn.newton_apply(cell, x)

        t = time_fn(ctx, fn)
        return {
            **t,
            "notes": "newton_apply(cell, x) with the default NewtonConfig(); on this path the default "
            "residual_fail=1.0 adds one residual evaluation (cell.step over all T) and a host sync",
            "check": "see the .e2e entry",
        }

    guarded(ctx, f"{ident_base}.e2e_default", peer, f"{kind} forward, library default config", shape, dn, e2e_default)

    if solve:

        def gates_precomputed():
            cell, x = setup()
            from pararnn.kernels.fused_newton import fused_newton

            with torch.no_grad():
                wx = cell.W_x(x)
            dropped: list = []

            def fn():
                with torch.no_grad():
                    return _call_filtered(fused_newton, cell, wx, _dropped=dropped, max_iters=3, omega=1.0, h0=None)

            t = time_fn(ctx, fn)
            with torch.no_grad():
                Hs = fn()
            ctx.sync()
            check = {}
            if "H" in state:
                check["max_abs_vs_e2e"] = _maxabs(Hs, state["H"])
            check.update(_sequential_check(ctx, pararnn, cell, x, Hs))
            notes = (
                "pararnn.kernels.fused_newton.fused_newton(cell, wx=W_x(x), max_iters=3, omega=1.0, h0=None): "
                "the Triton fused Newton solve only, W_x(x) precomputed outside the timing"
            )
            if dropped:
                notes += f"; kwargs unknown to this version dropped: {dropped}"
            return {**t, "notes": notes, "check": check}

        guarded(ctx, f"{ident_base}.solve", peer, f"{kind} Newton K=3 solve, gates precomputed", shape, dn, gates_precomputed)
    state.clear()


def bench_pararnn_backward(ctx: Ctx, pararnn, ident: str, dims: dict, dtype, kind: str = "gru"):
    B, T, d = dims["B"], dims["T"], dims["d"]
    dn = _dtype_name(dtype)
    shape = {"B": B, "T": T, "d_in": d, "d_h": d}

    def body():
        cell = _make_cell(pararnn, kind, d, d, ctx.device, dtype)
        x = _make_x(B, T, d, ctx.device, dtype).requires_grad_(True)
        dropped: list = []
        cfg = _bench_config(pararnn, dropped)

        def fwd():
            return pararnn.newton_apply(cell, x, cfg)

        def fwdbwd():
            H = fwd()
            H.sum().backward()

        t_fb = time_fn(ctx, fwdbwd)
        # torch's peak of allocated bytes over one training step, above what was live before it
        peak = None
        if str(ctx.device).startswith("cuda"):
            torch.cuda.synchronize()
            live = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            fwdbwd()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - live
        t_f = time_fn(ctx, lambda: fwd())
        # backward alone: one graph, backward replayed (retain_graph); grads accumulate (harmless)
        H = fwd()
        h_bytes = H.numel() * H.element_size()
        loss = H.sum()
        t_b = time_fn(ctx, lambda: loss.backward(retain_graph=True))
        del H, loss
        # check: gradients vs autograd through the sequential unroll on a prefix
        Tc = min(T, 512 if not ctx.small else T)
        xs = x.detach()[:, :Tc].float().clone().requires_grad_(True)
        import copy

        c32 = copy.deepcopy(cell).float()
        for p in c32.parameters():
            p.grad = None
        Hn = pararnn.newton_apply(c32, xs, _bench_config(pararnn, []))
        gn = torch.autograd.grad(Hn.sum(), [xs, *c32.parameters()])
        xs2 = xs.detach().clone().requires_grad_(True)
        Hq = pararnn.sequential_apply(c32, xs2)
        gq = torch.autograd.grad(Hq.sum(), [xs2, *c32.parameters()])
        rel = [float((a - b).abs().max() / (b.abs().max() + 1e-30)) for a, b in zip(gn, gq)]
        check = {
            "oracle": "autograd through pararnn.sequential_apply, f32 copy of the cell",
            "window": Tc,
            "max_rel_grad_x": rel[0],
            "max_rel_grad_params": max(rel[1:]) if len(rel) > 1 else None,
        }
        notes = (
            "loss = H.sum(); H = newton_apply(cell, x, K=3 bench config) with grad (eq. 2.6 reverse scan); "
            "x and all parameters require grad; ms = forward+backward; ms_fwd = forward with graph; "
            "ms_bwd = loss.backward(retain_graph=True) replayed on one graph"
        )
        return {
            **t_fb,
            "ms_fwd": t_f["ms"],
            "ms_bwd": t_b["ms"],
            "step_peak_bytes": peak,
            "x_plus_H_bytes": x.numel() * x.element_size() + h_bytes,
            "notes": notes,
            "check": check,
        }

    what = {"gru": "GRU-diag", "lstm": "LSTM (CIFG, peepholes)"}.get(kind, kind)
    guarded(ctx, ident, "pararnn-torch", f"{what} forward+backward (loss = H.sum())", shape, dn, body)


def bench_pararnn_slstm(ctx: Ctx, pararnn, ident: str, dims: dict, dtype):
    B, T, d = dims["B"], dims["T"], dims["d"]
    dn = _dtype_name(dtype)
    shape = {"B": B, "T": T, "d_in": d, "d_h": d}

    def body():
        cell = _make_cell(pararnn, "slstm", d, d, ctx.device, dtype)
        x = _make_x(B, T, d, ctx.device, dtype)
        dropped: list = []
        # library defaults (auto Picard P from T, picard_adapt) except the divergence raise
        cfg = _newton_config(pararnn, dropped, residual_fail=None)

        def fn():
            with torch.no_grad():
                return pararnn.newton_apply(cell, x, cfg)

        t = time_fn(ctx, fn)
        stats = pararnn.NewtonStats()
        with torch.no_grad():
            H = pararnn.newton_apply(cell, x, cfg, stats=stats)
        ctx.sync()
        check = {
            "library_max_residual": float(getattr(stats, "max_residual", float("nan"))),
            "library_iters": int(getattr(stats, "iters", -1)),
            "library_picard_iters": int(getattr(stats, "picard_iters", 0) or 0),
            "library_scan_backend": getattr(stats, "scan_backend", None),
        }
        check.update(_sequential_check(ctx, pararnn, cell, x, H, window=T))
        # also the fixed-K timing without Picard retry (picard_adapt off)
        extra = {}
        try:
            cfg2 = _newton_config(pararnn, [], residual_fail=None, residual_atol=None, picard_adapt=False)

            def fn2():
                with torch.no_grad():
                    return pararnn.newton_apply(cell, x, cfg2)

            extra["ms_no_picard_adapt"] = time_fn(ctx, fn2)["ms"]
        except Exception as exc:
            extra["ms_no_picard_adapt_error"] = _err(exc)
        notes = (
            "ParaSLSTM(mix='diag'); newton_apply(cell, x, NewtonConfig(residual_fail=None)) under no_grad: "
            "library defaults otherwise (K=3, auto Picard warm start P from T, picard_adapt retry); "
            "check.library_max_residual is its own final max|F|"
        )
        if dropped:
            notes += f"; config fields unknown to this version dropped: {dropped}"
        return {**t, **extra, "notes": notes, "check": check}

    guarded(ctx, ident, "pararnn-torch", "sLSTM-diag forward (Newton + Picard init)", shape, dn, body)


def bench_pararnn_decode(ctx: Ctx, pararnn, dtype):
    d = ctx.s1["d"]
    dn = _dtype_name(dtype)
    for B in ctx.decode_batches:
        shape = {"B": B, "d_in": d, "d_h": d}

        def body(B=B):
            cell = _make_cell(pararnn, "gru", d, d, ctx.device, dtype)
            x = _make_x(B, 1, d, ctx.device, dtype)[:, 0].contiguous()
            h = (torch.randn(B, d) * 0.5).to(ctx.device, dtype)
            with torch.no_grad():
                wx = pararnn.decode_wx(cell, x)
            out = torch.empty_like(h)
            triton = bool(pararnn.can_decode_step(cell, wx))
            inner = 100

            def step_only():
                with torch.no_grad():
                    pararnn.decode_step(cell, h, wx=wx, out=out)

            def step_with_wx():
                with torch.no_grad():
                    w = pararnn.decode_wx(cell, x)
                    pararnn.decode_step(cell, h, wx=w, out=out)

            t = time_fn(ctx, step_only, inner=inner)
            t2 = time_fn(ctx, step_with_wx, inner=inner)
            graph = {}
            if ctx.cuda:
                try:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(3):
                            step_only()
                    torch.cuda.current_stream().wait_stream(side)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        for _ in range(inner):
                            step_only()
                    graph["ms_cuda_graph"] = time_fn(ctx, g.replay)["ms"] / inner
                except Exception as exc:
                    graph["ms_cuda_graph_error"] = _err(exc)[:400]
            with torch.no_grad():
                y = pararnn.decode_step(cell, h, wx=wx)
                if dtype == torch.float32:
                    ref = cell.step(h, wx=wx)
                else:
                    import copy

                    ref = copy.deepcopy(cell).float().step(h.float(), wx=wx.float())
            check = {"oracle": "cell.step (eager torch)", "max_abs_diff": _maxabs(y, ref), "triton_kernel": triton}
            return {
                **t,
                **graph,
                "ms_with_wx_gemm": t2["ms"],
                "notes": f"pararnn.decode_step(cell, h, wx=W_x(x), out=) one GRU-diag step; mean of {inner} "
                "back-to-back calls per sample (host/launch-bound); ms_cuda_graph: the same "
                f"{inner} steps captured in one CUDA graph, per step; ms_with_wx_gemm adds decode_wx",
                "check": check,
            }

        guarded(ctx, f"P16.decode.B{B}", "pararnn-torch", "GRU-diag single decode step", shape, dn, body)


def maybe_dump_case(ctx: Ctx, pararnn, outdir: str) -> None:
    """Dump S1 as a case (docs/pararnn-torch-cases.md): state_dict + x + metadata."""
    B, T, d = ctx.s1["B"], ctx.s1["T"], ctx.s1["d"]
    if ctx.args.dump_T:
        T = ctx.args.dump_T

    def body():
        from safetensors.torch import save_file

        os.makedirs(outdir, exist_ok=True)
        cell = _make_cell(pararnn, "gru", d, d, ctx.device, torch.float32)
        x = _make_x(B, T, d, ctx.device, torch.float32)
        meta = {"cell": "gru"}
        for key in ("mix", "n_heads", "max_recurrent_norm"):
            if hasattr(cell, key):
                meta[key] = str(getattr(cell, key))
        tensors = {k: v.detach().contiguous().cpu() for k, v in cell.state_dict().items()}
        tensors["x"] = x.detach().contiguous().cpu()
        path = os.path.join(outdir, f"s1_gru_B{B}_T{T}_d{d}_f32.safetensors")
        save_file(tensors, path, metadata=meta)
        # pararnn-torch's own trajectory for `pararnn compare --trajectory`
        with torch.no_grad():
            H = pararnn.newton_apply(cell, x, _bench_config(pararnn, []))
        tpath = os.path.join(outdir, f"s1_gru_B{B}_T{T}_d{d}_f32.H.safetensors")
        save_file({"H": H.detach().contiguous().cpu()}, tpath, metadata={"producer": f"pararnn-torch {_version('pararnn-torch')}"})
        return {
            "notes": f"case {path}; trajectory {tpath}; metadata {meta}; cell built as ParaGRU(d, d) "
            "(mix='diag', default cap 0.5), seed 0; x = randn seed 1",
            "check": {"tensors": sorted(tensors)},
        }

    guarded(ctx, "case.dump", "pararnn-torch", "S1 GRU case dump (safetensors)", {"B": B, "T": T, "d": d}, "f32", body)


def run_pararnn(ctx: Ctx) -> None:
    try:
        pararnn = _pararnn()
    except Exception as exc:
        ctx.add({"id": "pararnn-torch.import", "peer": "pararnn-torch", "what": "import", "error": _err(exc)})
        return
    s1 = ctx.s1
    sel = ctx.args.only
    want = lambda key: not sel or key in sel  # noqa: E731
    if want("P1"):
        bench_pararnn_forward(ctx, pararnn, "gru", "P1.gru", s1, torch.float32)
    if want("P9"):
        bench_pararnn_forward(ctx, pararnn, "gru", "P9.gru", s1, torch.bfloat16)
    if want("P3"):
        bench_pararnn_backward(ctx, pararnn, "P3.gru.fwdbwd.f32", s1, torch.float32)
        bench_pararnn_backward(ctx, pararnn, "P3.gru.fwdbwd.bf16", s1, torch.bfloat16)
    if want("T4"):
        bench_pararnn_backward(ctx, pararnn, "T4.lstm.fwdbwd.f32", s1, torch.float32, kind="lstm")
        bench_pararnn_backward(ctx, pararnn, "T4.lstm.fwdbwd.bf16", s1, torch.bfloat16, kind="lstm")
    if want("P7"):
        bench_pararnn_forward(ctx, pararnn, "lstm", "P7.lstm", s1, torch.float32)
    if want("P8"):
        bench_pararnn_slstm(ctx, pararnn, "P8.slstm.f32", ctx.slstm, torch.float32)
        bench_pararnn_slstm(ctx, pararnn, "P8.slstm.bf16", ctx.slstm, torch.bfloat16)
    if want("P16"):
        bench_pararnn_decode(ctx, pararnn, torch.float32)
    if ctx.args.dump_case:
        maybe_dump_case(ctx, pararnn, ctx.args.dump_case)


# --------------------------------------------------------------------------------------------
# accelerated-scan


def _scan_reference_check(ctx: Ctx, gates, tokens, out, n_chains: int = 4) -> dict:
    """Torch loop x_t = a_t x_{t-1} + b_t in f64 on the CPU, over a few chains of the full T."""
    B, D, T = gates.shape
    idx = [(0, 0), (B - 1, D - 1), (B // 2, D // 2), (0, D - 1)][:n_chains]
    worst = 0.0
    worst_rel = 0.0
    for b, c in idx:
        a = gates[b, c].double().cpu()
        x = tokens[b, c].double().cpu()
        y = out[b, c].double().cpu()
        al = a.tolist()
        xl = x.tolist()
        hv = 0.0
        rl = [0.0] * T
        for t in range(T):
            hv = al[t] * hv + xl[t]
            rl[t] = hv
        ref = torch.tensor(rl, dtype=torch.float64)
        diff = float((ref - y).abs().max())
        worst = max(worst, diff)
        worst_rel = max(worst_rel, diff / (float(ref.abs().max()) + 1e-30))
    return {"oracle": "python f64 loop x_t = a_t x_{t-1} + b_t", "chains": len(idx), "max_abs_diff": worst, "max_rel_diff": worst_rel}


def _scan_inputs(ctx: Ctx, dtype=None):
    dtype = dtype or torch.float32
    B, D, T = ctx.scan["B"], ctx.scan["D"], ctx.scan["T"]
    g = torch.Generator(device="cpu").manual_seed(2)
    # gates in (0.5, 1): a decaying but long-memory linear recurrence
    gates = (0.5 + 0.5 * torch.rand(B, D, T, generator=g)).to(ctx.device, dtype).contiguous()
    tokens = torch.randn(B, D, T, generator=g).to(ctx.device, dtype).contiguous()
    return gates, tokens


def bench_accel_scan(ctx: Ctx, module_name: str, ident: str) -> None:
    B, D, T = ctx.scan["B"], ctx.scan["D"], ctx.scan["T"]
    shape = {"B": B, "D": D, "T": T, "chains": B * D, "layout": "(B, D, T)"}

    def body():
        mod = importlib.import_module(module_name)
        scan = getattr(mod, "scan")
        gates, tokens = _scan_inputs(ctx)

        def fn():
            with torch.no_grad():
                return scan(gates, tokens)

        t = time_fn(ctx, fn)
        out = fn()
        ctx.sync()
        n = B * D * T
        tbs = 12.0 * n / (t["ms"] * 1e-3) / 1e12
        check = _scan_reference_check(ctx, gates, tokens, out)
        check["finite"] = bool(torch.isfinite(out).all())
        return {
            **t,
            "tb_per_s": tbs,
            "notes": f"{module_name}.scan(gates, tokens), f32, gates U(0.5,1), tokens N(0,1); "
            "TB/s counts 12 bytes per element (gates + tokens read, output written)",
            "check": check,
        }

    guarded(ctx, ident, "accelerated-scan", "diagonal linear scan forward", shape, "f32", body)


def run_accel(ctx: Ctx, include_jit: bool) -> None:
    try:
        importlib.import_module("accelerated_scan")
    except Exception as exc:
        ctx.add({"id": "accelerated-scan.import", "peer": "accelerated-scan", "what": "import", "error": _err(exc)})
        return
    bench_accel_scan(ctx, "accelerated_scan.scalar", "P5.scan.triton")
    if include_jit and "accel_warp" in ctx.args.children:
        run_child(ctx, "P5.scan.warp", "accelerated-scan", "warp scan (CUDA JIT via torch load_inline)", "accel_warp")


# --------------------------------------------------------------------------------------------
# flashrnn

# (gates on the input Wx, gates on the recurrent R, bias gates): flashrnn's registry
# gates_states = (num_gates_r, num_gates_w, num_gates_i, num_gates_t, num_states)
_FLASH_GATES_FALLBACK = {"lstm": (4, 4, 4), "gru": (3, 3, 4), "slstm": (4, 4, 4)}


def _flash_gates(function: str) -> tuple[int, int, int]:
    try:
        reg = importlib.import_module("flashrnn.flashrnn.flashrnn").rnn_function_registry
        g_r, g_w, _g_i, g_t, _s = reg[function]["gates_states"]
        return g_w, g_r, g_t
    except Exception:
        return _FLASH_GATES_FALLBACK[function]


def bench_flashrnn(ctx: Ctx, function: str, backend: str, dtype, num_heads: int, T: int | None = None) -> None:
    B, d = ctx.s1["B"], ctx.s1["d"]
    T = T or ctx.s1["T"]
    DH = d // num_heads
    dn = _dtype_name(dtype)
    dname = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    shape = {"B": B, "T": T, "d_h": d, "num_heads": num_heads, "head_dim": DH}
    ident = f"F.{function}.{backend}.{dn}.NH{num_heads}"

    def body():
        from flashrnn import flashrnn

        g_w, g_r, g_t = _flash_gates(function)
        g = torch.Generator(device="cpu").manual_seed(3)
        Wx = torch.randn(B, T, g_w, num_heads, DH, generator=g).to(ctx.device, dtype)
        R = (torch.randn(g_r, num_heads, DH, DH, generator=g) / math.sqrt(DH)).to(ctx.device, dtype)
        b = (0.1 * torch.randn(g_t, num_heads, DH, generator=g)).to(ctx.device, dtype)

        def fn():
            with torch.no_grad():
                return flashrnn(Wx, R, b, function=function, backend=backend, dtype=dname)

        t_first = time.time()
        res = fn()
        ctx.sync()
        first_s = time.time() - t_first
        t = time_fn(ctx, fn)
        h = res[0]
        check = {"first_call_s": round(first_s, 3), "out_shape": list(h.shape), "finite": bool(torch.isfinite(h.float()).all())}
        # oracle: flashrnn's own pure-torch 'vanilla' backend on a prefix
        try:
            Tc = min(T, 256)
            with torch.no_grad():
                ref = flashrnn(Wx[:, :Tc].float(), R.float(), b.float(), function=function, backend="vanilla", dtype="float32")[0]
            hc = h[:, :, :Tc] if h.shape[2] == T else None
            if hc is not None and ref.shape == hc.shape:
                check["max_abs_vs_vanilla_prefix"] = _maxabs(hc, ref)
                check["vanilla_window"] = Tc
            else:
                check["vanilla_shape"] = list(ref.shape)
        except Exception as exc:
            check["vanilla_error"] = _err(exc)[:300]
        return {
            **t,
            "notes": f"flashrnn(Wx (B,T,{g_w},NH,D), R ({g_r},NH,D,D), b ({g_t},NH,D), function={function!r}, backend={backend!r}, "
            f"dtype={dname!r}) under no_grad: a sequential dense-per-head RNN (not diagonal, not Newton); "
            "Wx is the precomputed input projection; first call includes compile/autotune",
            "check": check,
        }

    guarded(ctx, ident, "flashrnn", f"{function} forward ({backend})", shape, dn, body)


def run_flashrnn_child(ctx: Ctx, which: str) -> None:
    """Inside the child: the flashrnn configurations for one backend group."""
    try:
        importlib.import_module("flashrnn")
    except Exception as exc:
        ctx.add({"id": "flashrnn.import", "peer": "flashrnn", "what": "import", "error": _err(exc)})
        return
    heads = [nh for nh in (4, 1) if ctx.s1["d"] // nh >= 16]
    if which == "flash_triton":
        for dtype in (torch.float32, torch.bfloat16):
            for nh in heads:
                bench_flashrnn(ctx, "lstm", "triton_fused", dtype, nh)
        for dtype in (torch.float32, torch.bfloat16):
            bench_flashrnn(ctx, "slstm", "triton_fused", dtype, heads[0], T=ctx.slstm["T"])
    elif which == "flash_cuda":
        for function, backend in (("gru", "cuda"), ("lstm", "cuda_fused")):
            for dtype in (torch.bfloat16, torch.float32):
                bench_flashrnn(ctx, function, backend, dtype, heads[0])


# --------------------------------------------------------------------------------------------
# children (steps under a timeout)


def run_child(ctx: Ctx, ident: str, peer: str, what: str, which: str) -> None:
    out_json = os.path.join(ctx.args.out, f".child_{which}.json")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--out",
        ctx.args.out,
        "--device",
        ctx.args.device,
        "--runs",
        str(ctx.runs),
        "--warmup",
        str(ctx.warmup),
        "--child",
        which,
        "--child-json",
        out_json,
    ]
    if ctx.small:
        cmd.append("--small")
    if ctx.args.T is not None:
        cmd += ["--T", str(ctx.args.T)]
    if ctx.args.verbose_logs:
        cmd.append("--verbose-logs")
    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join("/tmp", "peers_torch_extensions"))
    env["PYTHONUNBUFFERED"] = "1"
    t0 = time.time()
    print(f"-- child {which} (timeout {ctx.args.jit_timeout} s)", flush=True)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=ctx.args.jit_timeout)
        rc, so, se = proc.returncode, proc.stdout, proc.stderr
        timed_out = False
    except subprocess.TimeoutExpired as exc:
        rc, timed_out = None, True
        so = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        se = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = round(time.time() - t0, 1)
    got = []
    if os.path.exists(out_json):
        try:
            with open(out_json) as f:
                got = json.load(f)
        except Exception:
            got = []
        os.remove(out_json)
    if any(e.get("error") for e in got):
        for e in got:
            if e.get("error"):
                build = [ln.strip()[:300] for ln in ((so or "") + "\n" + (se or "")).splitlines() if " error: " in ln]
                if build:
                    e["build_errors"] = build[:12]
                e["child_stdout_tail"] = (so or "")[-4000:]
                e["child_stderr_tail"] = (se or "")[-4000:]
                break
    for e in got:
        e.setdefault("notes", "")
        e["notes"] = (e["notes"] + f"; ran in child process '{which}'").lstrip("; ")
        ctx.entries.append(e)
        _print_row(e)
    if timed_out or rc != 0 or not got:
        reason = "timed out" if timed_out else f"exit code {rc}"
        ctx.add(
            {
                "id": ident,
                "peer": peer,
                "what": what,
                "error": f"child '{which}' {reason} after {wall} s",
                "stdout_tail": (so or "")[-1500:],
                "stderr_tail": (se or "")[-3000:],
                "wall_s": wall,
            }
        )


def child_main(ctx: Ctx) -> None:
    which = ctx.args.child
    if which == "accel_warp":
        bench_accel_scan(ctx, "accelerated_scan.warp", "P5.scan.warp")
    elif which in ("flash_triton", "flash_cuda"):
        run_flashrnn_child(ctx, which)
    else:
        raise SystemExit(f"unknown child {which!r}")
    with open(ctx.args.child_json, "w") as f:
        json.dump(ctx.entries, f, default=str)


# --------------------------------------------------------------------------------------------
# main


def environment(ctx: Ctx | None) -> dict:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": getattr(torch, "__version__", None) if torch else None,
        "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None) if torch else None,
        "triton": _version("triton"),
        "peers": {name: _version(dist) for name, dist in PEER_DISTS.items()},
    }
    if torch is not None and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        p = torch.cuda.get_device_properties(0)
        env["gpu_sm_count"] = p.multi_processor_count
        env["gpu_mem_gib"] = round(p.total_memory / 2**30, 1)
        env["gpu_capability"] = f"{p.major}.{p.minor}"
    else:
        env["gpu"] = None
    try:
        env["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[-1]
    except Exception as exc:
        env["nvcc"] = f"unavailable ({type(exc).__name__})"
    return env


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder; peers.json is written there")
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--small", action="store_true", help="tiny shapes (API smoke, e.g. on a CPU)")
    p.add_argument("--dry-run", action="store_true", help="same as --small with --runs 2 --warmup 1")
    p.add_argument("--runs", type=int, default=10, help="timed runs per measurement (median reported)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--T", type=int, default=None, help="override S1's T (pararnn-torch and flashrnn)")
    p.add_argument(
        "--only",
        nargs="*",
        default=None,
        help="restrict to ids: P1 P9 P3 T4 P7 P8 P16 P5 F (flashrnn)",
    )
    p.add_argument("--no-jit", action="store_true", help="skip the child steps that JIT-compile CUDA (warp scan, flashrnn cuda)")
    p.add_argument("--no-flashrnn", action="store_true")
    p.add_argument(
        "--children",
        nargs="*",
        default=["accel_warp", "flash_triton", "flash_cuda"],
        help="child steps to run (default all): accel_warp flash_triton flash_cuda",
    )
    p.add_argument("--jit-timeout", type=int, default=420, help="seconds for each child step")
    p.add_argument("--dump-case", default=None, metavar="DIR", help="also dump the S1 GRU case as safetensors")
    p.add_argument("--dump-T", type=int, default=None, help="T of the dumped case (default S1's T)")
    p.add_argument("--verbose-logs", action="store_true", help="keep the peers' WARNING logs")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.dry_run:
        a.small = True
        a.runs = min(a.runs, 2)
        a.warmup = min(a.warmup, 1)
    if a.device is None:
        a.device = "cuda" if (torch is not None and torch.cuda.is_available()) else "cpu"
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if torch is None:
        doc = {"schema_version": SCHEMA_VERSION, "error": f"torch not importable: {_TORCH_ERROR}", "entries": []}
        with open(os.path.join(args.out, "peers.json"), "w") as f:
            json.dump(doc, f, indent=1)
        print(doc["error"])
        return 1
    if not args.verbose_logs:
        import logging

        # pararnn-torch logs newton_residual_high per call on bf16; the residual is in the JSON
        logging.getLogger("pararnn").setLevel(logging.ERROR)
    ctx = Ctx(args)
    if args.child:
        child_main(ctx)
        return 0
    started = _dt.datetime.now(_dt.timezone.utc)
    env = environment(ctx)
    print(f"peers on {env.get('gpu') or args.device}: torch {env['torch']} triton {env['triton']} {env['peers']}", flush=True)
    print(f"{'id':<28} {'dtype':<5} {'median':>10}     check", flush=True)
    sel = args.only
    want = lambda key: not sel or key in sel  # noqa: E731
    if any(want(k) for k in ("P1", "P9", "P3", "P7", "P8", "P16")) or args.dump_case:
        run_pararnn(ctx)
    if want("P5"):
        run_accel(ctx, include_jit=not args.no_jit and ctx.cuda)
    if want("F") and not args.no_flashrnn:
        if ctx.cuda:
            if "flash_triton" in args.children:
                run_child(ctx, "F.triton", "flashrnn", "flashrnn triton_fused forward", "flash_triton")
            if not args.no_jit and "flash_cuda" in args.children:
                run_child(ctx, "F.cuda", "flashrnn", "flashrnn CUDA (nvcc JIT) forward", "flash_cuda")
        else:
            ctx.add({"id": "F", "peer": "flashrnn", "what": "forward", "error": "flashrnn's fused backends need CUDA"})
    doc = {
        "schema_version": SCHEMA_VERSION,
        "date": started.isoformat(timespec="seconds"),
        "wall_s": round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 1),
        "device": args.device,
        "small": bool(args.small),
        "timing": {
            "method": "CUDA events around each run, device synchronised before and after" if ctx.cuda else "perf_counter",
            "warmup": args.warmup,
            "runs": args.runs,
            "statistic": "median",
        },
        "shapes": {"S1": ctx.s1, "slstm": ctx.slstm, "scan": ctx.scan, "decode_batches": ctx.decode_batches},
        **env,
        "entries": ctx.entries,
    }
    path = os.path.join(args.out, "peers.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    n_err = sum(1 for e in ctx.entries if e.get("error"))
    print(f"{len(ctx.entries)} entries ({n_err} with errors) -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
