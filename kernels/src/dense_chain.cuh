// Device side of kernels/dense_chain.hpp (nvcc only): the state entering a step and one step of
// a dense chain, written as solver/src/cpu/dense.cpp's prev_state and step_at, and the
// launcher checks the dense kernels share.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/kernels/dense_chain.hpp"

namespace pararnn::kernels::detail {

// Per-thread scratch of every dense math up to kDenseKernelMaxN (Hopfield n² + 2n, GRU head
// n² + 3n, sLSTM head 10 n / 4); launchers refuse a math whose work_size(n) exceeds it.
inline constexpr int kDenseMaxN = static_cast<int>(kDenseKernelMaxN);
inline constexpr int kDenseMaxWork = kDenseMaxN * kDenseMaxN + 3 * kDenseMaxN;

struct DenseChainIndex {
  std::int64_t b = 0, q = 0;
};

__device__ __forceinline__ bool dense_is_head(const std::uint8_t* head, std::int64_t t) {
  return t == 0 || (head != nullptr && head[t] != 0);
}

// The state entering a head step: h0's row gathered through offsets, or zeros.
template <class T>
__device__ __forceinline__ void dense_head_state(const DenseChainInputs<T>& a, DenseChainIndex c,
                                                 std::int64_t t, T* out) {
  const int n = static_cast<int>(a.n);
  if (a.h0 == nullptr) {
    for (int i = 0; i < n; ++i) out[i] = T(0);
    return;
  }
  const std::int64_t row = a.h0_row != nullptr ? a.h0_row[t] : c.b;
  const T* h0 = a.h0 + row * a.state_row;
  const std::int64_t* offsets = a.offsets + c.q * a.n;
  for (int i = 0; i < n; ++i) out[i] = h0[offsets[i]];
}

template <class DenseMath, class T>
__device__ __forceinline__ void dense_step_at(const DenseChainInputs<T>& a, DenseChainIndex c,
                                              std::int64_t t, const T* h_prev, T* h_new, T* jac,
                                              T* work) {
  const int n = static_cast<int>(a.n);
  const T* wx_t = a.wx + (c.b * a.time + t) * a.width;
  const T* gates = DenseMath::kSquareGates ? wx_t : wx_t + c.q * a.slot_width;
  const long long stride = DenseMath::kSquareGates ? static_cast<long long>(a.n * a.n)
                                                   : static_cast<long long>(a.d_h);
  const T* params = a.params + c.q * DenseMath::params_size(n);
  DenseMath::step(n, params, gates, stride, h_prev, h_new, jac, work);
}

// The checks every dense launcher makes on the inputs (sizes already known non-negative and the
// problem non-empty).
template <class DenseMath, class T>
inline bool dense_inputs_valid(const DenseChainInputs<T>& a) {
  if (a.wx == nullptr || a.params == nullptr) return false;
  if (a.n < 1 || a.n > kDenseKernelMaxN || a.chains_per_row < 1) return false;
  if (DenseMath::work_size(static_cast<int>(a.n)) > kDenseMaxWork) return false;
  if (a.h0 != nullptr && a.offsets == nullptr) return false;
  return a.width >= 0 && a.slot_width >= 0 && a.d_h >= 0 && a.state_row >= 0;
}

template <class T>
inline bool dense_sizes_valid(const DenseChainInputs<T>& a) {
  return a.batch >= 0 && a.time >= 0 && a.n >= 0 && a.chains_per_row >= 0;
}

}  // namespace pararnn::kernels::detail
