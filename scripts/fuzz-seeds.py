#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/), standard library only.

Valid cases of every cell come from `pararnn make-case` at tiny sizes (B <= 2, T <= 4, d_h = 4);
the malformed variants are edits of them of the kinds that hostile files show (truncated data,
a header length past the end, broken or non-object JSON headers, an unknown dtype, offsets
overlapping or out of order, a shape that disagrees with the bytes, a metadata value that is
not a number). Usage: scripts/fuzz-seeds.py <pararnn CLI> [out folder, default fuzz/corpus]
"""
import json
import pathlib
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CELLS = [("gru", []), ("gru-head", ["--cell", "gru", "--mix", "head", "--n-heads", "2"]), ("lstm", []),
         ("nlru", []), ("slstm", []), ("cfc", []), ("cfc-diag-h", ["--cell", "cfc", "--gate-mix", "diag_h"]),
         ("titans", []), ("hopfield", []), ("rwkv7", ["--n-heads", "2"]),
         ("m2rnn", ["--k-dim", "2", "--v-dim", "2"])]
# The ops in op_names() order (core/src/op_case.cpp): fuzz_op_answer's byte 0 indexes it.
OPS = ["gla", "simple_gla", "delta_rule", "gated_delta_rule", "dplr_delta_rule", "rwkv7", "selective_scan", "ssd"]


def split(data):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def join(header, body):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def malformed(data):
    header, body = split(data)
    tensors = [k for k in header if k != "__metadata__"]
    first = tensors[0]
    out = {"truncated": data[: len(data) // 2], "header_past_end": struct.pack("<Q", len(data) * 4) + data[8:],
           "header_not_json": data[:8] + b"{" * (len(data[8:16])) + data[16:],
           "header_not_object": struct.pack("<Q", 8) + b"[1,2,3] " + body,
           "empty": b"", "short": data[:5]}
    h = json.loads(json.dumps(header)); h[first]["dtype"] = "Q7"; out["unknown_dtype"] = join(h, body)
    h = json.loads(json.dumps(header)); h[first]["data_offsets"] = [0, len(body) + 8]; out["offset_past_end"] = join(h, body)
    h = json.loads(json.dumps(header)); h[first]["shape"] = [s + 1 for s in h[first]["shape"]] or [2]; out["shape_vs_bytes"] = join(h, body)
    if len(tensors) > 1:
        h = json.loads(json.dumps(header)); h[tensors[1]]["data_offsets"] = h[first]["data_offsets"]; out["overlap"] = join(h, body)
    h = json.loads(json.dumps(header)); h.setdefault("__metadata__", {})["d_h"] = "four"; out["meta_not_number"] = join(h, body)
    h = json.loads(json.dumps(header)); h.setdefault("__metadata__", {})["cell"] = "None"; out["meta_cell_none"] = join(h, body)
    h = json.loads(json.dumps(header)); h[first]["shape"] = [-1] + h[first]["shape"][1:]; out["negative_extent"] = join(h, body)
    return out


def main():
    cli = pathlib.Path(sys.argv[1]).resolve()
    corpus = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "fuzz" / "corpus"
    for target in ["fuzz_safetensors", "fuzz_case_readings", "fuzz_trajectory", "fuzz_metadata",
                   "fuzz_cu_seqlens", "fuzz_report_json", "fuzz_op_case", "fuzz_op_answer"]:
        (corpus / target).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in CELLS:
            args = extra if "--cell" in extra else ["--cell", label] + extra
            for dtype, batch, time, h0 in [("f32", 1, 3, False), ("bf16", 2, 2, True)]:
                if label == "rwkv7" and h0:
                    h0 = False
                path = pathlib.Path(tmp) / f"{label}-{dtype}.safetensors"
                cmd = [str(cli), "make-case", *args, "--batch", str(batch), "--time", str(time), "--d-in", "3",
                       "--dtype", dtype, "--seed", "1", "--out", str(path)]
                if label != "m2rnn":
                    cmd += ["--d-h", "4"]
                if h0:
                    cmd += ["--h0-std", "0.5"]
                subprocess.run(cmd, check=True, capture_output=True)
                data = path.read_bytes()
                for target in ["fuzz_safetensors", "fuzz_case_readings"]:
                    (corpus / target / f"{label}-{dtype}.case").write_bytes(data)
                if dtype == "f32":
                    for kind, bad in malformed(data).items():
                        (corpus / "fuzz_safetensors" / f"{label}-{kind}").write_bytes(bad)
                        (corpus / "fuzz_case_readings" / f"{label}-{kind}").write_bytes(bad)
        # A packed case (cu_seqlens) for the case readings.
        path = pathlib.Path(tmp) / "packed.safetensors"
        subprocess.run([str(cli), "make-case", "--cell", "gru", "--batch", "1", "--time", "5", "--d-in", "3", "--d-h", "4",
                        "--cu-seqlens", "0,2,5", "--out", str(path)], check=True, capture_output=True)
        (corpus / "fuzz_case_readings" / "gru-packed.case").write_bytes(path.read_bytes())
    # Op cases (every op, f32 and bf16, one packed) and answers for fuzz_op_answer's fixed cases:
    # byte 0 the op's index in OPS, then an answer file (the oracle's with gradients, the
    # sequential loop's, one with a NaN, one without its output, malformed edits).
    with tempfile.TemporaryDirectory() as tmp:
        for index, op in enumerate(OPS):
            v_dim = "1" if op == "selective_scan" else "2"
            for dtype in ["f32", "bf16"]:
                case = pathlib.Path(tmp) / f"{op}-{dtype}.case"
                subprocess.run([str(cli), "make-case", "--op", op, "--batch", "1", "--time", "4", "--n-heads", "1",
                                "--k-dim", "2", "--v-dim", v_dim, "--seed", "3", "--dtype", dtype, "--out", str(case)],
                               check=True, capture_output=True)
                data = case.read_bytes()
                (corpus / "fuzz_op_case" / f"{op}-{dtype}").write_bytes(data)
                if dtype != "f32":
                    continue
                for kind, bad in malformed(data).items():
                    (corpus / "fuzz_op_case" / f"{op}-{kind}").write_bytes(bad)
                answers = {}
                for how, command in [("oracle", "oracle"), ("solve", "solve")]:
                    out = pathlib.Path(tmp) / f"{op}.{how}"
                    subprocess.run([str(cli), command, str(case), "--grad", "--out", str(out)], check=True, capture_output=True)
                    answers[how] = out.read_bytes()
                header, body = split(answers["solve"])
                output = next(k for k in header if k != "__metadata__" and not k.startswith("grad."))
                start = header[output]["data_offsets"][0]
                nan = body[:start] + struct.pack("<f", float("nan")) + body[start + 4:]
                answers["nan"] = join(header, nan)
                without = {k: v for k, v in header.items() if k != output}
                answers["without_output"] = join(without, body)
                answers.update({f"solve-{kind}": bad for kind, bad in malformed(answers["solve"]).items()})
                for how, data in answers.items():
                    (corpus / "fuzz_op_answer" / f"{op}-{how}").write_bytes(bytes([index]) + data)
        packed = pathlib.Path(tmp) / "packed.case"
        subprocess.run([str(cli), "make-case", "--op", "gla", "--batch", "1", "--time", "5", "--n-heads", "1", "--k-dim", "2",
                        "--v-dim", "2", "--cu-seqlens", "0,2,5", "--out", str(packed)], check=True, capture_output=True)
        (corpus / "fuzz_op_case" / "gla-packed").write_bytes(packed.read_bytes())
    # Trajectories for the fixed case of fuzz_trajectory: lstm, B = 1, T = 4, 2 slots, d_h = 3.
    def trajectory(dtype, shape, fill):
        size = {"F32": 4, "F64": 8, "BF16": 2}[dtype]
        count = 1
        for s in shape:
            count *= s
        value = {"F32": struct.pack("<f", fill), "F64": struct.pack("<d", fill), "BF16": struct.pack("<f", fill)[2:]}[dtype]
        return join({"H": {"dtype": dtype, "shape": shape, "data_offsets": [0, count * size]}}, value * count)
    seeds = {"h_f32": trajectory("F32", [1, 4, 2, 3], 0.1), "h_f64": trajectory("F64", [1, 4, 2, 3], -0.2),
             "h_bf16": trajectory("BF16", [1, 4, 2, 3], 0.5), "h_nan": trajectory("F32", [1, 4, 2, 3], float("nan")),
             "h_wrong_shape": trajectory("F32", [1, 3, 2, 3], 0.0), "h_flat": trajectory("F32", [24], 0.0)}
    for name, data in seeds.items():
        (corpus / "fuzz_trajectory" / name).write_bytes(data)
    # Metadata: byte 0 picks the cell, then NUL-separated key, value pairs.
    meta = {"none": b"\x00", "eps_zero": b"\x03eps\x000", "cap_none": b"\x00max_recurrent_norm\x00none",
            "cap_text": b"\x01max_recurrent_norm\x00big", "heads": b"\x08n_heads\x003", "kdim": b"\x07k_dim\x00-1",
            "cell_other": b"\x00cell\x00lstm", "beta": b"\x06beta\x001e400", "gate_mix": b"\x04gate_mix\x00diag_h"}
    for name, data in meta.items():
        (corpus / "fuzz_metadata" / name).write_bytes(data)
    # cu_seqlens: byte 0 int32/int64, byte 1 the packed length, then the entries.
    def cu(wide, total, values):
        return bytes([1 if wide else 0, total]) + b"".join(struct.pack("<q" if wide else "<i", v) for v in values)
    cus = {"valid": cu(False, 5, [0, 2, 5]), "valid64": cu(True, 5, [0, 5]), "not_zero": cu(False, 5, [1, 5]),
           "not_end": cu(False, 5, [0, 4]), "repeat": cu(False, 5, [0, 2, 2, 5]), "one": cu(True, 5, [0]),
           "negative": cu(True, 5, [0, -3, 5])}
    for name, data in cus.items():
        (corpus / "fuzz_cu_seqlens" / name).write_bytes(data)
    # Reports: the committed example with every list cut to its first two entries (small seeds)
    # and malformed edits.
    def trimmed(value):
        if isinstance(value, list):
            return [trimmed(v) for v in value[:2]]
        if isinstance(value, dict):
            return {k: trimmed(v) for k, v in value.items()}
        return value
    report = trimmed(json.loads((ROOT / "docs/examples/cpu-quick/report.json").read_text()))
    text = json.dumps(report, separators=(",", ":")).encode()
    out = corpus / "fuzz_report_json"
    (out / "cpu_quick_trimmed.json").write_bytes(text)
    (out / "truncated.json").write_bytes(text[: len(text) // 2])
    for key in list(report)[:4]:
        edited = dict(report)
        edited.pop(key)
        (out / f"without_{key}.json").write_bytes(json.dumps(edited, separators=(",", ":")).encode())
    edited = dict(report)
    edited["schema_version"] = "x"
    (out / "schema_text.json").write_bytes(json.dumps(edited, separators=(",", ":")).encode())
    (out / "array.json").write_bytes(b"[1,2]")


if __name__ == "__main__":
    main()
