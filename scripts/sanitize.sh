#!/usr/bin/env bash
# Builds the host test suite under AddressSanitizer + UndefinedBehaviorSanitizer in its own
# folder (the CMakePresets.json "sanitize" settings: Debug, no CUDA, no Python, no benchmarks)
# and runs it with ctest. Not part of the default CI (it is several times slower than the
# Release suite); docs/testing.md gives the last figure. Any sanitizer report fails the test
# that raised it (halt_on_error, abort_on_error).
# Usage: scripts/sanitize.sh [ctest arguments...]     e.g. scripts/sanitize.sh -L fast -LE nightly
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=${PARARNN_SANITIZE_BUILD_DIR:-$root/build-sanitize}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DPARARNN_CUDA=OFF -DPARARNN_PYTHON=OFF \
  -DPARARNN_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
start=$(date +%s)
cmake --build "$build" -j "$(nproc)"
built=$(date +%s)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
set +e
ctest --output-on-failure -j "$(nproc)" --timeout 3600 "$@"
rc=$?
set -e
echo "sanitize: build $((built - start)) s, tests $(( $(date +%s) - built )) s, ctest exit $rc"
exit $rc
