"""pararnn_judge.compare(..., gradients=...) and `pararnn compare --gradients` on numpy arrays: our
own solver's gradients, handed in as an external answer, agree; one element moved beyond the
contract's τ (read from the right answer's report, which takes it from the contract table) is
Disagree; a missing tensor is named and never Agree; a NaN is Disagree; misnamed, mis-shaped and
mistyped tensors are refused naming them; a gradient file written as safetensors.torch.save_file
writes one (header order, padding, no metadata) is read by the CLI with the Python verdict."""
import json
import os
import struct
import unittest

import numpy as np

import pararnn_judge as pararnn
from _support import SEED, cli, normal_input, scratch

# safetensors dtype names of the numpy dtypes a case holds (torch writes the same names).
_DTYPES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def save_file_like_torch(tensors, path):
    """Writes `tensors` as safetensors.torch.save_file(tensors, path) does: a JSON header of the
    tensors sorted by dtype size (largest first) then name, contiguous data offsets, the header
    padded with spaces to a multiple of 8 bytes, no metadata."""
    header, body = {}, b""
    for name in sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k)):
        raw = np.ascontiguousarray(tensors[name]).astype(tensors[name].dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + body)


def answer(name="lstm", h0=True):
    """A case and our solver's answer to it: H and the gradients of sum(H) under the names of a
    gradient file ('grad.x', 'grad.h0', 'grad.<state_dict name>')."""
    cell = pararnn.Cell.initialise(name, d_in=4, d_h=8, dtype="f32", seed=SEED)
    x = normal_input((2, 32, 4))
    h = normal_input((2,) + tuple(cell.state_shape), seed=SEED + 1) * np.float32(0.5) if h0 else None
    forward = pararnn.newton_forward(cell, x, h0=h)
    grads = pararnn.newton_backward(forward, np.ones_like(forward.H))
    named = {f"grad.{k}": v for k, v in grads["parameters"].items()}
    named["grad.x"] = grads["x"]
    if h is not None:
        named["grad.h0"] = grads["h0"]
    return cell, x, h, np.array(forward.H), named, grads


def planted(report, gradients, name, index, factor=10.0):
    """gradients with one element of grad.<name> moved by factor x the largest allowed difference."""
    entry = report.to_dict()["gradients"][name]
    out = dict(gradients)
    moved = np.array(gradients[f"grad.{name}"], copy=True)
    moved.flat[index] += factor * (entry["atol"] + entry["rtol"] * np.abs(moved).max())
    out[f"grad.{name}"] = moved
    return out


class ExternalGradientsAreJudged(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cell, cls.x, cls.h0, cls.H, cls.gradients, cls.backward = answer()
        cls.right = pararnn.compare(cls.cell, cls.x, cls.H, h0=cls.h0, seed=SEED, gradients=cls.gradients)

    def test_our_own_gradients_agree_in_either_form(self):
        self.assertEqual(self.right.verdict, "Agree", self.right.failure_message())
        self.assertEqual(set(self.right.to_dict()["gradients"]), {n[len("grad."):] for n in self.gradients})
        self.assertEqual(self.right.gradients_missing, [])
        # newton_backward's own result is taken as it is.
        again = pararnn.compare(self.cell, self.x, self.H, h0=self.h0, seed=SEED, gradients=self.backward)
        self.assertEqual(again.to_dict()["gradients"], self.right.to_dict()["gradients"])

    def test_one_element_beyond_tau_is_disagree(self):
        wrong = planted(self.right, self.gradients, "W_x.weight", 7)
        report = pararnn.compare(self.cell, self.x, self.H, h0=self.h0, seed=SEED, gradients=wrong)
        self.assertEqual(report.verdict, "Disagree")
        entry = report.to_dict()["gradients"]["W_x.weight"]
        self.assertEqual((entry["mismatches"], entry["worst_index"]), (1, [1, 3]))

    def test_a_missing_tensor_is_named_and_never_agree(self):
        partial = {k: v for k, v in self.gradients.items() if k != "grad.h0"}
        report = pararnn.compare(self.cell, self.x, self.H, h0=self.h0, seed=SEED, gradients=partial)
        self.assertEqual(report.verdict, "Inconclusive")
        self.assertFalse(report.ok)
        self.assertEqual(report.gradients_missing, ["h0"])
        self.assertIn("grad.h0", report.inconclusive_reason)

    def test_a_nan_is_judged_disagree(self):
        bad = dict(self.gradients)
        bad["grad.x"] = np.array(self.gradients["grad.x"], copy=True)
        bad["grad.x"][0, 5, 1] = np.nan
        report = pararnn.compare(self.cell, self.x, self.H, h0=self.h0, seed=SEED, gradients=bad)
        self.assertEqual(report.verdict, "Disagree")

    def test_misnamed_misshaped_and_mistyped_tensors_are_refused_by_name(self):
        def refused(gradients, *says):
            with self.assertRaises(pararnn.ContractViolation) as caught:
                pararnn.compare(self.cell, self.x, self.H, h0=self.h0, seed=SEED, gradients=gradients)
            for text in says:
                self.assertIn(text, str(caught.exception))
        g = self.gradients
        refused({**g, "grad.W_x.wieght": g["grad.W_x.weight"]}, "'grad.W_x.wieght'", "is not a gradient")
        refused({**g, "grad.x": g["grad.x"][:, 1:]}, "'grad.x'", "shape")
        refused({**g, "grad.a_f": g["grad.a_f"].astype(np.float64)}, "'grad.a_f'", "dtype f32")


class GradientFilesAsTorchWritesThem(unittest.TestCase):
    def test_the_cli_reads_them_with_the_python_verdict(self):
        folder = scratch()
        case = os.path.join(folder, "case.safetensors")
        code, text = cli("make-case", "--cell", "gru", "--seed", str(SEED), "--batch", "2", "--time", "32",
                         "--d-in", "4", "--d-h", "8", "--h0-std", "0.5", "--out", case)
        self.assertEqual(code, 0, text)
        read = pararnn.read_case(case)
        forward = pararnn.newton_forward(read["cell"], read["x"], h0=read["h0"])
        grads = pararnn.newton_backward(forward, np.ones_like(forward.H))
        gradients = {f"grad.{k}": np.array(v) for k, v in grads["parameters"].items()}
        gradients.update({"grad.x": np.array(grads["x"]), "grad.h0": np.array(grads["h0"])})
        H_path, G_path = os.path.join(folder, "H.safetensors"), os.path.join(folder, "G.safetensors")
        save_file_like_torch({"H": np.array(forward.H)}, H_path)
        save_file_like_torch(gradients, G_path)
        report_path = os.path.join(folder, "right.json")
        code, text = cli("compare", case, "--trajectory", H_path, "--gradients", G_path, "--seed", str(SEED),
                         "--json", report_path)
        self.assertEqual(code, 0, text)
        with open(report_path) as f:
            cli_json = json.load(f)
        ours = pararnn.compare(read["cell"], read["x"], forward.H, h0=read["h0"], seed=SEED, gradients=gradients)
        self.assertEqual(ours.verdict, cli_json["verdict"])
        self.assertEqual(ours.to_dict()["gradients"], cli_json["gradients"])
        # One element moved beyond τ: exit 1 from the CLI as from Python.
        wrong = planted(ours, gradients, "a_z", 3)
        save_file_like_torch(wrong, G_path)
        code, text = cli("compare", case, "--trajectory", H_path, "--gradients", G_path, "--seed", str(SEED))
        self.assertEqual(code, 1, text)
        self.assertIn("gradient a_z", text)


if __name__ == "__main__":
    unittest.main()
