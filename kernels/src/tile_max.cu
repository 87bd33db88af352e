// launch_tile_max_abs (kernels/tile_max.hpp): one block of 256 threads per (unit, chunk); the
// threads cover the tile's channels (coalesced) and 256 / tile rows at a time, then one block
// NaN-max.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "device_util.cuh"
#include "nan_max_reduce.cuh"
#include "pararnn/kernels/tile_max.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kTileMaxThreads = 256;

template <class T>
__global__ void __launch_bounds__(kTileMaxThreads) tile_max_abs_kernel(TileMaxArgs<T> a, int64_t tiles) {
  const int64_t block = blockIdx.x;
  const int64_t unit = block / a.chunks, j = block - unit * a.chunks;
  const int64_t b = unit / tiles, k = unit - b * tiles;
  const int64_t r0 = j * a.rows / a.chunks, r1 = (j + 1) * a.rows / a.chunks;
  const int64_t row_lanes = kTileMaxThreads / a.tile;
  const int64_t lane_c = threadIdx.x % a.tile, lane_r = threadIdx.x / a.tile;
  const int64_t c = k * a.tile + lane_c;
  T v = T(0);
  if (lane_r < row_lanes && c < a.channels) {
    for (int64_t r = r0 + lane_r; r < r1; r += row_lanes)
      v = detail::nan_max(v, fabs(a.F[(b * a.rows + r) * a.channels + c]));
  }
  v = detail::block_nan_max<kTileMaxThreads>(v);
  if (threadIdx.x == 0) a.out[block] = v;
}

}  // namespace

template <class T>
cudaError_t launch_tile_max_abs(const TileMaxArgs<T>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.rows < 0 || a.channels < 0 || a.tile < 1 || a.tile > kTileMaxThreads || a.chunks < 1)
    return cudaErrorInvalidValue;
  const int64_t tiles = (a.channels + a.tile - 1) / a.tile;
  const int64_t blocks = a.batch * tiles * a.chunks;
  if (blocks == 0) return cudaSuccess;
  if (a.out == nullptr || (a.rows > 0 && a.F == nullptr)) return cudaErrorInvalidValue;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  tile_max_abs_kernel<T><<<static_cast<unsigned>(blocks), kTileMaxThreads, 0, stream>>>(a, tiles);
  return cudaGetLastError();
}

template cudaError_t launch_tile_max_abs<float>(const TileMaxArgs<float>&, cudaStream_t);
template cudaError_t launch_tile_max_abs<double>(const TileMaxArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
