#!/usr/bin/env bash
# Builds the folder that travels to the GPU machine (build-gpu, git-ignored, carried as
# build-carry/build-gpu.tar.xz, < 64 MiB): Release,
# sm_90, stripped binaries of the CUDA tests, the benchmarks and the CLI, the non-system shared
# libraries they need (the GPU machine is Ubuntu 24.04 without Debian's libfmt/spdlog) in
# build-gpu/lib, found through the binaries' RPATH; objects and archives stay here (the next run
# rebuilds incrementally) and are left out of the carried archive.
# On the GPU machine (carry ["build-carry"]): tar -xJf build-carry/build-gpu.tar.xz &&
#   PARARNN_REQUIRE_CUDA=1 ctest --test-dir build-gpu -L cuda --no-tests=error
# `--no-bench` leaves the benchmark binaries out (a tests-only bundle, well under the limit).
set -euo pipefail
with_bench=1
[ "${1:-}" = "--no-bench" ] && with_bench=0
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-gpu"
cuda_lib_dirs="/usr/local/cuda/lib64;/usr/local/cuda-13.0/targets/x86_64-linux/lib"
# SASS for the H200 only (sm_90, no PTX copy): the carried binaries stay small.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARARNN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DCMAKE_EXE_LINKER_FLAGS=-s -DCMAKE_BUILD_RPATH="$build/lib;$cuda_lib_dirs" >/dev/null
targets=(kernels_cuda_tests property_tests_cuda gradient_tests_cuda dense_cell_tests_cuda rwkv7_tests_cuda
         m2rnn_tests_cuda pararnn)
[ "$with_bench" = 1 ] && targets+=(pararnn_bench_scan pararnn_bench_newton pararnn_bench_shapes pararnn_bench_targets)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
mkdir -p "$build/lib"
for bin in "$build/kernels/kernels_cuda_tests" "$build/property_tests/property_tests_cuda" \
           "$build/property_tests/gradient_tests_cuda" "$build/property_tests/dense_cell_tests_cuda" \
           "$build/property_tests/rwkv7_tests_cuda" "$build/property_tests/m2rnn_tests_cuda" \
           "$build/tools/pararnn"; do
  ldd "$bin" | awk '/=> \// {print $3}' | grep -E 'lib(fmt|spdlog|gomp|quadmath|mpfr|gmp)' \
    | xargs -r -I{} cp -Lu {} "$build/lib/" || true
done
[ "$with_bench" = 1 ] || rm -f "$build/bench/pararnn_bench_scan" "$build/bench/pararnn_bench_newton" "$build/bench/pararnn_bench_shapes" "$build/bench/pararnn_bench_targets"
rm -rf "$build"/CMakeFiles/*/CompilerId*/tmp "$build"/CMakeFiles/CheckCUDA  # configure scratch
# The carried form: one xz archive (the stripped binaries compress about 4x), extracted on the
# GPU machine into the same absolute path.
carry="$root/build-carry"
mkdir -p "$carry"
# ctest needs the CTestTestfile.cmake files and the discovered-test includes beside them, not
# CMakeFiles/ (object files, dependency scans).
XZ_OPT="-9 -T2" tar -C "$root" -cJf "$carry/build-gpu.tar.xz" --exclude='*.o' --exclude='*.a' --exclude='.ninja_*' \
  --exclude='test-artifacts' --exclude='CMakeFiles' build-gpu
du -sh "$build" "$carry/build-gpu.tar.xz"
size_mib=$(du -sm "$carry/build-gpu.tar.xz" | cut -f1)
if [ "$size_mib" -gt 64 ]; then
  echo "build-carry/build-gpu.tar.xz is ${size_mib} MiB, over the 64 MiB a device run carries; largest files:" >&2
  find "$build" -type f -size +1M -printf '%s %p\n' | sort -rn | head -5 >&2
  echo "(run with --no-bench for a tests-only bundle)" >&2
  exit 1
fi
