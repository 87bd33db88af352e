#!/usr/bin/env bash
# Builds pararnn and runs its test suite (the README's test command; CI runs exactly this).
# Installs missing Debian packages first, and nanobind + numpy for python3 (scripts/python-deps.sh)
# so that the Python module and its tests are built and run too. GPU tests are compiled when nvcc is present and are
# skipped (exit 77) without a GPU unless PARARNN_REQUIRE_CUDA=1.
# The label "package" (`pip install .` into a fresh venv: its own 15-minute build) runs only with
# PARARNN_TEST_PACKAGE=1.
# Usage: scripts/test.sh [ctest arguments...]   e.g. scripts/test.sh -L fast
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/python-deps.sh"
build=${PARARNN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
cd "$build"
package=(-LE package)
[ "${PARARNN_TEST_PACKAGE:-0}" = 1 ] && package=()
ctest --output-on-failure -j "$(nproc)" --timeout 900 "${package[@]}" "$@"
