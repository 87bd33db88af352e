#!/usr/bin/env bash
# `pip install .` as a new user runs it (ctest package.pip_install, label "package"): a fresh
# virtual environment, `pip install` of this tree (scikit-build-core builds the module and the CLI
# from scratch: 7 to 25 minutes on 2 cores by their load, hence its own label, which scripts/test.sh leaves
# out unless PARARNN_TEST_PACKAGE=1), then, outside the tree and with no PYTHONPATH, the installed
# package: it imports from the environment, docs/python.md's quick start runs as written
# (python/tests/test_docs.py), and the installed CLI makes a case and verifies it (exit 0).
# PARARNN_CUDA (default OFF here) is passed to the build, as pyproject.toml reads it.
# PARARNN_PIP_BUILD_DIR=DIR: scikit-build-core builds in DIR (its build-dir), reusing what a build
# of this tree there already compiled (scripts/test.sh passes its own build folder; the wheel is
# the same, the compile is not repeated); DIR's cache is left configured as pip configured it.
# Usage: scripts/check-pip-install.sh [python3]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
venv="$work/venv/bin"
start=$(date +%s)
reuse=()
[ -n "${PARARNN_PIP_BUILD_DIR:-}" ] && reuse=(--config-settings="build-dir=$PARARNN_PIP_BUILD_DIR")
PARARNN_CUDA=${PARARNN_CUDA:-OFF} "$venv/pip" install --disable-pip-version-check --quiet "${reuse[@]}" "$root"
echo "check-pip-install: pip install took $(( $(date +%s) - start )) s"
unset PYTHONPATH
cd "$work"
"$venv/python" - <<'PY'
import sys
import pararnn_judge
assert pararnn_judge.__file__.startswith(sys.prefix), f"imported {pararnn_judge.__file__}, not from {sys.prefix}"
print("check-pip-install: pararnn_judge from", pararnn_judge.__file__)
PY
PYTHONPATH="$root/python/tests" PARARNN_SOURCE_DIR="$root" PARARNN_CLI="$venv/pararnn" \
  "$venv/python" -m unittest -v test_docs
"$venv/pararnn" make-case --cell gru --seed 1 --batch 2 --time 256 --d-in 8 --d-h 16 --dtype f32 \
  --out "$work/case.safetensors"
"$venv/pararnn" verify "$work/case.safetensors"
echo "check-pip-install: passed"
