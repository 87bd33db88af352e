#!/usr/bin/env bash
# Builds the folder that travels to the GPU machine (build-gpu, git-ignored, < 64 MiB): Release,
# sm_90, stripped binaries of the CUDA tests, the benchmarks and the CLI, the non-system shared
# libraries they need (the GPU machine is Ubuntu 24.04 without Debian's libfmt/spdlog) in
# build-gpu/lib, found through the binaries' RPATH, and nothing else (objects and archives are
# deleted, so the next run of this script rebuilds).
# On the GPU machine: PARARNN_REQUIRE_CUDA=1 ctest --test-dir build-gpu -L cuda --no-tests=error
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-gpu"
cuda_lib_dirs="/usr/local/cuda/lib64;/usr/local/cuda-13.0/targets/x86_64-linux/lib"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARARNN_CUDA=ON \
  -DCMAKE_EXE_LINKER_FLAGS=-s -DCMAKE_BUILD_RPATH="$build/lib;$cuda_lib_dirs" >/dev/null
targets=(kernels_cuda_tests property_tests_cuda pararnn_bench_scan pararnn_bench_newton pararnn)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
mkdir -p "$build/lib"
for bin in "$build/kernels/kernels_cuda_tests" "$build/property_tests/property_tests_cuda" "$build/tools/pararnn"; do
  ldd "$bin" | awk '/=> \// {print $3}' | grep -E 'lib(fmt|spdlog|gomp|quadmath|mpfr|gmp)' \
    | xargs -r -I{} cp -Lu {} "$build/lib/" || true
done
find "$build" \( -name '*.o' -o -name '*.a' \) -delete
du -sh "$build"
