#!/usr/bin/env python3
"""The cheap predicted K against the oracle-based one over a K*-only nightly report (docs/kstar.md,
"The cheap form"): per (variant, class), summed over seeds, T and dtypes, how often both give the
same K, differ, or only one gives a number; the cheap form's own outcome against K* (hit, over,
under, none: nightly's prediction_outcome with its margin 1); the largest |λ̂ max| difference.

  scripts/kstar-cheap-table.py docs/kstar/validation_cpu.json
"""
import collections
import json
import sys


def outcome(kstar, predicted, k_limit, margin=1):
    if predicted is None:
        return "none"
    if kstar < 0:  # K* beyond the limit
        return "hit" if predicted + margin > k_limit else "under"
    if predicted + margin < kstar:
        return "under"
    return "hit" if predicted <= kstar + 1 else "over"


def main(path):
    report = json.load(open(path))
    rows = collections.OrderedDict()
    for r in report["kstar"]:
        c = rows.setdefault((r["variant"], r["class"]), collections.Counter())
        for kstar, oracle, cheap, l_oracle, l_cheap in zip(
                r["kstar_by_seed"], r["predicted_k_by_seed"], r["predicted_k_iterate_by_seed"],
                r["lambda_max_by_seed"], r["lambda_max_iterate_by_seed"]):
            c["cheap " + outcome(kstar, cheap, r["k_limit"])] += 1
            if oracle is None and cheap is None:
                c["both none"] += 1
            elif oracle is None:
                c["cheap only"] += 1
            elif cheap is None:
                c["oracle only"] += 1
            else:
                c["same" if oracle == cheap else "differ"] += 1
            if l_oracle is not None and l_cheap is not None:  # null: no finite estimate on that side
                c["dl"] = max(c["dl"], abs(l_oracle - l_cheap))
            c["n"] += 1
    cols = ["n", "same", "differ", "both none", "oracle only", "cheap only",
            "cheap hit", "cheap over", "cheap under", "cheap none"]
    print("| variant | class | " + " | ".join(cols) + " | max abs Δλ̂ max |")
    print("|---" * (len(cols) + 3) + "|")
    total = collections.Counter()
    for (variant, cls), c in rows.items():
        total.update({k: v for k, v in c.items() if k != "dl"})
        print(f"| {variant} | {cls} | " + " | ".join(str(c[k]) for k in cols) + f" | {c['dl']:.3g} |")
    print("| **all** | | " + " | ".join(f"**{total[k]}**" for k in cols) + " | |")


if __name__ == "__main__":
    main(sys.argv[1])
