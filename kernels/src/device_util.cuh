// Device helpers shared by the kernels of pararnn::kernels (nvcc only).
//
// Pack<T, V>: V values of T moved as one aligned vector (16-byte accesses for V·sizeof(T) = 16);
// nan_max: a max in which NaN ranks above every number, so it propagates through reductions;
// align_up: workspace section offsets.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pararnn::kernels::detail {

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

// Global stores go through the st.global.cg intrinsics for the 16-byte cases: a plain vector
// or struct store was seen split into four scalar stores (nvcc 13.0, PTX of the scan kernels).
template <class T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& x) {
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    __stcg(reinterpret_cast<float4*>(p), make_float4(x.v[0], x.v[1], x.v[2], x.v[3]));
  } else if constexpr (V == 2 && std::is_same_v<T, double>) {
    __stcg(reinterpret_cast<double2*>(p), make_double2(x.v[0], x.v[1]));
  } else {
    *reinterpret_cast<Pack<T, V>*>(p) = x;
  }
}

// Loads through L2 only (ld.global.cg): values another block published in this launch.
template <class T, int V>
__device__ __forceinline__ Pack<T, V> load_pack_cg(const T* p) {
  Pack<T, V> x;
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    const float4 w = __ldcg(reinterpret_cast<const float4*>(p));
    x.v[0] = w.x;
    x.v[1] = w.y;
    x.v[2] = w.z;
    x.v[3] = w.w;
  } else if constexpr (V == 2 && std::is_same_v<T, double>) {
    const double2 w = __ldcg(reinterpret_cast<const double2*>(p));
    x.v[0] = w.x;
    x.v[1] = w.y;
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) x.v[v] = __ldcg(p + v);
  }
  return x;
}

template <class T>
__device__ __forceinline__ T nan_max(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

__host__ __device__ constexpr std::size_t align_up(std::size_t n, std::size_t a) {
  return (n + a - 1) / a * a;
}

}  // namespace pararnn::kernels::detail
