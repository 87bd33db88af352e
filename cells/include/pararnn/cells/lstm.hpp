// ParaLSTM (CIFG with peepholes, diagonal): the step and its per-channel 2x2 Jacobian.
//
// Slots (c, h). Equations (clamped ã_f, ã_z, ã_o, c̃_f, c̃_o): f = σ(ã_f h + c̃_f c + f_x),
// z = tanh(ã_z h + z_x), c' = f c + (1 − f) z, o = σ(ã_o h + c̃_o c' + o_x) (the output
// peephole reads the new cell), h' = o tanh(c'). W_x packs (f_x, z_x, o_x).
// Jacobian [out][in] over (c, h), with f' = f(1−f), z' = 1 − z², o' = o(1−o), τ = tanh c':
// J_cc = f + (c − z) f' c̃_f; J_ch = (c − z) f' ã_f + (1 − f) z' ã_z;
// J_hc = (τ o' c̃_o + o τ') J_cc; J_hh = τ o' (ã_o + c̃_o J_ch) + o τ' J_ch.
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct LstmMath {
  static constexpr int kSlots = 2;
  static constexpr int kGates = 3;
  static constexpr int kRecurrent = 5;  // a_f, a_z, a_o, c_f, c_o
  static constexpr int kConstants = 0;

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* s_prev,
                              ComputeT* s_new, ComputeT* jac) {
    const ComputeT one = ComputeT(1);
    const ComputeT c = s_prev[0];
    const ComputeT h = s_prev[1];
    const ComputeT a_f = rec[0], a_z = rec[1], a_o = rec[2], c_f = rec[3], c_o = rec[4];
    const ComputeT f = sigmoid(a_f * h + c_f * c + wx[0]);
    const ComputeT z = tanh_of(a_z * h + wx[1]);
    const ComputeT c_new = f * c + (one - f) * z;
    const ComputeT o = sigmoid(a_o * h + c_o * c_new + wx[2]);
    const ComputeT tau = tanh_of(c_new);
    s_new[0] = c_new;
    s_new[1] = o * tau;
    if (jac != nullptr) {
      const ComputeT df = f * (one - f);
      const ComputeT dz = one - z * z;
      const ComputeT d_o = o * (one - o);
      const ComputeT dtau = one - tau * tau;
      const ComputeT j_cc = f + (c - z) * df * c_f;
      const ComputeT j_ch = (c - z) * df * a_f + (one - f) * dz * a_z;
      jac[0] = j_cc;
      jac[1] = j_ch;
      jac[2] = (tau * d_o * c_o + o * dtau) * j_cc;
      jac[3] = tau * d_o * (a_o + c_o * j_ch) + o * dtau * j_ch;
    }
  }

  // Closed-form VJP with cotangents (c̄', h̄'); see GruDiagMath::vjp for the contract.
  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* s_prev,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_s_prev) {
    const ComputeT one = ComputeT(1);
    const ComputeT c = s_prev[0], h = s_prev[1];
    const ComputeT a_f = rec[0], a_z = rec[1], a_o = rec[2], c_f = rec[3], c_o = rec[4];
    const ComputeT f = sigmoid(a_f * h + c_f * c + wx[0]);
    const ComputeT z = tanh_of(a_z * h + wx[1]);
    const ComputeT c_new = f * c + (one - f) * z;
    const ComputeT o = sigmoid(a_o * h + c_o * c_new + wx[2]);
    const ComputeT tau = tanh_of(c_new);
    const ComputeT d_pre_o = cot[1] * tau * o * (one - o);
    const ComputeT d_c_new = cot[0] + cot[1] * o * (one - tau * tau) + d_pre_o * c_o;
    const ComputeT d_pre_f = d_c_new * (c - z) * f * (one - f);
    const ComputeT d_pre_z = d_c_new * (one - f) * (one - z * z);
    d_wx[0] = d_pre_f;
    d_wx[1] = d_pre_z;
    d_wx[2] = d_pre_o;
    d_rec[0] += d_pre_f * h;
    d_rec[1] += d_pre_z * h;
    d_rec[2] += d_pre_o * h;
    d_rec[3] += d_pre_f * c;
    d_rec[4] += d_pre_o * c_new;
    d_s_prev[0] = d_c_new * f + d_pre_f * c_f;
    d_s_prev[1] = d_pre_o * a_o + d_pre_f * a_f + d_pre_z * a_z;
  }
};

}  // namespace pararnn::cells
