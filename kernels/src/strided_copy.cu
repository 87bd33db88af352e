// launch_strided_copy (kernels/strided_copy.hpp): a grid-stride loop over the destination, so
// stores are coalesced; the loads follow the source's strides. launch_strided_store: the same loop
// over the contiguous source (loads coalesced), the stores following the destination's strides;
// a row-major contiguous destination takes a loop without index arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pararnn/kernels/strided_copy.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kCopyThreads = 256;
constexpr int kCopyMaxBlocks = 4096;

// The offset, in elements, of row-major element i of `shape` in a view of `strides`.
__device__ __forceinline__ int64_t strided_offset(int64_t i, int rank, const int64_t* shape, const int64_t* strides) {
  int64_t rest = i, offset = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = rest / shape[d];
    offset += (rest - q * shape[d]) * strides[d];
    rest = q;
  }
  return offset;
}

// The element count of a launch's shape (false: a rank or an extent out of range).
bool element_count(int rank, const int64_t* shape, int64_t& n) {
  if (rank < 0 || rank > kStridedCopyMaxRank) return false;
  n = 1;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) return false;
    n *= shape[d];
  }
  return true;
}

int copy_blocks(int64_t n) {
  const int64_t wanted = (n + kCopyThreads - 1) / kCopyThreads;
  return static_cast<int>(wanted < kCopyMaxBlocks ? wanted : kCopyMaxBlocks);
}

template <class Bits>
__global__ void __launch_bounds__(kCopyThreads)
    strided_copy_kernel(StridedCopyArgs a, int64_t n) {
  const Bits* src = static_cast<const Bits*>(a.src);
  Bits* dst = static_cast<Bits*>(a.dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[strided_offset(i, a.rank, a.shape, a.strides)];
}

// One element converted (the pairs store_converts refuses are instantiated, never launched).
template <class To, class From>
__device__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, double>) {
    if constexpr (std::is_same_v<From, float>) return static_cast<double>(v);
    else if constexpr (std::is_same_v<From, __half>) return static_cast<double>(__half2float(v));
    else return static_cast<double>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, float>) {
    if constexpr (std::is_same_v<From, double>) return __double2float_rn(v);
    else if constexpr (std::is_same_v<From, __half>) return __half2float(v);
    else return __bfloat162float(v);
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, __nv_bfloat16>) return __float2half_rn(__bfloat162float(v));
    else return __float2half_rn(static_cast<float>(v));
  } else {
    if constexpr (std::is_same_v<From, __half>) return __float2bfloat16_rn(__half2float(v));
    else return __float2bfloat16_rn(static_cast<float>(v));
  }
}

template <class SrcT, class DstT>
__global__ void __launch_bounds__(kCopyThreads)
    strided_store_kernel(StridedStoreArgs a, int64_t n) {
  const SrcT* src = static_cast<const SrcT*>(a.src);
  DstT* dst = static_cast<DstT*>(a.dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[strided_offset(i, a.rank, a.shape, a.strides)] = convert<DstT>(src[i]);
}

// A destination that is row-major contiguous (the common case: a torch tensor of the result's
// shape) takes no index arithmetic: each block converts tiles of kContiguousPer · kCopyThreads
// consecutive elements, every load and store coalesced, kContiguousPer loads in flight per
// thread. The same element mapping and conversion as strided_store_kernel, so the same bits
// (at S1, 1.3e8 f32 -> bf16 values, the strided kernel's three 64-bit divisions per element per
// dimension made it compute-bound: 0.94 ms on the H100, issue 55).
constexpr int kContiguousPer = 4;
constexpr int kContiguousMaxBlocks = 8192;

bool row_major(int rank, const int64_t* shape, const int64_t* strides) {
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

int contiguous_blocks(int64_t n) {
  const int64_t tile = static_cast<int64_t>(kCopyThreads) * kContiguousPer;
  const int64_t wanted = (n + tile - 1) / tile;
  return static_cast<int>(wanted < kContiguousMaxBlocks ? wanted : kContiguousMaxBlocks);
}

template <class SrcT, class DstT>
__global__ void __launch_bounds__(kCopyThreads)
    contiguous_store_kernel(const SrcT* __restrict__ src, DstT* __restrict__ dst, int64_t n) {
  const int64_t tile = static_cast<int64_t>(kCopyThreads) * kContiguousPer;
  for (int64_t t0 = static_cast<int64_t>(blockIdx.x) * tile; t0 < n; t0 += static_cast<int64_t>(gridDim.x) * tile) {
    SrcT v[kContiguousPer];
#pragma unroll
    for (int k = 0; k < kContiguousPer; ++k) {
      const int64_t i = t0 + k * kCopyThreads + threadIdx.x;
      if (i < n) v[k] = src[i];
    }
#pragma unroll
    for (int k = 0; k < kContiguousPer; ++k) {
      const int64_t i = t0 + k * kCopyThreads + threadIdx.x;
      if (i < n) dst[i] = convert<DstT>(v[k]);
    }
  }
}

template <class SrcT, class DstT>
void launch_store_to(const StridedStoreArgs& a, int64_t n, int blocks, cudaStream_t stream) {
  if (row_major(a.rank, a.shape, a.strides))
    contiguous_store_kernel<SrcT, DstT><<<contiguous_blocks(n), kCopyThreads, 0, stream>>>(
        static_cast<const SrcT*>(a.src), static_cast<DstT*>(a.dst), n);
  else
    strided_store_kernel<SrcT, DstT><<<blocks, kCopyThreads, 0, stream>>>(a, n);
}

template <class SrcT>
cudaError_t launch_store_from(const StridedStoreArgs& a, int64_t n, int blocks, cudaStream_t stream) {
  switch (a.dst_type) {
    case StoreType::f64: launch_store_to<SrcT, double>(a, n, blocks, stream); break;
    case StoreType::f32: launch_store_to<SrcT, float>(a, n, blocks, stream); break;
    case StoreType::f16: launch_store_to<SrcT, __half>(a, n, blocks, stream); break;
    case StoreType::bf16: launch_store_to<SrcT, __nv_bfloat16>(a, n, blocks, stream); break;
  }
  return cudaGetLastError();
}

template <class T>
__global__ void __launch_bounds__(kCopyThreads) clamp_abs_kernel(T* data, int64_t n, T cap) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T v = data[i];
    data[i] = v < -cap ? -cap : (cap < v ? cap : v);
  }
}

// A raw value widened exactly to double.
template <class T>
__device__ double widened(const void* data, int64_t i) {
  return convert<double>(static_cast<const T*>(data)[i]);
}

__device__ double raw_value(const GradientStoreArgs& a, int64_t i) {
  switch (a.raw_type) {
    case StoreType::f64: return widened<double>(a.raw, i);
    case StoreType::f32: return widened<float>(a.raw, i);
    case StoreType::f16: return widened<__half>(a.raw, i);
    default: return widened<__nv_bfloat16>(a.raw, i);
  }
}

// The host's gradient rounding: double -> the compute type (f64 or f32) -> the storage type.
template <class DstT>
__global__ void __launch_bounds__(kCopyThreads) gradient_store_kernel(GradientStoreArgs a) {
  DstT* dst = static_cast<DstT*>(a.dst);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double g = a.raw != nullptr && fabs(raw_value(a, i)) > a.cap ? 0.0 : a.src[i];
    if constexpr (std::is_same_v<DstT, double>) {
      dst[i] = g;
    } else {
      dst[i] = convert<DstT>(__double2float_rn(g));
    }
  }
}

// The conversions a store performs: identity, exact widening, and one rounding from f32 or f64.
bool store_converts(StoreType from, StoreType to) {
  if (from == to) return true;
  const bool half_to = to == StoreType::f16 || to == StoreType::bf16;
  const bool half_from = from == StoreType::f16 || from == StoreType::bf16;
  if (half_to) return from == StoreType::f32;  // f64 -> half would round twice; half -> half is not one rounding
  if (to == StoreType::f32) return true;       // f64 rounds once; halves widen exactly
  return from == StoreType::f32 || half_from;  // to f64: exact
}

}  // namespace

cudaError_t launch_strided_store(const StridedStoreArgs& a, cudaStream_t stream) {
  int64_t n = 0;
  if (!element_count(a.rank, a.shape, n) || !store_converts(a.src_type, a.dst_type)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (a.src == nullptr || a.dst == nullptr) return cudaErrorInvalidValue;
  const int blocks = copy_blocks(n);
  switch (a.src_type) {
    case StoreType::f64: return launch_store_from<double>(a, n, blocks, stream);
    case StoreType::f32: return launch_store_from<float>(a, n, blocks, stream);
    case StoreType::f16: return launch_store_from<__half>(a, n, blocks, stream);
    case StoreType::bf16: return launch_store_from<__nv_bfloat16>(a, n, blocks, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_strided_copy(const StridedCopyArgs& a, cudaStream_t stream) {
  int64_t n = 0;
  if (!element_count(a.rank, a.shape, n) || (a.element_bytes != 2 && a.element_bytes != 4 && a.element_bytes != 8))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (a.src == nullptr || a.dst == nullptr) return cudaErrorInvalidValue;
  const int blocks = copy_blocks(n);
  switch (a.element_bytes) {
    case 2: strided_copy_kernel<std::uint16_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
    case 4: strided_copy_kernel<std::uint32_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
    default: strided_copy_kernel<std::uint64_t><<<blocks, kCopyThreads, 0, stream>>>(a, n); break;
  }
  return cudaGetLastError();
}

cudaError_t launch_clamp_abs(StoreType type, void* data, int64_t n, double cap, cudaStream_t stream) {
  if (n < 0 || (n > 0 && data == nullptr) || !(cap > 0)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case StoreType::f64:
      clamp_abs_kernel<double><<<copy_blocks(n), kCopyThreads, 0, stream>>>(static_cast<double*>(data), n, cap);
      break;
    case StoreType::f32:
      clamp_abs_kernel<float><<<copy_blocks(n), kCopyThreads, 0, stream>>>(static_cast<float*>(data), n,
                                                                            static_cast<float>(cap));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_gradient_store(const GradientStoreArgs& a, cudaStream_t stream) {
  if (a.n < 0 || (a.n > 0 && (a.src == nullptr || a.dst == nullptr)) || (a.raw != nullptr && !(a.cap >= 0)))
    return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  const int blocks = copy_blocks(a.n);
  switch (a.dst_type) {
    case StoreType::f64: gradient_store_kernel<double><<<blocks, kCopyThreads, 0, stream>>>(a); break;
    case StoreType::f32: gradient_store_kernel<float><<<blocks, kCopyThreads, 0, stream>>>(a); break;
    case StoreType::f16: gradient_store_kernel<__half><<<blocks, kCopyThreads, 0, stream>>>(a); break;
    case StoreType::bf16: gradient_store_kernel<__nv_bfloat16><<<blocks, kCopyThreads, 0, stream>>>(a); break;
  }
  return cudaGetLastError();
}

namespace {

struct ArgumentChunk {
  unsigned char bytes[kArgumentChunkBytes];
};

__global__ void write_argument_bytes_kernel(unsigned char* dst, ArgumentChunk chunk, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = chunk.bytes[i];
}

}  // namespace

cudaError_t launch_write_argument_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0 && (dst == nullptr || src == nullptr)) return cudaErrorInvalidValue;
  for (std::size_t first = 0; first < bytes; first += kArgumentChunkBytes) {
    const std::size_t n = bytes - first < kArgumentChunkBytes ? bytes - first : kArgumentChunkBytes;
    ArgumentChunk chunk{};
    memcpy(chunk.bytes, static_cast<const unsigned char*>(src) + first, n);
    const unsigned threads = 256, blocks = static_cast<unsigned>((n + threads - 1) / threads);
    write_argument_bytes_kernel<<<blocks, threads, 0, stream>>>(static_cast<unsigned char*>(dst) + first, chunk,
                                                                static_cast<unsigned>(n));
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace pararnn::kernels
