// One step of the recurrence for a batch of states on the GPU (decode, T = 1): one thread per
// (b, c) computes state'[b][:, c] = CellMath::step(values[:, c], wx[b, :, c], state[b][:, c]) with
// the production cell math, in the compute type, and stores it in the storage dtype.
//
// Layout (D = d_h channels, G = CellMath::kGates, S = kSlots, V = kRecurrent + kConstants):
//   wx[b][g·D + c]     ComputeT, W_x x + b; the Δt gate (CfC, dt_gate >= 0) is not read from
//                      here but formed in-kernel as max(x[b][d_in − 1], dt_floor)
//   values[k][c]       ComputeT, k < V: the clamped recurrent values, then the cell's constants
//   state[b][s][c]     StorageT
//   x[b][i]            StorageT, read only for the Δt gate (may be null otherwise)
//   out[b][s][c]       StorageT; may be `state` itself (each thread reads its entries first)
//
// Guarantees: never allocates, never synchronises, so it can be captured in a CUDA graph;
// returns cudaErrorInvalidValue for null required arrays or negative sizes, else the launch's
// error. Example:
//   DecodeArgs<float> a{.wx = d_wx, .values = d_values, .state = d_s, .out = d_s, .batch = 8,
//                       .channels = 256};
//   cudaError_t e = launch_decode_step<cells::GruDiagMath, float>(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class StorageT>
struct DecodeArgs {
  using ComputeT = ComputeOf<StorageT>;
  const ComputeT* wx = nullptr;
  const ComputeT* values = nullptr;
  const StorageT* state = nullptr;
  const StorageT* x = nullptr;
  StorageT* out = nullptr;
  std::int64_t batch = 0;
  std::int64_t channels = 0;
  std::int64_t d_in = 0;
  int dt_gate = -1;
  double dt_floor = 0.0;
};

// Instantiated for every per-channel cell math of cells/ (GRU-diag, LSTM, NLRU, sLSTM-diag, CfC
// 'input' and 'diag_h', Titans) × {float, double, __half, __nv_bfloat16}.
template <class CellMath, class StorageT>
cudaError_t launch_decode_step(const DecodeArgs<StorageT>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
