#!/usr/bin/env python3
"""Prints the figures of README.md from the two committed report.json files (issue 58: every
figure in docs has its source in the tree).

  python3 docs/examples/pararnn-torch-nightly/figures.py
"""
import json
import pathlib

here = pathlib.Path(__file__).resolve().parent
default = json.loads((here / "pararnn-torch" / "report.json").read_text())
none = json.loads((here / "pararnn-torch-max-iters-none" / "report.json").read_text())


def trajectory_right(row):
    """The answer's H within τ (the row's outcome also judges its gradients)."""
    a = row.get("agreement")
    return a is not None and a["mismatches"] == 0


for name, r in (("pararnn-torch", default), ("pararnn-torch-max-iters-none", none)):
    s = r["summary"]
    print(f"{name}: rows {s['rows']} {s['by_outcome']}; the plan's {s['tasks']} tasks: {s['rows_not_run']} not run "
          f"at the time budget ({s['tasks_cut_at_budget']} of them cut while running)")

d = {row["id"]: row for row in default["rows"]}
n = {row["id"]: row for row in none["rows"]}
both = sorted(set(d) & set(n))
became_right = [i for i in both if i.startswith("m2rnn.") and not trajectory_right(d[i]) and trajectory_right(n[i])]
print(f"M2RNN rows whose trajectory becomes right with max_iters=None: {len(became_right)}: {', '.join(became_right)}")
changed = [(i, d[i]["outcome"], n[i]["outcome"]) for i in both if d[i]["outcome"] != n[i]["outcome"]]
print("rows whose outcome changes: " + "; ".join(f"{i} {a} -> {b}" for i, a, b in changed))
only_default = sorted(set(d) - set(n))
print("rows run with the default config only (not run with max_iters=None): "
      + "; ".join(f"{i} ({d[i]['outcome']})" for i in only_default))
