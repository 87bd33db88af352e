// ParaSLSTM, mix='diag' (xLSTM sLSTM): 4 slots (c, n, m, h), the step, its per-channel 4x4
// Jacobian and its closed-form VJP.
//
// pre_g = W_x(x)_g + R̃_g h for g in (i, f, z, o); m' = max(z_f + m, z_i); i = exp(z_i − m');
// f = exp(z_f + m − m'); z = tanh(z_z); o = σ(z_o); n' = f n + i; c' = f c + i z;
// h' = o c' / (n' + eps). Tie convention of the max: α = ∂max/∂left = 1 if left > z_i, 1/2 if
// equal, 0 otherwise; β = 1 − α. `rec` holds R̃_i, R̃_f, R̃_z, R̃_o and then eps (a constant).
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct SlstmDiagMath {
  static constexpr int kSlots = 4;
  static constexpr int kGates = 4;
  static constexpr int kRecurrent = 4;  // R rows i, f, z, o
  static constexpr int kConstants = 1;  // eps

  template <class ComputeT>
  struct Forward {
    ComputeT zi, zf, m_new, alpha, i, f, z, o, n_new, c_new, D;
  };

  template <class ComputeT>
  PARARNN_HD static Forward<ComputeT> forward(const ComputeT* rec, const ComputeT* wx,
                                              const ComputeT* s) {
    Forward<ComputeT> v;
    const ComputeT h = s[3], m = s[2];
    v.zi = wx[0] + rec[0] * h;
    v.zf = wx[1] + rec[1] * h;
    const ComputeT zz = wx[2] + rec[2] * h;
    const ComputeT zo = wx[3] + rec[3] * h;
    const ComputeT left = v.zf + m;
    v.m_new = left > v.zi ? left : v.zi;
    v.alpha = left > v.zi ? ComputeT(1) : (left == v.zi ? ComputeT(0.5) : ComputeT(0));
    v.i = exp_of(v.zi - v.m_new);
    v.f = exp_of(left - v.m_new);
    v.z = tanh_of(zz);
    v.o = sigmoid(zo);
    v.n_new = v.f * s[1] + v.i;
    v.c_new = v.f * s[0] + v.i * v.z;
    v.D = v.n_new + rec[4];
    return v;
  }

  template <class ComputeT>
  PARARNN_HD static void step(const ComputeT* rec, const ComputeT* wx, const ComputeT* s,
                              ComputeT* s_new, ComputeT* jac) {
    const Forward<ComputeT> v = forward(rec, wx, s);
    s_new[0] = v.c_new;
    s_new[1] = v.n_new;
    s_new[2] = v.m_new;
    s_new[3] = v.o * (v.c_new / v.D);
    if (jac == nullptr) return;
    const ComputeT one = ComputeT(1);
    const ComputeT c = s[0], n = s[1];
    const ComputeT alpha = v.alpha, beta = one - v.alpha;
    const ComputeT r_i = rec[0], r_f = rec[1], r_z = rec[2], r_o = rec[3];
    const ComputeT dm_dh = alpha * r_f + beta * r_i;
    const ComputeT di_dh = v.i * (r_i - dm_dh);
    const ComputeT df_dh = v.f * (r_f - dm_dh);
    const ComputeT dz_dh = (one - v.z * v.z) * r_z;
    const ComputeT do_dh = v.o * (one - v.o) * r_o;
    const ComputeT inv = v.o / v.D;
    const ComputeT dn = -v.o * v.c_new / (v.D * v.D);
    const ComputeT du = v.c_new / v.D;
    const ComputeT j_cm = v.f * beta * c - v.i * alpha * v.z;
    const ComputeT j_ch = df_dh * c + di_dh * v.z + v.i * dz_dh;
    const ComputeT j_nm = v.f * beta * n - v.i * alpha;
    const ComputeT j_nh = df_dh * n + di_dh;
    // Rows c', n', m', h'; columns c, n, m, h.
    jac[0] = v.f, jac[1] = 0, jac[2] = j_cm, jac[3] = j_ch;
    jac[4] = 0, jac[5] = v.f, jac[6] = j_nm, jac[7] = j_nh;
    jac[8] = 0, jac[9] = 0, jac[10] = alpha, jac[11] = dm_dh;
    jac[12] = inv * v.f, jac[13] = dn * v.f, jac[14] = inv * j_cm + dn * j_nm;
    jac[15] = inv * j_ch + dn * j_nh + du * do_dh;
  }

  // Cotangents (c̄', n̄', m̄', h̄') -> d_rec (R̃ rows; eps gets none), d_wx (the four
  // pre-activations), d_s_prev.
  template <class ComputeT>
  PARARNN_HD static void vjp(const ComputeT* rec, const ComputeT* wx, const ComputeT* s,
                             const ComputeT* cot, ComputeT* d_rec, ComputeT* d_wx,
                             ComputeT* d_s_prev) {
    const Forward<ComputeT> v = forward(rec, wx, s);
    const ComputeT one = ComputeT(1);
    const ComputeT h = s[3];
    const ComputeT o_bar = cot[3] * v.c_new / v.D;
    const ComputeT c_bar = cot[0] + cot[3] * v.o / v.D;
    const ComputeT n_bar = cot[1] - cot[3] * v.o * v.c_new / (v.D * v.D);
    const ComputeT f_bar = c_bar * s[0] + n_bar * s[1];
    const ComputeT i_bar = c_bar * v.z + n_bar;
    const ComputeT z_bar = c_bar * v.i;
    const ComputeT m_new_bar = cot[2] - i_bar * v.i - f_bar * v.f;
    const ComputeT beta = one - v.alpha;
    const ComputeT d_zi = i_bar * v.i + m_new_bar * beta;
    const ComputeT d_zf = f_bar * v.f + m_new_bar * v.alpha;
    const ComputeT d_zz = z_bar * (one - v.z * v.z);
    const ComputeT d_zo = o_bar * v.o * (one - v.o);
    d_wx[0] = d_zi, d_wx[1] = d_zf, d_wx[2] = d_zz, d_wx[3] = d_zo;
    d_rec[0] += d_zi * h, d_rec[1] += d_zf * h, d_rec[2] += d_zz * h, d_rec[3] += d_zo * h;
    d_s_prev[0] = c_bar * v.f;
    d_s_prev[1] = n_bar * v.f;
    d_s_prev[2] = d_zf;  // m enters only through z_f + m (and the max)
    d_s_prev[3] = d_zi * rec[0] + d_zf * rec[1] + d_zz * rec[2] + d_zo * rec[3];
  }
};

}  // namespace pararnn::cells
