// ParaCfC (v0.17.5 semantics, gate_mix='input'): the closed-form continuous-time cell.
//
// Gates (the project_wx pack): f_pre, c_x (from W_x on the features), Δt = max(x[-1], 1e-4)
// broadcast, b (from W_b on the features). a = σ(−(softplus(f_pre)·Δt + b)),
// n = tanh(c_x + ũ h), h' = a h + (1 − a) n; j = a + (1 − a)(1 − n²) ũ.
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

// Δt is clamped from below before use: Δt = max(x[..., -1], kCfcDtFloor); its gradient is zero
// where the floor applies.
inline constexpr double kCfcDtFloor = 1e-4;

struct CfcMath {
  static constexpr int kSlots = 1;
  static constexpr int kGates = 4;      // f_pre, c_x, Δt, b
  static constexpr int kRecurrent = 1;  // u
  static constexpr int kConstants = 0;

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                              ComputeT* h_new, ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0];
    const ComputeT a = sigmoid(-(softplus(wx[0]) * wx[2] + wx[3]));
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    h_new[0] = a * h + (one - a) * n;
    if (jac != nullptr) jac[0] = a + (one - a) * (one - n * n) * rec[0];
  }

  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_h_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0], g = cot[0];
    const ComputeT sp = softplus(wx[0]);
    const ComputeT a = sigmoid(-(sp * wx[2] + wx[3]));
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    const ComputeT d_s = g * (h - n) * a * (one - a);  // s = −(sp·Δt + b), a = σ(s)
    const ComputeT d_pre_n = g * (one - a) * (one - n * n);
    d_wx[0] = -d_s * wx[2] * softplus_derivative(wx[0]);
    d_wx[1] = d_pre_n;
    d_wx[2] = -d_s * sp;
    d_wx[3] = -d_s;
    d_rec[0] += d_pre_n * h;
    d_h_prev[0] = g * a + d_pre_n * rec[0];
  }
};

}  // namespace pararnn::cells
