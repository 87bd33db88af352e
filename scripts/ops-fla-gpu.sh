#!/usr/bin/env bash
# The op campaign against flash-linear-attention on the GPU machine (issue 56, docs/ops/README.md):
# installs the wheels carried in .whl/ (flash-linear-attention and what it needs beyond the
# machine's torch and triton, e.g. einops: `pip download --no-deps flash-linear-attention==0.X.Y
# einops -d .whl` here) into a private folder, then runs scripts/ops-campaign.sh with the fla
# adapter (python3 python/pararnn_judge/solvers/fla.py: torch and fla only, no build of our
# module) for the chunk and fused_recurrent modes. Extra arguments go to ops-campaign.sh
# (e.g. --T 1024,4096 --dtypes bf16 --budget 1200).
#
# Usage: scripts/ops-fla-gpu.sh PARARNN OUT [ops-campaign arguments...]
#   PARARNN  the pararnn CLI built for the host (build/tools/pararnn: it needs no GPU)
# Exit: ops-campaign.sh's (0 when every row Agrees, 1 otherwise); 2 when fla cannot be installed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { sed -n 2,14p "$0" >&2; exit 2; }
cli=$1 out=$2
shift 2
ls "$root"/.whl/flash_linear_attention-*.whl > /dev/null 2>&1 ||
  { echo "ops-fla-gpu: no flash_linear_attention wheel in .whl/ (pip download --no-deps flash-linear-attention einops -d .whl)" >&2; exit 2; }
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$root"/.whl/*.whl || exit 2
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
adapter="python3 $root/python/pararnn_judge/solvers/fla.py"
$adapter --version || exit 2
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 2
mkdir -p "$out"
$adapter --version > "$out/solver-version.txt" 2>&1 || true
"$root/scripts/ops-campaign.sh" "$cli" "$out" "$adapter {case} {out} --device cuda" "$@"
