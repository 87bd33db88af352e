// A NaN-propagating max|·| reduction in two launches (nvcc only): each block of a grid-stride
// kernel reduces its threads' values with `block_nan_max` and writes one partial; then
// `nan_max_partials_kernel` (one block) reduces the partials into a device scalar. NaN ranks
// above every number (detail::nan_max), so one NaN anywhere makes the result NaN; the order is
// fixed by the shape, so the result is deterministic. Used by every residual kernel.
#pragma once

#include <cuda_runtime.h>

#include "device_util.cuh"

namespace pararnn::kernels::detail {

// The block's nan_max of `v` (blockDim.x == kThreads, a multiple of 32, at most 1024), valid in
// thread 0.
template <int kThreads, class T>
__device__ T block_nan_max(T v) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  __shared__ T warp_max[kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? warp_max[lane] : T(0);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// *out = nan_max of partials[0 .. count); launch with one block of kThreads threads.
template <int kThreads, class T>
__global__ void __launch_bounds__(kThreads)
    nan_max_partials_kernel(const T* partials, int count, T* out) {
  T v = T(0);
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) v = nan_max(v, partials[i]);
  v = block_nan_max<kThreads>(v);
  if (threadIdx.x == 0) *out = v;
}

}  // namespace pararnn::kernels::detail
