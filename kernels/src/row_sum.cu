// launch_row_sum (kernels/row_sum.hpp): one thread per output element, the rows added in order.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/kernels/row_sum.hpp"

namespace pararnn::kernels {
namespace {

template <class T>
__global__ void row_sum_kernel(RowSumArgs<T> a) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < a.count; ++j) sum += static_cast<double>(a.rows[j * a.n + i]);
    a.out[i] = sum;
  }
}

}  // namespace

template <class T>
cudaError_t launch_row_sum(const RowSumArgs<T>& a, cudaStream_t stream) {
  if (a.count < 0 || a.n < 0) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.out == nullptr || (a.count > 0 && a.rows == nullptr)) return cudaErrorInvalidValue;
  const std::int64_t blocks = (a.n + 255) / 256;
  row_sum_kernel<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_row_sum<float>(const RowSumArgs<float>&, cudaStream_t);
template cudaError_t launch_row_sum<double>(const RowSumArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
