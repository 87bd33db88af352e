// Facts shared by every CUDA launcher of pararnn::kernels, compilable by the host compiler alone
// (only <cuda_runtime_api.h> types: cudaError_t, cudaStream_t).
//
// Guarantees: every launcher takes a stream and, where it needs scratch memory, a caller-provided
// workspace whose size a `*_workspace_bytes` function states; it never allocates, never
// synchronises, and returns the first error (argument checks as cudaErrorInvalidValue, then
// cudaGetLastError() after its launches). `ComputeOf<StorageT>` is the device twin of
// pararnn::ComputeOf from core/dtype.hpp (which pulls Eigen and so stays out of .cu files); the
// kernel tests assert that the two agree. The half storage types are CUDA's `__half` and
// `__nv_bfloat16` (the bit layouts of Eigen::half and Eigen::bfloat16 on the host; their headers
// compile with the host compiler too). Example:
//   using C = pararnn::kernels::ComputeOf<float>;  // float
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pararnn::kernels {

template <class StorageT>
struct StorageCompute;
template <>
struct StorageCompute<float> {
  using type = float;
};
template <>
struct StorageCompute<double> {
  using type = double;
};
// Half storage types (f16, bf16) compute in float.
template <>
struct StorageCompute<__half> {
  using type = float;
};
template <>
struct StorageCompute<__nv_bfloat16> {
  using type = float;
};

template <class StorageT>
using ComputeOf = typename StorageCompute<StorageT>::type;

// The time split of a backward's per-step VJP kernels (dense_vjp.hpp, m2rnn.hpp): each of
// `units` independent sequences (chains, batch rows) is cut into vjp_chunks(units, T) chunks of
// vjp_chunk_steps(units, T) consecutive steps (the last one shorter), one thread each, so that
// about kVjpMaxThreads threads run and no chunk is shorter than kVjpMinSteps steps (unless T
// is); each (unit, chunk) item writes its own fixed-order partial sums.
inline constexpr std::int64_t kVjpMaxThreads = 8192;
inline constexpr std::int64_t kVjpMinSteps = 16;
constexpr std::int64_t vjp_chunks(std::int64_t units, std::int64_t time) {
  if (units <= 0 || time <= 0) return 0;
  const std::int64_t by_threads = kVjpMaxThreads / units > 1 ? kVjpMaxThreads / units : 1;
  const std::int64_t by_steps = (time + kVjpMinSteps - 1) / kVjpMinSteps;
  return by_threads < by_steps ? by_threads : by_steps;
}
constexpr std::int64_t vjp_chunk_steps(std::int64_t units, std::int64_t time) {
  const std::int64_t chunks = vjp_chunks(units, time);
  return chunks == 0 ? 0 : (time + chunks - 1) / chunks;
}
// The threads of a launch over units · vjp_chunks items (a grid-stride loop beyond the cap).
constexpr std::int64_t vjp_threads(std::int64_t units, std::int64_t time) {
  const std::int64_t items = units * vjp_chunks(units, time);
  return items < kVjpMaxThreads ? items : kVjpMaxThreads;
}

// Workspace sections are aligned to this many bytes; pass a workspace at least this aligned
// (cudaMalloc's pointers are).
inline constexpr std::size_t kWorkspaceAlignment = 256;

}  // namespace pararnn::kernels
