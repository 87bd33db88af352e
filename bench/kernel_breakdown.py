#!/usr/bin/env python3
"""Per-kernel time breakdown of one public call, from Nsight Compute's CSV.

The H200 machine has no Nsight Systems, so a call's kernels are timed one by one with
  ncu --metrics gpu__time_duration.sum --csv --print-units base <bench> > profile.csv
(every kernel serialised, at ncu's locked base clocks: the shares are the information, the
absolute times run above the bench's). This groups the kernels into the repeated calls the
bench makes: a call opens at a launch whose name contains `--first` and closes, inclusive, at
the next launch whose name contains `--last`; kernels outside calls are left out. It checks that
every call launched the same kernel sequence and writes JSON: per kernel position, its name,
grid, block and the median time over the calls, and the sum.

Usage: bench/kernel_breakdown.py profile.csv --first NAME --last NAME [--skip N] [--out F.json]
  --skip N  leave the first N calls out (warm-up)
Exits 1 when no call is found or the calls' kernel sequences differ.
"""
import argparse
import csv
import json
import statistics
import sys


def kernels(path):
    header, rows = None, []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if "Kernel Name" in row and "Metric Value" in row:
                header = row
                continue
            if header and len(row) == len(header):
                r = dict(zip(header, row))
                if r.get("Metric Name") == "gpu__time_duration.sum":
                    rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--first", required=True)
    ap.add_argument("--last", required=True)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = kernels(a.csv)
    calls, current = [], None
    for r in rows:
        if current is None and a.first in r["Kernel Name"]:
            current = []
        if current is not None:
            current.append(r)
            if a.last in r["Kernel Name"]:
                calls.append(current)
                current = None
    calls = calls[a.skip:]
    if not calls:
        print(f"kernel_breakdown: no kernel named like '{a.first}' in {a.csv}", file=sys.stderr)
        return 1
    signature = [(r["Kernel Name"], r["Grid Size"], r["Block Size"]) for r in calls[0]]
    for i, c in enumerate(calls[1:], 1):
        if [(r["Kernel Name"], r["Grid Size"], r["Block Size"]) for r in c] != signature:
            print(f"kernel_breakdown: call {i} launched another kernel sequence than call 0", file=sys.stderr)
            return 1
    unit = rows[0]["Metric Unit"]
    scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(unit)
    if scale is None:
        print(f"kernel_breakdown: unknown time unit '{unit}'", file=sys.stderr)
        return 1
    positions = []
    for k, (name, grid, block) in enumerate(signature):
        times = [float(c[k]["Metric Value"].replace(",", "")) * scale for c in calls]
        positions.append({"kernel": name, "grid": grid, "block": block, "median_ms": statistics.median(times)})
    result = {"source": a.csv, "calls": len(calls), "clock": "ncu base clocks, kernels serialised",
              "kernels": positions, "sum_ms": sum(p["median_ms"] for p in positions)}
    text = json.dumps(result, indent=2) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
