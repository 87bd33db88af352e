#!/usr/bin/env bash
# End-to-end claims of op cases (issue 56, docs/ops/README.md), one claim per ctest test:
# cli_ops.sh PARARNN WORK CLAIM. CI has no GPU and no fla: the judge is proved with our own
# same-dtype loop (`pararnn solve`, the reference adapter), an independent standard-library
# chunked adapter (tools/tests/solvers/op_adapter.py: exact, and a chunk-boundary carry dropped),
# and the fla adapter's refusals, which need neither torch nor fla.
set -u
pararnn=$1
work=$2/$3
claim=$3
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
. "$here/claim_lib.sh"
adapter="$here/solvers/op_adapter.py"
fla="$source_dir/python/pararnn_judge/solvers/fla.py"
small=(--batch 2 --time 40 --n-heads 2 --k-dim 6 --v-dim 5)

# Every op, in several dtypes and classes (h0, packed, hard decays near 1, large keys, l2norm in
# the kernel): the case, then an answer, then compare; CODE is compare's expected exit.
make() {  # make NAME ARGS...
  local name=$1; shift
  expect_rc 0 "$pararnn" make-case "$@" --out "$work/$name.safetensors"
}
# floor_confirmed CONFIRM NAME LIBRARY TENSOR...: the case NAME's oracle and floor with their
# gradients, CONFIRM run with the floor standing in for the answer at the rtols compare.json gives
# (the contract's tau and gradient tau); each TENSOR needs an oracle line against LIBRARY's
# reference and the floor within tau of it on every value. Output in $out.
floor_confirmed() {
  local confirm=$1 name=$2 library=$3; shift 3
  local c="$work/$name"
  expect_rc 0 "$pararnn" oracle "$c.safetensors" --grad --out "$c.oracle.safetensors"
  expect_rc 0 "$pararnn" solve "$c.safetensors" --grad --out "$c.floor.safetensors"
  expect_rc 0 "$pararnn" compare "$c.safetensors" --trajectory "$c.floor.safetensors" --json "$c.compare.json"
  local rtol grad_rtol
  rtol=$(json_get "$c.compare.json" "['tau']['rtol']")
  grad_rtol=$(json_get "$c.compare.json" "['gradient_tau']['rtol']")
  expect_rc 0 python3 "$confirm" "$c.safetensors" "$c.floor.safetensors" "$c.oracle.safetensors" \
    "$c.floor.safetensors" "$rtol" --grad-rtol "$grad_rtol"
  local tensor
  for tensor in "$@"; do
    grep -q "^$tensor: oracle vs $library" <<<"$out" || fail "no oracle line for $tensor: $out"
    grep -q "^$tensor: floor vs the f64 reference: max error .*, 0 of [0-9]* values outside tau" <<<"$out" ||
      fail "the floor's $tensor is not within tau of $library: $out"
  done
}
cases=(
  "gla_f32 --op gla ${small[*]} --dtype f32 --h0-std 0.5"
  "gla_bf16_hard --op gla ${small[*]} --dtype bf16 --decay hard"
  "simple_gla_f16_packed --op simple_gla --batch 1 --time 40 --n-heads 2 --k-dim 6 --v-dim 5 --dtype f16 --cu-seqlens 0,7,40 --h0-std 1"
  "delta_f32_l2 --op delta_rule ${small[*]} --dtype f32 --qk-l2norm --variant fused_recurrent"
  "gated_delta_bf16_h0 --op gated_delta_rule ${small[*]} --dtype bf16 --h0-std 0.5"
  "gated_delta_f32_keys --op gated_delta_rule ${small[*]} --dtype f32 --key-scale 1.2"
  "dplr_f64 --op dplr_delta_rule ${small[*]} --dtype f64 --h0-std 0.5"
  "rwkv7_f32_packed --op rwkv7 --batch 1 --time 40 --n-heads 2 --k-dim 6 --v-dim 5 --dtype f32 --cu-seqlens 0,20,33,40"
  "selective_scan_bf16 --op selective_scan --batch 2 --time 40 --n-heads 3 --k-dim 4 --dtype bf16"
  "ssd_f32_h0 --op ssd --batch 2 --time 40 --n-heads 2 --k-dim 4 --v-dim 3 --dtype f32 --h0-std 0.5"
  "ssd_bf16_hard --op ssd --batch 1 --time 40 --n-heads 2 --k-dim 4 --v-dim 3 --dtype bf16 --decay hard"
)

case "$claim" in
reference_adapter_agrees)
  for spec in "${cases[@]}"; do
    read -r -a words <<<"$spec"
    name=${words[0]}
    make "$name" "${words[@]:1}"
    expect_rc 0 "$pararnn" solve "$work/$name.safetensors" --out "$work/$name.floor.safetensors"
    expect_rc 0 "$pararnn" compare "$work/$name.safetensors" --trajectory "$work/$name.floor.safetensors" \
      --json "$work/$name.floor.json"
    says "Agree op"
    says "within what"
    python3 "$adapter" "$work/$name.safetensors" "$work/$name.exact.safetensors" --mode exact 2>/dev/null ||
      fail "op_adapter exact failed on $name"
    expect_rc 0 "$pararnn" compare "$work/$name.safetensors" --trajectory "$work/$name.exact.safetensors"
    [ "$(json_get "$work/$name.floor.json" "['verdict']")" = Agree ] || fail "$name: JSON verdict"
    [ "$(json_get "$work/$name.floor.json" "['outputs'][1]['floor_within_tau']")" = True ] || fail "$name: floor"
  done
  # The oracle writes o and final_state in f64, certified.
  expect_rc 0 "$pararnn" oracle "$work/gla_f32.safetensors" --out "$work/oracle.safetensors"
  says "certified by float128"
  ;;
faulty_adapter_disagrees)
  # A chunked kernel that drops its carry at chunk boundaries: Disagree (exit 1), "worse than
  # the dtype allows" while the same-dtype loop is within tau, the repro line printed.
  for spec in "${cases[@]}"; do
    read -r -a words <<<"$spec"
    name=${words[0]}
    make "$name" "${words[@]:1}"
    python3 "$adapter" "$work/$name.safetensors" "$work/$name.bad.safetensors" --mode drop-carry --chunk 8 2>/dev/null ||
      fail "op_adapter drop-carry failed on $name"
    expect_rc 1 "$pararnn" compare "$work/$name.safetensors" --trajectory "$work/$name.bad.safetensors" \
      --json "$work/$name.bad.json"
    says "Disagree op"
    says "worse than"
    says "repro: pararnn compare"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if any(o['finding']=='worse' for o in r['outputs']) else 1)" \
      "$work/$name.bad.json" || fail "$name: no output found worse than the dtype allows"
  done
  ;;
never_agree_on_nan_missing_or_uncertified)
  make c --op gated_delta_rule "${small[@]}" --dtype bf16
  python3 "$adapter" "$work/c.safetensors" "$work/nan.safetensors" --mode nan 2>/dev/null || fail "adapter nan"
  expect_rc 1 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/nan.safetensors"
  says "NaN"
  python3 "$adapter" "$work/c.safetensors" "$work/nofs.safetensors" --mode no-final-state 2>/dev/null || fail "adapter"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/nofs.safetensors"
  says "final_state: missing"
  expect_rc 0 "$pararnn" solve "$work/c.safetensors" --out "$work/floor.safetensors"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/floor.safetensors" --certify-budget 0
  says "not certified"
  expect_rc 2 "$pararnn" oracle "$work/c.safetensors" --out "$work/never.safetensors" --certify-budget 0
  [ ! -e "$work/never.safetensors" ] || fail "an uncertified oracle wrote its file"
  ;;
refusals_name_the_argument)
  expect_rc 2 "$pararnn" make-case --op mamba9 --out "$work/x.safetensors"
  says "op: must be one of"
  expect_rc 2 "$pararnn" make-case --op gla --decay soft --out "$work/x.safetensors"
  says "--decay"
  expect_rc 2 "$pararnn" make-case --op gla --batch 2 --time 8 --cu-seqlens 0,8 --out "$work/x.safetensors"
  says "B = 1"
  expect_rc 2 "$pararnn" make-case --op gla --qk-l2norm --out "$work/x.safetensors"
  says "--qk-l2norm: is not an argument of op gla"
  [ ! -e "$work/x.safetensors" ] || fail "a refused make-case left its file"
  make c --op gla "${small[@]}" --dtype f32
  expect_rc 0 "$pararnn" solve "$work/c.safetensors" --out "$work/floor.safetensors"
  st="python3 $here/safetensors_tool.py"
  $st reshape "$work/floor.safetensors" "$work/short.safetensors" o 2,39,2,5 || fail "tool"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/short.safetensors"
  says "tensor 'o': must have shape (2, 40, 2, 5)"
  $st add "$work/floor.safetensors" "$work/extra.safetensors" junk F32 1 0 || fail "tool"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/extra.safetensors"
  says "tensor 'junk': is not an output of op gla"
  $st drop "$work/floor.safetensors" "$work/no_o.safetensors" o || fail "tool"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/no_o.safetensors"
  says "tensor 'o': is required"
  $st add "$work/c.safetensors" "$work/extra_case.safetensors" beta F32 2,40,2 1 || fail "tool"
  expect_rc 2 "$pararnn" solve "$work/extra_case.safetensors" --out "$work/never.safetensors"
  says "tensor 'beta': is not an input of op gla"
  $st keep "$work/floor.safetensors" "$work/state.safetensors" final_state || fail "tool"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/floor.safetensors" --gradients "$work/state.safetensors"
  says "--gradients $work/state.safetensors: tensor 'final_state': must be a gradient"
  # --atol is the cell judge's absolute band; an op's tau is relative (Metric::op_output): refused
  # by name, never silently judged at another tau than the one asked for. The report of an earlier
  # run (an Agree) does not stand for a refused one: compare removes its --json first.
  expect_rc 0 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/floor.safetensors" --json "$work/atol.json"
  [ "$(json_get "$work/atol.json" "['verdict']")" = Agree ] || fail "setup: the floor does not Agree"
  cp "$work/atol.json" "$work/agree.json"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/floor.safetensors" --atol 1e-30 \
    --json "$work/atol.json"
  says "--atol"
  [ ! -e "$work/atol.json" ] || fail "a refused compare left a report"
  for bad in short extra no_o; do
    cp "$work/agree.json" "$work/stale.json"
    expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/$bad.safetensors" --json "$work/stale.json"
    [ ! -e "$work/stale.json" ] || fail "compare refusing $bad.safetensors left an earlier report"
  done
  cp "$work/floor.safetensors" "$work/floor.copy"
  expect_rc 2 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/floor.safetensors" --json "$work/floor.safetensors"
  says "--json: must not name"
  cmp -s "$work/floor.safetensors" "$work/floor.copy" || fail "compare removed or overwrote its answer named as --json"
  [ ! -e "$work/never.safetensors" ] || fail "a refused command left its file"
  ;;
fla_adapter_refuses_by_name)
  # Without torch or fla: an f64 case is refused by name (exit 4) before any import; a bad mode is
  # a usage error (2); a case fla could run needs the library (3 when it is absent).
  make c64 --op gla "${small[@]}" --dtype f64
  expect_rc 4 python3 "$fla" "$work/c64.safetensors" "$work/never.safetensors"
  says "fla's Triton kernels take f32, f16 or bf16 (got F64)"
  make c --op delta_rule "${small[@]}" --dtype bf16
  expect_rc 2 python3 "$fla" "$work/c.safetensors" "$work/never.safetensors" --mode naive
  says "--mode: must be chunk or fused_recurrent"
  if ! python3 -c "import torch, fla" 2>/dev/null; then
    expect_rc 3 python3 "$fla" "$work/c.safetensors" "$work/never.safetensors"
    says "needs torch and flash-linear-attention"
  fi
  [ ! -e "$work/never.safetensors" ] || fail "a refused adapter run left its file"
  # The call each case asks of fla (plan(): no import of torch or fla).
  python3 - "$source_dir/python/pararnn_judge/solvers" "$work/c.safetensors" <<'PY' || fail "fla plan"
import sys
sys.path.insert(0, sys.argv[1])
import fla as adapter
headers, meta = adapter.read_header(sys.argv[2])
p = adapter.plan(meta, headers)
assert p["module"] == "fla.ops.delta_rule" and p["function"] == "chunk_delta_rule", p
assert p["inputs"] == ("q", "k", "v", "beta"), p
assert p["kwargs"] == {"output_final_state": True, "scale": 6 ** -0.5, "use_qk_l2norm_in_kernel": False}, p
assert adapter.plan(meta, headers, "fused_recurrent")["function"] == "fused_recurrent_delta_rule"
f32 = {n: ("F32", [1, 4, 2, 8]) for n in ("q", "k", "v", "beta")}
assert adapter.plan({"op": "delta_rule"}, f32, "fused_recurrent")["function"] == "fused_recurrent_delta_rule"
rw = {n: ("BF16", [1, 4, 2, 8]) for n in ("r", "w", "k", "v", "a", "b")}
assert adapter.plan({"op": "rwkv7"}, rw)["kwargs"]["scale"] == 1.0  # fla's chunk_rwkv7 default, passed explicitly
for meta_bad, headers_bad, needle in [
    ({"op": "mamba"}, headers, "metadata 'op'"),
    ({"op": "gla"}, {"q": ("BF16", [1, 4, 2, 8])}, "tensor 'k': required"),
    ({"op": "gla", "head_first": "True"}, {n: ("BF16", [1]) for n in "qkvg"}, "metadata 'head_first'"),
    ({"op": "gla", "use_qk_l2norm_in_kernel": "True"}, {n: ("BF16", [1]) for n in "qkvg"}, "use_qk_l2norm_in_kernel"),
    ({"op": "gla", "scale": "big"}, {n: ("BF16", [1]) for n in "qkvg"}, "metadata 'scale'"),
    ({"op": "delta_rule"}, {n: ("F32", [1]) for n in ("q", "k", "v", "beta")}, "chunk_delta_rule takes f16 or bf16"),
]:
    try:
        adapter.plan(meta_bad, headers_bad)
        raise SystemExit(f"accepted: {needle}")
    except adapter.Refused as e:
        assert needle in str(e), (needle, str(e))
# TRITON_F32_DEFAULT=ieee: fla's explicit 'tf32' constants become 'ieee' (same type); nothing else moves.
import types
class Constexpr:
    def __init__(self, value): self.value = value
fwd = types.ModuleType("fla.ops.gated_delta_rule.chunk_fwd")
fwd.SOLVE_TRIL_DOT_PRECISION, fwd.SAFE_DOT_PRECISION, fwd.OTHER = Constexpr("tf32"), Constexpr("bf16x3"), "tf32"
plain = types.ModuleType("fla.ops.x"); plain.DOT_PRECISION = "tf32"
elsewhere = types.ModuleType("triton.y"); elsewhere.DOT_PRECISION = "tf32"
changed = adapter.force_ieee_dots({fwd.__name__: fwd, plain.__name__: plain, "triton.y": elsewhere, "fla.gone": None})
assert changed == ["fla.ops.gated_delta_rule.chunk_fwd.SOLVE_TRIL_DOT_PRECISION", "fla.ops.x.DOT_PRECISION"], changed
assert isinstance(fwd.SOLVE_TRIL_DOT_PRECISION, Constexpr) and fwd.SOLVE_TRIL_DOT_PRECISION.value == "ieee"
assert fwd.SAFE_DOT_PRECISION.value == "bf16x3" and fwd.OTHER == "tf32" and plain.DOT_PRECISION == "ieee"
assert elsewhere.DOT_PRECISION == "tf32"
PY
  ;;
fla_adapter_differentiates_the_cases_loss)
  # python/pararnn_judge/solvers/fla.py end to end on the CPU, around a naive torch GLA standing in
  # for fla (solvers/fake_fla): with PARARNN_GRADIENTS=1 its gradients are of the case's L (the
  # cotangent grad.o when the case carries one: L = sum(grad.o * o), final_state adding nothing),
  # and a case with output_final_state False is answered with o alone; both Agree. Needs torch
  # (skipped, 77, without it).
  python3 -c "import torch" 2>/dev/null || { echo "SKIP [$claim]: no torch"; exit 77; }
  st="python3 $here/safetensors_tool.py"
  fake=(env PYTHONPATH="$here/solvers/fake_fla" PARARNN_GRADIENTS=1 python3 "$fla")
  make c --op gla --batch 1 --time 6 --n-heads 2 --k-dim 3 --v-dim 2 --dtype f32 --h0-std 0.5
  expect_rc 0 "${fake[@]}" "$work/c.safetensors" "$work/c.answer.safetensors" --device cpu
  expect_rc 0 "$pararnn" compare "$work/c.safetensors" --trajectory "$work/c.answer.safetensors"
  says "gradient(s) judged"
  $st add "$work/c.safetensors" "$work/cot.safetensors" grad.o F32 1,6,2,2 0.5 || fail "tool"
  expect_rc 0 "${fake[@]}" "$work/cot.safetensors" "$work/cot.answer.safetensors" --device cpu
  expect_rc 0 "$pararnn" compare "$work/cot.safetensors" --trajectory "$work/cot.answer.safetensors"
  says "gradient(s) judged"
  $st meta "$work/c.safetensors" "$work/nofs.safetensors" output_final_state=False || fail "tool"
  expect_rc 0 "${fake[@]}" "$work/nofs.safetensors" "$work/nofs.answer.safetensors" --device cpu
  expect_rc 0 "$pararnn" compare "$work/nofs.safetensors" --trajectory "$work/nofs.answer.safetensors"
  says "gradient(s) judged"
  ;;
mamba_adapter_refuses_by_name)
  # Without torch or mamba-ssm: f64 and the modes the library has no kernel for are refused by
  # name (exit 4) before any import; a case it could run needs the library (3 when absent).
  mamba="$source_dir/python/pararnn_judge/solvers/mamba.py"
  make s64 --op selective_scan --batch 1 --time 8 --n-heads 2 --k-dim 4 --dtype f64
  expect_rc 4 python3 "$mamba" "$work/s64.safetensors" "$work/never.safetensors"
  says "mamba-ssm's kernels take f32, f16 or bf16 (got F64)"
  make s --op selective_scan --batch 1 --time 8 --n-heads 2 --k-dim 4 --dtype bf16
  expect_rc 4 python3 "$mamba" "$work/s.safetensors" "$work/never.safetensors" --mode chunk
  says "mamba-ssm's selective_scan runs fused_recurrent only"
  make d --op ssd --batch 1 --time 8 --n-heads 2 --k-dim 4 --v-dim 3 --dtype bf16 --variant fused_recurrent
  expect_rc 4 python3 "$mamba" "$work/d.safetensors" "$work/never.safetensors"
  says "mamba-ssm's ssd runs chunk only"
  if ! python3 -c "import torch, mamba_ssm" 2>/dev/null; then
    expect_rc 3 python3 "$mamba" "$work/d.safetensors" "$work/never.safetensors" --mode chunk
    says "needs torch and mamba-ssm"
  fi
  [ ! -e "$work/never.safetensors" ] || fail "a refused adapter run left its file"
  python3 - "$source_dir/python/pararnn_judge/solvers" "$work/d.safetensors" <<'PY' || fail "mamba plan"
import sys
sys.path.insert(0, sys.argv[1])
import mamba as adapter
headers, meta = adapter.read_header(sys.argv[2])
p = adapter.plan(meta, headers, "chunk", 64)
assert p["function"] == "mamba_chunk_scan_combined" and p["inputs"] == ("x", "dt", "A", "B", "C"), p
assert p["optional"] == ("D", "z", "dt_bias"), p
assert p["kwargs"] == {"chunk_size": 64, "dt_softplus": True, "return_final_states": True}, p
assert p["state_name"] == "final_states" and not p["packed"]
for bad, needle in [({"op": "gla"}, "metadata 'op'"), (dict(meta, op="ssd"), "chunk_size")]:
    try:
        adapter.plan(bad, headers, "chunk", 0)
        raise SystemExit("accepted: " + needle)
    except adapter.Refused as e:
        assert needle in str(e), (needle, str(e))
PY
  # Without the CUDA extension (mamba_ssm/__init__.py imports selective_scan_cuda at its top), the
  # Triton SSD module is imported without the package's __init__.py; selective_scan's is not.
  fake="$work/fake-site"
  mkdir -p "$fake/mamba_ssm/ops/triton" "$fake/mamba_ssm/utils"
  printf '__version__ = "9.9.9"\nimport selective_scan_cuda\n' > "$fake/mamba_ssm/__init__.py"
  : > "$fake/mamba_ssm/ops/__init__.py"; : > "$fake/mamba_ssm/ops/triton/__init__.py"; : > "$fake/mamba_ssm/utils/__init__.py"
  printf 'CHUNK = 256\n' > "$fake/mamba_ssm/utils/helpers.py"
  printf 'from mamba_ssm.utils.helpers import CHUNK\ndef mamba_chunk_scan_combined():\n    return CHUNK\n' \
    > "$fake/mamba_ssm/ops/triton/ssd_combined.py"
  printf 'import selective_scan_cuda\n' > "$fake/mamba_ssm/ops/selective_scan_interface.py"
  PYTHONPATH="$fake" python3 -B - "$source_dir/python/pararnn_judge/solvers" <<'PY' || fail "mamba import without __init__"
import sys
sys.path.insert(0, sys.argv[1])
import mamba as adapter
assert adapter.import_library("mamba_ssm.ops.triton.ssd_combined").mamba_chunk_scan_combined() == 256
try:
    adapter.import_library("mamba_ssm.ops.selective_scan_interface")
    raise SystemExit("selective_scan imported without its extension")
except ImportError as e:
    assert "selective_scan_cuda" in str(e), e
assert adapter.version_line().startswith("mamba-ssm 9.9.9 (source files"), adapter.version_line()
PY
  PYTHONPATH="$fake" expect_rc 0 python3 -B "$mamba" --version
  says "mamba-ssm 9.9.9"
  ;;
campaign_keeps_references_confirms_and_bundles)
  # --confirm: a kept row (not Agree) also keeps the oracle's and the floor's outputs, and the
  # confirmation command runs on it ({rtol} from compare.json) into confirm.txt and the summary's
  # confirm column; its exit, 0 or not, never changes a verdict or the campaign's exit status.
  # Agree rows run none. --bundle packs the kept rows within its budget. Rows go class by class.
  campaign="$source_dir/scripts/ops-campaign.sh"
  stub="python3 $here/solvers/confirm_stub.py {case} {answer} {oracle} {floor} {rtol}"
  plan=(--quick --ops gla,gated_delta_rule --modes chunk --dtypes bf16 --T 64 --classes init,h0,packed)
  expect_rc 0 "$campaign" "$pararnn" "$work/ref" "$pararnn solve {case} --out {out}" "${plan[@]}" --confirm "$stub"
  [ "$(head -1 "$work/ref/summary.tsv")" = "$(printf 'id\tverdict\texit\tseconds\treason\tconfirm\twhat_if')" ] ||
    fail "summary header: $(head -1 "$work/ref/summary.tsv")"
  [ "$(cut -f6 "$work/ref/summary.tsv" | sort -u | tr '\n' ' ')" = "- confirm " ] ||
    fail "a confirmation ran on an Agree row: $(cut -f1,6 "$work/ref/summary.tsv")"
  [ "$(cut -f1 "$work/ref/summary.tsv" | sed -n 2,3p | tr '\n' ' ')" = "gla.chunk.bf16.T64.d16.init gated_delta_rule.chunk.bf16.T64.d16.init " ] ||
    fail "rows not class by class: $(cut -f1 "$work/ref/summary.tsv")"
  bad="python3 $adapter {case} {out} --mode drop-carry --chunk 8"
  for confirm_exit in 1 0; do
    dir="$work/bad$confirm_exit"
    expect_rc 1 "$campaign" "$pararnn" "$dir" "$bad" "${plan[@]}" --T 256 --confirm "$stub --exit $confirm_exit" \
      --bundle "$dir/rows.tar.xz" --bundle-mib 1
    [ "$(cut -f2 "$dir/summary.tsv" | sed 1d | sort -u)" = Disagree ] || fail "verdicts changed: $(cut -f1,2 "$dir/summary.tsv")"
    [ "$(grep -c "confirm exit $confirm_exit " "$dir/summary.tsv")" -eq 6 ] || fail "confirm column: $(cut -f1,6 "$dir/summary.tsv")"
    row="$dir/rows/gla.chunk.bf16.T256.d16.packed"
    for f in case.safetensors answer.safetensors oracle.safetensors floor.safetensors compare.json confirm.txt; do
      [ -f "$row/$f" ] || fail "row keeps no $f"
    done
    grep -q "oracle: o F64 \[1, 256, 2, 16\]" "$row/confirm.txt" || fail "confirm.txt: $(cat "$row/confirm.txt")"
    want=$(python3 -c 'import sys; print(f"{float(sys.argv[1]):g}")' "$(json_get "$row/compare.json" "['tau']['rtol']")")
    grep -qx "rtol $want" "$row/confirm.txt" || fail "rtol not from compare.json ($want): $(cat "$row/confirm.txt")"
  done
  # The bundle: summary.tsv, bundle.txt and every kept row's small files; the large files within
  # 1 MiB before compression (six rows of about 400 KB each at T 256: some left out, and said so).
  mkdir -p "$work/unpacked" && tar -xJf "$work/bad1/rows.tar.xz" -C "$work/unpacked" || fail "bundle unreadable"
  for f in summary.tsv bundle.txt rows/gla.chunk.bf16.T256.d16.init/compare.json rows/gated_delta_rule.chunk.bf16.T256.d16.packed/confirm.txt \
           rows/gla.chunk.bf16.T256.d16.init/case.safetensors rows/gla.chunk.bf16.T256.d16.init/answer.safetensors; do
    [ -f "$work/unpacked/$f" ] || fail "bundle has no $f: $(tar -tJf "$work/bad1/rows.tar.xz")"
  done
  [ "$(du -sb "$work/unpacked" | cut -f1)" -le $((1024 * 1024)) ] || fail "bundle over its budget: $(du -sb "$work/unpacked")"
  grep -q "left out" "$work/unpacked/bundle.txt" || fail "bundle.txt names nothing left out: $(cat "$work/unpacked/bundle.txt")"
  [ "$(grep -c "chunk.bf16.T256.d16.*small files: in" "$work/unpacked/bundle.txt")" -eq 6 ] || fail "bundle.txt: $(cat "$work/unpacked/bundle.txt")"
  # Refusals: a --confirm without its placeholders, an unknown class.
  expect_rc 2 "$campaign" "$pararnn" "$work/x" "$bad" "${plan[@]}" --confirm "python3 x.py {case}"
  says "--confirm must contain {case} {answer} {oracle} {floor} {rtol}"
  expect_rc 2 "$campaign" "$pararnn" "$work/x" "$bad" "${plan[@]}" --classes init,soft
  says "--classes: 'soft' is not one of"
  ;;
campaign_what_if_reruns_kept_rows)
  # --what-if: every kept row's solver runs again with the variables added and that answer is
  # judged as the row's was (the summary's what_if column, what-if.* in the row); the row's
  # verdict and the exit status stay the library's as called. Agree rows run none. The solver here
  # drops its chunk carry unless FIXED=1 is set, so the what-if Agrees where the row Disagrees.
  campaign="$source_dir/scripts/ops-campaign.sh"
  solver="$work/switch.sh"
  printf '#!/bin/sh\nif [ "${FIXED:-}" = 1 ]; then exec "%s" solve "$1" --out "$2"; fi\nexec python3 "%s" "$1" "$2" --mode drop-carry --chunk 8\n' \
    "$pararnn" "$adapter" > "$solver" && chmod +x "$solver" || fail "tool"
  plan=(--quick --ops gla --modes chunk --dtypes bf16 --T 64 --classes init,h0)
  # (a tab between the words: the column names them space-separated, never breaking the TSV)
  expect_rc 1 "$campaign" "$pararnn" "$work/w" "$solver {case} {out}" "${plan[@]}" --what-if $'FIXED=1\tUNUSED=a=b' \
    --bundle "$work/w/rows.tar.xz"
  [ "$(cut -f2 "$work/w/summary.tsv" | sed 1d | sort -u)" = Disagree ] || fail "verdicts changed: $(cut -f1,2 "$work/w/summary.tsv")"
  [ "$(awk -F'\t' 'NF != 7' "$work/w/summary.tsv" | wc -l)" -eq 0 ] || fail "a summary line without 7 columns"
  [ "$(cut -f7 "$work/w/summary.tsv" | sed 1d | grep -c '^FIXED=1 UNUSED=a=b: Agree (')" -eq 2 ] ||
    fail "what_if column: $(cut -f1,7 "$work/w/summary.tsv")"
  row="$work/w/rows/gla.chunk.bf16.T64.d16.h0"
  for f in what-if.answer.safetensors what-if.compare.json what-if.compare.txt what-if.stderr.txt answer.safetensors compare.json; do
    [ -f "$row/$f" ] || fail "row keeps no $f"
  done
  [ "$(json_get "$row/what-if.compare.json" "['verdict']")" = Agree ] || fail "what-if verdict"
  [ "$(json_get "$row/compare.json" "['verdict']")" = Disagree ] || fail "the row's own verdict"
  tar -tJf "$work/w/rows.tar.xz" | grep -q "gla.chunk.bf16.T64.d16.h0/what-if.compare.json" || fail "bundle has no what-if judgement"
  # A what-if that breaks the solver is said so, never a verdict; Agree rows run none.
  expect_rc 1 "$campaign" "$pararnn" "$work/broken" "python3 $adapter {case} {out} --mode drop-carry --chunk 8" "${plan[@]}" \
    --classes init --what-if "PYTHONPATH=/nonexistent PYTHONHOME=/nonexistent"
  grep -q $'\tPYTHONPATH=/nonexistent PYTHONHOME=/nonexistent: not judged: solver exit ' "$work/broken/summary.tsv" ||
    fail "a broken what-if: $(cut -f1,7 "$work/broken/summary.tsv")"
  expect_rc 0 "$campaign" "$pararnn" "$work/ok" "$pararnn solve {case} --out {out}" "${plan[@]}" --what-if "FIXED=1"
  [ "$(cut -f7 "$work/ok/summary.tsv" | sed 1d | sort -u)" = - ] || fail "a what-if ran on an Agree row"
  # Refusals: a word that is not NAME=VALUE.
  expect_rc 2 "$campaign" "$pararnn" "$work/x" "$solver {case} {out}" "${plan[@]}" --what-if "FIXED=1 ieee"
  says "--what-if: 'ieee' is not NAME=VALUE"
  ;;
fla_confirm_refuses_by_name)
  # scripts/ops-confirm-fla.py without torch or fla: what fla's naive references cannot confirm is
  # refused by name (exit 2) before any import; a case they can needs the libraries (3 when absent).
  confirm="$source_dir/scripts/ops-confirm-fla.py"
  make r --op ssd "${small[@]}" --dtype bf16
  expect_rc 2 python3 "$confirm" "$work/r.safetensors" x y z 0.008
  says "metadata 'op': fla's naive references are confirmed for gla, simple_gla, delta_rule, gated_delta_rule, dplr_delta_rule, rwkv7 (got 'ssd')"
  make d --op delta_rule "${small[@]}" --dtype bf16 --qk-l2norm
  expect_rc 2 python3 "$confirm" "$work/d.safetensors" x y z 0.008
  says "metadata 'use_qk_l2norm_in_kernel': delta_rule_recurrence takes no qk l2-normalisation"
  make s --op gla "${small[@]}" --dtype bf16 --scale 0.3
  expect_rc 2 python3 "$confirm" "$work/s.safetensors" x y z 0.008
  says "metadata 'scale': naive_recurrent_gla fixes the scale at K^-0.5"
  make g --op gated_delta_rule --batch 1 --time 40 --n-heads 2 --k-dim 6 --v-dim 5 --dtype bf16 --scale 0.3 --cu-seqlens 0,7,40 --h0-std 0.5
  python3 -B - "$confirm" "$work/g.safetensors" <<'PY' || fail "confirm plan"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("confirm", sys.argv[1])
confirm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(confirm)
headers, meta = confirm.adapter.read_header(sys.argv[2])
p = confirm.plan(meta, headers)
assert p["function"] == "naive_recurrent_gated_delta_rule" and p["inputs"] == ("q", "k", "v", "beta", "g"), p
assert p["scale"] == 0.3 and not p["head_first"], p
p = confirm.plan({"op": "delta_rule"}, {n: ("BF16", [1, 8, 2, 4]) for n in ("q", "k", "v", "beta")})
assert p["head_first"] and p["scale"] is None and p["q_factor"] is None, p
# dplr_recurrence fixes K^-0.5: another scale is folded into q; RWKV-7's default scale is 1.
p = confirm.plan({"op": "rwkv7"}, {n: ("BF16", [1, 8, 2, 4]) for n in ("r", "w", "k", "v", "a", "b")})
assert p["function"] == "dplr_recurrence" and p["inputs"] == ("r", "k", "v", "a", "b", "w"), p
assert p["head_first"] and p["scale"] is None and abs(p["q_factor"] - 2.0) < 1e-15, p
p = confirm.plan({"op": "dplr_delta_rule", "scale": "0.25"}, {n: ("BF16", [1, 8, 2, 16]) for n in ("q", "k", "v", "a", "b", "gk")})
assert p["inputs"] == ("q", "k", "v", "a", "b", "gk") and abs(p["q_factor"] - 1.0) < 1e-15, p
PY
  expect_rc 2 python3 "$confirm" "$work/g.safetensors" x y z tight
  says "RTOL: must be a positive finite number (got 'tight')"
  expect_rc 2 python3 "$confirm" "$work/g.safetensors" x y z 0.008 --grad-rtol 0
  says "--grad-rtol: must be a positive finite number (got '0')"
  expect_rc 2 python3 "$confirm" "$work/g.safetensors" x y z 0.008 --grad-rtol nan
  says "--grad-rtol: must be a positive finite number (got 'nan')"
  if ! python3 -c "import torch, fla" 2>/dev/null; then
    expect_rc 3 python3 "$confirm" "$work/g.safetensors" x y z 0.008
    says "needs torch and flash-linear-attention"
  else
    # With the libraries (a machine with torch and fla, not CI): fla's naive GLA in f64 and its
    # autograd gradients against our oracle's and the floor's, on a bf16 case with h0. The floor
    # stands in for the answer; every output and gradient of it lies within its tau of the
    # reference (the rtols the contract gives, as compare.json states them).
    make c --op gla "${small[@]}" --dtype bf16 --h0-std 0.5
    floor_confirmed "$confirm" c "fla's naive reference" o final_state grad.q grad.k grad.v grad.g grad.initial_state
  fi
  ;;
mamba_confirm_refuses_by_name)
  # scripts/ops-confirm-mamba.py without torch or mamba-ssm: what its reference cannot confirm is
  # refused by name (exit 2) before any import; an ssd case plans (groups to heads, softplus), and
  # needs the libraries (3 when absent).
  confirm="$source_dir/scripts/ops-confirm-mamba.py"
  make r --op rwkv7 "${small[@]}" --dtype bf16
  expect_rc 2 python3 "$confirm" "$work/r.safetensors" x y z 0.008
  says "metadata 'op': mamba-ssm's references confirm ssd and selective_scan (got 'rwkv7')"
  make u --op selective_scan --batch 2 --time 40 --n-heads 3 --k-dim 4 --dtype f32 --seed 3
  make s --op ssd --batch 1 --time 40 --n-heads 2 --k-dim 6 --v-dim 5 --dtype bf16 --cu-seqlens 0,7,40
  make h --op ssd --batch 2 --time 40 --n-heads 2 --k-dim 6 --v-dim 5 --dtype f32 --h0-std 0.5
  python3 -B - "$confirm" "$work/s.safetensors" "$work/h.safetensors" "$work/u.safetensors" <<'PY' || fail "confirm plan"
import importlib.util, sys
spec = importlib.util.spec_from_file_location("confirm", sys.argv[1])
confirm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(confirm)
p = confirm.plan(*reversed(confirm.adapter.read_header(sys.argv[3])))
assert "initial_states" in p["optional"] and "cu_seqlens" not in p["optional"], p
headers, meta = confirm.adapter.read_header(sys.argv[2])
p = confirm.plan(meta, headers)
assert "cu_seqlens" in p["optional"] and "initial_states" not in p["optional"], p
assert p["heads_per_group"] == headers["x"][1][2] // headers["B"][1][2], (p, headers)
for missing in ("dt", "C"):
    try:
        confirm.plan(meta, {k: v for k, v in headers.items() if k != missing})
        raise SystemExit(f"planned without {missing}")
    except confirm.Unsupported as e:
        assert f"tensor '{missing}'" in str(e), e
# selective_scan: selective_scan_ref's inputs, its optional D, z, delta_bias, delta_softplus.
headers, meta = confirm.adapter.read_header(sys.argv[4])
p = confirm.plan(meta, headers)
assert p["op"] == "selective_scan" and p["optional"] == ("D", "z", "delta_bias"), p
assert p["softplus"] == (meta["delta_softplus"] == "True"), (p, meta)
try:
    confirm.plan(meta, {k: v for k, v in headers.items() if k != "delta"})
    raise SystemExit("planned without delta")
except confirm.Unsupported as e:
    assert "tensor 'delta': required by selective_scan_ref" in str(e), e
PY
  expect_rc 2 python3 "$confirm" "$work/s.safetensors" x y z tight
  says "RTOL: must be a positive finite number (got 'tight')"
  expect_rc 2 python3 "$confirm" "$work/s.safetensors" x y z 0.008 --grad-rtol -1
  says "--grad-rtol: must be a positive finite number (got '-1')"
  expect_rc 2 python3 "$confirm" "$work/s.safetensors" x y z 0.008 --device tpu
  says "--device: must be cpu or cuda (got 'tpu')"
  if ! python3 -c "import torch, einops, importlib.util, sys; sys.exit(importlib.util.find_spec('mamba_ssm') is None)" \
      2>/dev/null; then
    if ! python3 -c "import torch, einops" 2>/dev/null; then
      expect_rc 3 python3 "$confirm" "$work/s.safetensors" x y z 0.008
      says "needs torch, einops and mamba-ssm's files"
    fi
  else
    # With the libraries (torch, einops and mamba-ssm's files, not CI): ssd_minimal_discrete in f64
    # and its autograd gradients against our oracle's and the floor's, on the f32 case with h0
    # (D, z, dt_bias, initial_states). The floor stands in for the answer; every output and
    # gradient of it lies within its tau of the reference (the rtols the contract gives, as
    # compare.json states them).
    floor_confirmed "$confirm" h "mamba-ssm's reference" out final_states grad.x grad.dt grad.A grad.B grad.C grad.D \
      grad.z grad.dt_bias grad.initial_states
    # selective_scan through selective_scan_ref (a stand-in for the CUDA extension where it is absent).
    floor_confirmed "$confirm" u "mamba-ssm's reference" out last_state grad.u grad.delta grad.A grad.B grad.C grad.D \
      grad.z grad.delta_bias
    grep -q "^mamba_ssm.ops.selective_scan_interface.selective_scan_ref in f64 on cpu" <<<"$out" || fail "no selective_scan_ref heading: $out"
  fi
  ;;
gradients_exact_agrees_wrong_disagrees)
  # grad.<input> tensors (docs/ops/README.md, "Gradients"): the adapter's own central
  # differences of its exact forward Agree (exit 0); one gradient 10 % off Disagrees as worse
  # than the dtype allows (1), a NaN one Disagrees (1), a missing one is never Agree (2); the
  # oracle's (oracle --grad) and the floor's (solve --grad) Agree; a separate --gradients file;
  # a gradient of no input is refused by name.
  tiny=(--batch 1 --time 6 --n-heads 2 --k-dim 3 --v-dim 2 --dtype f32)
  grad_cases=(
    "g_gla --op gla ${tiny[*]} --h0-std 0.5"
    "g_gated_delta --op gated_delta_rule ${tiny[*]} --h0-std 0.5 --qk-l2norm"
    "g_rwkv7_packed --op rwkv7 ${tiny[*]} --cu-seqlens 0,2,6 --h0-std 0.5"
    "g_selective_scan --op selective_scan --batch 1 --time 6 --n-heads 2 --k-dim 3 --dtype f32"
    "g_ssd --op ssd ${tiny[*]} --h0-std 0.5"
  )
  for spec in "${grad_cases[@]}"; do
    read -r -a words <<<"$spec"
    name=${words[0]}
    make "$name" "${words[@]:1}"
    c="$work/$name.safetensors"
    victim=grad.k
    case $name in *selective_scan|*ssd) victim=grad.B ;; esac
    PARARNN_GRADIENTS=1 python3 "$adapter" "$c" "$work/$name.exact.safetensors" --mode exact 2>/dev/null || fail "adapter exact $name"
    expect_rc 0 "$pararnn" compare "$c" --trajectory "$work/$name.exact.safetensors" --json "$work/$name.exact.json"
    says "gradient(s) judged"
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); g=r['gradients']; sys.exit(0 if g and all(x['finding']=='within' for x in g) else 1)" \
      "$work/$name.exact.json" || fail "$name: gradients not all within"
    python3 "$adapter" "$c" "$work/$name.wrong.safetensors" --mode wrong-grad 2>/dev/null || fail "adapter wrong-grad $name"
    expect_rc 1 "$pararnn" compare "$c" --trajectory "$work/$name.wrong.safetensors"
    says "$victim: worse than f32 allows"
    python3 "$adapter" "$c" "$work/$name.nan.safetensors" --mode nan-grad 2>/dev/null || fail "adapter nan-grad $name"
    expect_rc 1 "$pararnn" compare "$c" --trajectory "$work/$name.nan.safetensors"
    says "$victim: 1 NaN"
    python3 "$adapter" "$c" "$work/$name.missing.safetensors" --mode missing-grad 2>/dev/null || fail "adapter missing-grad $name"
    expect_rc 2 "$pararnn" compare "$c" --trajectory "$work/$name.missing.safetensors"
    says "$victim: missing"
    expect_rc 0 "$pararnn" oracle "$c" --grad --out "$work/$name.oracle.safetensors"
    says "gradient(s) of L = the default loss, certified"
    expect_rc 0 "$pararnn" compare "$c" --trajectory "$work/$name.oracle.safetensors"
    expect_rc 0 "$pararnn" solve "$c" --grad --out "$work/$name.floor.safetensors"
    expect_rc 0 "$pararnn" compare "$c" --trajectory "$work/$name.floor.safetensors"
    says "gradient(s) judged"
  done
  st="python3 $here/safetensors_tool.py"
  c="$work/g_gla.safetensors"
  expect_rc 0 "$pararnn" solve "$c" --out "$work/g_gla.outputs.safetensors"
  $st drop "$work/g_gla.exact.safetensors" "$work/g_gla.a.safetensors" o || fail "tool"
  $st drop "$work/g_gla.a.safetensors" "$work/g_gla.grads.safetensors" final_state || fail "tool"
  expect_rc 0 "$pararnn" compare "$c" --trajectory "$work/g_gla.outputs.safetensors" --gradients "$work/g_gla.grads.safetensors"
  says "gradient(s) judged"
  # --gradients FILE asks for the gradients: a file without them (no tensor at all, or the answer
  # itself when it carries none) is every gradient missing, never Agree; the answer file named
  # as its own gradients' file is judged as the answer alone is.
  $st keep "$work/g_gla.grads.safetensors" "$work/g_gla.nothing.safetensors" || fail "tool"
  expect_rc 2 "$pararnn" compare "$c" --trajectory "$work/g_gla.outputs.safetensors" \
    --gradients "$work/g_gla.nothing.safetensors" --json "$work/g_gla.nothing.json"
  says "grad.q: missing"
  [ "$(json_get "$work/g_gla.nothing.json" "['verdict']")" = Inconclusive ] || fail "no gradients: JSON verdict"
  expect_rc 2 "$pararnn" compare "$c" --trajectory "$work/g_gla.outputs.safetensors" \
    --gradients "$work/g_gla.outputs.safetensors"
  says "grad.q: missing"
  expect_rc 0 "$pararnn" compare "$c" --trajectory "$work/g_gla.exact.safetensors" --gradients "$work/g_gla.exact.safetensors"
  says "gradient(s) judged"
  expect_rc 1 "$pararnn" compare "$c" --trajectory "$work/g_gla.wrong.safetensors" --gradients "$work/g_gla.wrong.safetensors"
  $st add "$work/g_gla.exact.safetensors" "$work/g_gla.junk.safetensors" grad.beta F32 1,6,2 1 || fail "tool"
  expect_rc 2 "$pararnn" compare "$c" --trajectory "$work/g_gla.junk.safetensors"
  says "tensor 'grad.beta': is not the gradient of an input"
  ;;
campaign_reference_agrees_faulty_is_kept)
  # scripts/ops-campaign.sh: the plan with the reference adapter, every row Agree (exit 0, nothing
  # kept); with the carry-dropping adapter, every row not Agree, its case, answer and judgement kept.
  campaign="$source_dir/scripts/ops-campaign.sh"
  plan=(--quick --ops gla,gated_delta_rule,rwkv7 --modes chunk --dtypes bf16,f32 --T 64)
  expect_rc 0 "$campaign" "$pararnn" "$work/ref" "$pararnn solve {case} --out {out}" "${plan[@]}"
  [ "$(grep -c $'\tAgree\t' "$work/ref/summary.tsv")" -eq 30 ] || fail "reference rows: $(cat "$work/ref/summary.tsv")"
  [ -z "$(ls -A "$work/ref/rows")" ] || fail "an Agree row was kept"
  expect_rc 1 "$campaign" "$pararnn" "$work/bad" "python3 $adapter {case} {out} --mode drop-carry --chunk 8" "${plan[@]}"
  grep -q $'\tAgree\t' "$work/bad/summary.tsv" && fail "a dropped carry Agreed: $(cat "$work/bad/summary.tsv")"
  row="$work/bad/rows/gla.chunk.bf16.T64.d16.init"
  for f in case.safetensors answer.safetensors compare.json stderr.txt; do [ -f "$row/$f" ] || fail "row keeps no $f"; done
  [ "$(json_get "$row/compare.json" "['verdict']")" = Disagree ] || fail "kept row's verdict"
  [ -z "$(find "$work" -name '.row-*')" ] || fail "a scratch folder was left"
  # --gradients: the solver runs with PARARNN_GRADIENTS=1 and compare judges its grad.* too (the
  # floor's gradients, pararnn solve --grad, Agree on every row, and say so in the summary).
  expect_rc 0 "$campaign" "$pararnn" "$work/grad" "$pararnn solve {case} --grad --out {out}" \
    --quick --ops gla --modes chunk --dtypes f32 --T 64 --gradients
  [ "$(grep -c $'\tAgree\t' "$work/grad/summary.tsv")" -eq 5 ] || fail "gradient rows: $(cat "$work/grad/summary.tsv")"
  [ "$(grep -c 'gradient(s) judged' "$work/grad/summary.tsv")" -eq 5 ] || fail "no gradient judged: $(cat "$work/grad/summary.tsv")"
  # A solver that ignores PARARNN_GRADIENTS (no grad.* in its answer) under --gradients: its
  # gradients are missing, never Agree, and the campaign does not exit 0.
  expect_rc 1 "$campaign" "$pararnn" "$work/grad-none" "$pararnn solve {case} --out {out}" \
    --quick --ops gla --modes chunk --dtypes f32 --T 64 --classes init --gradients
  grep -q $'\tAgree\t' "$work/grad-none/summary.tsv" && fail "missing gradients Agreed: $(cat "$work/grad-none/summary.tsv")"
  grep -q $'\tInconclusive\t' "$work/grad-none/summary.tsv" || fail "missing gradients: $(cat "$work/grad-none/summary.tsv")"
  # --gradients with --confirm: the kept oracle and floor carry their gradients, and {grad_rtol}
  # is the gradient tau's rtol from compare.json (f32: 2e-4); {grad_rtol} without --gradients is
  # refused by name.
  stub="python3 $here/solvers/confirm_stub.py {case} {answer} {oracle} {floor} {rtol} --grad-rtol {grad_rtol}"
  expect_rc 1 "$campaign" "$pararnn" "$work/grad-confirm" "python3 $adapter {case} {out} --mode wrong-grad" \
    --quick --ops gla --modes chunk --dtypes f32 --T 8 --dims 4 --classes init --gradients --confirm "$stub"
  row="$work/grad-confirm/rows/gla.chunk.f32.T8.d4.init"
  grep -q "^oracle: .*grad.q" "$row/confirm.txt" || fail "the kept oracle has no gradients: $(cat "$row/confirm.txt")"
  grep -q "^floor: .*grad.q" "$row/confirm.txt" || fail "the kept floor has no gradients: $(cat "$row/confirm.txt")"
  want=$(json_get "$row/compare.json" "['gradient_tau']['rtol']")
  want=$(python3 -c 'import sys; print(f"{float(sys.argv[1]):g}")' "$want")
  grep -qx "grad rtol $want" "$row/confirm.txt" || fail "grad rtol not from compare.json ($want): $(cat "$row/confirm.txt")"
  expect_rc 2 "$campaign" "$pararnn" "$work/x" "$pararnn solve {case} --out {out}" --quick --ops gla --confirm "$stub"
  says "--confirm's {grad_rtol} needs --gradients"
  ;;
*) fail "unknown claim" ;;
esac
echo "PASS [$claim]"
