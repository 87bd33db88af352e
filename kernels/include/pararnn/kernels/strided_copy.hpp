// Gathers a strided device view into a contiguous row-major array: how the CUDA backend makes a
// device input of any strides (permuted, time-skipped, broadcast) contiguous once, at the
// boundary, before the input GEMM. And the reverse at the output boundary: launch_strided_store
// writes a contiguous array into a caller's strided device view, converting to its dtype
// (the *_into entry points of solver.hpp and training.hpp).
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

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

inline constexpr int kStridedCopyMaxRank = 6;  // RWKV-7's trajectory (B, T, H, d, d) is 5-D

struct StridedCopyArgs {
  const void* src = nullptr;  // address of element (0, ..., 0)
  void* dst = nullptr;        // contiguous, row-major
  int rank = 0;
  std::int64_t shape[kStridedCopyMaxRank] = {};
  std::int64_t strides[kStridedCopyMaxRank] = {};  // in elements
  int element_bytes = 4;      // 2, 4 or 8
};

cudaError_t launch_strided_copy(const StridedCopyArgs& args, cudaStream_t stream);

// The floating element types a store reads and writes.
enum class StoreType : std::uint8_t { f64, f32, f16, bf16 };

// Guarantees: the element of `dst` at Σ_d index_d · strides[d] elements is element i of `src`
// (contiguous, row-major over `shape`), as raw bits when the two types are equal, else converted:
// f32 -> f16 / bf16 round to nearest even (__float2half_rn, __float2bfloat16_rn), f64 -> f32
// rounds to nearest, widening is exact. f64 -> f16 / bf16 (two roundings) is refused. The caller
// guarantees that no two indices of `dst` share an address (the *_into functions check it).
// Never allocates; cudaErrorInvalidValue for a rank above kStridedCopyMaxRank, a negative extent,
// a refused conversion or null pointers with elements to store, else the launch's error.
struct StridedStoreArgs {
  const void* src = nullptr;  // contiguous, row-major
  StoreType src_type = StoreType::f32;
  void* dst = nullptr;  // address of element (0, ..., 0)
  StoreType dst_type = StoreType::f32;
  int rank = 0;
  std::int64_t shape[kStridedCopyMaxRank] = {};
  std::int64_t strides[kStridedCopyMaxRank] = {};  // of dst, in elements
};

cudaError_t launch_strided_store(const StridedStoreArgs& args, cudaStream_t stream);

// Clamps `n` contiguous f32 or f64 values in place to [−cap, cap], cap rounded once to their type
// (v < −cap ? −cap : cap < v ? cap : v, as std::clamp: a NaN stays NaN). On values widened exactly
// from the storage dtype this is the host's clamp in double then one rounding, bit for bit: how
// the CUDA backend clamps recurrent entries it reads on the device (App. C.1). Never allocates;
// cudaErrorInvalidValue for another type, a negative n, a null pointer with values or a cap that
// is not positive, else the launch's error.
cudaError_t launch_clamp_abs(StoreType type, void* data, std::int64_t n, double cap, cudaStream_t stream);

// Writes `n` gradient values summed in double into a parameter's storage on the device, as the
// host rounds a gradient (solver common.cpp gradient_tensor): f64 as is, f32 rounded once,
// f16 / bf16 rounded to f32 first and then to the half type (the compute type, then the storage
// dtype: two roundings, bit for bit the host's for every value but NaN, which the half types
// store as CUDA's canonical NaN, as launch_strided_store does). With `raw` set (the parameter's raw values,
// `raw_type`, contiguous like src), element i is +0.0 where |raw[i]| > cap (the App. C.1 clamp
// mask: a clipped entry has no gradient; a NaN raw value is never clipped, as on the host).
// Never allocates; cudaErrorInvalidValue for a negative n, null pointers with values, or a raw
// source with a negative (or NaN) cap, else the launch's error. Example (∇ of a bf16 bias):
//   launch_gradient_store({.src = d_sum, .dst = grad_b, .dst_type = StoreType::bf16, .n = 768}, s);
struct GradientStoreArgs {
  const double* src = nullptr;
  void* dst = nullptr;
  StoreType dst_type = StoreType::f32;
  std::int64_t n = 0;
  const void* raw = nullptr;  // the clamp mask's source, or null for none
  StoreType raw_type = StoreType::f32;
  double cap = 0;
};

cudaError_t launch_gradient_store(const GradientStoreArgs& args, cudaStream_t stream);

// Writes `bytes` bytes of host memory at `src` to `dst` on the device as kernel arguments: each
// launch carries up to kArgumentChunkBytes of them in its parameters, copied when the launch is
// queued, so `src` may be freed at once and a CUDA graph captured from the stream holds the
// values themselves (a captured copy from pageable host memory would read that memory again at
// every replay). How the CUDA backend uploads a solve's small host values (per-channel values,
// the bias row) while its stream is being captured. Never allocates; cudaErrorInvalidValue for
// null pointers with bytes to write, else the launches' error.
inline constexpr std::size_t kArgumentChunkBytes = 2048;
cudaError_t launch_write_argument_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

}  // namespace pararnn::kernels
