// One step of the recurrence for a batch of states on the GPU (decode, T = 1), the input affine
// included: one launch computes, for every (b, c), the gate pre-activations
// wx[g] = bias[g·D + c] + Σ_{k < affine_inputs} weight_t[k][g·D + c] · x[b][k] in the compute type,
// then state'[b][:, c] = CellMath::step(values[:, c], wx, state[b][:, c]) with the production
// cell math, stored in the storage dtype. No cuBLAS call, no W_x x buffer: a decoder step is a
// single kernel node, whatever the batch.
//
// Layout (D = d_h channels, G = CellMath::kGates, S = kSlots, V = kRecurrent + kConstants):
//   weight_t[k][g·D + c]  ComputeT, k < affine_inputs: the transposed input weights of every
//                         affine block at its gate columns; 0 in a column no block fills
//   bias[g·D + c]         ComputeT, 0 where no block fills
//   values[k][c]          ComputeT, k < V: the clamped recurrent values, then the cell's constants
//   state[b][s][c]        StorageT
//   x[b][i]               StorageT, i < d_in; the affines read its first affine_inputs columns
//                         (CfC: all but the last, Δt); the Δt gate (dt_gate >= 0) is
//                         max(x[b][d_in − 1], dt_floor), formed in the kernel
//   out[b][s][c]          StorageT; may be `state` itself (each (b, c) reads its entries first),
//                         otherwise shares no memory with state, x or gates (blocks read a row's
//                         x while others write out: the caller's check, decode.hpp)
//
// Work split (decode.cuh): a block owns 32 channels × Rows batch rows and has Slices warps; the
// warps split the k sum (partial sums reduced in shared memory in a fixed order), x is staged in
// shared memory in chunks of k, and warp r then steps row r. The shape follows the batch: up to
// kDecodeFewBatch rows, 2 rows × 16 slices; up to kDecodeSmallBatch, 4 × 16 (many blocks, short k
// loops: a small batch is bound by the latency of its weight loads); beyond, 16 × 16 (each weight
// load serves more rows, so fewer blocks read the weights from L2; 8 × 16 for f64, whose partial
// sums would not fit in shared memory); x is staged k-major in every class, 256 columns at a
// time in the blocks (one staging and one barrier for d_in ≤ 256), 128 in the cluster. A batch of
// kDecodeClusterBatch (one) row, where the device runs thread-block clusters (sm_90;
// decode_cluster.cuh), spreads the 16 slices over a cluster of 16 one-warp blocks, so its weight
// loads are spread over 16 times as many SMs. pararnn_bench_shapes --only decode measures the
// shapes (H200, GRU d 256 f32, 2026-12-03, evening run: B 1 3.67 µs over 16 ranks against 4.13 for
// 2 × 16; B 8 4.55 at 2 × 16 against 5.41 over a 4-rank cluster and 5.47 at 4 × 16; B 64 best at
// 4 × 16, B 256 at 16 × 16); CHANGELOG.md (2026-12-03) has
// the figures. Every class has 16 slices, so every row's sums run in the same order whatever the
// batch (the chunk changes the staging, not the sums): a step is deterministic, a row's result does not depend on the
// batch size, and a graph replay equals the direct step bit for bit; it differs from a GEMM's
// order by rounding only.
//
// launch_decode_gates takes the step from precomputed gate pre-activations instead of x:
//   gates[b][g·D + c]     ComputeT: W_x x + b of every gate as the solver's W_x x holds them (the
//                         bias included; CfC's Δt column holds Δt, floored at dt_floor here as
//                         the x form does), one thread per (b, c), no sum.
//
// Guarantees: never allocates, never synchronises, so it can be captured in a CUDA graph;
// returns cudaErrorInvalidValue for null required arrays, negative sizes, affine_inputs outside
// [0, d_in] or more than 65535·32 channels, else the launch's error. Example:
//   DecodeArgs<float> a{.weight_t = d_wt, .bias = d_b, .values = d_values, .state = d_s, .x = d_x,
//                       .out = d_s, .batch = 8, .channels = 256, .d_in = 256, .affine_inputs = 256};
//   cudaError_t e = launch_decode_step<cells::GruDiagMath, float>(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class StorageT>
struct DecodeArgs {
  using ComputeT = ComputeOf<StorageT>;
  const ComputeT* weight_t = nullptr;
  const ComputeT* bias = nullptr;
  const ComputeT* values = nullptr;
  const StorageT* state = nullptr;
  const StorageT* x = nullptr;
  StorageT* out = nullptr;
  std::int64_t batch = 0;
  std::int64_t channels = 0;
  std::int64_t d_in = 0;
  std::int64_t affine_inputs = 0;
  int dt_gate = -1;
  double dt_floor = 0.0;
};

template <class StorageT>
struct DecodeGatesArgs {
  using ComputeT = ComputeOf<StorageT>;
  const ComputeT* gates = nullptr;
  const ComputeT* values = nullptr;
  const StorageT* state = nullptr;
  StorageT* out = nullptr;
  std::int64_t batch = 0;
  std::int64_t channels = 0;
  int dt_gate = -1;
  double dt_floor = 0.0;
};

// The largest batches of the decode kernel's two small-batch shapes (see "Work split").
inline constexpr std::int64_t kDecodeFewBatch = 8;
inline constexpr std::int64_t kDecodeSmallBatch = 64;
// The largest batch stepped over a thread-block cluster where the device has them.
inline constexpr std::int64_t kDecodeClusterBatch = 1;

// Instantiated for every per-channel cell math of cells/ (GRU-diag, LSTM, NLRU, sLSTM-diag, CfC
// 'input' and 'diag_h', Titans) × {float, double, __half, __nv_bfloat16}.
template <class CellMath, class StorageT>
cudaError_t launch_decode_step(const DecodeArgs<StorageT>& args, cudaStream_t stream);
// Optional, once per decoder: asks the current device now whether a batch of `batch` rows ×
// `channels` runs over a thread-block cluster (and remembers it), so that launch_decode_step
// makes no device query later, e.g. while a stream is being captured into a graph. A failed
// query means "no cluster" (the block shape, same bits); only cudaGetDevice's error is returned.
template <class CellMath, class StorageT>
cudaError_t prepare_decode_step(std::int64_t batch, std::int64_t channels);
template <class CellMath, class StorageT>
cudaError_t launch_decode_gates(const DecodeGatesArgs<StorageT>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
