#!/usr/bin/env python3
"""A stand-in for an independent confirmation (scripts/ops-confirm-fla.py) in the CI tests of
scripts/ops-campaign.sh --confirm, standard library only.

usage: confirm_stub.py CASE ANSWER ORACLE FLOOR RTOL [--grad-rtol R] [--exit N]
Checks that the four files are op-case safetensors with the tensors a confirmation reads (the
case's metadata op; o in the answer, in the oracle (F64) and in the floor; with --grad-rtol also
grad.* tensors in the oracle and the floor), prints one line per file and the rtols, and exits N
(default 0): a confirmation that fails (N != 0) must never change the campaign's verdict or exit
status.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_tool as st  # noqa: E402


def main(argv):
    args = list(argv[1:])
    code = 0
    if "--exit" in args:
        i = args.index("--exit")
        code = int(args[i + 1])
        del args[i:i + 2]
    grad_rtol = None
    if "--grad-rtol" in args:
        i = args.index("--grad-rtol")
        grad_rtol = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 5:
        sys.stderr.write(__doc__)
        return 2
    case, answer, oracle, floor, rtol = args
    tensors, metadata = st.read(case)
    print(f"case: op {metadata.get('op')}, {len(tensors)} tensors")
    for label, path in (("answer", answer), ("oracle", oracle), ("floor", floor)):
        tensors, _ = st.read(path)
        if "o" not in tensors:
            print(f"{label}: no o")
            return 1
        print(f"{label}: o {tensors['o'][0]} {list(tensors['o'][1])}")
        if grad_rtol is not None and label != "answer":
            grads = sorted(name for name in tensors if name.startswith("grad."))
            if not grads:
                print(f"{label}: no grad.*")
                return 1
            print(f"{label}: {' '.join(grads)}")
    print(f"rtol {float(rtol):g}")
    if grad_rtol is not None:
        print(f"grad rtol {grad_rtol:g}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
