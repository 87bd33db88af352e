# A torch user's training loop through pararnn_judge.torch.newton_apply on CUDA (issue 43), beside
# pararnn-torch's newton_apply on a deep copy of the same ParaGRU (B 16, T 2048, d_in 64, d_h 256),
# six SGD steps each, in f32 and bf16: the loss of every step, each step's wall time (the first
# includes each library's warm-up), the device and dtype of the parameters' gradients, and (f32)
# our trajectory after our steps judged against the oracle of pararnn-torch's module after its.
# Run on the GPU machine (docs/python.md, "On the GPU machine"), writing $OUT/torch_train.json:
#   PYTHONPATH=/tmp/site:build-gpu/python LD_LIBRARY_PATH=build-gpu/lib python3 bench/peers/torch_training.py
import copy, json, os, sys, time
import torch
import pararnn as P
import pararnn_judge as judge
import pararnn_judge.torch as pt

out = {}
for dtype in (torch.float32, torch.bfloat16):
    torch.manual_seed(1)
    ours = P.ParaGRU(input_size=64, hidden_size=256).to("cuda", dtype)
    theirs = copy.deepcopy(ours)
    x = torch.randn(16, 2048, 64, device="cuda", dtype=dtype)
    target = torch.randn(16, 256, device="cuda", dtype=dtype)
    rows = []
    for module, solve, name in ((ours, lambda m: pt.newton_apply(m, x), "pararnn_judge.torch"),
                                (theirs, lambda m: P.newton_apply(m, x, P.NewtonConfig()), "pararnn-torch")):
        opt = torch.optim.SGD(module.parameters(), lr=0.05)
        losses, times = [], []
        for step in range(6):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            opt.zero_grad()
            loss = ((solve(module)[:, -1].float() - target.float()) ** 2).mean()
            loss.backward()
            opt.step()
            torch.cuda.synchronize(); times.append(1000 * (time.perf_counter() - t0))
            losses.append(loss.item())
        devices = sorted({str(p.grad.device) for p in module.parameters()})
        dtypes = sorted({str(p.grad.dtype) for p in module.parameters()})
        rows.append({"solver": name, "losses": losses, "step_ms": times, "grad_devices": devices, "grad_dtypes": dtypes})
    H = pt.newton_apply(ours, x).detach()
    report = pt.compare(theirs, x.cpu(), H.cpu(), seed=1) if dtype == torch.float32 else None
    out[str(dtype)] = {"shape": [16, 2048, 64, 256], "rows": rows,
                       "after_training_ours_vs_pararnn_torch": None if report is None else {"verdict": report.verdict, "max_abs": report.max_abs, "atol": report.atol}}
    print(json.dumps(out[str(dtype)]), flush=True)
json.dump(out, open(os.path.join(os.environ["OUT"], "torch_train.json"), "w"), indent=1)
