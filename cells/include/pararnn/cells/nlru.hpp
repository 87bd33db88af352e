// ParaNLRU: a = σ(a_x) (input-only gate), n = tanh(c_x + ũ h), h' = a h + (1 − a) n, with the
// diagonal Jacobian j = a + (1 − a)(1 − n²) ũ. W_x packs (a_x, c_x).
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct NlruMath {
  static constexpr int kSlots = 1;
  static constexpr int kGates = 2;
  static constexpr int kRecurrent = 1;  // u
  static constexpr int kConstants = 0;

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                              ComputeT* h_new, ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0];
    const ComputeT a = sigmoid(wx[0]);
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    h_new[0] = a * h + (one - a) * n;
    if (jac != nullptr) jac[0] = a + (one - a) * (one - n * n) * rec[0];
  }

  // Closed-form VJP; see GruDiagMath::vjp for the contract.
  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_h_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0], g = cot[0];
    const ComputeT a = sigmoid(wx[0]);
    const ComputeT n = tanh_of(wx[1] + rec[0] * h);
    const ComputeT d_pre_n = g * (one - a) * (one - n * n);
    d_wx[0] = g * (h - n) * a * (one - a);
    d_wx[1] = d_pre_n;
    d_rec[0] += d_pre_n * h;
    d_h_prev[0] = g * a + d_pre_n * rec[0];
  }
};

}  // namespace pararnn::cells
