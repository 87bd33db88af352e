#!/usr/bin/env bash
# Packs a CUDA build for the GPU machine in parts that each fit one device call. A call carries
# the working tree and what it names, at most 64 MiB in all, and the GPU test executables
# together are about 150 MiB compressed, so they travel in several calls while the machine stays
# warm (it keeps the build folder between back-to-back calls).
#
# Usage (here): scripts/gpu-bundle.sh [--build DIR] [--no-bench | --bench NAMES] [--budget-mib N]
#   NAMES a comma-separated subset of the benchmarks (e.g. pararnn_bench_targets); default all four
#   DIR   a configured CUDA build (default build; -DPARARNN_CUDA=ON, e.g. CMAKE_CUDA_ARCHITECTURES=90);
#         the GPU targets are built in it first (incrementally)
#   N     the size limit of one part (default: 64 MiB less the tree's size less 1 MiB)
# Writes build-carry/part-<i>.tar.xz (i = 1 … n) and build-carry/parts.txt (each part's size and
# executables). Every part holds whole stripped executables under DIR's relative path; part 1 also
# holds the ctest files (CTestTestfile.cmake and the discovered-test includes), the non-system
# shared libraries in DIR/lib (the GPU machine is Ubuntu 24.04 without Debian's fmt/spdlog) and
# the Python module where DIR has one.
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
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build_rel=${2:?--build needs a folder}; shift 2 ;;
    --no-bench) with_bench=0; shift ;;
    --bench) benches=${2:?--bench needs a comma-separated list}; shift 2 ;;
    --budget-mib) budget_mib=${2:?--budget-mib needs a number}; shift 2 ;;
    *) echo "gpu-bundle: unknown argument '$1' (usage: scripts/gpu-bundle.sh [--build DIR] [--no-bench | --bench NAMES] [--budget-mib N])" >&2
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

# Each executable stripped and compressed alone, to know its share of a part.
declare -A exe_size
for t in "${targets[@]}"; do
  d="$stage/exe-$t/$build_rel/$(dirname "${exe_path[$t]}")"
  mkdir -p "$d"
  strip -o "$d/$t" "$build/${exe_path[$t]}"
  XZ_OPT="-6 -T$(nproc)" tar -C "$stage/exe-$t" -cJf "$stage/$t.tar.xz" "$build_rel"
  exe_size[$t]=$(stat -c %s "$stage/$t.tar.xz")
done
XZ_OPT="-6 -T$(nproc)" tar -C "$stage/common" -cJf "$stage/common.tar.xz" "$build_rel"
common_size=$(stat -c %s "$stage/common.tar.xz")

# First fit, largest first; part 1 starts with the common files.
mapfile -t order < <(for t in "${targets[@]}"; do echo "${exe_size[$t]} $t"; done | sort -rn | awk '{print $2}')
declare -a part_size part_exes
part_size[1]=$common_size
part_exes[1]=""
n=1
for t in "${order[@]}"; do
  s=${exe_size[$t]}
  if [ $((s + 65536)) -gt "$budget" ]; then
    echo "gpu-bundle: $t alone is $((s / 1048576)) MiB compressed, over the ${budget_mib} MiB limit of a part" >&2
    exit 1
  fi
  placed=0
  for ((i = 1; i <= n; i++)); do
    if [ $((part_size[i] + s + 65536)) -le "$budget" ]; then
      part_size[i]=$((part_size[i] + s)); part_exes[i]="${part_exes[i]} $t"; placed=1; break
    fi
  done
  if [ "$placed" = 0 ]; then n=$((n + 1)); part_size[n]=$s; part_exes[n]=" $t"; fi
done

for ((i = 1; i <= n; i++)); do
  dir="$stage/part-$i"
  mkdir -p "$dir"
  [ "$i" = 1 ] && cp -a "$stage/common/$build_rel" "$dir/"
  for t in ${part_exes[i]}; do cp -a "$stage/exe-$t/$build_rel" "$dir/"; done
  XZ_OPT="-6 -T$(nproc)" tar -C "$dir" -cJf "$carry/part-$i.tar.xz" "$build_rel"
  size=$(stat -c %s "$carry/part-$i.tar.xz")
  if [ "$size" -gt "$budget" ]; then
    echo "gpu-bundle: build-carry/part-$i.tar.xz is $((size / 1048576)) MiB, over the ${budget_mib} MiB limit" >&2
    exit 1
  fi
  echo "part-$i.tar.xz $((size / 1048576)) MiB:${part_exes[i]}$([ "$i" = 1 ] && echo ' (+ ctest files, lib/)')" \
    | tee -a "$carry/parts.txt"
done
echo "gpu-bundle: $n parts of at most ${budget_mib} MiB in build-carry/ (parts.txt)"
