"""Shared helpers of the Python tests: the CLI, a scratch folder, a seeded input."""
import json
import os
import subprocess
import tempfile

CLI = os.environ.get("PARARNN_CLI", "pararnn")
SOURCE_DIR = os.environ.get("PARARNN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SEED = int(os.environ.get("PARARNN_TEST_SEED", "1"))
print(f"pararnn python tests: seed {SEED} (replay: PARARNN_TEST_SEED={SEED})")


def scratch():
    root = os.environ.get("PARARNN_TEST_ARTIFACTS")
    if root:
        os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix="pararnn-python-", dir=root)


def normal_input(shape, dtype="float32", seed=SEED):
    import numpy as np  # lazily: the torch tests run without numpy
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def cli(*args):
    """Runs the pararnn CLI; returns (exit code, stdout + stderr)."""
    done = subprocess.run([CLI, *args], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def cli_report(case_path, *args):
    """`pararnn verify case --json` -> (exit code, the JSON report)."""
    out = os.path.join(os.path.dirname(case_path), os.path.basename(case_path) + ".report.json")
    code, text = cli("verify", case_path, "--json", out, *args)
    if not os.path.exists(out):
        raise AssertionError(f"pararnn verify wrote no report (exit {code}):\n{text}")
    with open(out) as f:
        return code, json.load(f)
