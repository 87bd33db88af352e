#!/usr/bin/env python3
"""The torch user's step at S1 (issue 55's U1-U6), ours beside pararnn-torch in one process.

What a PyTorch user writes: ``cell = ParaGRU(256, 256).cuda().to(dtype)``, a random CUDA x, and
``H = f(cell, x); H.float().sum().backward()`` with f = pararnn-torch's ``newton_apply`` or ours,
``pararnn_judge.torch.newton_apply`` (our autograd Function). Each figure is the median of --runs
steps after --warmup, the device synchronised around each (wall time, as the user sees it).

Rows (S1: B 8, T 65536, d_in = d_h = 256):
  step.<cell>.<dtype>.<solver>.<config>   forward + backward (x and every parameter require grad)
  forward.gru.bf16.<solver>.<config>      forward alone under no_grad
with solver ours | torch and config k3 (max_iters=3) | default. For our rows: the host<->device
bytes, device-to-host reads and stream waits of one step (pararnn_judge.cuda_transfers), and every
step's peak of torch.cuda.max_memory_allocated (ours comes from torch's caching allocator, so both
libraries are counted by the same allocator). The LSTM f32 K 3 step runs after torch's own steps
in this process (the out-of-memory case of issue 55).

Checked in the same run: the parameter gradients of each of our timed steps against pararnn-torch's
f32 K 3 step of the same module (max relative difference per tensor; bf16 rows against the f32
step of an f32 copy), and, on a small shape (B 2, T 256, d 16, f32), our step's H and gradients
judged by the oracle (pararnn_judge.compare with gradients=..., the verdict must be Agree).

Usage (GPU machine, pararnn-torch installed, PYTHONPATH with pararnn_judge):
  python3 bench/peers/torch_user_step.py --out $OUT/torch_user_step.json [--runs 5] [--warmup 2]
  [--small]   a small stand-in of every row (B 2, T 512, d 32), for trying the script
  [--profile] torch.profiler's kernel table of one GRU bf16 step of each library (ours, torch)
  [--only RE] only the rows whose name matches RE
Prints one line per row; writes JSON (schema_version 1) with the context and the U targets.
"""
import argparse
import copy
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import pararnn as P  # pararnn-torch
import pararnn_judge as judge
import pararnn_judge.torch as pt

CELLS = {"gru": "ParaGRU", "lstm": "ParaLSTM"}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def make(kind, d, dtype, seed=0):
    torch.manual_seed(seed)
    return getattr(P, CELLS[kind])(input_size=d, hidden_size=d).to("cuda", dtype)


def solve_ours(config):
    kw = {"max_iters": 3} if config == "k3" else {}
    return lambda cell, x: pt.newton_apply(cell, x, **kw)


def solve_torch(config):
    cfg = P.NewtonConfig(max_iters=3) if config == "k3" else P.NewtonConfig()
    return lambda cell, x: P.newton_apply(cell, x, cfg)


SOLVERS = {"ours": solve_ours, "torch": solve_torch}


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times, peaks = [], []
    for _ in range(runs):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - t0))
        peaks.append(torch.cuda.max_memory_allocated() - base)
    return {"ms": statistics.median(times), "ms_all": times, "peak_bytes": max(peaks)}


def step_fn(solve, cell, x):
    def fn():
        for p in cell.parameters():
            p.grad = None
        x.grad = None
        H = solve(cell, x)
        H.float().sum().backward()
    return fn


def grads_of(cell, x):
    return {"x": x.grad.detach().float().clone(), **{n: p.grad.detach().float().clone() for n, p in cell.named_parameters()}}


def max_rel(a, b):
    return {k: float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp_min(1e-30)) for k in b}


def counters():
    return judge.cuda_transfers()


def row(out, ident, entry):
    out["rows"][ident] = entry
    print(ident, json.dumps({k: v for k, v in entry.items() if k != "ms_all"}), flush=True)


def wanted(args, ident):
    import re
    return args.only is None or re.search(args.only, ident) is not None


def run(args):
    B, T, d = (2, 512, 32) if args.small else (8, 65536, 256)
    out = {"schema_version": 1, "context": context(args, B, T, d), "rows": {}}
    reference = {}  # (kind) -> pararnn-torch f32 K 3 gradients of the seed-0 module
    for kind in ("gru", "lstm"):
        for dname in ("bf16", "f16", "f32") if kind == "gru" else ("bf16", "f32"):  # f16: the GRU only
            dtype = DTYPES[dname]
            for solver in ("torch", "ours"):
                for config in ("k3", "default"):
                    if kind == "lstm" and config == "default" and solver == "torch":
                        continue  # the table keeps torch K 3 for LSTM; its default is slower
                    ident = f"step.{kind}.{dname}.{solver}.{config}"
                    if not wanted(args, ident):
                        continue
                    try:
                        cell = make(kind, d, dtype)
                        torch.manual_seed(1)
                        x = torch.randn(B, T, d, device="cuda", dtype=dtype, requires_grad=True)
                        fn = step_fn(SOLVERS[solver](config), cell, x)
                        before = counters()
                        fn()
                        after = counters()
                        entry = timed(fn, args.runs, args.warmup)
                        if solver == "ours":
                            entry["per_step"] = {k: after[k] - before[k] for k in after}
                        grads = grads_of(cell, x)
                        if solver == "torch" and config == "k3" and dname == "f32":
                            reference[kind] = grads
                        if kind in reference and solver == "ours":
                            entry["grad_max_rel_vs_torch_f32_k3"] = max_rel(grads, reference[kind])
                        row(out, ident, entry)
                        del cell, x, fn
                    except Exception as e:  # recorded, the run goes on (an OOM is a finding)
                        row(out, ident, {"error": f"{type(e).__name__}: {e}"[:600]})
                    torch.cuda.empty_cache()
        # half rows were timed before the f32 reference existed: check them now, same modules.
        for dname, config in [(n, c) for n in ("bf16", "f16") for c in ("k3", "default")]:
            ident = f"step.{kind}.{dname}.ours.{config}"
            if kind in reference and ident in out["rows"] and "error" not in out["rows"][ident]:
                cell = make(kind, d, DTYPES[dname])
                torch.manual_seed(1)
                x = torch.randn(B, T, d, device="cuda", dtype=DTYPES[dname], requires_grad=True)
                step_fn(solve_ours(config), cell, x)()
                out["rows"][ident]["grad_max_rel_vs_torch_f32_k3"] = max_rel(grads_of(cell, x), reference[kind])
                del cell, x
                torch.cuda.empty_cache()
    for solver in ("ours", "torch"):
        for config in ("k3", "default"):
            ident = f"forward.gru.bf16.{solver}.{config}"
            if not wanted(args, ident):
                continue
            try:
                cell = make("gru", d, torch.bfloat16)
                torch.manual_seed(1)
                x = torch.randn(B, T, d, device="cuda", dtype=torch.bfloat16)
                solve = SOLVERS[solver](config)

                def fn():
                    with torch.no_grad():
                        solve(cell, x)
                row(out, ident, timed(fn, args.runs, args.warmup))
            except Exception as e:
                row(out, ident, {"error": f"{type(e).__name__}: {e}"[:600]})
            torch.cuda.empty_cache()
    out["oracle_check"] = oracle_check()
    print("oracle_check", json.dumps(out["oracle_check"]), flush=True)
    out["targets"] = targets(out["rows"])
    return out


def profile(args):
    """torch.profiler's CUDA kernel table of one step of ours and of pararnn-torch (GRU bf16, K 3
    and default), after warm-up: where the step's device time goes (names, counts, total ms)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    B, T, d = (2, 512, 32) if args.small else (8, 65536, 256)
    tables = {}
    for solver in ("ours", "torch"):
        for config in ("k3", "default"):
            cell = make("gru", d, torch.bfloat16)
            torch.manual_seed(1)
            x = torch.randn(B, T, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            fn = step_fn(SOLVERS[solver](config), cell, x)
            fn()
            fn()
            torch.cuda.synchronize()
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            rows = []
            for e in prof.key_averages():
                device_us = getattr(e, "device_time_total", None)
                if device_us is None:
                    device_us = getattr(e, "cuda_time_total", 0)
                if device_us > 0 and e.key and not e.key.startswith("ProfilerStep"):
                    rows.append({"name": e.key[:120], "count": e.count, "device_ms": device_us / 1000})
            rows.sort(key=lambda r: -r["device_ms"])
            tables[f"{solver}.{config}"] = rows[:25]
            print(f"profile {solver}.{config}:", flush=True)
            for r in rows[:25]:
                print(f"  {r['device_ms']:8.3f} ms  x{r['count']:<4d} {r['name']}", flush=True)
            del cell, x, fn
            torch.cuda.empty_cache()
    return tables


def oracle_check():
    """Our step on a small f32 shape, judged by the oracle: H and every gradient of sum(H)."""
    cell = make("gru", 16, torch.float32)
    torch.manual_seed(2)
    x = torch.randn(2, 256, 16, device="cuda", requires_grad=True)
    H = pt.newton_apply(cell, x)
    H.sum().backward()
    gradients = {"grad.x": x.grad.detach().cpu()}
    gradients.update({f"grad.{n}": p.grad.detach().cpu() for n, p in cell.named_parameters()})
    report = judge.compare(pt.cell_of(cell), x.detach().cpu(), H.detach().cpu(), gradients=gradients, seed=1)
    return {"verdict": report.verdict, "max_abs": report.max_abs, "atol": report.atol,
            "gradients_missing": list(report.gradients_missing)}


def ms(rows, ident):
    r = rows.get(ident, {})
    return r.get("ms")


def targets(rows):
    """U1-U6 from this run (U5 needs the C++ bench of the same run: bench's T1, merged by the
    caller with --cpp-json)."""
    def entry(value, target, met, peer, why=None):
        e = {"value": value, "target": target, "met": met, "peer_same_run": peer}
        if why:
            e["why"] = why
        return e
    t = {}
    u1, torch_k3 = ms(rows, "step.gru.bf16.ours.default"), ms(rows, "step.gru.bf16.torch.k3")
    t["U1"] = entry(u1, 8.0, u1 is not None and u1 <= 8.0, torch_k3)
    u2 = ms(rows, "step.gru.f32.ours.default")
    t["U2"] = entry(u2, 15.0, u2 is not None and u2 <= 15.0, ms(rows, "step.gru.f32.torch.k3"))
    lstm, lstm_torch = ms(rows, "step.lstm.bf16.ours.default"), ms(rows, "step.lstm.bf16.torch.k3")
    u3 = lstm / lstm_torch if lstm and lstm_torch else None
    t["U3"] = entry(u3, 0.3, u3 is not None and u3 <= 0.3, lstm_torch)
    u4 = ms(rows, "forward.gru.bf16.ours.default")
    t["U4"] = entry(u4, 3.0, u4 is not None and u4 <= 3.0, ms(rows, "forward.gru.bf16.torch.k3"))
    ours_peak = rows.get("step.gru.bf16.ours.k3", {}).get("peak_bytes")
    torch_peak = rows.get("step.gru.bf16.torch.k3", {}).get("peak_bytes")
    u6 = ours_peak / torch_peak if ours_peak and torch_peak else None
    t["U6"] = entry(u6, 1.0, u6 is not None and u6 <= 1.0, torch_peak)
    return t


def context(args, B, T, d):
    def version(dist):
        try:
            import importlib.metadata as m
            return m.version(dist)
        except Exception:
            return None
    # The build's commit: PARARNN_GIT_SHA where the caller knows it (the GPU machine's copy of
    # .git stops at the session's first commit, so its HEAD is not the build's), else git's HEAD.
    sha = os.environ.get("PARARNN_GIT_SHA")
    if not sha:
        try:
            sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        except OSError:
            sha = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "git_sha": sha,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "pararnn_torch": version("pararnn-torch"), "argv": sys.argv, "shape": {"B": B, "T": T, "d": d},
            "runs": args.runs, "warmup": args.warmup}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also torch.profiler's kernel table of one GRU bf16 step")
    ap.add_argument("--only", default=None, help="a regular expression: only the rows whose name matches")
    args = ap.parse_args()
    out = run(args)
    if args.profile:
        out["profile"] = profile(args)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
