// Splits f32 or f16 device values into bf16 terms, so that a GEMM on bf16 tensor cores with f32
// accumulation computes the product of the unsplit values: Σ_k Σ_j A_k B_j over the terms of both
// operands (CUDA backward of f16/bf16 cells: runtime.hpp's input_affine_backward).
//
// Guarantees: dst[k · plane + i] (k < terms) = rn_bf16(v − Σ_{j<k} dst[j · plane + i]) for
// v = src[i], each remainder formed exactly in f32; so Σ_k dst[k · plane + i] (added in f32 or
// wider) equals v exactly when
//   f32 source, 3 terms: |v| ≥ 2^-100 (below that the last remainder can fall under bf16's
//                        subnormal spacing: absolute error ≤ 2^-134), non-finite v as is in term
//                        0 and zeros after it;
//   f16 source, 2 terms: every finite v (f16's 11-bit significand and range fit two bf16).
// Fewer terms give the truncated expansion (relative error ≤ 2^-8 per term left out). Never
// allocates; returns cudaErrorInvalidValue for terms outside 1 … 3, plane < n, a negative n or a
// null pointer with elements to write, else the launch's error. Example:
//   Bf16SplitArgs a{.src = d_wx, .src_type = Bf16SplitSource::f32, .dst = d_parts,
//                   .n = rows * width, .terms = 3, .plane = rows * width};
//   cudaError_t e = launch_bf16_split(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

enum class Bf16SplitSource : std::uint8_t { f32, f16 };

struct Bf16SplitArgs {
  const void* src = nullptr;  // [n] f32 or f16
  Bf16SplitSource src_type = Bf16SplitSource::f32;
  void* dst = nullptr;        // [terms][plane] bf16 (__nv_bfloat16)
  std::int64_t n = 0;
  int terms = 3;
  std::int64_t plane = 0;     // elements between terms (≥ n)
};

cudaError_t launch_bf16_split(const Bf16SplitArgs& args, cudaStream_t stream);

}  // namespace pararnn::kernels
