#!/usr/bin/env python3
"""A chunked external op solver for the CI tests of op cases (issue 56), standard library only.

usage: op_adapter.py CASE OUT [--mode exact|drop-carry|nan|no-final-state|wrong-grad|nan-grad|missing-grad]
                               [--chunk C]

It computes the op of CASE (metadata "op": gla, simple_gla, delta_rule, gated_delta_rule,
dplr_delta_rule, rwkv7, selective_scan, ssd) the way a chunked kernel walks the sequence: chunks of C steps (default
16), the state carried from one chunk to the next, in Python floats (double), written in the
case's dtype. It is written from docs/ops/README.md's equations, independently of the C++ oracle.
  exact           the carry kept: a correct answer (every op case must Agree with it)
  drop-carry      the state restarts from the initial state at every chunk boundary: the bug of a
                  chunked kernel that loses its inter-chunk carry (must be Disagree)
  nan             o[0, T // 2, 0, 0] = NaN (must never Agree)
  no-final-state  final_state left out (must never Agree)
With PARARNN_GRADIENTS=1 (as the fla and mamba adapters) it also writes grad.<input> of
L = sum(o) + sum(final_state) (mamba: sum(out)), or of the case's grad.<output> cotangents, by
central differences of the exact forward (tiny cases only), and the gradient modes write them
with one wrong:
  wrong-grad      grad.k (mamba grad.B) off by 10 % of its largest value at one element (Disagree)
  nan-grad        that element NaN (Disagree)
  missing-grad    grad.k (mamba grad.B) left out (never Agree)
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import safetensors_tool as st  # noqa: E402


def arg(argv, name, default):
    return argv[argv.index(name) + 1] if name in argv else default


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    case, out = argv[1], argv[2]
    mode = arg(argv, "--mode", "exact")
    chunk = int(arg(argv, "--chunk", "16"))
    tensors, meta = st.read(case)
    op = meta["op"]
    forward = mamba if op in ("selective_scan", "ssd") else fla
    answer = forward(tensors, meta, op, mode, chunk)
    if os.environ.get("PARARNN_GRADIENTS") == "1" or mode in GRADIENT_MODES:
        answer.update(gradients(forward, tensors, meta, op, mode, chunk))
    sys.stderr.write(f"op_adapter: {op} mode {mode} chunk {chunk}\n")
    st.write(out, answer, {"producer": "op_adapter.py " + mode})
    return 0


GRADIENT_MODES = ("wrong-grad", "nan-grad", "missing-grad")


def gradients(forward, tensors, meta, op, mode, chunk):
    """grad.<input> of L = sum(o) + sum(final_state) (fla; mamba: sum(out)), or of the case's own
    grad.<output> cotangents, by 4-point central differences of the exact forward above (h =
    1e-3 max(1, |x|): error O(h^4), about 1e-11): independent of the C++ adjoint loop, for tiny
    cases (4 forwards per input element). wrong-grad adds 10 % of the largest |gradient| to one
    element of grad.k (mamba grad.B), nan-grad makes it NaN, missing-grad leaves it out."""
    mamba_op = op in ("selective_scan", "ssd")
    cot = {name[5:]: t[2] for name, t in tensors.items() if name.startswith("grad.")}
    loss_outputs = ("out",) if mamba_op else ("o", "final_state")

    def loss(ts):
        ans = forward(ts, meta, op, "exact", chunk)
        if cot:
            return sum(sum(c * x for c, x in zip(cot[n], ans[n][2])) for n in cot if n in ans)
        return sum(sum(ans[n][2]) for n in loss_outputs if n in ans)

    out = {}
    for name, (dtype, shape, values) in tensors.items():
        if name == "cu_seqlens" or name.startswith("grad."):
            continue
        grad = []
        for i, x in enumerate(values):
            h = 1e-3 * max(1.0, abs(x))

            def at(step):
                changed = list(values)
                changed[i] = x + step
                return loss(dict(tensors, **{name: (dtype, shape, changed)}))
            grad.append((8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h))
        out["grad." + name] = (dtype, shape, grad)
    victim = "grad.B" if mamba_op else "grad.k"
    if mode == "wrong-grad":
        g = out[victim][2]
        g[0] += 0.1 * max(abs(x) for x in g)
    elif mode == "nan-grad":
        out[victim][2][0] = math.nan
    elif mode == "missing-grad":
        del out[victim]
    return out


def fla(tensors, meta, op, mode, chunk):
    qname = "r" if op == "rwkv7" else "q"
    dtype, (B, T, H, K), _ = tensors[qname]
    V = tensors["v"][1][3]
    get = lambda name: tensors[name][2]  # noqa: E731
    default = 1.0 if op == "rwkv7" else K ** -0.5  # fla's chunk_rwkv7 defaults to scale 1
    scale = float(meta["scale"]) if meta.get("scale", "None") not in ("None", "none", "") else default
    l2 = meta.get("use_qk_l2norm_in_kernel", "False") in ("True", "true", "1")
    if "cu_seqlens" in tensors:
        cu = [int(x) for x in get("cu_seqlens")]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    h0 = get("initial_state") if "initial_state" in tensors else None
    o = [0.0] * (B * T * H * V)
    final = [0.0] * (len(seqs) * H * K * V)
    for n, (b, t0, t1) in enumerate(seqs):
        for h in range(H):
            start = [h0[((n * H + h) * K + i) * V + j] if h0 else 0.0 for i in range(K) for j in range(V)]
            S = list(start)
            for t in range(t0, t1):
                if mode == "drop-carry" and (t - t0) % chunk == 0:
                    S = list(start)
                row = (b * T + t) * H + h
                q = get(qname)[row * K:(row + 1) * K]
                k = get("k")[row * K:(row + 1) * K]
                v = get("v")[row * V:(row + 1) * V]
                if l2:
                    q = [x / math.sqrt(sum(y * y for y in q) + 1e-6) for x in q]
                    k = [x / math.sqrt(sum(y * y for y in k) + 1e-6) for x in k]
                if op in ("gla", "simple_gla"):
                    d = [math.exp(x) for x in get("g")[row * K:(row + 1) * K]] if op == "gla" else [math.exp(get("g")[row])] * K
                    S = [d[i] * S[i * V + j] + k[i] * v[j] for i in range(K) for j in range(V)]
                elif op in ("delta_rule", "gated_delta_rule"):
                    beta = get("beta")[row]
                    decay = math.exp(get("g")[row]) if op == "gated_delta_rule" else 1.0
                    S = [decay * x for x in S]
                    err = [v[j] - sum(S[i * V + j] * k[i] for i in range(K)) for j in range(V)]
                    S = [S[i * V + j] + beta * k[i] * err[j] for i in range(K) for j in range(V)]
                else:
                    w = get("w" if op == "rwkv7" else "gk")[row * K:(row + 1) * K]
                    a = get("a")[row * K:(row + 1) * K]
                    bb = get("b")[row * K:(row + 1) * K]
                    u = [sum(a[i] * S[i * V + j] for i in range(K)) for j in range(V)]
                    S = [math.exp(w[i]) * S[i * V + j] + bb[i] * u[j] + k[i] * v[j] for i in range(K) for j in range(V)]
                for j in range(V):
                    o[row * V + j] = sum(scale * q[i] * S[i * V + j] for i in range(K))
            final[(n * H + h) * K * V:(n * H + h + 1) * K * V] = S
    if mode == "nan":
        o[((0 * T + T // 2) * H) * V] = math.nan
    answer = {"o": (dtype, [B, T, H, V], o)}
    if mode != "no-final-state":
        answer["final_state"] = (dtype, [len(seqs), H, K, V], final)
    return answer


def mamba(tensors, meta, op, mode, chunk):
    """selective_scan (u, delta [B, D, L], A [D, N], B, C [B, G, N, L]) and ssd (x [B, L, H, P], dt
    [B, L, H], A [H], B, C [B, L, G, N], initial_states [B, H, P, N]); D, z and the dt bias optional."""
    ss = op == "selective_scan"
    get = lambda name: tensors[name][2] if name in tensors else None  # noqa: E731
    dtype, shape, _ = tensors["u" if ss else "x"]
    if ss:
        Bn, H, T = shape
        P = 1
        G, N = tensors["B"][1][1], tensors["B"][1][2]
    else:
        Bn, T, H, P = shape
        G, N = tensors["B"][1][2], tensors["B"][1][3]
    soft = meta.get("delta_softplus" if ss else "dt_softplus", "False") in ("True", "true", "1")
    bias, D, z, h0 = get("delta_bias" if ss else "dt_bias"), get("D"), get("z"), get("initial_states")
    xs, dts, A, Bm, Cm = get("u" if ss else "x"), get("delta" if ss else "dt"), get("A"), get("B"), get("C")
    if "cu_seqlens" in tensors:  # ssd only: each sequence from zeros
        cu = [int(v) for v in get("cu_seqlens")]
        seqs = [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]
    else:
        seqs = [(b, 0, T) for b in range(Bn)]
    out_v = [0.0] * (Bn * T * H * P)
    final = [0.0] * (len(seqs) * H * P * N)
    for n, (b, t0, t1) in enumerate(seqs):
        for h in range(H):
            g = h // (H // G)
            start = [h0[((n * H + h) * P + j) * N + i] if h0 else 0.0 for j in range(P) for i in range(N)]
            S = list(start)  # [P][N]
            for t in range(t0, t1):
                if mode == "drop-carry" and (t - t0) % chunk == 0:
                    S = list(start)
                at = (b * H + h) * T + t if ss else (b * T + t) * H + h
                dt = dts[at] + (bias[h] if bias else 0.0)
                if soft:
                    dt = dt if dt > 20 else math.log1p(math.exp(dt))
                bc = [((b * G + g) * N + i) * T + t if ss else ((b * T + t) * G + g) * N + i for i in range(N)]
                for j in range(P):
                    xat = at if ss else at * P + j
                    x = xs[xat]
                    y = 0.0
                    for i in range(N):
                        decay = math.exp(dt * (A[h * N + i] if ss else A[h]))
                        S[j * N + i] = decay * S[j * N + i] + dt * x * Bm[bc[i]]
                        y += S[j * N + i] * Cm[bc[i]]
                    y += (D[h] * x) if D else 0.0
                    if z:
                        y *= z[xat] / (1 + math.exp(-z[xat]))
                    out_v[xat] = y
            final[(n * H + h) * P * N:(n * H + h + 1) * P * N] = S
    if mode == "nan":
        out_v[T // 2] = math.nan
    answer = {"out": (dtype, list(shape), out_v)}
    if mode != "no-final-state":
        answer["last_state" if ss else "final_states"] = (dtype, [Bn, H, N] if ss else [len(seqs), H, P, N], final)
    return answer


if __name__ == "__main__":
    sys.exit(main(sys.argv))
