#!/usr/bin/env bash
# The worst gradient error per cell and dtype from `pararnn verify --grad` (the training claim of
# every cell, as a table for a closing note or a release): for every cell variant x {f64, f32,
# f16, bf16} it makes one case (B 2, T as given, d_in 4, a random h0), runs verify --grad on the
# chosen backend and keeps its JSON; then prints a Markdown table: verdict, the gradient tensor
# with the largest relative error, that error and its absolute error, and the tolerance.
# Exits 1 when any row is not Agree (the reports stay under OUT for a bug bundle).
# Usage: scripts/gradient-table.sh [--backend cpu|cuda] [--time T] [--pararnn PATH] OUT
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
backend=cpu time=128 pararnn=$root/build/tools/pararnn out=
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=$2; shift 2 ;;
    --time) time=$2; shift 2 ;;
    --pararnn) pararnn=$2; shift 2 ;;
    -*) echo "gradient-table: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: scripts/gradient-table.sh [--backend cpu|cuda] [--time T] [--pararnn PATH] OUT" >&2; exit 2; }
[ -x "$pararnn" ] || { echo "gradient-table: $pararnn is not built" >&2; exit 2; }
mkdir -p "$out"
# name | make-case arguments (d_in, batch, time, dtype, seed and h0 are added below)
variants=(
  "gru|--cell gru --d-h 8"
  "lstm|--cell lstm --d-h 8"
  "nlru|--cell nlru --d-h 8"
  "slstm|--cell slstm --d-h 8"
  "cfc|--cell cfc --d-h 8"
  "cfc:diag_h|--cell cfc --gate-mix diag_h --d-h 8"
  "titans|--cell titans --d-h 8"
  "gru:head|--cell gru --mix head --n-heads 2 --d-h 8"
  "slstm:head|--cell slstm --mix head --n-heads 2 --d-h 8"
  "slstm:dense|--cell slstm --mix dense --d-h 6"
  "hopfield|--cell hopfield --d-h 8"
  "rwkv7|--cell rwkv7 --n-heads 2 --d-h 8"
  "m2rnn|--cell m2rnn --k-dim 3 --v-dim 4"
)
seed=1
for v in "${variants[@]}"; do
  name=${v%%|*} args=${v#*|}
  for dtype in f64 f32 f16 bf16; do
    tag=${name//:/_}_$dtype
    # shellcheck disable=SC2086
    "$pararnn" --quiet make-case $args --batch 2 --time "$time" --d-in 4 --dtype "$dtype" --seed "$seed" \
      --h0-std 0.5 --out "$out/$tag.safetensors" >"$out/$tag.make-case.log" 2>&1
    set +e
    "$pararnn" --quiet verify "$out/$tag.safetensors" --grad --backend "$backend" --json "$out/$tag.json" \
      >"$out/$tag.log" 2>&1
    echo $? >"$out/$tag.rc"
    set -e
    seed=$((seed + 1))
  done
done
python3 - "$out" "$backend" "$time" <<'EOF'
import json, os, sys
out, backend, time = sys.argv[1], sys.argv[2], sys.argv[3]
rows, failed = [], 0
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    r = json.load(open(os.path.join(out, name + ".json")))
    grads = r.get("gradients") or {}
    verdict = r.get("verdict", "?")
    failed += verdict.lower() != "agree"
    if not grads:
        rows.append(f"| {name} | {verdict} | (no gradients) | | | |")
        continue
    tensor, g = max(grads.items(), key=lambda kv: kv[1]["max_rel"])
    rows.append(f"| {name} | {verdict} | {tensor} | {g['max_rel']:.2e} | {g['max_abs']:.2e} | "
                f"atol {g['atol']:g}, rtol {g['rtol']:g} |")
print(f"Gradients vs the oracle's BPTT, `verify --grad --backend {backend}`, B 2, T {time}, d_in 4, h0 std 0.5\n")
print("| cell_dtype | verdict | worst tensor | max rel | max abs | tolerance |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
sys.exit(1 if failed else 0)
EOF
