#!/usr/bin/env bash
# Builds pararnn and runs its test suite (the README's test command; CI runs exactly this).
# Installs missing Debian packages first, and nanobind + numpy for python3 (scripts/python-deps.sh)
# so that the Python module and its tests are built and run too. GPU tests are compiled when nvcc is present and are
# skipped (exit 77) without a GPU unless PARARNN_REQUIRE_CUDA=1.
# Then the install path a user takes (scripts/check-pip-install.sh): `pip install .` into a fresh
# venv, the module and the CLI from it. That pip build reuses this build folder's objects
# (scikit-build-core's build-dir = this folder), so it costs a configure, the module and two links
# instead of its own 10-minute compile; PARARNN_TEST_PACKAGE=0 skips it. The ctest label "package"
# (the same check with a from-scratch build) runs only with PARARNN_TEST_PACKAGE=1.
# Usage: scripts/test.sh [ctest arguments...]   e.g. scripts/test.sh -L fast
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/python-deps.sh"
build=${PARARNN_BUILD_DIR:-$root/build}
# The pip check below configures this folder as scikit-build-core does (SKBUILD, the tests off, its
# isolated environment's Python): every run restores the test build's settings first.
python=$(python3 -c 'import sys; print(sys.executable)')
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -U 'SKBUILD*' \
  -DPARARNN_BUILD_TESTS=ON -DPARARNN_BUILD_BENCH=ON -DPython_EXECUTABLE="$python" \
  -Unanobind_DIR -DCMAKE_PREFIX_PATH= -DCMAKE_MODULE_PATH=
cmake --build "$build" -j "$(nproc)"
cd "$build"
package=(-LE package)
[ "${PARARNN_TEST_PACKAGE:-0}" = 1 ] && package=()
status=0
ctest --output-on-failure -j "$(nproc)" --timeout 900 "${package[@]}" "$@" || status=$?
if [ "${PARARNN_TEST_PACKAGE:-}" != 0 ]; then
  cuda=$(sed -n 's/^PARARNN_CUDA:[A-Z]*=//p' "$build/CMakeCache.txt")
  PARARNN_CUDA=${cuda:-AUTO} PARARNN_PIP_BUILD_DIR=$build "$root/scripts/check-pip-install.sh" "$python" ||
    { echo "test.sh: the pip install check failed" >&2; status=1; }
fi
exit "$status"
