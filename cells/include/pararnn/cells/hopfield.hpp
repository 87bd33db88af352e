// ParaHopfield: the modern-Hopfield one-step update and its dense Jacobian for one chain (one
// batch row; N = d_h), in one pass.
//
// A dense chain (also GruHeadMath) is stepped as
//   step(n, params, gates, gate_stride, h_prev[n], h_new[n], jac[n*n] or null, work[work_size(n)])
// where gate block g of the step's input affine starts at gates[g * gate_stride], and its
// vector-Jacobian product (the backward's per-step work) as
//   vjp(n, params, gates, gate_stride, h_prev[n], mu[n], d_params (+=), d_gates (=, same
//       layout as gates), d_h_prev[n] (=, may be null), work[vjp_work_size(n)])
// = μᵀ ∂h'/∂(params, gates, h_prev) by the step's reverse pass: O(n²) for Hopfield and GRU head,
// O(w²) for sLSTM head, where seeding each input in a dual pass costs that per input. Here the two
// blocks are K and V (n x n each, row-major: W_x(x) of width 2 d_h² reshaped to (2, d_h, d_h)),
// params = {β}. Equations (pararnn-torch ParaHopfield): a = softmax(β K h), h' = V a,
// ∂h'/∂h = V (diag(a) − a aᵀ)(β K), stored [out][in]. The softmax subtracts the largest logit
// first (the same value in exact arithmetic, no overflow). Example:
//   float beta = 0.5f, work[HopfieldMath::work_size(4)], h_new[4], J[16];
//   HopfieldMath::step(4, &beta, kv /* K then V */, 16, h, h_new, J, work);
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct HopfieldMath {
  static constexpr int kGates = 2;              // K, V
  static constexpr bool kSquareGates = true;    // each gate block is n x n, not n
  static constexpr int kParams = 1;             // β
  PARARNN_HD static int params_size(int /*n*/) { return kParams; }
  PARARNN_HD static int work_size(int n) { return n * n + 2 * n; }
  PARARNN_HD static int vjp_work_size(int n) { return 4 * n; }

  // a = softmax(β K h), subtracting the largest logit first; K h into `kh` when it is given.
  // The forward of both step and vjp.
  template <class ComputeT>
  PARARNN_HD static void attention(int n, ComputeT beta, const ComputeT* K, const ComputeT* h, ComputeT* a,
                                   ComputeT* kh) {
    ComputeT top = ComputeT(0);
    for (int i = 0; i < n; ++i) {
      ComputeT acc = ComputeT(0);
      for (int j = 0; j < n; ++j) acc += K[i * n + j] * h[j];
      if (kh != nullptr) kh[i] = acc;
      a[i] = beta * acc;
      if (i == 0 || a[i] > top) top = a[i];
    }
    ComputeT total = ComputeT(0);
    for (int i = 0; i < n; ++i) {
      a[i] = exp_of(a[i] - top);
      total += a[i];
    }
    for (int i = 0; i < n; ++i) a[i] = a[i] / total;
  }

  template <class ComputeT>
  PARARNN_HD static void step(int n, const ComputeT* params, const ComputeT* gates,
                              long long gate_stride, const ComputeT* h_prev, ComputeT* h_new,
                              ComputeT* jac, ComputeT* work) {
    const ComputeT beta = params[0];
    const ComputeT* K = gates;
    const ComputeT* V = gates + gate_stride;
    ComputeT* a = work;          // logits, then the softmax
    ComputeT* k_bar = work + n;  // Σ_l a_l K[l, :]
    ComputeT* M = work + 2 * n;  // (diag(a) − a aᵀ) β K
    attention(n, beta, K, h_prev, a, static_cast<ComputeT*>(nullptr));
    for (int i = 0; i < n; ++i) {
      ComputeT acc = ComputeT(0);
      for (int j = 0; j < n; ++j) acc += V[i * n + j] * a[j];
      h_new[i] = acc;
    }
    if (jac == nullptr) return;
    for (int k = 0; k < n; ++k) {
      ComputeT acc = ComputeT(0);
      for (int l = 0; l < n; ++l) acc += a[l] * K[l * n + k];
      k_bar[k] = acc;
    }
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k) M[j * n + k] = beta * a[j] * (K[j * n + k] - k_bar[k]);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) {
        ComputeT acc = ComputeT(0);
        for (int j = 0; j < n; ++j) acc += V[i * n + j] * M[j * n + k];
        jac[i * n + k] = acc;
      }
  }

  // With ℓ = β K h, a = softmax(ℓ), h' = V a: ∂V = μ aᵀ, ā = Vᵀ μ, ℓ̄ = a ⊙ (ā − aᵀā),
  // ∂K = β ℓ̄ hᵀ, ∂β = ℓ̄ᵀ (K h), ∂h = β Kᵀ ℓ̄.
  template <class ComputeT, class GateGradT>
  PARARNN_HD static void vjp(int n, const ComputeT* params, const ComputeT* gates, long long gate_stride,
                             const ComputeT* h_prev, const ComputeT* mu, ComputeT* d_params, GateGradT* d_gates,
                             ComputeT* d_h_prev, ComputeT* work) {
    const ComputeT beta = params[0];
    const ComputeT* K = gates;
    const ComputeT* V = gates + gate_stride;
    ComputeT* kh = work;          // K h
    ComputeT* a = work + n;       // the softmax
    ComputeT* a_bar = work + 2 * n;
    ComputeT* l_bar = work + 3 * n;
    attention(n, beta, K, h_prev, a, kh);
    ComputeT dot = ComputeT(0);
    for (int j = 0; j < n; ++j) {
      ComputeT acc = ComputeT(0);
      for (int i = 0; i < n; ++i) acc += V[i * n + j] * mu[i];
      a_bar[j] = acc;
      dot += a[j] * acc;
    }
    ComputeT d_beta = ComputeT(0);
    for (int i = 0; i < n; ++i) {
      l_bar[i] = a[i] * (a_bar[i] - dot);
      d_beta += l_bar[i] * kh[i];
      for (int j = 0; j < n; ++j) {
        d_gates[gate_stride + i * n + j] = static_cast<GateGradT>(mu[i] * a[j]);
        d_gates[i * n + j] = static_cast<GateGradT>(beta * l_bar[i] * h_prev[j]);
      }
    }
    d_params[0] += d_beta;
    if (d_h_prev == nullptr) return;
    for (int j = 0; j < n; ++j) {
      ComputeT acc = ComputeT(0);
      for (int i = 0; i < n; ++i) acc += K[i * n + j] * l_bar[i];
      d_h_prev[j] = beta * acc;
    }
  }
};

}  // namespace pararnn::cells
