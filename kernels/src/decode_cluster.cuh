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
// - decode_cluster_available asks the device first (cluster launch, code for sm_90, one cluster
//   resident); launch_decode_step (decode.cu) takes a plain DecodeShape where it says no.
// Production for a batch of one (kernels/decode.hpp); pararnn_bench_shapes --only decode measures
// every shape against the production launch.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "decode.cuh"

namespace pararnn::kernels::detail {

template <int Rows, int Slices, int Ranks, bool kKMajorT = false>
struct DecodeClusterShape {
  static_assert(Ranks >= 2 && Ranks <= 16 && Slices % Ranks == 0, "Ranks divides Slices; clusters of 2 … 16");
  static constexpr bool kKMajor = kKMajorT;  // x staging, as DecodeShape's
  static constexpr int kRows = Rows;
  static constexpr int kSlices = Slices;
  static constexpr int kRanks = Ranks;
  static constexpr int kWarps = Slices / Ranks;  // warps per block
  static constexpr int kChunk = 128;  // x columns staged at a time (the sums do not depend on it)
  static_assert(kChunk % Slices == 0, "a chunk holds whole rounds of the slices");
};

template <class CellMath, class StorageT, class Shape>
__global__ void __launch_bounds__(32 * Shape::kWarps) decode_cluster_kernel(DecodeArgs<StorageT> a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using ComputeT = ComputeOf<StorageT>;
  constexpr int G = CellMath::kGates;
  constexpr int V = CellMath::kRecurrent + CellMath::kConstants;
  constexpr int R = Shape::kRows, W = Shape::kSlices, Wb = Shape::kWarps, Q = Shape::kRanks, C = Shape::kChunk;
  static_assert(sizeof(ComputeT) * (R * C + Wb * G * R * 32) <= 48 * 1024, "the block's shared memory is static");
  __shared__ __align__(16) ComputeT xs[R * C];
  __shared__ ComputeT partial[Wb][G][R][32];  // [local slice][gate][row][lane]

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const std::int64_t D = a.channels;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.y) * 32 + lane;
  const std::int64_t b0 = static_cast<std::int64_t>(blockIdx.z) * R;

  ComputeT acc[G][R];
  decode_affine_sums<CellMath, StorageT, R, C, Wb, W, Shape::kKMajor>(a, xs, warp, rank * Wb + warp, b0, c, acc);
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r) partial[warp][g][r][lane] = acc[g][r];
  cluster.sync();  // every rank's partial sums are written

  if (c < D) {
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
      decode_row_step<CellMath, StorageT>(a, b, c, values, wx);
    }
  }
  cluster.sync();  // no block exits while another may read its partial sums
#elif defined(__CUDA_ARCH__)
  __trap();  // compiled for a device without clusters: never a silent empty step
#endif
}

// The launch of Shape's clusters for `a`: grid (Ranks, channel blocks, row blocks), cluster
// (Ranks, 1, 1). `attribute` must outlive the config's use.
template <class Shape, class StorageT>
cudaLaunchConfig_t decode_cluster_config(const DecodeArgs<StorageT>& a, cudaStream_t stream,
                                         cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(Shape::kRanks), static_cast<unsigned>((a.channels + 31) / 32),
                        static_cast<unsigned>((a.batch + Shape::kRows - 1) / Shape::kRows));
  config.blockDim = dim3(32, Shape::kWarps);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = Shape::kRanks;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

// Whether the current device runs Shape's clusters: cluster launch supported, code for sm_90 or
// later, and at least one cluster of Ranks blocks resident at once
// (cudaOccupancyMaxActiveClusters > 0; a partitioned or older device may have none). Asked once
// per device and shape, then remembered (one answer for every translation unit's copy of the
// kernel). A query that fails counts as "no": its error is cleared (cudaGetLastError) so that
// the block shape the caller then launches does not report it, and the answer is remembered.
// Only cudaGetDevice's error is returned.
template <class CellMath, class StorageT, class Shape>
cudaError_t decode_cluster_available(bool& available) {
  available = false;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  constexpr int kDevices = 64;
  static std::atomic<signed char> known[kDevices];  // 0 not asked, 1 yes, -1 no
  if (device < kDevices) {
    const signed char k = known[device].load(std::memory_order_relaxed);
    if (k != 0) {
      available = k > 0;
      return cudaSuccess;
    }
  }
  const auto answer = [&](bool yes) {
    available = yes;
    if (device < kDevices) known[device].store(yes ? 1 : -1, std::memory_order_relaxed);
    return cudaSuccess;
  };
  const auto failed = [&]() {
    (void)cudaGetLastError();
    return answer(false);
  };
  int cluster_launch = 0;
  if (cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device) != cudaSuccess) return failed();
  if (!cluster_launch) return answer(false);
  cudaFuncAttributes compiled{};
  auto* kernel = decode_cluster_kernel<CellMath, StorageT, Shape>;
  if (cudaFuncGetAttributes(&compiled, kernel) != cudaSuccess) return failed();
  // A kernel JIT-compiled from older PTX has the empty (trapping) body.
  if (compiled.ptxVersion < 90 || compiled.binaryVersion < 90) return answer(false);
  if constexpr (Shape::kRanks > 8) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
      return failed();
  }
  DecodeArgs<StorageT> one{};
  one.batch = Shape::kRows;
  one.channels = 32;
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config = decode_cluster_config<Shape>(one, cudaStream_t{}, attribute);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) return failed();
  return answer(clusters > 0);
}

// The cluster kernel at shape Shape (arguments already checked, check_decode_args); a device
// without cluster launch returns cudaErrorNotSupported (decode_cluster_available says so first).
template <class CellMath, class StorageT, class Shape>
cudaError_t run_decode_cluster(const DecodeArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch == 0 || a.channels == 0) return cudaSuccess;
  bool available = false;
  if (const cudaError_t e = decode_cluster_available<CellMath, StorageT, Shape>(available); e != cudaSuccess) return e;
  if (!available) return cudaErrorNotSupported;
  if ((a.batch + Shape::kRows - 1) / Shape::kRows > 65535) return cudaErrorInvalidValue;
  auto* kernel = decode_cluster_kernel<CellMath, StorageT, Shape>;
  // Set on every launch: each translation unit that instantiates the kernel has its own copy
  // (a module per unit), while the remembered answer above is shared by all of them.
  if constexpr (Shape::kRanks > 8) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        e != cudaSuccess)
      return e;
  }
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config = decode_cluster_config<Shape>(a, stream, attribute);
  return cudaLaunchKernelEx(&config, kernel, a);
}

}  // namespace pararnn::kernels::detail
