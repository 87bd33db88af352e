"""What the external-solver adapters (fla.py, mamba.py, pararnn_torch.py beside this file) share:
the command line, the exit statuses, the case file read and the answer file written, written once.

Loaded by path, not through the package: an adapter runs on a GPU machine as a plain file
(`python3 python/pararnn_judge/solvers/fla.py CASE OUT`) with only torch and its peer library
installed, where importing `pararnn_judge` would load our compiled extension, which is absent
(or built for another Python) there. So this file imports the standard library only (torch is
passed in by the caller), and an adapter imports it as the top-level module `_adapter_io` with
its own folder on sys.path for that one import, then takes the folder out again (a folder that
holds fla.py must not stay on sys.path: see leave_script_folder).

Guarantees (the protocol of docs/external-solvers.md and docs/ops/README.md):
- Exit status: 0 with OUT written; 2 bad usage (EXIT_USAGE); 3 torch or the peer library not
  importable (EXIT_MISSING); 4 the case refused by name before any work (EXIT_REFUSED: a
  `Refused`, its message naming the case's argument, the rule and the value); anything else
  propagates (exit 1 with its traceback). Every message is one line on stderr prefixed
  "pararnn_judge.solvers.<adapter>: ".
- read_header needs no torch and refuses a file shorter than its header length;
  read_tensors / read_case give every tensor as a torch CPU tensor that owns its memory, in the
  file's dtype and shape.
- write_tensors writes OUT atomically: a temporary file in OUT's folder renamed onto OUT, removed
  on any failure, so a partial answer file is never left. Tensors are written in name order,
  host and contiguous, the header padded with spaces to 8 bytes.
- PARARNN_GRADIENTS=1 (gradients_requested) is the only switch to the gradient answer; its loss
  is loss_of's, the one the judge's oracle differentiates (the case's grad.<output> cotangents
  when it carries any), and output_final_state reads the case's flag as the judge does.

Example (an adapter's skeleton)::

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _adapter_io  # noqa: E402
    del sys.path[0]
    command = _adapter_io.Command("fla", __doc__)
    def parse(argv):
        args = command.parse(argv, {"device": None}, "--device cuda|cpu, --version")
        command.check_choice(args, "device", ("cuda", "cpu"))
        return args
    def solve(args):
        headers, metadata = _adapter_io.read_header(args["paths"][0])  # may raise Refused: exit 4
        ...
        _adapter_io.write_tensors(torch, args["paths"][1], {"o": o})
    sys.exit(command.main(sys.argv[1:], version_line, parse, solve))
"""
import json
import os
import struct
import sys

EXIT_USAGE, EXIT_MISSING, EXIT_REFUSED = 2, 3, 4
ABSENT = ("None", "none", "")  # a metadata value that means "not set"
TRUE = ("True", "true", "1")
FALSE = ("False", "false", "0")
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32"}


class Refused(Exception):
    """What the peer library cannot do with a case, named: the case's argument, the rule, the value
    (exit 4, before any work)."""


def leave_script_folder(script):
    """Takes the folder of SCRIPT (an adapter run as a file, which Python puts first on sys.path)
    out of sys.path: there "import fla" would import the adapter fla.py instead of
    flash-linear-attention, for the adapter and for any library that imports fla."""
    here = os.path.dirname(os.path.abspath(script))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


class Command:
    """One adapter's command line: its name in messages, its usage text, its exit statuses."""

    def __init__(self, name, usage):
        self.name, self.usage = name, usage

    def fail(self, code, message):
        sys.stderr.write(f"pararnn_judge.solvers.{self.name}: {message}\n")
        sys.exit(code)

    def parse(self, argv, defaults, flags_help):
        """{key: value} for every flag `--key VALUE` of DEFAULTS (key "chunk_size" is the flag
        --chunk-size; a value stays a string), and "paths": [CASE, OUT]. Exits 2 on a flag
        without its value, an unknown flag (FLAGS_HELP lists the known ones) or not two paths."""
        args = dict(defaults, paths=[])
        flags = {"--" + key.replace("_", "-"): key for key in defaults}
        i = 0
        while i < len(argv):
            a = argv[i]
            if a in flags:
                if i + 1 >= len(argv):
                    self.fail(EXIT_USAGE, f"{a}: needs a value")
                args[flags[a]] = argv[i + 1]
                i += 2
            elif a.startswith("--"):
                self.fail(EXIT_USAGE, f"{a}: unknown flag (flags: {flags_help})")
            else:
                args["paths"].append(a)
                i += 1
        if len(args["paths"]) != 2:
            self.fail(EXIT_USAGE, f"needs CASE and OUT (got {args['paths']})\n{self.usage}")
        return args

    def check_choice(self, args, key, choices):
        """Exits 2 unless args[key] is None (not given) or one of CHOICES."""
        if args[key] not in (None,) + tuple(choices):
            self.fail(EXIT_USAGE, f"--{key.replace('_', '-')}: must be {' or '.join(choices)} (got {args[key]!r})")

    def version_line(self, label, distribution, not_installed=None):
        """"LABEL <version of DISTRIBUTION>" (for --solver-version-cmd). Where the distribution is
        not installed: NOT_INSTALLED(the exception)'s line, or exit 3 naming it."""
        try:
            import importlib.metadata as metadata
            return f"{label} {metadata.version(distribution)}"
        except Exception as e:  # noqa: BLE001 (any failure: not installed)
            if not_installed is None:
                self.fail(EXIT_MISSING, f"{distribution} is not installed: {e}")
            return not_installed(e)

    def main(self, argv, version_line, parse, solve):
        """The protocol: `--version` alone prints version_line(); else solve(parse(argv)), a
        Refused exits 4 with its message. Returns 0 (the exit status) when solve returns."""
        if argv == ["--version"]:
            print(version_line())
            return 0
        args = parse(argv)
        try:
            solve(args)
        except Refused as e:
            self.fail(EXIT_REFUSED, str(e))
        return 0


def read_header(path):
    """(tensor name -> (dtype, shape), metadata) of a safetensors file, standard library only."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Refused(f"{path}: not a safetensors file (shorter than its header length)")
        header = json.loads(f.read(struct.unpack("<Q", head)[0]))
    metadata = header.pop("__metadata__", {}) or {}
    return {name: (entry["dtype"], list(entry["shape"])) for name, entry in header.items()}, metadata


def read_case(torch, path):
    """(tensors, metadata) of a safetensors file, with torch only: each tensor on the CPU, owning
    its memory."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise Refused(f"{path}: not a safetensors file (shorter than its header length)")
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = getattr(torch, DTYPES[entry["dtype"]])
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(entry["shape"]).clone()
    return tensors, metadata


def read_tensors(torch, path):
    """The tensors of read_case, without the metadata."""
    return read_case(torch, path)[0]


def write_tensors(torch, path, tensors):
    """Writes `tensors` (any device, detached here) as safetensors, atomically (a temporary file renamed)."""
    names = {v: k for k, v in DTYPES.items()}
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": names[str(t.dtype).replace("torch.", "")], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text.encode())
            for raw in chunks:
                f.write(raw)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def gradients_requested():
    """Whether the judge asks for the gradient answer too (PARARNN_GRADIENTS=1)."""
    return os.environ.get("PARARNN_GRADIENTS") == "1"


def output_final_state(metadata):
    """The case's metadata "output_final_state" as the judge reads it (absent or None: True); the
    answer holds the state only when it is True (the judge refuses a tensor it did not ask for)."""
    value = metadata.get("output_final_state", "True")
    if value in ABSENT or value in TRUE:
        return True
    if value in FALSE:
        return False
    raise Refused(f"metadata 'output_final_state': must be True or False (got {value!r})")


def case_cotangents(tensors):
    """The case's cotangents: tensor "grad.<output>" -> {output: tensor}."""
    return {name[len("grad."):]: t for name, t in tensors.items() if name.startswith("grad.")}


def loss_of(outputs, cotangents, default):
    """The loss whose gradients the answer holds, the judge's (docs/ops/README.md, "Gradients"):
    with the case's COTANGENTS, L = sum of cotangent * output over those given (an output without
    one adds nothing); without any, the sum of every output named in DEFAULT. OUTPUTS: name ->
    tensor (the library's results); sums in f32 at least."""
    if cotangents:
        for name in cotangents:
            if name not in outputs:
                raise Refused(f"tensor 'grad.{name}': a cotangent of no output this adapter returns "
                              f"(outputs: {', '.join(sorted(outputs))})")
        return sum((outputs[n].float() * c.to(outputs[n].device).float()).sum() for n, c in sorted(cotangents.items()))
    return sum(outputs[n].float().sum() for n in default)


def gradient_or_zeros(torch, leaf):
    """LEAF's gradient after backward(); zeros where the loss does not reach it (grad None)."""
    return leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)


def device_for(torch, requested):
    """--device as given, else cuda where torch sees a GPU, else cpu."""
    return requested or ("cuda" if torch.cuda.is_available() else "cpu")
