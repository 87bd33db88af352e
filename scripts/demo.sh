#!/usr/bin/env bash
# The main job on a built-in default: build, make a GRU case, verify it against the oracle and
# print the report (also written as JSON to build/demo/report.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build=${PARARNN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target pararnn
mkdir -p "$build/demo"
"$build/tools/pararnn" env
"$build/tools/pararnn" make-case --cell gru --seed 1 --batch 4 --time 4096 --d-in 16 --d-h 64 \
  --dtype f32 --out "$build/demo/case.safetensors"
"$build/tools/pararnn" verify "$build/demo/case.safetensors" --json "$build/demo/report.json"
