// The sequential recurrence of dense-chain cells on the GPU (kernels/dense_chain.hpp): one
// thread per chain walks t = 0 .. T−1 with the production math, h_t = DenseMath::step(h_{t−1}),
// h_{t−1} replaced by the head state (h0 row or zeros) at t = 0 and at every head. The state is
// rounded to StorageT after every step and carried in that rounded value, so the result is what
// the CPU dense backend's sequential loop computes (f64, f32, f16, bf16 storage; f32 arithmetic
// for the half types, rounded to nearest even).
//
// Output: element i of chain (b, q) at step t to out[b·batch_stride + q·chain_stride +
// t·time_stride + (offsets ? offsets[q·n + i] : i)] (DenseOutputLayout): the trajectory
// [b][t][slot][d_h] (dense_trajectory_layout: sequential_apply and the Newton fallback) or the
// solver's chain-major [chain][t][n] in the compute type (dense_chain_major_layout).
//
// Picard mode (sLSTM's initial guess, DensePicard, the CPU backend's picard_guess): a first
// pass whose state entering every step has elements [frozen_begin, n) (the hidden slot) set to
// 0 (R h dropped; the other slots run from h0), then `passes` further passes in which those
// elements are frozen to the previous pass's output at t − 1 (h0's at heads) while the others
// run sequentially. Each pass overwrites `out` in place (a thread reads the previous pass's
// value at t before writing t), so the previous pass is read as stored: use it with
// StorageT = ComputeT and the chain-major layout, as the Newton guess does.
//
// Guarantees: never allocates, needs no workspace; returns cudaErrorInvalidValue for negative
// sizes, a null wx, params or out, n outside 1 .. kDenseKernelMaxN, h0 without offsets, or a
// Picard mode with passes < 0 or frozen_begin outside 0 .. n; else the launch's error. Example:
//   DenseSequentialArgs<__half> a{.in = inputs, .out = d_H, .layout = dense_trajectory_layout(inputs)};
//   cudaError_t e = launch_dense_sequential<cells::GruHeadMath, __half>(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/dense_chain.hpp"

namespace pararnn::kernels {

struct DensePicard {
  bool enabled = false;
  std::int64_t passes = 0;        // passes after the zero-hidden pass
  std::int64_t frozen_begin = 0;  // first frozen element of a chain's state (the hidden slot)
};

template <class StorageT>
struct DenseSequentialArgs {
  using ComputeT = ComputeOf<StorageT>;
  DenseChainInputs<ComputeT> in;
  StorageT* out = nullptr;
  DenseOutputLayout layout{};
  DensePicard picard{};
};

// Instantiated for cells::HopfieldMath, GruHeadMath, SlstmHeadMath × {float, double, __half,
// __nv_bfloat16}.
template <class DenseMath, class StorageT>
cudaError_t launch_dense_sequential(const DenseSequentialArgs<StorageT>& args,
                                    cudaStream_t stream);

}  // namespace pararnn::kernels
