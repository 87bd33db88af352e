"""What the op confirmations (scripts/ops-confirm-fla.py, scripts/ops-confirm-mamba.py) share:
their command line, the report of a reference against the answer, our oracle and the floor, and
the reference's gradients by torch's autograd. Imported by path by those scripts; it imports
torch only inside the functions that are given it.

Guarantees:
- run(...) is the whole command of either script: exit 2 on bad usage (the usage printed) or a
  case the reference cannot confirm (named), 3 when the libraries cannot be imported, 0 when it
  ran (its numbers are the result, never a verdict); an ORACLE or FLOOR file that does not exist
  is reported as absent, not judged.
- parse(argv) -> (CASE, ANSWER, ORACLE, FLOOR, rtol, device, grad_rtol or None), or Usage naming
  the argument: RTOL and --grad-rtol must be positive finite numbers, --device cpu or cuda.
- report(...) prints, per reference tensor, our oracle's distance to it and, for each result, the
  largest error and the count of values outside tau = rtol * max(|ref|, RMS(ref)) (the rule of
  docs/ops/README.md); a NaN error counts as outside; a missing tensor or another shape is said,
  never judged.
- gradients(...) is torch.autograd.grad of L = Σ cotangent ⊙ output over the outputs whose
  cotangent grad.<output> the case carries, or Σ output over all of them when it carries none
  (docs/ops/README.md, "Gradients"); an input the loss does not reach gets zeros.
"""
import math
import os
import sys


class Usage(Exception):
    """Bad usage, named."""


def run(argv, name, doc, adapter, plan, refusals, requirement, load, reference, heading, outputs, library):
    """The confirmation command. `plan(metadata, headers)` -> the call (raises one of `refusals`,
    adapter.Refused or ValueError for a case it cannot confirm); `load()` imports the libraries and
    returns torch (ImportError: `requirement` is named); `reference(torch, call, case, device,
    gradients)` -> (the outputs named `outputs` in f64, then their gradients with `gradients`);
    `heading(call)` names the reference in the printout; `outputs` (a tuple, or a function of the
    call) names its two outputs; `library` names it in each line."""
    try:
        case_path, answer_path, oracle_path, floor_path, rtol, device, grad_rtol = parse(argv[1:])
        headers, metadata = adapter.read_header(case_path)
        call = plan(metadata, headers)
    except Usage as e:
        print(f"{name}: {e}\n{doc}", file=sys.stderr)
        return 2
    except (ValueError, adapter.Refused, *refusals) as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    try:
        torch = load()
    except ImportError as e:
        print(f"{name}: needs {requirement}: {e}", file=sys.stderr)
        return 3
    case, answer = (adapter.read_tensors(torch, p) for p in (case_path, answer_path))
    oracle, floor = ({} if not os.path.exists(p) else adapter.read_tensors(torch, p) for p in (oracle_path, floor_path))
    computed = reference(torch, call, case, device, gradients=grad_rtol is not None)
    packed = ", each packed sequence alone" if "cu_seqlens" in case else ""
    print(f"{heading(call)} in f64 on {device}{packed}")
    results = (("answer", answer), ("floor", floor))
    names = outputs(call) if callable(outputs) else outputs
    report(torch, dict(zip(names, computed[:2])), results, rtol, oracle, library)
    if grad_rtol is not None:
        print("gradients by torch's autograd through it in f64:")
        report(torch, computed[2], results, grad_rtol, oracle, f"{library} (autograd)")
    return 0


def positive_number(text, name):
    """float(text) when it is a positive finite number, else Usage naming `name`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise Usage(f"{name}: must be a positive finite number (got {text!r})")
    return value


def parse(argv):
    """CASE ANSWER ORACLE FLOOR RTOL [--device cpu|cuda] [--grad-rtol R] (argv without the program)."""
    args = list(argv)
    options = {"--device": "cpu", "--grad-rtol": None}
    for flag in options:
        if flag in args:
            i = args.index(flag)
            options[flag] = args[i + 1] if i + 1 < len(args) else ""
            del args[i:i + 2]
    if len(args) != 5:
        raise Usage(f"expected CASE ANSWER ORACLE FLOOR RTOL (got {len(args)} arguments)")
    if options["--device"] not in ("cpu", "cuda"):
        raise Usage(f"--device: must be cpu or cuda (got {options['--device']!r})")
    grad_rtol = options["--grad-rtol"]
    return (*args[:4], positive_number(args[4], "RTOL"), options["--device"],
            None if grad_rtol is None else positive_number(grad_rtol, "--grad-rtol"))


def report(torch, ref, results, rtol, oracle, library):
    """`ref`: name -> the reference's f64 tensor; `results`: (label, name -> tensor) pairs."""
    for name, expected in ref.items():
        scale = torch.maximum(expected.abs(), expected.pow(2).mean().sqrt())
        if name in oracle:
            print(f"{name}: oracle vs {library} in f64: max |diff| "
                  f"{(oracle[name].double() - expected).abs().max().item():.3e} (max |ref| {expected.abs().max().item():.3e})")
        for label, result in results:
            if name not in result:
                print(f"{name}: {label}: absent")
                continue
            if tuple(result[name].shape) != tuple(expected.shape):
                print(f"{name}: {label}: shape {tuple(result[name].shape)}, the reference's {tuple(expected.shape)}")
                continue
            err = (result[name].double() - expected).abs()
            outside = int((~(err <= rtol * scale)).sum().item())
            print(f"{name}: {label} vs the f64 reference: max error {err.max().item():.3e}, "
                  f"{outside} of {err.numel()} values outside tau (rtol {rtol:g})")


def gradients(torch, outputs, leaves, case, device):
    """{"grad.<leaf>": gradient} of L (the module's rule) w.r.t. each of `leaves` (name -> tensor)."""
    carried = [name for name in outputs if "grad." + name in case]
    loss = 0
    for name, output in outputs.items():
        if carried:
            if name in carried:
                loss = loss + (case["grad." + name].double().to(device) * output).sum()
        else:
            loss = loss + output.sum()
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return {"grad." + name: (g if g is not None else torch.zeros_like(leaf)).detach().cpu()
            for (name, leaf), g in zip(leaves.items(), grads)}
