// launch_strided_copy (kernels/strided_copy.hpp): a grid-stride loop over the destination, so
// stores are coalesced; the loads follow the source's strides.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/kernels/strided_copy.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kCopyThreads = 256;
constexpr int kCopyMaxBlocks = 4096;

template <class Bits>
__global__ void __launch_bounds__(kCopyThreads)
    strided_copy_kernel(StridedCopyArgs a, int64_t n) {
  const Bits* src = static_cast<const Bits*>(a.src);
  Bits* dst = static_cast<Bits*>(a.dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t q = rest / a.shape[d];
      offset += (rest - q * a.shape[d]) * a.strides[d];
      rest = q;
    }
    dst[i] = src[offset];
  }
}

}  // namespace

cudaError_t launch_strided_copy(const StridedCopyArgs& a, cudaStream_t stream) {
  if (a.rank < 0 || a.rank > kStridedCopyMaxRank) return cudaErrorInvalidValue;
  if (a.element_bytes != 2 && a.element_bytes != 4 && a.element_bytes != 8)
    return cudaErrorInvalidValue;
  int64_t n = 1;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] < 0) return cudaErrorInvalidValue;
    n *= a.shape[d];
  }
  if (n == 0) return cudaSuccess;
  if (a.src == nullptr || a.dst == nullptr) return cudaErrorInvalidValue;
  const int64_t wanted = (n + kCopyThreads - 1) / kCopyThreads;
  const int blocks = static_cast<int>(wanted < kCopyMaxBlocks ? wanted : kCopyMaxBlocks);
  switch (a.element_bytes) {
    case 2: strided_copy_kernel<std::uint16_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
    case 4: strided_copy_kernel<std::uint32_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
    default: strided_copy_kernel<std::uint64_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
  }
  return cudaGetLastError();
}

}  // namespace pararnn::kernels
