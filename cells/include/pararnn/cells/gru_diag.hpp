// ParaGRU, mix='diag': the step and its diagonal Jacobian for one channel, in one pass.
//
// Equations (pararnn-torch ParaGRU diag; clamped recurrent vectors ã): z = σ(ã_z h + z_x),
// r = σ(ã_r h + r_x), n = tanh(ã_n (h r) + n_x), h' = (1 − z) h + z n, and
// ∂h'/∂h = (1 − z) + (n − h) z(1−z) ã_z + z (1 − n²) ã_n (r + h r(1−r) ã_r).
// W_x packs (z_x, r_x, n_x). Example:
//   float rec[3] = {a_z, a_r, a_n}, wx[3] = {z_x, r_x, n_x}, h = 0.1f, h_new, j;
//   GruDiagMath::step(rec, wx, &h, &h_new, &j);
#pragma once

#include "pararnn/cells/cell_math.hpp"
#include "pararnn/core/fault.hpp"

namespace pararnn::cells {

struct GruDiagMath {
  static constexpr int kSlots = 1;
  static constexpr int kGates = 3;
  static constexpr int kRecurrent = 3;  // a_z, a_r, a_n (clamped before the call)
  static constexpr int kConstants = 0;

  // `jac` may be null (step only); it receives kSlots x kSlots entries, [out][in].
  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                              ComputeT* h_new, ComputeT* jac) {
    const ComputeT h = h_prev[0];
    const ComputeT z = sigmoid(rec[0] * h + wx[0]);
    const ComputeT r = sigmoid(rec[1] * h + wx[1]);
    const ComputeT n = tanh_of(rec[2] * (h * r) + wx[2]);
    h_new[0] = h + z * (n - h);
    if (jac != nullptr) {
      const ComputeT one = ComputeT(1);
      const ComputeT z_sign = PARARNN_FAULT_POINT("jacobian_sign_flip") ? -one : one;  // off: 1
      jac[0] = (one - z) + z_sign * (n - h) * z * (one - z) * rec[0] +
               z * (one - n * n) * rec[2] * (r + h * r * (one - r) * rec[1]);
    }
  }

  // Closed-form VJP of one step with cotangent `cot` of h': adds into d_rec (per clamped
  // recurrent value), writes d_wx (per gate pre-activation input) and d_h_prev.
  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* h_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_h_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT h = h_prev[0], g = cot[0];
    const ComputeT z = sigmoid(rec[0] * h + wx[0]);
    const ComputeT r = sigmoid(rec[1] * h + wx[1]);
    const ComputeT hr = h * r;
    const ComputeT n = tanh_of(rec[2] * hr + wx[2]);
    const ComputeT d_pre_z = g * (n - h) * z * (one - z);
    const ComputeT d_pre_n = g * z * (one - n * n);
    const ComputeT d_hr = d_pre_n * rec[2];
    const ComputeT d_pre_r = d_hr * h * r * (one - r);
    d_wx[0] = d_pre_z;
    d_wx[1] = d_pre_r;
    d_wx[2] = d_pre_n;
    d_rec[0] += d_pre_z * h;
    d_rec[1] += d_pre_r * h;
    d_rec[2] += d_pre_n * hr;
    d_h_prev[0] = g * (one - z) + d_pre_z * rec[0] + d_pre_r * rec[1] + d_hr * r;
  }
};

}  // namespace pararnn::cells
