"""pararnn_judge.torch without torch: stand-in cells of pararnn-torch's class names whose state_dict
holds numpy arrays. dump_case writes what `pararnn verify` reads, under the Python argument
names, and pararnn_judge.torch.verify gives the CLI's verdict on the dumped case."""
import os
import sys
import unittest
import warnings

import numpy as np

import pararnn_judge as pararnn
import pararnn_judge.torch as pt
from _support import SEED, cli, cli_report, normal_input, scratch


def stand_in(class_name, state_dict, **attributes):
    cls = type(class_name, (), {"state_dict": lambda self: dict(state_dict)})
    cell = cls()
    for key, value in attributes.items():
        setattr(cell, key, value)
    return cell


def parameters(name, **kw):
    return pararnn.Cell.initialise(name, dtype="f32", seed=SEED, **kw).state_dict()


class DumpCaseWritesWhatTheJudgeReads(unittest.TestCase):
    def test_torch_is_imported_lazily(self):
        self.assertNotIn("torch", sys.modules)

    def test_gru_head_dump_matches_the_cli_and_records_the_python_names(self):
        sd = parameters("gru", d_in=8, d_h=16, mix="head", n_heads=4)
        cell = stand_in("ParaGRU", sd, mix="head", n_heads=4, max_recurrent_norm=None)
        x = normal_input((2, 32, 8))
        path = os.path.join(scratch(), "gru_head.safetensors")
        pt.dump_case(cell, x, path)
        meta = pararnn.read_case(path)["metadata"]
        self.assertEqual({k: meta[k] for k in ("cell", "mix", "n_heads", "max_recurrent_norm")},
                         {"cell": "gru", "mix": "head", "n_heads": "4", "max_recurrent_norm": "None"})
        code, cli_json = cli_report(path, "--seed", str(SEED))
        ours = pt.verify(cell, x, seed=SEED).to_dict()
        self.assertEqual(ours["verdict"], cli_json["verdict"])
        self.assertEqual(ours["max_abs"], cli_json["max_abs"])
        self.assertEqual(cli_json["verdict"], "Agree")
        self.assertEqual(code, 0)

    def test_rwkv7_always_carries_n_heads(self):
        sd = parameters("rwkv7", d_in=8, d_h=8, n_heads=2)
        with self.assertRaisesRegex(pararnn.ContractViolation, "n_heads"):
            pt.dump_case(stand_in("ParaRWKV7", sd), normal_input((1, 8, 8)), os.path.join(scratch(), "r.safetensors"))
        path = os.path.join(scratch(), "rwkv7.safetensors")
        pt.dump_case(stand_in("ParaRWKV7", sd, n_heads=2), normal_input((1, 8, 8)), path)
        self.assertEqual(pararnn.read_case(path)["metadata"]["n_heads"], "2")
        code, report = cli_report(path, "--seed", str(SEED))
        self.assertEqual((code, report["verdict"]), (0, "Agree"))

    def test_cfc_0_17_4_dump_is_completed_and_says_so(self):
        sd = {k: v for k, v in parameters("cfc", d_in=5, d_h=8).items() if not k.startswith("W_b.")}
        cell = stand_in("ParaCfC", sd, gate_mix="input", time_bias_init=-3.0, mix="diag")
        path = os.path.join(scratch(), "cfc_0174.safetensors")
        x = np.abs(normal_input((1, 16, 5)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pt.dump_case(cell, x, path)
        self.assertTrue(any("max_recurrent_norm" in str(w.message) for w in caught))
        code, report = cli_report(path, "--seed", str(SEED))
        self.assertIn("0.17.4", report["cell_version"])
        self.assertEqual(pt.verify(cell, x, seed=SEED).to_dict()["cell_version"], report["cell_version"])

    def test_an_argument_of_another_cell_is_refused_by_name(self):
        cell = stand_in("ParaGRU", parameters("gru", d_in=4, d_h=8), mix="diag")
        with self.assertRaisesRegex(pararnn.ContractViolation, "eps.*ParaGRU"):
            pt.case_metadata(cell, eps=1e-6)
        with self.assertRaisesRegex(pararnn.ContractViolation, "cell.*Linear"):
            pt.case_metadata(stand_in("Linear", {}))

    def test_packed_input_is_dumped_as_int64(self):
        cell = stand_in("ParaGRU", parameters("gru", d_in=4, d_h=8), mix="diag", max_recurrent_norm=0.5)
        path = os.path.join(scratch(), "packed.safetensors")
        pt.dump_case(cell, normal_input((1, 20, 4)), path, cu_seqlens=np.array([0, 7, 20], np.int32))
        self.assertEqual(pararnn.read_case(path)["cu_seqlens"].dtype, np.int64)
        code, report = cli_report(path, "--seed", str(SEED))
        self.assertEqual((code, report["verdict"]), (0, "Agree"))


if __name__ == "__main__":
    unittest.main()
