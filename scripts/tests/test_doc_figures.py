#!/usr/bin/env python3
"""Figures in docs are what their sources in the tree print (issue 58 item 9): each figure below is
recomputed from its committed source (a report.json, a log) by the command the page names, and
must stand in the page as printed. A page edited without its source, or a source regenerated
without its page, fails here (ctest `docs_figures_match_their_sources`).

  python3 scripts/tests/test_doc_figures.py
"""
import collections
import importlib.util
import json
import pathlib
import re
import subprocess
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KSTAR_MD = ROOT / "docs" / "kstar.md"
VALIDATION = ROOT / "docs" / "kstar" / "validation_cpu.json"
PROPERTY_LOG = ROOT / "docs" / "kstar" / "predicted_k_property.log"
CALIBRATION = ROOT / "docs" / "kstar" / "calibration.json"
TORCH = ROOT / "docs" / "examples" / "pararnn-torch-nightly"

spec = importlib.util.spec_from_file_location("kstar_table", ROOT / "scripts" / "kstar-cheap-table.py")
kstar_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kstar_table)


def run(*args):
    return subprocess.run([sys.executable, *map(str, args)], check=True, capture_output=True, text=True).stdout


def page(path):
    # The page's prose wraps anywhere: compare figures on one line.
    return re.sub(r"\s+", " ", path.read_text())


def short(value):
    """A number as the pages write it: 2 significant digits, the exponent without a leading zero."""
    return re.sub(r"e([+-])0(\d)", r"e\1\2", f"{value:.1e}")


class FigureTest(unittest.TestCase):
    def assertStands(self, text, page_text, source):
        if text not in page_text:
            self.fail(f"the page does not say {text!r} (what {source} gives)")


class KstarPage(FigureTest):
    """docs/kstar.md against docs/kstar/validation_cpu.json and predicted_k_property.log."""

    def setUp(self):
        self.md = KSTAR_MD.read_text()
        self.flat = page(KSTAR_MD)
        self.report = json.loads(VALIDATION.read_text())

    def test_the_validation_table_and_hit_rate_are_the_scripts_output(self):
        printed = run(ROOT / "scripts" / "kstar-cheap-table.py", "--validation", VALIDATION)
        self.assertStands(printed, self.md, "`scripts/kstar-cheap-table.py --validation docs/kstar/validation_cpu.json`")
        # The report's own summary agrees with the per-row outcomes the script counts.
        total = collections.Counter()
        for c in kstar_table.validation_rows(self.report).values():
            total.update({k: c[k] for k in ("hit", "over", "under", "none")})
        self.assertEqual(dict(total), self.report["summary"]["kstar_predicted"])

    def test_the_calibrations_figures_are_its_rows(self):
        printed = run(ROOT / "scripts" / "kstar-calibration.py", "--summary", CALIBRATION)
        m = re.search(r"^(\d+) rows, (\d+) pairs in the quadratic phase: e_\{k\+1\} / \(e_k² m\) from (\S+) "
                      r"\(.*?\) to (\S+) \(", printed, re.M)
        self.assertIsNotNone(m, printed)
        rows, pairs, lo, hi = m.groups()
        source = "`scripts/kstar-calibration.py --summary docs/kstar/calibration.json`"
        self.assertStands(f"On {rows} `pararnn kstar` rows", self.flat, source)
        self.assertStands(f"over the {pairs} pairs of iterates", self.flat, source)
        self.assertStands(f"{short(float(lo))} (", self.flat, source)
        self.assertStands(f"to {float(hi):.2g} (", self.flat, source)

    def test_the_validation_run_is_the_committed_reports(self):
        minutes = self.report["summary"]["duration_s"] / 60
        self.assertStands(f"{minutes:.1f} min with 2 jobs", self.flat, "docs/kstar/validation_cpu.json")
        self.assertStands(f"`summary.duration_s` {self.report['summary']['duration_s']}", self.flat, "docs/kstar/validation_cpu.json")
        self.assertStands(f"its context names {self.report['context']['git_sha'][:7]}+dirty", self.flat, "docs/kstar/validation_cpu.json")
        self.assertStands(f"{self.report['summary']['kstar_measurements']} measurements of 2 seeds each", self.flat, "docs/kstar/validation_cpu.json")

    def test_the_cheap_forms_figures_are_the_scripts_totals(self):
        rows = kstar_table.cheap_rows(self.report)
        total = collections.Counter()
        for c in rows.values():
            total.update({k: v for k, v in c.items() if k != "dl"})
        for label, key in (("both give a number, the same K", "same"), ("both give a number, different K", "differ"),
                           ("both give none", "both none"), ("only the cheap form's", "cheap only")):
            self.assertRegex(self.md, rf"\| {re.escape(label)} \| {total[key]} \|")
        self.assertRegex(self.md, rf"\| only the oracle's \([^|]*\) \| {total['oracle only']} \|")
        self.assertStands(f"over the same {total['n']} measurements", self.flat, "docs/kstar/validation_cpu.json")
        self.assertStands(f"Its own outcome against K*: {total['cheap hit']} hit, {total['cheap over']} over, "
                      f"{total['cheap under']} under, {total['cheap none']} none", self.flat, "docs/kstar/validation_cpu.json")
        worst = max(rows.items(), key=lambda kv: kv[1]["dl"])
        rest = sorted(c["dl"] for key, c in rows.items() if key != worst[0] and c["dl"] > 0)
        lowest = next(key for key, c in rows.items() if c["dl"] == rest[0])
        self.assertEqual(lowest[0], "cfc")
        self.assertStands(f"by at most {short(worst[1]['dl'])} ({worst[0][0].capitalize()} {worst[0][1]}; "
                          f"{short(rest[0])} (CfC {lowest[1]}) to {short(rest[-1])} elsewhere", self.flat,
                          "kstar-cheap-table.py's max abs Δλ̂ max column")

    def test_the_propertys_share_is_its_logs(self):
        m = re.search(r"PredictedK: (\d+) cases, (\d+) with a number \((\d+) %", PROPERTY_LOG.read_text())
        self.assertIsNotNone(m, "the log has no PredictedK summary line")
        cases, numbered, share = m.groups()
        self.assertStands(f"at {cases} cases {numbered} got one ({share} %; `docs/kstar/predicted_k_property.log`)", self.flat, "the log")


class PararnnTorchNightlyPage(FigureTest):
    """docs/examples/pararnn-torch-nightly/README.md against figures.py over its two report.json files."""

    def setUp(self):
        self.printed = run(TORCH / "figures.py")
        self.flat = page(TORCH / "README.md")
        self.md = (TORCH / "README.md").read_text()

    def campaign(self, name):
        m = re.search(rf"^{re.escape(name)}: rows (\d+) (\{{[^}}]*\}}); the plan's (\d+) tasks: (\d+) not run "
                      r"at the time budget \((\d+) of them cut", self.printed, re.M)
        self.assertIsNotNone(m, f"figures.py printed no line for {name}")
        by = json.loads(m.group(2).replace("'", '"'))
        return int(m.group(1)), by, int(m.group(3)), int(m.group(4)), int(m.group(5))

    def test_the_campaign_table_and_the_tasks_not_run(self):
        default = self.campaign("pararnn-torch")
        none = self.campaign("pararnn-torch-max-iters-none")
        for folder, (rows, by, _, _, _) in (("pararnn-torch/", default), ("pararnn-torch-max-iters-none/", none)):
            self.assertRegex(self.md, rf"\| \[{re.escape(folder)}\]\([^)]*\) \| [^|]* \| {rows} \| {by['Agree']} \| "
                                      rf"{by['Disagree']} \| {by['Inconclusive']} \| {by['Error']} \|")
        self.assertEqual(default[2], none[2])
        self.assertStands(f"{default[3]} of the plan's {default[2]} tasks were not run in the default-config campaign "
                      f"and {none[3]} in the `max_iters=None` one", self.flat, "figures.py")
        self.assertStands(f"{default[4]} and {none[4]} of them were cut while running", self.flat, "figures.py")

    def test_the_m2rnn_rows_that_become_right(self):
        m = re.search(r"^M2RNN rows whose trajectory becomes right with max_iters=None: (\d+):", self.printed, re.M)
        self.assertIsNotNone(m)
        self.assertStands(f"except that {m.group(1)} M2RNN rows' trajectories become right", self.flat, "figures.py")
        changed = re.search(r"^rows whose outcome changes: (.*)$", self.printed, re.M).group(1).split("; ")
        to_agree = [c for c in changed if c.startswith("m2rnn.") and c.endswith("Disagree -> Agree")]
        self.assertStands(f"{len(to_agree)} of those rows become Agree", self.flat, "figures.py")


if __name__ == "__main__":
    unittest.main(verbosity=2)
