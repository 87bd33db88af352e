"""fla.ops.gla stand-in (fake_fla/fla/__init__.py): GLA as docs/ops/README.md writes it,
S_t = diag(exp(g_t)) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ (scale · q_t), in f32 with torch autograd;
o in q's dtype, the final state in f32 (fla's conventions). cu_seqlens: each segment from its
initial state."""
import torch


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None):
    B, T, H, K = q.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    bounds = [0, T] if cu_seqlens is None else [int(x) for x in cu_seqlens]
    rows = range(B) if cu_seqlens is None else [0] * (len(bounds) - 1)
    outputs, finals = [], []
    for n, b in enumerate(rows):
        start, end = (0, T) if cu_seqlens is None else (bounds[n], bounds[n + 1])
        S = initial_state[n].float() if initial_state is not None else q.new_zeros(H, K, V, dtype=torch.float32)
        for t in range(start, end):
            S = S * g[b, t].float().exp()[:, :, None] + k[b, t].float()[:, :, None] * v[b, t].float()[:, None, :]
            outputs.append(((q[b, t].float() * scale)[:, :, None] * S).sum(1))
        finals.append(S)
    o = torch.stack(outputs).reshape(B, T, H, V).to(q.dtype)
    return o, (torch.stack(finals) if output_final_state else None)


def fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None, output_final_state=False,
                        cu_seqlens=None):
    return chunk_gla(q, k, v, gk, scale=scale, initial_state=initial_state, output_final_state=output_final_state,
                     cu_seqlens=cu_seqlens)
