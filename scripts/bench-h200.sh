#!/usr/bin/env bash
# Reproduces bench/results/h200-summary.json on the GPU machine in one command, after
# scripts/gpu-bundle.sh here and its parts unpacked there (scripts/gpu-unpack.sh, one call per
# part; the peers' wheels in .whl/ carried with the last one):
#   scripts/gpu-unpack.sh build-carry/part-<i>.tar.xz --run scripts/bench-h200.sh $OUT
# Runs our benchmarks (pararnn_bench_newton, pararnn_bench_shapes, pararnn_bench_scan,
# pararnn_bench_targets) and the
# peers (bench/peers/run_peers.py, from the wheels in .whl/), then bench/summarize.py. Every JSON
# lands in the output folder; a failing step is reported and the summary marks its targets
# unmeasured. BUNDLE_BUILD names the unpacked build folder (default build).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/bench-h200.sh OUTPUT_DIR}
mkdir -p "$out"
b="$root/${BUNDLE_BUILD:-build}/bench"
for exe in pararnn_bench_newton pararnn_bench_shapes pararnn_bench_scan pararnn_bench_targets; do
  [ -x "$b/$exe" ] || echo "bench-h200: $b/$exe is not unpacked (scripts/gpu-unpack.sh)" >&2
done
"$b/pararnn_bench_newton" --runs 10 >"$out/newton.json" 2>"$out/newton.err" || echo "bench-h200: pararnn_bench_newton failed" >&2
"$b/pararnn_bench_shapes" --runs 15 >"$out/shapes.json" 2>"$out/shapes.err" || echo "bench-h200: pararnn_bench_shapes failed" >&2
"$b/pararnn_bench_scan" >"$out/scan.json" 2>"$out/scan.err" || echo "bench-h200: pararnn_bench_scan failed" >&2
"$b/pararnn_bench_targets" --runs 10 >"$out/targets.json" 2>"$out/targets.err" || echo "bench-h200: pararnn_bench_targets failed" >&2
if compgen -G "$root/.whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$root"/.whl/*.whl &&
    PYTHONPATH=/tmp/site python3 "$root/bench/peers/run_peers.py" --out "$out/peers" || echo "bench-h200: peers failed" >&2
fi
python3 "$root/bench/summarize.py" --newton "$out/newton.json" --shapes "$out/shapes.json" --scan "$out/scan.json" \
  --targets "$out/targets.json" --peers "$out/peers/peers.json" --out "$out/h200-summary.json"
