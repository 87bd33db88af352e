// The sequential unroll on the GPU: one thread per chain (b, c) walks t = 0 .. T−1 with the
// production cell math, h_t = CellMath::step(rec[c], wx[b, t, :, c], h_{t−1}). It is the
// solver's fast path when B·d_h fills the GPU, and the twin the Newton kernels are tested against.
//
// Layout (D = d_h channels, G = CellMath::kGates, R = CellMath::kRecurrent, S = kSlots):
//   wx[b][t][g·D + c]      ComputeT, gate pre-activations W_x x + b, gate-major blocks of D
//   recurrent[k][c]        ComputeT, k < R, already clamped (App. C.1)
//   h0[row][s][c]          ComputeT, optional; rows are batch rows, or packed segments when
//                          h0_row is given
//   h0_row[t]              optional int64, read at heads: the h0 row of the segment starting at t
//                          (null: row b)
//   head[t]                optional bytes: 1 where a packed segment starts (t = 0 always is one)
//   H[b][t][s][c]          StorageT output
// At t = 0 and at every head the previous state is h0[h0_row ? h0_row[t] : b] (zeros without
// h0). The state is rounded to StorageT after every step and carried in that rounded value, so
// the result is what a host loop storing into StorageT computes. `recurrent` holds kRecurrent
// clamped rows and then kConstants constant rows (sLSTM's eps).
//
// Guarantees: never allocates, needs no workspace; returns cudaErrorInvalidValue for null
// required arrays or negative sizes, else the launch's error. Example:
//   SequentialArgs<float> a{.wx = d_wx, .recurrent = d_rec, .H = d_H,
//                           .batch = 8, .time = 65536, .channels = 256};
//   cudaError_t e = launch_sequential_apply<cells::GruDiagMath, float>(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class StorageT>
struct SequentialArgs {
  using ComputeT = ComputeOf<StorageT>;
  const ComputeT* wx = nullptr;
  const ComputeT* recurrent = nullptr;
  const ComputeT* h0 = nullptr;
  const std::int64_t* h0_row = nullptr;
  const std::uint8_t* head = nullptr;
  StorageT* H = nullptr;
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
  // sLSTM's Picard guess (CONTRACT §1): the hidden slot (the last, S − 1) entering a step is 0
  // at every step, heads included (zero_hidden: the zero-hidden pass), or, at non-head steps,
  // the previous pass's value frozen_hidden[b][t − 1][S − 1][c] (a Picard pass; [b][t][s][c],
  // ComputeT, must not alias H); the other slots run from h0 at heads and from this pass's own
  // previous step elsewhere. Neither: the plain recurrence.
  const ComputeT* frozen_hidden = nullptr;
  bool zero_hidden = false;
  // Optional: set to 1 (atomicOr) when any state value the loop carries is not finite (the
  // auto rule's sequential strategy reads it for the residual gate); left as it is otherwise.
  unsigned int* non_finite = nullptr;
};

// Instantiated for the cell maths of kHasNewtonKernels (newton_cells.hpp) × {float, double,
// __half, __nv_bfloat16} (half storage: f32 arithmetic, the state rounded to nearest even in the
// storage type after every step, as the host loop storing into Eigen::half / bfloat16 does).
template <class CellMath, class StorageT>
cudaError_t launch_sequential_apply(const SequentialArgs<StorageT>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
