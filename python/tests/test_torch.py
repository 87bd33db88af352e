"""pararnn_judge and pararnn_judge.torch with a live torch: torch tensors are viewed (CPU, and CUDA with the
CUDA backend on a GPU), and every pararnn-torch cell is verified in one call with the verdict the
CLI gives on its dumped case. Parts that need pararnn-torch or a GPU skip when those are absent
(PARARNN_REQUIRE_CUDA=1 makes a missing GPU a failure)."""
import importlib.util
import math
import os
import unittest

import torch

import pararnn_judge as judge
import pararnn_judge.torch as pt
from _support import SEED, cli_report, scratch
from test_docs import doc_blocks

REQUIRE_CUDA = os.environ.get("PARARNN_REQUIRE_CUDA") == "1"
HAVE_PARARNN_TORCH = importlib.util.find_spec("pararnn") is not None  # pararnn-torch's import name
HAVE_GPU = torch.cuda.is_available() and judge.cuda_backend_built


def require_gpu(test):
    """Skips `test` without a GPU (or without the CUDA backend in this build), or fails it where
    PARARNN_REQUIRE_CUDA=1 says a GPU run must not skip."""
    if not HAVE_GPU:
        if REQUIRE_CUDA:
            test.fail("PARARNN_REQUIRE_CUDA=1 but no GPU or no CUDA backend in this build")
        test.skipTest("no GPU, or the module was built without the CUDA backend")


def gru():
    return judge.Cell.initialise("gru", d_in=8, d_h=16, dtype="f32", seed=SEED)


class TorchTensorsAreViewed(unittest.TestCase):
    def test_cpu_tensor_pointer_is_the_solvers(self):
        x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED))[:, ::2]
        H = judge.newton_apply(gru(), x)
        seen = judge._last_views()["x"]
        self.assertEqual(seen["data"], x.data_ptr())
        self.assertEqual(tuple(seen["strides"]), tuple(x.stride()))
        self.assertIsInstance(H, torch.Tensor)

    def test_cuda_tensor_is_solved_where_it_lives(self):
        require_gpu(self)
        x = torch.randn(2, 256, 8, generator=torch.Generator().manual_seed(SEED)).cuda()
        report = judge.verify_agreement(gru(), x, seed=SEED)
        seen = judge._last_views()["x"]
        self.assertEqual((seen["data"], seen["device"]), (x.data_ptr(), "cuda"))
        self.assertEqual(report.backend, "cuda")
        self.assertEqual(report.verdict, "Agree", report.failure_message())
        self.assertEqual(report.verdict, judge.verify_agreement(gru(), x.cpu(), seed=SEED).verdict)


    def test_cuda_tensor_gives_a_cuda_trajectory_solved_into_it(self):
        require_gpu(self)
        for dtype in (torch.float32, torch.bfloat16):
            cell = judge.Cell.initialise("gru", d_in=8, d_h=16, dtype="f32" if dtype == torch.float32 else "bf16",
                                         seed=SEED)
            x = torch.randn(2, 300, 8, generator=torch.Generator().manual_seed(SEED)).to(dtype).cuda()
            H = judge.newton_apply(cell, x)
            self.assertTrue(H.is_cuda)
            self.assertEqual((H.dtype, H.device, tuple(H.shape)), (dtype, x.device, (2, 300, 16)))
            seen = judge._last_views()["out"]
            self.assertEqual((seen["data"], seen["device"]), (H.data_ptr(), "cuda"))
            host = judge.newton_apply(cell, x, backend="cuda", out=torch.empty(2, 300, 16, dtype=dtype))
            self.assertTrue(torch.equal(H.cpu(), host))


class TorchTraining(unittest.TestCase):
    """newton_forward / newton_backward on torch tensors: CPU tensors (a leaf that requires grad
    is detached, the results are torch tensors) and, with a GPU, CUDA tensors whose H and ∇x
    are computed into CUDA tensors with the bits of the CUDA backend on host tensors."""

    def test_cpu_tensors_train_and_give_torch_gradients(self):
        x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED)).requires_grad_()
        forward = judge.newton_forward(gru(), x)
        grads = judge.newton_backward(forward, torch.ones_like(forward.H))
        self.assertEqual(judge._last_views()["x"]["data"], x.data_ptr())
        self.assertIsInstance(grads["x"], torch.Tensor)
        self.assertEqual(tuple(grads["x"].shape), tuple(x.shape))
        self.assertTrue(all(isinstance(g, torch.Tensor) for g in grads["parameters"].values()))

    def test_cuda_tensors_train_where_they_live(self):
        require_gpu(self)
        generator = torch.Generator().manual_seed(SEED)
        x = torch.randn(2, 300, 8, generator=generator)
        g = torch.randn(2, 300, 16, generator=generator)
        forward = judge.newton_forward(gru(), x.cuda())
        self.assertTrue(forward.H.is_cuda)
        grads = judge.newton_backward(forward, g.cuda())
        self.assertTrue(grads["x"].is_cuda)
        self.assertEqual(judge._last_views()["grad_x"]["data"], grads["x"].data_ptr())
        host = judge.newton_backward(judge.newton_forward(gru(), x, backend="cuda"), g)
        self.assertTrue(torch.equal(forward.H.cpu(), judge.newton_forward(gru(), x, backend="cuda").H))
        self.assertTrue(torch.equal(grads["x"].cpu(), host["x"]))
        for name, value in host["parameters"].items():
            # The parameter gradients of a CUDA x live on x's device, as an optimizer expects.
            self.assertTrue(grads["parameters"][name].is_cuda, name)
            self.assertEqual(grads["parameters"][name].device, x.cuda().device, name)
            self.assertTrue(torch.equal(grads["parameters"][name].cpu(), value), name)
            self.assertFalse(value.is_cuda, name)


    def test_solves_run_on_torchs_current_stream(self):
        """On a side stream, x is written after the stream sleeps (NaN until then): the solve,
        the forward and the backward run on that stream (C++ ApplyOptions::cuda_stream), after
        the write, with no host wait in between, and give the bits of the same calls on x
        written before."""
        require_gpu(self)
        generator = torch.Generator().manual_seed(SEED)
        x = torch.randn(2, 300, 8, generator=generator).cuda()
        g = torch.randn(2, 300, 16, generator=generator).cuda()
        expected = judge.newton_apply(gru(), x)
        expected_forward = judge.newton_forward(gru(), x)
        expected_grads = judge.newton_backward(expected_forward, g)
        side = torch.cuda.Stream()
        late = torch.full_like(x, float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)  # about 0.1 s of the side stream's time
            late.copy_(x)
            H = judge.newton_apply(gru(), late)
            forward = judge.newton_forward(gru(), late)
            grads = judge.newton_backward(forward, g)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(H, expected))
        self.assertTrue(torch.equal(forward.H, expected_forward.H))
        self.assertTrue(torch.equal(grads["x"], expected_grads["x"]))
        # Named by `stream` (as a CuPy user passes cupy.cuda.get_current_stream().ptr) while torch's
        # current stream is the default one: the same.
        late.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000_000)
            late.copy_(x)
        H_named = judge.newton_apply(gru(), late, stream=side.cuda_stream)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(H_named, expected))


class TorchGradientsAreJudged(unittest.TestCase):
    """compare(..., gradients=) on torch tensors: torch autograd's gradients (of our own solver's
    forward, differentiated by torch through newton_backward's answer) in, the verdict out; and a
    file written by safetensors.torch.save_file read by `pararnn compare --gradients`."""

    def test_torch_gradients_agree_and_one_moved_element_disagrees(self):
        cell = gru()
        x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED))
        forward = judge.newton_forward(cell, x)
        grads = judge.newton_backward(forward, torch.ones_like(forward.H))
        named = {f"grad.{k}": v for k, v in grads["parameters"].items()}
        named["grad.x"] = grads["x"]
        right = judge.compare(cell, x, forward.H, seed=SEED, gradients=named)
        self.assertEqual(right.verdict, "Agree", right.failure_message())
        entry = right.to_dict()["gradients"]["W_x.weight"]
        moved = named["grad.W_x.weight"].clone()
        moved.view(-1)[5] += 10 * (entry["atol"] + entry["rtol"] * moved.abs().max().item())
        wrong = judge.compare(cell, x, forward.H, seed=SEED, gradients={**named, "grad.W_x.weight": moved})
        self.assertEqual(wrong.verdict, "Disagree")

    def test_a_save_file_gradient_file_is_read_by_the_cli(self):
        try:
            from safetensors.torch import save_file
        except ImportError:
            self.skipTest("safetensors is not installed (the numpy-written file of test_external_gradients stands in)")
        import subprocess
        from _support import CLI
        folder = scratch()
        case = os.path.join(folder, "case.safetensors")
        subprocess.run([CLI, "make-case", "--cell", "lstm", "--seed", str(SEED), "--batch", "2", "--time", "32",
                        "--d-in", "4", "--d-h", "8", "--out", case], check=True, capture_output=True)
        read = judge.read_case(case)
        x = torch.from_numpy(read["x"])
        forward = judge.newton_forward(read["cell"], x)
        grads = judge.newton_backward(forward, torch.ones_like(forward.H))
        tensors = {f"grad.{k}": v.contiguous() for k, v in grads["parameters"].items()}
        tensors["grad.x"] = grads["x"].contiguous()
        save_file({"H": forward.H.contiguous()}, os.path.join(folder, "H.safetensors"))
        save_file(tensors, os.path.join(folder, "G.safetensors"))
        done = subprocess.run([CLI, "compare", case, "--trajectory", os.path.join(folder, "H.safetensors"),
                               "--gradients", os.path.join(folder, "G.safetensors")], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)


@unittest.skipUnless(HAVE_PARARNN_TORCH, "pararnn-torch is not installed")
class CompareTrainingJudgesTheLiveModule(unittest.TestCase):
    """pararnn_judge.torch.compare_training: pararnn-torch's own forward and torch autograd of
    sum(grad_H * H), both judged against the oracle in one call."""

    def test_its_forward_and_gradients_agree_on_easy_cases(self):
        import pararnn as P
        generator = torch.Generator().manual_seed(SEED)
        for cell in (P.ParaGRU(input_size=8, hidden_size=16), P.ParaLSTM(input_size=8, hidden_size=16)):
            name = type(cell).__name__
            with self.subTest(cell=name):
                x = torch.randn(2, 64, 8, generator=generator)
                h0 = 0.5 * torch.randn((2,) + tuple(pt.cell_of(cell).state_shape), generator=generator)
                grad_H = torch.randn(2, 64, *pt.cell_of(cell).state_shape, generator=generator)
                report = pt.compare_training(cell, x, h0=h0, grad_H=grad_H, seed=SEED)
                self.assertEqual(report.verdict, "Agree", report.failure_message())
                judged = set(report.to_dict()["gradients"])
                self.assertTrue({"x", "h0"} | {n for n, _ in cell.named_parameters()} <= judged, judged)
                self.assertEqual(report.gradients_missing, [])

    def test_a_fixed_k_of_zero_is_caught(self):
        import pararnn as P
        cell = P.ParaGRU(input_size=8, hidden_size=16)
        x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED))
        report = pt.compare_training(cell, x, config=P.NewtonConfig(max_iters=0, residual_fail=None), seed=SEED)
        self.assertEqual(report.verdict, "Disagree")


def _devices():
    yield "cpu"
    if HAVE_GPU:
        yield "cuda"
    elif REQUIRE_CUDA:
        raise AssertionError("PARARNN_REQUIRE_CUDA=1 but no GPU or no CUDA backend in this build")


@unittest.skipUnless(HAVE_PARARNN_TORCH, "pararnn-torch is not installed")
class TrainingThroughOurSolver(unittest.TestCase):
    """pararnn_judge.torch.newton_apply: H with an autograd node whose backward is our implicit
    adjoint, accumulating into the live module's parameters and into x and h0 on their device."""

    def test_gradcheck_in_f64(self):
        import pararnn as P
        generator = torch.Generator().manual_seed(SEED)
        for make in (lambda: P.ParaGRU(input_size=3, hidden_size=4), lambda: P.ParaLSTM(input_size=3, hidden_size=4)):
            cell = make().double()
            name = type(cell).__name__
            with self.subTest(cell=name):
                x = torch.randn(2, 12, 3, generator=generator, dtype=torch.float64, requires_grad=True)
                shape = (2,) + tuple(pt.cell_of(cell).state_shape)
                h0 = (0.5 * torch.randn(shape, generator=generator, dtype=torch.float64)).requires_grad_()
                parameters = [p for _, p in cell.named_parameters()]
                self.assertTrue(torch.autograd.gradcheck(
                    lambda x, h0, *ps: pt.newton_apply(cell, x, h0=h0), (x, h0, *parameters)))

    def test_the_gradients_are_newton_backwards_and_agree_with_the_oracle(self):
        import pararnn as P
        for device in _devices():
            with self.subTest(device=device):
                generator = torch.Generator().manual_seed(SEED)
                cell = P.ParaGRU(input_size=8, hidden_size=16).to(device)
                x = torch.randn(2, 128, 8, generator=generator).to(device).requires_grad_()
                grad_H = torch.randn(2, 128, 16, generator=generator).to(device)
                H = pt.newton_apply(cell, x)
                self.assertEqual((H.device, H.dtype, H.requires_grad), (x.device, x.dtype, True))
                (H * grad_H).sum().backward()
                judge_cell = pt.cell_of(cell)
                forward = judge.newton_forward(judge_cell, x.detach())
                expected = judge.newton_backward(forward, grad_H)
                self.assertTrue(torch.equal(x.grad, expected["x"]))
                for name, p in cell.named_parameters():
                    self.assertEqual(p.grad.device, p.device, name)
                    self.assertTrue(torch.equal(p.grad, expected["parameters"][name].to(p.device)), name)
                gradients = {f"grad.{n}": p.grad.detach().cpu() for n, p in cell.named_parameters()}
                gradients["grad.x"] = x.grad.detach().cpu()
                report = judge.compare(judge_cell, x.detach().cpu(), H.detach().cpu(), seed=SEED,
                                       gradients=gradients, grad_H=grad_H.cpu())
                self.assertEqual(report.verdict, "Agree", report.failure_message())

    def test_a_training_loop_follows_pararnn_torchs(self):
        import copy
        import pararnn as P
        for device in _devices():
            with self.subTest(device=device):
                generator = torch.Generator().manual_seed(SEED)
                ours = P.ParaGRU(input_size=8, hidden_size=16).to(device)
                theirs, initial = copy.deepcopy(ours), copy.deepcopy(ours)
                x = torch.randn(4, 256, 8, generator=generator).to(device)
                target = torch.randn(4, 16, generator=generator).to(device)
                optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, theirs)]
                for _ in range(4):
                    for module, optimizer, solve in ((ours, optimizers[0], lambda m: pt.newton_apply(m, x)),
                                                     (theirs, optimizers[1],
                                                      lambda m: P.newton_apply(m, x, P.NewtonConfig()))):
                        optimizer.zero_grad()
                        loss = ((solve(module)[:, -1] - target) ** 2).mean()
                        loss.backward()
                        optimizer.step()
                # Our trajectory after our steps, judged against the oracle of pararnn-torch's module
                # after its steps: the two loops took the same steps to within τ.
                H = pt.newton_apply(ours, x).detach()
                report = pt.compare(theirs, x.cpu(), H.cpu(), seed=SEED)
                self.assertEqual(report.verdict, "Agree", report.failure_message())
                moved = [not torch.equal(a, b) for a, b in zip(ours.parameters(), initial.parameters())]
                self.assertTrue(any(moved), "the optimizer did not move the module")  # the loop trained

    def test_a_value_written_behind_autograds_back_is_seen_by_the_next_call(self):
        # live_cell keeps the module's structure and reads its values at every call: a write
        # through .data (which no version counter sees) is not served stale.
        import pararnn as P
        for device in _devices():
            with self.subTest(device=device):
                generator = torch.Generator().manual_seed(SEED)
                cell = P.ParaGRU(input_size=8, hidden_size=16).to(device)
                x = torch.randn(2, 64, 8, generator=generator).to(device)
                before = pt.newton_apply(cell, x).detach()
                with torch.no_grad():
                    next(cell.parameters()).data.mul_(0.5)
                after = pt.newton_apply(cell, x).detach()
                fresh = judge.newton_apply(pt.cell_of(cell), x)
                self.assertFalse(torch.equal(before, after))
                self.assertTrue(torch.equal(after, fresh))

    def test_a_cuda_step_moves_no_bytes_and_waits_no_more_as_T_grows(self):
        # The training step from Python on CUDA tensors, K = 3: the bytes to the device are the
        # same at T and 16T; the bytes to the host, the host reads and the stream waits of the
        # backend (pararnn_judge.cuda_transfers) differ at most by K (a bound from when each
        # iteration read its residual back), and the bytes are fewer than one trajectory's; a
        # fixed K is read back once, so K 6 waits as often as K 3. The counts are printed: they
        # are the step's record (docs/python.md).
        import pararnn as P
        require_gpu(self)
        for dtype in (torch.float32, torch.bfloat16):
            counts = []
            for T in (256, 4096):
                torch.manual_seed(SEED)
                cell = P.ParaGRU(input_size=8, hidden_size=16).to("cuda", dtype)
                x = torch.randn(2, T, 8, device="cuda", dtype=dtype, requires_grad=True)
                pt.newton_apply(cell, x, max_iters=3).float().sum().backward()  # warm
                torch.cuda.synchronize()
                before = judge.cuda_transfers()
                pt.newton_apply(cell, x, max_iters=3).float().sum().backward()
                torch.cuda.synchronize()
                after = judge.cuda_transfers()
                counts.append({k: after[k] - before[k] for k in after})
            # A fixed K is decided on the device and read back once: K 6 waits as often as K 3.
            before = judge.cuda_transfers()
            pt.newton_apply(cell, x, max_iters=6).float().sum().backward()
            torch.cuda.synchronize()
            after = judge.cuda_transfers()
            k6 = {k: after[k] - before[k] for k in after}
            print(f"\n{dtype} step counts at T 256 and 4096 (K 3), T 4096 K 6: {counts} {k6}", flush=True)
            for key in ("host_reads", "stream_syncs"):
                self.assertEqual(k6[key], counts[1][key], (dtype, key, counts, k6))
            K = 3
            self.assertEqual(counts[0]["to_device"], counts[1]["to_device"], dtype)
            for key in ("host_reads", "stream_syncs"):
                self.assertLessEqual(abs(counts[0][key] - counts[1][key]), K, (dtype, key, counts))
            self.assertLessEqual(abs(counts[0]["to_host"] - counts[1]["to_host"]), K * 2 * 8, (dtype, counts))
            self.assertLess(counts[1]["to_device"] + counts[1]["to_host"], 2 * 4096 * 16 * x.element_size())

    def test_a_fixed_k_training_step_captures_into_a_cuda_graph(self):
        # torch.cuda.graph captures newton_apply's training step with a fixed K (the forward and the
        # backward into x.grad and the module's .grad): each replay equals the uncaptured step on
        # what x and the parameters hold then, bit for bit, new x values and an in-place update of
        # the parameters (an optimizer's) included; a NaN in x, which the uncaptured step refuses,
        # makes a replay's H all NaN (the residual gate applied on the device); the default
        # (adaptive) K is refused under capture, naming it (docs/python.md, "CUDA graphs").
        import pararnn as P
        require_gpu(self)
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(SEED)
            cell = P.ParaGRU(input_size=8, hidden_size=16).to("cuda", dtype)
            x = torch.randn(2, 512, 8, device="cuda", dtype=dtype, requires_grad=True)

            def step():
                H = pt.newton_apply(cell, x, max_iters=3)
                H.float().sum().backward()
                return H

            def clear():
                cell.zero_grad(set_to_none=True)
                x.grad = None

            def uncaptured():
                clear()
                H = step()
                torch.cuda.synchronize()
                return [H.detach().clone(), x.grad.clone()] + [p.grad.clone() for p in cell.parameters()]

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up, as torch.cuda.graph asks
                    clear()
                    step()
            torch.cuda.current_stream().wait_stream(side)
            clear()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                H_static = step()
            static = [H_static] + [x.grad] + [p.grad for p in cell.parameters()]

            def replayed():
                graph.replay()
                torch.cuda.synchronize()
                return [t.detach().clone() for t in static]

            def check(when):
                got = replayed()
                want = uncaptured()
                self.assertEqual(len(got), len(want))
                for i, (a, b) in enumerate(zip(got, want)):
                    self.assertTrue(torch.equal(a, b), (dtype, when, i))

            # A captured forward's stats: the outcome stayed on the device.
            forward_stats, judge_cell = [], pt.cell_of(cell)  # cell_of reads the values on the host
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                forward_stats.append(judge.newton_forward(judge_cell, x.detach(), max_iters=3).stats)
            self.assertTrue(forward_stats[0]["outcome_on_device"], forward_stats)
            self.assertTrue(math.isnan(forward_stats[0]["max_residual"]), forward_stats)
            check("x as captured")
            with torch.no_grad():
                x.copy_(torch.randn_like(x))
            check("new x")
            with torch.no_grad():
                for p in cell.parameters():
                    p.mul_(0.75)
            check("parameters updated in place")
            with torch.no_grad():
                x[1, 100, 3] = float("nan")
            with self.assertRaises(judge.NewtonDivergenceError):
                step()
            self.assertTrue(torch.isnan(replayed()[0]).all(), dtype)
            with torch.no_grad():
                x[1, 100, 3] = 0.5
            refused = torch.cuda.CUDAGraph()
            with self.assertRaisesRegex(judge.UnsupportedPath, "captured into a CUDA graph"):
                with torch.cuda.graph(refused):
                    pt.newton_apply(cell, x)
            torch.cuda.synchronize()
            check("after a refused capture")

    def test_a_sync_free_step_waits_for_nothing_and_equals_the_default_step(self):
        # newton_apply(..., max_iters=K, sync_free=True) on CUDA: the training step reads nothing
        # back and never waits (cuda_transfers), its H and gradients equal the default step's bit
        # for bit, a NaN in x gives an all-NaN H instead of NewtonDivergenceError, and an
        # adaptive K is refused naming sync_free.
        import pararnn as P
        require_gpu(self)
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(SEED)
            cell = P.ParaGRU(input_size=8, hidden_size=16).to("cuda", dtype)
            x = torch.randn(2, 1024, 8, device="cuda", dtype=dtype, requires_grad=True)

            def step(**kw):
                cell.zero_grad(set_to_none=True)
                x.grad = None
                H = pt.newton_apply(cell, x, max_iters=3, **kw)
                H.float().sum().backward()
                return [H.detach()] + [x.grad] + [p.grad for p in cell.parameters()]

            want = step()
            torch.cuda.synchronize()
            before = judge.cuda_transfers()
            got = step(sync_free=True)
            after = judge.cuda_transfers()
            torch.cuda.synchronize()
            for key in ("to_host", "host_reads", "stream_syncs"):
                self.assertEqual(after[key] - before[key], 0, (dtype, key, before, after))
            for i, (a, b) in enumerate(zip(got, want)):
                self.assertTrue(torch.equal(a, b), (dtype, i))
            with torch.no_grad():
                x[0, 10, 0] = float("nan")
            self.assertTrue(torch.isnan(step(sync_free=True)[0]).all(), dtype)
            with self.assertRaises(judge.NewtonDivergenceError):
                step()
            with torch.no_grad():
                x[0, 10, 0] = 0.25
            with self.assertRaisesRegex(judge.UnsupportedPath, "sync_free"):
                pt.newton_apply(cell, x, sync_free=True)

    def test_a_cuda_step_reads_the_parameters_where_they_live(self):
        # On CUDA a per-channel cell's parameters are viewed in place (ApplyOptions::parameters):
        # a training step copies no tensor to the host (torch.Tensor.cpu is never called), its
        # H and gradients equal those of a Cell read from the module's values, a value written
        # on the device before the next call is the one solved with, and a parameter changed in
        # place between the forward and the backward is refused by torch (never differentiated
        # at other values).
        import pararnn as P
        from unittest import mock
        require_gpu(self)
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(SEED)
            cell = P.ParaGRU(input_size=8, hidden_size=16).to("cuda", dtype)
            x = torch.randn(2, 512, 8, device="cuda", dtype=dtype)
            self.assertTrue(judge.reads_parameter_views(pt.cell_of(cell)))
            pt.newton_apply(cell, x, max_iters=3)  # the structure read once
            with torch.no_grad():
                for p in cell.parameters():
                    p.mul_(0.9)
            cell.zero_grad()
            with mock.patch.object(torch.Tensor, "cpu", side_effect=AssertionError("a tensor crossed to the host")):
                H = pt.newton_apply(cell, x, max_iters=3)
                H.float().sum().backward()
            reference = pt.cell_of(cell)
            forward = judge.newton_forward(reference, x, max_iters=3)
            self.assertTrue(torch.equal(H, forward.H), dtype)
            grads = judge.newton_backward(forward, torch.ones_like(H, dtype=torch.float32))
            for name, p in cell.named_parameters():
                self.assertTrue(torch.equal(p.grad, grads["parameters"][name]), (dtype, name))
            H = pt.newton_apply(cell, x, max_iters=3)
            with torch.no_grad():
                next(cell.parameters()).add_(1.0)
            with self.assertRaisesRegex(RuntimeError, "modified by an inplace operation"):
                H.float().sum().backward()

    def test_a_cuda_backward_writes_the_parameter_gradients_on_the_device(self):
        # The backward of a CUDA step reduces and rounds every viewed parameter's gradient on the
        # device straight into the tensor autograd returns (ApplyOptions::parameter_gradients):
        # no byte crosses to the host and the host reads nothing, with the clamp's mask computed
        # on the device (weights scaled so that entries are clipped), and the gradients are bit
        # for bit those of the host path (judge.newton_backward without targets).
        import pararnn as P
        require_gpu(self)
        for cls in (P.ParaGRU, P.ParaLSTM):
            for dtype in (torch.float32, torch.bfloat16):
                for scale in (1.0, 6.0):
                    torch.manual_seed(SEED)
                    cell = cls(input_size=8, hidden_size=16).to("cuda", dtype)
                    with torch.no_grad():
                        for p in cell.parameters():
                            p.mul_(scale)
                    x = torch.randn(2, 512, 8, device="cuda", dtype=dtype, requires_grad=True)
                    cell.zero_grad()
                    H = pt.newton_apply(cell, x, max_iters=3)
                    loss = H.float().sum()
                    torch.cuda.synchronize()
                    before = judge.cuda_transfers()
                    loss.backward()
                    torch.cuda.synchronize()
                    after = judge.cuda_transfers()
                    moved = {k: after[k] - before[k] for k in after}
                    label = (cls.__name__, dtype, scale, moved)
                    self.assertEqual(moved["to_host"], 0, label)
                    self.assertEqual(moved["host_reads"], 0, label)
                    reference = pt.cell_of(cell)
                    forward = judge.newton_forward(reference, x.detach(), max_iters=3)
                    grads = judge.newton_backward(forward, torch.ones_like(H, dtype=torch.float32))
                    clipped = 0
                    for name, p in cell.named_parameters():
                        self.assertTrue(torch.equal(p.grad, grads["parameters"][name]), (label, name))
                        clipped += int((p.grad == 0).sum())
                    self.assertTrue(torch.equal(x.grad, grads["x"]), label)
                    if scale > 1:
                        self.assertGreater(clipped, 0, label)  # the mask was exercised

    def test_cuda_memory_comes_from_torchs_caching_allocator(self):
        # After torch's own steps filled its cache, an LSTM f32 K 3 step runs in torch's memory:
        # what the forward keeps for the backward is counted by torch.cuda.memory_allocated(), the
        # backend's own pool takes nothing, and an allocation torch cannot serve is an error that
        # names torch's allocator and the bytes (never a result).
        import pararnn as P
        require_gpu(self)
        judge.cuda_release_cached_memory()
        torch.manual_seed(SEED)
        cell = P.ParaLSTM(input_size=64, hidden_size=256).cuda()
        x = torch.randn(4, 8192, 64, device="cuda", requires_grad=True)
        for _ in range(2):  # torch's own steps: its cache now holds their memory
            P.newton_apply(cell, x, P.NewtonConfig(max_iters=3)).sum().backward()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        H = pt.newton_apply(cell, x, max_iters=3)
        held = torch.cuda.memory_allocated() - base - H.numel() * H.element_size()
        self.assertGreaterEqual(held, H.numel() * 4, "H* (f32) for the backward is in torch's memory")
        H.sum().backward()
        del H
        torch.cuda.synchronize()
        # Without waiting for Python's cycle collector: an H100 run before ctx stopped holding the
        # output H found exactly H, H* and W_x x still allocated here (a reference cycle).
        self.assertLessEqual(torch.cuda.memory_allocated(), base, "everything went back to torch's cache")
        self.assertEqual(judge.cuda_cached_memory(), 0, "the backend's own pool took nothing")
        too_long = torch.zeros(1, 1 << 22, 1, device="cuda")
        huge = judge.Cell.initialise("gru", d_in=1, d_h=4096, dtype="f32", seed=SEED)
        with self.assertRaises(judge.Error) as raised:
            judge.newton_apply(huge, too_long, max_iters=1)
        message = str(raised.exception)
        self.assertIn("torch.cuda.caching_allocator", message)
        self.assertIn("bytes for", message)
        torch.cuda.empty_cache()

    def test_a_process_that_trained_through_torchs_allocator_exits_without_leak_reports(self):
        # The allocator made from torch's cache is a module global of pararnn_judge: without its
        # exit hook the interpreter tore the binding down with it alive, and nanobind printed
        # "leaked 1 instances" (and the types it reaches) at the end of every such process.
        import subprocess
        import sys
        require_gpu(self)
        script = ("import torch, pararnn as P, pararnn_judge.torch as pt\n"
                  "cell = P.ParaGRU(input_size=8, hidden_size=16).cuda()\n"
                  "x = torch.randn(2, 64, 8, device='cuda', requires_grad=True)\n"
                  "pt.newton_apply(cell, x, max_iters=3).sum().backward()\n"
                  "torch.cuda.synchronize()\n"
                  "print('stepped')\n")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("stepped", done.stdout)
        self.assertNotIn("leaked", done.stderr)

    def test_unknown_keywords_are_refused_by_name(self):
        import pararnn as P
        cell = P.ParaGRU(input_size=8, hidden_size=16)
        with self.assertRaises(judge.ContractViolation) as raised:
            pt.newton_apply(cell, torch.randn(1, 8, 8), residual_atol=1e-3)
        self.assertIn("residual_atol", str(raised.exception))


@unittest.skipUnless(HAVE_PARARNN_TORCH, "pararnn-torch is not installed")
class PararnnTorchCellsVerifyInOneCall(unittest.TestCase):
    def cells(self):
        import pararnn as P
        yield P.ParaGRU(input_size=8, hidden_size=16), {}
        yield P.ParaGRU(input_size=8, hidden_size=16, mix="head", n_heads=4), {}
        yield P.ParaLSTM(input_size=8, hidden_size=16), {}
        yield P.ParaSLSTM(input_size=8, hidden_size=16), {}
        yield P.ParaNLRU(input_size=8, hidden_size=16), {}
        yield P.ParaCfC(input_size=8, hidden_size=16), {}
        yield P.ParaTitans(input_size=8, hidden_size=16), {}
        yield P.ParaHopfield(input_size=8, hidden_size=8), {}
        yield P.ParaM2RNN(input_size=8, k_dim=4, v_dim=4), {}
        yield P.ParaRWKV7(input_size=8, hidden_size=16, n_heads=2), {}

    def test_verdict_equals_the_clis_on_the_dumped_case(self):
        folder = scratch()
        devices = ["cpu"] + (["cuda"] if HAVE_GPU else [])
        for cell, args in self.cells():
            name = type(cell).__name__
            for device in devices:
                with self.subTest(cell=name, device=device):
                    cell = cell.to(device)
                    x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED)).to(device)
                    if name == "ParaCfC":
                        x[..., -1] = x[..., -1].abs()  # Δt
                    path = os.path.join(folder, f"{name}_{device}_{getattr(cell, 'mix', 'diag')}.safetensors")
                    pt.dump_case(cell, x, path, **args)
                    code, cli_json = cli_report(path, "--seed", str(SEED))
                    ours = pt.verify(cell, x, seed=SEED, **args)
                    self.assertEqual(ours.verdict, cli_json["verdict"])
                    self.assertEqual(ours.verdict, "Agree", ours.failure_message())
                    self.assertEqual(judge._last_views()["x"]["data"], x.data_ptr())

    def test_compare_judges_the_cells_own_trajectory(self):
        import pararnn as P
        cell = P.ParaGRU(input_size=8, hidden_size=16)
        x = torch.randn(2, 64, 8, generator=torch.Generator().manual_seed(SEED))
        with torch.no_grad():
            H = P.sequential_apply(cell, x)  # pararnn-torch's own loop
        self.assertEqual(pt.compare(cell, x, H, seed=SEED).verdict, "Agree")

    def test_the_torch_quick_start_of_the_docs_runs(self):
        cwd = os.getcwd()
        os.chdir(scratch())
        try:
            for block in doc_blocks(needs_torch=True):
                if "and a GPU" in block.splitlines()[0] and not HAVE_GPU:
                    continue  # the CUDA-graph block runs where the GPU tests run
                exec(compile(block, "docs/python.md", "exec"), {})
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    unittest.main()
