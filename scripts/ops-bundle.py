#!/usr/bin/env python3
"""The kept rows of an op campaign packed into one file (issue 56), standard library only.

Usage: scripts/ops-bundle.py OUT FILE [--mib N]

OUT is an ops-campaign.sh output folder (summary.tsv, rows/<id>/). FILE (tar.xz) gets
summary.tsv, bundle.txt and rows/<id>/... within N MiB (default 15) of files before compression,
so that it comes back from a machine that returns few files of a bounded size. What goes in, in
this order, each row's group whole or not at all:
  1. every row's small files (compare.json, compare.txt, confirm.txt, stderr.txt, the logs);
  2. each row's case.safetensors and answer.safetensors (the bug report: both replay it);
  3. each row's oracle.safetensors and floor.safetensors (remade from the case by
     `pararnn oracle` and `pararnn solve`, so last), and what-if.answer.safetensors where
     --what-if made one (its judgement, what-if.compare.*, is among the small files).
In 2 and 3 the first row of each op.mode.dtype comes before the second of any, so that a budget
cut keeps variety. bundle.txt lists, per row, what is in and what was left out.
Exit 0 with FILE written (atomically), 2 on bad usage or an OUT without summary.tsv.
"""
import io
import os
import sys
import tarfile

LARGE_FIRST = ("case.safetensors", "answer.safetensors")
LARGE_LAST = ("oracle.safetensors", "floor.safetensors", "what-if.answer.safetensors")


def rows_in_order(out):
    """Kept rows in the summary's order, then any other folder under rows/ (sorted)."""
    ids = []
    with open(os.path.join(out, "summary.tsv")) as f:
        next(f, None)
        for line in f:
            row = line.split("\t", 1)[0]
            if row and os.path.isdir(os.path.join(out, "rows", row)):
                ids.append(row)
    rows_dir = os.path.join(out, "rows")
    others = sorted(set(os.listdir(rows_dir)) - set(ids)) if os.path.isdir(rows_dir) else []
    return ids + [r for r in others if os.path.isdir(os.path.join(rows_dir, r))]


def variety_order(ids):
    """The first row of each op.mode.dtype, then the second of each, ..."""
    seen = {}
    ranked = []
    for position, row in enumerate(ids):
        group = ".".join(row.split(".")[:3])
        ranked.append((seen.get(group, 0), position, row))
        seen[group] = seen.get(group, 0) + 1
    return [row for _, _, row in sorted(ranked)]


def main(argv):
    args = argv[1:]
    mib = 15
    if "--mib" in args:
        i = args.index("--mib")
        try:
            mib = int(args[i + 1])
        except (IndexError, ValueError):
            print("ops-bundle: --mib needs a whole number", file=sys.stderr)
            return 2
        del args[i:i + 2]
    if len(args) != 2 or not os.path.isfile(os.path.join(args[0], "summary.tsv")):
        print(__doc__, file=sys.stderr)
        return 2
    out, target = args
    budget = mib * 1024 * 1024
    ids = rows_in_order(out)

    def files(row, names=None):
        folder = os.path.join(out, "rows", row)
        chosen = sorted(os.listdir(folder)) if names is None else [n for n in names if os.path.isfile(os.path.join(folder, n))]
        if names is None:
            chosen = [n for n in chosen if n not in LARGE_FIRST + LARGE_LAST and os.path.isfile(os.path.join(folder, n))]
        return [os.path.join("rows", row, n) for n in chosen]

    def size(paths):
        return sum(os.path.getsize(os.path.join(out, p)) for p in paths)

    used = os.path.getsize(os.path.join(out, "summary.tsv")) + 64 * 1024  # the manifest's room
    chosen, notes = ["summary.tsv"], {row: [] for row in ids}
    for stage, names, order in (("small files", None, ids), ("case, answer", LARGE_FIRST, variety_order(ids)),
                                ("oracle, floor, what-if answer", LARGE_LAST, variety_order(ids))):
        for row in order:
            paths = files(row, names)
            if not paths:
                continue
            bytes_ = size(paths)
            if used + bytes_ <= budget:
                chosen += paths
                used += bytes_
                notes[row].append(f"{stage}: in ({bytes_} bytes)")
            else:
                notes[row].append(f"{stage}: left out ({bytes_} bytes; {mib} MiB budget)")
    manifest = (f"ops-bundle: {len(ids)} kept row(s) of {os.path.abspath(out)}, {used} bytes before compression "
                f"(budget {mib} MiB)\n" + "".join(f"{row}: {'; '.join(n) or 'no files'}\n" for row, n in notes.items()))
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with tarfile.open(tmp, "w:xz") as tar:
            for path in chosen:
                tar.add(os.path.join(out, path), arcname=path)
            data = manifest.encode()
            info = tarfile.TarInfo("bundle.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    sys.stdout.write(manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
