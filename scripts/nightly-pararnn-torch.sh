#!/usr/bin/env bash
# The nightly plan against pararnn-torch (docs/examples/pararnn-torch-nightly), as it is run on the
# GPU machine: installs the pararnn-torch wheel carried in .whl/ (bench/peers/README.md) into a
# private folder, then runs `pararnn report nightly --solver` for two solver names at once:
# `pararnn-torch` (the library's default NewtonConfig) and `pararnn-torch-max-iters-none`
# (`NewtonConfig(max_iters=None)`: its K*(T) schedule), each with half the CPUs for the judge.
# The adapter runs as a file (python3 python/pararnn_judge/solvers/pararnn_torch.py): it needs
# only torch and pararnn-torch, not our compiled module, whose Python may differ from the GPU
# machine's. Extra arguments go to both campaigns (e.g. --T 64,1024 --time-budget 400).
#
# Usage: scripts/nightly-pararnn-torch.sh PARARNN OUT [nightly arguments...]
#   PARARNN  the pararnn CLI (e.g. build-gpu/tools/pararnn); OUT gets default/ and max-iters-none/
# Exits 1 when either campaign exits nonzero (a Disagree or Error row is a finding, not a crash:
# both reports are written either way; their logs are OUT/<name>.log).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: scripts/nightly-pararnn-torch.sh PARARNN OUT [nightly arguments...]" >&2; exit 2; }
cli=$1 out=$2
shift 2
wheel=$(ls "$root"/.whl/pararnn_torch-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "nightly-pararnn-torch: no pararnn_torch wheel in .whl/ (pip download --no-deps pararnn-torch==0.17.4 -d .whl)" >&2; exit 2; }
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheel" || exit 2
# The CPUs counted before OMP_NUM_THREADS is set: nproc honours it, and would say 1.
jobs=$(( ($(nproc) + 1) / 2 ))
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
adapter="python3 $root/python/pararnn_judge/solvers/pararnn_torch.py"
mkdir -p "$out"
run() {  # name, extra adapter flags
  "$cli" report nightly --out "$out/$1" --jobs "$jobs" \
    --solver "$adapter {case} {out}$2" --solver-name "$1" --solver-version-cmd "$adapter --version" "${@:3}" \
    > "$out/$1.log" 2>&1
}
run pararnn-torch "" "$@" &
a=$!
run pararnn-torch-max-iters-none " --max-iters none" "$@" &
b=$!
wait $a; ra=$?
wait $b; rb=$?
echo "nightly-pararnn-torch: pararnn-torch exit $ra, pararnn-torch-max-iters-none exit $rb"
[ "$ra" = 0 ] && [ "$rb" = 0 ]
