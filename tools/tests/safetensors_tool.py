#!/usr/bin/env python3
"""Edits safetensors files for the CLI tests, in the standard library only (CI has no numpy).

It writes files the way `safetensors.torch.save_file` does: "__metadata__" first (string values,
as `str()` of the Python value gives them), tensors in order of dtype size (largest first) then
name, contiguous data offsets, the header padded with spaces to a multiple of 8 bytes.

Commands (one per call):
  torch-dump SRC DST [--drop NAME]... [--meta KEY=VALUE]... [--unmeta KEY]... [--keep-meta]
      re-writes the tensors of SRC as a pararnn-torch user's dump would: the state_dict, x (and
      h0), metadata "cell" plus the given keys only (unless --keep-meta)
  set SRC DST NAME INDEX VALUE          sets one element (flat INDEX) of tensor NAME
  fill SRC DST NAME VALUE               sets every element of tensor NAME
  add SRC DST NAME DTYPE SHAPE VALUE    adds a tensor (SHAPE like 1,8,3) filled with VALUE
  shift-cast SRC DST NAME SHIFT DTYPE   adds SHIFT to every element of NAME and stores it as DTYPE
  duplicate-key SRC DST                 repeats the metadata key "cell" in the header text
  keep SRC DST NAME...                  only the named tensors, no metadata (save_file({...}))
  drop SRC DST NAME                     every tensor but NAME
  strip SRC DST                         every tensor, no metadata (save_file(tensors))
  rename SRC DST OLD NEW                tensor OLD under the name NEW
  meta SRC DST KEY=VALUE                every tensor, the metadata with KEY set to VALUE
  reshape SRC DST NAME SHAPE            NAME's first prod(SHAPE) elements as SHAPE (like 1,8,3)
  shift-at SRC DST NAME INDEX FACTOR    adds FACTOR x (atol + rtol x max|NAME|) to one element (flat
                                        INDEX), atol and rtol read from the environment (ATOL, RTOL)
"""
import json
import math
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], list(entry["shape"]), decode(entry["dtype"], body[begin:end]))
    return tensors, metadata


def decode(dtype, raw):
    count = len(raw) // SIZES[dtype]
    if dtype == "F64":
        return list(struct.unpack("<%dd" % count, raw))
    if dtype == "F32":
        return list(struct.unpack("<%df" % count, raw))
    if dtype == "F16":
        return list(struct.unpack("<%de" % count, raw))
    if dtype == "BF16":
        words = struct.unpack("<%dH" % count, raw)
        return [struct.unpack("<f", struct.pack("<I", w << 16))[0] for w in words]
    if dtype == "I64":
        return list(struct.unpack("<%dq" % count, raw))
    return list(struct.unpack("<%di" % count, raw))


def to_bf16(value):
    if math.isnan(value):
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even


def encode(dtype, values):
    count = len(values)
    if dtype == "F64":
        return struct.pack("<%dd" % count, *values)
    if dtype == "F32":
        return struct.pack("<%df" % count, *values)
    if dtype == "F16":
        return struct.pack("<%de" % count, *values)
    if dtype == "BF16":
        return struct.pack("<%dH" % count, *[to_bf16(v) for v in values])
    if dtype == "I64":
        return struct.pack("<%dq" % count, *[int(v) for v in values])
    return struct.pack("<%di" % count, *[int(v) for v in values])


def header_and_body(tensors, metadata):
    header = {"__metadata__": metadata} if metadata else {}
    body = b""
    for name in sorted(tensors, key=lambda k: (-SIZES[tensors[k][0]], k)):
        dtype, shape, values = tensors[name]
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    return json.dumps(header, separators=(",", ":")), body


def write(path, tensors, metadata, header_text=None):
    text, body = header_and_body(tensors, metadata)
    text = header_text if header_text is not None else text
    text += " " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text.encode() + body)


def main(argv):
    command, src, dst = argv[0], argv[1], argv[2]
    tensors, metadata = read(src)
    rest = argv[3:]
    if command == "torch-dump":
        keep = "--keep-meta" in rest
        meta = dict(metadata) if keep else {"cell": metadata["cell"]}
        i = 0
        while i < len(rest):
            if rest[i] == "--drop":
                tensors.pop(rest[i + 1])
                i += 2
            elif rest[i] == "--meta":
                key, value = rest[i + 1].split("=", 1)
                meta[key] = value
                i += 2
            elif rest[i] == "--unmeta":
                meta.pop(rest[i + 1], None)
                i += 2
            else:
                i += 1
        write(dst, tensors, meta)
    elif command == "set":
        name, index, value = rest[0], int(rest[1]), float(rest[2])
        tensors[name][2][index] = value
        write(dst, tensors, metadata)
    elif command == "fill":
        name, value = rest[0], float(rest[1])
        dtype, shape, values = tensors[name]
        tensors[name] = (dtype, shape, [value] * len(values))
        write(dst, tensors, metadata)
    elif command == "add":
        name, dtype, shape, value = rest[0], rest[1], [int(v) for v in rest[2].split(",")], float(rest[3])
        tensors[name] = (dtype, shape, [value] * math.prod(shape))
        write(dst, tensors, metadata)
    elif command == "shift-cast":
        name, shift, dtype = rest[0], float(rest[1]), rest[2]
        _, shape, values = tensors[name]
        tensors[name] = (dtype, shape, [v + shift for v in values])
        write(dst, tensors, metadata)
    elif command == "duplicate-key":
        text, _ = header_and_body(tensors, metadata)
        doubled = text.replace('"__metadata__":{', '"__metadata__":{"cell":"lstm",', 1)
        write(dst, tensors, metadata, header_text=doubled)
    elif command == "keep":
        write(dst, {name: tensors[name] for name in rest}, {})
    elif command == "strip":
        write(dst, tensors, {})
    elif command == "drop":
        tensors.pop(rest[0])
        write(dst, tensors, metadata)
    elif command == "meta":
        key, value = rest[0].split("=", 1)
        write(dst, tensors, dict(metadata, **{key: value}))
    elif command == "rename":
        tensors[rest[1]] = tensors.pop(rest[0])
        write(dst, tensors, metadata)
    elif command == "reshape":
        name, shape = rest[0], [int(v) for v in rest[1].split(",")]
        dtype, _, values = tensors[name]
        tensors[name] = (dtype, shape, values[:math.prod(shape)])
        write(dst, tensors, metadata)
    elif command == "shift-at":
        import os
        name, index, factor = rest[0], int(rest[1]), float(rest[2])
        values = tensors[name][2]
        allowed = float(os.environ["ATOL"]) + float(os.environ["RTOL"]) * max(abs(v) for v in values)
        values[index] += factor * allowed
        write(dst, tensors, metadata)
    else:
        raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    main(sys.argv[1:])
