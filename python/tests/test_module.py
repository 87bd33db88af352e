"""The pararnn_judge module on numpy arrays: views not copies, the CLI's verdicts and report keys,
the judge's honesty, and errors under the library's names."""
import json
import math
import os
import unittest

import numpy as np

import pararnn_judge as pararnn
from _support import SEED, cli, cli_report, normal_input, scratch


def gru(dtype="f32", d_in=8, d_h=16):
    return pararnn.Cell.initialise("gru", d_in=d_in, d_h=d_h, dtype=dtype, seed=SEED)


class ArraysAreViewedNotCopied(unittest.TestCase):
    def test_solver_sees_the_callers_pointer_and_strides(self):
        cell = gru()
        base = normal_input((2, 128, 8))
        x = base[:, ::2, :]  # strided: a copy would be contiguous
        pararnn._pararnn._clear_last_views()
        H = pararnn.newton_apply(cell, x)
        seen = pararnn._last_views()["x"]
        self.assertEqual(seen["data"], x.__array_interface__["data"][0])
        self.assertEqual(seen["data"], base.__array_interface__["data"][0])
        self.assertEqual(tuple(seen["strides"]), tuple(s // x.itemsize for s in x.strides))
        self.assertEqual(tuple(seen["shape"]), x.shape)
        self.assertEqual(H.shape, (2, 64, 16))
        self.assertTrue(np.array_equal(H, pararnn.newton_apply(cell, np.ascontiguousarray(x))))

    def test_verify_and_h0_are_viewed(self):
        cell = gru()
        x = normal_input((2, 32, 8))
        h0 = normal_input((2, 16), seed=SEED + 1)
        pararnn._pararnn._clear_last_views()
        pararnn.verify_agreement(cell, x, h0=h0, seed=SEED)
        views = pararnn._last_views()
        self.assertEqual(views["x"]["data"], x.ctypes.data)
        self.assertEqual(views["h0"]["data"], h0.ctypes.data)

    def test_out_is_written_in_place_with_the_returned_bits(self):
        cell = gru()
        x = normal_input((2, 64, 8))
        base = np.zeros((64, 4, 16), dtype=np.float32)
        out = base.transpose(1, 0, 2)[::2]  # (2, 64, 16), strided
        returned, stats = pararnn.newton_apply(cell, x, out=out, return_stats=True)
        self.assertIs(returned, out)
        self.assertTrue(np.array_equal(out, pararnn.newton_apply(cell, x)))
        self.assertTrue(np.all(base.transpose(1, 0, 2)[1::2] == 0))  # the rows between untouched
        self.assertGreaterEqual(stats["iters"], 1)

    def test_a_wrong_out_is_refused_by_name(self):
        cell = gru()
        x = normal_input((2, 64, 8))
        with self.assertRaisesRegex(pararnn.ContractViolation, "out: must have the cell's dtype f32"):
            pararnn.newton_apply(cell, x, out=np.zeros((2, 64, 16), dtype=np.float64))
        with self.assertRaisesRegex(pararnn.ContractViolation, "out: must have the shape"):
            pararnn.newton_apply(cell, x, out=np.zeros((2, 63, 16), dtype=np.float32))
        with self.assertRaisesRegex(pararnn.ContractViolation, "out: must have non-overlapping strides"):
            row = np.zeros((1, 64, 16), dtype=np.float32)
            broadcast = np.lib.stride_tricks.as_strided(row, shape=(2, 64, 16), strides=(0,) + row.strides[1:])
            pararnn.newton_apply(cell, x, out=broadcast)

    def test_results_share_the_tensor_storage(self):
        H = pararnn.newton_apply(gru(), normal_input((1, 16, 8)))
        self.assertIsInstance(H, np.ndarray)
        self.assertFalse(H.flags.owndata)  # owned by the C++ Tensor, not a numpy copy
        self.assertFalse(H.flags.writeable)


class Training(unittest.TestCase):
    """newton_forward / newton_backward on numpy arrays (the CPU backend): the forward is
    newton_apply's solve, the gradients repeat under recompute, the cotangent is used (and
    linearly), grad_x and out are written in place, and wrong arguments are refused by name."""

    def setUp(self):
        self.cell = gru()
        self.x = normal_input((2, 48, 8))
        self.h0 = normal_input((2, 16), seed=SEED + 1)
        self.g = normal_input((2, 48, 16), seed=SEED + 2)

    def gradients(self, grads):
        """Every gradient array of a newton_backward result, by name."""
        named = {"x": grads["x"], **{"parameters." + k: v for k, v in grads["parameters"].items()}}
        if grads["h0"] is not None:
            named["h0"] = grads["h0"]
        return named

    def test_the_forward_is_newton_apply_and_keeps_what_the_backward_reads(self):
        forward = pararnn.newton_forward(self.cell, self.x, h0=self.h0)
        self.assertTrue(np.array_equal(forward.H, pararnn.newton_apply(self.cell, self.x, h0=self.h0)))
        self.assertEqual(forward.saved_bytes, forward.H.nbytes)  # f32 computes in f32; the CPU keeps H* only
        self.assertGreaterEqual(forward.stats["iters"], 1)
        self.assertEqual(pararnn.newton_forward(self.cell, self.x, recompute=True).saved_bytes, 0)

    def test_gradients_have_their_tensors_shapes_and_repeat_under_recompute(self):
        kept = pararnn.newton_backward(pararnn.newton_forward(self.cell, self.x, h0=self.h0), self.g)
        again = pararnn.newton_backward(pararnn.newton_forward(self.cell, self.x, h0=self.h0, recompute=True), self.g)
        self.assertEqual(kept["x"].shape, self.x.shape)
        self.assertEqual(kept["h0"].shape, self.h0.shape)
        parameters = self.cell.state_dict()
        self.assertEqual(set(kept["parameters"]), set(parameters))
        for name, value in parameters.items():
            self.assertEqual(kept["parameters"][name].shape, value.shape, name)
        for name, value in self.gradients(kept).items():
            self.assertEqual(value.dtype, np.float32, name)
            self.assertTrue(np.array_equal(value, self.gradients(again)[name]), name)

    def test_the_cotangent_is_used_linearly(self):
        # L = sum(grad_H * H) is linear in grad_H: twice the cotangent gives exactly twice every
        # gradient (a power of two scales without rounding), none gives zeros.
        forward = pararnn.newton_forward(self.cell, self.x, h0=self.h0)
        one = self.gradients(pararnn.newton_backward(forward, self.g))
        two = self.gradients(pararnn.newton_backward(forward, 2 * self.g))
        zero = self.gradients(pararnn.newton_backward(forward, np.zeros_like(self.g)))
        for name, value in one.items():
            self.assertTrue(np.any(value != 0), name)
            self.assertTrue(np.array_equal(two[name], 2 * value), name)
            self.assertTrue(np.all(zero[name] == 0), name)

    def test_grad_x_and_out_are_written_in_place_with_the_returned_bits(self):
        forward = pararnn.newton_forward(self.cell, self.x)
        base = np.zeros((48, 4, 8), dtype=np.float32)
        grad_x = base.transpose(1, 0, 2)[::2]  # (2, 48, 8), strided
        grads = pararnn.newton_backward(forward, self.g, grad_x=grad_x)
        self.assertIs(grads["x"], grad_x)
        self.assertIsNone(grads["h0"])
        expected = pararnn.newton_backward(forward, self.g)
        self.assertTrue(np.array_equal(grad_x, expected["x"]))
        self.assertTrue(np.all(base.transpose(1, 0, 2)[1::2] == 0))  # the rows between untouched
        out = np.zeros((2, 48, 16), dtype=np.float32)
        into = pararnn.newton_forward(self.cell, self.x, H_out=out)
        self.assertIs(into.H, out)
        self.assertTrue(np.array_equal(out, forward.H))
        for name, value in self.gradients(pararnn.newton_backward(into, self.g)).items():
            self.assertTrue(np.array_equal(value, self.gradients(expected)[name]), name)

    def test_parameter_grads_are_written_into_the_arrays_given(self):
        # C++ ApplyOptions::parameter_gradients on the CPU backend: each named array receives the
        # gradient newton_backward returns without it, bit for bit, and is returned as given;
        # a target of another shape, or sharing memory with another, is refused by name.
        forward = pararnn.newton_forward(self.cell, self.x, h0=self.h0)
        expected = pararnn.newton_backward(forward, self.g)["parameters"]
        targets = {name: np.full(value.shape, 7.0, dtype=np.float32) for name, value in expected.items()}
        grads = pararnn.newton_backward(forward, self.g, parameter_grads=targets)
        for name, value in expected.items():
            self.assertIs(grads["parameters"][name], targets[name])
            self.assertTrue(np.array_equal(targets[name], value), name)
        name = sorted(expected)[0]
        wrong = np.zeros(expected[name].shape + (2,), dtype=np.float32)
        with self.assertRaisesRegex(pararnn.ContractViolation, rf"^parameter_gradients\['{name}'\]: must have the shape"):
            pararnn.newton_backward(forward, self.g, parameter_grads={name: wrong})
        first, second = sorted(expected)[:2]
        shared = np.zeros(expected[first].size + expected[second].size, dtype=np.float32)
        with self.assertRaisesRegex(pararnn.ContractViolation, rf"^parameter_gradients\['{second}'\]: must not share memory"):
            pararnn.newton_backward(forward, self.g, parameter_grads={
                first: shared[:expected[first].size].reshape(expected[first].shape),
                second: shared[:expected[second].size].reshape(expected[second].shape)})

    def test_wrong_arguments_are_refused_by_name(self):
        forward = pararnn.newton_forward(self.cell, self.x)
        # Each message opens with the keyword's own name (C++ newton_forward_into's H_out).
        with self.assertRaisesRegex(pararnn.ContractViolation, "^forward: must be the pararnn_judge.Forward"):
            pararnn.newton_backward(forward.H, self.g)
        with self.assertRaisesRegex(pararnn.ContractViolation, "^grad_H: must have the trajectory's shape"):
            pararnn.newton_backward(forward, self.g[:, :47])
        with self.assertRaisesRegex(pararnn.ContractViolation, "^grad_x: must have the cell's dtype f32"):
            pararnn.newton_backward(forward, self.g, grad_x=np.zeros(self.x.shape, dtype=np.float64))
        with self.assertRaisesRegex(pararnn.ContractViolation, "^H_out: must have the shape"):
            pararnn.newton_forward(self.cell, self.x, H_out=np.zeros((2, 47, 16), dtype=np.float32))
        # A stream is a CUDA stream's integer handle, refused otherwise before any work; on host
        # arrays and the CPU backend a valid one changes nothing.
        for stream in (-1, 1.5, "0", True):
            with self.assertRaisesRegex(pararnn.ContractViolation, "^stream: must be a CUDA stream's integer handle"):
                pararnn.newton_apply(self.cell, self.x, stream=stream)
            with self.assertRaisesRegex(pararnn.ContractViolation, "^stream: must be a CUDA stream's integer handle"):
                pararnn.newton_forward(self.cell, self.x, stream=stream)
            with self.assertRaisesRegex(pararnn.ContractViolation, "^stream: must be a CUDA stream's integer handle"):
                pararnn.newton_backward(forward, self.g, stream=stream)
        self.assertTrue(np.array_equal(pararnn.newton_apply(self.cell, self.x, backend="cpu", stream=0),
                                       pararnn.newton_apply(self.cell, self.x, backend="cpu")))
        # sync_free (no wait, no read back) is the CUDA per-channel family's: refused on the CPU.
        with self.assertRaisesRegex(pararnn.ContractViolation, "^sync_free: is a mode of the CUDA per-channel family"):
            pararnn.newton_forward(self.cell, self.x, max_iters=2, sync_free=True)
        with self.assertRaisesRegex(pararnn.ContractViolation, "^sync_free: must be True or False"):
            pararnn.newton_forward(self.cell, self.x, sync_free="yes")


class VerdictsAreTheCLIs(unittest.TestCase):
    def test_verify_agrees_with_the_cli_on_the_same_case(self):
        folder = scratch()
        case = os.path.join(folder, "gru.safetensors")
        code, text = cli("make-case", "--cell", "gru", "--seed", str(SEED), "--batch", "2", "--time", "64",
                         "--d-in", "8", "--d-h", "16", "--out", case)
        self.assertEqual(code, 0, text)
        cli_code, cli_json = cli_report(case, "--seed", str(SEED))
        loaded = pararnn.read_case(case)
        report = pararnn.verify_agreement(loaded["cell"], loaded["x"], seed=SEED)
        ours = report.to_dict()
        self.assertEqual(list(ours.keys()), list(cli_json.keys()))
        self.assertEqual(ours["verdict"], cli_json["verdict"])
        self.assertEqual(ours["max_abs"], cli_json["max_abs"])
        self.assertEqual(ours["residual_history"], cli_json["residual_history"])
        self.assertEqual(report.verdict, "Agree")
        self.assertEqual(cli_code, 0)
        self.assertTrue(report.ok)
        self.assertLessEqual(report.max_abs, report.atol)

    def test_compare_judges_a_planted_error_at_its_index(self):
        cell = gru()
        x = normal_input((2, 48, 8))
        H = pararnn.newton_apply(cell, x)
        good = pararnn.compare(cell, x, H, seed=SEED)
        self.assertEqual(good.verdict, "Agree", good.failure_message())
        planted = H.copy()
        planted[1, 10, 3] += 1000 * good.atol  # far outside the case's tau, whatever it is
        bad = pararnn.compare(cell, x, planted, seed=SEED)
        self.assertEqual(bad.verdict, "Disagree")
        self.assertFalse(bad.ok)
        self.assertEqual(bad.to_dict()["worst_index"], {"b": 1, "t": 10, "slot": 0, "channel": 3})

    def test_sequential_and_oracle_answers(self):
        cell = gru()
        x = normal_input((1, 32, 8))
        H_seq = pararnn.sequential_apply(cell, x)
        H_oracle, info = pararnn.oracle(cell, x, seed=SEED)
        self.assertEqual(H_oracle.dtype, np.float64)
        self.assertEqual(H_seq.shape, H_oracle.shape)
        self.assertTrue(info["certified_all_chains"])
        report = pararnn.compare(cell, x, H_seq, seed=SEED)
        self.assertEqual(report.max_abs, float(np.max(np.abs(H_seq.astype(np.float64) - H_oracle))))


class DiagnoseIsTheCLIs(unittest.TestCase):
    """pararnn_judge.diagnose: the estimate `pararnn diagnose --json` writes, from the same C++."""

    def test_the_estimate_is_the_clis_on_the_same_case(self):
        folder = scratch()
        case = os.path.join(folder, "lstm.safetensors")
        code, text = cli("make-case", "--cell", "lstm", "--seed", str(SEED), "--batch", "1", "--time", "30",
                         "--d-in", "4", "--d-h", "3", "--cu-seqlens", "0,7,30", "--h0-std", "0.5", "--out", case)
        self.assertEqual(code, 0, text)
        written = os.path.join(folder, "diagnose.json")
        code, text = cli("diagnose", case, "--window", "16", "--seed", "3", "--json", written)
        self.assertEqual(code, 0, text)
        with open(written) as f:
            theirs = json.load(f)
        loaded = pararnn.read_case(case)
        ours = pararnn.diagnose(loaded["cell"], loaded["x"], h0=loaded["h0"], cu_seqlens=loaded["cu_seqlens"],
                                window=16, seed=3)
        self.assertEqual(list(ours.keys()), [k for k in theirs if k not in ("schema_version", "command", "case",
                                                                             "context")])
        for key in ours:
            if key != "seconds":
                self.assertEqual(ours[key], theirs[key], key)
        self.assertEqual(ours["chains"]["list"], ["segment=0", "segment=1"])

    def test_a_contracting_gru_has_a_negative_exponent_in_every_unit(self):
        d = pararnn.diagnose(gru(), normal_input((2, 64, 8)), seed=SEED)
        self.assertEqual(d["method"], "exact log|J| per channel")
        self.assertEqual(d["lyapunov"]["units"], 2 * 16)
        self.assertLess(d["lyapunov"]["max"], 0.0)
        self.assertEqual(d["lyapunov"]["positive_units"], 0)
        self.assertEqual(d["lyapunov"]["max"], max(u["exponent"] for u in d["units"]))

    def test_no_number_from_an_uncertified_or_non_finite_case(self):
        with self.assertRaisesRegex(pararnn.CertificationError, "diagnose: inconclusive"):
            pararnn.diagnose(gru(), normal_input((1, 16, 8)), certify_budget=0)
        x = normal_input((1, 16, 8))
        x[0, 3, 2] = np.nan
        with self.assertRaises(pararnn.CertificationError) as caught:
            pararnn.diagnose(gru(), x)
        self.assertIn("(0, 3, 2)", str(caught.exception))
        with self.assertRaisesRegex(pararnn.ContractViolation, "window: must be >= 1"):
            pararnn.diagnose(gru(), normal_input((1, 16, 8)), window=0)


class TheJudgeIsHonest(unittest.TestCase):
    def test_non_finite_input_raises_newton_divergence_naming_the_index(self):
        x = normal_input((1, 16, 8))
        x[0, 3, 2] = np.nan
        with self.assertRaises(pararnn.NewtonDivergenceError) as caught:
            pararnn.verify_agreement(gru(), x, seed=SEED)
        self.assertIn("(0, 3, 2)", str(caught.exception))

    def test_an_uncertified_oracle_is_never_ok(self):
        report = pararnn.verify_agreement(gru(), normal_input((1, 16, 8)), seed=SEED, certify_budget=0)
        self.assertEqual(report.verdict, "Inconclusive")
        self.assertFalse(report.ok)
        self.assertFalse(report.to_dict()["ok"])
        with self.assertRaises(pararnn.CertificationError):
            pararnn.oracle(gru(), normal_input((1, 16, 8)), certify_budget=0)

    def test_a_non_finite_trajectory_is_never_ok(self):
        cell = gru()
        x = normal_input((1, 16, 8))
        H = pararnn.newton_apply(cell, x).copy()  # results are read-only views of the C++ Tensor
        H[0, 5, 1] = np.inf
        report = pararnn.compare(cell, x, H, seed=SEED)
        self.assertNotEqual(report.verdict, "Agree")
        self.assertFalse(report.ok)
        self.assertFalse(math.isfinite(report.max_abs) and report.max_abs <= report.atol)

    def test_raise_on_fail_raises_agreement_error(self):
        cell = gru()
        x = normal_input((1, 16, 8))
        H = pararnn.newton_apply(cell, x) + np.float32(1.0)
        with self.assertRaises(pararnn.AgreementError):
            pararnn.compare(cell, x, H, raise_on_fail=True)


class CellsComeFromStateDictsAndCases(unittest.TestCase):
    def test_state_dict_round_trip_is_bitwise(self):
        cell = gru()
        again = pararnn.Cell.from_state_dict("gru", cell.state_dict(), max_recurrent_norm=0.5)
        x = normal_input((2, 32, 8))
        self.assertTrue(np.array_equal(pararnn.newton_apply(cell, x), pararnn.newton_apply(again, x)))

    def test_cfc_0_17_4_is_completed_and_recorded(self):
        cfc = pararnn.Cell.initialise("cfc", d_in=5, d_h=8, dtype="f32", seed=SEED)
        old = {k: v for k, v in cfc.state_dict().items() if not k.startswith("W_b.")}
        cell = pararnn.Cell.from_state_dict("cfc", old, max_recurrent_norm=0.5)
        self.assertIn("0.17.4", cell.metadata["cell_version"])
        x = np.abs(normal_input((1, 16, 5)))
        self.assertIn("0.17.4", pararnn.verify_agreement(cell, x, seed=SEED).to_dict()["cell_version"])

    def test_rwkv7_without_n_heads_is_refused_by_name(self):
        rwkv = pararnn.Cell.initialise("rwkv7", d_in=8, d_h=8, dtype="f32", seed=SEED, n_heads=2)
        with self.assertRaises(pararnn.ContractViolation) as caught:
            pararnn.Cell.from_state_dict("rwkv7", rwkv.state_dict())
        self.assertIn("n_heads", str(caught.exception))

    def test_a_tensor_the_cell_does_not_have_is_refused(self):
        sd = gru().state_dict()
        sd["H"] = np.zeros((2, 2), np.float32)
        with self.assertRaises(pararnn.ContractViolation) as caught:
            pararnn.Cell.from_state_dict("gru", sd)
        self.assertIn("H", str(caught.exception))

    def test_from_case_reads_what_write_case_wrote(self):
        cell = gru()
        x = normal_input((1, 16, 8))
        path = os.path.join(scratch(), "written.safetensors")
        pararnn.write_case(path, {**cell.state_dict(), "x": x}, {"cell": "gru", "max_recurrent_norm": 0.5})
        again = pararnn.Cell.from_case(path)
        self.assertTrue(np.array_equal(pararnn.newton_apply(again, x), pararnn.newton_apply(cell, x)))


class ErrorsNameTheArgument(unittest.TestCase):
    def test_contract_violation_is_a_value_error_naming_the_argument(self):
        self.assertTrue(issubclass(pararnn.ContractViolation, ValueError))
        self.assertTrue(issubclass(pararnn.ContractViolation, pararnn.Error))
        with self.assertRaises(ValueError) as caught:
            pararnn.newton_apply(gru(), normal_input((16, 8)))
        self.assertIsInstance(caught.exception, pararnn.ContractViolation)
        self.assertTrue(str(caught.exception).startswith("x"), str(caught.exception))

    def test_bad_options_name_themselves(self):
        x = normal_input((1, 8, 8))
        with self.assertRaisesRegex(pararnn.ContractViolation, "max_iters.*-1"):
            pararnn.newton_apply(gru(), x, max_iters=-1)
        with self.assertRaisesRegex(pararnn.ContractViolation, "warp"):
            pararnn.newton_apply(gru(), x, backend="warp")
        with self.assertRaisesRegex(pararnn.ContractViolation, "cell"):
            pararnn.newton_apply("gru", x)

    def test_log_coordinates_are_slstm_only_and_judged_like_native(self):
        x = normal_input((2, 40, 8))
        with self.assertRaisesRegex(pararnn.ContractViolation, "coords.*ParaSLSTM"):
            pararnn.newton_apply(gru(), x, coords="log")
        with self.assertRaisesRegex(pararnn.ContractViolation, "coords"):
            pararnn.newton_apply(gru(), x, coords="polar")
        slstm = pararnn.Cell.initialise("slstm", d_in=8, d_h=16, dtype="f32", seed=SEED)
        H, stats = pararnn.newton_apply(slstm, x, coords="log", return_stats=True)
        self.assertEqual(H.shape, (2, 40, 4, 16))
        self.assertTrue(stats["converged"])
        report = pararnn.verify_agreement(slstm, x, coords="log", seed=SEED, gradients=True)
        self.assertEqual(report.verdict, "Agree", report.failure_message())
        native = pararnn.newton_apply(slstm, x)
        self.assertFalse(np.array_equal(H, native))  # another iteration, the same fixed point

    def test_cuda_without_the_backend_is_an_unsupported_path(self):
        if pararnn.cuda_backend_built:
            self.skipTest("the CUDA backend is built: backend='cuda' may run here")
        with self.assertRaises(pararnn.UnsupportedPath):
            pararnn.newton_apply(gru(), normal_input((1, 8, 8)), backend="cuda")

    def test_the_cuda_pool_calls_refuse_by_name_or_release(self):
        try:
            pararnn.cuda_release_cached_memory(0)
        except pararnn.UnsupportedPath as e:  # no CUDA backend in this build, or no device
            self.assertIn("cuda_release_cached_memory", str(e))
            return
        self.assertEqual(pararnn.cuda_cached_memory(0), 0)
        with self.assertRaisesRegex(pararnn.ContractViolation, "device: must name one of"):
            pararnn.cuda_release_cached_memory(-1)


class CheapPredictedK(unittest.TestCase):
    def test_the_solvers_own_answer_gives_the_reports_cheap_prediction(self):
        cell = gru()
        x = normal_input((2, 64, 8))
        report = pararnn.verify_agreement(cell, x, seed=SEED).to_dict()
        p = pararnn.predicted_k_from_trajectory(cell, x, pararnn.newton_apply(cell, x), tau=report["atol"])
        self.assertEqual(p["predicted_k"], report["predicted_k_iterate"])
        self.assertEqual(p["method"], "exact log|J| per channel")
        self.assertEqual(p["units"], 2 * 16)
        self.assertTrue(p["finite"])
        self.assertLess(p["max_exponent"], 0.0)

    def test_a_nan_gives_no_number_and_refusals_name_their_argument(self):
        cell = gru()
        x = normal_input((1, 32, 8))
        H = pararnn.newton_apply(cell, x).copy()
        H[0, 5, 1] = np.nan
        p = pararnn.predicted_k_from_trajectory(cell, x, H)
        self.assertFalse(p["finite"])
        self.assertIsNone(p["predicted_k"]["k"])
        self.assertIn("b=0,channel=1", p["reason"])
        with self.assertRaisesRegex(pararnn.ContractViolation, "window: must be >= 1"):
            pararnn.predicted_k_from_trajectory(cell, x, H, window=0)
        with self.assertRaisesRegex(pararnn.ContractViolation, "^H: "):
            pararnn.predicted_k_from_trajectory(cell, x, H[:, :10].copy())
        with self.assertRaisesRegex(pararnn.ContractViolation, "tau: must be finite and > 0"):
            pararnn.predicted_k_from_trajectory(cell, x, H, tau=0.0)


if __name__ == "__main__":
    unittest.main()
