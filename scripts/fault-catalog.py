#!/usr/bin/env python3
"""Runs the fault catalog (property_tests/faults/catalog.json) in a faults build.

For each fault: its suites, in order, with PARARNN_FAULT=<name>, until one fails. A fault is
detected when a suite fails and the run shows the fault was injected ("pararnn fault '<name>'
injected" on stderr, core/fault.hpp). Records the test that caught it, the shrunk
counterexample's size (B, T, channels = d_h, from the generated problem's description), the
one-line repro (RapidCheck's RC_PARAMS) and the seconds to detection.

  scripts/fault-catalog.py --build build-faults --fault clamp_skipped --out f.json  # one (ctest)
  scripts/fault-catalog.py --build build-faults --all --out docs/faults/catalog.json
  scripts/fault-catalog.py --build build-faults-cuda --fault missing_scan_barrier \
      --merge --out docs/faults/catalog.json          # a GPU fault, into the committed catalog
  scripts/fault-catalog.py --render docs/faults/catalog.json > docs/faults/README.md
  … --logs DIR keeps each suite run's whole output (the catalog keeps only the failure's excerpt).
A GPU fault ("gpu_only") whose suites cannot run here (no device: exit 77, or not a CUDA build)
is recorded as not run (detected null), never as detected. Every entry records where it ran
(PARARNN_GIT_SHA names the commit where the tree is a copy without its git history) and the files
of its fault point (`run.files`: every file holding PARARNN_FAULT_POINT("<name>"), and those its
`where` names, such as solver/src/cpu/fault_models.hpp).

A detection is current only while those files are as they were at its commit: a fault counts as
caught only if its last run is newer than every change to its files (`git diff <commit> -- files`
of the source tree is empty); otherwise it is stale, and every count says "N caught, M stale"
(issue 58). An unknown commit, a tree without git history, or a run made on uncommitted changes
to those files is stale too: a run records its files' blob ids (`file_blobs`), which must equal
its commit's.

  scripts/fault-catalog.py --status docs/faults/catalog.json   # per fault: caught, stale (why), ...
  scripts/fault-catalog.py --summary-header OUT.hpp docs/faults/catalog.json  # the reports' counts
Exit status: 0 when every fault run was detected, 77 when the one fault asked for could not run
here, 1 otherwise.
"""
import argparse
import datetime
import functools
import hashlib
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SPEC = ROOT / "property_tests" / "faults" / "catalog.json"
SHAPE = re.compile(r"\bB=(\d+) T=(\d+) d_in=\d+ d_h=(\d+)")
FAILED = re.compile(r"^\[  FAILED  \] ([^\s,]+)", re.M)
LOOSE = {"B": re.compile(r"\bB=(\d+)"), "T": re.compile(r"\bT=(\d+)"), "channels": re.compile(r"\b(?:d_h|channels)=(\d+)")}
REPRO = re.compile(r'RC_PARAMS="(reproduce=[^"]+)"')
SKIPPED = 77  # a GPU test executable without a device (and without PARARNN_REQUIRE_CUDA=1)


def run_suite(build, fault, exe, gtest_filter, timeout):
    cmd = [str(build / exe), f"--gtest_filter={gtest_filter}", "--gtest_color=no"]
    env = dict(os.environ, PARARNN_FAULT=fault)
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        out, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        code = None
    return code, out, time.monotonic() - start


def caught_test(out):
    failed = FAILED.findall(out)
    return failed[0] if failed else None


def shrunk_size(out, test):
    # The counterexample RapidCheck prints after "Falsifiable" (or a failure message) names the
    # generated problem; the last description in the failure block is the shrunk one.
    block = out
    if test:
        i = out.find(f"[ RUN      ] {test}")
        if i >= 0:
            block = out[i:]
    shapes = SHAPE.findall(block)
    if shapes:
        b, t, d = (int(v) for v in shapes[-1])
        return {"B": b, "T": t, "channels": d}
    # A unit test's fixed case, as far as its failure message names it (B = 1 when unnamed).
    found = {key: pattern.findall(block) for key, pattern in LOOSE.items()}
    if not found["T"] or not found["channels"]:
        return None
    return {"B": int(found["B"][0]) if found["B"] else 1, "T": int(found["T"][0]), "channels": int(found["channels"][0])}


POINT = re.compile(r'PARARNN_FAULT_POINT\("([a-z0-9_]+)"\)')
SOURCE_SUFFIXES = {".hpp", ".cpp", ".cuh", ".cu", ".h"}
SOURCE_ROOTS = ("core", "cells", "reference", "kernels", "solver", "contracts", "nightly", "reports", "tools", "python")


@functools.lru_cache(maxsize=None)
def _points_by_file(root):
    """Every fault point of the source tree: {name: {files that call it outside a comment}}."""
    found = {}
    for top in SOURCE_ROOTS:
        for path in (root / top).rglob("*"):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            for line in path.read_text(errors="replace").splitlines():
                for name in POINT.findall(line.split("//", 1)[0]):
                    found.setdefault(name, set()).add(path.relative_to(root).as_posix())
    return found


def point_files(name, where="", root=ROOT):
    """The files of a fault's point: those that call PARARNN_FAULT_POINT("<name>") outside a
    comment, and the existing files its catalog `where` names (e.g. the fault model it calls)."""
    files = set(_points_by_file(pathlib.Path(root)).get(name, ()))
    for word in re.findall(r"[\w./-]+\.(?:hpp|cpp|cuh|cu|h)\b", where):
        if (root / word).is_file():
            files.add(word)
    return sorted(files)


def git(*args, root=ROOT):
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def file_blobs(files, root=ROOT):
    """Each file's git blob id (what `git hash-object` prints) from its bytes here, without git:
    the run records what it tested, so the status can compare it with the run's commit even where
    the run's machine holds an older history (the GPU machine's copy of .git is the session's
    first commit; its HEAD is not the build's). A missing file is None."""
    blobs = {}
    for f in files:
        path = pathlib.Path(root) / f
        if not path.is_file():
            blobs[f] = None
            continue
        data = path.read_bytes()
        blobs[f] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return blobs


def blobs_unlike_commit(sha, blobs, root=ROOT):
    """The files whose recorded blob is not the one at commit `sha` (None: git cannot say)."""
    unlike = []
    for f, blob in sorted(blobs.items()):
        done = git("rev-parse", "--verify", "--quiet", f"{sha}:{f}", root=root)
        if done is None:
            return None
        if done.returncode != 0 or blob is None or done.stdout.strip() != blob:
            unlike.append(f)
    return unlike


def last_run(fault, context):
    """The commit and date of a fault's last run: its own `run`, else the catalog's (an --all run
    before runs were recorded per fault)."""
    run = fault.get("run") or {}
    return (run.get("git_sha") or context.get("git_sha") or None, run.get("date") or context.get("date"), run)


def fault_status(report, spec=None, root=ROOT):
    """Per fault of a catalog: "caught", "stale" (with why), "missed" or "not run", and the files
    judged. Caught only when detected and its files equal those of its run's commit in this tree."""
    spec_by_name = {e["name"]: e for e in (spec if spec is not None else json.loads(SPEC.read_text())["faults"])}
    has_git = (lambda d: d is not None and d.returncode == 0)(git("rev-parse", "--git-dir", root=root))
    changed_since = {}  # commit -> set of changed paths (None: unknown commit)
    out = []
    for f in report["faults"]:
        sha, date, run = last_run(f, report.get("context", {}))
        where = spec_by_name.get(f["name"], {}).get("where", f.get("where", ""))
        files = sorted(set(run.get("files") or []) | set(point_files(f["name"], where, root)))
        entry = {"name": f["name"], "gpu_only": bool(spec_by_name.get(f["name"], {}).get("gpu_only")),
                 "git_sha": sha, "date": date, "files": files}
        if f["detected"] is None:
            entry["status"] = "not run"
        elif not f["detected"]:
            entry["status"] = "missed"
        elif not has_git:
            entry.update(status="stale", why="no git history in this source tree: the run's commit cannot be compared")
        elif not sha or sha.endswith("+dirty"):
            entry.update(status="stale", why="its run names no clean commit")
        elif run.get("files_dirty"):
            entry.update(status="stale", why="it ran on uncommitted changes to its files")
        else:
            if sha not in changed_since:
                known = git("cat-file", "-e", sha + "^{commit}", root=root)
                if known is None or known.returncode != 0:
                    changed_since[sha] = None
                else:
                    d = git("diff", "--name-only", sha, "--", *SOURCE_ROOTS, root=root)
                    changed_since[sha] = set(d.stdout.split()) if d is not None and d.returncode == 0 else None
            changed = changed_since[sha]
            if changed is None:
                entry.update(status="stale", why=f"its commit {sha[:12]} is not in this tree's history")
            elif changed & set(files):
                entry.update(status="stale", why=f"changed since its run at {sha[:12]}: " + ", ".join(sorted(changed & set(files))))
            elif run.get("file_blobs") and (unlike := blobs_unlike_commit(sha, run["file_blobs"], root)) != []:
                entry.update(status="stale", why="it ran on files unlike its commit's (uncommitted changes): " +
                             (", ".join(unlike) if unlike else "git cannot compare them"))
            else:
                entry["status"] = "caught"
        out.append(entry)
    return out


def status_counts(statuses):
    """caught / stale / missed / not run, in total and per side (cpu, gpu)."""
    counts = {side: {"faults": 0, "run": 0, "caught": 0, "stale": 0} for side in ("cpu", "gpu")}
    for s in statuses:
        c = counts["gpu" if s["gpu_only"] else "cpu"]
        c["faults"] += 1
        c["run"] += s["status"] != "not run"
        c["caught"] += s["status"] == "caught"
        c["stale"] += s["status"] == "stale"
    total = {k: counts["cpu"][k] + counts["gpu"][k] for k in counts["cpu"]}
    return dict(total, cpu=counts["cpu"], gpu=counts["gpu"])


def caught_text(counts):
    text = f"{counts['caught']} caught"
    return text + (f", {counts['stale']} stale" if counts["stale"] else "")


def summary_header(report, statuses):
    counts = status_counts(statuses)
    dates = [report["context"].get("date", "")] + [m.get("date", "") for m in _merges(report["context"])]
    side = lambda k: counts[k]
    return "\n".join([
        "// Generated at build time by scripts/fault-catalog.py --summary-header from docs/faults/catalog.json,",
        "// property_tests/faults/catalog.json and the git history of the fault points' files. Do not edit.",
        "#pragma once",
        "namespace pararnn::reports::generated {",
        f"inline constexpr long long kFaultCatalogFaults = {counts['faults']};  // -1: no catalog in this source tree",
        f"inline constexpr long long kFaultCatalogCpuFaults = {side('cpu')['faults']}, kFaultCatalogCpuRun = {side('cpu')['run']},",
        f"                           kFaultCatalogCpuCaught = {side('cpu')['caught']}, kFaultCatalogCpuStale = {side('cpu')['stale']};",
        f"inline constexpr long long kFaultCatalogGpuFaults = {side('gpu')['faults']}, kFaultCatalogGpuRun = {side('gpu')['run']},",
        f"                           kFaultCatalogGpuCaught = {side('gpu')['caught']}, kFaultCatalogGpuStale = {side('gpu')['stale']};",
        f"inline constexpr const char* kFaultCatalogDate = \"{max(d for d in dates if d is not None)}\";",
        "}  // namespace pararnn::reports::generated", ""])


NO_CATALOG_HEADER = "\n".join([
    "// Generated at build time by scripts/fault-catalog.py --summary-header: no catalog in this source tree.",
    "#pragma once",
    "namespace pararnn::reports::generated {",
    "inline constexpr long long kFaultCatalogFaults = -1;  // -1: no catalog in this source tree",
    "inline constexpr long long kFaultCatalogCpuFaults = 0, kFaultCatalogCpuRun = 0, kFaultCatalogCpuCaught = 0,",
    "                           kFaultCatalogCpuStale = 0;",
    "inline constexpr long long kFaultCatalogGpuFaults = 0, kFaultCatalogGpuRun = 0, kFaultCatalogGpuCaught = 0,",
    "                           kFaultCatalogGpuStale = 0;",
    "inline constexpr const char* kFaultCatalogDate = \"\";",
    "}  // namespace pararnn::reports::generated", ""])


def _merges(context):
    merges = context.get("merged", [])
    return [merges] if isinstance(merges, dict) else list(merges)


def write_if_changed(path, text):
    """Writes text to path atomically, and only when it differs (a build step that changes nothing
    recompiles nothing)."""
    path = pathlib.Path(path)
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text)
    tmp.replace(path)


def run_fault(build, entry, timeout, logs=None):
    name = entry["name"]
    result = {"name": name, "models": entry["models"], "where": entry["where"], "detected": False,
              "caught_by": None, "shrunk": None, "repro": None, "seconds": 0.0, "injected": False}
    total = 0.0
    skipped = 0
    for exe, gtest_filter in entry["suites"]:
        if not (build / exe).is_file():
            result.setdefault("missing", []).append(exe)
            continue
        code, out, seconds = run_suite(build, name, exe, gtest_filter, timeout)
        total += seconds
        if logs is not None:  # every suite run's whole output, for a verdict that needs reading
            logs.mkdir(parents=True, exist_ok=True)
            (logs / f"{name}.{len(list(logs.glob(name + '.*.log')))}.{pathlib.Path(exe).name}.log").write_text(
                f"$ PARARNN_FAULT={name} {exe} --gtest_filter={gtest_filter}\nexit {code}\n{out}")
        if code == SKIPPED:  # a GPU suite on a machine without a device
            skipped += 1
            continue
        injected = f"pararnn fault '{name}' injected" in out
        result["injected"] = result["injected"] or injected
        if code is None:
            result.setdefault("timeouts", []).append(f"{exe} --gtest_filter={gtest_filter}")
            continue
        if code != 0 and injected:
            test = caught_test(out)
            repro = REPRO.search(out)
            test_filter = test or gtest_filter
            env = f"PARARNN_FAULT={name}" + (f' RC_PARAMS="{repro.group(1)}"' if repro else "")
            # What the failing test said (a wrong value, not the injection breaking the run).
            block = out[out.find(f"[ RUN      ] {test}"):] if test else out
            said = [l.strip() for l in block.splitlines() if l.strip() and not l.startswith("[")][:4]
            result["failure_excerpt"] = " | ".join(said)[:400]
            result.update(detected=True, caught_by=f"{pathlib.Path(exe).name}:{test or '(crash)'}",
                          shrunk=shrunk_size(out, test), exit_code=code,
                          repro=f"{env} {build.name}/{exe} --gtest_filter='{test_filter}'")
            break
        if code != 0:
            result.setdefault("failed_without_injection", []).append(f"{exe} --gtest_filter={gtest_filter}")
    result["seconds"] = round(total, 2)
    if not result["detected"] and entry.get("gpu_only") and skipped + len(result.get("missing", [])) == len(entry["suites"]):
        result["detected"] = None  # not run: no device here, or not a CUDA faults build
        result["note"] = "GPU fault: run it in a CUDA faults build on the GPU machine"
    result["run"] = run_context(build)
    files = point_files(name, entry.get("where", ""))
    result["run"]["files"] = files
    # What the run tested, compared with its commit's files by the status (stale where they differ).
    result["run"]["file_blobs"] = file_blobs(files)
    return result


def gpu_name():
    """The first GPU nvidia-smi lists, or None (no driver or no device here)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return names[0].strip() if names else None


def run_context(build):
    return {"gpu": gpu_name(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git_sha": os.environ.get("PARARNN_GIT_SHA")  # a copied tree without its history
                       or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                         capture_output=True, text=True).stdout.strip() or None,
            "build": build.name, "host": platform.node()}


def render(report, statuses=None):
    """The catalog table in Markdown, from a catalog JSON and the status of each fault in this
    tree (fault_status: caught only where its files are unchanged since its run)."""
    statuses = statuses if statuses is not None else fault_status(report)
    by_name = {s["name"]: s for s in statuses}
    counts = status_counts(statuses)
    ran = [f for f in report["faults"] if f["detected"] is not None]
    lines = ["# Fault catalog: the last run", "",
             f"Rendered from `catalog.json` (scripts/fault-catalog.py --render): a run of every fault at commit "
             f"`{report['context']['git_sha'][:12]}`, {report['context']['date']}"
             + (f", and {len(_merges(report['context']))} later runs merged in, the last at "
                f"{max(m.get('date', '') for m in _merges(report['context']))}" if _merges(report["context"]) else "")
             + " (each fault's own commit and date are in catalog.json). "
             f"Detected when last run: {sum(1 for f in ran if f['detected'])} of {len(ran)} faults run. "
             f"Against this tree: **{caught_text(counts)}** of {counts['faults']} "
             f"(CPU {caught_text(counts['cpu'])} of {counts['cpu']['faults']}, "
             f"GPU {caught_text(counts['gpu'])} of {counts['gpu']['faults']}); a fault is caught only while the "
             f"files of its point are unchanged since its last run (`scripts/fault-catalog.py --status`).", "",
             "| fault | models | detected | now | caught by | shrunk (B, T, channels) | repro | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for f in report["faults"]:
        shrunk = f["shrunk"]
        size = f"{shrunk['B']}, {shrunk['T']}, {shrunk['channels']}" if shrunk else "fixed case"
        detected = {True: "yes", False: "**no**", None: "GPU only, not run"}[f["detected"]]
        st = by_name.get(f["name"], {})
        now = st.get("status", "?") if st.get("status") != "stale" else f"**stale**: {st['why']}"
        repro = f"`{f['repro']}`" if f["repro"] else ""
        lines.append(f"| `{f['name']}` | {f['models']} | {detected} | {now} | {f['caught_by'] or ''} | {size} | {repro} | {f['seconds']} |")
    merges = report["context"].get("merged", [])
    merges = [merges] if isinstance(merges, dict) else merges
    merged = [f for f in report["faults"] if f.get("run") and f["run"].get("date") in {m.get("date") for m in merges}]
    if merged:
        lines += ["", "Run separately and merged into this catalog (`--merge`):", ""]
        lines += [f"- `{f['name']}`: {f['run']['date']}, commit `{(f['run']['git_sha'] or '?')[:12]}`, "
                  f"build `{f['run']['build']}`" + (f", {f['run']['gpu']}" if f["run"].get("gpu") else "")
                  for f in merged]
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--render":
        sys.stdout.write(render(json.loads(pathlib.Path(sys.argv[2]).read_text())))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--status":
        statuses = fault_status(json.loads(pathlib.Path(sys.argv[2]).read_text()))
        for st in statuses:
            print(f"{st['name']}: {st['status']}" + (f" ({st['why']})" if "why" in st else "")
                  + f" [{(st['git_sha'] or '?')[:12]}; {', '.join(st['files'])}]")
        counts = status_counts(statuses)
        print(f"{caught_text(counts)} of {counts['faults']} "
              f"(cpu {caught_text(counts['cpu'])} of {counts['cpu']['faults']}, "
              f"gpu {caught_text(counts['gpu'])} of {counts['gpu']['faults']})")
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--summary-header":
        record = pathlib.Path(sys.argv[3])
        if not record.is_file() or not SPEC.is_file():
            write_if_changed(sys.argv[2], NO_CATALOG_HEADER)
            return
        report = json.loads(record.read_text())
        write_if_changed(sys.argv[2], summary_header(report, fault_status(report)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, type=pathlib.Path, help="a PARARNN_FAULTS=ON build folder")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--fault", help="one fault of the catalog")
    which.add_argument("--all", action="store_true", help="every fault")
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per suite run")
    parser.add_argument("--logs", type=pathlib.Path,
                        help="a folder that receives each suite run's output (<fault>.<n>.<exe>.log)")
    parser.add_argument("--merge", action="store_true",
                        help="--out is an existing catalog: replace only the entries of the faults run")
    args = parser.parse_args()
    build = args.build.resolve()
    spec = json.loads(SPEC.read_text())["faults"]
    entries = spec if args.all else [e for e in spec if e["name"] == args.fault]
    if not entries:
        sys.exit(f"fault-catalog: no fault named {args.fault!r} in {SPEC}")
    results = []
    for entry in entries:
        r = run_fault(build, entry, args.timeout, args.logs)
        print(f"{r['name']}: detected={r['detected']} by {r['caught_by']} shrunk={r['shrunk']} "
              f"{r['seconds']} s", flush=True)
        results.append(r)
    this_run = [r for r in results if r["detected"] is not None]
    context = dict(run_context(build), argv=sys.argv[1:])
    if args.merge:
        try:
            previous = json.loads(args.out.read_text())
            kept = {f["name"]: f for f in previous["faults"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"fault-catalog: --merge needs an existing catalog at {args.out}: {e}")
        kept.update({r["name"]: r for r in results})
        results = [kept[e["name"]] for e in spec if e["name"] in kept]
        merges = previous.get("context", {}).get("merged", [])
        merges = [merges] if isinstance(merges, dict) else list(merges)
        context = dict(previous.get("context", {}), merged=merges + [context])
    ran = [r for r in results if r["detected"] is not None]
    report = {"schema_version": 1, "context": context,
              "detected_share": (sum(1 for r in ran if r["detected"]) / len(ran)) if ran else None,
              "faults": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".part")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.out)
    if not this_run and not args.all:
        sys.exit(SKIPPED)
    sys.exit(0 if all(r["detected"] for r in this_run) else 1)


if __name__ == "__main__":
    main()
