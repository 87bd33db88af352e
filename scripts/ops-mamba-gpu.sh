#!/usr/bin/env bash
# The op campaign against mamba-ssm's Triton SSD kernel on the GPU machine (issue 56,
# docs/ops/README.md), without building mamba-ssm's CUDA extension: mamba-ssm has no wheel for
# the machine's torch, and `pip download` of its sdist needs torch to read its metadata (setup.py
# imports torch). Its Python files come in a tar.gz in .whl/ (mamba_ssm-<version>*.tar.gz: the
# PyPI sdist, or `git archive --prefix=mamba_ssm-2.3.2.post1/ v2.3.2.post1 mamba_ssm LICENSE` of
# the state-spaces/mamba repository, whose tag v2.3.2.post1 differs from v2.3.2 in __version__
# only); the wheels in .whl/ (einops) are installed beside them. mamba_ssm/__init__.py imports the
# extension (selective_scan_cuda), so the adapter imports mamba_ssm.ops.triton.ssd_combined
# without it (python/pararnn_judge/solvers/mamba.py, import_library): ssd runs, selective_scan
# cannot (its rows are Error, exit 3). One Triton cache for the run, as scripts/ops-fla-gpu.sh.
# Every kept row (not Agree) is confirmed without our oracle by scripts/ops-confirm-mamba.py
# (mamba-ssm's own ssd_minimal_discrete in f64, on the GPU: its numbers in the summary's confirm
# column and rows/<id>/confirm.txt; with --gradients its gradients too, --grad-rtol {grad_rtol}),
# and the kept rows are packed into OUT/rows.tar.xz. Extra
# arguments go to ops-campaign.sh after these defaults: --ops ssd --modes chunk.
#
# Usage: scripts/ops-mamba-gpu.sh PARARNN OUT [ops-campaign arguments...]
# Exit: ops-campaign.sh's (0 when every row Agrees, 1 otherwise); 2 when mamba-ssm's files or
# the GPU are missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { sed -n 2,18p "$0" >&2; exit 2; }
cli=$1 out=$2
shift 2
source=$(ls "$root"/.whl/mamba_ssm-*.tar.gz 2>/dev/null | tail -1)
[ -n "$source" ] || { echo "ops-mamba-gpu: no mamba_ssm-*.tar.gz in .whl/ (see this script's header)" >&2; exit 2; }
site=$(mktemp -d)
if ls "$root"/.whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$root"/.whl/*.whl || exit 2
fi
unpacked=$(mktemp -d)
tar -xzf "$source" -C "$unpacked" || exit 2
package=$(find "$unpacked" -maxdepth 2 -type d -name mamba_ssm | head -1)
[ -n "$package" ] || { echo "ops-mamba-gpu: $source holds no mamba_ssm/ folder" >&2; exit 2; }
cp -r "$package" "$site/" || exit 2
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$site.triton-cache} TRITON_CACHE_AUTOTUNING=1
mkdir -p "$TRITON_CACHE_DIR" "$out" || exit 2
adapter="python3 $root/python/pararnn_judge/solvers/mamba.py"
$adapter --version > "$out/solver-version.txt" 2>&1 || { cat "$out/solver-version.txt" >&2; exit 2; }
cat "$out/solver-version.txt"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 2
grad_confirm=""  # with --gradients the confirmation checks the gradients too
for arg in "$@"; do [ "$arg" = --gradients ] && grad_confirm=" --grad-rtol {grad_rtol}"; done
"$root/scripts/ops-campaign.sh" "$cli" "$out" "$adapter {case} {out}" --ops ssd --modes chunk \
  --confirm "python3 $root/scripts/ops-confirm-mamba.py {case} {answer} {oracle} {floor} {rtol} --device cuda$grad_confirm" \
  --bundle "$out/rows.tar.xz" "$@"
