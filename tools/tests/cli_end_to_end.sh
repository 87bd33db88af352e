#!/usr/bin/env bash
# End-to-end claims of the `pararnn` tool (run by ctest):
#   make-case -> verify prints Agree, exits 0 and writes its JSON, for every cell;
#   oracle -> one element moved far outside τ -> compare exits 1 (Disagree) and its JSON names
#   the planted index; solve's own trajectory passes compare;
#   RWKV-7 verifies in f32 and bf16 and refuses gradients and a bad n_heads;
#   M2RNN: make-case --k-dim/--v-dim -> verify Agree (f32, bf16), kstar, its refusals exit 2;
#   a truncated case file and an unknown backend are refused with exit 2 naming the problem.
set -u
pararnn=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
expect_rc() {
  local want=$1; shift
  out=$("$@" 2>&1); local rc=$?
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc: $*\n$out"
}
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval('d'+sys.argv[2]))" "$@"; }

for cell in gru lstm nlru; do
  expect_rc 0 "$pararnn" make-case --cell $cell --seed 1 --batch 2 --time 64 --d-in 8 --d-h 16 \
    --out "$work/$cell.safetensors"
  expect_rc 0 "$pararnn" verify "$work/$cell.safetensors" --json "$work/$cell.json"
  grep -q "verdict: Agree" <<<"$out" || fail "verify did not print Agree for $cell: $out"
  [ "$(json_get "$work/$cell.json" "['verdict']")" = "Agree" ] || fail "JSON verdict for $cell"
done

# Constructor flags: CfC's gate_mix 'diag_h' (forward and gradients agree), and refusals naming
# the flag for a cell that has no such argument or a value outside the rule.
expect_rc 0 "$pararnn" make-case --cell cfc --gate-mix diag_h --seed 3 --batch 2 --time 64 --d-in 5 \
  --d-h 8 --out "$work/cfc_diag_h.safetensors"
expect_rc 0 "$pararnn" verify "$work/cfc_diag_h.safetensors" --grad
grep -q "verdict: Agree" <<<"$out" || fail "verify did not print Agree for cfc diag_h: $out"
expect_rc 2 "$pararnn" make-case --cell gru --gate-mix diag_h --out "$work/refused.safetensors"
grep -q "gate_mix" <<<"$out" || fail "the refusal does not name gate_mix: $out"
expect_rc 2 "$pararnn" make-case --cell cfc --gate-mix sideways --out "$work/refused.safetensors"
expect_rc 2 "$pararnn" make-case --cell gru --eps 1e-3 --out "$work/refused.safetensors"
[ ! -e "$work/refused.safetensors" ] || fail "a refused make-case wrote its output"

expect_rc 0 "$pararnn" make-case --cell lstm --seed 2 --batch 1 --time 16 --d-in 3 --d-h 4 \
  --dtype f64 --out "$work/small.safetensors"
expect_rc 0 "$pararnn" oracle "$work/small.safetensors" --out "$work/oracle.safetensors"
expect_rc 0 "$pararnn" solve "$work/small.safetensors" --out "$work/solved.safetensors"
expect_rc 0 "$pararnn" compare "$work/small.safetensors" --trajectory "$work/solved.safetensors"
# Plant an error of 0.05 at (b=0, t=11, slot=1, channel=2) of the oracle's f64 H (1, 16, 2, 4).
python3 - "$work/oracle.safetensors" "$work/perturbed.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
begin = header["H"]["data_offsets"][0]
flat = ((0 * 16 + 11) * 2 + 1) * 4 + 2
pos = 8 + n + begin + 8 * flat
value = struct.unpack("<d", data[pos:pos + 8])[0]
data[pos:pos + 8] = struct.pack("<d", value + 0.05)
open(sys.argv[2], "wb").write(data)
PY
expect_rc 1 "$pararnn" compare "$work/small.safetensors" --trajectory "$work/perturbed.safetensors" \
  --json "$work/cmp.json"
[ "$(json_get "$work/cmp.json" "['worst_index']['t']")" = 11 ] || fail "worst t"
[ "$(json_get "$work/cmp.json" "['worst_index']['slot']")" = 1 ] || fail "worst slot"
[ "$(json_get "$work/cmp.json" "['worst_index']['channel']")" = 2 ] || fail "worst channel"
[ "$(json_get "$work/cmp.json" "['mismatches']")" = 1 ] || fail "mismatch count"

# Gradients: verify --grad judges every gradient tensor; oracle --grad and solve --grad write them.
expect_rc 0 "$pararnn" verify "$work/lstm.safetensors" --grad --json "$work/grad.json"
[ "$(json_get "$work/grad.json" "['gradients']['W_x.weight']['ok']")" = True ] || fail "W_x.weight gradient"
[ "$(json_get "$work/grad.json" "['gradients']['x']['ok']")" = True ] || fail "x gradient"
expect_rc 0 "$pararnn" oracle "$work/small.safetensors" --grad --out "$work/oracle_grad.safetensors"
expect_rc 0 "$pararnn" solve "$work/small.safetensors" --grad --out "$work/solved_grad.safetensors"
python3 - "$work/oracle_grad.safetensors" "$work/solved_grad.safetensors" <<'PY' || fail "gradient files"
import json, struct, sys
for path in sys.argv[1:]:
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    names = set(json.loads(data[8:8 + n])) - {"__metadata__"}
    want = {"H", "grad.x", "grad.W_x.weight", "grad.W_x.bias", "grad.a_f", "grad.c_o"}
    assert want <= names, (path, sorted(names))
PY

# RWKV-7 (a matrix state, no Newton): make-case -> verify Agree in f32 and bf16; the report
# names (head, row, column); gradients and n_heads not dividing d_h are refused (exit 2).
for dtype in f32 bf16; do
  expect_rc 0 "$pararnn" make-case --cell rwkv7 --n-heads 2 --seed 3 --batch 2 --time 300 --d-in 5 \
    --d-h 8 --dtype $dtype --h0-std 0.5 --out "$work/rwkv7_$dtype.safetensors"
  expect_rc 0 "$pararnn" verify "$work/rwkv7_$dtype.safetensors" --json "$work/rwkv7_$dtype.json"
  grep -q "backend rwkv7_scan" <<<"$out" || fail "rwkv7 $dtype did not run the (G, U) scan: $out"
  [ "$(json_get "$work/rwkv7_$dtype.json" "['shape']")" = "[2, 300, 2, 4, 4]" ] || fail "rwkv7 shape"
  json_get "$work/rwkv7_$dtype.json" "['worst_index']['head']" > /dev/null || fail "rwkv7 worst head"
done
expect_rc 0 "$pararnn" verify "$work/rwkv7_f32.safetensors" --grad   # gradients on the cpu (issue 16)
expect_rc 2 "$pararnn" make-case --cell rwkv7 --n-heads 3 --d-h 8 --d-in 4 --out "$work/bad.safetensors"
grep -q "n_heads" <<<"$out" || fail "the rwkv7 refusal does not name n_heads: $out"
# M2RNN: flags named after the Python arguments; Agree in f32 and bf16; kstar runs; the matrix
# state's refusals (no k_dim, packing) exit 2 naming the argument; gradients Agree (issue 16).
for dtype in f32 bf16; do
  expect_rc 0 "$pararnn" make-case --cell m2rnn --k-dim 3 --v-dim 4 --seed 4 --batch 2 --time 300 \
    --d-in 5 --dtype $dtype --h0-std 0.5 --out "$work/m2rnn_$dtype.safetensors"
  expect_rc 0 "$pararnn" verify "$work/m2rnn_$dtype.safetensors" --json "$work/m2rnn_$dtype.json"
  [ "$(json_get "$work/m2rnn_$dtype.json" "['shape']")" = "[2, 300, 3, 4]" ] || fail "m2rnn shape"
done
expect_rc 0 "$pararnn" kstar --cell m2rnn --k-dim 2 --v-dim 3 --T 16,64 --seeds 1
expect_rc 2 "$pararnn" make-case --cell m2rnn --v-dim 4 --out "$work/bad.safetensors"
grep -q "k_dim" <<<"$out" || fail "the refusal does not name k_dim: $out"
expect_rc 0 "$pararnn" verify "$work/m2rnn_f32.safetensors" --grad
expect_rc 2 "$pararnn" make-case --cell m2rnn --k-dim 2 --v-dim 2 --batch 1 --time 10 \
  --cu-seqlens 0,4,10 --out "$work/m2rnn_packed.safetensors"
grep -q -- "--cu-seqlens" <<<"$out" || fail "the packing refusal does not name --cu-seqlens: $out"
[ ! -e "$work/m2rnn_packed.safetensors" ] || fail "a refused make-case wrote its output"

printf '\x10\x00\x00' > "$work/truncated.safetensors"
expect_rc 2 "$pararnn" verify "$work/truncated.safetensors"
expect_rc 2 "$pararnn" verify "$work/gru.safetensors" --backend warp
grep -q "scan_backend" <<<"$out" || fail "the refusal does not name the argument: $out"
expect_rc 0 "$pararnn" env
echo "cli end-to-end: all claims hold"
