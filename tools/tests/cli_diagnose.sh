#!/usr/bin/env bash
# Claims of `pararnn diagnose` (docs/diagnose.md), one per invocation:
#   prints_the_estimate        on made cases (a diagonal, a block and a dense cell, a packed one):
#                              exit 0 and the lines λ̂ (max, median, positive), stretch, chains,
#                              time; --json writes valid JSON with the same numbers;
#   refusals_name_the_flag     bad --window / --chains / --seed / a missing case: exit 2 naming
#                              the flag or the file, no JSON written;
#   failures_leave_no_file     a NaN in x (uncertifiable oracle), --certify-budget 0 and an
#                              unwritable --json: exit 2 with the reason, no file, no temporary,
#                              and no --json of an earlier run left standing.
set -u
pararnn=$1
work=$2
claim=$3
tool="python3 $(dirname "$0")/safetensors_tool.py"
source "$(dirname "$0")/claim_lib.sh"
rm -rf "$work/$claim" && mkdir -p "$work/$claim"
w=$work/$claim
absent() { [ ! -e "$1" ] || fail "$1 was left behind"; }
no_temporaries() { ! ls "$w" | grep -q '\.tmp' || fail "a temporary was left behind: $(ls "$w")"; }

case $claim in
prints_the_estimate)
  expect_rc 0 "$pararnn" make-case --cell gru --seed 3 --batch 2 --time 50 --d-in 4 --d-h 6 --h0-std 0.5 \
    --out "$w/gru.safetensors"
  expect_rc 0 "$pararnn" diagnose "$w/gru.safetensors" --window 16 --json "$w/gru.json"
  says "method: exact log|J| per channel"
  says "lyapunov exponent: max "
  says ", median "
  says "positive in "
  says "of 12 (chain, channel) units"
  says "stretch: "
  says "W = 16 steps"
  says "chains: 2 of 2, all (seed 0), 100 Jacobian steps"
  says "time: "
  says "report: $w/gru.json"
  python3 - "$w/gru.json" "$out" <<'EOF' || fail "JSON does not hold the printed numbers"
import json, re, sys
d = json.load(open(sys.argv[1]))
printed = sys.argv[2]
assert d["schema_version"] == 1 and d["command"] == "diagnose"
assert d["method"] == "exact log|J| per channel" and d["jacobian_block"] == 1
lam = d["lyapunov"]
assert lam["units"] == 12 == len(d["units"])
assert lam["max"] == max(u["exponent"] for u in d["units"])
assert 0.0 <= lam["fraction_positive"] <= 1.0
assert d["stretch"]["window"] == 16 and d["stretch"]["max"] == max(u["stretch"] for u in d["units"])
assert d["chains"] == {"total": 2, "used": 2, "all": True, "seed": 0, "list": ["b=0", "b=1"]}
assert d["jacobian_steps"] == 100 and d["seconds"]["total"] >= 0.0
assert "git_sha" in json.dumps(d["context"])
m = re.search(r"max (\S+), median (\S+),", printed)
assert float(m.group(1)) == float(f"{lam['max']:.6g}"), (m.group(1), lam["max"])
assert float(m.group(2)) == float(f"{lam['median']:.6g}"), (m.group(2), lam["median"])
EOF
  expect_rc 0 "$pararnn" make-case --cell slstm --seed 3 --batch 3 --time 40 --d-in 4 --d-h 5 --out "$w/slstm.safetensors"
  expect_rc 0 "$pararnn" diagnose "$w/slstm.safetensors" --chains 2 --seed 7
  says "method: Benettin per channel block (Jacobian block 4x4)"
  says "chains: 2 of 3, sampled (seed 7), 80 Jacobian steps"
  expect_rc 0 "$pararnn" make-case --cell hopfield --seed 3 --batch 2 --time 30 --d-in 4 --d-h 4 --out "$w/hopfield.safetensors"
  expect_rc 0 "$pararnn" diagnose "$w/hopfield.safetensors"
  says "method: Benettin dense (Jacobian block 4x4)"
  says "of 2 chains"
  expect_rc 0 "$pararnn" make-case --cell lstm --seed 3 --batch 1 --time 30 --d-in 4 --d-h 3 --cu-seqlens 0,7,30 \
    --h0-std 0.5 --out "$w/packed.safetensors"
  expect_rc 0 "$pararnn" diagnose "$w/packed.safetensors" --json "$w/packed.json"
  says "chains: 2 of 2, all"
  [ "$(json_get "$w/packed.json" "['chains']['list']")" = "['segment=0', 'segment=1']" ] || fail "packed chains"
  ;;
refusals_name_the_flag)
  expect_rc 0 "$pararnn" make-case --cell gru --seed 1 --batch 1 --time 10 --d-in 3 --d-h 4 --out "$w/g.safetensors"
  expect_rc 2 "$pararnn" diagnose "$w/g.safetensors" --window 0 --json "$w/d.json"
  says "--window"
  says "must be >= 1, got 0"
  expect_rc 2 "$pararnn" diagnose "$w/g.safetensors" --chains -3 --json "$w/d.json"
  says "--chains"
  expect_rc 2 "$pararnn" diagnose "$w/g.safetensors" --chains 2.5 --json "$w/d.json"
  says "must be an integer, got '2.5'"
  expect_rc 2 "$pararnn" diagnose "$w/g.safetensors" --seed -1 --json "$w/d.json"
  says "--seed"
  expect_rc 2 "$pararnn" diagnose "$w/missing.safetensors" --json "$w/d.json"
  says "missing.safetensors"
  expect_rc 2 "$pararnn" diagnose
  says "case is required"
  absent "$w/d.json"
  ;;
failures_leave_no_file)
  expect_rc 0 "$pararnn" make-case --cell gru --seed 4 --batch 1 --time 8 --d-in 3 --d-h 4 --out "$w/case.safetensors"
  $tool set "$w/case.safetensors" "$w/nan.safetensors" x 4 nan
  expect_rc 2 "$pararnn" diagnose "$w/nan.safetensors" --json "$w/d.json"
  says "inconclusive"
  says "x holds nan at index (0, 1, 1)"
  says "$w/d.json not written"
  absent "$w/d.json"
  expect_rc 2 "$pararnn" diagnose "$w/case.safetensors" --certify-budget 0 --json "$w/d.json"
  says "inconclusive"
  absent "$w/d.json"
  mkdir -p "$w/dir.json"
  expect_rc 2 "$pararnn" diagnose "$w/case.safetensors" --json "$w/dir.json"
  says "$w/dir.json"
  expect_rc 2 "$pararnn" diagnose "$w/case.safetensors" --json "$w/missing/d.json"
  absent "$w/missing"
  no_temporaries
  expect_rc 0 "$pararnn" diagnose "$w/case.safetensors" --json "$w/d.json"
  [ -s "$w/d.json" ] || fail "a good run wrote no JSON"
  # An inconclusive run removes the report of an earlier one: "not written" is then true.
  expect_rc 2 "$pararnn" diagnose "$w/nan.safetensors" --json "$w/d.json"
  says "$w/d.json not written"
  absent "$w/d.json"
  ;;
*)
  fail "unknown claim $claim"
  ;;
esac
echo "PASS [$claim]"
