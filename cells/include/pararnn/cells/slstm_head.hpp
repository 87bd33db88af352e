// ParaSLSTM with mix='head' (and 'dense', its one-head test oracle): the step of one head and its
// dense (4 w) x (4 w) Jacobian, in one pass. A chain is (batch row, head) with w = d_head
// channels per slot and state (c, n, m, h), N = 4 w values slot-major; the dense-chain interface
// is described in hopfield.hpp.
//
// Equations (pararnn-torch ParaSLSTM; the diagonal form is in slstm_diag.hpp): for gate
// g in (i, f, z, o), pre_g[e] = wx_g[e] + Σ_d h[d] R_g[d][e] with R_g stored (in, out). Then
// m' = max(z_f + m, z_i), i = exp(z_i − m'), f = exp(z_f + m − m'), z = tanh(z_z), o = σ(z_o),
// n' = f n + i, c' = f c + i z, h' = o c' / (n' + eps); the tie convention of the max is
// α = 1 (left > z_i), 1/2 (equal), 0 (otherwise), β = 1 − α. Columns c, n, m of J are diagonal
// blocks; column h is dense through R: ∂pre_g[e]/∂h[d] = R_g[d][e].
// params = R_i, R_f, R_z, R_o of the head (4 w² values, (in, out)) and then eps; gate block g of
// the head starts at gates[g * gate_stride]. Example:
//   SlstmHeadMath::step(4 * w, params, wx + head * w, d_h, s, s_new, J, work);
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct SlstmHeadMath {
  static constexpr int kSlots = 4;              // c, n, m, h
  static constexpr int kGates = 4;              // i, f, z, o
  static constexpr bool kSquareGates = false;
  PARARNN_HD static int params_size(int n) { return 4 * (n / 4) * (n / 4) + 1; }
  PARARNN_HD static int work_size(int n) { return 10 * (n / 4); }
  PARARNN_HD static int vjp_work_size(int n) { return n; }

  // The gates of channel e: pre_g = wx_g[e] + Σ_d h[d] R_g[d][e], m' = max(z_f + m, z_i) with its
  // tie weight α, i = exp(z_i − m'), f = exp(z_f + m − m'), z = tanh(z_z), o = σ(z_o). The forward
  // of both step and vjp.
  template <class ComputeT>
  PARARNN_HD static void channel_gates(int w, const ComputeT* params, const ComputeT* gates, long long gate_stride,
                                       const ComputeT* h, ComputeT m, int e, ComputeT& m_new, ComputeT& alpha,
                                       ComputeT& i, ComputeT& f, ComputeT& z, ComputeT& o) {
    ComputeT pre[4];
    for (int g = 0; g < 4; ++g) {
      const ComputeT* R = params + g * w * w;
      ComputeT acc = gates[g * gate_stride + e];
      for (int d = 0; d < w; ++d) acc += h[d] * R[d * w + e];
      pre[g] = acc;
    }
    const ComputeT left = pre[1] + m;
    m_new = tie_max(left, pre[0]);
    alpha = left > pre[0] ? ComputeT(1) : (left == pre[0] ? ComputeT(0.5) : ComputeT(0));
    i = exp_of(pre[0] - m_new);
    f = exp_of(left - m_new);
    z = tanh_of(pre[2]);
    o = sigmoid(pre[3]);
  }

  template <class ComputeT>
  PARARNN_HD static void step(int n, const ComputeT* params, const ComputeT* gates,
                              long long gate_stride, const ComputeT* s, ComputeT* s_new,
                              ComputeT* jac, ComputeT* work) {
    const int w = n / 4;
    const ComputeT one = ComputeT(1);
    const ComputeT eps = params[4 * w * w];
    const ComputeT* h = s + 3 * w;
    // work: the gates i, f, z, o after their nonlinearity, α, then the per-channel Jacobian
    // coefficients J_cm, J_nm, inv = o/D, dn = −o c'/D², du = c'/D.
    ComputeT* gi = work;
    ComputeT* gf = work + w;
    ComputeT* gz = work + 2 * w;
    ComputeT* go = work + 3 * w;
    ComputeT* alpha = work + 4 * w;
    ComputeT* j_cm = work + 5 * w;
    ComputeT* j_nm = work + 6 * w;
    ComputeT* inv = work + 7 * w;
    ComputeT* dn = work + 8 * w;
    ComputeT* du = work + 9 * w;
    for (int e = 0; e < w; ++e) {
      ComputeT m_new;
      channel_gates(w, params, gates, gate_stride, h, s[2 * w + e], e, m_new, alpha[e], gi[e], gf[e], gz[e], go[e]);
      const ComputeT n_new = gf[e] * s[w + e] + gi[e];
      const ComputeT c_new = gf[e] * s[e] + gi[e] * gz[e];
      const ComputeT D = n_new + eps;
      s_new[e] = c_new;
      s_new[w + e] = n_new;
      s_new[2 * w + e] = m_new;
      s_new[3 * w + e] = go[e] * (c_new / D);
      const ComputeT beta = one - alpha[e];
      j_cm[e] = gf[e] * beta * s[e] - gi[e] * alpha[e] * gz[e];
      j_nm[e] = gf[e] * beta * s[w + e] - gi[e] * alpha[e];
      inv[e] = go[e] / D;
      dn[e] = -go[e] * c_new / (D * D);
      du[e] = c_new / D;
    }
    if (jac == nullptr) return;
    for (int k = 0; k < n * n; ++k) jac[k] = ComputeT(0);
    const auto J = [&](int out_slot, int e, int in_slot, int d) -> ComputeT& {
      return jac[(out_slot * w + e) * n + in_slot * w + d];
    };
    const ComputeT* R_i = params;
    const ComputeT* R_f = params + w * w;
    const ComputeT* R_z = params + 2 * w * w;
    const ComputeT* R_o = params + 3 * w * w;
    for (int e = 0; e < w; ++e) {
      const ComputeT i = gi[e], f = gf[e], z = gz[e], o = go[e], a = alpha[e], beta = one - a;
      const ComputeT c = s[e], nn = s[w + e];
      J(0, e, 0, e) = f;
      J(0, e, 2, e) = j_cm[e];
      J(1, e, 1, e) = f;
      J(1, e, 2, e) = j_nm[e];
      J(2, e, 2, e) = a;
      J(3, e, 0, e) = inv[e] * f;
      J(3, e, 1, e) = dn[e] * f;
      J(3, e, 2, e) = inv[e] * j_cm[e] + dn[e] * j_nm[e];
      for (int d = 0; d < w; ++d) {
        const ComputeT r_i = R_i[d * w + e], r_f = R_f[d * w + e];
        const ComputeT dm_dh = a * r_f + beta * r_i;
        const ComputeT di_dh = i * (r_i - dm_dh);
        const ComputeT df_dh = f * (r_f - dm_dh);
        const ComputeT dz_dh = (one - z * z) * R_z[d * w + e];
        const ComputeT do_dh = o * (one - o) * R_o[d * w + e];
        const ComputeT j_ch = df_dh * c + di_dh * z + i * dz_dh;
        const ComputeT j_nh = df_dh * nn + di_dh;
        J(0, e, 3, d) = j_ch;
        J(1, e, 3, d) = j_nh;
        J(2, e, 3, d) = dm_dh;
        J(3, e, 3, d) = inv[e] * j_ch + dn[e] * j_nh + du[e] * do_dh;
      }
    }
  }

  // The reverse of step, channel by channel: with D = n' + eps, ō = μ_h c'/D,
  // c̄' = μ_c + μ_h o/D, n̄' = μ_n − μ_h o c'/D² (also ēps), f̄ = c̄' c + n̄' n, ī = c̄' z + n̄',
  // z̄ = c̄' i, then m̄' = μ_m − ī i − f̄ f split by the tie convention (α to z_f + m, β to z_i):
  // the pre-activations' cotangents (d_gates) are p_i = ī i + β m̄', p_f = f̄ f + α m̄' (also ∂m),
  // p_z = z̄ (1 − z²), p_o = ō o(1−o); ∂c = c̄' f, ∂n = n̄' f; ∂R_g = h p_gᵀ and ∂h = Σ_g R_g p_g.
  template <class ComputeT, class GateGradT>
  PARARNN_HD static void vjp(int n, const ComputeT* params, const ComputeT* gates, long long gate_stride,
                             const ComputeT* s, const ComputeT* mu, ComputeT* d_params, GateGradT* d_gates,
                             ComputeT* d_s, ComputeT* work) {
    const int w = n / 4;
    const ComputeT one = ComputeT(1);
    const ComputeT eps = params[4 * w * w];
    const ComputeT* h = s + 3 * w;
    ComputeT* p = work;  // p[g * w + e]: the cotangent of pre_g[e]
    ComputeT d_eps = ComputeT(0);
    for (int e = 0; e < w; ++e) {
      const ComputeT c = s[e], nn = s[w + e];
      ComputeT m_new, alpha, i, f, z, o;
      channel_gates(w, params, gates, gate_stride, h, s[2 * w + e], e, m_new, alpha, i, f, z, o);
      const ComputeT beta = one - alpha;
      const ComputeT n_new = f * nn + i, c_new = f * c + i * z, D = n_new + eps;
      const ComputeT mu_c = mu[e], mu_n = mu[w + e], mu_m = mu[2 * w + e], mu_h = mu[3 * w + e];
      const ComputeT o_bar = mu_h * (c_new / D);
      const ComputeT c_bar = mu_c + mu_h * (o / D);
      const ComputeT through_d = -mu_h * o * c_new / (D * D);
      const ComputeT n_bar = mu_n + through_d;
      d_eps += through_d;
      const ComputeT f_bar = c_bar * c + n_bar * nn, i_bar = c_bar * z + n_bar, z_bar = c_bar * i;
      const ComputeT m_bar = mu_m - i_bar * i - f_bar * f;
      const ComputeT p_f = f_bar * f + alpha * m_bar;
      p[e] = i_bar * i + beta * m_bar;
      p[w + e] = p_f;
      p[2 * w + e] = z_bar * (one - z * z);
      p[3 * w + e] = o_bar * o * (one - o);
      for (int g = 0; g < 4; ++g) d_gates[g * gate_stride + e] = static_cast<GateGradT>(p[g * w + e]);
      if (d_s != nullptr) {
        d_s[e] = c_bar * f;
        d_s[w + e] = n_bar * f;
        d_s[2 * w + e] = p_f;
      }
    }
    for (int g = 0; g < 4; ++g)
      for (int d = 0; d < w; ++d)
        for (int e = 0; e < w; ++e) d_params[g * w * w + d * w + e] += h[d] * p[g * w + e];
    d_params[4 * w * w] += d_eps;
    if (d_s == nullptr) return;
    for (int d = 0; d < w; ++d) {
      ComputeT acc = ComputeT(0);
      for (int g = 0; g < 4; ++g)
        for (int e = 0; e < w; ++e) acc += params[g * w * w + d * w + e] * p[g * w + e];
      d_s[3 * w + d] = acc;
    }
  }
};

}  // namespace pararnn::cells
