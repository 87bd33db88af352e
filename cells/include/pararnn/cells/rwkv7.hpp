// ParaRWKV7 (RWKV-7 "Goose" delta rule): the per-head gates, the factorized step, and the
// (G, U) element of its linear recurrence, for one head of width d (host and device).
//
// The state of a head is S (d x d, row-major; rows i index the value dimension, columns j the
// key dimension). Gate block g of the step's input W_x x_t + b (width 6·H·d, gate-major, then
// head, then d: raw[g·H·d + head·d + j]) starts at raw[g * gate_stride] for this head:
//   w = σ(raw0), a = σ(raw1), κ̂ = raw2 / max(‖raw2‖₂, 1e-6), v = raw3, k = raw4, r = raw5.
// Step (pararnn-torch ParaRWKV7, factorized):  S′ = S ⊙ w_col − (S κ̂)(a ⊙ κ̂)ᵀ + v kᵀ
// Linear form:  S′ = S G + U,  G = diag(w) − κ̂ (a ⊙ κ̂)ᵀ,  U = v kᵀ.
// Each row s of S is a row vector with s′ = s G + u, i.e. the column form s′ᵀ = Gᵀ sᵀ + uᵀ:
// an affine element (J = Gᵀ, r = uᵀ) of the project's one monoid (affine_monoid.hpp), the same J
// for the d rows of a head. `transition` writes that J ([out][in], J[j][l] = G[l][j]).
// Readout: y = S r (y_i = Σ_j S[i, j] r_j).
// VJP of one step at (raw, S_prev) for the cotangent μ of S′ (the backward of training, both
// backends): dw = Σ_i μ ⊙ S_prev, d(a⊙κ̂) = −μᵀ(S_prev κ̂), dκ̂ = −S_prevᵀ(μ (a⊙κ̂)) + a ⊙ d(a⊙κ̂),
// dv = μ k, dk = μᵀ v, through σ and the normalisation max(‖raw2‖, eps) to the raw inputs, and
// dS_prev = μ ⊙ w_col − (μ (a⊙κ̂)) κ̂ᵀ.
// Guarantees: `gates` reads only the five blocks the step needs (r is read by `readout`);
// `step` is the sequential twin of the (G, U) scan (the same map in exact arithmetic); `vjp`
// writes the five blocks' cotangents (never r's) and is the exact derivative of `step` (the
// norm's floor branch included).
// Example (d = 4, one head):
//   float g[Rwkv7Math::gates_size(4)], S1[16];
//   Rwkv7Math::gates(4, raw, /*gate_stride=*/H * 4, g);
//   Rwkv7Math::step(4, g, S0, S1);
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct Rwkv7Math {
  static constexpr int kGates = 6;                // w, a, κ, v, k, r (W_x pack order)
  static constexpr int kReceptanceGate = 5;       // r: the readout's block
  static constexpr double kNormalizeEps = 1e-6;   // F.normalize(raw2, dim=-1, eps=1e-6)
  // Layout of the gates buffer: [w | κ̂ | a⊙κ̂ | v | k], d values each.
  PARARNN_HD static int gates_size(int d) { return 5 * d; }

  template <class ComputeT>
  PARARNN_HD static void gates(int d, const ComputeT* raw, long long gate_stride, ComputeT* out) {
    ComputeT* w = out;
    ComputeT* kappa = out + d;
    ComputeT* a_kappa = out + 2 * d;
    ComputeT* v = out + 3 * d;
    ComputeT* k = out + 4 * d;
    ComputeT norm_sq = ComputeT(0);
    for (int j = 0; j < d; ++j) norm_sq += raw[2 * gate_stride + j] * raw[2 * gate_stride + j];
    const ComputeT norm = ::sqrt(norm_sq);
    const ComputeT eps = ComputeT(kNormalizeEps);
    const ComputeT denominator = norm < eps ? eps : norm;  // max(‖raw2‖, eps); NaN stays NaN
    for (int j = 0; j < d; ++j) {
      w[j] = sigmoid(raw[j]);
      kappa[j] = raw[2 * gate_stride + j] / denominator;
      a_kappa[j] = sigmoid(raw[gate_stride + j]) * kappa[j];
      v[j] = raw[3 * gate_stride + j];
      k[j] = raw[4 * gate_stride + j];
    }
  }

  // Row i of the step (the rows of S are independent given the gates):
  // s_new = s ⊙ w − (s·κ̂)(a ⊙ κ̂) + v_i k. s_new must not alias s.
  template <class ComputeT>
  PARARNN_HD static void step_row(int d, const ComputeT* g, int i, const ComputeT* s, ComputeT* s_new) {
    const ComputeT* w = g;
    const ComputeT* kappa = g + d;
    const ComputeT* a_kappa = g + 2 * d;
    const ComputeT* v = g + 3 * d;
    const ComputeT* k = g + 4 * d;
    ComputeT s_kappa = ComputeT(0);
    for (int l = 0; l < d; ++l) s_kappa += s[l] * kappa[l];
    for (int j = 0; j < d; ++j) s_new[j] = s[j] * w[j] - s_kappa * a_kappa[j] + v[i] * k[j];
  }

  // S_new = S ⊙ w_col − (S κ̂)(a ⊙ κ̂)ᵀ + v kᵀ. S_new must not alias S.
  template <class ComputeT>
  PARARNN_HD static void step(int d, const ComputeT* g, const ComputeT* S, ComputeT* S_new) {
    for (int i = 0; i < d; ++i) step_row(d, g, i, S + i * d, S_new + i * d);
  }

  // J = Gᵀ ([out][in], d x d): J[j][l] = G[l][j] = w_j δ_lj − κ̂_l (a⊙κ̂)_j.
  template <class ComputeT>
  PARARNN_HD static void transition(int d, const ComputeT* g, ComputeT* J) {
    const ComputeT* w = g;
    const ComputeT* kappa = g + d;
    const ComputeT* a_kappa = g + 2 * d;
    for (int j = 0; j < d; ++j)
      for (int l = 0; l < d; ++l) J[j * d + l] = (j == l ? w[j] : ComputeT(0)) - a_kappa[j] * kappa[l];
  }

  // Row i of U = v kᵀ (d contiguous values).
  template <class ComputeT>
  PARARNN_HD static void drive_row(int d, const ComputeT* g, int i, ComputeT* u_row) {
    const ComputeT* v = g + 3 * d;
    const ComputeT* k = g + 4 * d;
    for (int j = 0; j < d; ++j) u_row[j] = v[i] * k[j];
  }

  // Scratch of vjp: the gates and five d-vectors.
  PARARNN_HD static int vjp_work_size(int d) { return 10 * d; }

  // d_raw[g · d_raw_stride + j] for the blocks w, a, κ, v, k (g = 0 .. 4), and dS_prev (d x d)
  // when d_prev is non-null, from raw (as `gates` reads it), S_prev and μ (d x d, row-major).
  template <class ComputeT>
  PARARNN_HD static void vjp(int d, const ComputeT* raw, long long gate_stride, const ComputeT* prev,
                             const ComputeT* mu, ComputeT* d_raw, long long d_raw_stride, ComputeT* d_prev,
                             ComputeT* work) {
    ComputeT* g = work;
    ComputeT* sk = work + 5 * d;      // (S κ̂)_i
    ComputeT* mak = work + 6 * d;     // (μ (a⊙κ̂))_i
    ComputeT* dw = work + 7 * d;
    ComputeT* dak = work + 8 * d;
    ComputeT* dkappa = work + 9 * d;
    gates(d, raw, gate_stride, g);
    const ComputeT* w = g;
    const ComputeT* kappa = g + d;
    const ComputeT* ak = g + 2 * d;
    const ComputeT* v = g + 3 * d;
    const ComputeT* k = g + 4 * d;
    for (int i = 0; i < d; ++i) {
      ComputeT acc_s = ComputeT(0), acc_m = ComputeT(0);
      for (int l = 0; l < d; ++l) {
        acc_s += prev[i * d + l] * kappa[l];
        acc_m += mu[i * d + l] * ak[l];
      }
      sk[i] = acc_s;
      mak[i] = acc_m;
    }
    for (int j = 0; j < d; ++j) {
      ComputeT acc_w = ComputeT(0), acc_ak = ComputeT(0), acc_kappa = ComputeT(0), acc_k = ComputeT(0);
      for (int i = 0; i < d; ++i) {
        const ComputeT m = mu[i * d + j];
        acc_w += m * prev[i * d + j];
        acc_ak -= m * sk[i];
        acc_kappa -= prev[i * d + j] * mak[i];
        acc_k += m * v[i];
      }
      dw[j] = acc_w;
      dak[j] = acc_ak;
      dkappa[j] = acc_kappa;
      d_raw[4 * d_raw_stride + j] = acc_k;  // dk
      ComputeT acc_v = ComputeT(0);
      for (int l = 0; l < d; ++l) acc_v += mu[j * d + l] * k[l];
      d_raw[3 * d_raw_stride + j] = acc_v;  // dv_j (row j of μ against k)
    }
    ComputeT norm_sq = ComputeT(0);
    for (int j = 0; j < d; ++j) norm_sq += raw[2 * gate_stride + j] * raw[2 * gate_stride + j];
    const ComputeT norm = ::sqrt(norm_sq);
    const bool floored = norm < ComputeT(kNormalizeEps);
    const ComputeT denominator = floored ? ComputeT(kNormalizeEps) : norm;
    ComputeT kappa_dot = ComputeT(0);
    for (int j = 0; j < d; ++j) {
      const ComputeT wj = w[j], aj = sigmoid(raw[gate_stride + j]);
      d_raw[j] = dw[j] * wj * (ComputeT(1) - wj);
      d_raw[d_raw_stride + j] = dak[j] * kappa[j] * aj * (ComputeT(1) - aj);
      dkappa[j] += dak[j] * aj;
      kappa_dot += kappa[j] * dkappa[j];
    }
    for (int j = 0; j < d; ++j)
      d_raw[2 * d_raw_stride + j] = floored ? dkappa[j] / denominator : (dkappa[j] - kappa[j] * kappa_dot) / denominator;
    if (d_prev != nullptr)
      for (int i = 0; i < d; ++i)
        for (int l = 0; l < d; ++l) d_prev[i * d + l] = mu[i * d + l] * w[l] - mak[i] * kappa[l];
  }

  // y = S r for one head; r is the receptance block of the raw gate inputs (raw5, unsquashed).
  template <class ComputeT>
  PARARNN_HD static void readout(int d, const ComputeT* S, const ComputeT* r, ComputeT* y) {
    for (int i = 0; i < d; ++i) {
      ComputeT acc = ComputeT(0);
      for (int j = 0; j < d; ++j) acc += S[i * d + j] * r[j];
      y[i] = acc;
    }
  }
};

}  // namespace pararnn::cells
