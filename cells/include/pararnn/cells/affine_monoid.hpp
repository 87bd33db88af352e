// The affine monoid of the Newton linear step, for S x S blocks per channel (S = 1: diagonal
// Jacobians; 2: LSTM; 4: sLSTM). One element is (J, r) acting as δ ↦ J δ + r; composition
// (later ∘ earlier) = (J_l J_e, J_l r_e + r_l); identity (I, 0). Every scan of the project
// (CPU and CUDA) combines elements through `compose` and `apply`, so their arithmetic, and hence
// their bits on exact inputs, are the same.
#pragma once

#include "pararnn/cells/cell_math.hpp"

namespace pararnn::cells {

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
  for (int i = 0; i < S; ++i) {
    for (int j = 0; j < S; ++j) {
      ComputeT acc = ComputeT(0);
      for (int k = 0; k < S; ++k) acc += later.J[i * S + k] * earlier.J[k * S + j];
      out.J[i * S + j] = acc;
    }
    ComputeT acc = later.r[i];
    for (int k = 0; k < S; ++k) acc += later.J[i * S + k] * earlier.r[k];
    out.r[i] = acc;
  }
  return out;
}

// δ_out = J δ_in + r (the element applied to a carried vector).
template <int S, class ComputeT>
PARARNN_HD void apply(const AffineElement<S, ComputeT>& e, const ComputeT* delta_in,
                      ComputeT* delta_out) {
  for (int i = 0; i < S; ++i) {
    ComputeT acc = e.r[i];
    for (int k = 0; k < S; ++k) acc += e.J[i * S + k] * delta_in[k];
    delta_out[i] = acc;
  }
}

}  // namespace pararnn::cells
