// launch_newton_step (kernels/newton_step.hpp): the single-pass scan of scan.cuh over elements
// computed from the cell (NewtonStepSource), H_out = H_in + ω δ in its store, max|F| by one
// atomic per warp on the value's bits (non-negative floats order as their bit patterns, and a
// NaN's bits rank above +inf, so NaN wins as detail::nan_max says).
#include <cuda_runtime.h>

#include <cstdint>

#include "nan_max_reduce.cuh"
#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/newton_step.hpp"
#include "scan.cuh"

namespace pararnn::kernels {
namespace detail {
namespace {

template <class T>
struct BitsOf;
template <>
struct BitsOf<float> {
  using type = unsigned int;
};
template <>
struct BitsOf<double> {
  using type = unsigned long long;
};

__device__ __forceinline__ unsigned int bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned long long bits_of(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(v));
}

template <class CellMath, class T, int V>
struct NewtonStepSource {
  static constexpr int S = CellMath::kSlots;
  static constexpr int G = CellMath::kGates;
  static constexpr int RC = CellMath::kRecurrent + CellMath::kConstants;
  NewtonStepArgs<T> a;
  T omega;
  T local_max;  // this thread's max|F|, reduced in finish()

  // V consecutive channels c0 .. c0+V−1 per lane, moved as one vector per row when V > 1
  // (the launcher picks V > 1 only when D is a multiple of V and every pointer is aligned).
  __device__ __forceinline__ void load(int64_t b, int64_t t, int64_t c0, bool restart,
                                       cells::AffineElement<S, T> (&e)[V]) {
    const int64_t D = a.channels;
    const int64_t bt = b * a.time + t;
    Pack<T, V> rec[RC], wx[G], hp[S], h[S];
#pragma unroll
    for (int k = 0; k < RC; ++k) rec[k] = load_pack<T, V>(a.recurrent + k * D + c0);
#pragma unroll
    for (int g = 0; g < G; ++g) wx[g] = load_pack<T, V>(a.wx + bt * G * D + g * D + c0);
    if (restart) {
      const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        if (a.h0 != nullptr) {
          hp[s] = load_pack<T, V>(a.h0 + (row * S + s) * D + c0);
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) hp[s].v[v] = T(0);
        }
      }
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s) hp[s] = load_pack<T, V>(a.H_in + ((bt - 1) * S + s) * D + c0);
    }
#pragma unroll
    for (int s = 0; s < S; ++s) h[s] = load_pack<T, V>(a.H_in + (bt * S + s) * D + c0);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      T r[RC], w[G], h_prev[S], h_new[S], jac[S * S];
#pragma unroll
      for (int k = 0; k < RC; ++k) r[k] = rec[k].v[v];
#pragma unroll
      for (int g = 0; g < G; ++g) w[g] = wx[g].v[v];
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = hp[s].v[v];
      CellMath::step(r, w, h_prev, h_new, jac);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const T f = h_new[s] - h[s].v[v];
        e[v].r[s] = f;
        local_max = nan_max(local_max, fabs(f));
      }
#pragma unroll
      for (int q = 0; q < S * S; ++q) e[v].J[q] = restart ? T(0) : jac[q];
    }
  }

  __device__ __forceinline__ void store(int64_t b, int64_t t, int64_t c0, const T (&x)[V][S]) {
    const int64_t D = a.channels;
    const int64_t bt = b * a.time + t;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int64_t i = (bt * S + s) * D + c0;
      const Pack<T, V> h = load_pack<T, V>(a.H_in + i);
      Pack<T, V> out;
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = h.v[v] + omega * x[v][s];
      store_pack<T, V>(a.H_out + i, out);
    }
  }

  __device__ __forceinline__ void finish() {
    T m = local_max;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if ((threadIdx.x & 31) == 0) {
      using Bits = typename BitsOf<T>::type;
      atomicMax(reinterpret_cast<Bits*>(a.max_abs_residual), bits_of(m));
    }
  }
};

// Channels per lane: the plain scan's choice (16-byte vectors for S <= 2, else one).
template <class CellMath, class T>
constexpr int kWideLanes = channel_vector_width<CellMath::kSlots, T>();

template <class T>
bool all_aligned(const NewtonStepArgs<T>& a, std::size_t bytes) {
  return aligned_to(a.wx, bytes) && aligned_to(a.recurrent, bytes) && aligned_to(a.H_in, bytes) &&
         aligned_to(a.H_out, bytes) && (a.h0 == nullptr || aligned_to(a.h0, bytes));
}

template <class CellMath, class T>
int64_t step_chunk() {
  return scan_default_chunk(CellMath::kSlots, ScanAlgorithm::single_pass);
}

}  // namespace
}  // namespace detail

template <class CellMath, class T>
std::size_t newton_step_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels) {
  if (batch <= 0 || time <= 0 || channels <= 0) return 0;
  const int64_t chunk = detail::step_chunk<CellMath, T>();
  const std::size_t narrow = detail::single_pass_layout(CellMath::kSlots, sizeof(T), 1, batch, time, channels, chunk).total;
  const std::size_t wide = detail::single_pass_layout(CellMath::kSlots, sizeof(T), detail::kWideLanes<CellMath, T>, batch,
                                                      time, channels, chunk).total;
  return narrow > wide ? narrow : wide;
}

template <class CellMath, class T>
cudaError_t launch_newton_step(const NewtonStepArgs<T>& a, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  if (a.wx == nullptr || a.recurrent == nullptr || a.H_in == nullptr || a.H_out == nullptr ||
      a.max_abs_residual == nullptr || a.H_in == a.H_out)
    return cudaErrorInvalidValue;
  if (cudaError_t e = cudaMemsetAsync(a.max_abs_residual, 0, sizeof(T), stream); e != cudaSuccess) return e;
  if (a.batch == 0 || a.time == 0 || a.channels == 0) return cudaSuccess;
  if (workspace == nullptr || !detail::aligned_to(workspace, 16)) return cudaErrorInvalidValue;
  constexpr int S = CellMath::kSlots;
  constexpr int kWide = detail::kWideLanes<CellMath, T>;
  const int64_t chunk = detail::step_chunk<CellMath, T>();
  if (kWide > 1 && a.channels % kWide == 0 && detail::all_aligned(a, sizeof(T) * kWide)) {
    const detail::NewtonStepSource<CellMath, T, kWide> source{a, static_cast<T>(a.omega), T(0)};
    return detail::run_single_pass<S, T, kWide, false>(source, a.head, a.batch, a.time, a.channels, chunk, workspace,
                                                       workspace_bytes, stream);
  }
  const detail::NewtonStepSource<CellMath, T, 1> source{a, static_cast<T>(a.omega), T(0)};
  return detail::run_single_pass<S, T, 1, false>(source, a.head, a.batch, a.time, a.channels, chunk, workspace,
                                                 workspace_bytes, stream);
}

#define PARARNN_INSTANTIATE_NEWTON_STEP(CELL, T)                                                            \
  template std::size_t newton_step_workspace_bytes<CELL, T>(std::int64_t, std::int64_t, std::int64_t); \
  template cudaError_t launch_newton_step<CELL, T>(const NewtonStepArgs<T>&, void*, std::size_t, cudaStream_t);
#define PARARNN_INSTANTIATE_NEWTON_STEP_CELL(kind, Math, label) \
  PARARNN_INSTANTIATE_NEWTON_STEP(cells::Math, float) PARARNN_INSTANTIATE_NEWTON_STEP(cells::Math, double)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_NEWTON_STEP_CELL)
#undef PARARNN_INSTANTIATE_NEWTON_STEP_CELL
#undef PARARNN_INSTANTIATE_NEWTON_STEP

}  // namespace pararnn::kernels
