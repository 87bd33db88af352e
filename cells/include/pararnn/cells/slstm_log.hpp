// ParaSLSTM (mix='diag') in log coordinates (NewtonConfig::coords = log, spec §1.4): the Newton
// iterate is (u, ℓ, m, h) = (c / n, ln n, m, h) instead of (c, n, m, h), so the two slots that
// grow with T (c and n) become a bounded ratio and a logarithm. Same parameters and inputs as
// SlstmDiagMath (`rec` = R̃_i, R̃_f, R̃_z, R̃_o, eps; `wx` = the four pre-activations).
//
// The map, with z_g = wx_g + R̃_g h:
//   m' = max(z_f + m, z_i);  a = z_f + m − m' + ℓ;  b = z_i − m';  ℓ' = logaddexp(a, b);
//   γ = exp(b − ℓ');  u' = (1 − γ) u + γ tanh(z_z);  h' = σ(z_o) u' κ,  κ = 1 / (1 + eps e^{−ℓ'}).
// Guarantees: decode(step(encode(s))) is the native step of s (n' = e^a + e^b = f n + i and
// u' n' = f c + i z), eps included: κ = n' / (n' + eps) keeps the native h' = o c' / (n' + eps)
// exactly (pararnn-torch's log solver drops eps; we keep it, so the fixed point is the native
// one). ℓ = −∞ (n = 0, the zero initial state) is exact: logaddexp(−∞, b) = b, γ = 1, and every
// Jacobian entry stays finite. The Jacobian is 4x4 per channel, rows and columns (u, ℓ, m, h),
// row-major [out][in], the layout of every per-channel cell.
//   ComputeT s[4] = {u, l, m, h}, s_new[4], jac[16];
//   SlstmLogMath::step(rec, wx, s, s_new, jac);
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct SlstmLogMath {
  static constexpr int kSlots = 4;
  static constexpr int kGates = 4;
  static constexpr int kRecurrent = 4;  // R rows i, f, z, o
  static constexpr int kConstants = 1;  // eps

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* s, ComputeT* s_new,
                              ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT u = s[0], l = s[1], m = s[2], h = s[3];
    const ComputeT r_i = rec[0], r_f = rec[1], r_z = rec[2], r_o = rec[3], eps = rec[4];
    const ComputeT zi = wx[0] + r_i * h;
    const ComputeT zf = wx[1] + r_f * h;
    const ComputeT z = tanh_of(wx[2] + r_z * h);
    const ComputeT o = sigmoid(wx[3] + r_o * h);
    const ComputeT left = zf + m;
    const ComputeT m_new = left > zi ? left : zi;
    const ComputeT alpha = left > zi ? one : (left == zi ? ComputeT(0.5) : ComputeT(0));
    const ComputeT a = left - m_new + l, b = zi - m_new;
    const ComputeT l_new = logaddexp(a, b);
    // γ = e^b / (e^a + e^b) = σ(b − a) and 1 − γ = σ(a − b), from the difference itself: their
    // rounding is then relative to γ (to 1 − γ), not to ulp(ℓ') as exp(a − ℓ') would give.
    // 1 − γ multiplies u at every step of a forget run, so that difference is the f32 accuracy
    // of the ratio (native c and n share f's rounding, which cancels in c/n). a = −∞: γ = 1.
    const ComputeT keep = sigmoid(a - b), gamma = sigmoid(b - a);  // keep = 1 − γ
    const ComputeT u_new = keep * u + gamma * z;
    const ComputeT kappa = one / (one + eps * exp_of(-l_new));
    s_new[0] = u_new;
    s_new[1] = l_new;
    s_new[2] = m_new;
    s_new[3] = o * u_new * kappa;
    if (jac == nullptr) return;
    const ComputeT beta = one - alpha;
    const ComputeT dm_dh = alpha * r_f + beta * r_i;
    // Gradients (columns u, ℓ, m, h) of a, b, then ℓ' = (1−γ) a + γ b, γ' = γ(1−γ)(b − a).
    const ComputeT da[4] = {0, one, beta, r_f - dm_dh};
    const ComputeT db[4] = {0, 0, -alpha, r_i - dm_dh};
    const ComputeT gk = gamma * keep;
    const ComputeT dz_dh = (one - z * z) * r_z;
    const ComputeT do_dh = o * (one - o) * r_o;
    for (int k = 0; k < 4; ++k) {
      const ComputeT dl = keep * da[k] + gamma * db[k];
      const ComputeT dgamma = gk * (db[k] - da[k]);
      ComputeT du = (z - u) * dgamma;
      if (k == 0) du += keep;
      if (k == 3) du += gamma * dz_dh;
      ComputeT dh = o * kappa * du + o * u_new * kappa * (one - kappa) * dl;
      if (k == 3) dh += do_dh * u_new * kappa;
      jac[0 * 4 + k] = du;
      jac[1 * 4 + k] = dl;
      jac[3 * 4 + k] = dh;
    }
    jac[8] = 0, jac[9] = 0, jac[10] = alpha, jac[11] = dm_dh;
  }

  // Native (c, n, m, h) -> (u, ℓ, m, h). n must be >= 0, and c = 0 where n = 0 (the ratio is
  // undefined otherwise); the caller checks both (solver: ContractViolation on h0). u = 0 and
  // ℓ = −∞ at n = 0.
  template <class ComputeT>
  PARARNN_HD static void encode(const ComputeT* native, ComputeT* log_state) {
    const ComputeT n = native[1];
    log_state[0] = n == ComputeT(0) ? ComputeT(0) : native[0] / n;
    log_state[1] = log_of(n);
    log_state[2] = native[2];
    log_state[3] = native[3];
  }

  // (u, ℓ, m, h) -> native (c, n, m, h): n = e^ℓ, c = u n.
  template <class ComputeT>
  PARARNN_HD static void decode(const ComputeT* log_state, ComputeT* native) {
    const ComputeT n = exp_of(log_state[1]);
    native[0] = log_state[0] * n;
    native[1] = n;
    native[2] = log_state[2];
    native[3] = log_state[3];
  }
};

}  // namespace pararnn::cells
