#!/usr/bin/env bash
# Packs a CUDA build for the GPU machine in parts that each fit one device call. A call carries
# the working tree and what it names, at most 64 MiB in all; the GPU executables share most of
# their bytes, so a solid archive holds them all in about 30 MiB (one part, one call); a part over
# the limit is split in two.
#
# Usage (here): scripts/gpu-bundle.sh [--build DIR] [--no-bench | --bench NAMES] [--budget-mib N]
#                                    [--self-contained] [--targets NAMES]
#   NAMES a comma-separated subset of the benchmarks (e.g. pararnn_bench_targets); default all four
#   DIR   a configured CUDA build (default build; -DPARARNN_CUDA=ON, e.g. CMAKE_CUDA_ARCHITECTURES=90);
#         the GPU targets are built in it first (incrementally)
#   N     the size limit of one part (default: 64 MiB less the tree's size less 1 MiB)
#   --self-contained  every part carries the common files (ctest files, lib/, the Python module),
#         so that each part runs in a call of its own, on a fresh machine (without it, parts after
#         the first need part 1 unpacked by a call on the same warm machine, which is given back
#         30 s after a call)
#   --targets NAMES   a comma-separated subset of the GPU executables to pack (default: all of
#         them and the benchmarks), e.g. --targets pararnn,property_tests_cuda for the Python tests
# Writes build-carry/part-<i>.tar.xz (i = 1 … n, usually 1) and build-carry/parts.txt (each part's
# size and executables). Every part holds whole stripped executables under DIR's relative path; part 1 also
# holds the ctest files (CTestTestfile.cmake and the discovered-test includes), the non-system
# shared libraries in DIR/lib (the GPU machine is Ubuntu 24.04 without Debian's fmt/spdlog; and
# libpararnn_kernels.so, which every GPU executable links by default) and the Python module where
# DIR has one.
# Objects and archives stay here. Exits 1 when an executable alone is over the limit.
#
# On the GPU machine, one call per part (carry ["build-carry/part-<i>.tar.xz"]):
#   scripts/gpu-unpack.sh build-carry/part-<i>.tar.xz
# and in the last call, after its part:
#   scripts/gpu-unpack.sh --run ctest --test-dir build -L cuda --no-tests=error -j8
# (gpu-unpack.sh --run sets LD_LIBRARY_PATH to DIR/lib and the machine's cuBLAS/NCCL folders).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_rel=build
with_bench=1
benches="pararnn_bench_scan,pararnn_bench_newton,pararnn_bench_shapes,pararnn_bench_targets"
budget_mib=""
self_contained=0
only_targets=""
while [ $# -gt 0 ]; do
  case "$1" in
    --self-contained) self_contained=1; shift ;;
    --targets) only_targets=${2:?--targets needs a comma-separated list}; shift 2 ;;
    --build) build_rel=${2:?--build needs a folder}; shift 2 ;;
    --no-bench) with_bench=0; shift ;;
    --bench) benches=${2:?--bench needs a comma-separated list}; shift 2 ;;
    --budget-mib) budget_mib=${2:?--budget-mib needs a number}; shift 2 ;;
    *) echo "gpu-bundle: unknown argument '$1' (usage: scripts/gpu-bundle.sh [--build DIR] [--no-bench | --bench NAMES] [--budget-mib N] [--self-contained] [--targets NAMES])" >&2
       exit 2 ;;
  esac
done
build="$root/$build_rel"
[ -f "$build/CMakeCache.txt" ] || { echo "gpu-bundle: --build $build_rel is not a configured CMake build" >&2; exit 2; }
grep -Eq '^PARARNN_CUDA:[A-Z]+=(ON|TRUE|1)$' "$build/CMakeCache.txt" ||
  { echo "gpu-bundle: --build $build_rel is not a CUDA build (configure with -DPARARNN_CUDA=ON)" >&2; exit 2; }

targets=(kernels_cuda_tests property_tests_cuda gradient_tests_cuda dense_cell_tests_cuda rwkv7_tests_cuda
         m2rnn_tests_cuda pararnn)
[ "$with_bench" = 1 ] && IFS=, read -r -a bench_list <<< "$benches" && targets+=("${bench_list[@]}")
if [ -n "$only_targets" ]; then
  IFS=, read -r -a wanted <<< "$only_targets"
  for t in "${wanted[@]}"; do
    printf '%s\n' "${targets[@]}" | grep -qx "$t" ||
      { echo "gpu-bundle: --targets: '$t' is not one of: ${targets[*]}" >&2; exit 2; }
  done
  targets=("${wanted[@]}")
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

if [ -z "$budget_mib" ]; then
  # The tree a call carries: tracked files and untracked ones git does not ignore.
  tree_bytes=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
                 { xargs -0 -r stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
  budget_mib=$(( 64 - (tree_bytes + 1048575) / 1048576 - 1 ))
fi
budget=$(( budget_mib * 1048576 ))

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
carry="$root/build-carry"
mkdir -p "$carry"
rm -f "$carry"/part-*.tar.xz "$carry/parts.txt"

# Part 1's fixed content: the ctest files and the shared libraries.
common="$stage/common/$build_rel"
mkdir -p "$common/lib"
(cd "$build" && find . \( -path ./CMakeFiles -o -path './*/CMakeFiles' -o -path ./cmake-consumer \) -prune -o \
   \( -name '*.cmake' -o -name CTestTestfile.cmake \) -print) | while read -r f; do
  mkdir -p "$common/$(dirname "$f")"; cp "$build/$f" "$common/$f"; done
# The Python module where the build has one (-DPARARNN_PYTHON=ON; docs/python.md).
if [ -d "$build/python" ]; then
  (cd "$build" && find python -path '*/CMakeFiles' -prune -o -type f \( -name '*.so' -o -name '*.py' \) -print) |
    while read -r f; do mkdir -p "$common/$(dirname "$f")"; cp "$build/$f" "$common/$f"; done
fi
declare -A exe_path
for t in "${targets[@]}"; do
  p=$(cd "$build" && find . -path ./cmake-consumer -prune -o -type f -name "$t" -perm -u+x -print | head -1)
  [ -n "$p" ] || { echo "gpu-bundle: $t was not built in $build_rel" >&2; exit 1; }
  exe_path[$t]=${p#./}
  ldd "$build/${p#./}" | awk '/=> \// {print $3}' | grep -E 'lib(fmt|spdlog|gomp|quadmath|mpfr|gmp)' \
    | xargs -r -I{} cp -Lu {} "$common/lib/" || true
done

# The shared kernels library (PARARNN_SHARED_KERNELS, cmake/cuda.cmake) the executables link.
find "$build/lib" -maxdepth 1 -name 'libpararnn_kernels.so*' -exec cp -a {} "$common/lib/" \; 2>/dev/null || true

# Each executable stripped, into its own staging folder.
for t in "${targets[@]}"; do
  d="$stage/exe-$t/$build_rel/$(dirname "${exe_path[$t]}")"
  mkdir -p "$d"
  strip -o "$d/$t" "$build/${exe_path[$t]}"
done

# Parts are solid xz archives with a dictionary larger than an executable: the executables share
# most of their bytes (every one links all kernels), so each one after the first costs a few MiB
# (2026-12-05: all eight GPU targets and the common files in 30 MiB, one call, where compressing
# them one by one took eight). A group over the limit is split in two, recursively.
n=0
pack_group() {  # executables...; part 1 takes the common files
  local dir="$stage/group" archive="$stage/try.tar.xz" t
  rm -rf "$dir"; mkdir -p "$dir"
  { [ "$n" = 0 ] || [ "$self_contained" = 1 ]; } && cp -a "$stage/common/$build_rel" "$dir/"
  for t in "$@"; do cp -a "$stage/exe-$t/$build_rel" "$dir/"; done
  XZ_OPT="-9 --lzma2=dict=256MiB -T1" tar -C "$dir" -cJf "$archive" "$build_rel"
  local size
  size=$(stat -c %s "$archive")
  if [ "$size" -gt "$budget" ]; then
    if [ $# -eq 1 ]; then
      echo "gpu-bundle: $1 alone is $((size / 1048576)) MiB compressed, over the ${budget_mib} MiB limit of a part" >&2
      exit 1
    fi
    local half=$(( $# / 2 ))
    pack_group "${@:1:half}"
    pack_group "${@:half+1}"
    return
  fi
  n=$((n + 1))
  mv "$archive" "$carry/part-$n.tar.xz"
  echo "part-$n.tar.xz $((size / 1048576)) MiB: $*$({ [ "$n" = 1 ] || [ "$self_contained" = 1 ]; } && echo ' (+ ctest files, lib/)')" | tee -a "$carry/parts.txt"
}
pack_group "${targets[@]}"
echo "gpu-bundle: $n parts of at most ${budget_mib} MiB in build-carry/ (parts.txt)"
