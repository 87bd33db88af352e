#!/usr/bin/env bash
# Installs the Python packages the `pararnn` module builds and tests against, from PyPI through
# pip, into the interpreter that builds it ($PARARNN_PYTHON, default python3): nanobind (the
# binding library, never vendored) and numpy (the CPU tests, written with unittest: no pytest).
# Idempotent: pip runs only when one is missing. Offline machines: PARARNN_WHEELS=<folder of .whl files> installs from
# that folder without an index (pip download nanobind numpy -d <folder> makes one).
set -euo pipefail
python=${PARARNN_PYTHON:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "python-deps: $python not found; the Python module is not built" >&2
  exit 0
fi
missing=()
for module in nanobind numpy; do
  "$python" -c "import $module" 2>/dev/null || missing+=("$module")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "python-deps: installing ${missing[*]} for $("$python" --version 2>&1)"
if [ -n "${PARARNN_WHEELS:-}" ]; then
  "$python" -m pip install --no-index --find-links "$PARARNN_WHEELS" "${missing[@]}"
else
  "$python" -m pip install --disable-pip-version-check "${missing[@]}"
fi
