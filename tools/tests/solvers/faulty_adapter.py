#!/usr/bin/env python3
"""A deliberately wrong external solver, for the CI tests of `pararnn report nightly --solver`.

usage: faulty_adapter.py CASE OUT [--mode MODE]

It runs our own solver (`$PARARNN_BIN solve CASE --out ... [--grad]`, as the reference adapter
tools/solvers/pararnn-solve does), then breaks the answer before writing OUT:
  perturb        H[0, T // 2, first element] += 1.0 (one step, far beyond every tau)
  drop-gradient  removes grad.x when gradients were asked for (PARARNN_GRADIENTS=1)
  wrong-gradient grad.x's first element += 1.0 when gradients were asked for (H right)
  both           perturb and drop-gradient (the default)
  nan            H[0, T // 2, first element] = NaN
  wrong-shape    H loses its last time step
  extra-tensor   adds a tensor "junk" beside H
or writes the right answer and then misbehaves (the protocol's other doors, docs/external-solvers.md):
  right              nothing more: exit 0 (a correct solver)
  right-then-exit    exit status 5
  right-then-signal  killed by its own SIGTERM
  right-then-hang    sleeps 600 s (past any test's --solver-timeout)
Its stderr always says what it did and whether PARARNN_GRADIENTS was set
("faulty_adapter: <mode> ... PARARNN_GRADIENTS=1" or "PARARNN_GRADIENTS unset"), and, for the
right-then-* modes, "answer written" once OUT is in place.
Standard library only (CI has no numpy): tools/tests/safetensors_tool.py reads and writes.
"""
import math
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_tool as st  # noqa: E402

KNOWN_MODES = ("perturb", "drop-gradient", "wrong-gradient", "both", "nan", "wrong-shape", "extra-tensor",
               "right", "right-then-exit", "right-then-signal", "right-then-hang")


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    case, out = argv[1], argv[2]
    mode = argv[argv.index("--mode") + 1] if "--mode" in argv else "both"
    if mode not in KNOWN_MODES:
        sys.stderr.write(f"faulty_adapter: --mode {mode!r}: unknown (one of {', '.join(KNOWN_MODES)})\n")
        return 2
    gradients = os.environ.get("PARARNN_GRADIENTS") == "1"
    ours = out + ".ours.safetensors"
    command = [os.environ.get("PARARNN_BIN", "pararnn"), "solve", case, "--out", ours] + (["--grad"] if gradients else [])
    try:
        subprocess.run(command, check=True)
        tensors, metadata = st.read(ours)
    finally:
        if os.path.exists(ours):
            os.remove(ours)
    dtype, shape, values = tensors["H"]
    step = shape[1] // 2
    per_step = len(values) // (shape[0] * shape[1])
    at = step * per_step  # batch row 0, step T // 2, the first state entry
    if mode in ("perturb", "both"):
        values[at] += 1.0
    if mode == "nan":
        values[at] = math.nan
    if mode == "wrong-shape":
        keep = []
        for b in range(shape[0]):
            keep += values[(b * shape[1]) * per_step:(b * shape[1] + shape[1] - 1) * per_step]
        values, shape = keep, [shape[0], shape[1] - 1] + shape[2:]
    tensors["H"] = (dtype, shape, values)
    if mode in ("drop-gradient", "both") and gradients:
        tensors.pop("grad.x", None)
    if mode == "wrong-gradient" and gradients:
        g_dtype, g_shape, g_values = tensors["grad.x"]
        g_values[0] += 1.0
        tensors["grad.x"] = (g_dtype, g_shape, g_values)
    if mode == "extra-tensor":
        tensors["junk"] = ("F32", [1], [0.0])
    environment = "PARARNN_GRADIENTS=" + os.environ["PARARNN_GRADIENTS"] if "PARARNN_GRADIENTS" in os.environ \
        else "PARARNN_GRADIENTS unset"
    sys.stderr.write(f"faulty_adapter: {mode} (H[0, {step}, 0] of {shape}) {environment}\n")
    st.write(out, tensors, metadata)
    if mode.startswith("right-then-"):
        sys.stderr.write("faulty_adapter: answer written\n")
        sys.stderr.flush()
    if mode == "right-then-exit":
        return 5
    if mode == "right-then-signal":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # not reached: SIGTERM's default action ends the process
    if mode == "right-then-hang":
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
