#!/usr/bin/env python3
"""The fault catalog's staleness rule (scripts/fault-catalog.py, issue 58), on a scratch git
repository: a detection counts as caught only while the files of its fault point are as they were
at its run's commit; a change to one of them (committed or not), an unknown commit, a run on
uncommitted changes or a tree without git history makes it stale; the counts say "N caught,
M stale"; and the committed catalog's counts are the ones this tree's build compiles into its
reports.

  python3 property_tests/faults/test_fault_catalog.py [BUILD_DIR]
"""
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fault_catalog", ROOT / "scripts" / "fault-catalog.py")
fc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fc)
BUILD = pathlib.Path(sys.argv.pop(1)) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                                   GIT_COMMITTER_EMAIL="t@t")).stdout.strip()


class Staleness(unittest.TestCase):
    def setUp(self):
        self.repo = pathlib.Path(tempfile.mkdtemp(prefix="fault-catalog-"))
        git(self.repo, "init", "-q")
        (self.repo / "solver" / "src").mkdir(parents=True)
        self.point = self.repo / "solver" / "src" / "driver.hpp"
        self.point.write_text('if (PARARNN_FAULT_POINT("early")) stop();\n')
        self.model = self.repo / "solver" / "src" / "models.hpp"
        self.model.write_text("// the wrong path of 'early'\n")
        self.other = self.repo / "solver" / "src" / "other.cpp"
        # A mention in a comment is not a point.
        self.other.write_text('// PARARNN_FAULT_POINT("early") is described in driver.hpp\nint x;\n')
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", "one")
        self.sha = git(self.repo, "rev-parse", "HEAD")
        self.spec = [{"name": "early", "where": "solver/src/driver.hpp (solver/src/models.hpp)"},
                     {"name": "gpu", "where": "kernels/src/k.cu", "gpu_only": True}]

    def tearDown(self):
        shutil.rmtree(self.repo)

    def catalog(self, run=None, detected=True):
        return {"context": {"git_sha": self.sha, "date": "2026-12-06T00:00:00+00:00"},
                "faults": [dict({"name": "early", "detected": detected}, **({"run": run} if run else {})),
                           {"name": "gpu", "detected": None}]}

    def status(self, catalog):
        return {s["name"]: s for s in fc.fault_status(catalog, self.spec, root=self.repo)}

    def test_the_files_of_a_point_are_its_callers_and_its_where(self):
        self.assertEqual(fc.point_files("early", self.spec[0]["where"], root=self.repo),
                         ["solver/src/driver.hpp", "solver/src/models.hpp"])

    def test_unchanged_files_are_caught(self):
        st = self.status(self.catalog({"git_sha": self.sha, "files": ["solver/src/driver.hpp"]}))
        self.assertEqual(st["early"]["status"], "caught")
        self.assertEqual(st["gpu"]["status"], "not run")
        counts = fc.status_counts(st.values())
        self.assertEqual((counts["caught"], counts["stale"], counts["cpu"]["faults"], counts["gpu"]["faults"]), (1, 0, 1, 1))
        self.assertEqual(fc.caught_text(counts), "1 caught")

    def test_an_entry_without_its_own_run_takes_the_catalogs_commit(self):
        self.assertEqual(self.status(self.catalog())["early"]["status"], "caught")

    def test_a_committed_change_to_a_point_file_makes_it_stale(self):
        for changed in (self.point, self.model):
            with self.subTest(changed=changed.name):
                changed.write_text(changed.read_text() + "// changed\n")
                git(self.repo, "commit", "-qam", "change " + changed.name)
                st = self.status(self.catalog({"git_sha": self.sha}))["early"]
                self.assertEqual(st["status"], "stale")
                self.assertIn(changed.relative_to(self.repo).as_posix(), st["why"])
                counts = fc.status_counts(self.status(self.catalog({"git_sha": self.sha})).values())
                self.assertEqual(fc.caught_text(counts), "0 caught, 1 stale")
                git(self.repo, "revert", "--no-edit", "HEAD")

    def test_an_uncommitted_change_makes_it_stale(self):
        self.point.write_text(self.point.read_text() + "// not committed\n")
        self.assertEqual(self.status(self.catalog({"git_sha": self.sha}))["early"]["status"], "stale")

    def test_a_run_is_judged_by_the_blobs_it_tested_not_by_its_machines_head(self):
        # A run records the blob ids of its files; the GPU machine's .git may stop at an older
        # commit, so only the blobs tell whether the run tested its commit's files.
        blobs = fc.file_blobs(["solver/src/driver.hpp", "solver/src/models.hpp"], root=self.repo)
        tested = self.catalog({"git_sha": self.sha, "file_blobs": blobs})
        self.assertEqual(self.status(tested)["early"]["status"], "caught")
        unlike = self.catalog({"git_sha": self.sha, "file_blobs": dict(blobs, **{"solver/src/driver.hpp": "0" * 40})})
        st = self.status(unlike)["early"]
        self.assertEqual(st["status"], "stale")
        self.assertIn("unlike its commit's", st["why"])
        self.assertIn("solver/src/driver.hpp", st["why"])

    def test_a_change_elsewhere_leaves_it_caught(self):
        self.other.write_text(self.other.read_text() + "int y;\n")
        git(self.repo, "commit", "-qam", "elsewhere")
        self.assertEqual(self.status(self.catalog({"git_sha": self.sha}))["early"]["status"], "caught")

    def test_unknown_commit_dirty_run_and_no_history_are_stale(self):
        self.assertIn("not in this tree's history",
                      self.status(self.catalog({"git_sha": "0" * 40}))["early"]["why"])
        self.assertIn("uncommitted", self.status(self.catalog({"git_sha": self.sha, "files_dirty": True}))["early"]["why"])
        self.assertEqual(self.status(self.catalog({"git_sha": self.sha + "+dirty"}))["early"]["status"], "stale")
        shutil.rmtree(self.repo / ".git")
        self.assertIn("no git history", self.status(self.catalog({"git_sha": self.sha}))["early"]["why"])

    def test_a_missed_fault_is_never_caught(self):
        self.assertEqual(self.status(self.catalog({"git_sha": self.sha}, detected=False))["early"]["status"], "missed")

    def test_the_summary_header_counts_caught_and_stale(self):
        catalog = self.catalog({"git_sha": self.sha})
        header = fc.summary_header(catalog, fc.fault_status(catalog, self.spec, root=self.repo))
        self.assertIn("kFaultCatalogCpuCaught = 1, kFaultCatalogCpuStale = 0", header)
        self.point.write_text("// moved\n")
        header = fc.summary_header(catalog, fc.fault_status(catalog, self.spec, root=self.repo))
        self.assertIn("kFaultCatalogCpuCaught = 0, kFaultCatalogCpuStale = 1", header)


@unittest.skipIf(BUILD is None, "no build folder given")
class ThisBuild(unittest.TestCase):
    def test_the_reports_compile_this_trees_counts(self):
        """The header the build compiled into its reports holds the script's count for this tree."""
        header = (BUILD / "reports" / "generated" / "fault_catalog_summary.hpp").read_text()
        statuses = fc.fault_status(json.loads((ROOT / "docs" / "faults" / "catalog.json").read_text()))
        counts = fc.status_counts(statuses)
        for side in ("cpu", "gpu"):
            name = side.capitalize()
            self.assertIn(f"kFaultCatalog{name}Caught = {counts[side]['caught']}, kFaultCatalog{name}Stale = "
                          f"{counts[side]['stale']}", header)
        print(f"fault catalog in this tree: {fc.caught_text(counts)} of {counts['faults']}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
