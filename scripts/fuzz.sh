#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang-14, ASan + UBSan, in their own build folder,
# and runs each one from its committed seed corpus (fuzz/corpus/<target>, read only: new inputs
# go to a scratch corpus in the build folder). Crashes and their inputs land in
# $build/fuzz-findings/<target>/. Prints one line per target: executions, seconds, result.
# Usage: scripts/fuzz.sh [seconds per target, default 60] [target...]
#   PARARNN_FUZZ_RUNS=1000000 scripts/fuzz.sh 0     # a fixed number of executions instead
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${PARARNN_FUZZ_BUILD_DIR:-$root/build-fuzz}
PARARNN_DEPS_FUZZ=1 "$root/scripts/install-deps.sh"
# clang finds GCC's libquadmath (Boost's float128 in the oracle) but not its header: lend it alone.
quadmath=$(find /usr/lib/gcc -name quadmath.h | sort | tail -1)
mkdir -p "$build/quadmath-include"
ln -sf "$quadmath" "$build/quadmath-include/quadmath.h"
flags="-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g -O1 -isystem $build/quadmath-include"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DPARARNN_FUZZ=ON -DPARARNN_CUDA=OFF -DPARARNN_PYTHON=OFF -DPARARNN_BUILD_BENCH=OFF >/dev/null
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_safetensors fuzz_case_readings fuzz_cu_seqlens fuzz_metadata fuzz_trajectory fuzz_report_json fuzz_op_case fuzz_op_answer)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  scratch="$build/fuzz-corpus/$t"
  findings="$build/fuzz-findings/$t"
  mkdir -p "$scratch" "$findings"
  limit=(-max_total_time="$seconds")
  [ "$seconds" = 0 ] && limit=(-runs="${PARARNN_FUZZ_RUNS:-1000000}")
  log="$build/fuzz-$t.log"
  start=$(date +%s)
  if "$build/fuzz/$t" "${limit[@]}" -max_len=65536 -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$findings/" "$scratch" "$root/fuzz/corpus/$t" >"$log" 2>&1; then
    result=ok
  else
    result="FINDING (see $log, inputs in $findings)"
    status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "$t: $runs executions in $(( $(date +%s) - start )) s: $result"
done
exit $status
