"""pararnn_judge.torch: pararnn-torch cells (0.17.4 and 0.17.5) straight into the judge.

``dump_case(cell, x, path)`` writes the case file of docs/pararnn-torch-cases.md: the cell's
state_dict under its own names, x (h0, cu_seqlens), and metadata naming the cell and every
constructor argument the state_dict cannot carry, under its Python name (str() of the value,
"None" where unset). ``verify(cell, x, **kw)`` and ``compare(cell, x, H, **kw)`` judge a live
cell in one call, reading it exactly as the case file would be read (``case_from_file``: a
0.17.4 ParaCfC without W_b is completed with W_b = 0 and reports say so; a ParaRWKV7 always
carries n_heads); ``compare_training(cell, x, **kw)`` runs the cell's own forward and torch
autograd and judges both H and the gradients. ``newton_apply(cell, x, h0=, cu_seqlens=, **config)``
trains a live cell with our solver: H carries an autograd node whose backward is our implicit
adjoint; its device memory comes from torch's caching allocator (pararnn_judge.torch_allocator).
torch is imported only when a function here runs.

Guarantees: the same cell gives the same problem through ``dump_case`` + ``pararnn verify`` and
through ``verify`` (both build one metadata map, ``case_metadata``); a constructor argument that
cannot be read from the cell and was not passed is left to the case reader's default, with a
warning naming it. Example::

    from pararnn import ParaGRU                # pararnn-torch (its import name is `pararnn`)
    import torch, pararnn_judge.torch as pt
    cell = ParaGRU(input_size=8, hidden_size=16)
    x = torch.randn(2, 256, 8)
    report = pt.verify(cell, x, seed=1)        # solver vs oracle on x's own memory
    pt.dump_case(cell, x, "case.safetensors")  # the same problem for `pararnn verify`
"""
import warnings

import pararnn_judge as _pararnn

# pararnn-torch class -> case-file cell name.
CELL_NAMES = {"ParaGRU": "gru", "ParaLSTM": "lstm", "ParaSLSTM": "slstm", "ParaNLRU": "nlru",
              "ParaCfC": "cfc", "ParaTitans": "titans", "ParaHopfield": "hopfield",
              "ParaM2RNN": "m2rnn", "ParaRWKV7": "rwkv7"}
# The constructor arguments each class takes that a state_dict cannot carry (Python names;
# shared/reference/pararnn-torch-cells.md). An argument of another class would be refused.
ARGUMENTS = {"ParaGRU": ("mix", "n_heads", "max_recurrent_norm"),
             "ParaLSTM": ("max_recurrent_norm",),
             "ParaSLSTM": ("mix", "n_heads", "max_recurrent_norm", "eps"),
             "ParaNLRU": ("max_recurrent_norm",),
             "ParaCfC": ("gate_mix", "time_bias_init", "max_recurrent_norm"),
             "ParaTitans": ("max_recurrent_norm",),
             "ParaHopfield": ("beta",),
             "ParaM2RNN": ("k_dim", "v_dim"),
             "ParaRWKV7": ("n_heads",)}


def _class_name(cell):
    name = type(cell).__name__
    if name not in CELL_NAMES:
        raise _pararnn.ContractViolation(
            f"cell: must be a pararnn-torch cell ({', '.join(CELL_NAMES)}) (got {name})")
    return name


def case_metadata(cell, **constructor_args):
    """The metadata of a case for this live cell: 'cell', 'python_class', the pararnn-torch
    version when known, and each constructor argument of the class: the value passed here,
    else the cell's attribute of that name (str(), "None" for None)."""
    class_name = _class_name(cell)
    allowed = ARGUMENTS[class_name]
    for key in constructor_args:
        if key not in allowed:
            raise _pararnn.ContractViolation(
                f"{key}: is not a constructor argument of {class_name} that a case carries "
                f"(its arguments: {', '.join(allowed)}) (got {constructor_args[key]!r})")
    meta = {"cell": CELL_NAMES[class_name], "python_class": class_name}
    version = _pararnn_torch_version(cell)
    if version:
        meta["pararnn_torch_version"] = version
    for key in allowed:
        if key in constructor_args:
            meta[key] = str(constructor_args[key])
        elif hasattr(cell, key):
            meta[key] = str(getattr(cell, key))
        elif key == "n_heads" and class_name == "ParaRWKV7":
            raise _pararnn.ContractViolation(
                "n_heads: is required for ParaRWKV7 (W_x's shape is the same for every head count) "
                "and the cell has no n_heads attribute; pass n_heads=... (got <absent>)")
        elif key == "max_recurrent_norm":
            warnings.warn(f"pararnn.torch: {class_name} has no attribute max_recurrent_norm; the case "
                          f"records none, so the reader takes the class default; pass "
                          f"max_recurrent_norm=... if the cell was built with another value",
                          stacklevel=3)
    return meta


def _pararnn_torch_version(cell):
    module = type(cell).__module__.split(".")[0]
    try:
        import importlib.metadata as metadata
        for distribution in (module.replace("_", "-"), module):
            try:
                return metadata.version(distribution)
            except metadata.PackageNotFoundError:
                continue
    except ImportError:
        pass
    return None


def _host(tensor):
    """A host, contiguous tensor (torch) or array (numpy stand-ins in the CPU tests)."""
    if hasattr(tensor, "detach"):
        return tensor.detach().contiguous().cpu()
    import numpy
    return numpy.ascontiguousarray(tensor)


def dump_case(cell, x, path, h0=None, cu_seqlens=None, grad_H=None, **constructor_args):
    """Writes the case file of (cell, x[, h0, cu_seqlens, grad_H]) for `pararnn verify` /
    `pararnn compare`. Every tensor is written in its own dtype (a case holds x's dtype: call
    cell.to(x.dtype) first); the file is refused, naming the problem, unless the judge reads it."""
    meta = case_metadata(cell, **constructor_args)
    tensors = {k: _host(v) for k, v in cell.state_dict().items()}
    tensors["x"] = _host(x)
    if h0 is not None:
        tensors["h0"] = _host(h0)
    if cu_seqlens is not None:
        cu = _host(cu_seqlens)
        tensors["cu_seqlens"] = cu.long() if hasattr(cu, "long") else cu.astype("int64")
    if grad_H is not None:
        tensors["grad.H"] = _host(grad_H)
    _pararnn.write_case(path, tensors, meta)


def cell_of(cell, **constructor_args):
    """The pararnn_judge.Cell of a live pararnn-torch cell (its state_dict read as a case would be)."""
    meta = case_metadata(cell, **constructor_args)
    name = meta.pop("cell")
    return _pararnn.Cell.from_state_dict(name, cell.state_dict(), **meta)


# The structure of each live module read so far (weak: it goes with the module): the key its
# state_dict had then (names, storage, shapes, dtypes, devices, constructor arguments) and the
# Cell read from it.
_STRUCTURES = None


def _structure_key(items, constructor_args):
    return (tuple((name, t.data_ptr(), tuple(t.shape), t.dtype, str(t.device)) for name, t in items),
            tuple(sorted((k, repr(v)) for k, v in constructor_args.items())))


def _live_cell_and_views(cell, x, constructor_args):
    """(judge cell, parameters) for a solve on x: for a torch CUDA x and a cell whose CUDA solve
    reads parameter views (pararnn_judge.reads_parameter_views), the module's structure read once
    and its state_dict tensors viewed where they live (no value crosses to the host; the cached
    Cell's own values are not read); otherwise ``live_cell`` (its values in one packed copy) and
    None."""
    import weakref
    global _STRUCTURES
    if _STRUCTURES is None:
        _STRUCTURES = weakref.WeakKeyDictionary()
    items = list(cell.state_dict(keep_vars=True).items())
    if getattr(x, "is_cuda", False):
        key = _structure_key(items, constructor_args)
        known = _STRUCTURES.get(cell)
        if known is None or known[0] != key:
            _STRUCTURES[cell] = (key, cell_of(cell, **constructor_args))
            known = _STRUCTURES[cell]
        judge_cell = known[1]
        if _pararnn.reads_parameter_views(judge_cell):
            names = set(judge_cell._native._parameter_names())
            return judge_cell, {name: t.detach() for name, t in items if name in names}
    return live_cell(cell, **constructor_args), None


def live_cell(cell, **constructor_args):
    """The pararnn_judge.Cell of a live module with its parameters' values as they are now, for a
    solve on every call (newton_apply). The first call (and any call after the module's
    state_dict changed structure: a tensor replaced, reshaped, moved or retyped, or other
    constructor arguments) reads the module as ``cell_of`` does, checks included; the others keep
    that reading and take the values alone: every tensor of the state_dict, whatever changed it
    (an optimizer step, ``p.data`` writes), crosses to the host in one packed copy (O(parameters)
    bytes, one wait for the stream; the parameters' per-channel values and the clamp are computed
    on the host), so a value is never stale."""
    global _STRUCTURES
    import weakref
    if _STRUCTURES is None:
        _STRUCTURES = weakref.WeakKeyDictionary()
    items = list(cell.state_dict(keep_vars=True).items())
    key = _structure_key(items, constructor_args)
    known = _STRUCTURES.get(cell)
    if known is None or known[0] != key:
        judge_cell = cell_of(cell, **constructor_args)
        _STRUCTURES[cell] = (key, judge_cell)
        return judge_cell
    return _pararnn.Cell(_pararnn._pararnn._cell_with_parameters(known[1]._native, _host_values(items)))


def _host_values(items):
    """{name: host tensor} of (name, tensor) pairs: the tensors of one dtype and device packed into
    one contiguous copy to the host, then split (one transfer, not one per tensor)."""
    import torch
    out, groups = {}, {}
    for name, t in items:
        t = t.detach()
        if t.is_cuda:
            groups.setdefault((t.dtype, t.device), []).append((name, t))
        else:
            out[name] = t.contiguous()
    for members in groups.values():
        flat = torch.cat([t.reshape(-1) for _, t in members]).cpu()
        for (name, t), part in zip(members, flat.split([t.numel() for _, t in members])):
            out[name] = part.view(t.shape)
    return out


_CONSTRUCTOR_KEYS = {key for keys in ARGUMENTS.values() for key in keys}


def _split(kw):
    constructor = {k: kw.pop(k) for k in list(kw) if k in _CONSTRUCTOR_KEYS}
    return constructor, kw


def verify(cell, x, **kw):
    """pararnn_judge.verify_agreement on a live cell: x (h0, cu_seqlens, CUDA tensors with the CUDA
    backend) is viewed where it lives. Constructor arguments (max_recurrent_norm=...) may be
    passed beside verify_agreement's keywords."""
    constructor, options = _split(dict(kw))
    return _pararnn.verify_agreement(cell_of(cell, **constructor), x, **options)


def compare(cell, x, H, **kw):
    """pararnn_judge.compare on a live cell: judges the trajectory H (e.g. cell(x)'s) against the oracle."""
    constructor, options = _split(dict(kw))
    return _pararnn.compare(cell_of(cell, **constructor), _host(x), _host(H), **options)


def compare_training(cell, x, *, h0=None, cu_seqlens=None, grad_H=None, config=None, **kw):
    """Judges a live pararnn-torch cell's training step against the oracle: runs its own forward,
    ``pararnn.newton_apply(cell, x, config or NewtonConfig(), h0=, cu_seqlens=)``, and torch
    autograd of L = sum(grad_H * H) (grad_H, or ones, the cotangent ``pararnn solve --grad``
    takes) with respect to x, h0 and every parameter, then judges H and those gradients with
    ``pararnn_judge.compare(..., gradients=...)`` (the rules of ``pararnn compare
    --gradients``). A parameter autograd leaves unused has gradient zero (torch returns None);
    a state_dict entry that is not a parameter has no gradient and is reported missing (never
    Agree). Constructor arguments (max_recurrent_norm=...) may be passed beside compare's
    keywords (atol, seed, certify_budget, raise_on_fail)."""
    import torch
    import pararnn as pararnn_torch  # pararnn-torch (its import name)
    constructor, options = _split(dict(kw))
    judge_cell = cell_of(cell, **constructor)
    x_leaf = x.detach().clone().requires_grad_(True)
    h0_leaf = None if h0 is None else h0.detach().clone().requires_grad_(True)
    parameters = [(name, p) for name, p in cell.named_parameters() if p.requires_grad]
    with torch.enable_grad():
        H = pararnn_torch.newton_apply(cell, x_leaf, config if config is not None else pararnn_torch.NewtonConfig(),
                                       h0=h0_leaf, cu_seqlens=cu_seqlens)
        cotangent = torch.ones_like(H) if grad_H is None else grad_H.to(device=H.device, dtype=H.dtype)
        leaves = [x_leaf] + ([h0_leaf] if h0_leaf is not None else []) + [p for _, p in parameters]
        grads = torch.autograd.grad((cotangent * H).sum(), leaves, allow_unused=True)
    names = ["grad.x"] + (["grad.h0"] if h0_leaf is not None else []) + [f"grad.{n}" for n, _ in parameters]
    gradients = {name: _host(torch.zeros_like(leaf) if g is None else g)
                 for name, leaf, g in zip(names, leaves, grads)}
    return _pararnn.compare(judge_cell, _host(x), _host(H), h0=None if h0 is None else _host(h0),
                            cu_seqlens=None if cu_seqlens is None else _host(cu_seqlens),
                            gradients=gradients, grad_H=None if grad_H is None else _host(grad_H), **options)


_SOLVE_KEYS = ("backend", "max_iters", "recompute", "allocator", "sync_free")


def newton_apply(cell, x, h0=None, cu_seqlens=None, **kw):
    """The parallel Newton trajectory H of a live pararnn-torch cell on x, differentiable like any
    torch op: H.backward() (or any loss of H) runs our implicit adjoint (pararnn_judge.newton_forward
    / newton_backward on x's device) and accumulates into the module's parameters' ``.grad`` and
    into x and h0 where they require grad, each on its own device and dtype. The cell's values are
    read at every call, so an optimizer's update is seen by the next call: on CUDA, for the
    per-channel cells, as views of the module's tensors where they live (its structure read once;
    no value crosses to the host); otherwise ``live_cell`` (its values in one packed copy). Device memory comes from torch's caching
    allocator for CUDA tensors (``allocator="torch"``), so torch.cuda.memory_allocated() counts it
    and the two never starve each other. Keywords: ``backend``, ``max_iters``, ``recompute`` (newton_forward's) and the
    cell's constructor arguments (``max_recurrent_norm=...``, as ``cell_of`` takes them);
    ``sync_free=True`` (with ``max_iters``, on CUDA) makes the step wait for nothing and read
    nothing back: a diverged solve gives an all-NaN H instead of raising; anything else is
    refused by name. Example::

        H = pt.newton_apply(cell, x)          # cell: a pararnn-torch module on x's device
        loss = (H[:, -1] ** 2).mean()
        loss.backward()                       # cell's parameters' .grad, x.grad
        optimizer.step()
    """
    import torch
    constructor, options = _split(dict(kw))
    for key in options:
        if key not in _SOLVE_KEYS:
            raise _pararnn.ContractViolation(
                f"{key}: is not a keyword of pararnn_judge.torch.newton_apply (solve: {', '.join(_SOLVE_KEYS)}; "
                f"or a constructor argument of the cell) (got {options[key]!r})")
    named = [(name, p) for name, p in cell.named_parameters()]
    return _newton_apply_function(torch).apply(cell, constructor, options, [n for n, _ in named], x, h0,
                                               cu_seqlens, *[p for _, p in named])


_FUNCTION = None


def _newton_apply_function(torch):
    """The torch.autograd.Function of newton_apply (made once, when torch is first needed)."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION

    class NewtonApply(torch.autograd.Function):
        @staticmethod
        def forward(ctx, cell, constructor, options, names, x, h0, cu_seqlens, *parameters):
            judge_cell, views = _live_cell_and_views(cell, x, constructor)
            forward = _pararnn.newton_forward(judge_cell, x.detach(), h0=None if h0 is None else h0.detach(),
                                              cu_seqlens=cu_seqlens, parameters=views, **options)
            # The backward reads the same views: torch refuses it if one was changed in place
            # in between (a saved tensor's version check) instead of differentiating other values.
            ctx.save_for_backward(*parameters)
            ctx.viewed = set(views or ())  # their gradients are written on the device (backward)
            H = forward.H
            # ctx keeps the forward (H* and W_x x for the backward) but not its output H: an
            # output held by ctx is a reference cycle (H -> grad_fn -> ctx -> H) that keeps a
            # step's saved memory until Python's cycle collector runs (the step's memory test).
            forward.H = None
            ctx.forward, ctx.names = forward, names
            ctx.x_like = (x.device, x.dtype)
            ctx.h0_like = None if h0 is None else (h0.device, h0.dtype)
            ctx.parameters_like = [(p.device, p.dtype) for p in parameters]
            return H if isinstance(H, torch.Tensor) else torch.as_tensor(H)

        @staticmethod
        def backward(ctx, grad_H):
            parameters = ctx.saved_tensors  # torch's check that no parameter changed since the forward
            # A viewed parameter's gradient is reduced and rounded on the device straight into a
            # fresh tensor of torch's allocator (no host round trip, no wait).
            targets = {name: torch.empty_like(p, memory_format=torch.contiguous_format)
                       for i, (name, p) in enumerate(zip(ctx.names, parameters))
                       if name in ctx.viewed and ctx.needs_input_grad[7 + i]}
            grads = _pararnn.newton_backward(ctx.forward, grad_H.contiguous(), parameter_grads=targets or None)

            def moved(value, like):
                if value is None or like is None:
                    return None
                t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
                return t.to(device=like[0], dtype=like[1])

            d_x = moved(grads["x"], ctx.x_like) if ctx.needs_input_grad[4] else None
            d_h0 = moved(grads["h0"], ctx.h0_like) if ctx.needs_input_grad[5] else None
            d_parameters = [moved(grads["parameters"].get(name), like) if ctx.needs_input_grad[7 + i] else None
                            for i, (name, like) in enumerate(zip(ctx.names, ctx.parameters_like))]
            return (None, None, None, None, d_x, d_h0, None, *d_parameters)

    _FUNCTION = NewtonApply
    return _FUNCTION


def bug_report(cell, x, path, **kw):
    """The one-line bug report: writes the case and returns the report of verifying it."""
    constructor, options = _split(dict(kw))
    dump_case(cell, x, path, h0=options.get("h0"), cu_seqlens=options.get("cu_seqlens"), **constructor)
    return verify(cell, x, **constructor, **options)
