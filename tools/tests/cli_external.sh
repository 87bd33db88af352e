#!/usr/bin/env bash
# End-to-end claims of `pararnn report nightly --solver` (docs/external-solvers.md), one claim per
# ctest test: cli_external.sh PARARNN WORK CLAIM [PYTHONPATH of pararnn_judge]. Tiny plans: a few
# rows of T 16, each solver run a fresh process.
set -u
pararnn=$1
work=$2/$3
claim=$3
pythonpath=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
. "$here/claim_lib.sh"
export PARARNN_BIN=$pararnn
reference="$source_dir/tools/solvers/pararnn-solve {case} {out}"
faulty="python3 $here/solvers/faulty_adapter.py {case} {out}"
plan=(--cells gru,lstm --dtypes f32 --T 16 --classes init,h0,packed --seeds 1 --jobs 2)

# No scratch folder of a solver run or a bundle is left in a report folder.
no_leftovers() {
  local left
  left=$(find "$1" -name '.solver-*' -o -name '.bundle-*' -o -name '.bundles-*' -o -name '.cases-*' -o -name '*.tmp*')
  [ -z "$left" ] || fail "left behind: $left"
}

case "$claim" in
reference_adapter_agrees)
  # Our own CLI through the protocol: every row Agree, packed = per sequence Agree, what does not
  # apply to a black box listed as skipped (never passed), the solver named, no bundle.
  expect_rc 0 "$pararnn" report nightly --out "$work/r" "${plan[@]}" --solver "$reference" --solver-name pararnn-cli \
    --solver-version-cmd "$pararnn env"
  python3 - "$work/r/report.json" <<'PY' || fail "reference adapter report"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert len(rows) == 6 and all(row["backend"] == "external" and row["id"].endswith(".external") for row in rows), [x["id"] for x in rows]
assert all(row["outcome"] == "Agree" and row["agreement"]["path"] == "external" for row in rows), [(x["id"], x["outcome"]) for x in rows]
assert all(row["external"]["exit_code"] == 0 and not row["external"]["timed_out"] for row in rows)
# Gradient rows (init, h0, T <= gradient_max_T): the solver's grad.* judged against the oracle's BPTT.
for row in rows:
    want = "not_requested" if row["class"] == "packed" else "judged"
    assert row["gradients"] == want, (row["id"], row["gradients"])
    if want == "judged":
        g = row["agreement"]["gradients"]
        assert {"x", "W_x.weight"} <= set(g) and all(t["ok"] for t in g.values()), (row["id"], g)
eq = r["equivalences"]
assert [e["name"] for e in eq] == ["packed_vs_per_sequence"] * 2 and all(e["verdict"] == "Agree" for e in eq), eq
skipped = " ".join(s["what"] for s in r["skipped"])
assert "strided_vs_contiguous" in skipped and "recompute_vs_stored" in skipped and "kstar" in skipped, skipped
assert r["kstar"] == []
s = r["plan"]["solver"]
assert s["name"] == "pararnn-cli" and s["version"].startswith("pararnn"), s
assert r["context"]["solver"] == s
assert r["plan"]["backends"] == ["external"]
PY
  [ ! -e "$work/r/bundles" ] || [ -z "$(ls -A "$work/r/bundles")" ] || fail "bundles for an all-Agree run"
  no_leftovers "$work/r"
  expect_rc 0 "$pararnn" report render "$work/r/report.json" --out "$work/r/rendered" --no-plots
  grep -q "Solver: pararnn-cli" "$work/r/rendered/report.md" || fail "report.md does not name the solver"
  ;;
faulty_adapter_disagrees)
  # Our answer perturbed at one step: every row Disagree with its case, answer and bundle; exit 1;
  # each repro line replays the Disagree; the bundle unpacks into its folder with what a
  # maintainer needs.
  expect_rc 1 "$pararnn" report nightly --out "$work/f" "${plan[@]}" --solver "$faulty" --solver-name faulty
  python3 - "$work/f/report.json" <<'PY' || fail "faulty adapter report"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert rows and all(row["outcome"] == "Disagree" for row in rows), [(x["id"], x["outcome"]) for x in rows]
for row in rows:
    a = row["agreement"]
    assert a["worst_index"]["b"] == 0 and a["worst_index"]["t"] == 8, (row["id"], a["worst_index"])
    assert row["case_file"] == f"cases/{row['id']}.safetensors" and row["answer_file"].endswith(".answer.safetensors")
    assert row["bundle"] == f"bundles/{row['id']}.tar.gz", row
    assert row["error_along_t"]["first_failing_t"] == 8, row["error_along_t"]
    assert "faulty_adapter" in row["external"]["stderr_tail"]
    if row["gradients"] == "judged":  # grad.x dropped: named, never Agree
        assert a["gradients_missing"] == ["x"], (row["id"], a.get("gradients_missing"))
        assert "--gradients" in row["repro"], row["repro"]
assert any(row["gradients"] == "judged" for row in rows)
assert r["summary"]["by_outcome"]["Disagree"] == len(rows)
PY
  id=gru.f32.T16.init.s1.external
  repro=$(json_get "$work/f/report.json" "['rows'][0]['repro']")
  (cd "$work/f" && expect_rc 1 "$pararnn" ${repro#pararnn }) || exit 1
  mkdir -p "$work/unpack" && tar -xzf "$work/f/bundles/$id.tar.gz" -C "$work/unpack" || fail "bundle does not unpack"
  [ "$(ls "$work/unpack")" = "$id" ] || fail "the bundle holds more than its folder: $(ls "$work/unpack")"
  for f in README.md case.safetensors answer.safetensors compare.json compare.md command.txt stderr.txt env.txt error_along_t.json; do
    [ -f "$work/unpack/$id/$f" ] || fail "bundle without $f"
  done
  grep -q "Verdict: Disagree" "$work/unpack/$id/README.md" || fail "README without the verdict"
  grep -q "faulty_adapter.py case.safetensors answer.safetensors" "$work/unpack/$id/README.md" || fail "README without the command"
  # The README's judge command gives the exit code it says, from the bundle folder.
  line=$(grep -- '^pararnn compare' "$work/unpack/$id/README.md") || fail "README without the compare command"
  line=${line%%#*}
  (cd "$work/unpack/$id" && expect_rc 1 "$pararnn" ${line#pararnn } ) || exit 1
  no_leftovers "$work/f"
  # A later run into the same folder replaces cases/ and bundles/.
  expect_rc 0 "$pararnn" report nightly --out "$work/f" "${plan[@]}" --solver "$reference"
  [ -z "$(ls -A "$work/f/cases")" ] || fail "cases/ kept another run's files"
  [ ! -e "$work/f/bundles" ] || [ -z "$(ls -A "$work/f/bundles")" ] || fail "bundles/ kept another run's files"
  ;;
misbehaving_solvers_are_errors)
  # Exit 3, a timeout, garbage, a wrong shape, an extra tensor: Error rows (never a pass), exit 1;
  # a NaN in H is judged: Disagree. No partial file is left.
  small=(--cells gru --dtypes f32 --T 16 --classes init --seeds 1 --jobs 1)
  check_rows() {  # report, outcome, error_type, text in the error
    python3 - "$@" <<'PY' || fail "rows of $1: want $2 $3"
import json, sys
r = json.load(open(sys.argv[1]))
for row in r["rows"]:
    assert row["outcome"] == sys.argv[2], (row["id"], row["outcome"], row.get("error"))
    if sys.argv[3] != "-":
        assert row["error_type"] == sys.argv[3] and sys.argv[4] in row["error"], row
    assert "bundle" in row and "case_file" in row, row
assert r["summary"]["by_outcome"]["Agree"] == 0
PY
  }
  expect_rc 1 "$pararnn" report nightly --out "$work/exit" "${small[@]}" --solver "sh -c 'echo boom >&2; exit 3' {case} {out}"
  check_rows "$work/exit/report.json" Error SolverFailed "boom"
  start=$(date +%s)
  expect_rc 1 "$pararnn" report nightly --out "$work/slow" "${small[@]}" --solver "sh -c 'sleep 60' {case} {out}" --solver-timeout 1
  [ $(( $(date +%s) - start )) -lt 30 ] || fail "the timeout did not stop the solver"
  check_rows "$work/slow/report.json" Error SolverTimeout "timeout"
  expect_rc 1 "$pararnn" report nightly --out "$work/garbage" "${small[@]}" --solver "sh -c 'echo garbage > \"\$1\"' {case} {out}"
  check_rows "$work/garbage/report.json" Error AnswerRefused "answer is refused"
  expect_rc 1 "$pararnn" report nightly --out "$work/none" "${small[@]}" --solver "true {case} {out}"
  check_rows "$work/none/report.json" Error AnswerRefused "no answer file"
  expect_rc 1 "$pararnn" report nightly --out "$work/shape" "${small[@]}" --solver "$faulty --mode wrong-shape"
  check_rows "$work/shape/report.json" Error AnswerRefused "shape"
  expect_rc 1 "$pararnn" report nightly --out "$work/extra" "${small[@]}" --solver "$faulty --mode extra-tensor"
  check_rows "$work/extra/report.json" Error AnswerRefused "junk"
  expect_rc 1 "$pararnn" report nightly --out "$work/nan" "${small[@]}" --solver "$faulty --mode nan"
  check_rows "$work/nan/report.json" Disagree - -
  for d in exit slow garbage none shape extra nan; do no_leftovers "$work/$d"; done
  # pararnn-torch's adapter where torch is absent: a clear message, every row Error. Where torch is
  # installed (CI installs it), a stand-in package first on the path makes `import torch` fail.
  # (only where the module was built: a build without the Python module has none to run)
  if [ -n "$pythonpath" ] && PYTHONPATH="$pythonpath" python3 -c "import pararnn_judge" 2>/dev/null; then
    mkdir -p "$work/no-torch/torch"
    echo 'raise ImportError("No module named torch (hidden by cli_external)")' > "$work/no-torch/torch/__init__.py"
    expect_rc 1 env PYTHONPATH="$work/no-torch:$pythonpath" "$pararnn" report nightly --out "$work/torch" "${small[@]}" \
      --solver "python3 -m pararnn_judge.solvers.pararnn_torch {case} {out}"
    check_rows "$work/torch/report.json" Error SolverFailed "needs torch and pararnn-torch"
  fi
  ;;
right_answer_through_a_failing_door_is_an_error)
  # The protocol's doors other than exit 0 (docs/external-solvers.md), each with a right answer
  # already on disk at {out}: a nonzero exit, a signal, the timeout. Each row is an Error naming its
  # door, never Agree, although the answer it kept compares Agree (issue 58 item 6).
  small=(--cells gru --dtypes f32 --T 16 --classes init --seeds 1 --jobs 1)
  door() {  # mode, folder, error_type, text of the door, extra flags...
    local mode=$1 dir=$work/$2 type=$3 text=$4; shift 4
    expect_rc 1 "$pararnn" report nightly --out "$dir" "${small[@]}" --solver "$faulty --mode $mode" "$@"
    python3 - "$dir/report.json" "$type" "$text" <<'PY' || fail "$mode: want Error $type naming '$text'"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert rows, "no rows"
for row in rows:
    assert row["outcome"] == "Error", (row["id"], row["outcome"])
    assert row["error_type"] == sys.argv[2] and sys.argv[3] in row["error"], (row["id"], row["error_type"], row["error"])
    assert "faulty_adapter: answer written" in row["external"]["stderr_tail"], row["external"]
assert r["summary"]["by_outcome"].get("Agree", 0) == 0, r["summary"]["by_outcome"]
PY
    # The answer it wrote was right: kept beside the case, it compares Agree (exit 0).
    local id answer
    id=$(json_get "$dir/report.json" "['rows'][0]['id']")
    answer=$(json_get "$dir/report.json" "['rows'][0]['answer_file']") || fail "$mode: no answer file kept"
    (cd "$dir" && expect_rc 0 "$pararnn" compare "cases/$id.safetensors" --trajectory "$answer") || exit 1
    no_leftovers "$dir"
  }
  door right-then-exit exit SolverFailed "exited with status 5"
  door right-then-signal signal SolverFailed "killed by signal 15"
  start=$(date +%s)
  door right-then-hang timeout SolverTimeout "did not finish within its timeout" --solver-timeout 5
  [ $(( $(date +%s) - start )) -lt 60 ] || fail "the timeout did not stop the solver"
  ;;
gradients_are_asked_for_exactly_where_judged)
  # PARARNN_GRADIENTS reaches the solver exactly in the rows that judge gradients, even when the
  # harness's own environment sets it; a right H with one gradient wrong is Disagree, and one
  # gradient missing is named and never Agree (issue 58 item 6).
  plan_g=(--cells gru --dtypes f32 --T 16 --classes init,packed --seeds 1 --jobs 1)
  plan_gi=(--cells gru --dtypes f32 --T 16 --classes init --seeds 1 --jobs 1)
  expect_rc 0 env PARARNN_GRADIENTS=1 "$pararnn" report nightly --out "$work/env" "${plan_g[@]}" --solver "$faulty --mode right"
  python3 - "$work/env/report.json" <<'PY' || fail "PARARNN_GRADIENTS in the solver's environment"
import json, sys
r = json.load(open(sys.argv[1]))
seen = set()
for row in r["rows"]:
    assert row["outcome"] == "Agree", (row["id"], row["outcome"])
    tail = row["external"]["stderr_tail"]
    if row["gradients"] == "judged":
        assert "PARARNN_GRADIENTS=1" in tail, (row["id"], tail)
    else:
        assert row["gradients"] == "not_requested" and "PARARNN_GRADIENTS unset" in tail, (row["id"], row["gradients"], tail)
    seen.add(row["gradients"])
assert seen == {"judged", "not_requested"}, seen
PY
  expect_rc 1 "$pararnn" report nightly --out "$work/wrong" "${plan_gi[@]}" --solver "$faulty --mode wrong-gradient"
  python3 - "$work/wrong/report.json" <<'PY' || fail "a right H with grad.x wrong"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert rows and all(row["gradients"] == "judged" for row in rows), [(x["id"], x["gradients"]) for x in rows]
for row in rows:
    a = row["agreement"]
    assert row["outcome"] == "Disagree", (row["id"], row["outcome"])
    assert a["mismatches"] == 0, (row["id"], "H itself should agree", a["mismatches"])
    g = a["gradients"]
    assert not g["x"]["ok"] and all(t["ok"] for name, t in g.items() if name != "x"), (row["id"], g)
PY
  # A missing gradient is Inconclusive (docs/choices.md: named, never Agree): exit 2.
  expect_rc 2 "$pararnn" report nightly --out "$work/drop" "${plan_gi[@]}" --solver "$faulty --mode drop-gradient"
  python3 - "$work/drop/report.json" <<'PY' || fail "a right H with grad.x missing"
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["rows"]
assert rows
for row in rows:
    a = row["agreement"]
    assert row["outcome"] == "Inconclusive" and a["gradients_missing"] == ["x"], (row["id"], row["outcome"], a.get("gradients_missing"))
    assert a["mismatches"] == 0, (row["id"], a["mismatches"])
PY
  for d in env wrong drop; do no_leftovers "$work/$d"; done
  ;;
refusals_name_the_flag)
  expect_rc 2 "$pararnn" report nightly --out "$work/a" --solver "mysolver {case}"
  says "--solver"; says "{out}"
  expect_rc 2 "$pararnn" report nightly --out "$work/b" --solver "mysolver '{case} {out}"
  says "quotes must close"
  expect_rc 2 "$pararnn" report nightly --out "$work/c" --solver "$reference" --backends cpu,cuda
  says "--backends"
  expect_rc 2 "$pararnn" report nightly --out "$work/d" --solver "$reference" --solver-version-cmd "sh -c 'exit 4'"
  says "--solver-version-cmd"; says "exit 4"
  expect_rc 2 "$pararnn" report nightly --out "$work/e" --solver-name lonely
  says "needs --solver"
  [ ! -e "$work/a/report.json" ] && [ ! -e "$work/d/report.json" ] || fail "a refused run wrote a report"
  ;;
*)
  fail "unknown claim"
  ;;
esac
echo "PASS [$claim]"
