#!/usr/bin/env bash
# Runs NVIDIA compute-sanitizer over every GPU test executable of a CUDA build, with each of its
# four tools, and summarises the errors per tool and executable (on the GPU machine; the GPU
# executables exit 77 without a device, which is reported as "skipped").
#   memcheck   out-of-bounds and misaligned device accesses, leaks (--leak-check full)
#   racecheck  shared-memory hazards between threads of a block (a missing barrier)
#   synccheck  illegal __syncthreads / warp-synchronous use
#   initcheck  device global memory read before it was written
# racecheck and initcheck are one to two orders of magnitude slower than memcheck; for them the
# property suites run a subset (the filters below, named per executable); memcheck and
# synccheck run everything.
# Usage: scripts/gpu-sanitize.sh [build folder, default build] [tool...]
# Writes $build/gpu-sanitize/<tool>-<exe>.log and prints a table; exits 1 when any tool found
# an error.
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
# The subset of the slow tools: gtest filters per executable (everything else runs whole).
slow_filter() {
  case "$(basename "$1"):$2" in
    property_tests_cuda:racecheck|property_tests_cuda:initcheck)
      echo "BackendEquivalence.*:CudaBackend.*:Decode.*" ;;
    gradient_tests_cuda:racecheck|gradient_tests_cuda:initcheck)
      echo "*/EveryCell.RecomputeIsBitwiseEqual/*:*PackedGradientsArePerSegment*" ;;
    kernels_cuda_tests:racecheck|kernels_cuda_tests:initcheck)  # the T = 2^22 scans take hours
      echo "*-*LongRunsWithoutZerosAreExact*:*LongSequencesCarryExactlyAcrossEveryChunk*" ;;
    m2rnn_tests_cuda:racecheck|m2rnn_tests_cuda:initcheck)
      echo "M2rnn.GpuEqualsCpuWithinTau:M2rnn.OneStepIsExactlyTheSequentialStep" ;;
    *) echo "*" ;;
  esac
}
out="$build/gpu-sanitize"
mkdir -p "$out"
export PARARNN_REQUIRE_CUDA=${PARARNN_REQUIRE_CUDA:-1}
export RC_PARAMS=${RC_PARAMS:-max_success=20}
failed=0
printf '%-10s %-32s %8s %s\n' tool executable errors result
for tool in "${tools[@]}"; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  for exe in "${executables[@]}"; do
    name=$(basename "$exe")
    log="$out/$tool-$name.log"
    filter=$(slow_filter "$exe" "$tool")
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 100 \
      "$exe" --gtest_filter="$filter" >"$log" 2>&1
    rc=$?
    errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | awk '{s += $3} END {print s + 0}')
    hazards=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' "$log" | awk '{s += $3} END {print s + 0}')
    errors=$((errors + hazards))
    case $rc in
      0) result=ok ;;
      77) result=skipped ;;
      99) result="errors (see $log)"; failed=1 ;;
      *) result="exit $rc (see $log)"; failed=1 ;;
    esac
    [ "$errors" -gt 0 ] && [ $rc -eq 0 ] && { result="errors (see $log)"; failed=1; }
    printf '%-10s %-32s %8s %s\n' "$tool" "$name" "$errors" "$result"
  done
done
exit $failed
