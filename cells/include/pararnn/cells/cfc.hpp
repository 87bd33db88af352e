// ParaCfC (v0.17.5 semantics): the closed-form continuous-time cell, gate_mix 'input' (CfcMath)
// and 'diag_h' (CfcDiagHMath), one definition for both.
//
// Gates (the project_wx pack): f_pre, c_x (from W_x on the features), Δt = max(x[-1], 1e-4)
// broadcast, b (from W_b on the features). With q = f_pre ('input') or q = f_pre + ṽ h
// ('diag_h'): a = σ(−(softplus(q)·Δt + b)), n = tanh(c_x + ũ h), h' = a h + (1 − a) n;
// j = a + (1 − a)(1 − n²) ũ, plus, for 'diag_h', a(1 − a)(−Δt) σ(q) ṽ (h − n).
// Recurrent values: ũ ('input'); ũ, ṽ ('diag_h'), both clamped like every recurrent vector.
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

// Δt is clamped from below before use: Δt = max(x[..., -1], kCfcDtFloor); its gradient is zero
// where the floor applies.
inline constexpr double kCfcDtFloor = 1e-4;

// kGateReadsHidden: gate_mix 'diag_h' (the time-constant gate also reads ṽ ⊙ h).
template <bool kGateReadsHidden>
struct CfcMathOf {
  static constexpr int kSlots = 1;
  static constexpr int kGates = 4;                             // f_pre, c_x, Δt, b
  static constexpr int kRecurrent = kGateReadsHidden ? 2 : 1;  // u [, v]
  static constexpr int kConstants = 0;

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                              ComputeT* h_new, ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0];
    const ComputeT q = kGateReadsHidden ? wx[0] + rec[kRecurrent - 1] * h : wx[0];
    const ComputeT a = sigmoid(-(softplus(q) * wx[2] + wx[3]));
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    h_new[0] = a * h + (one - a) * n;
    if (jac == nullptr) return;
    jac[0] = a + (one - a) * (one - n * n) * rec[0];
    if constexpr (kGateReadsHidden)  // ∂a/∂h = a(1 − a)·(−Δt σ(q) ṽ)
      jac[0] += a * (one - a) * (-wx[2]) * softplus_derivative(q) * rec[1] * (h - n);
  }

  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_h_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0], g = cot[0];
    const ComputeT q = kGateReadsHidden ? wx[0] + rec[kRecurrent - 1] * h : wx[0];
    const ComputeT sp = softplus(q);
    const ComputeT a = sigmoid(-(sp * wx[2] + wx[3]));
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    const ComputeT d_s = g * (h - n) * a * (one - a);  // s = −(sp·Δt + b), a = σ(s)
    const ComputeT d_pre_n = g * (one - a) * (one - n * n);
    const ComputeT d_q = -d_s * wx[2] * softplus_derivative(q);
    d_wx[0] = d_q;
    d_wx[1] = d_pre_n;
    d_wx[2] = -d_s * sp;
    d_wx[3] = -d_s;
    d_rec[0] += d_pre_n * h;
    d_h_prev[0] = g * a + d_pre_n * rec[0];
    if constexpr (kGateReadsHidden) {
      d_rec[1] += d_q * h;
      d_h_prev[0] += d_q * rec[1];
    }
  }
};

using CfcMath = CfcMathOf<false>;
using CfcDiagHMath = CfcMathOf<true>;

}  // namespace pararnn::cells
