#!/usr/bin/env bash
# The GPU machine's side of scripts/gpu-bundle.sh: extracts the parts given (into the tree, where
# they were packed from) and, with --run, runs a command with the bundle's shared libraries and
# the machine's cuBLAS/NCCL folders on LD_LIBRARY_PATH.
# Usage (on the GPU machine, repository root):
#   scripts/gpu-unpack.sh build-carry/part-2.tar.xz [more parts]
#   scripts/gpu-unpack.sh [parts…] --run ctest --test-dir build -L cuda --no-tests=error -j8
#   BUNDLE_BUILD=build-gpu scripts/gpu-unpack.sh --run …   (a bundle packed from another folder)
# Exits with the command's status (2 for a part that is missing or not an archive).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
while [ $# -gt 0 ] && [ "$1" != --run ]; do
  [ -f "$1" ] || { echo "gpu-unpack: no part $1" >&2; exit 2; }
  tar -xJf "$1" || { echo "gpu-unpack: $1 is not an xz tar archive" >&2; exit 2; }
  shift
done
[ $# -eq 0 ] && exit 0
shift  # --run
[ $# -gt 0 ] || { echo "gpu-unpack: --run needs a command" >&2; exit 2; }
build=${BUNDLE_BUILD:-build}
cuda_dirs=$(find / -xdev \( -name 'libcublas.so.1*' -o -name 'libcublasLt.so.1*' -o -name 'libnccl.so*' \) \
              -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH="$root/$build/lib:${cuda_dirs}${LD_LIBRARY_PATH:-}"
"$@"
