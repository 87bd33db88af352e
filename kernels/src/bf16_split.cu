// launch_bf16_split (kernels/bf16_split.hpp): a grid-stride loop, each thread splitting its
// elements in registers (the remainders exact in f32) and writing one bf16 per term.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/bf16_split.hpp"

namespace pararnn::kernels {
namespace {

template <class Src>
__global__ void bf16_split_kernel(const Src* src, __nv_bfloat16* dst, std::int64_t n, int terms,
                                  std::int64_t plane) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float rest;
    if constexpr (sizeof(Src) == 2)
      rest = __half2float(src[i]);
    else
      rest = src[i];
    const bool finite = isfinite(rest);
    for (int k = 0; k < terms; ++k) {
      const __nv_bfloat16 term = __float2bfloat16_rn(rest);
      dst[k * plane + i] = term;
      // v − hi is exact in f32 (hi is v rounded to 8 significant bits); a non-finite v stays in
      // term 0 alone.
      rest = finite ? __fsub_rn(rest, __bfloat162float(term)) : 0.0f;
    }
  }
}

}  // namespace

cudaError_t launch_bf16_split(const Bf16SplitArgs& a, cudaStream_t stream) {
  if (a.n < 0 || a.terms < 1 || a.terms > 3 || a.plane < a.n) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (a.src == nullptr || a.dst == nullptr) return cudaErrorInvalidValue;
  const std::int64_t wanted = (a.n + 255) / 256;
  const auto blocks = static_cast<unsigned>(wanted < 8192 ? wanted : 8192);
  auto* dst = static_cast<__nv_bfloat16*>(a.dst);
  // The fault: one term fewer than asked (the last remainder dropped), the terms no longer exact.
  const int terms = PARARNN_FAULT_POINT("cuda_bf16_split_term_dropped") && a.terms > 1 ? a.terms - 1 : a.terms;
  if (a.src_type == Bf16SplitSource::f16)
    bf16_split_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<const __half*>(a.src), dst, a.n, terms, a.plane);
  else
    bf16_split_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<const float*>(a.src), dst, a.n, terms, a.plane);
  return cudaGetLastError();
}

}  // namespace pararnn::kernels
