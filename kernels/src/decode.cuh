// Device side of launch_decode_step and launch_decode_gates (kernels/decode.hpp): the input
// affine and the production cell math in one kernel at a given block shape, and the step from
// precomputed gate pre-activations. Included by decode.cu (the production shapes and the rule
// that picks one by batch) and by the benchmark that measures the shapes (bench/shape_sweep.cu),
// so both run the same code.
//
// Block shape DecodeShape<Rows, Slices>: 32 channels (the lanes) × Rows batch rows, Slices warps.
// x is staged kChunk columns at a time; warp w sums the chunk's columns w, w + Slices, … of every
// row of the block's tile; the slices' partial sums meet in shared memory and are added onto the
// bias in slice order; then warp r steps row r (r < Rows, warps loop when Slices < Rows). A row's
// sums depend on Slices only, not on Rows or kChunk (below): shapes with equal slices give the
// same bits; others differ by the sums' rounding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "pararnn/kernels/decode.hpp"

namespace pararnn::kernels::detail {

// kKMajor: x staged column-major in shared memory (xs[k][row], rows contiguous), so one k's x
// for every row of the tile is read with 16-byte loads instead of one load per row; the same
// FMAs in the same order (bit for bit the row-major staging).
// kChunkT > 0 sets the x columns staged at a time (default: 16 KiB of doubles at most). A chunk
// is a multiple of Slices, so slice w's columns are w, w + Slices, … of every chunk, summed in
// increasing k whatever the chunk: a row's sums depend on Slices only, not on the chunk.
template <int Rows, int Slices, bool kKMajorT = false, int kChunkT = 0>
struct DecodeShape {
  static_assert(Rows >= 1 && Slices >= 1 && Slices <= 32, "a decode block has 1 … 32 warps");
  static constexpr int kRows = Rows;
  static constexpr int kSlices = Slices;
  static constexpr bool kKMajor = kKMajorT;
  static constexpr int kChunk =
      kChunkT > 0 ? kChunkT : (2048 / Rows < 32 ? 32 : (2048 / Rows > 128 ? 128 : 2048 / Rows));
  static_assert(kChunk % Slices == 0, "a chunk holds whole rounds of the slices");
};

// Column k's x of the tile's R rows from k-major staging (xs + k·R, 16-byte aligned when R·size
// is), as vector loads where the rows fill them.
template <class ComputeT, int R>
__device__ __forceinline__ void load_x_column(const ComputeT* col, ComputeT (&xv)[R]) {
  if constexpr (std::is_same_v<ComputeT, float> && R % 4 == 0) {
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
      const float4 v = reinterpret_cast<const float4*>(col)[q];
      xv[4 * q] = v.x;
      xv[4 * q + 1] = v.y;
      xv[4 * q + 2] = v.z;
      xv[4 * q + 3] = v.w;
    }
  } else if constexpr (std::is_same_v<ComputeT, double> && R % 2 == 0) {
#pragma unroll
    for (int q = 0; q < R / 2; ++q) {
      const double2 v = reinterpret_cast<const double2*>(col)[q];
      xv[2 * q] = v.x;
      xv[2 * q + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) xv[r] = col[r];
  }
}

// The k sum both decode kernels run (decode_cluster.cuh too, so that its shapes equal these bit
// for bit): x staged C columns at a time by the block's kBlockWarps warps (xs: R·C values,
// row-major [r][k] or, kKMajor, [k][r]); warp `warp` of the block is k slice `slice` of kSlices
// and adds columns slice, slice + kSlices, … of each chunk into acc[g][r] (row b0 + r, channel
// c). The layout changes which loads read x, not the FMAs or their order.
template <class CellMath, class StorageT, int R, int C, int kBlockWarps, int kSlices, bool kKMajor>
__device__ __forceinline__ void decode_affine_sums(const DecodeArgs<StorageT>& a, ComputeOf<StorageT>* xs,
                                                   int warp, int slice, std::int64_t b0, std::int64_t c,
                                                   ComputeOf<StorageT> (&acc)[CellMath::kGates][R]) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int G = CellMath::kGates;
  const int lane = static_cast<int>(threadIdx.x);
  const std::int64_t D = a.channels, width = G * D;
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[g][r] = ComputeT(0);
  for (std::int64_t k0 = 0; k0 < a.affine_inputs; k0 += C) {
    const int n = static_cast<int>(a.affine_inputs - k0 < C ? a.affine_inputs - k0 : C);
    if (k0 > 0) __syncthreads();  // the previous chunk's reads are done
    for (int i = warp * 32 + lane; i < R * C; i += 32 * kBlockWarps) {
      const int r = i / C, k = i - r * C;
      const std::int64_t b = b0 + r;
      xs[kKMajor ? k * R + r : r * C + k] =
          b < a.batch && k < n ? static_cast<ComputeT>(a.x[b * a.d_in + k0 + k]) : ComputeT(0);
    }
    __syncthreads();
    if (c < D) {
      // Unrolled so that several k's weight loads (from L2) are in flight at once: the loop is
      // bound by their latency, not by the FMAs.
#pragma unroll 8
      for (int k = slice; k < n; k += kSlices) {
        const ComputeT* w_row = a.weight_t + (k0 + k) * width + c;
        ComputeT w[G];
#pragma unroll
        for (int g = 0; g < G; ++g) w[g] = w_row[g * D];
        ComputeT xv[R];
        if constexpr (kKMajor) {
          load_x_column<ComputeT, R>(xs + k * R, xv);
        } else {
#pragma unroll
          for (int r = 0; r < R; ++r) xv[r] = xs[r * C + k];
        }
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g][r] = fma(w[g], xv[r], acc[g][r]);
      }
    }
  }
}

// Row b's step at channel c from its gate pre-activations wx (the Δt gate floored here), both
// decode kernels' last stage.
template <class CellMath, class StorageT>
__device__ __forceinline__ void decode_row_step(const DecodeArgs<StorageT>& a, std::int64_t b, std::int64_t c,
                                                const ComputeOf<StorageT> (&values)[CellMath::kRecurrent +
                                                                                   CellMath::kConstants],
                                                ComputeOf<StorageT> (&wx)[CellMath::kGates]) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  const std::int64_t D = a.channels;
  if (a.dt_gate >= 0) {
    const ComputeT dt = static_cast<ComputeT>(a.x[b * a.d_in + a.d_in - 1]);
    const ComputeT floor = static_cast<ComputeT>(a.dt_floor);
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (g == a.dt_gate) wx[g] = dt < floor ? floor : dt;  // std::max(dt, floor), as the host: NaN stays NaN
  }
  ComputeT h_prev[S], h_new[S];
#pragma unroll
  for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.state[(b * S + s) * D + c]);
  CellMath::step(values, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
  for (int s = 0; s < S; ++s) a.out[(b * S + s) * D + c] = static_cast<StorageT>(h_new[s]);
}

template <class CellMath, class StorageT, class Shape>
__global__ void __launch_bounds__(32 * Shape::kSlices) decode_kernel(DecodeArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  constexpr int R = Shape::kRows, W = Shape::kSlices, C = Shape::kChunk;
  static_assert(sizeof(ComputeT) * (R * C + W * R * 32) <= 48 * 1024, "the block's shared memory is static");
  __shared__ __align__(16) ComputeT xs[R * C];
  __shared__ ComputeT partial[W][R][32];  // [k slice][row][lane]

  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const std::int64_t D = a.channels;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * 32 + lane;
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.x) * R;
  const bool channel = c < D;

  // acc[g][r]: this warp's k slice of row b0 + r's gate g.
  ComputeT acc[G][R];
  decode_affine_sums<CellMath, StorageT, R, C, W, W, Shape::kKMajor>(a, xs, warp, warp, b0, c, acc);

  // Gate by gate, the slices' partial sums of each row in slice order, onto the bias.
  constexpr int kRowsPerWarp = (R + W - 1) / W;
  ComputeT wx[kRowsPerWarp][G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    __syncthreads();  // the x chunk's or the previous gate's reads are done
#pragma unroll
    for (int r = 0; r < R; ++r) partial[warp][r][lane] = acc[g][r];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int r = warp + j * W;
      ComputeT sum = channel ? a.bias[g * D + c] : ComputeT(0);
      if (r < R)
#pragma unroll
        for (int slice = 0; slice < W; ++slice) sum += partial[slice][r][lane];
      wx[j][g] = sum;
    }
  }
  if (!channel) return;
  ComputeT values[V];
#pragma unroll
  for (int k = 0; k < V; ++k) values[k] = a.values[k * D + c];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int r = warp + j * W;
    const std::int64_t b = b0 + r;
    if (r >= R || b >= a.batch) continue;
    decode_row_step<CellMath, StorageT>(a, b, c, values, wx[j]);
  }
}

// The argument checks launch_decode_step makes before any launch (cudaErrorInvalidValue), and
// cudaSuccess for an empty step (no launch needed) — the caller then returns.
template <class CellMath, class StorageT>
cudaError_t check_decode_args(const DecodeArgs<StorageT>& a) {
  if (a.batch < 0 || a.channels < 0 || a.d_in < 0 || a.affine_inputs < 0 || a.affine_inputs > a.d_in)
    return cudaErrorInvalidValue;
  if (a.batch > 0 && a.channels > 0 &&
      (a.bias == nullptr || a.values == nullptr || a.state == nullptr || a.out == nullptr ||
       (a.affine_inputs > 0 && (a.weight_t == nullptr || a.x == nullptr))))
    return cudaErrorInvalidValue;
  if (a.dt_gate >= CellMath::kGates || (a.dt_gate >= 0 && (a.x == nullptr || a.d_in < 1)))
    return cudaErrorInvalidValue;
  if ((a.channels + 31) / 32 > 65535) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// The decode kernel at shape Shape; arguments already checked (check_decode_args).
template <class CellMath, class StorageT, class Shape>
cudaError_t run_decode_step(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  const std::int64_t channel_blocks = (a.channels + 31) / 32;
  const std::int64_t row_blocks = (a.batch + Shape::kRows - 1) / Shape::kRows;
  if (row_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  decode_kernel<CellMath, StorageT, Shape>
      <<<dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(channel_blocks)), dim3(32, Shape::kSlices), 0,
         stream>>>(a);
  return cudaGetLastError();
}

}  // namespace pararnn::kernels::detail
