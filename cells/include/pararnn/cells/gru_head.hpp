// ParaGRU, mix='head' (Dreamer-style block-diagonal recurrence): the step of one head and its
// dense d_head x d_head Jacobian, in one pass. A chain is (batch row, head), N = d_head; the
// dense-chain interface is described in hopfield.hpp.
//
// Equations (pararnn-torch ParaGRU head, row vectors, A stored (in, out), clamped only when
// max_recurrent_norm is set): z = σ(h A_z + z_x), r = σ(h A_r + r_x),
// n = tanh((h ⊙ r) A_n + n_x), h' = lerp(h, n, z) = h + z (n − h), and, stored [out][in],
// J = diag(1−z) + diag((n−h) z(1−z)) A_zᵀ + diag(z(1−n²)) A_nᵀ (diag(r) + diag(h r(1−r)) A_rᵀ).
// params = A_z, A_r, A_n of the head (3 n² values); gate blocks z_x, r_x, n_x of the head, each
// n values, `gate_stride` apart (d_h in the solver's W_x layout). Example:
//   GruHeadMath::step(n, A /* A_z|A_r|A_n */, wx + head * n, d_h, h, h_new, J, work);
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct GruHeadMath {
  static constexpr int kGates = 3;            // z, r, n
  static constexpr bool kSquareGates = false;
  PARARNN_HD static int params_size(int n) { return 3 * n * n; }
  PARARNN_HD static int work_size(int n) { return n * n + 3 * n; }
  PARARNN_HD static int vjp_work_size(int n) { return 7 * n; }

  // The gates of one step: z = σ(h A_z + z_x), r = σ(h A_r + r_x), the candidate
  // n = tanh((h ⊙ r) A_n + n_x). The forward of both step and vjp.
  template <class ComputeT>
  PARARNN_HD static void gate_values(int n, const ComputeT* params, const ComputeT* gates, long long gate_stride,
                                     const ComputeT* h_prev, ComputeT* z, ComputeT* r, ComputeT* g) {
    const ComputeT* A_z = params;
    const ComputeT* A_r = params + n * n;
    const ComputeT* A_n = params + 2 * n * n;
    for (int e = 0; e < n; ++e) {
      ComputeT acc_z = ComputeT(0), acc_r = ComputeT(0);
      for (int d = 0; d < n; ++d) {
        acc_z += h_prev[d] * A_z[d * n + e];
        acc_r += h_prev[d] * A_r[d * n + e];
      }
      z[e] = sigmoid(acc_z + gates[e]);
      r[e] = sigmoid(acc_r + gates[gate_stride + e]);
    }
    for (int e = 0; e < n; ++e) {
      ComputeT acc = ComputeT(0);
      for (int d = 0; d < n; ++d) acc += (h_prev[d] * r[d]) * A_n[d * n + e];
      g[e] = tanh_of(acc + gates[2 * gate_stride + e]);
    }
  }

  template <class ComputeT>
  PARARNN_HD static void step(int n, const ComputeT* params, const ComputeT* gates,
                              long long gate_stride, const ComputeT* h_prev, ComputeT* h_new,
                              ComputeT* jac, ComputeT* work) {
    const ComputeT one = ComputeT(1);
    const ComputeT* A_z = params;
    const ComputeT* A_r = params + n * n;
    const ComputeT* A_n = params + 2 * n * n;
    ComputeT* z = work;
    ComputeT* r = work + n;
    ComputeT* g = work + 2 * n;  // the candidate n
    ComputeT* P = work + 3 * n;  // diag(r) + diag(h r(1−r)) A_rᵀ, [d][k]
    gate_values(n, params, gates, gate_stride, h_prev, z, r, g);
    for (int e = 0; e < n; ++e) h_new[e] = h_prev[e] + z[e] * (g[e] - h_prev[e]);
    if (jac == nullptr) return;
    for (int d = 0; d < n; ++d) {
      const ComputeT hr = h_prev[d] * r[d] * (one - r[d]);
      for (int k = 0; k < n; ++k) P[d * n + k] = hr * A_r[k * n + d] + (d == k ? r[d] : ComputeT(0));
    }
    for (int e = 0; e < n; ++e) {
      const ComputeT cz = (g[e] - h_prev[e]) * z[e] * (one - z[e]);
      const ComputeT cn = z[e] * (one - g[e] * g[e]);
      for (int k = 0; k < n; ++k) {
        ComputeT acc = ComputeT(0);
        for (int d = 0; d < n; ++d) acc += A_n[d * n + e] * P[d * n + k];
        jac[e * n + k] = (e == k ? one - z[e] : ComputeT(0)) + cz * A_z[k * n + e] + cn * acc;
      }
    }
  }

  // The reverse of step: z̄ = μ ⊙ (n − h), n̄ = μ ⊙ z, h̄ = μ ⊙ (1 − z) + …; the pre-activations'
  // cotangents p_z = z̄ z(1−z), p_n = n̄ (1−n²), p_r = ((A_n p_n) ⊙ h) r(1−r) are d_gates, and
  // ∂A_z = h p_zᵀ, ∂A_r = h p_rᵀ, ∂A_n = (h ⊙ r) p_nᵀ, h̄ += A_z p_z + A_r p_r + (A_n p_n) ⊙ r.
  template <class ComputeT, class GateGradT>
  PARARNN_HD static void vjp(int n, const ComputeT* params, const ComputeT* gates, long long gate_stride,
                             const ComputeT* h_prev, const ComputeT* mu, ComputeT* d_params, GateGradT* d_gates,
                             ComputeT* d_h_prev, ComputeT* work) {
    const ComputeT one = ComputeT(1);
    const ComputeT* A_z = params;
    const ComputeT* A_r = params + n * n;
    const ComputeT* A_n = params + 2 * n * n;
    ComputeT* r = work;
    ComputeT* p_z = work + n;
    ComputeT* p_r = work + 2 * n;
    ComputeT* p_n = work + 3 * n;
    ComputeT* u_bar = work + 4 * n;  // A_n p_n: the cotangent of h ⊙ r
    ComputeT* z = work + 5 * n;
    ComputeT* g = work + 6 * n;  // the candidate n
    gate_values(n, params, gates, gate_stride, h_prev, z, r, g);
    for (int e = 0; e < n; ++e) {
      p_z[e] = mu[e] * (g[e] - h_prev[e]) * z[e] * (one - z[e]);
      p_n[e] = mu[e] * z[e] * (one - g[e] * g[e]);
    }
    for (int d = 0; d < n; ++d) {
      ComputeT acc = ComputeT(0);
      for (int e = 0; e < n; ++e) acc += A_n[d * n + e] * p_n[e];
      u_bar[d] = acc;
      p_r[d] = acc * h_prev[d] * r[d] * (one - r[d]);
    }
    for (int e = 0; e < n; ++e) {
      d_gates[e] = static_cast<GateGradT>(p_z[e]);
      d_gates[gate_stride + e] = static_cast<GateGradT>(p_r[e]);
      d_gates[2 * gate_stride + e] = static_cast<GateGradT>(p_n[e]);
    }
    for (int d = 0; d < n; ++d)
      for (int e = 0; e < n; ++e) {
        d_params[d * n + e] += h_prev[d] * p_z[e];
        d_params[n * n + d * n + e] += h_prev[d] * p_r[e];
        d_params[2 * n * n + d * n + e] += (h_prev[d] * r[d]) * p_n[e];
      }
    if (d_h_prev == nullptr) return;
    for (int d = 0; d < n; ++d) {
      ComputeT acc = mu[d] * (one - z[d]) + u_bar[d] * r[d];
      for (int e = 0; e < n; ++e) acc += A_z[d * n + e] * p_z[e] + A_r[d * n + e] * p_r[e];
      d_h_prev[d] = acc;
    }
  }
};

}  // namespace pararnn::cells
