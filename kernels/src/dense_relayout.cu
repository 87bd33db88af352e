// launch_dense_relayout (kernels/dense_chain.hpp): one thread per element, i fastest, so that a
// chain-major side is read or written coalesced; the other side goes through its offsets.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/kernels/dense_chain.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;
constexpr int kRelayoutThreads = 256;

__device__ __forceinline__ int64_t address(const DenseOutputLayout& L, int64_t b, int64_t q, int64_t t, int64_t i,
                                           int64_t n) {
  return b * L.batch_stride + q * L.chain_stride + t * L.time_stride + (L.offsets ? L.offsets[q * n + i] : i);
}

template <class T>
__global__ void __launch_bounds__(kRelayoutThreads)
    dense_relayout_kernel(const T* src, DenseOutputLayout from, T* dst, DenseOutputLayout to, int64_t chains_per_row,
                          int64_t time, int64_t n, int64_t total) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % n, rest = e / n;
    const int64_t t = rest % time, chain = rest / time;
    const int64_t q = chain % chains_per_row, b = chain / chains_per_row;
    dst[address(to, b, q, t, i, n)] = src[address(from, b, q, t, i, n)];
  }
}

}  // namespace

template <class T>
cudaError_t launch_dense_relayout(const T* src, DenseOutputLayout from, T* dst, DenseOutputLayout to,
                                  int64_t batch, int64_t chains_per_row, int64_t time, int64_t n,
                                  cudaStream_t stream) {
  if (batch < 0 || chains_per_row < 0 || time < 0 || n < 0) return cudaErrorInvalidValue;
  const int64_t total = batch * chains_per_row * time * n;
  if (total == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const int64_t wanted = (total + kRelayoutThreads - 1) / kRelayoutThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  dense_relayout_kernel<T><<<blocks, kRelayoutThreads, 0, stream>>>(src, from, dst, to, chains_per_row, time, n, total);
  return cudaGetLastError();
}

template cudaError_t launch_dense_relayout<float>(const float*, DenseOutputLayout, float*, DenseOutputLayout,
                                                  int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template cudaError_t launch_dense_relayout<double>(const double*, DenseOutputLayout, double*, DenseOutputLayout,
                                                   int64_t, int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace pararnn::kernels
