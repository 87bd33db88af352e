// launch_row_sum (kernels/row_sum.hpp): a block per 32 columns (a lane each) and 32 row ranges (a
// warp each); each warp adds its range in row order, then warp 0 adds the 32 range sums in order.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/row_sum.hpp"

namespace pararnn::kernels {
namespace {

constexpr int kRowSumBatch = 8;  // loads in flight per thread (the adds stay in row order)
constexpr int kRowSumThreads = kRowSumColumns * kRowSumRanges;

// Before (2026-12-07): one thread per column adding all `count` rows, 12 blocks of 64 threads
// for the GRU backward's 768 columns of 4096 partials at S1: 1.46 ms per call on an H200, the
// largest kernel of the bf16 training step; the ranges put 32 warps on every column tile.
template <class T>
__global__ void __launch_bounds__(kRowSumThreads) row_sum_kernel(RowSumArgs<T> a) {
  __shared__ double range_sum[kRowSumRanges][kRowSumColumns + 1];
  const int lane = static_cast<int>(threadIdx.x) % kRowSumColumns;
  const int range = static_cast<int>(threadIdx.x) / kRowSumColumns;
  const std::int64_t per_range = (a.count + kRowSumRanges - 1) / kRowSumRanges;
  const std::int64_t first = range * per_range < a.count ? range * per_range : a.count;
  const std::int64_t last = first + per_range < a.count ? first + per_range : a.count;
  for (std::int64_t tile = blockIdx.x; tile * kRowSumColumns < a.n; tile += gridDim.x) {
    const std::int64_t i = tile * kRowSumColumns + lane;
    double sum = 0.0;
    if (i < a.n) {
      std::int64_t j = first;
      for (; j + kRowSumBatch <= last; j += kRowSumBatch) {
        T v[kRowSumBatch];
#pragma unroll
        for (int u = 0; u < kRowSumBatch; ++u) v[u] = a.rows[(j + u) * a.n + i];
#pragma unroll
        for (int u = 0; u < kRowSumBatch; ++u) sum += static_cast<double>(v[u]);
      }
      for (; j < last; ++j) sum += static_cast<double>(a.rows[j * a.n + i]);
    }
    range_sum[range][lane] = sum;
    __syncthreads();
    if (range == 0 && i < a.n) {
      double total = 0.0;
#pragma unroll 8
      for (int r = 0; r < kRowSumRanges; ++r) total += range_sum[r][lane];
      a.out[i] = total;
    }
    __syncthreads();
  }
}

#if defined(PARARNN_FAULTS) && PARARNN_FAULTS  // both passes: the device pass must compile the faulty kernel
// The fault `cuda_row_sum_atomics`: the rows added by floating-point atomics, a thread per term, in
// whatever order the threads run (out zeroed first): sums that differ from run to run.
template <class T>
__global__ void row_sum_atomic_kernel(RowSumArgs<T> a) {
  const std::int64_t terms = a.count * a.n, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < terms; k += stride)
    atomicAdd(a.out + k % a.n, static_cast<double>(a.rows[k]));
}
#endif

}  // namespace

template <class T>
cudaError_t launch_row_sum(const RowSumArgs<T>& a, cudaStream_t stream) {
  if (a.count < 0 || a.n < 0) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.out == nullptr || (a.count > 0 && a.rows == nullptr)) return cudaErrorInvalidValue;
#if defined(PARARNN_FAULTS) && PARARNN_FAULTS
  if (PARARNN_FAULT_POINT("cuda_row_sum_atomics")) {
    if (const cudaError_t e = cudaMemsetAsync(a.out, 0, static_cast<std::size_t>(a.n) * sizeof(double), stream);
        e != cudaSuccess)
      return e;
    if (a.count == 0) return cudaSuccess;
    const std::int64_t wanted = (a.count * a.n + 255) / 256;
    row_sum_atomic_kernel<T><<<static_cast<unsigned>(wanted < 65536 ? wanted : 65536), 256, 0, stream>>>(a);
    return cudaGetLastError();
  }
#endif
  const std::int64_t blocks = (a.n + kRowSumColumns - 1) / kRowSumColumns;
  row_sum_kernel<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kRowSumThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_row_sum<float>(const RowSumArgs<float>&, cudaStream_t);
template cudaError_t launch_row_sum<double>(const RowSumArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
