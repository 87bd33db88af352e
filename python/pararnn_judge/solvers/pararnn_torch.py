"""pararnn-torch as an external solver of `pararnn report nightly --solver` (docs/external-solvers.md).

usage: python -m pararnn_judge.solvers.pararnn_torch CASE OUT [--max-iters K|none] [--device cuda|cpu]
       python -m pararnn_judge.solvers.pararnn_torch --version

Reads the case (docs/pararnn-torch-cases.md: the state_dict under pararnn-torch's names, x, h0,
cu_seqlens, grad.H, the constructor arguments as metadata), builds the pararnn-torch cell of the
case's class in the case's dtype, loads the state_dict strictly, and runs `newton_apply` with
`NewtonConfig()` (the library's default) or `NewtonConfig(max_iters=K)` (`--max-iters none`: the
library's K*(T) schedule). Writes OUT with `H` in the case's dtype; with PARARNN_GRADIENTS=1 also
`grad.x`, `grad.h0` (when the case has h0) and `grad.<name>` of every parameter: autograd of
L = sum(grad.H * H), grad.H the case's cotangent or ones, as `pararnn solve --grad` defines it.

Exit status: 0 with OUT written (atomically: a partial file is never left); 2 on bad usage; 3 when
torch or pararnn-torch cannot be imported; 4 when the case cannot be built as a pararnn-torch cell
(the message names the problem); anything the library raises propagates (exit 1, its traceback
on stderr). `--version` prints "pararnn-torch <version>" (for --solver-version-cmd).
"""
import inspect
import os
import sys

# The shared protocol code, by path (_adapter_io.py's header says why not through the package).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _adapter_io import (ABSENT, EXIT_MISSING, EXIT_USAGE, Command, Refused, device_for,  # noqa: E402
                         gradient_or_zeros, gradients_requested, read_case, write_tensors)
del sys.path[0]

command = Command("pararnn_torch", __doc__)
fail = command.fail

# Case-file cell name -> pararnn-torch class; the constructor arguments a case carries, with
# their types (pararnn_judge.torch.ARGUMENTS lists the same names).
CLASSES = {"gru": "ParaGRU", "lstm": "ParaLSTM", "slstm": "ParaSLSTM", "nlru": "ParaNLRU", "cfc": "ParaCfC",
           "titans": "ParaTitans", "hopfield": "ParaHopfield", "m2rnn": "ParaM2RNN", "rwkv7": "ParaRWKV7"}
ARGUMENT_TYPES = {"mix": str, "n_heads": int, "max_recurrent_norm": float, "eps": float, "gate_mix": str,
                  "time_bias_init": float, "beta": float, "k_dim": int, "v_dim": int}
ARGUMENTS = {"ParaGRU": ("mix", "n_heads", "max_recurrent_norm"), "ParaLSTM": ("max_recurrent_norm",),
             "ParaSLSTM": ("mix", "n_heads", "max_recurrent_norm", "eps"), "ParaNLRU": ("max_recurrent_norm",),
             "ParaCfC": ("gate_mix", "time_bias_init", "max_recurrent_norm"), "ParaTitans": ("max_recurrent_norm",),
             "ParaHopfield": ("beta",), "ParaM2RNN": ("k_dim", "v_dim"), "ParaRWKV7": ("n_heads",)}


class CaseError(Refused):
    """The case cannot be built as a pararnn-torch cell (exit 4)."""


def parse(argv):
    args = command.parse(argv, {"max_iters": "default", "device": None},
                         "--max-iters K|none, --device cuda|cpu, --version")
    command.check_choice(args, "device", ("cuda", "cpu"))
    if args["max_iters"] not in ("default", "none", "None"):
        try:
            if int(args["max_iters"]) < 0:
                raise ValueError
        except ValueError:
            fail(EXIT_USAGE, f"--max-iters: must be a non-negative integer or none (got {args['max_iters']!r})")
    return args


def import_libraries():
    try:
        import torch  # noqa: F401
        import pararnn  # noqa: F401  (pararnn-torch's import name)
    except ImportError as e:
        fail(EXIT_MISSING, f"needs torch and pararnn-torch (pip install torch pararnn-torch): {e}")
    if not hasattr(pararnn, "newton_apply") or not hasattr(pararnn, "NewtonConfig"):
        fail(EXIT_MISSING, f"the module 'pararnn' at {getattr(pararnn, '__file__', '?')} is not pararnn-torch "
                           "(it has no newton_apply/NewtonConfig)")
    return torch, pararnn


def torch_version_line():
    return command.version_line("pararnn-torch", "pararnn-torch")


def constructor_arguments(class_name, metadata):
    kw = {}
    for key in ARGUMENTS[class_name]:
        if key not in metadata:
            continue
        value = metadata[key]
        if value in ABSENT:
            if key == "max_recurrent_norm":
                kw[key] = None  # None means no clamp (docs/pararnn-torch-cases.md)
            continue
        try:
            kw[key] = ARGUMENT_TYPES[key](float(value)) if ARGUMENT_TYPES[key] is int else ARGUMENT_TYPES[key](value)
        except ValueError:
            raise CaseError(f"metadata '{key}': must be a {ARGUMENT_TYPES[key].__name__} (got {value!r})")
    return kw


def build_cell(torch, pararnn, tensors, metadata, device):
    cell_name = metadata.get("cell")
    if cell_name not in CLASSES:
        raise CaseError(f"metadata 'cell': must be one of {', '.join(CLASSES)} (got {cell_name!r})")
    class_name = CLASSES[cell_name]
    if not hasattr(pararnn, class_name):
        raise CaseError(f"this pararnn-torch has no {class_name}")
    x = tensors["x"]
    kw = constructor_arguments(class_name, metadata)
    accepted = inspect.signature(getattr(pararnn, class_name).__init__).parameters
    for key in kw:
        if key not in accepted:
            raise CaseError(f"metadata '{key}': this pararnn-torch's {class_name} takes no '{key}' (the case sets "
                            f"{metadata[key]!r}), so it cannot build this case's cell (ParaCfC's gate_mix and W_b "
                            f"came in pararnn-torch 0.17.5)")
    # Built in f32 and then cast: torch initialises some cells' recurrent weights with
    # nn.init.orthogonal_, whose QR has no f16/bf16 CUDA kernel; load_state_dict overwrites every value.
    wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    kw.update(input_size=x.shape[-1], dtype=wide, device=device)
    if class_name != "ParaM2RNN":
        if "hidden_size" not in metadata:
            raise CaseError("metadata 'hidden_size': missing (pararnn make-case and the nightly write it)")
        kw["hidden_size"] = int(metadata["hidden_size"])
    cell = getattr(pararnn, class_name)(**kw).to(dtype=x.dtype)
    state = {k: v for k, v in tensors.items() if k not in ("x", "h0", "cu_seqlens", "grad.H")}
    try:
        cell.load_state_dict({k: v.to(device) for k, v in state.items()}, strict=True)
    except RuntimeError as e:
        raise CaseError(f"the case's tensors are not the state_dict of this pararnn-torch's {class_name}: {e}")
    return cell


def solve(args):
    torch, pararnn = import_libraries()
    case_path, out_path = args["paths"]
    device = device_for(torch, args["device"])
    tensors, metadata = read_case(torch, case_path)
    if "x" not in tensors:
        raise CaseError(f"{case_path}: tensor 'x': missing")
    cell = build_cell(torch, pararnn, tensors, metadata, device)
    config = pararnn.NewtonConfig() if args["max_iters"] == "default" else pararnn.NewtonConfig(
        max_iters=None if args["max_iters"] in ("none", "None") else int(args["max_iters"]))
    gradients = gradients_requested()
    x = tensors["x"].to(device).requires_grad_(gradients)
    h0 = tensors["h0"].to(device).requires_grad_(gradients) if "h0" in tensors else None
    cu = tensors["cu_seqlens"].to(device) if "cu_seqlens" in tensors else None
    with torch.set_grad_enabled(gradients):
        H = pararnn.newton_apply(cell, x, config, h0=h0, cu_seqlens=cu)
    out = {"H": H.detach()}
    if gradients:
        grad_H = tensors["grad.H"].to(device=device, dtype=H.dtype) if "grad.H" in tensors else torch.ones_like(H)
        (grad_H * H).sum().backward()
        out["grad.x"] = gradient_or_zeros(torch, x)
        if h0 is not None:
            out["grad.h0"] = gradient_or_zeros(torch, h0)
        for name, p in cell.named_parameters():
            out["grad." + name] = gradient_or_zeros(torch, p)
    write_tensors(torch, out_path, out)


def main(argv):
    return command.main(argv, torch_version_line, parse, solve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
