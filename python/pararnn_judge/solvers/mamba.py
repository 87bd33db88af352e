"""mamba-ssm's scans as an external solver of op cases (docs/ops/README.md).

usage: python -m pararnn_judge.solvers.mamba CASE OUT [--mode chunk|fused_recurrent] [--chunk-size N]
       python -m pararnn_judge.solvers.mamba --version
       (or python3 python/pararnn_judge/solvers/mamba.py ...: it imports only torch and mamba_ssm)

Reads an op case (metadata "op": selective_scan or ssd, tensors under mamba-ssm's argument names)
and calls the library on the GPU:
  selective_scan, mode fused_recurrent: mamba_ssm.ops.selective_scan_interface.selective_scan_fn(
      u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state=True) -> out, last_state
  ssd, mode chunk: mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined(x, dt, A, B, C,
      chunk_size, D, z, dt_bias, initial_states, dt_softplus, return_final_states=True) -> out,
      final_states (packed: seq_idx and cu_seqlens, return_varlen_states=True, the per-sequence
      states written as final_states)
Every argument is passed by name; A, D and the dt bias as the case stores them (f32). Writes OUT
with out and last_state / final_states (out alone when the case's output_final_state is False);
with PARARNN_GRADIENTS=1 also grad.<input> of L = sum(out) (selective_scan_fn does not
differentiate its last state), or of the case's cotangents grad.<output> (L = sum of cotangent *
output over those given; grad.last_state of selective_scan refused by name, exit 4),
initial_states' too, judged by pararnn compare (docs/ops/README.md, "Gradients").

Refused by name before any import (exit 4): an op other than selective_scan or ssd, f64 cases
(mamba's kernels run f32, f16, bf16), selective_scan in chunk mode (the library's selective scan
is one fused recurrent kernel), ssd in fused_recurrent mode (its step kernel is decoding,
selective_state_update, not a sequence op), a chunk size below 1.
Without mamba-ssm's CUDA extension (selective_scan_cuda, which mamba_ssm/__init__.py imports),
ssd still runs: its Triton modules are imported without the package's __init__.py
(import_library); selective_scan needs the extension (exit 3 without it).
Exit status: 0 with OUT written atomically; 2 bad usage; 3 torch or mamba_ssm not importable;
4 refused.
"""
import os
import sys

# The shared protocol code, by path (_adapter_io.py's header says why not through the package).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _adapter_io import (ABSENT, EXIT_MISSING, EXIT_USAGE, TRUE, Command, Refused, case_cotangents,  # noqa: E402
                         gradient_or_zeros, gradients_requested, leave_script_folder, loss_of, output_final_state,
                         read_header, read_tensors, write_tensors)
del sys.path[0]
if __name__ == "__main__":
    leave_script_folder(__file__)  # this folder holds fla.py: "import fla" must find the library

command = Command("mamba", __doc__)
fail = command.fail

OPS = {
    "selective_scan": ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn", "fused_recurrent",
                       ("u", "delta", "A", "B", "C"), ("D", "z", "delta_bias"), "last_state"),
    "ssd": ("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined", "chunk",
            ("x", "dt", "A", "B", "C"), ("D", "z", "dt_bias"), "final_states"),
}


def plan(metadata, headers, mode=None, chunk_size=256):
    """The call an op case asks of mamba-ssm, without importing it (tested without the library).

    headers: tensor name -> (safetensors dtype, shape). Returns a dict: module, function, inputs,
    optional (those present), kwargs, state_name, packed. Raises Refused.
    """
    op = metadata.get("op")
    if op not in OPS:
        raise Refused(f"metadata 'op': must be one of {', '.join(OPS)} for mamba-ssm (got {op!r})")
    module, function, native_mode, inputs, optional, state_name = OPS[op]
    mode = mode or metadata.get("variant", native_mode)
    if mode in ABSENT:
        mode = native_mode
    if mode != native_mode:
        raise Refused(f"mode: mamba-ssm's {op} runs {native_mode} only ({function}) (got {mode!r})")
    for name in inputs:
        if name not in headers:
            raise Refused(f"tensor '{name}': required by {function} (absent)")
    dtype = headers[inputs[0]][0]
    if dtype not in ("F32", "F16", "BF16"):
        raise Refused(f"tensor '{inputs[0]}': mamba-ssm's kernels take f32, f16 or bf16 (got {dtype}); "
                      "judge f64 with the reference adapter")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise Refused(f"chunk_size: must be a positive integer (got {chunk_size!r})")
    kwargs = {}
    packed = "cu_seqlens" in headers
    if op == "selective_scan":
        kwargs.update(delta_softplus=metadata.get("delta_softplus", "False") in TRUE, return_last_state=True)
    else:
        kwargs.update(chunk_size=chunk_size, dt_softplus=metadata.get("dt_softplus", "False") in TRUE,
                      return_final_states=True)
        if packed:
            kwargs["return_varlen_states"] = True
    return {"module": module, "function": function, "inputs": inputs,
            "optional": tuple(n for n in optional if n in headers), "kwargs": kwargs, "state_name": state_name,
            "packed": packed, "op": op, "mode": mode}


def parse(argv):
    args = command.parse(argv, {"mode": None, "chunk_size": "256"},
                         "--mode chunk|fused_recurrent, --chunk-size N, --version")
    command.check_choice(args, "mode", ("chunk", "fused_recurrent"))
    try:
        args["chunk_size"] = int(args["chunk_size"])
    except ValueError:
        fail(EXIT_USAGE, f"--chunk-size: must be an integer (got {args['chunk_size']!r})")
    return args


def version_line():
    return command.version_line("mamba-ssm", "mamba_ssm", source_files_version_line)


def source_files_version_line(not_installed):
    """Its Python files alone, not installed as a distribution (scripts/ops-mamba-gpu.sh): the
    version its __init__.py states."""
    import importlib.util
    import re
    spec = importlib.util.find_spec("mamba_ssm")
    if spec is None or not spec.origin:
        fail(EXIT_MISSING, f"mamba-ssm is not installed: {not_installed}")
    with open(spec.origin) as f:
        found = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", f.read())
    return f"mamba-ssm {found.group(1) if found else 'unknown'} (source files, {os.path.dirname(spec.origin)})"


def import_library(name):
    """mamba-ssm's module NAME. mamba_ssm/__init__.py imports the CUDA extension selective_scan_cuda
    (and transformers) at its top, so without a built extension no module of the package imports;
    the Triton SSD modules (mamba_ssm.ops.triton.*) need only torch, triton, einops and packaging,
    and are then imported under a bare package object that skips __init__.py (said on stderr).
    Any other module's ImportError is raised as it is."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError as first:
        if not name.startswith("mamba_ssm.ops.triton."):
            raise
        import importlib.util
        import types
        for loaded in [m for m in sys.modules if m == "mamba_ssm" or m.startswith("mamba_ssm.")]:
            del sys.modules[loaded]  # the half-imported package and what it loaded
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None or not spec.submodule_search_locations:
            raise
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__, package.__spec__ = spec.origin, spec
        sys.modules["mamba_ssm"] = package
        module = importlib.import_module(name)
        sys.stderr.write(f"pararnn_judge.solvers.mamba: mamba_ssm/__init__.py failed ({first}); "
                         f"{name} imported without it\n")
        return module


def solve(args):
    case_path, out_path = args["paths"]
    headers, metadata = read_header(case_path)
    call = plan(metadata, headers, args["mode"], args["chunk_size"])
    try:
        import torch
        function = getattr(import_library(call["module"]), call["function"])
    except (ImportError, AttributeError) as e:
        fail(EXIT_MISSING, f"needs torch and mamba-ssm (pip install mamba-ssm): {e}")
    tensors = read_tensors(torch, case_path)
    gradients = gradients_requested()
    cotangents = case_cotangents(tensors)
    if gradients and call["op"] == "selective_scan" and "last_state" in cotangents:
        raise Refused("tensor 'grad.last_state': selective_scan_fn does not differentiate its last state "
                      "(a cotangent of out only)")
    leaves = {n: tensors[n].to("cuda").requires_grad_(gradients) for n in call["inputs"] + call["optional"]}
    kwargs = dict(call["kwargs"])
    if "initial_states" in tensors:
        kwargs["initial_states"] = tensors["initial_states"].to(device="cuda", dtype=torch.float32).requires_grad_(gradients)
    if call["packed"]:
        cu = tensors["cu_seqlens"].to(device="cuda", dtype=torch.int32)
        lengths = (cu[1:] - cu[:-1]).long()
        kwargs["cu_seqlens"] = cu
        kwargs["seq_idx"] = torch.repeat_interleave(torch.arange(len(lengths), device="cuda", dtype=torch.int32),
                                                    lengths).unsqueeze(0)
    with torch.set_grad_enabled(gradients):
        result = function(**leaves, **kwargs)
    out, state = result[0], result[-1]  # packed ssd: (out, last state, per-sequence states)
    outputs = {"out": out, call["state_name"]: state} if output_final_state(metadata) else {"out": out}
    answer = {name: t.detach() for name, t in outputs.items()}
    if gradients:
        loss_of(outputs, cotangents, ("out",)).backward()
        extra = [("initial_states", kwargs["initial_states"])] if "initial_states" in kwargs else []
        for name, leaf in list(leaves.items()) + extra:
            answer["grad." + name] = gradient_or_zeros(torch, leaf)
    write_tensors(torch, out_path, answer)


def main(argv):
    return command.main(argv, version_line, parse, solve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
