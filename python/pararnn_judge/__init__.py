"""pararnn_judge: the pararnn library (parallel Newton solving of nonlinear RNNs, judged by an independent oracle)
in Python. Not named `pararnn`: that is pararnn-torch's import name, and both must live in
one interpreter (docs/choices.md).

The library's own entry points on live arrays (numpy, torch, anything speaking DLPack), the
training pair newton_forward / newton_backward included; arrays
are viewed, never copied, on the way in (``_last_views()`` shows the pointers the C++ side saw)
and results come back without a copy, as numpy arrays (torch tensors when ``x`` is one).
Guarantees: ``AgreementReport.ok`` is True only for the verdict Agree (a non-finite result or
an uncertified oracle is never ok); ``to_dict()`` has exactly the keys of ``pararnn verify
--json`` (the same C++ rendering). Errors are the library's, under the same names:
``ContractViolation`` (a ValueError) names the argument, the rule and the value.

Example::

    import numpy as np, pararnn_judge as pj
    cell = pj.Cell.initialise("gru", d_in=8, d_h=16, dtype="f32", seed=1)
    x = np.random.default_rng(7).standard_normal((2, 256, 8), dtype=np.float32)
    report = pj.verify_agreement(cell, x, seed=1)
    assert report.ok, report.failure_message()
"""
import atexit as _atexit
import json as _json

from . import _pararnn
from ._pararnn import (AgreementError, AgreementReport, CaseFileError, CertificationError,
                       ContractViolation, Error, NewtonDivergenceError, UnsupportedPath,
                       cuda_backend_built)

__all__ = ["Cell", "AgreementReport", "verify_agreement", "compare", "newton_apply",
           "newton_forward", "newton_backward", "Forward", "sequential_apply", "oracle", "diagnose", "predicted_k_from_trajectory", "read_case", "write_case", "Error", "ContractViolation",
           "CaseFileError", "NewtonDivergenceError", "AgreementError", "UnsupportedPath",
           "CertificationError", "cuda_backend_built", "cuda_release_cached_memory", "cuda_cached_memory",
           "cuda_transfers", "torch_allocator", "reads_parameter_views"]


def _argument_string(value):
    """A constructor argument as a case file's metadata holds it: str() of the Python value."""
    return str(value)


def _parameter_sources(parameters):
    """ApplyOptions::parameters from {name: array} (None stays None): each viewed in place."""
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        raise ContractViolation(f"parameters: must be a dict of parameter name -> array (got {type(parameters).__name__})")
    return {str(name): _dlpack_source(value, f"parameters['{name}']") for name, value in parameters.items()}


def _gradient_targets(targets):
    """ApplyOptions::parameter_gradients from {name: array} (None stays None): written in place."""
    if targets is None:
        return None
    if not isinstance(targets, dict):
        raise ContractViolation(f"parameter_grads: must be a dict of parameter name -> array "
                                f"(got {type(targets).__name__})")
    return {str(name): _dlpack_source(value, f"parameter_grads['{name}']") for name, value in targets.items()}


def reads_parameter_views(cell):
    """Whether a CUDA solve of `cell` reads ``parameters=`` views (the per-channel cells with CUDA
    kernels, on a build with the CUDA backend); other cells take their values from the Cell."""
    return bool(_pararnn._cuda_reads_parameter_views(_native(cell)))


def _dlpack_source(value, argument):
    """What the binding can view: numpy arrays and DLPack objects pass as they are."""
    if value is None:
        return None
    if getattr(value, "requires_grad", False) and hasattr(value, "detach"):
        value = value.detach()  # a torch leaf of a graph: the same storage, no autograd
    if hasattr(value, "__dlpack__"):
        return value
    raise ContractViolation(f"{argument}: must be an array speaking DLPack (numpy, torch, CuPy, JAX) "
                            f"(got {type(value).__name__})")


class _HostResult:
    """A C++ result's DLPack capsule (host memory, owning a share of the Tensor) as the object
    numpy.from_dlpack / torch.from_dlpack take."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, *args, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def _to_numpy(array):
    """A host result as numpy without a copy; numpy has no bfloat16, so those come back as
    DLPack objects (torch.from_dlpack takes them)."""
    import numpy
    try:
        return numpy.from_dlpack(_HostResult(array))
    except (TypeError, BufferError, ValueError, RuntimeError):
        return _HostResult(array)


def _like(reference, array):
    """A result (a host ndarray owning a share of a C++ Tensor) in the framework of the input."""
    module = type(reference).__module__.split(".")[0]
    if module == "torch":
        import torch
        return torch.from_dlpack(_HostResult(array))
    return _to_numpy(array)


def _on_device_of(reference, array):
    """A small result (parameter or h0 gradient) like _like, moved to the reference's device when
    that is a torch CUDA tensor."""
    result = _like(reference, array)
    if _torch_cuda(reference):
        return result.to(reference.device)
    return result


def _all_on_device_of(reference, arrays):
    """{key: small result} like _on_device_of, the results of one dtype crossing to a torch CUDA
    reference's device in one packed copy (one transfer instead of one per array)."""
    results = {key: _like(reference, array) for key, array in arrays.items()}
    if not _torch_cuda(reference) or not results:
        return results
    import torch
    by_dtype = {}
    for key, value in results.items():
        by_dtype.setdefault(value.dtype, []).append(key)
    for keys in by_dtype.values():
        flat = torch.cat([results[k].reshape(-1) for k in keys]).to(reference.device)
        for key, part in zip(keys, flat.split([results[k].numel() for k in keys])):
            results[key] = part.view(results[key].shape)
    return results


class Cell:
    """A production cell: its kind, sizes and parameters under pararnn-torch's state_dict names.

    ``Cell.from_state_dict(name, state_dict, **constructor_args)`` and ``Cell.from_case(path)``
    read a cell exactly as ``pararnn verify`` reads a case (both the solver's and the oracle's
    readings must accept it); ``Cell.initialise`` draws the library's initialisation.
    """

    def __init__(self, native):
        self._native = native

    @classmethod
    def initialise(cls, name, *, d_in, d_h=0, dtype="f32", seed=0, mix="diag", n_heads=None,
                   k_dim=None, v_dim=None, weight_std=None):
        return cls(_pararnn._cell_initialise(name, d_in, d_h, dtype, seed, mix, n_heads, k_dim,
                                             v_dim, weight_std))

    @classmethod
    def from_state_dict(cls, name, state_dict, **constructor_args):
        """name: the case-file cell name ('gru', 'lstm', ..., 'rwkv7'); constructor_args: the
        arguments a state_dict cannot carry (mix, n_heads, max_recurrent_norm, eps, beta,
        gate_mix, time_bias_init, k_dim, v_dim), under their Python names."""
        tensors = {}
        for key, value in state_dict.items():
            if hasattr(value, "detach"):  # a torch tensor: host memory for the parameters
                value = value.detach().cpu()
            tensors[key] = _dlpack_source(value, f"state_dict['{key}']")
        arguments = {key: _argument_string(value) for key, value in constructor_args.items()}
        return cls(_pararnn._cell_from_state_dict(name, tensors, arguments))

    @classmethod
    def from_case(cls, path):
        return cls(_pararnn._cell_from_case(str(path)))

    name = property(lambda self: self._native.name)
    python_class = property(lambda self: self._native.python_class)
    d_in = property(lambda self: self._native.d_in)
    d_h = property(lambda self: self._native.d_h)
    slots = property(lambda self: self._native.slots)
    dtype = property(lambda self: self._native.dtype)
    state_shape = property(lambda self: tuple(self._native.state_shape))
    metadata = property(lambda self: dict(self._native.metadata))

    def state_dict(self):
        return {k: _to_numpy(v) for k, v in self._native._state_dict().items()}

    def __repr__(self):
        return repr(self._native)


def _report_to_dict(self):
    """The report as the CLI's JSON report (AgreementReport::to_json, the same keys)."""
    return _json.loads(self.to_json())


AgreementReport.to_dict = _report_to_dict


def _native(cell):
    if not isinstance(cell, Cell):
        raise ContractViolation(f"cell: must be a pararnn_judge.Cell (Cell.from_state_dict / Cell.from_case;"
                                f" pararnn_judge.torch for a live pararnn-torch cell) (got {type(cell).__name__})")
    return cell._native


_TORCH_DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch_cuda(array):
    """Whether `array` is a torch tensor on a CUDA device."""
    return (type(array).__module__.split(".")[0] == "torch" and getattr(array, "is_cuda", False))


def _cuda_stream(stream, *arrays):
    """The CUDA stream a call runs on (C++ ApplyOptions::cuda_stream), as an integer handle: the
    caller's `stream` (e.g. cupy.cuda.get_current_stream().ptr; 0 the legacy default stream),
    else torch's current stream on the device of the first torch CUDA array, else None (the
    backend's per-thread default stream). The solve is queued after the work already on it, and
    the call returns when it is done."""
    if stream is not None:
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            raise ContractViolation(f"stream: must be a CUDA stream's integer handle (>= 0; e.g. torch's "
                                    f".cuda_stream, CuPy's .ptr) or None (got {stream!r})")
        return stream
    for array in arrays:
        if _torch_cuda(array):
            import torch
            return torch.cuda.current_stream(array.device).cuda_stream
    return None


_TORCH_ALLOCATOR = None


@_atexit.register
def _drop_torch_allocator():
    """The module's share of the allocator dropped at exit, before the interpreter tears the
    binding down (buffers still alive keep their own share): otherwise nanobind reports the
    _Allocator instance, and the types it reaches, as leaked when the process ends."""
    global _TORCH_ALLOCATOR
    _TORCH_ALLOCATOR = None


def torch_allocator():
    """The CUDA backend's device memory from torch's caching allocator (C++ DeviceAllocator):
    every buffer of a solve, forward or backward is a block of torch's cache, allocated on the
    solve's stream, so the two never starve each other and torch.cuda.memory_allocated() counts
    ours. Made once, when first asked for."""
    global _TORCH_ALLOCATOR
    if _TORCH_ALLOCATOR is None:
        import torch
        # The backend has made the solve's device current; torch's raw entry points take the
        # stream as an integer handle (the public caching_allocator_alloc is the same call
        # behind a device guard and argument checks).
        raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
        raw_delete = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)
        if raw_alloc is None or raw_delete is None:
            def raw_alloc(nbytes, stream):
                return torch.cuda.caching_allocator_alloc(nbytes, torch.cuda.current_device(), stream)
            raw_delete = torch.cuda.caching_allocator_delete
        _TORCH_ALLOCATOR = _pararnn._python_allocator(
            "torch.cuda.caching_allocator", lambda nbytes, device, stream: raw_alloc(nbytes, stream), raw_delete)
    return _TORCH_ALLOCATOR


def _allocator(allocator, *arrays):
    """The device memory of a call: "torch" (torch_allocator), "backend" (the CUDA backend's own
    pool), "auto": torch's where any array is a torch CUDA tensor, else the backend's; or an
    allocator made by _pararnn._python_allocator(name, allocate, free)."""
    if isinstance(allocator, _pararnn._Allocator):
        return allocator
    if allocator == "auto":
        allocator = "torch" if any(_torch_cuda(a) for a in arrays) else "backend"
    if allocator == "torch":
        return torch_allocator()
    if allocator == "backend":
        return None
    raise ContractViolation(f"allocator: must be 'auto', 'torch' or 'backend' (got {allocator!r})")


def _torch_cuda_like(cell, x, shape):
    """A new torch CUDA tensor of `shape` and the cell's dtype on x's device."""
    import torch
    return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[_native(cell).dtype]), device=x.device)


def newton_apply(cell, x, *, h0=None, cu_seqlens=None, backend="auto", max_iters=None,
                 return_stats=False, coords="native", out=None, stream=None, allocator="auto", parameters=None):
    """The parallel Newton trajectory H of x; with return_stats, (H, NewtonStats as a dict).
    A torch CUDA x gives a CUDA H on x's device, solved into it without a host copy (the C++
    newton_apply_into); `out` (any array speaking DLPack, the trajectory's shape and the cell's
    dtype, host or the solve's device) is written instead and returned. coords="log": ParaSLSTM
    (mix diag) iterates on (c/n, ln n, m, h) on the CPU backend; H is native either way.
    `stream`: the CUDA stream's integer handle to run on (default: torch's current stream for
    torch CUDA arrays); `allocator`: where its device memory comes from ("auto": torch's caching
    allocator for torch CUDA arrays, else the backend's pool; "torch"; "backend").
    `parameters`: {state_dict name: array} of the cell's parameters where they live now (e.g. a
    module's CUDA tensors), read in place by a CUDA solve of a per-channel cell instead of the
    cell's own values (C++ ApplyOptions::parameters; reads_parameter_views(cell))."""
    native = _native(cell)
    stream = _cuda_stream(stream, out, x, h0)
    memory = _allocator(allocator, out, x, h0)
    if out is None and _torch_cuda(x) and x.dim() >= 2:
        out = _torch_cuda_like(cell, x, native._trajectory_shape(x.shape[0], x.shape[1]))
    if out is not None:
        stats = _pararnn._newton_apply_into(native, _dlpack_source(x, "x"), _dlpack_source(out, "out"),
                                            _dlpack_source(h0, "h0"), _dlpack_source(cu_seqlens, "cu_seqlens"),
                                            backend, max_iters, coords, stream=stream, allocator=memory,
                                            parameters=_parameter_sources(parameters))
        return (out, stats) if return_stats else out
    H, stats = _pararnn._newton_apply(native, _dlpack_source(x, "x"), _dlpack_source(h0, "h0"),
                                      _dlpack_source(cu_seqlens, "cu_seqlens"), backend, max_iters, coords,
                                      stream=stream, allocator=memory, parameters=_parameter_sources(parameters))
    H = _like(x, H)
    return (H, stats) if return_stats else H


class Forward:
    """A training forward (newton_forward): ``H`` (the trajectory, or ``H_out`` when one was
    given), ``stats`` (NewtonStats as a dict), ``saved_bytes`` (what is held for the backward:
    H* in the compute type, and W_x x beside it on the CUDA per-channel forward; 0 with
    recompute) and the
    cell, x, h0 and cu_seqlens it was called with, by reference (the backward reads them again;
    changing their values in place between the two calls is not detected)."""

    def __init__(self, native, H, cell, x, h0, cu_seqlens, allocator=None, parameters=None):
        self._native = native
        self.H = H
        self.cell, self.x, self.h0, self.cu_seqlens = cell, x, h0, cu_seqlens
        self._allocator = allocator  # the forward's device memory, the backward's default
        self.parameters = parameters  # the views the forward read, read again by the backward

    stats = property(lambda self: self._native.stats)
    saved_bytes = property(lambda self: self._native.saved_bytes)

    def __repr__(self):
        return f"pararnn_judge.Forward(saved_bytes={self.saved_bytes}, iters={self.stats['iters']})"


def newton_forward(cell, x, *, h0=None, cu_seqlens=None, backend="auto", max_iters=None, recompute=False,
                   H_out=None, stream=None, allocator="auto", parameters=None, sync_free=False):
    """The training forward (C++ newton_forward): the solve of newton_apply (the same H bits and
    stats) that keeps what newton_backward reads, unless recompute=True (then the backward
    solves again, with the same bits). A torch CUDA x gives a CUDA H on x's device, solved into
    it (newton_forward_into); `H_out` (any DLPack array, the trajectory's shape and the cell's
    dtype; C++ newton_forward_into's name) is written instead; `stream` and `allocator` as
    newton_apply's (what the forward keeps for the backward comes from that allocator too);
    `parameters` as newton_apply's (the backward reads the same views: keep their values until
    it ran). `sync_free=True` (C++ ApplyOptions::sync_free; CUDA per-channel cells, a fixed K): the
    forward and its backward neither wait for the stream nor read a value back; the outcome stays
    on the device (stats["outcome_on_device"]) and a diverged solve's H is all NaN instead of
    raising NewtonDivergenceError. Returns a Forward."""
    if not isinstance(sync_free, bool):
        raise ContractViolation(f"sync_free: must be True or False (got {sync_free!r})")
    native = _native(cell)
    stream = _cuda_stream(stream, H_out, x, h0)
    memory = _allocator(allocator, H_out, x, h0)
    if H_out is None and _torch_cuda(x) and x.dim() >= 2:
        H_out = _torch_cuda_like(cell, x, native._trajectory_shape(x.shape[0], x.shape[1]))
    H, forward = _pararnn._newton_forward(native, _dlpack_source(x, "x"), _dlpack_source(H_out, "H_out"),
                                          _dlpack_source(h0, "h0"), _dlpack_source(cu_seqlens, "cu_seqlens"),
                                          backend, max_iters, bool(recompute), stream=stream,
                                          allocator=memory, parameters=_parameter_sources(parameters),
                                          sync_free=sync_free)
    return Forward(forward, H_out if H_out is not None else _like(x, H), cell, x, h0, cu_seqlens, memory,
                   parameters)


def newton_backward(forward, grad_H, *, grad_x=None, stream=None, allocator=None, parameter_grads=None):
    """The gradients of L = sum(grad_H * H) at the forward's converged trajectory (C++
    newton_backward: the implicit adjoint), as a dict: "x" (x's shape, the cell's dtype),
    "h0" (None without h0) and "parameters" (state_dict name -> gradient). The backward runs
    on the forward's backend with its configuration. A torch CUDA x gives a CUDA "x" on x's
    device, computed into it, and "h0" and "parameters" on x's device too (what an optimizer of
    the module's CUDA parameters expects; they cross as O(parameters) bytes); `grad_x` (any
    DLPack array of x's shape and the cell's dtype) is written instead and returned as "x".
    grad_H may have any floating dtype and strides; `stream` as newton_apply's; `allocator` as
    newton_apply's, default (None) the forward's. `parameter_grads` ({name: array}, C++
    ApplyOptions::parameter_gradients): where to write those parameters' gradients (each the
    parameter's shape and the cell's dtype, contiguous, e.g. torch.empty_like of a CUDA
    parameter); they are returned under "parameters" as given. The CUDA per-channel backward
    reduces and rounds them on the device straight into CUDA targets: no value crosses the host.
    A refused target is named as the C++ argument, ``parameter_gradients['name']``."""
    if not isinstance(forward, Forward):
        raise ContractViolation(f"forward: must be the pararnn_judge.Forward that newton_forward returned "
                                f"(got {type(forward).__name__})")
    x = forward.x
    if grad_x is None and _torch_cuda(x):
        grad_x = _torch_cuda_like(forward.cell, x, tuple(x.shape))
    grads = _pararnn._newton_backward(_native(forward.cell), _dlpack_source(x, "x"), forward._native,
                                      _dlpack_source(grad_H, "grad_H"), _dlpack_source(grad_x, "grad_x"),
                                      _dlpack_source(forward.h0, "h0"),
                                      _dlpack_source(forward.cu_seqlens, "cu_seqlens"),
                                      stream=_cuda_stream(stream, grad_x, grad_H, x),
                                      allocator=forward._allocator if allocator is None
                                      else _allocator(allocator, grad_x, grad_H, x),
                                      parameters=_parameter_sources(forward.parameters),
                                      parameter_gradients=_gradient_targets(parameter_grads))
    small = dict(grads["parameters"])
    if grads["h0"] is not None:
        small[None] = grads["h0"]
    small = _all_on_device_of(x, small)
    h0_grad = small.pop(None, None)
    small.update(parameter_grads or {})
    return {"x": grad_x if grad_x is not None else _like(x, grads["x"]),
            "h0": h0_grad,
            "parameters": small}


def cuda_release_cached_memory(device=0):
    """Returns the device memory the CUDA backend keeps pooled for its next solves (its
    temporaries) to the device, like torch.cuda.empty_cache() does for torch's cache."""
    _pararnn._cuda_release_cached_memory(device)


def cuda_cached_memory(device=0):
    """The bytes the CUDA backend's pool keeps on `device` beyond its live buffers."""
    return _pararnn._cuda_cached_memory(device)


def cuda_transfers():
    """The CUDA backend's counters since the process started (C++ cuda_transfer_bytes), a dict:
    "to_device" and "to_host" (bytes), "host_reads" (device-to-host copies, each a wait) and
    "stream_syncs" (every wait of the host for a stream, host reads included). Compare two
    readings around a call to count what it moved and how often it waited."""
    return _pararnn._cuda_transfers()


def sequential_apply(cell, x, *, h0=None, cu_seqlens=None, backend="auto"):
    """The same-dtype sequential loop (the floor any implementation in this dtype pays)."""
    return _like(x, _pararnn._sequential_apply(_native(cell), _dlpack_source(x, "x"),
                                               _dlpack_source(h0, "h0"),
                                               _dlpack_source(cu_seqlens, "cu_seqlens"), backend))


def verify_agreement(cell, x, *, h0=None, cu_seqlens=None, backend="auto", max_iters=None,
                     atol=None, seed=0, certify_budget=None, gradients=False, grad_H=None,
                     raise_on_fail=False, coords="native"):
    """Solver vs the independent oracle on exactly these bits: an AgreementReport. The solver
    reads x (and h0) where they live, CUDA tensors included; the oracle runs on the host and
    reads a host copy of a device tensor (the one copy, made here)."""
    host_x, host_h0 = _host_twin(x), _host_twin(h0)
    return _pararnn._verify_agreement(_native(cell), _dlpack_source(x, "x"), _dlpack_source(h0, "h0"),
                                      _dlpack_source(cu_seqlens, "cu_seqlens"), backend, max_iters,
                                      atol, seed, certify_budget, gradients,
                                      _dlpack_source(grad_H, "grad_H"), raise_on_fail, host_x, host_h0,
                                      coords)


def _host_twin(array):
    """The host copy of a device tensor (for the oracle), or None for a host one."""
    device = getattr(array, "device", None)
    if array is None or device is None or getattr(device, "type", "cpu") == "cpu":
        return None
    return array.detach().cpu() if hasattr(array, "detach") else array.get()  # torch / CuPy


def _gradient_file_names(gradients):
    """External gradients under the names of a gradient file ('grad.x', 'grad.h0',
    'grad.<state_dict name>'): a mapping of those names (what safetensors' load_file gives) as it
    is, or newton_backward's {'x', 'h0', 'parameters'} renamed (a None entry is not given)."""
    if isinstance(gradients, dict) and "parameters" in gradients and set(gradients) <= {"x", "h0", "parameters"}:
        named = {f"grad.{name}": value for name, value in gradients["parameters"].items()}
        for key in ("x", "h0"):
            if gradients.get(key) is not None:
                named[f"grad.{key}"] = gradients[key]
        return named
    return dict(gradients)


def compare(cell, x, H, *, h0=None, cu_seqlens=None, atol=None, seed=0, certify_budget=None,
            raise_on_fail=False, gradients=None, grad_H=None):
    """Judges any solver's trajectory H (the solver's layout) against the oracle and, with
    `gradients`, its gradients of sum(grad_H * H) (grad_H, or ones) against the oracle's BPTT,
    as `pararnn compare --gradients` does: a mapping {'grad.x', 'grad.h0', 'grad.<state_dict
    name>': array} (or newton_backward's result), each of the case's dtype and its tensor's
    shape; anything else is refused (ContractViolation naming it), a tensor the cell needs and
    not given is listed in `gradients_missing` and the verdict is never Agree."""
    named = None
    if gradients is not None:
        named = {}
        for name, value in _gradient_file_names(gradients).items():
            host = _host_twin(value)  # the judge reads gradients on the host
            named[name] = _dlpack_source(value if host is None else host, name)
    return _pararnn._compare(_native(cell), _dlpack_source(x, "x"), _dlpack_source(H, "H"),
                             _dlpack_source(h0, "h0"), _dlpack_source(cu_seqlens, "cu_seqlens"),
                             atol, seed, certify_budget, raise_on_fail, named, _dlpack_source(grad_H, "grad_H"))


def oracle(cell, x, *, h0=None, cu_seqlens=None, seed=0, certify_budget=None):
    """The oracle's trajectory (f64) and its certification facts, as (H, info). Raises
    CertificationError when the answer is not certified (as `pararnn oracle` exits 2)."""
    H, info = _pararnn._oracle(_native(cell), _dlpack_source(x, "x"), _dlpack_source(h0, "h0"),
                               _dlpack_source(cu_seqlens, "cu_seqlens"), seed, certify_budget)
    return _like(x, H), info


def diagnose(cell, x, *, h0=None, cu_seqlens=None, window=64, chains=64, seed=0, certify_budget=None):
    """Why a case is hard, before solving it (docs/diagnose.md): the largest Lyapunov exponent
    and the finite-time stretch along the oracle's certified trajectory, as a dict with the keys
    of `pararnn diagnose --json` from "cell" to "units" (the same C++ code). No solver runs.
    Raises CertificationError when the trajectory is not certified or the estimate is not finite
    (as `pararnn diagnose` exits 2), ContractViolation for a refused input."""
    text = _pararnn._diagnose(_native(cell), _dlpack_source(x, "x"), _dlpack_source(h0, "h0"),
                              _dlpack_source(cu_seqlens, "cu_seqlens"), window, chains, seed, certify_budget)
    return _json.loads(text)


def predicted_k_from_trajectory(cell, x, H, *, h0=None, cu_seqlens=None, tau=None, window=64):
    """The cheap predicted K (contracts/predicted_k.hpp, docs/kstar.md "The cheap form"): the
    Newton iterations the recurrence needs, predicted from a trajectory H the solver produced
    (e.g. the previous training step's), with no oracle. A dict: method, window, finite, units,
    max_exponent, max_stretch, max_guess_error, tau (default: the contract's τ of the cell's
    dtype) and predicted_k ({"k": int or None, "reason", "unit", ...}). Host arrays; a cell
    outside the per-channel family, or device tensors, give "k": None with the reason.
    ContractViolation for a refused input (H's shape or dtype, x, h0, window < 1, tau <= 0)."""
    text = _pararnn._predict_k_from_trajectory(_native(cell), _dlpack_source(x, "x"), _dlpack_source(H, "H"),
                                               _dlpack_source(h0, "h0"), _dlpack_source(cu_seqlens, "cu_seqlens"),
                                               tau, window)
    return _json.loads(text)


def read_case(path):
    """A case file as {'cell': Cell, 'x': ..., 'h0'?, 'cu_seqlens'?, 'grad_H'?, 'metadata'}."""
    raw = _pararnn._read_case(str(path))
    out = {"cell": Cell(raw.pop("cell")), "metadata": raw.pop("metadata")}
    for key, value in raw.items():
        out[key] = _to_numpy(value)
    return out


def write_case(path, tensors, metadata):
    """Writes a case file (safetensors) after the judge's own reading accepted it."""
    _pararnn._write_case(str(path), {k: _dlpack_source(v, k) for k, v in tensors.items()},
                         {k: str(v) for k, v in metadata.items()})


def _last_views():
    return _pararnn._last_views()
