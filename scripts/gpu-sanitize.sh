#!/usr/bin/env bash
# Runs NVIDIA compute-sanitizer over every GPU test executable of a CUDA build, with each of its
# four tools, and summarises the errors per tool and executable (on the GPU machine; the GPU
# executables exit 77 without a device, reported as "skipped" and not counted as clean).
#   memcheck   out-of-bounds and misaligned device accesses, leaks (--leak-check full)
#   racecheck  shared-memory hazards between threads of a block (a missing barrier)
#   synccheck  illegal __syncthreads / warp-synchronous use
#   initcheck  device global memory read before it was written
# racecheck and initcheck are one to two orders of magnitude slower than memcheck; for them the
# property suites run a subset (the filters below, named per executable); memcheck and
# synccheck run everything.
# Usage: scripts/gpu-sanitize.sh [build folder, default build] [tool...]
#   SANITIZE_EXECUTABLES="kernels_cuda_tests m2rnn_tests_cuda"  only these (default: every one)
#   SANITIZE_JOBS=N       N sanitizer runs at once (default 1; they share the GPU)
#   SANITIZE_TIMEOUT=S    a run still going after S seconds is stopped and reported "timeout"
# Writes $build/gpu-sanitize/<tool>-<exe>.log and prints a table; exits 1 when any tool found
# an error, a run timed out or failed, or an executable of the selection is not built.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck initcheck)
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[ -x "$sanitizer" ] || { echo "gpu-sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
# Every executable of the ctest label cuda (kernels_cuda_tests and the *_cuda suites).
mapfile -t executables < <(cd "$build" && ctest -L cuda --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
seen = []
for t in json.load(sys.stdin).get("tests", []):
    exe = (t.get("command") or [""])[0]
    if exe and exe not in seen:
        seen.append(exe)
print("\n".join(seen))')
[ ${#executables[@]} -gt 0 ] || { echo "gpu-sanitize: no GPU test executable under $build (a CUDA build?)"; exit 2; }
if [ -n "${SANITIZE_EXECUTABLES:-}" ]; then
  selected=()
  for want in $SANITIZE_EXECUTABLES; do
    found=""
    for exe in "${executables[@]}"; do [ "$(basename "$exe")" = "$want" ] && found=$exe; done
    [ -n "$found" ] || { echo "gpu-sanitize: SANITIZE_EXECUTABLES names $want, not a GPU test executable of $build"; exit 2; }
    selected+=("$found")
  done
  executables=("${selected[@]}")
fi
# The subset where a tool would take too long: gtest filters per executable and tool (everything
# else runs whole). kernels_cuda_tests' long scans (T = 2^22 steps, the dense scans over every
# chunking) take seconds natively and hours under any tool; racecheck and initcheck are one to
# two orders of magnitude slower than memcheck, so the property suites run a subset there.
kernels_long="*LongRunsWithoutZerosAreExact*:*LongSequencesCarryExactlyAcrossEveryChunk*:*FourMillionSteps*:*AgreesWithAHigherPrecisionSubstitutionWithinTheScanBand*"
slow_filter() {
  case "$(basename "$1"):$2" in
    property_tests_cuda:racecheck|property_tests_cuda:initcheck)
      echo "BackendEquivalence.*:CudaBackend.*:Decode.*" ;;
    gradient_tests_cuda:racecheck|gradient_tests_cuda:initcheck)
      echo "*/EveryCell.RecomputeIsBitwiseEqual/*:*PackedGradientsArePerSegment*" ;;
    kernels_cuda_tests:racecheck)  # 8 scan tests took 240 s on the H200: the small kernels' tests
      echo "*Launcher*:*Rules*:*Arguments*:TileMaxKernel*:Rwkv7Elements*:M2rnnKernels*:PicardPass*:DyadicScan/S1_f32.MisalignedArraysTakeTheScalarPathExactly" ;;
    kernels_cuda_tests:*)  # memcheck/initcheck stalled in the dense scans over every chunking
      echo "*-$kernels_long:*DenseScan*EqualsSequentialSubstitutionBitwiseForEveryChunking*" ;;
    m2rnn_tests_cuda:racecheck|m2rnn_tests_cuda:initcheck)
      echo "M2rnn.GpuEqualsCpuWithinTau:M2rnn.OneStepIsExactlyTheSequentialStep" ;;
    *) echo "*" ;;
  esac
}
out="$build/gpu-sanitize"
mkdir -p "$out"
export PARARNN_REQUIRE_CUDA=${PARARNN_REQUIRE_CUDA:-1}
export RC_PARAMS=${RC_PARAMS:-max_success=20}
# One run: the tool over one executable; its status line goes to $log.status.
run_one() {
  local tool=$1 exe=$2 name log filter rc errors hazards result start
  name=$(basename "$exe")
  log="$out/$tool-$name.log"
  filter=$(slow_filter "$exe" "$tool")
  local extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  local limit=()
  [ -n "${SANITIZE_TIMEOUT:-}" ] && limit=(timeout --kill-after=30 "$SANITIZE_TIMEOUT")
  start=$(date +%s)
  if [ ! -x "$exe" ]; then
    printf '%-10s %-32s %8s %6s %s\n' "$tool" "$name" - - "not built ($exe)" >"$log.status"
    return
  fi
  "${limit[@]}" "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 100 \
    "$exe" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | awk '{s += $3} END {print s + 0}')
  hazards=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' "$log" | awk '{s += $3} END {print s + 0}')
  errors=$((errors + hazards))
  case $rc in
    0) result=ok ;;
    77) result=skipped ;;
    99) result="errors (see $log)" ;;
    124|137) result="timeout after ${SANITIZE_TIMEOUT}s (see $log)" ;;
    *) result="exit $rc (see $log)" ;;
  esac
  [ "$errors" -gt 0 ] && [ $rc -eq 0 ] && result="errors (see $log)"
  local tests
  tests=$(grep -oE '^\[  PASSED  \] [0-9]+ test' "$log" | awk '{print $4}' | tail -1)
  printf '%-10s %-32s %8s %6s %s\n' "$tool" "$name" "$errors" "${tests:--}" "$result  [$(( $(date +%s) - start )) s, filter $filter]" >"$log.status"
}

jobs_max=${SANITIZE_JOBS:-1}
for tool in "${tools[@]}"; do
  for exe in "${executables[@]}"; do
    rm -f "$out/$tool-$(basename "$exe").log.status"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_one "$tool" "$exe" &
  done
done
wait
failed=0
printf '%-10s %-32s %8s %6s %s\n' tool executable errors tests result
for tool in "${tools[@]}"; do
  for exe in "${executables[@]}"; do
    status="$out/$tool-$(basename "$exe").log.status"
    if [ -f "$status" ]; then cat "$status"; else echo "$tool $(basename "$exe"): no status (the run died)"; failed=1; continue; fi
    grep -qE ' ok  \[' "$status" || failed=1  # skipped (no device) checked nothing
  done
done
exit $failed
