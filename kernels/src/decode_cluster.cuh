// The decode kernel of decode.cuh with its k slices spread over a thread-block cluster
// (sm_90): DecodeClusterShape<Rows, Slices, Ranks> runs Slices / Ranks warps per block and
// Ranks blocks per cluster, so a small batch's GEMV uses Ranks times as many SMs as
// DecodeShape<Rows, Slices> (at B 1, d 256: 8 blocks of 16 warps there, 64 or 128 blocks here).
//
// Guarantees:
// - Bit for bit DecodeShape<R', Slices> for every R' <= 16 (their chunk is 128 columns, as
//   here): warp w of rank q is slice q · (Slices / Ranks) + w and sums the same columns in the
//   same order; the partial sums meet in distributed shared memory and are added onto the bias
//   in slice order 0 … Slices − 1.
// - Rows are stepped by rank r mod Ranks (warps loop over the rest); each row is read and
//   written by one block, so out may be state itself, as for decode.cuh.
// - A cluster sync before any remote read and one before exit: no block leaves while another
//   may still read its shared memory.
// Measured by pararnn_bench_shapes --only decode (checked against the production launch);
// not a production shape until a measurement says so.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decode.cuh"

namespace pararnn::kernels::detail {

template <int Rows, int Slices, int Ranks>
struct DecodeClusterShape {
  static_assert(Ranks >= 2 && Ranks <= 16 && Slices % Ranks == 0, "Ranks divides Slices; clusters of 2 … 16");
  static constexpr int kRows = Rows;
  static constexpr int kSlices = Slices;
  static constexpr int kRanks = Ranks;
  static constexpr int kWarps = Slices / Ranks;  // warps per block
  static constexpr int kChunk = 128;  // the production shapes' chunk (DecodeShape with Rows <= 16)
};

template <class CellMath, class StorageT, class Shape>
__global__ void __launch_bounds__(32 * Shape::kWarps) decode_cluster_kernel(DecodeArgs<StorageT> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  constexpr int R = Shape::kRows, W = Shape::kSlices, Wb = Shape::kWarps, Q = Shape::kRanks, C = Shape::kChunk;
  static_assert(sizeof(ComputeT) * (R * C + Wb * G * R * 32) <= 48 * 1024, "the block's shared memory is static");
  __shared__ ComputeT xs[R][C];
  __shared__ ComputeT partial[Wb][G][R][32];  // [local slice][gate][row][lane]

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const int slice = rank * Wb + warp;
  const std::int64_t D = a.channels, width = G * D;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * 32 + lane;
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.z) * R;
  const bool channel = c < D;

  ComputeT acc[G][R];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[g][r] = ComputeT(0);
  for (std::int64_t k0 = 0; k0 < a.affine_inputs; k0 += C) {
    const int n = static_cast<int>(a.affine_inputs - k0 < C ? a.affine_inputs - k0 : C);
    if (k0 > 0) __syncthreads();
    for (int i = warp * 32 + lane; i < R * C; i += 32 * Wb) {
      const int r = i / C, k = i - r * C;
      const std::int64_t b = b0 + r;
      xs[r][k] = b < a.batch && k < n ? static_cast<ComputeT>(a.x[b * a.d_in + k0 + k]) : ComputeT(0);
    }
    __syncthreads();
    if (channel) {
#pragma unroll 8
      for (int k = slice; k < n; k += W) {
        const ComputeT* w_row = a.weight_t + (k0 + k) * width + c;
        ComputeT w[G];
#pragma unroll
        for (int g = 0; g < G; ++g) w[g] = w_row[g * D];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const ComputeT xv = xs[r][k];
#pragma unroll
          for (int g = 0; g < G; ++g) acc[g][r] = fma(w[g], xv, acc[g][r]);
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r) partial[warp][g][r][lane] = acc[g][r];
  cluster.sync();  // every rank's partial sums are written

  if (channel) {
    ComputeT values[V];
#pragma unroll
    for (int k = 0; k < V; ++k) values[k] = a.values[k * D + c];
    for (int r = rank + Q * warp; r < R; r += Q * Wb) {
      const std::int64_t b = b0 + r;
      if (b >= a.batch) break;
      ComputeT wx[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        ComputeT sum = a.bias[g * D + c];
        for (int s = 0; s < W; ++s) {
          const ComputeT* remote = cluster.map_shared_rank(&partial[s % Wb][g][r][lane], s / Wb);
          sum += *remote;
        }
        wx[g] = sum;
      }
      if (a.dt_gate >= 0) {
        const ComputeT dt = static_cast<ComputeT>(a.x[b * a.d_in + a.d_in - 1]);
        const ComputeT floor = static_cast<ComputeT>(a.dt_floor);
#pragma unroll
        for (int g = 0; g < G; ++g)
          if (g == a.dt_gate) wx[g] = dt < floor ? floor : dt;
      }
      ComputeT h_prev[S], h_new[S];
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.state[(b * S + s) * D + c]);
      CellMath::step(values, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
      for (int s = 0; s < S; ++s) a.out[(b * S + s) * D + c] = static_cast<StorageT>(h_new[s]);
    }
  }
  cluster.sync();  // no block exits while another may read its partial sums
#endif
}

// The cluster kernel at shape Shape (arguments already checked, check_decode_args); a device
// without cluster launch returns cudaErrorNotSupported.
template <class CellMath, class StorageT, class Shape>
cudaError_t run_decode_cluster(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  int device = 0, cluster_launch = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device); e != cudaSuccess)
    return e;
  if (!cluster_launch) return cudaErrorNotSupported;
  const std::int64_t channel_blocks = (a.channels + 31) / 32;
  const std::int64_t row_blocks = (a.batch + Shape::kRows - 1) / Shape::kRows;
  if (row_blocks > 65535) return cudaErrorInvalidValue;
  auto* kernel = decode_cluster_kernel<CellMath, StorageT, Shape>;
  if constexpr (Shape::kRanks > 8) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        e != cudaSuccess)
      return e;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(Shape::kRanks), static_cast<unsigned>(channel_blocks),
                        static_cast<unsigned>(row_blocks));
  config.blockDim = dim3(32, Shape::kWarps);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = Shape::kRanks;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, a);
}

}  // namespace pararnn::kernels::detail
