// launch_decode_step (kernels/decode.hpp): the input affine and the production cell math in one
// kernel. Block (32 channels, kDecodeRows warps): warp w sums k ≡ w (mod kDecodeRows) of every
// row of the block's batch tile, the partial sums meet in shared memory, then warp w steps row w.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/decode.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kDecodeRows = 8;    // batch rows of a block, and its warps (k slices)
constexpr int kDecodeChunk = 128;  // x columns staged in shared memory at a time

template <class CellMath, class StorageT>
__global__ void __launch_bounds__(32 * kDecodeRows) decode_kernel(DecodeArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  __shared__ ComputeT xs[kDecodeRows][kDecodeChunk];
  __shared__ ComputeT partial[kDecodeRows][kDecodeRows][32];  // [k slice][row][lane]

  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const int64_t D = a.channels, width = G * D;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * 32 + lane;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kDecodeRows;
  const bool channel = c < D;

  // acc[g][r]: this warp's k slice of row b0 + r's gate g.
  ComputeT acc[G][kDecodeRows];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < kDecodeRows; ++r) acc[g][r] = ComputeT(0);
  for (int64_t k0 = 0; k0 < a.affine_inputs; k0 += kDecodeChunk) {
    const int n = static_cast<int>(a.affine_inputs - k0 < kDecodeChunk ? a.affine_inputs - k0 : kDecodeChunk);
    __syncthreads();  // the previous chunk's reads are done
    for (int i = warp * 32 + lane; i < kDecodeRows * kDecodeChunk; i += 32 * kDecodeRows) {
      const int r = i / kDecodeChunk, k = i - r * kDecodeChunk;
      const int64_t b = b0 + r;
      xs[r][k] = b < a.batch && k < n ? static_cast<ComputeT>(a.x[b * a.d_in + k0 + k]) : ComputeT(0);
    }
    __syncthreads();
    if (channel) {
      // Unrolled so that several k's weight loads (from L2) are in flight at once: the loop is
      // bound by their latency, not by the FMAs.
#pragma unroll 8
      for (int k = warp; k < n; k += kDecodeRows) {
        const ComputeT* w_row = a.weight_t + (k0 + k) * width + c;
        ComputeT w[G];
#pragma unroll
        for (int g = 0; g < G; ++g) w[g] = w_row[g * D];
#pragma unroll
        for (int r = 0; r < kDecodeRows; ++r) {
          const ComputeT xv = xs[r][k];
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g][r] = fma(w[g], xv, acc[g][r]);
        }
      }
    }
  }

  // Gate by gate, the slices' partial sums of row `warp` in slice order, onto the bias.
  const int64_t b = b0 + warp;
  ComputeT wx[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kDecodeRows; ++r) partial[warp][r][lane] = acc[g][r];
    __syncthreads();
    ComputeT sum = channel ? a.bias[g * D + c] : ComputeT(0);
#pragma unroll
    for (int slice = 0; slice < kDecodeRows; ++slice) sum += partial[slice][warp][lane];
    wx[g] = sum;
  }
  if (!channel || b >= a.batch) return;
  if (a.dt_gate >= 0) {
    const ComputeT dt = static_cast<ComputeT>(a.x[b * a.d_in + a.d_in - 1]);
    const ComputeT floor = static_cast<ComputeT>(a.dt_floor);
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (g == a.dt_gate) wx[g] = dt < floor ? floor : dt;  // std::max(dt, floor), as the host: NaN stays NaN
  }
  ComputeT values[V], h_prev[S], h_new[S];
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = a.values[k * D + c];
#pragma unroll
  for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.state[(b * S + s) * D + c]);
  CellMath::step(values, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
  for (int s = 0; s < S; ++s) a.out[(b * S + s) * D + c] = static_cast<StorageT>(h_new[s]);
}

}  // namespace

template <class CellMath, class StorageT>
cudaError_t launch_decode_step(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.channels < 0 || a.d_in < 0 || a.affine_inputs < 0 || a.affine_inputs > a.d_in)
    return cudaErrorInvalidValue;
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  if (a.bias == nullptr || a.values == nullptr || a.state == nullptr || a.out == nullptr ||
      (a.affine_inputs > 0 && (a.weight_t == nullptr || a.x == nullptr)))
    return cudaErrorInvalidValue;
  if (a.dt_gate >= CellMath::kGates || (a.dt_gate >= 0 && (a.x == nullptr || a.d_in < 1)))
    return cudaErrorInvalidValue;
  const int64_t channel_blocks = (a.channels + 31) / 32;
  const int64_t row_blocks = (a.batch + kDecodeRows - 1) / kDecodeRows;
  if (row_blocks > 0x7fffffff || channel_blocks > 65535) return cudaErrorInvalidValue;
  decode_kernel<CellMath, StorageT>
      <<<dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(channel_blocks)), dim3(32, kDecodeRows), 0,
         stream>>>(a);
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
