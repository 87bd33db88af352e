// CfC's Δt gate on the GPU: for every row r of B·T and channel c,
//   wx[r][dt_gate·D + c] = max(x[r][d_in − 1], floor)   (NaN stays NaN, as std::max on the host),
// the gate block the input affine leaves unwritten. x is contiguous (rows × d_in) in the storage
// dtype; wx is (rows × gates·D) in the compute type.
//
// Guarantees: never allocates; returns cudaErrorInvalidValue for null arrays, negative sizes or a
// gate outside [0, gates), else the launch's error. Example:
//   TimeGateArgs<float> a{.x = d_x, .wx = d_wx, .rows = B * T, .d_in = 5, .channels = 64,
//                         .gates = 4, .dt_gate = 2, .floor = 1e-4};
//   cudaError_t e = launch_time_gate(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class StorageT>
struct TimeGateArgs {
  using ComputeT = ComputeOf<StorageT>;
  const StorageT* x = nullptr;
  ComputeT* wx = nullptr;
  std::int64_t rows = 0, d_in = 0, channels = 0;
  int gates = 0, dt_gate = -1;
  double floor = 0.0;
};

// Instantiated for float, double, __half, __nv_bfloat16.
template <class StorageT>
cudaError_t launch_time_gate(const TimeGateArgs<StorageT>& args, cudaStream_t stream);

// The gate's backward: for every row r whose x[r][d_in − 1] >= floor (the floor's derivative is
// 0), dx[r][d_in − 1] += Σ_c d_wx[r][dt_gate·D + c], the sum taken in double in channel order
// and rounded once to ComputeT. x and dx are (rows × d_in), d_wx (rows × gates·D), all in the
// compute type. One thread per row.
template <class ComputeT>
struct TimeGateBackwardArgs {
  const ComputeT* x = nullptr;
  const ComputeT* d_wx = nullptr;
  ComputeT* dx = nullptr;
  std::int64_t rows = 0, d_in = 0, channels = 0;
  int gates = 0, dt_gate = -1;
  double floor = 0.0;
};

// Instantiated for float and double.
template <class ComputeT>
cudaError_t launch_time_gate_backward(const TimeGateBackwardArgs<ComputeT>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
