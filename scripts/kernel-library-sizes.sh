#!/usr/bin/env bash
# Prints docs/cmake.md's table of binary sizes (static kernels, then the shared kernels library)
# and the number of symbols libpararnn_kernels.so exports (kernels/exports.map), from two CUDA
# builds of the same tree: one with -DPARARNN_SHARED_KERNELS=OFF, one with the default ON.
# Usage: scripts/kernel-library-sizes.sh STATIC_BUILD SHARED_BUILD
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 STATIC_BUILD SHARED_BUILD" >&2; exit 2; }
static=$1 shared=$2
binaries=("kernels_cuda_tests:kernels/kernels_cuda_tests" "property_tests_cuda:property_tests/property_tests_cuda"
          "gradient_tests_cuda:property_tests/gradient_tests_cuda" "dense_cell_tests_cuda:property_tests/dense_cell_tests_cuda"
          "rwkv7_tests_cuda:property_tests/rwkv7_tests_cuda" "m2rnn_tests_cuda:property_tests/m2rnn_tests_cuda"
          "pararnn (CLI):tools/pararnn" "pararnn_bench_targets:bench/pararnn_bench_targets")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
size_of() { [ -f "$1" ] && stat -c %s "$1" || echo 0; }
module() { ls "$1"/python/pararnn_judge/_pararnn*.so 2>/dev/null | head -1; }
total_static=0 total_shared=0
echo "| binary | static | shared |"
echo "|---|---|---|"
for entry in "${binaries[@]}"; do
  name=${entry%%:*} path=${entry#*:}
  a=$(size_of "$static/$path") b=$(size_of "$shared/$path")
  total_static=$((total_static + a)) total_shared=$((total_shared + b))
  echo "| $name | $(mb "$a") | $(mb "$b") |"
done
a=$(size_of "$(module "$static")") b=$(size_of "$(module "$shared")")
total_static=$((total_static + a)) total_shared=$((total_shared + b))
echo "| Python module | $(mb "$a") | $(mb "$b") |"
lib=$shared/lib/libpararnn_kernels.so
b=$(size_of "$lib")
total_shared=$((total_shared + b))
echo "| libpararnn_kernels.so | | $(mb "$b") |"
echo "| **all** | **$(mb "$total_static")** | **$(mb "$total_shared")** |"
if [ -f "$lib" ]; then
  echo "exported symbols: $(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWVi]$/' | wc -l)"
fi
