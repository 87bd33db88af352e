#!/usr/bin/env bash
# Installs the Python packages the `pararnn` module builds and tests against, from PyPI through
# pip, into the interpreter that builds it ($PARARNN_PYTHON, default python3): nanobind (the
# binding library, never vendored) and numpy (the CPU tests, written with unittest: no pytest).
# With PARARNN_TORCH=1 (the default under CI, i.e. when CI is set; 0 turns it off) also torch
# 2.11.0 and pararnn-torch 0.17.4 (the versions of the GPU machine and of the peer), so that
# python.test_torch runs its CPU tests (autograd, gradcheck, the training loop beside
# pararnn-torch) instead of skipping: PyPI's Linux torch is the CUDA build (about 3.5 GB with its
# NVIDIA libraries, 1.5 min to install here; it runs on a machine without a GPU), and the CPU
# wheel index is not reachable from these machines. A failed torch install then fails this script.
# Idempotent: pip runs only when one is missing. Offline machines: PARARNN_WHEELS=<folder of .whl files> installs from
# that folder without an index (pip download nanobind numpy -d <folder> makes one).
set -euo pipefail
python=${PARARNN_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "python-deps: $python not found; the Python module is not built" >&2
  exit 0
fi
install() {  # install PACKAGE...
  echo "python-deps: installing $* for $("$python" --version 2>&1)"
  if [ -n "${PARARNN_WHEELS:-}" ]; then
    "$python" -m pip install --no-index --find-links "$PARARNN_WHEELS" "$@"
  else
    "$python" -m pip install --disable-pip-version-check "$@"
  fi
}
missing=()
for module in nanobind numpy; do
  "$python" -c "import $module" 2>/dev/null || missing+=("$module")
done
[ ${#missing[@]} -eq 0 ] || install "${missing[@]}"
torch_default=0
[ -n "${CI:-}" ] && [ "${CI}" != false ] && torch_default=1
if [ "${PARARNN_TORCH:-$torch_default}" = 1 ]; then
  "$python" -c "import torch, pararnn" 2>/dev/null ||
    install torch==2.11.0 pararnn-torch==0.17.4 ||
    { echo "python-deps: PARARNN_TORCH=1 but torch 2.11.0 and pararnn-torch 0.17.4 did not install (PARARNN_TORCH=0 skips them; python.test_torch then exits 77)" >&2; exit 1; }
fi
