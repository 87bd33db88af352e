// launch_decode_step and launch_decode_gates (kernels/decode.hpp): the production block and
// cluster shapes of the decode kernel (decode.cuh, decode_cluster.cuh) and the rule that picks one
// by batch, measured by
// pararnn_bench_shapes (docs/cuda.md records the table), and the step from precomputed gates.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "decode.cuh"
#include "decode_cluster.cuh"
#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/decode.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

// One thread per (b, c): the gates of row b at channel c, the Δt gate floored, the cell's step.
template <class CellMath, class StorageT>
__global__ void __launch_bounds__(128) decode_gates_kernel(DecodeGatesArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  const int64_t D = a.channels;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.batch * D) return;
  const int64_t b = i / D, c = i - b * D;
  ComputeT wx[G], values[V], h_prev[S], h_new[S];
#pragma unroll
  for (int g = 0; g < G; ++g) wx[g] = a.gates[(b * G + g) * D + c];
  if (a.dt_gate >= 0) {
    const ComputeT floor = static_cast<ComputeT>(a.dt_floor);
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (g == a.dt_gate) wx[g] = wx[g] < floor ? floor : wx[g];  // std::max(Δt, floor): NaN stays NaN
  }
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = a.values[k * D + c];
#pragma unroll
  for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.state[(b * S + s) * D + c]);
  CellMath::step(values, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
  for (int s = 0; s < S; ++s) a.out[(b * S + s) * D + c] = static_cast<StorageT>(h_new[s]);
}

}  // namespace

namespace {

// Every block class stages x k-major (DecodeShape's kKMajor: the same FMAs as row-major
// staging, never slower at any measured batch; bench/decode_shapes_h200.json) in chunks of 256
// columns (one x staging and one barrier for d_in ≤ 256: 4–10 % faster than 128 at every batch
// measured, bit for bit; bench/decode_shapes_chunk_h200.json).
constexpr int kChunk = 256;
using Few = detail::DecodeShape<2, 16, true, kChunk>;
using Small = detail::DecodeShape<4, 16, true, kChunk>;
// f64: 16 × 16's partial sums and chunk would need 96 KiB of shared memory (48 KiB static at most).
template <class StorageT>
using Large = std::conditional_t<sizeof(ComputeOf<StorageT>) == 8, detail::DecodeShape<8, 16, true, kChunk>,
                                 detail::DecodeShape<16, 16, true, kChunk>>;
// A batch of one row: the 16 slices over a thread-block cluster of 16 one-warp blocks where the
// device runs one (decode_cluster.cuh): the same sums as the blocks, bit for bit.
using Single = detail::DecodeClusterShape<1, 16, 16>;
// Equal slices: every row's sums run in the same order in every class (a row's sums depend on
// the slices only, not on the rows or the chunk: decode.cuh), so a row's result does not depend
// on the batch (kernels/decode.hpp).
static_assert(Small::kSlices == Large<float>::kSlices && Small::kSlices == Large<double>::kSlices &&
              Few::kSlices == Small::kSlices && Single::kSlices == Small::kSlices);

// Whether a batch of `batch` rows × `channels` steps over a cluster on this device (asked once
// per device and shape, decode_cluster_available).
template <class CellMath, class StorageT>
cudaError_t takes_cluster(std::int64_t batch, std::int64_t channels, bool& cluster) {
  cluster = false;
  if (batch < 1 || batch > kDecodeClusterBatch || channels < 1) return cudaSuccess;
  return detail::decode_cluster_available<CellMath, StorageT, Single>(cluster);
}

}  // namespace

template <class CellMath, class StorageT>
cudaError_t prepare_decode_step(std::int64_t batch, std::int64_t channels) {
  bool cluster = false;
  return takes_cluster<CellMath, StorageT>(batch, channels, cluster);
}

template <class CellMath, class StorageT>
cudaError_t launch_decode_step(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (const cudaError_t e = detail::check_decode_args<CellMath, StorageT>(a); e != cudaSuccess) return e;
  bool cluster = false;
  if (const cudaError_t e = takes_cluster<CellMath, StorageT>(a.batch, a.channels, cluster); e != cudaSuccess)
    return e;
  if (cluster) return detail::run_decode_cluster<CellMath, StorageT, Single>(a, stream);
  if (a.batch <= kDecodeFewBatch) return detail::run_decode_step<CellMath, StorageT, Few>(a, stream);
  if (a.batch <= kDecodeSmallBatch) return detail::run_decode_step<CellMath, StorageT, Small>(a, stream);
  return detail::run_decode_step<CellMath, StorageT, Large<StorageT>>(a, stream);
}

template <class CellMath, class StorageT>
cudaError_t launch_decode_gates(const DecodeGatesArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.channels < 0 || a.dt_gate >= CellMath::kGates) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  if (a.gates == nullptr || a.values == nullptr || a.state == nullptr || a.out == nullptr)
    return cudaErrorInvalidValue;
  if (a.batch > INT64_MAX / a.channels) return cudaErrorInvalidValue;
  const int64_t items = a.batch * a.channels, blocks = (items + 127) / 128;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  decode_gates_kernel<CellMath, StorageT><<<static_cast<unsigned>(blocks), 128, 0, stream>>>(a);
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_DECODE_TYPE(CELL, T)                                               \
  template cudaError_t launch_decode_step<CELL, T>(const DecodeArgs<T>&, cudaStream_t); \
  template cudaError_t prepare_decode_step<CELL, T>(std::int64_t, std::int64_t);        \
  template cudaError_t launch_decode_gates<CELL, T>(const DecodeGatesArgs<T>&, cudaStream_t);
#define PARARNN_INSTANTIATE_DECODE_CELL(CELL)        \
  PARARNN_INSTANTIATE_DECODE_TYPE(CELL, float)         \
  PARARNN_INSTANTIATE_DECODE_TYPE(CELL, double)        \
  PARARNN_INSTANTIATE_DECODE_TYPE(CELL, __half)        \
  PARARNN_INSTANTIATE_DECODE_TYPE(CELL, __nv_bfloat16)
#define PARARNN_INSTANTIATE_DECODE_LISTED(kind, Math, label, min_chains) PARARNN_INSTANTIATE_DECODE_CELL(cells::Math)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_DECODE_LISTED)
#undef PARARNN_INSTANTIATE_DECODE_LISTED
#undef PARARNN_INSTANTIATE_DECODE_CELL
#undef PARARNN_INSTANTIATE_DECODE_TYPE

}  // namespace pararnn::kernels
