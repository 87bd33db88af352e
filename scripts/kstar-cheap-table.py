#!/usr/bin/env python3
"""The predicted K against K* over a K*-only nightly report: the tables of docs/kstar.md.

Default ("The cheap form"): the cheap predicted K against the oracle-based one, per (variant,
class), summed over seeds, T and dtypes: how often both give the same K, differ, or only one gives
a number; the cheap form's own outcome against K* (hit, over, under, none: nightly's
prediction_outcome with its margin 1); the largest |λ̂ max| difference.
--validation ("Validation over the nightly plan"): the oracle-based predicted K's outcome against
K* per (variant, class) (hit, over, under, no number) and the largest λ̂ max of the rows, then the
hit-rate line (issue 58 item 9: the figures of docs have a command that prints them;
scripts/tests/test_doc_figures.py holds docs/kstar.md to this output).

  scripts/kstar-cheap-table.py docs/kstar/validation_cpu.json
  scripts/kstar-cheap-table.py --validation docs/kstar/validation_cpu.json
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


def minus(value):
    """A number as docs/kstar.md prints it: 3 significant digits, a typographic minus."""
    return f"{value:.3g}".replace("-", "\u2212")


def validation_rows(report):
    """{(variant, class): Counter of the oracle-based outcomes, with "lambda" the largest λ̂ max}, the
    variants in the report's order and each variant's classes together."""
    rows = {}
    for r in report["kstar"]:
        c = rows.setdefault((r["variant"], r["class"]), collections.Counter())
        for kstar, predicted in zip(r["kstar_by_seed"], r["predicted_k_by_seed"]):
            c[outcome(kstar, predicted, r["k_limit"])] += 1
        for lam in r["lambda_max_by_seed"]:
            if lam is not None:  # null: no finite estimate
                c["lambda"] = max(c.get("lambda", lam), lam)
    variants = list(dict.fromkeys(v for v, _ in rows))
    return collections.OrderedDict(sorted(rows.items(), key=lambda kv: variants.index(kv[0][0])))


def print_validation(report):
    cols = ["hit", "over", "under", "none"]
    print("| variant | class | hit | over | under | no number | λ̂ max over the rows |")
    print("|---|---|---|---|---|---|---|")
    total = collections.Counter()
    for (variant, cls), c in validation_rows(report).items():
        total.update({k: c[k] for k in cols})
        lam = minus(c["lambda"]) if "lambda" in c else "none"
        print(f"| {variant} | {cls} | " + " | ".join(str(c[k]) for k in cols) + f" | {lam} |")
    print("| **all** | | " + " | ".join(f"**{total[k]}**" for k in cols) + " | |")
    n = sum(total.values())
    numbered = total["hit"] + total["over"] + total["under"]
    print(f"\n**Hit rate: {total['hit']} of {n} ({100 * total['hit'] / n:.0f} %); "
          f"{100 * total['hit'] / numbered:.0f} % of the {numbered} with a number; "
          + ("no prediction below K* \u2212 1.**" if total["under"] == 0 else f"{total['under']} below K* \u2212 1.**"))


def cheap_rows(report):
    """{(variant, class): Counter of the cheap form against the oracle's (same, differ, both none,
    oracle only, cheap only), its own outcome ("cheap hit", ...), "n", and "dl" the largest |Δλ̂ max|
    where both have one}, in the report's order."""
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
    return rows


def main(path):
    rows = cheap_rows(json.load(open(path)))
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
    if len(sys.argv) == 3 and sys.argv[1] == "--validation":
        print_validation(json.load(open(sys.argv[2])))
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
