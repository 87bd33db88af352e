#!/usr/bin/env bash
# End-to-end claims of `pararnn report nightly|render|diff` and `pararnn bug-bundle` (ctest runs
# one claim per test: reports_cli.sh PARARNN WORK CLAIM [GOLDEN_DIR]).
set -u
pararnn=$1
work=$2/$3
claim=$3
golden=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
. "$here/claim_lib.sh"
check_png() { python3 "$here/check_figures.py" png "$@" || fail "PNG check: $*"; }
check_svg() { python3 "$here/check_figures.py" svg "$@" || fail "SVG check: $*"; }

case "$claim" in
quick_campaign_covers_every_cell)
  # --quick: every variant in f32, report.json valid, every row Agree, rendered beside it; it diffs
  # against itself with no regression.
  start=$(date +%s.%N)
  expect_rc 0 "$pararnn" report nightly --quick --out "$work/quick"
  end=$(date +%s.%N)
  echo "report nightly --quick took $(python3 -c "print(round($end - $start, 1))") s"
  python3 - "$work/quick/report.json" "$("$pararnn" report nightly --help | tr -d '\n' | grep -o 'gru,gru-head' | head -1)" <<'PY' || fail "quick report content"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["format"] == "pararnn-nightly-report" and r["schema_version"] == 1
variants = r["plan"]["variants"]
assert len(variants) == 13, variants
covered = {row["variant"] for row in r["rows"] if row["dtype"] == "f32"}
assert covered == set(variants), set(variants) - covered
# The run interleaves the variants (a time budget cuts every variant short, none unvisited):
# each variant's costliest task starts in the first round (for some a K* measurement, no row),
# so every variant has a row among the first two rounds' rows.
assert set(row["variant"] for row in r["rows"][:2 * len(variants)]) == set(variants), [row["variant"] for row in r["rows"][:2 * len(variants)]]
assert r["summary"]["rows"] == len(r["rows"])
assert all(row["outcome"] == "Agree" for row in r["rows"]), [row["id"] for row in r["rows"] if row["outcome"] != "Agree"]
assert all(row["agreement"]["verdict"] == "Agree" for row in r["rows"])
judged = [row for row in r["rows"] if row["gradients"] == "judged"]
assert judged and all("gradients" in row["agreement"] for row in judged)
# Every variant trains on the cpu since issue 16: the non-diagonal ones are judged too.
assert {"hopfield", "rwkv7", "m2rnn", "gru-head"} <= {row["variant"] for row in judged}, {row["variant"] for row in judged}
assert r["kstar"] and r["equivalences"]
assert all(e["verdict"] == "Agree" for e in r["equivalences"])
PY
  # Rendered by the same command (report nightly renders unless --no-render).
  grep -q "^## Summary" "$work/quick/report.md" || fail "no summary in report.md"
  check_png "$work/quick/plots/error-f32-init.png"
  expect_rc 0 "$pararnn" report diff "$work/quick/report.json" "$work/quick/report.json"
  ;;
report_is_the_same_for_any_jobs)
  # --jobs N runs N tasks at once; the report is the planned order's, bit for bit, whatever N is
  # (only the timings and the recorded jobs differ). A planted failure (--max-iters 1) keeps its
  # case file either way.
  for j in 1 3; do
    expect_rc 1 "$pararnn" report nightly --quick --cells gru,hopfield,m2rnn,slstm-dense --max-iters 1 --jobs $j \
      --out "$work/jobs$j"
  done
  python3 - "$work/jobs1/report.json" "$work/jobs3/report.json" <<'PY' || fail "reports differ between --jobs 1 and --jobs 3"
import json, sys
TIMES = {"timings_ms", "newton_ms_repeats", "duration_s", "context", "jobs", "threads_per_job", "task_seconds_total", "slowest_tasks"}
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in TIMES}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["plan"]["jobs"] == 1 and b["plan"]["jobs"] == 3, (a["plan"]["jobs"], b["plan"]["jobs"])
assert b["plan"]["threads_per_job"] >= 1
assert a["rows"] and a["equivalences"] and any(r["outcome"] != "Agree" for r in a["rows"])
for key in ("rows", "equivalences", "kstar", "skipped", "summary"):
    assert strip(a[key]) == strip(b[key]), key
PY
  cmp -s <(cd "$work/jobs1" && ls cases) <(cd "$work/jobs3" && ls cases) || fail "the failing cases' files differ"
  expect_rc 2 "$pararnn" report nightly --quick --jobs 0 --out "$work/jobs0"
  says "--jobs"
  ;;
cuda_is_skipped_and_recorded_without_a_gpu)
  expect_rc 0 "$pararnn" report nightly --backends cpu,cuda --cells gru --T 64 --classes init --out "$work/r"
  gpu=$(python3 -c "import json; print(json.load(open('$work/r/report.json'))['context']['gpu'])")
  python3 - "$work/r/report.json" "$gpu" <<'PY' || fail "cuda skip record"
import json, sys
r, gpu = json.load(open(sys.argv[1])), sys.argv[2]
backends = {row["backend"] for row in r["rows"]}
if gpu == "cpu":
    assert backends == {"cpu"}, backends
    assert any(s["what"] == "backend cuda" and "no CUDA device" in s["reason"] for s in r["skipped"]), r["skipped"]
    assert r["plan"]["requested_backends"] == ["cpu", "cuda"] and r["plan"]["backends"] == ["cpu"]
else:
    assert backends == {"cpu", "cuda"}, backends
    assert any(e["name"] == "gpu_vs_cpu" for e in r["equivalences"])
PY
  expect_rc 2 "$pararnn" report nightly --backends cpu,tpu --out "$work/bad"
  grep -q -- "--backends" <<<"$out" || fail "the refusal does not name --backends: $out"
  expect_rc 2 "$pararnn" report nightly --cells gru,grue --out "$work/bad"
  grep -q "grue" <<<"$out" || fail "the refusal does not name the value: $out"
  [ ! -e "$work/bad/report.json" ] || fail "a refused campaign wrote report.json"
  ;;
failing_rows_keep_their_case_and_repro)
  # A fixed K = 1 on hard weights: Disagree rows whose cases replay with the same exit code.
  expect_rc 1 "$pararnn" report nightly --cells gru --T 256 --classes hard --seeds 1 --max-iters 1 --out "$work/r"
  python3 - "$work/r/report.json" > "$work/repro.txt" <<'PY' || fail "failing rows"
import json, sys, os
r = json.load(open(sys.argv[1]))
bad = [row for row in r["rows"] if row["outcome"] != "Agree"]
assert bad, "no failing row"
for row in bad:
    assert os.path.exists(os.path.join(os.path.dirname(sys.argv[1]), row["case_file"])), row["case_file"]
    assert row["agreement"]["repro"] == row["repro"]
    assert "first_failing_t" in row["error_along_t"]
    print(row["repro"])
PY
  while read -r line; do
    (cd "$work/r" && ${line/pararnn/$pararnn} > /dev/null 2>&1); rc=$?
    [ "$rc" -eq 1 ] || fail "repro '$line' exited $rc, not 1"
  done < "$work/repro.txt"
  # f16 sLSTM gradients beyond 65504 at T = 512 (docs/choices.md): their true values round to inf
  # in f16, the solver returns inf there, so the row is Inconclusive with the count (exit 2, never
  # 0), and the bitwise recompute = stored equivalence is Agree: both sides are the same bytes,
  # their infinities included (compare() alone cannot pass an infinity; the note counts them).
  expect_rc 2 "$pararnn" report nightly --cells slstm --dtypes f16 --T 512 --classes init --seeds 1 --out "$work/f16"
  python3 - "$work/f16/report.json" <<'PY' || fail "non-finite equivalence"
import json, sys
r = json.load(open(sys.argv[1]))
e = next(e for e in r["equivalences"] if e["name"] == "recompute_vs_stored")
assert e["verdict"] == "Agree" and "infinite values, the same bits" in e["note"] and e["mismatches"] == 0, e
row = r["rows"][0]
assert row["outcome"] == "Inconclusive", row["outcome"]
assert "beyond f16's range" in row["agreement"]["inconclusive_reason"], row["agreement"]["inconclusive_reason"]
assert any(g.get("unrepresentable", 0) > 0 for g in row["agreement"]["gradients"].values()), row["agreement"]["gradients"]
PY
  # A later run into the same folder replaces cases/: it never mixes runs.
  expect_rc 0 "$pararnn" report nightly --cells gru --T 256 --classes hard --seeds 1 --out "$work/r"
  [ -z "$(ls -A "$work/r/cases")" ] || fail "cases of the previous run remain: $(ls "$work/r/cases")"
  ls -a "$work/r" | grep -q '^\.cases' && fail "a staging folder was left behind"
  ;;
nightly_renders_by_default_and_writes_junit)
  # One command, readable output: report nightly writes what `report render` of its report.json
  # writes, byte for byte, unless --no-render; --junit keeps the exit code and fails every row that
  # is not Agree; no JUnit file is left by a refused or failed run, not even an earlier one's.
  small=(--cells gru --T 64 --classes init,hard --seeds 1 --max-iters 1 --jobs 1)
  expect_rc 1 "$pararnn" report nightly "${small[@]}" --out "$work/r" --junit "$work/r.junit.xml"
  says "wrote $work/r/report.md"
  [ -f "$work/r/report.md" ] || fail "report nightly wrote no report.md"
  expect_rc 0 "$pararnn" report render "$work/r/report.json" --out "$work/rendered" --junit "$work/rendered.junit.xml"
  cmp -s "$work/r/report.md" "$work/rendered/report.md" || fail "report.md is not what report render writes"
  cmp -s <(cd "$work/r/plots" && ls) <(cd "$work/rendered/plots" && ls) || fail "plots/ differ from report render's"
  [ -n "$(ls "$work/r/plots")" ] || fail "no plots"
  cmp -s "$work/r.junit.xml" "$work/rendered.junit.xml" || fail "the JUnit XML differs from report render's"
  python3 - "$work/r/report.json" "$work/r.junit.xml" <<'PY' || fail "JUnit content"
import json, sys, xml.etree.ElementTree as ET
r = json.load(open(sys.argv[1]))
suite = ET.parse(sys.argv[2]).getroot().find("testsuite")
verdicts = [row["outcome"] for row in r["rows"]] + [e["verdict"] for e in r["equivalences"]]
assert "Disagree" in verdicts and "Agree" in verdicts, verdicts
cases = suite.findall("testcase")
assert [c.get("name") for c in cases] == [x["id"] for x in r["rows"] + r["equivalences"]]
bad = sum(v in ("Disagree", "Error") for v in verdicts)
assert int(suite.get("tests")) == len(verdicts) and int(suite.get("failures")) == bad, suite.attrib
for c, v in zip(cases, verdicts):
    assert (c.find("failure") is not None) == (v in ("Disagree", "Error")), (c.get("name"), v)
    assert (c.find("skipped") is not None) == (v == "Inconclusive"), (c.get("name"), v)
PY
  # --no-render: report.json alone, and the earlier run's report.md is gone; the same exit code.
  expect_rc 1 "$pararnn" report nightly "${small[@]}" --out "$work/r" --no-render
  [ ! -e "$work/r/report.md" ] || fail "--no-render left a report.md (of the earlier run) beside the new report.json"
  # Without gnuplot (nothing on PATH) the rendering degrades (issue 58): report.md is written and
  # names the plots not drawn and why, links none of them, and the exit code is the campaign's
  # (0 all-Agree, 1 on a Disagree); stderr says so too. report render does the same, exit 0.
  agree=(--cells gru --dtypes f32 --T 16 --classes init --seeds 1 --jobs 1)
  mkdir -p "$work/empty-path"
  expect_rc 0 env PATH="$work/empty-path" "$pararnn" report nightly "${agree[@]}" --out "$work/a" --junit "$work/a.xml"
  says "not drawn"; says "gnuplot is not in PATH"
  [ -f "$work/a/report.json" ] && [ -f "$work/a.xml" ] && [ -f "$work/a/report.md" ] || fail "without gnuplot: report.json, JUnit and report.md"
  grep -q "Not drawn (" "$work/a/report.md" || fail "report.md does not say which plots were not drawn"
  grep -q "gnuplot is not in PATH" "$work/a/report.md" || fail "report.md does not say why the plots were not drawn"
  grep -q "](plots/" "$work/a/report.md" && fail "report.md links plots that were not drawn"
  expect_rc 1 env PATH="$work/empty-path" "$pararnn" report nightly "${small[@]}" --out "$work/r"
  says "not drawn"
  grep -q "Not drawn (" "$work/r/report.md" || fail "a Disagree run without gnuplot: report.md does not name the plots"
  # Apart from its Plots section, that Markdown is the one with plots.
  expect_rc 0 "$pararnn" report render "$work/r/report.json" --out "$work/r-plots"
  cmp -s <(sed '/^## Plots/,/^## All rows/d' "$work/r/report.md") <(sed '/^## Plots/,/^## All rows/d' "$work/r-plots/report.md") ||
    fail "the Markdown without gnuplot differs from the one with plots outside the Plots section"
  expect_rc 0 env PATH="$work/empty-path" "$pararnn" report render "$work/r/report.json" --out "$work/r-render"
  says "not drawn"
  cmp -s "$work/r/report.md" "$work/r-render/report.md" || fail "report render without gnuplot differs from report nightly's"
  # A rendering that does fail (report.md cannot be replaced: a folder stands in its place) never
  # lets an all-Agree run exit 0, and never turns a Disagree's 1 into anything else; report.json
  # stands.
  mkdir -p "$work/a2/report.md/in-the-way"
  expect_rc 2 "$pararnn" report nightly "${agree[@]}" --out "$work/a2" --junit "$work/a2.xml"
  says "retry with: pararnn report render"
  [ -f "$work/a2/report.json" ] || fail "after a failed rendering"
  expect_rc 0 "$pararnn" report nightly "${agree[@]}" --out "$work/a" --no-render --junit "$work/a.xml"
  mkdir -p "$work/r2/report.md/in-the-way"
  expect_rc 1 "$pararnn" report nightly "${small[@]}" --out "$work/r2"
  says "retry with: pararnn report render"
  # An unwritable --junit is refused before any work; a refused campaign removes an earlier file.
  expect_rc 2 "$pararnn" report nightly "${small[@]}" --out "$work/bad" --junit "$work/missing/junit.xml"
  says "--junit"
  [ ! -e "$work/bad/report.json" ] || fail "the campaign ran with an unwritable --junit"
  echo '<testsuites tests="1" failures="0"/>' > "$work/stale.xml"
  expect_rc 2 "$pararnn" report nightly --cells grue --out "$work/bad" --junit "$work/stale.xml"
  [ ! -e "$work/stale.xml" ] || fail "a refused run left an earlier run's JUnit file"
  ls "$work" | grep -q '\.tmp-' && fail "a temporary file was left behind: $(ls "$work")"
  ;;
golden_report_renders_to_golden_outputs)
  expect_rc 0 "$pararnn" report render "$golden/nightly.json" --out "$work/out"
  cmp -s "$golden/nightly.md" "$work/out/report.md" || fail "report.md differs from $golden/nightly.md: $(diff "$golden/nightly.md" "$work/out/report.md" | head -20)"
  check_svg "$work/out/plots/error-f32-init.svg" "gru" "gru floor" "slstm" "slstm floor" "hopfield" "tau (atol)"
  check_svg "$work/out/plots/error-f32-hard.svg" "gru" "gru floor" "slstm" "slstm floor" "tau (atol)"
  check_svg "$work/out/plots/kstar-f32.svg" "gru init" "gru hard" "hopfield init"
  check_svg "$work/out/plots/timings-cpu-f32.svg" "gru newton" "gru sequential"
  check_svg "$work/out/plots/failure-gru.f32.T64.init.s1.cpu.svg" "solver" "sequential loop (same dtype)" "tau (atol)"
  for png in "$work"/out/plots/*.png; do check_png "$png"; done
  grep -q "plots/error-f32-init.png" "$work/out/report.md" || fail "report.md does not link its figures"
  expect_rc 0 "$pararnn" report render "$golden/nightly.json" --out "$work/noplots" --no-plots
  [ ! -e "$work/noplots/plots" ] || fail "--no-plots drew plots"
  grep -q "every number plotted is in the tables" "$work/noplots/report.md" || fail "--no-plots text"
  ;;
render_refuses_reports_that_are_not_ours)
  python3 - "$golden/nightly.json" "$work" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
v = dict(r); v["schema_version"] = 2
json.dump(v, open(sys.argv[2] + "/v2.json", "w"))
text = open(sys.argv[1]).read()
open(sys.argv[2] + "/truncated.json", "w").write(text[: len(text) // 3])
json.dump({"ok": True, "max_abs": 0.0, "schema_version": 1}, open(sys.argv[2] + "/agreement.json", "w"))
PY
  for f in v2:schema_version truncated:document agreement:format; do
    name=${f%%:*}; key=${f##*:}
    expect_rc 2 "$pararnn" report render "$work/$name.json" --out "$work/out-$name"
    grep -q "$work/$name.json" <<<"$out" || fail "the refusal of $name does not name the file: $out"
    grep -q "$key" <<<"$out" || fail "the refusal of $name does not name the key $key: $out"
    [ ! -e "$work/out-$name/report.md" ] || fail "a refused render wrote report.md"
    expect_rc 2 "$pararnn" report diff "$golden/nightly.json" "$work/$name.json"
  done
  ;;
diff_names_a_planted_regression)
  python3 - "$golden/nightly.json" "$work/planted.json" > "$work/planted_id.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
row = next(x for x in r["rows"] if x["outcome"] == "Agree")
row["outcome"] = row["agreement"]["verdict"] = "Disagree"
row["agreement"]["ok"] = False
r["summary"]["by_outcome"]["Agree"] -= 1
r["summary"]["by_outcome"]["Disagree"] += 1
json.dump(r, open(sys.argv[2], "w"))
print(row["id"])
PY
  id=$(cat "$work/planted_id.txt")
  expect_rc 1 "$pararnn" report diff "$golden/nightly.json" "$work/planted.json" --out "$work/diff.md"
  grep -q "$id" <<<"$out" || fail "the diff does not name $id: $out"
  grep -q "New failures" "$work/diff.md" || fail "diff.md has no 'New failures'"
  expect_rc 0 "$pararnn" report diff "$golden/nightly.json" "$golden/nightly.json"
  grep -q "No regression" <<<"$out" || fail "no 'No regression': $out"
  ;;
bundle_round_trip_replays_its_verdict)
  expect_rc 0 "$pararnn" make-case --cell gru --batch 2 --time 256 --d-in 8 --d-h 16 --weight-std 0.7 \
    --max-recurrent-norm none --seed 3 --out "$work/hard.safetensors"
  expect_rc 1 "$pararnn" verify "$work/hard.safetensors" --max-iters 1
  grep -q "pararnn bug-bundle $work/hard.safetensors" <<<"$out" || fail "verify did not print the bug-bundle command: $out"
  # Their trajectory: our own adaptive solve (within τ, errors of the f32 rounding: visible on a log axis).
  expect_rc 0 "$pararnn" solve "$work/hard.safetensors" --out "$work/theirs.safetensors"
  expect_rc 0 "$pararnn" bug-bundle "$work/hard.safetensors" --max-iters 1 --trajectory "$work/theirs.safetensors" \
    --out "$work/hard.bundle.tar.gz"
  tar -tzf "$work/hard.bundle.tar.gz" | grep -v '^hard\.bundle/' && fail "an entry outside hard.bundle/"
  mkdir -p "$work/unpacked" && tar -xzf "$work/hard.bundle.tar.gz" -C "$work/unpacked" || fail "unpack"
  b="$work/unpacked/hard.bundle"
  for f in README.md case.safetensors case.min.safetensors env.txt verify.json verify.md compare.json compare.md \
           oracle.safetensors solver.safetensors theirs.safetensors minimised.json plots/failure.png plots/failure.svg; do
    [ -f "$b/$f" ] || fail "the bundle has no $f"
  done
  check_png "$b/plots/failure.png"
  check_svg "$b/plots/failure.svg" "solver" "theirs" "tau (atol)"
  # Every command of the README's reproduce block gives the exit code it promises.
  python3 - "$b/README.md" > "$work/commands.txt" <<'PY' || fail "README has no reproduce block"
import sys
lines = open(sys.argv[1]).read().split("\n")
start = lines.index("<!-- reproduce: every line is a command and the exit code it must give -->")
assert lines[start + 1] == "```bash"
block = lines[start + 2 : lines.index("```", start + 2)]
assert len(block) >= 3, block
for line in block:
    command, expect = line.split("# expect exit ")
    print(expect.strip(), command.strip())
PY
  verdict=$(python3 -c "import json; print(json.load(open('$b/verify.json'))['verdict'])")
  [ "$verdict" = Disagree ] || fail "verify.json verdict $verdict"
  n=0
  while read -r want command; do
    (cd "$b" && PATH="$(dirname "$pararnn"):$PATH" bash -c "$command" > /dev/null 2>&1); rc=$?
    [ "$rc" -eq "$want" ] || fail "'$command' exited $rc, the README says $want"
    n=$((n + 1))
  done < "$work/commands.txt"
  head -1 "$work/commands.txt" | grep -q "^1 pararnn verify case.safetensors" || fail "the first command is not verify: exit 1"
  grep -q "^0 pararnn compare" "$work/commands.txt" || fail "the adaptive solve's trajectory must compare Agree"
  # The minimised case is smaller and keeps the verdict.
  python3 "$here/safetensors_tool.py" shape "$b/case.min.safetensors" x > "$work/min_shape.txt" 2>/dev/null ||
    python3 -c "
import json,struct,sys
d=open('$b/case.min.safetensors','rb').read(); n=struct.unpack('<Q',d[:8])[0]
print(json.loads(d[8:8+n])['x']['shape'])" > "$work/min_shape.txt"
  grep -q "^\[1, " "$work/min_shape.txt" || fail "the minimised case keeps the batch: $(cat "$work/min_shape.txt")"
  # Size cap: refused with the sizes, nothing written.
  expect_rc 2 "$pararnn" bug-bundle "$work/hard.safetensors" --max-iters 1 --max-bytes 10000 --out "$work/capped.tar.gz"
  grep -q -- "--max-bytes" <<<"$out" || fail "the cap refusal does not name --max-bytes: $out"
  [ ! -e "$work/capped.tar.gz" ] || fail "a capped bundle was written"
  ls -a "$work" | grep -q '^\.bundle-' && fail "a scratch folder was left behind"
  expect_rc 2 "$pararnn" bug-bundle "$work/hard.safetensors" --out "$work/bundle.zip"
  ;;
bench_summary_is_embedded_and_rendered)
  # report nightly --bench-summary: the committed H200 summary becomes the report's performance
  # (its peer versions the context's), rendered as a table; a summary claiming a target met
  # without a value, or a missing file, is refused before any work and writes nothing.
  summary="$here/../../bench/results/h200-summary.json"
  expect_rc 0 "$pararnn" report nightly --cells gru --T 64 --classes init --seeds 1 --bench-summary "$summary" --out "$work/r"
  python3 - "$work/r/report.json" "$summary" <<'PY' || fail "performance block"
import json, sys
r, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert r["performance"] == s, "the summary is not embedded verbatim"
for peer, version in s.get("peer_versions", {}).items():
    assert r["context"]["peers"][peer] == version, (peer, r["context"]["peers"])
PY
  expect_rc 0 "$pararnn" report render "$work/r/report.json" --out "$work/r/out" --no-plots
  grep -q "^## Performance" "$work/r/out/report.md" || fail "no performance section"
  grep -q "^| P1 |" "$work/r/out/report.md" || fail "no P1 row"
  python3 - "$summary" "$work/lying.json" <<'PY' || fail "writing the lying summary"
import json, sys
s = json.load(open(sys.argv[1]))
s["targets"]["P2"]["value"] = None  # a target without a value ...
s["targets"]["P2"]["met"] = True     # ... claimed met
json.dump(s, open(sys.argv[2], "w"))
PY
  expect_rc 2 "$pararnn" report nightly --cells gru --T 64 --bench-summary "$work/lying.json" --out "$work/bad"
  grep -q "targets.P2.met" <<<"$out" || fail "the refusal does not name targets.P2.met: $out"
  expect_rc 2 "$pararnn" report nightly --cells gru --T 64 --bench-summary "$work/missing.json" --out "$work/bad"
  grep -q -- "--bench-summary" <<<"$out" || fail "the refusal does not name --bench-summary: $out"
  [ ! -e "$work/bad/report.json" ] || fail "a refused campaign wrote report.json"
  ;;
nightly_full_campaign)
  # The full campaign (ctest -L nightly with PARARNN_NIGHTLY=1; backends from PARARNN_NIGHTLY_BACKENDS).
  if [ "${PARARNN_NIGHTLY:-0}" != 1 ]; then echo "skipped: set PARARNN_NIGHTLY=1 to run the full campaign"; exit 77; fi
  "$pararnn" report nightly --out "$work/nightly" --backends "${PARARNN_NIGHTLY_BACKENDS:-cpu}" \
    --time-budget "${PARARNN_NIGHTLY_BUDGET:-1800}" --junit "$work/nightly/junit.xml"; rc=$?
  [ -f "$work/nightly/report.json" ] || fail "no report.json"
  [ -f "$work/nightly/report.md" ] || fail "no report.md"
  [ -f "$work/nightly/junit.xml" ] || fail "no junit.xml"
  echo "report: $work/nightly/report.md (campaign exit $rc)"
  exit $rc
  ;;
*)
  fail "unknown claim"
  ;;
esac
echo "PASS [$claim]"
