// ParaM2RNN (matrix-state M²RNN core): the step of one chain (one batch row, state H ∈ R^{K×V},
// rows K, columns V, flattened row-major), and its Jacobian as a map J[Δ] with its adjoint
// Jᵀ[μ], never materialised (K·V x K·V would be O(K²V²) per step; the map costs O(K·V²)).
//
// Equations (pararnn-torch ParaM2RNN, spec §1.9, cells §9): raw = W_x x + b of width K + V + 1,
// k = raw[0:K], v = raw[K:K+V], f = σ(raw[K+V]) (one scalar per step);
//   S = H W + k vᵀ,  Z = tanh(S),  H′ = f H + (1 − f) Z,
//   J[Δ] = f Δ + G ⊙ (Δ W),   Jᵀ[μ] = f μ + (G ⊙ μ) Wᵀ,   G = (1 − f)(1 − Z²),
// with W (V, V) right-multiplied and never clamped. `step` returns G (the "gain", K·V values)
// when asked, so a Newton iteration stores G and f per step, not a Jacobian.
//
// Guarantees: host and device (PARARNN_HD), scalar-generic; `apply_jacobian` and
// `apply_jacobian_transpose` are exact adjoints of each other for the same (W, f, G) (the same
// sums, transposed). Example:
//   float h_new[K * V], gain[K * V];
//   M2rnnMath::step(K, V, W, raw_t, h_prev, h_new, gain);
//   M2rnnMath::apply_jacobian(K, V, W, M2rnnMath::forget(K, V, raw_t), gain, delta, out);
// `vjp` is the step's closed-form vector-Jacobian product (the backward's): with A = H W + k vᵀ
// and dA = (1 − f)(1 − Z²) ⊙ μ, d f_logit = f(1 − f) Σ μ ⊙ (H − Z), dk = dA v, dv = dAᵀ k,
// dW += Hᵀ dA, d H = f μ + dA Wᵀ (= Jᵀ[μ]).
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

struct M2rnnMath {
  // Width of the gate inputs raw = W_x x + b: k, v, f_logit.
  PARARNN_HD static int gate_width(int K, int V) { return K + V + 1; }

  // f = σ(f_logit), the step's forget gate.
  template <class ComputeT>
  PARARNN_HD static ComputeT forget(int K, int V, const ComputeT* raw) {
    return sigmoid(raw[K + V]);
  }

  // Entry (i, e) of H′ = f H + (1 − f) tanh(H W + k vᵀ) given f; `gain` (nullable) receives
  // G(i, e) = (1 − f)(1 − Z²). The one definition `step` and the GPU kernels (one thread per
  // entry) share.
  template <class ComputeT>
  PARARNN_HD static ComputeT step_entry(int K, int V, const ComputeT* W, const ComputeT* raw, ComputeT f,
                                        const ComputeT* h_prev, int i, int e, ComputeT* gain) {
    const ComputeT one = ComputeT(1);
    const ComputeT* h_row = h_prev + i * V;
    ComputeT s = raw[i] * raw[K + e];  // k_i v_e
    for (int j = 0; j < V; ++j) s += h_row[j] * W[j * V + e];
    const ComputeT z = tanh_of(s);
    if (gain != nullptr) *gain = (one - f) * (one - z * z);
    return f * h_row[e] + (one - f) * z;
  }

  // H′ = f H + (1 − f) tanh(H W + k vᵀ); `gain` (nullable) receives G = (1 − f)(1 − Z²).
  // h_prev and h_new must not overlap.
  template <class ComputeT>
  PARARNN_HD static void step(int K, int V, const ComputeT* W, const ComputeT* raw,
                              const ComputeT* h_prev, ComputeT* h_new, ComputeT* gain) {
    const ComputeT f = forget(K, V, raw);
    for (int i = 0; i < K; ++i)
      for (int e = 0; e < V; ++e)
        h_new[i * V + e] = step_entry(K, V, W, raw, f, h_prev, i, e, gain != nullptr ? gain + i * V + e : nullptr);
  }

  // Entry (i, e) of J[Δ] = f Δ + G ⊙ (Δ W) (shared by `apply_jacobian` and the GPU walk).
  template <class ComputeT>
  PARARNN_HD static ComputeT jacobian_entry(int V, const ComputeT* W, ComputeT f, ComputeT gain,
                                            const ComputeT* delta, int i, int e) {
    const ComputeT* d_row = delta + i * V;
    ComputeT dw = ComputeT(0);
    for (int j = 0; j < V; ++j) dw += d_row[j] * W[j * V + e];
    return f * d_row[e] + gain * dw;
  }

  // out = J[Δ] = f Δ + G ⊙ (Δ W). delta and out must not overlap.
  template <class ComputeT>
  PARARNN_HD static void apply_jacobian(int K, int V, const ComputeT* W, ComputeT f,
                                        const ComputeT* gain, const ComputeT* delta, ComputeT* out) {
    for (int i = 0; i < K; ++i)
      for (int e = 0; e < V; ++e) out[i * V + e] = jacobian_entry(V, W, f, gain[i * V + e], delta, i, e);
  }

  // Entry (i, j) of Jᵀ[μ] = f μ + (G ⊙ μ) Wᵀ from μ(i, j) and row i of G ⊙ μ (shared by
  // `apply_jacobian_transpose` and the GPU adjoint walk, which keeps G ⊙ μ in shared memory).
  template <class ComputeT>
  PARARNN_HD static ComputeT jacobian_transpose_entry(int V, const ComputeT* W, ComputeT f, ComputeT mu_ij,
                                                      const ComputeT* gain_mu_row, int j) {
    ComputeT acc = ComputeT(0);
    for (int e = 0; e < V; ++e) acc += gain_mu_row[e] * W[j * V + e];
    return f * mu_ij + acc;
  }

  // out = Jᵀ[μ] = f μ + (G ⊙ μ) Wᵀ; `gain_mu` is V scratch values. mu and out must not overlap.
  template <class ComputeT>
  PARARNN_HD static void apply_jacobian_transpose(int K, int V, const ComputeT* W, ComputeT f,
                                                  const ComputeT* gain, const ComputeT* mu,
                                                  ComputeT* out, ComputeT* gain_mu) {
    for (int i = 0; i < K; ++i) {
      for (int e = 0; e < V; ++e) gain_mu[e] = gain[i * V + e] * mu[i * V + e];
      for (int j = 0; j < V; ++j) out[i * V + j] = jacobian_transpose_entry(V, W, f, mu[i * V + j], gain_mu, j);
    }
  }

  // The VJP of one step at (h_prev, raw) for the cotangent μ of H′: d_raw (K + V + 1 values:
  // dk, dv, d f_logit), dW (V·V, accumulated), d_prev = Jᵀ[μ] (skipped when null); `dA` is K·V
  // scratch.
  template <class ComputeT>
  PARARNN_HD static void vjp(int K, int V, const ComputeT* W, const ComputeT* raw, const ComputeT* h_prev,
                             const ComputeT* mu, ComputeT* d_raw, ComputeT* dW, ComputeT* d_prev, ComputeT* dA) {
    const ComputeT one = ComputeT(1);
    const ComputeT f = forget(K, V, raw);
    ComputeT df = ComputeT(0);
    for (int i = 0; i < K; ++i)
      for (int e = 0; e < V; ++e) {
        ComputeT s = raw[i] * raw[K + e];
        for (int j = 0; j < V; ++j) s += h_prev[i * V + j] * W[j * V + e];
        const ComputeT z = tanh_of(s);
        const ComputeT m = mu[i * V + e];
        dA[i * V + e] = (one - f) * (one - z * z) * m;
        df += m * (h_prev[i * V + e] - z);
      }
    d_raw[K + V] = df * f * (one - f);
    for (int i = 0; i < K; ++i) {
      ComputeT acc = ComputeT(0);
      for (int e = 0; e < V; ++e) acc += dA[i * V + e] * raw[K + e];
      d_raw[i] = acc;
    }
    for (int e = 0; e < V; ++e) {
      ComputeT acc = ComputeT(0);
      for (int i = 0; i < K; ++i) acc += dA[i * V + e] * raw[i];
      d_raw[K + e] = acc;
    }
    for (int j = 0; j < V; ++j)
      for (int e = 0; e < V; ++e) {
        ComputeT acc = ComputeT(0);
        for (int i = 0; i < K; ++i) acc += h_prev[i * V + j] * dA[i * V + e];
        dW[j * V + e] += acc;
      }
    if (d_prev == nullptr) return;
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < V; ++j) {
        ComputeT acc = ComputeT(0);
        for (int e = 0; e < V; ++e) acc += dA[i * V + e] * W[j * V + e];
        d_prev[i * V + j] = f * mu[i * V + j] + acc;
      }
  }
};

}  // namespace pararnn::cells
