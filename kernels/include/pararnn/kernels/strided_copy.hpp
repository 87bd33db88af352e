// Gathers a strided device view into a contiguous row-major array: how the CUDA backend makes a
// device input of any strides (permuted, time-skipped, broadcast) contiguous once, at the
// boundary, before the input GEMM.
//
// Guarantees: element i of `dst` (row-major over `shape`) is the element of `src` at
// Σ_d index_d · strides[d] elements, copied as raw bits (2, 4 or 8 bytes: no conversion, so NaN
// payloads and signed zeros survive); strides may be zero or negative; rank 0 copies one
// element. Never allocates, needs no workspace; returns cudaErrorInvalidValue for a rank above
// kStridedCopyMaxRank, an unsupported element size, a negative extent or null pointers with
// elements to copy, else the launch's error. Example:
//   StridedCopyArgs a{.src = x.data(), .dst = d_contiguous, .rank = 3, .element_bytes = 4};
//   for (int d = 0; d < 3; ++d) { a.shape[d] = x.shape()[d]; a.strides[d] = x.strides()[d]; }
//   cudaError_t e = launch_strided_copy(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

inline constexpr int kStridedCopyMaxRank = 4;

struct StridedCopyArgs {
  const void* src = nullptr;  // address of element (0, ..., 0)
  void* dst = nullptr;        // contiguous, row-major
  int rank = 0;
  std::int64_t shape[kStridedCopyMaxRank] = {};
  std::int64_t strides[kStridedCopyMaxRank] = {};  // in elements
  int element_bytes = 4;      // 2, 4 or 8
};

cudaError_t launch_strided_copy(const StridedCopyArgs& args, cudaStream_t stream);

}  // namespace pararnn::kernels
