// A NaN-propagating max|·| reduction in two launches (nvcc only): each block of a grid-stride
// kernel reduces its threads' values with `block_nan_max` and writes one partial; then
// `nan_max_partials_kernel` (one block) reduces the partials into a device scalar. NaN ranks
// above every number (detail::nan_max), so one NaN anywhere makes the result NaN; the order is
// fixed by the shape, so the result is deterministic. `launch_with_max_abs` is the one launch
// sequence of every residual launcher.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device_util.cuh"
#include "pararnn/kernels/launch.hpp"

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

// Partials a residual launch may write: one per block, at most this many blocks (grid-stride
// loops cover the rest).
inline constexpr int kMaxAbsMaxBlocks = 1024;

template <class T>
constexpr std::size_t max_abs_workspace_bytes() {
  return align_up(kMaxAbsMaxBlocks * sizeof(T), kWorkspaceAlignment);
}

// The launch of a residual kernel with its optional max|·| scalar, shared by the residual
// launchers (cell_residual.cu, dense_residual.cu, m2rnn.cu): `items` == 0 writes 0 to the scalar
// (when asked) and launches nothing; a scalar asked for without a workspace of
// max_abs_workspace_bytes<T>() aligned for T is cudaErrorInvalidValue; otherwise
// `launch(blocks, partials)` starts the kernel on (items / kThreads rounded up, at most
// kMaxAbsMaxBlocks) blocks of kThreads (partials null without the scalar), and the partials are
// reduced into the scalar. The caller checks its own arguments first.
template <int kThreads, class T, class Launch>
cudaError_t launch_with_max_abs(std::int64_t items, T* max_abs, void* workspace,
                                std::size_t workspace_bytes, cudaStream_t stream, Launch&& launch) {
  if (items == 0) return max_abs == nullptr ? cudaSuccess : cudaMemsetAsync(max_abs, 0, sizeof(T), stream);
  T* partials = nullptr;
  if (max_abs != nullptr) {
    if (workspace == nullptr || workspace_bytes < max_abs_workspace_bytes<T>() ||
        reinterpret_cast<std::uintptr_t>(workspace) % alignof(T) != 0)
      return cudaErrorInvalidValue;
    partials = static_cast<T*>(workspace);
  }
  const std::int64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < kMaxAbsMaxBlocks ? wanted : kMaxAbsMaxBlocks);
  launch(blocks, partials);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (partials == nullptr) return cudaSuccess;
  nan_max_partials_kernel<kThreads, T><<<1, kThreads, 0, stream>>>(partials, blocks, max_abs);
  return cudaGetLastError();
}

}  // namespace pararnn::kernels::detail
