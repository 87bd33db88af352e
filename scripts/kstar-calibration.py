#!/usr/bin/env python3
"""The calibration of the predicted K (docs/kstar.md, "**Calibration.**"): Newton's measured
e_{k+1} / (e_k² m) over a grid of `pararnn kstar` rows, and the rows themselves (issue 58 item 9:
every figure in docs has its source in the tree).

The grid: gru, lstm, nlru, cfc, titans, slstm, m2rnn (k_dim = v_dim = 4) in f32 and bf16, gru-head
(2 heads) and hopfield in f32; classes init and hard as the nightly K* tasks build them
(nightly/src/kstar_task.cpp, plan.cpp's all_variants: init = the cell's default cap, no
weight_std; hard = the variant's hard_std and no cap; hopfield has no hard class, as in the
nightly plan); T 64, 1024, 8192; B 2, d_in 8, d_h 16; two seeds (`pararnn kstar --seeds 2`).

What is measured, per row (one (variant, dtype, class, T, seed)): e_k = max_abs_by_k[k], the
K-update iterate's max |error| against the oracle (K = k), and
  m = Σ_{j<T} e^{j s},  s = max_stretch / min(64, T)
the memory of predicted_k.hpp with the row's largest stretch (the oracle's Lyapunov estimate,
window 64): the largest m over the row's units, since a row keeps only the maxima over its units
(e_k is also a max over units), so the ratio is a per-row one, not the model's per-unit one.
Each pair (e_k, e_{k+1}) in Newton's quadratic phase gives r = e_{k+1} / (e_k² m). The code has no
definition of that phase; the one used here: the pair is inside the model's quadratic basin,
kCurvature · m · e_k <= kBasin (c = 1/4, 1/2: contracts/predicted_k.hpp), the error still falls
(e_{k+1} < e_k), and e_{k+1} is above the rounding floor: e_{k+1} > 4 × the row's
sequential_max_abs (the same-dtype sequential solve's error, about where the iterates stop: the
floor is then at most a quarter of e_{k+1}). A row without a finite stretch gives no pair, nor
do sLSTM's (K* 0 or 1, a memory of 70 steps or more: outside the basin) and most bf16 rows (the
iterates reach the floor in one step from outside the basin).

Prints, per (variant, dtype, class), the rows, the pairs in the quadratic phase and the min and
max of r over them, then the same over all rows with the pairs that give the min and the max,
and how many rows have no pair.

Usage:
  scripts/kstar-calibration.py [--pararnn build/tools/pararnn] [--times 64,1024,8192]
                               [--out docs/kstar/calibration.json]
      runs the grid (one `pararnn kstar` per (variant, dtype, class)), writes the rows, prints
      the table (docs/kstar/calibration.json was written so: 1 core, nice -n 19);
  scripts/kstar-calibration.py --summary docs/kstar/calibration.json
      prints the table from the kept rows, running nothing.
Exit codes: 0 printed; 1 a `pararnn kstar` run failed (its stderr is shown); 2 usage or an
unreadable file.
"""
import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
CURVATURE, BASIN = 0.25, 0.5  # contracts/predicted_k.hpp: kCurvature, kBasin
FLOOR_FACTOR = 4.0  # e_{k+1} > 4 x the rounding floor: the floor is at most a quarter of it
WINDOW = 64  # reference::LyapunovOptions::window, as measure_kstar uses it

# (name, pararnn kstar flags, hard_std or None (no hard class), init cap, dtypes): plan.cpp's all_variants.
VARIANTS = [
    ("gru", ["--cell", "gru"], 0.7, "0.5", ["f32", "bf16"]),
    ("lstm", ["--cell", "lstm"], 0.7, "0.5", ["f32", "bf16"]),
    ("nlru", ["--cell", "nlru"], 0.7, "0.5", ["f32", "bf16"]),
    ("cfc", ["--cell", "cfc"], 0.7, "0.5", ["f32", "bf16"]),
    ("titans", ["--cell", "titans"], 0.7, "0.5", ["f32", "bf16"]),
    ("slstm", ["--cell", "slstm"], 0.7, "0.5", ["f32", "bf16"]),
    ("m2rnn", ["--cell", "m2rnn", "--mix", "matrix", "--k-dim", "4", "--v-dim", "4"], 0.1, "none",
     ["f32", "bf16"]),
    ("gru-head", ["--cell", "gru", "--mix", "head", "--n-heads", "2"], 0.7 / math.sqrt(8.0), "none", ["f32"]),
    ("hopfield", ["--cell", "hopfield", "--mix", "dense"], None, "none", ["f32"]),
]
SHAPE = ["--batch", "2", "--d-in", "8", "--d-h", "16", "--seeds", "2"]


def run_grid(pararnn, times, out):
    tables = []
    started = time.monotonic()
    for name, flags, hard_std, cap, dtypes in VARIANTS:
        for dtype in dtypes:
            for cls in ["init", "hard"] if hard_std is not None else ["init"]:
                args = [pararnn, "kstar", *flags, "--dtype", dtype, "--T", times, *SHAPE]
                args += ["--max-recurrent-norm", cap] if cls == "init" else \
                        ["--max-recurrent-norm", "none", "--weight-std", repr(hard_std)]
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "kstar.json")
                    t0 = time.monotonic()
                    p = subprocess.run(args + ["--json", path], capture_output=True, text=True)
                    if p.returncode != 0:
                        sys.stderr.write(f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}")
                        sys.exit(1)
                    table = json.loads(pathlib.Path(path).read_text())
                print(f"{name} {dtype} {cls}: {len(table['rows'])} rows, {time.monotonic() - t0:.1f} s",
                      file=sys.stderr)
                # The command without the binary's path and the temporary file.
                tables.append({"variant": name, "class": cls,
                               "command": "pararnn " + " ".join(args[1:]) + " --json FILE", "kstar": table})
    env = subprocess.run([pararnn, "env"], capture_output=True, text=True).stdout.splitlines()
    report = {"what": "scripts/kstar-calibration.py: the rows of docs/kstar.md's Calibration paragraph",
              "pararnn": env[0] if env else "unknown", "times": [int(t) for t in times.split(",")], "duration_s": round(time.monotonic() - started, 1),
              "tables": tables}
    text = json.dumps(report, indent=1) + "\n"
    pathlib.Path(out).write_text(text)
    return report


def memory(stretch, length):
    s = stretch / min(WINDOW, length)
    if s == 0.0:
        return float(length)
    try:
        return math.expm1(length * s) / math.expm1(s)
    except OverflowError:
        return math.inf


def ratios(row):
    """The row's [(k, r = e_{k+1} / (e_k² m))] over its quadratic-phase pairs (None: no finite stretch)."""
    if row.get("max_stretch") is None:
        return None
    m = memory(row["max_stretch"], row["T"])
    e, floor = row["max_abs_by_k"], FLOOR_FACTOR * row["sequential_max_abs"]
    return [(k, e[k + 1] / (e[k] ** 2 * m)) for k in range(len(e) - 1)
            if math.isfinite(m) and CURVATURE * m * e[k] <= BASIN and e[k + 1] < e[k] and e[k + 1] > floor]


def summary(report):
    print("| variant | dtype | class | rows | pairs | min r | max r |")
    print("|---|---|---|---|---|---|---|")
    every, rows, without, no_stretch = [], 0, 0, 0
    for t in report["tables"]:
        k = t["kstar"]
        rs = []
        for row in k["rows"]:
            rows += 1
            r = ratios(row)
            without += not r
            no_stretch += r is None
            rs += [(v, f"{t['variant']} {k['dtype']} {t['class']} T={row['T']} seed={row['seed']} k={i}")
                   for i, v in r or []]
        every += rs
        lo, hi = (f"{min(rs)[0]:.2g}", f"{max(rs)[0]:.2g}") if rs else ("-", "-")
        print(f"| {t['variant']} | {k['dtype']} | {t['class']} | {len(k['rows'])} | {len(rs)} | {lo} | {hi} |")
    if not every:
        print(f"\n{rows} rows, no pair in the quadratic phase")
        return
    lo, hi = min(every), max(every)
    print(f"\n{rows} rows, {len(every)} pairs in the quadratic phase: e_{{k+1}} / (e_k² m) from {lo[0]:.2g} "
          f"({lo[1]}) to {hi[0]:.2g} ({hi[1]}); {without} rows without a pair ({no_stretch} without a finite "
          f"stretch)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pararnn", default=str(ROOT / "build" / "tools" / "pararnn"))
    ap.add_argument("--times", default="64,1024,8192")
    ap.add_argument("--out", default=str(ROOT / "docs" / "kstar" / "calibration.json"))
    ap.add_argument("--summary", metavar="FILE", help="print the table of kept rows, run nothing")
    a = ap.parse_args()
    if a.summary:
        try:
            report = json.loads(pathlib.Path(a.summary).read_text())
        except (OSError, ValueError) as e:
            print(f"{a.summary}: {e}", file=sys.stderr)
            return 2
    else:
        report = run_grid(a.pararnn, a.times, a.out)
    summary(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
