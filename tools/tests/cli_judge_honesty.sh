#!/usr/bin/env bash
# The judge is never talked into Agree or exit 0 (ctest runs one claim per test):
#   cli_judge_honesty.sh PARARNN WORKDIR CLAIM
# Each claim is a defect that was found by hostile and real (pararnn-torch) inputs. The planted
# errors are multiples of the contract's τ (5e-3 = 50 τ(f32), inside the bf16/f16 band of 1e-2;
# 5e-5 = τ(f32)/2, far outside τ(f64) = 1e-10); a tolerance the test compares against is read
# from a report, which takes it from the contract table.
set -u
pararnn=$1
work=$2/$3
claim=$3
tool="python3 $(dirname "$0")/safetensors_tool.py"
rm -rf "$work" && mkdir -p "$work"
. "$(dirname "$0")/claim_lib.sh"
absent() { [ ! -e "$1" ] || fail "$1 was left behind"; }
no_temporaries() { ! ls "$work" | grep -q '\.tmp' || fail "a temporary was left behind: $(ls "$work")"; }
make() { expect_rc 0 "$pararnn" make-case "$@"; }

case "$claim" in
narrow_trajectory_judged_at_case_tau)
  # f32 case, oracle + 50 τ(f32) stored as BF16 / F16 (inside their 1e-2 band): Disagree at f32's τ.
  make --cell gru --seed 1 --batch 2 --time 64 --d-in 4 --d-h 8 --out "$work/f32.safetensors"
  expect_rc 0 "$pararnn" verify "$work/f32.safetensors" --json "$work/tau32.json"
  tau32=$(json_get "$work/tau32.json" "['atol']")  # the f32 tau, from the contract table
  expect_rc 0 "$pararnn" oracle "$work/f32.safetensors" --out "$work/oracle.safetensors"
  for dtype in BF16 F16; do
    $tool shift-cast "$work/oracle.safetensors" "$work/theirs.safetensors" H 5e-3 $dtype
    expect_rc 1 "$pararnn" compare "$work/f32.safetensors" --trajectory "$work/theirs.safetensors" \
      --json "$work/cmp.json"
    [ "$(json_get "$work/cmp.json" "['atol']")" = "$tau32" ] || fail "atol is not the f32 tau"
    [ "$(json_get "$work/cmp.json" "['dtype']")" = f32 ] || fail "report dtype"
    [ "$(json_get "$work/cmp.json" "['trajectory_dtype']")" = "$(tr A-Z a-z <<<$dtype)" ] || fail "trajectory dtype"
  done
  # f64 case, oracle + τ(f32)/2 stored as F32: Disagree at f64's τ; --atol stays the override.
  make --cell lstm --seed 2 --batch 1 --time 32 --d-in 3 --d-h 4 --dtype f64 --out "$work/f64.safetensors"
  expect_rc 0 "$pararnn" oracle "$work/f64.safetensors" --out "$work/oracle64.safetensors"
  $tool shift-cast "$work/oracle64.safetensors" "$work/theirs32.safetensors" H 5e-5 F32
  expect_rc 1 "$pararnn" compare "$work/f64.safetensors" --trajectory "$work/theirs32.safetensors"
  expect_rc 0 "$pararnn" compare "$work/f64.safetensors" --trajectory "$work/theirs32.safetensors" --atol "$tau32"
  ;;
rwkv7_non_finite_solve_raises)
  make --cell rwkv7 --n-heads 2 --seed 1 --batch 1 --time 16 --d-in 4 --d-h 8 --out "$work/case.safetensors"
  $tool set "$work/case.safetensors" "$work/nan_x.safetensors" x 13 nan
  $tool set "$work/case.safetensors" "$work/nan_w.safetensors" W_x.weight 5 nan
  $tool fill "$work/case.safetensors" "$work/huge_x.safetensors" x 3e38
  for bad in nan_x nan_w huge_x; do
    for backend in auto eager; do
      expect_rc 1 "$pararnn" solve "$work/$bad.safetensors" --backend $backend --out "$work/solved.safetensors"
      says "Newton diverged"
      absent "$work/solved.safetensors"
    done
  done
  expect_rc 1 "$pararnn" solve "$work/nan_x.safetensors" --out "$work/solved.safetensors"
  says "x holds nan at index (0, 3, 1)"
  ;;
oracle_exits_2_when_not_certified)
  make --cell gru --seed 3 --batch 1 --time 16 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  expect_rc 2 "$pararnn" oracle "$work/case.safetensors" --certify-budget 0 --out "$work/oracle.safetensors"
  says "not certified"
  absent "$work/oracle.safetensors"
  $tool set "$work/case.safetensors" "$work/nan.safetensors" x 4 nan
  expect_rc 2 "$pararnn" oracle "$work/nan.safetensors" --out "$work/oracle.safetensors"
  says "x holds nan at index (0, 1, 1)"
  absent "$work/oracle.safetensors"
  expect_rc 2 "$pararnn" verify "$work/case.safetensors" --certify-budget 0
  expect_rc 0 "$pararnn" oracle "$work/case.safetensors" --out "$work/oracle.safetensors"
  ;;
failed_commands_leave_no_file)
  make --cell gru --seed 4 --batch 1 --time 16 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  mkdir -p "$work/dir.json"
  for cmd in verify kstar; do
    if [ $cmd = kstar ]; then
      expect_rc 2 "$pararnn" kstar --T 16 --seeds 1 --json "$work/dir.json"
    else
      expect_rc 2 "$pararnn" verify "$work/case.safetensors" --json "$work/dir.json"
    fi
    says "$work/dir.json"
    says "directory"
  done
  expect_rc 2 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/case.safetensors" --json "$work/dir.json"
  expect_rc 2 "$pararnn" solve "$work/case.safetensors" --out "$work/missing/solved.safetensors"
  says "existing directory"
  expect_rc 2 "$pararnn" oracle "$work/case.safetensors" --certify-budget 0 --out "$work/oracle.safetensors"
  absent "$work/oracle.safetensors"
  no_temporaries
  # A --json report of an earlier run (here an Agree) never stands for a refused run: every
  # command that takes --json removes it when it ends without writing it (exit 2, no report).
  expect_rc 0 "$pararnn" solve "$work/case.safetensors" --out "$work/H.safetensors"
  expect_rc 0 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" --json "$work/agree.json"
  [ "$(json_get "$work/agree.json" "['verdict']")" = Agree ] || fail "setup: the solver's H does not Agree"
  printf 'not a case' > "$work/junk.safetensors"
  stale() {  # stale COMMAND ARGS...: run over an earlier Agree report, exits 2 and leaves no report
    cp "$work/agree.json" "$work/stale.json"
    expect_rc 2 "$pararnn" "$1" --json "$work/stale.json" "${@:2}"
    absent "$work/stale.json"
  }
  stale verify "$work/case.safetensors" --max-iters many
  stale verify "$work/junk.safetensors"
  stale compare "$work/case.safetensors" --trajectory "$work/junk.safetensors"
  stale compare "$work/junk.safetensors" --trajectory "$work/H.safetensors"
  stale compare "$work/case.safetensors" --trajectory "$work/case.safetensors"
  says "tensor 'H': missing"
  stale kstar --T 16 --seeds 1 --picard-adapt maybe
  stale seqpar "$work/case.safetensors" --ranks 17
  stale diagnose "$work/junk.safetensors"
  # An input named as --json is refused by name, and never removed nor overwritten.
  cp "$work/H.safetensors" "$work/H.copy"
  expect_rc 2 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" --json "$work/H.safetensors"
  says "--json: must not name"
  cmp -s "$work/H.safetensors" "$work/H.copy" || fail "compare removed or overwrote its --trajectory named as --json"
  cp "$work/case.safetensors" "$work/case.copy"
  expect_rc 2 "$pararnn" verify "$work/case.safetensors" --json "$work/case.safetensors"
  says "--json: must not name"
  cmp -s "$work/case.safetensors" "$work/case.copy" || fail "verify removed or overwrote its case named as --json"
  # A run that writes its report keeps it.
  expect_rc 0 "$pararnn" verify "$work/case.safetensors" --json "$work/stale.json"
  [ "$(json_get "$work/stale.json" "['verdict']")" = Agree ] || fail "verify's own report is not there"
  no_temporaries
  ;;
every_path_refuses_the_same_case)
  make --cell gru --seed 5 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  expect_rc 0 "$pararnn" solve "$work/case.safetensors" --out "$work/H.safetensors"
  $tool add "$work/case.safetensors" "$work/foo.safetensors" foo F32 3 0
  $tool add "$work/case.safetensors" "$work/H_inside.safetensors" H F32 1,8,4 0
  for bad in foo H_inside; do
    expect_rc 2 "$pararnn" verify "$work/$bad.safetensors"
    expect_rc 2 "$pararnn" solve "$work/$bad.safetensors" --out "$work/out.safetensors"
    expect_rc 2 "$pararnn" oracle "$work/$bad.safetensors" --out "$work/out.safetensors"
    expect_rc 2 "$pararnn" compare "$work/$bad.safetensors" --trajectory "$work/H.safetensors"
    says "is not a parameter"
  done
  make --cell slstm --seed 5 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$work/slstm.safetensors"
  for eps in 0 -1 inf nan; do
    $tool torch-dump "$work/slstm.safetensors" "$work/eps.safetensors" --keep-meta --meta eps=$eps
    expect_rc 2 "$pararnn" verify "$work/eps.safetensors"
    expect_rc 2 "$pararnn" solve "$work/eps.safetensors" --out "$work/out.safetensors"
    expect_rc 2 "$pararnn" oracle "$work/eps.safetensors" --out "$work/out.safetensors"
    expect_rc 2 "$pararnn" compare "$work/eps.safetensors" --trajectory "$work/H.safetensors"
    says "eps"
  done
  absent "$work/out.safetensors"
  ;;
make_case_refuses_unusable_flags)
  for flags in "--h0-std nan" "--h0-std inf" "--h0-std -1" "--weight-std inf" "--weight-std nan"; do
    expect_rc 2 "$pararnn" make-case --cell gru $flags --out "$work/case.safetensors"
    says "${flags%% *}"
  done
  expect_rc 2 "$pararnn" make-case --cell slstm --eps inf --out "$work/case.safetensors"
  says "--eps"
  expect_rc 2 "$pararnn" make-case --cell gru --dtype f32 --weight-std 1e39 --max-recurrent-norm none \
    --out "$work/case.safetensors"
  says "--weight-std"
  expect_rc 2 "$pararnn" make-case --cell m2rnn --k-dim 2 --v-dim 2 --batch 1 --time 16 \
    --cu-seqlens 0,5,16 --out "$work/case.safetensors"
  says "--cu-seqlens"
  expect_rc 2 "$pararnn" make-case --cell rwkv7 --n-heads 2 --batch 1 --time 16 --cu-seqlens 0,5,16 \
    --out "$work/case.safetensors"
  says "--cu-seqlens"
  absent "$work/case.safetensors"
  ;;
numbers_and_lists_parse_strictly)
  for list in "0,5x,16" "0,5.9,16" "0, 5 ,16" "0,16," ",0,16"; do
    expect_rc 2 "$pararnn" make-case --cell gru --batch 1 --time 16 --cu-seqlens "$list" --out "$work/case.safetensors"
    says "--cu-seqlens"
  done
  expect_rc 2 "$pararnn" kstar --T 16,5x --seeds 1
  says "--T"
  expect_rc 2 "$pararnn" make-case --cell gru --seed -1 --out "$work/case.safetensors"
  says "--seed"
  expect_rc 2 "$pararnn" kstar --T 16 --k-limit -1
  says "--k-limit"
  make --cell gru --seed 1 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$work/ok.safetensors"
  for atol in -1 nan inf 1e-4x; do
    expect_rc 2 "$pararnn" verify "$work/ok.safetensors" --atol "$atol"
    says "--atol"
  done
  expect_rc 2 "$pararnn" verify "$work/ok.safetensors" --seed -1
  expect_rc 2 "$pararnn" verify "$work/ok.safetensors" --max-iters " 3"
  rm -f "$work/ok.safetensors"
  absent "$work/case.safetensors"
  ;;
messages_name_the_problem)
  expect_rc 2 "$pararnn" make-case --cell gru --batch 100000 --time 100000 --d-in 100000 --out "$work/case.safetensors"
  says "--batch"
  expect_rc 2 "$pararnn" make-case --cell gru --d-h 4000000000 --out "$work/case.safetensors"
  says "--d-h"
  expect_rc 2 "$pararnn" make-case --cell m2rnn --k-dim 4294967296 --v-dim 4294967296 --out "$work/case.safetensors"
  says "--k-dim 4294967296 --v-dim 4294967296"
  absent "$work/case.safetensors"
  make --cell gru --seed 1 --batch 1 --time 16 --d-in 3 --d-h 4 --out "$work/ok.safetensors"
  $tool torch-dump "$work/ok.safetensors" "$work/cu.safetensors" --keep-meta --meta cu_seqlens=0,99999999999999999999,16
  expect_rc 2 "$pararnn" verify "$work/cu.safetensors"
  says "metadata 'cu_seqlens'"
  says "$work/cu.safetensors"
  $tool set "$work/ok.safetensors" "$work/nan.safetensors" W_x.weight 2 nan
  expect_rc 1 "$pararnn" solve "$work/nan.safetensors" --out "$work/out.safetensors"
  says "parameter 'W_x.weight' holds nan at index (0, 2)"
  ;;
non_finite_cotangent_is_refused)
  make --cell gru --seed 6 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  $tool add "$work/case.safetensors" "$work/g.safetensors" grad.H F32 1,8,4 1
  $tool set "$work/g.safetensors" "$work/nan_g.safetensors" grad.H 9 nan
  expect_rc 0 "$pararnn" solve "$work/g.safetensors" --grad --out "$work/out.safetensors"
  rm -f "$work/out.safetensors"
  expect_rc 2 "$pararnn" solve "$work/nan_g.safetensors" --grad --out "$work/out.safetensors"
  says "grad.H holds nan at index (0, 2, 1)"
  expect_rc 2 "$pararnn" verify "$work/nan_g.safetensors" --grad
  expect_rc 2 "$pararnn" oracle "$work/nan_g.safetensors" --grad --out "$work/out.safetensors"
  absent "$work/out.safetensors"
  ;;
duplicated_header_keys_are_refused)
  make --cell gru --seed 7 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  $tool duplicate-key "$work/case.safetensors" "$work/dup.safetensors"
  expect_rc 2 "$pararnn" verify "$work/dup.safetensors"
  says "'cell' twice"
  ;;
pararnn_torch_dumps_verify)
  # Each cell re-written exactly as docs/pararnn-torch-cases.md's dump_case writes it: the
  # state_dict, x, and metadata str() of the constructor arguments ("None" where unset).
  dump() { $tool torch-dump "$work/made.safetensors" "$work/$1.safetensors" "${@:2}"; }
  make --cell gru --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump gru --meta mix=diag --meta n_heads=None --meta max_recurrent_norm=0.5
  make --cell gru --mix head --n-heads 2 --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump gru_head --meta mix=head --meta n_heads=2 --meta max_recurrent_norm=None
  make --cell lstm --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --h0-std 0.5 --out "$work/made.safetensors"
  dump lstm --meta max_recurrent_norm=0.5
  make --cell slstm --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump slstm --meta mix=diag --meta n_heads=None --meta max_recurrent_norm=0.5 --meta eps=1e-06
  make --cell nlru --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump nlru --meta mix=diag --meta max_recurrent_norm=0.5
  make --cell titans --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump titans --meta mix=diag --meta max_recurrent_norm=0.5
  make --cell hopfield --seed 1 --batch 2 --time 32 --d-in 4 --d-h 4 --out "$work/made.safetensors"
  dump hopfield --meta mix=dense --meta beta=0.5
  make --cell m2rnn --k-dim 2 --v-dim 3 --seed 1 --batch 2 --time 32 --d-in 4 --out "$work/made.safetensors"
  dump m2rnn --meta k_dim=2 --meta v_dim=3
  dump m2rnn_no_dims
  make --cell rwkv7 --n-heads 2 --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump rwkv7 --meta mix=rwkv7 --meta n_heads=2
  dump rwkv7_no_heads --meta mix=rwkv7
  make --cell cfc --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --out "$work/made.safetensors"
  dump cfc --meta mix=diag --meta gate_mix=input --meta time_bias_init=-3.0 --meta max_recurrent_norm=0.5
  dump cfc_0174 --drop W_b.weight --drop W_b.bias --meta mix=diag --meta max_recurrent_norm=0.5
  for cell in gru gru_head lstm slstm nlru titans hopfield m2rnn m2rnn_no_dims rwkv7 cfc cfc_0174; do
    expect_rc 0 "$pararnn" verify "$work/$cell.safetensors" --json "$work/$cell.json"
    says "verdict: Agree"
  done
  [ "$(json_get "$work/cfc_0174.json" "['cell_version']")" = "pararnn-torch 0.17.4 (no W_b: read as W_b = 0)" ] \
    || fail "the 0.17.4 CfC report does not record its version"
  expect_rc 2 "$pararnn" verify "$work/rwkv7_no_heads.safetensors"
  says "n_heads"
  expect_rc 2 "$pararnn" oracle "$work/rwkv7_no_heads.safetensors" --out "$work/out.safetensors"
  says "n_heads"
  ;;
compare_judges_external_gradients)
  # An external solver's gradients (issue 41): our own `solve --grad` answer is Agree, in one file
  # (H beside grad.*), in two files written as safetensors.torch.save_file writes them, and
  # through --gradients naming the trajectory file itself; one element moved by 10 x the allowed
  # difference (the τ of the right answer's report, from the contract table) is Disagree there;
  # a NaN is judged Disagree.
  make --cell lstm --seed 1 --batch 2 --time 32 --d-in 4 --d-h 8 --h0-std 0.5 --out "$work/case.safetensors"
  expect_rc 0 "$pararnn" solve "$work/case.safetensors" --grad --out "$work/solved.safetensors"
  expect_rc 0 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/solved.safetensors" --json "$work/right.json"
  says "gradient W_x.weight"
  for name in x h0 W_x.weight W_x.bias a_f c_o; do
    [ "$(json_get "$work/right.json" "['gradients']['$name']['ok']")" = True ] || fail "gradient $name not judged ok"
  done
  $tool keep "$work/solved.safetensors" "$work/H.safetensors" H
  $tool drop "$work/solved.safetensors" "$work/G.safetensors" H
  $tool strip "$work/G.safetensors" "$work/G_torch.safetensors"
  expect_rc 0 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" \
    --gradients "$work/G_torch.safetensors"
  expect_rc 0 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/solved.safetensors" \
    --gradients "$work/solved.safetensors"
  export ATOL=$(json_get "$work/right.json" "['gradients']['W_x.weight']['atol']")
  export RTOL=$(json_get "$work/right.json" "['gradients']['W_x.weight']['rtol']")
  $tool shift-at "$work/G_torch.safetensors" "$work/G_wrong.safetensors" grad.W_x.weight 7 10
  expect_rc 1 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" \
    --gradients "$work/G_wrong.safetensors" --json "$work/wrong.json"
  [ "$(json_get "$work/wrong.json" "['gradients']['W_x.weight']['mismatches']")" = 1 ] || fail "planted mismatch count"
  [ "$(json_get "$work/wrong.json" "['gradients']['W_x.weight']['worst_index']")" = "[1, 3]" ] || fail "planted index"
  [ "$(json_get "$work/wrong.json" "['gradients']['x']['ok']")" = True ] || fail "x gradient"
  $tool set "$work/G_torch.safetensors" "$work/G_nan.safetensors" grad.h0 3 nan
  expect_rc 1 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" \
    --gradients "$work/G_nan.safetensors" --json "$work/nan.json"
  [ "$(json_get "$work/nan.json" "['verdict']")" = Disagree ] || fail "a NaN gradient is not Disagree"
  ;;
compare_gradients_missing_are_named_never_agree)
  make --cell lstm --seed 2 --batch 2 --time 32 --d-in 4 --d-h 8 --h0-std 0.5 --out "$work/case.safetensors"
  expect_rc 0 "$pararnn" solve "$work/case.safetensors" --grad --out "$work/solved.safetensors"
  $tool drop "$work/solved.safetensors" "$work/no_h0.safetensors" grad.h0
  expect_rc 2 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/no_h0.safetensors" --json "$work/missing.json"
  says "grad.h0"
  says "MISSING"
  [ "$(json_get "$work/missing.json" "['verdict']")" = Inconclusive ] || fail "verdict"
  [ "$(json_get "$work/missing.json" "['gradients_missing']")" = "['h0']" ] || fail "gradients_missing"
  # --gradients given, the file holding none of them: every one missing, never Agree.
  $tool keep "$work/solved.safetensors" "$work/H.safetensors" H
  expect_rc 2 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors" \
    --gradients "$work/H.safetensors"
  says "grad.x"
  # Without gradients anywhere, compare judges H alone, as before.
  expect_rc 0 "$pararnn" compare "$work/case.safetensors" --trajectory "$work/H.safetensors"
  ;;
compare_refuses_bad_gradient_tensors)
  # Misnamed, extra, mis-shaped, mistyped: exit 2 naming the file and the tensor, no report written.
  make --cell gru --seed 3 --batch 2 --time 16 --d-in 3 --d-h 4 --out "$work/case.safetensors"
  expect_rc 0 "$pararnn" solve "$work/case.safetensors" --grad --out "$work/solved.safetensors"
  $tool keep "$work/solved.safetensors" "$work/H.safetensors" H
  $tool drop "$work/solved.safetensors" "$work/G.safetensors" H
  $tool rename "$work/G.safetensors" "$work/misnamed.safetensors" grad.W_x.weight grad.W_x_weight
  $tool add "$work/G.safetensors" "$work/extra.safetensors" grad.h0 F32 2,4 0
  $tool reshape "$work/G.safetensors" "$work/misshaped.safetensors" grad.x 2,15,3
  $tool shift-cast "$work/G.safetensors" "$work/mistyped.safetensors" grad.a_z 0 F64
  refused() {
    expect_rc 2 "$pararnn" compare "$work/case.safetensors" --trajectory "$1" "${@:3}" --json "$work/refused.json"
    says "refused input"
    says "tensor '$2'"
    absent "$work/refused.json"
  }
  refused "$work/H.safetensors" grad.W_x_weight --gradients "$work/misnamed.safetensors"
  says "misnamed.safetensors"
  refused "$work/H.safetensors" grad.h0 --gradients "$work/extra.safetensors"
  refused "$work/H.safetensors" grad.x --gradients "$work/misshaped.safetensors"
  says "(2, 16, 3)"
  refused "$work/H.safetensors" grad.a_z --gradients "$work/mistyped.safetensors"
  says "f64"
  refused "$work/H.safetensors" H --gradients "$work/solved.safetensors"  # H belongs in --trajectory
  refused "$work/solved.safetensors" grad.W_x.bias --gradients "$work/G.safetensors"  # two sources of it
  $tool add "$work/solved.safetensors" "$work/h_last.safetensors" h_last F32 2,4 0
  refused "$work/h_last.safetensors" h_last  # a trajectory file holds H and grad.* only
  no_temporaries
  ;;
*)
  fail "unknown claim"
  ;;
esac
echo "ok [$claim]"
