# Shared by the CLI claim scripts (sourced; $claim names the claim in every failure):
#   fail MESSAGE            report the claim as failed and exit 1
#   expect_rc CODE CMD...   run CMD, keep its output in $out, fail unless it exits CODE
#   says TEXT               fail unless $out contains TEXT
#   json_get FILE EXPR      print EXPR (e.g. "['verdict']") of a JSON file
fail() { echo "FAIL [$claim]: $*"; exit 1; }
expect_rc() {
  local want=$1; shift
  out=$("$@" 2>&1); local rc=$?
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc: $*
$out"
}
says() { grep -qF -- "$1" <<<"$out" || fail "the message does not say '$1': $out"; }
json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval('d'+sys.argv[2]))" "$@"; }
