// launch_row_sum (kernels/row_sum.hpp): one thread per output element, the rows added in order.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/row_sum.hpp"

namespace pararnn::kernels {
namespace {

constexpr int kRowSumBatch = 32;    // loads in flight per thread
constexpr int kRowSumThreads = 64;  // small blocks: a few hundred columns still spread over SMs

template <class T>
__global__ void row_sum_kernel(RowSumArgs<T> a) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    // The loads of kRowSumBatch rows are issued before their adds (the adds stay in row order):
    // a thread's sum is a chain of count dependent adds, and with one load in flight at a time a
    // 4096-row sum of 768 columns (the GRU backward's recurrent partials at S1) waited ~0.5 ms on
    // memory latency.
    double sum = 0.0;
    std::int64_t j = 0;
    for (; j + kRowSumBatch <= a.count; j += kRowSumBatch) {
      T v[kRowSumBatch];
#pragma unroll
      for (int u = 0; u < kRowSumBatch; ++u) v[u] = a.rows[(j + u) * a.n + i];
#pragma unroll
      for (int u = 0; u < kRowSumBatch; ++u) sum += static_cast<double>(v[u]);
    }
    for (; j < a.count; ++j) sum += static_cast<double>(a.rows[j * a.n + i]);
    a.out[i] = sum;
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
  const std::int64_t blocks = (a.n + kRowSumThreads - 1) / kRowSumThreads;
  row_sum_kernel<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), kRowSumThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_row_sum<float>(const RowSumArgs<float>&, cudaStream_t);
template cudaError_t launch_row_sum<double>(const RowSumArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
