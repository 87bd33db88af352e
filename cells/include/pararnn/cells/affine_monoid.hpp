// The affine monoid of the Newton linear step, for S x S blocks per channel (S = 1: diagonal
// Jacobians; 2: LSTM; 4: sLSTM) and for dense N x N blocks whose N is known only at run time
// (Hopfield, GRU-head: one block per chain). One element is (J, r) acting as δ ↦ J δ + r;
// composition (later ∘ earlier) = (J_l J_e, J_l r_e + r_l); identity (I, 0). Every scan of the
// project (CPU and CUDA) combines elements through `compose_dense` / `apply_dense` (the fixed-S
// `compose` and `apply` are those with n = S), so their arithmetic, and hence their bits on
// exact inputs, are the same. Example (dense, n = 3, J row-major [out][in]):
//   apply_dense(3, J, r, delta_prev, delta_out);  // δ_out = J δ_prev + r
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

// later ∘ earlier on n x n blocks held in caller arrays: out_J = later_J earlier_J,
// out_r = later_J earlier_r + later_r. `out_*` must not alias the inputs.
template <class ComputeT>
PARARNN_HD void compose_dense(int n, const ComputeT* later_J, const ComputeT* later_r,
                              const ComputeT* earlier_J, const ComputeT* earlier_r,
                              ComputeT* out_J, ComputeT* out_r) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      ComputeT acc = ComputeT(0);
      for (int k = 0; k < n; ++k) acc += later_J[i * n + k] * earlier_J[k * n + j];
      out_J[i * n + j] = acc;
    }
    ComputeT acc = later_r[i];
    for (int k = 0; k < n; ++k) acc += later_J[i * n + k] * earlier_r[k];
    out_r[i] = acc;
  }
}

// δ_out = J δ_in + r on an n x n block. δ_out may be r itself (each entry reads only its own r
// before writing it) but must not alias δ_in.
template <class ComputeT>
PARARNN_HD void apply_dense(int n, const ComputeT* J, const ComputeT* r, const ComputeT* delta_in,
                            ComputeT* delta_out) {
  for (int i = 0; i < n; ++i) {
    ComputeT acc = r[i];
    for (int k = 0; k < n; ++k) acc += J[i * n + k] * delta_in[k];
    delta_out[i] = acc;
  }
}

template <int S, class ComputeT>
struct AffineElement {
  ComputeT J[S * S];  // [out][in]
  ComputeT r[S];

  PARARNN_HD static AffineElement identity() {
    AffineElement e{};
    for (int i = 0; i < S; ++i) {
      for (int j = 0; j < S; ++j) e.J[i * S + j] = ComputeT(i == j ? 1 : 0);
      e.r[i] = ComputeT(0);
    }
    return e;
  }
};

// later ∘ earlier.
template <int S, class ComputeT>
PARARNN_HD AffineElement<S, ComputeT> compose(const AffineElement<S, ComputeT>& later,
                                              const AffineElement<S, ComputeT>& earlier) {
  AffineElement<S, ComputeT> out;
  compose_dense(S, later.J, later.r, earlier.J, earlier.r, out.J, out.r);
  return out;
}

// δ_out = J δ_in + r (the element applied to a carried vector).
template <int S, class ComputeT>
PARARNN_HD void apply(const AffineElement<S, ComputeT>& e, const ComputeT* delta_in,
                      ComputeT* delta_out) {
  apply_dense(S, e.J, e.r, delta_in, delta_out);
}

}  // namespace pararnn::cells
