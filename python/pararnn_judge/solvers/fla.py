"""flash-linear-attention (fla) ops as an external solver of op cases (docs/ops/README.md).

usage: python -m pararnn_judge.solvers.fla CASE OUT [--mode chunk|fused_recurrent] [--device cuda|cpu]
       python -m pararnn_judge.solvers.fla --version
       (or python3 python/pararnn_judge/solvers/fla.py ...: it imports only torch and fla)

Reads an op case (metadata "op": gla, simple_gla, delta_rule, gated_delta_rule, dplr_delta_rule,
rwkv7; the op's tensors under fla's argument names, [B, T, H, ...] layout, initial_state
[N, H, K, V], cu_seqlens) and calls fla's op in the case's mode (metadata "variant", or --mode):
chunk_<op> or fused_recurrent_<op>, every argument passed explicitly by name (scale, initial_state,
output_final_state=True, cu_seqlens, use_qk_l2norm_in_kernel), inputs in the case's dtype on the
device. Writes OUT with "o" [B, T, H, V] and "final_state" [N, H, K, V] (only o when the case's
output_final_state is False) in the dtypes fla returns; with PARARNN_GRADIENTS=1 also
grad.<input> of L = sum(o) + sum(final_state), or of the case's cotangents grad.<output>
(L = sum of cotangent * output over those given), by torch autograd through fla's backward, which
`pararnn compare` judges against the op oracle's adjoint loop (docs/ops/README.md, "Gradients").

With TRITON_F32_DEFAULT=ieee in the environment (Triton's own switch for f32 `tl.dot`s that name
no precision), the adapter also turns fla's explicit TF32 dots to IEEE: every module-level
`*_DOT_PRECISION` constant of fla's imported modules that is 'tf32' (gated_delta_rule's triangular
solve asks for TF32 by name, which the variable does not reach) is set to 'ieee' before any
kernel compiles, and stderr names each one. It is a what-if for a finding (does TF32 explain
it?); without the variable fla runs as its users get it.

What fla cannot do is refused by name before any work (exit 4, the message names the case's
argument, the rule and the value): f64 cases (fla's Triton kernels run f32, f16, bf16), a mode
other than chunk or fused_recurrent, an op fla has no such function for.
Exit status: 0 with OUT written atomically; 2 bad usage; 3 torch or fla not importable; 4 refused.
"""
import os
import sys

# The shared protocol code, by path (_adapter_io.py's header says why not through the package).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _adapter_io import (ABSENT, EXIT_MISSING, TRUE, Command, Refused, case_cotangents, device_for,  # noqa: E402
                         gradient_or_zeros, gradients_requested, leave_script_folder, loss_of,
                         output_final_state, read_header, read_tensors, write_tensors)
del sys.path[0]
if __name__ == "__main__":
    leave_script_folder(__file__)  # else "import fla" imports this adapter, not flash-linear-attention

command = Command("fla", __doc__)
fail = command.fail

# op -> (fla module, its inputs in fla's positional order, the op's default scale rule,
#        whether use_qk_l2norm_in_kernel is an argument)
OPS = {
    "gla": ("fla.ops.gla", ("q", "k", "v", "g"), "inverse_sqrt_k", False),
    "simple_gla": ("fla.ops.simple_gla", ("q", "k", "v", "g"), "inverse_sqrt_k", False),
    "delta_rule": ("fla.ops.delta_rule", ("q", "k", "v", "beta"), "inverse_sqrt_k", True),
    "gated_delta_rule": ("fla.ops.gated_delta_rule", ("q", "k", "v", "g", "beta"), "inverse_sqrt_k", True),
    "dplr_delta_rule": ("fla.ops.generalized_delta_rule", ("q", "k", "v", "a", "b", "gk"), "inverse_sqrt_k", False),
    "rwkv7": ("fla.ops.rwkv7", ("r", "w", "k", "v", "a", "b"), "one", False),
}
MODES = ("chunk", "fused_recurrent")


def plan(metadata, headers, mode=None):
    """The call an op case asks of fla, without importing it (tested on the CPU without fla).

    metadata: the case's string metadata; headers: tensor name -> (safetensors dtype, shape);
    mode: --mode, or None for the case's "variant". Returns a dict: module, function, inputs
    (fla's positional order), kwargs (besides the tensors), mode. Raises Refused.
    """
    op = metadata.get("op")
    if op not in OPS:
        raise Refused(f"metadata 'op': must be one of {', '.join(OPS)} for fla (got {op!r})")
    module, inputs, default_scale, takes_l2 = OPS[op]
    dtypes = {name: h[0] for name, h in headers.items()}
    mode = mode or metadata.get("variant", "chunk")
    if mode in ABSENT:
        mode = "chunk"
    if mode not in MODES:
        raise Refused(f"mode: must be chunk or fused_recurrent (got {mode!r})")
    for name in inputs:
        if name not in dtypes:
            raise Refused(f"tensor '{name}': required by fla's {mode}_{op} (absent)")
    dtype = dtypes[inputs[0]]
    if dtype not in ("F32", "F16", "BF16"):
        raise Refused(f"tensor '{inputs[0]}': fla's Triton kernels take f32, f16 or bf16 (got {dtype}); "
                      "judge f64 with the reference adapter")
    if op == "delta_rule" and mode == "chunk" and dtype == "F32":
        # fla 0.6.0's ChunkDeltaRuleFunction asserts a half dtype; refused here, before a process
        # spends its row's time importing and failing (the fused_recurrent kernel takes f32).
        raise Refused(f"tensor '{inputs[0]}': fla's chunk_delta_rule takes f16 or bf16 (got F32); "
                      "judge f32 with --mode fused_recurrent")
    if metadata.get("head_first", "False") in TRUE:
        raise Refused("metadata 'head_first': op cases are [B, T, H, ...] (got True)")
    kwargs = {"output_final_state": output_final_state(metadata)}
    # The scale is always passed: the case's, or the op's default as the oracle reads it (K^-0.5;
    # RWKV-7: 1), so that a library default that differs is a finding, not a silent change.
    scale = metadata.get("scale", "None")
    if scale not in ABSENT:
        try:
            kwargs["scale"] = float(scale)
        except ValueError:
            raise Refused(f"metadata 'scale': must be a number or None (got {scale!r})")
    else:
        kwargs["scale"] = 1.0 if default_scale == "one" else headers[inputs[0]][1][-1] ** -0.5
    l2 = metadata.get("use_qk_l2norm_in_kernel", "False") in TRUE
    if l2 and not takes_l2:
        raise Refused(f"metadata 'use_qk_l2norm_in_kernel': fla's {op} takes no such argument (got True)")
    if takes_l2:
        kwargs["use_qk_l2norm_in_kernel"] = l2
    return {"module": module, "function": f"{mode}_{op}" if op != "dplr_delta_rule" else f"{mode}_dplr_delta_rule",
            "inputs": inputs, "kwargs": kwargs, "mode": mode, "op": op}


def parse(argv):
    args = command.parse(argv, {"mode": None, "device": None},
                         "--mode chunk|fused_recurrent, --device cuda|cpu, --version")
    command.check_choice(args, "mode", MODES)
    command.check_choice(args, "device", ("cuda", "cpu"))
    return args


def import_libraries(module):
    try:
        import importlib
        import torch
        ops = importlib.import_module(module)
    except ImportError as e:
        fail(EXIT_MISSING, f"needs torch and flash-linear-attention (pip install flash-linear-attention): {e}")
    return torch, ops


def force_ieee_dots(modules):
    """Sets every fla module's constant *_DOT_PRECISION that is 'tf32' to 'ieee'.

    modules: name -> module (sys.modules); constants are Triton constexprs (read through .value)
    or strings, replaced by the same type. Returns the "module.NAME" strings changed. Only called
    under TRITON_F32_DEFAULT=ieee, after the op's modules are imported and before a kernel runs
    (a Triton kernel reads its globals when it compiles).
    """
    changed = []
    for module_name, module in sorted(modules.items()):
        if module is None or not (module_name == "fla" or module_name.startswith("fla.")):
            continue
        for attr, value in sorted(vars(module).items()):
            if attr.endswith("DOT_PRECISION") and getattr(value, "value", value) == "tf32":
                setattr(module, attr, type(value)("ieee"))
                changed.append(f"{module_name}.{attr}")
    return changed


def version_line():
    return command.version_line("fla", "flash-linear-attention")


def solve(args):
    case_path, out_path = args["paths"]
    headers, metadata = read_header(case_path)
    call = plan(metadata, headers, args["mode"])
    torch, ops = import_libraries(call["module"])
    if os.environ.get("TRITON_F32_DEFAULT") == "ieee":
        changed = force_ieee_dots(sys.modules)
        print("fla: TRITON_F32_DEFAULT=ieee: f32 dots run IEEE; explicit TF32 dots set to IEEE: "
              + (", ".join(changed) or "none in the modules imported"), file=sys.stderr)
    function = getattr(ops, call["function"], None)
    if function is None:
        raise Refused(f"op {call['op']}: this fla has no {call['module']}.{call['function']} (mode {call['mode']})")
    device = device_for(torch, args["device"])
    tensors = read_tensors(torch, case_path)
    gradients = gradients_requested()
    leaves = {name: tensors[name].to(device).requires_grad_(gradients) for name in call["inputs"]}
    kwargs = dict(call["kwargs"])
    if "initial_state" in tensors:
        kwargs["initial_state"] = tensors["initial_state"].to(device=device, dtype=torch.float32).requires_grad_(gradients)
    if "cu_seqlens" in tensors:
        kwargs["cu_seqlens"] = tensors["cu_seqlens"].to(device=device, dtype=torch.long)
    if call["op"] == "gla" and call["mode"] == "fused_recurrent":
        leaves["gk"] = leaves.pop("g")  # fused_recurrent_gla names the per-key gate gk (and has gv)
    import inspect
    accepted = inspect.signature(function).parameters
    if call["op"] == "rwkv7" and "w" not in accepted and "log_w" in accepted:
        leaves["log_w"] = leaves.pop("w")  # some fla versions name fused_recurrent_rwkv7's log decay log_w
    with torch.set_grad_enabled(gradients):
        o, final_state = function(**leaves, **kwargs)
    outputs = {"o": o, "final_state": final_state} if kwargs["output_final_state"] else {"o": o}
    out = {name: t.detach() for name, t in outputs.items()}
    if gradients:
        loss_of(outputs, case_cotangents(tensors), ("o", "final_state")[:len(outputs)]).backward()
        for name, leaf in list(leaves.items()) + ([("initial_state", kwargs["initial_state"])] if "initial_state" in kwargs else []):
            case_name = {"gk": "g", "log_w": "w"}.get(name, name) if call["op"] in ("gla", "rwkv7") else name
            out["grad." + case_name] = gradient_or_zeros(torch, leaf)
    write_tensors(torch, out_path, out)


def main(argv):
    return command.main(argv, version_line, parse, solve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
