// ParaTitans (shallow L = 1 surprise-gradient memory, vector state).
//
// Gates (W_x pack): α_pre, θ_pre, k, v, n_pre. α = σ(α_pre), θ = softplus(θ_pre),
// g = (h k − v) k, h' = (1 − α) h − θ g + ũ tanh(n_pre + r̃ h);
// j = (1 − α) − θ k² + ũ (1 − t²) r̃ with t the tanh term.
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct TitansMath {
  static constexpr int kSlots = 1;
  static constexpr int kGates = 5;
  static constexpr int kRecurrent = 2;  // u, r
  static constexpr int kConstants = 0;

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                              ComputeT* h_new, ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0];
    const ComputeT alpha = sigmoid(wx[0]);
    const ComputeT theta = softplus(wx[1]);
    const ComputeT k = wx[2], v = wx[3];
    const ComputeT g = (h * k - v) * k;
    const ComputeT t = tanh_of(wx[4] + rec[1] * h);
    h_new[0] = (one - alpha) * h - theta * g + rec[0] * t;
    if (jac != nullptr) jac[0] = (one - alpha) - theta * k * k + rec[0] * (one - t * t) * rec[1];
  }

  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_h_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0], gb = cot[0];
    const ComputeT alpha = sigmoid(wx[0]);
    const ComputeT theta = softplus(wx[1]);
    const ComputeT k = wx[2], v = wx[3];
    const ComputeT g = (h * k - v) * k;
    const ComputeT t = tanh_of(wx[4] + rec[1] * h);
    const ComputeT d_g = -gb * theta;
    const ComputeT d_pre_n = gb * rec[0] * (one - t * t);
    d_wx[0] = -gb * h * alpha * (one - alpha);
    d_wx[1] = -gb * g * softplus_derivative(wx[1]);
    d_wx[2] = d_g * (ComputeT(2) * h * k - v);
    d_wx[3] = -d_g * k;
    d_wx[4] = d_pre_n;
    d_rec[0] += gb * t;
    d_rec[1] += d_pre_n * h;
    d_h_prev[0] = gb * (one - alpha) + d_g * k * k + d_pre_n * rec[1];
  }
};

}  // namespace pararnn::cells
