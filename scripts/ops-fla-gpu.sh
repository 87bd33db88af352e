#!/usr/bin/env bash
# The op campaign against flash-linear-attention on the GPU machine (issue 56, docs/ops/README.md):
# installs the wheels carried in .whl/ (flash-linear-attention and what it needs beyond the
# machine's torch and triton, e.g. einops: `pip download --no-deps flash-linear-attention==0.X.Y
# einops -d .whl` here) into a private folder, then runs scripts/ops-campaign.sh with the fla
# adapter (python3 python/pararnn_judge/solvers/fla.py: torch and fla only, no build of our
# module) for the chunk and fused_recurrent modes. Every kept row (not Agree) is confirmed
# without our oracle by scripts/ops-confirm-fla.py (fla's own naive reference in f64, on the CPU:
# its numbers in the summary's confirm column and rows/<id>/confirm.txt; with --gradients its
# gradients too, --grad-rtol {grad_rtol}), and the kept rows are
# packed into OUT/rows.tar.xz (15 MiB before compression). Extra arguments go to ops-campaign.sh
# and come after these (e.g. --T 1024,4096 --dtypes bf16 --budget 1200 --bundle-mib 10; and
# --what-if 'TRITON_F32_DEFAULT=ieee TRITON_CACHE_DIR=/tmp/ieee-cache' to rerun every kept row with
# IEEE f32 dots, in a Triton cache of their own).
#
# Compiling and autotuning fla's Triton kernels costs 20 to 90 s in a fresh process. Triton keeps
# both on disk: compiled kernels always, autotuning timings where the autotuner has cache_results
# (fla passes it: FLA_CACHE_RESULTS=1, its default; TRITON_CACHE_AUTOTUNING=1 makes every
# autotuner do so), keyed by the kernel, its autotune key (fla's: block sizes, K, V, flags; not T)
# and the argument dtypes. So every row solves in a new process, but only the first row of a
# kernel variant (op, mode, dtype, head dim, initial state or not, packed or not) pays. The cache
# lives in TRITON_CACHE_DIR: as given (a folder carried from an earlier call is reused), else a new
# folder of this run. OUT/triton-cache.txt says how many autotuning results it held at the start
# and at the end.
#
# Usage: scripts/ops-fla-gpu.sh PARARNN OUT [ops-campaign arguments...]
#   PARARNN  the pararnn CLI built for the host (build/tools/pararnn: it needs no GPU)
# Exit: ops-campaign.sh's (0 when every row Agrees, 1 otherwise; a confirmation never changes
# it); 2 when fla cannot be installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { sed -n 2,29p "$0" >&2; exit 2; }
cli=$1 out=$2
shift 2
ls "$root"/.whl/flash_linear_attention-*.whl > /dev/null 2>&1 ||
  { echo "ops-fla-gpu: no flash_linear_attention wheel in .whl/ (pip download --no-deps flash-linear-attention einops -d .whl)" >&2; exit 2; }
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$root"/.whl/*.whl || exit 2
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$site.triton-cache} TRITON_CACHE_AUTOTUNING=1 FLA_CACHE_RESULTS=1
mkdir -p "$TRITON_CACHE_DIR" || exit 2
adapter="python3 $root/python/pararnn_judge/solvers/fla.py"
$adapter --version || exit 2
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 2
mkdir -p "$out"
$adapter --version > "$out/solver-version.txt" 2>&1 || true
cache_line() { printf '%s: %s autotuning result(s), %s in %s\n' "$1" \
  "$(find "$TRITON_CACHE_DIR" -name '*.autotune.json' | wc -l)" "$(du -sh "$TRITON_CACHE_DIR" | cut -f1)" "$TRITON_CACHE_DIR"; }
cache_line start > "$out/triton-cache.txt"
grad_confirm=""  # with --gradients the confirmation checks the gradients too
for arg in "$@"; do [ "$arg" = --gradients ] && grad_confirm=" --grad-rtol {grad_rtol}"; done
"$root/scripts/ops-campaign.sh" "$cli" "$out" "$adapter {case} {out} --device cuda" \
  --confirm "python3 $root/scripts/ops-confirm-fla.py {case} {answer} {oracle} {floor} {rtol}$grad_confirm" \
  --bundle "$out/rows.tar.xz" "$@"
code=$?
cache_line end >> "$out/triton-cache.txt"
exit $code
