// launch_decode_step (kernels/decode.hpp): one thread per (b, c), the production cell math.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/decode.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kDecodeThreads = 128;

template <class CellMath, class StorageT>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(DecodeArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  const int64_t D = a.channels;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.batch * D) return;
  const int64_t b = i / D;
  const int64_t c = i - b * D;
  ComputeT values[V], wx[G], h_prev[S], h_new[S];
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = a.values[k * D + c];
#pragma unroll
  for (int g = 0; g < G; ++g) wx[g] = a.wx[b * G * D + g * D + c];
  if (a.dt_gate >= 0) {
    const ComputeT dt = static_cast<ComputeT>(a.x[b * a.d_in + a.d_in - 1]);
    const ComputeT floor = static_cast<ComputeT>(a.dt_floor);
    wx[a.dt_gate] = dt < floor ? floor : dt;  // std::max(dt, floor), as the host: NaN stays NaN
  }
#pragma unroll
  for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.state[(b * S + s) * D + c]);
  CellMath::step(values, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
  for (int s = 0; s < S; ++s) a.out[(b * S + s) * D + c] = static_cast<StorageT>(h_new[s]);
}

}  // namespace

template <class CellMath, class StorageT>
cudaError_t launch_decode_step(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.channels < 0 || a.d_in < 0) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  if (a.wx == nullptr || a.values == nullptr || a.state == nullptr || a.out == nullptr)
    return cudaErrorInvalidValue;
  if (a.dt_gate >= CellMath::kGates || (a.dt_gate >= 0 && (a.x == nullptr || a.d_in < 1)))
    return cudaErrorInvalidValue;
  const int64_t blocks = (a.batch * a.channels + kDecodeThreads - 1) / kDecodeThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  decode_kernel<CellMath, StorageT><<<static_cast<unsigned>(blocks), kDecodeThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_DECODE_CELL(CELL)                                                   \
  template cudaError_t launch_decode_step<CELL, float>(const DecodeArgs<float>&, cudaStream_t); \
  template cudaError_t launch_decode_step<CELL, double>(const DecodeArgs<double>&, cudaStream_t); \
  template cudaError_t launch_decode_step<CELL, __half>(const DecodeArgs<__half>&, cudaStream_t); \
  template cudaError_t launch_decode_step<CELL, __nv_bfloat16>(const DecodeArgs<__nv_bfloat16>&, \
                                                               cudaStream_t);
#define PARARNN_INSTANTIATE_DECODE_LISTED(kind, Math, label) PARARNN_INSTANTIATE_DECODE_CELL(cells::Math)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_DECODE_LISTED)
#undef PARARNN_INSTANTIATE_DECODE_LISTED
#undef PARARNN_INSTANTIATE_DECODE_CELL

}  // namespace pararnn::kernels
