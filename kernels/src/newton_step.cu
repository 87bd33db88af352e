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

  __device__ __forceinline__ void load(int64_t b, int64_t t, int64_t c0, bool restart,
                                       cells::AffineElement<S, T> (&e)[V]) {
    const int64_t D = a.channels;
    const int64_t bt = b * a.time + t;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = c0 + v;
      T rec[RC], wx[G], h_prev[S], h_new[S], jac[S * S];
#pragma unroll
      for (int k = 0; k < RC; ++k) rec[k] = a.recurrent[k * D + c];
#pragma unroll
      for (int g = 0; g < G; ++g) wx[g] = a.wx[bt * G * D + g * D + c];
      if (restart) {
        const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
        for (int s = 0; s < S; ++s) h_prev[s] = a.h0 != nullptr ? a.h0[(row * S + s) * D + c] : T(0);
      } else {
#pragma unroll
        for (int s = 0; s < S; ++s) h_prev[s] = a.H_in[((bt - 1) * S + s) * D + c];
      }
      CellMath::step(rec, wx, h_prev, h_new, jac);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const T f = h_new[s] - a.H_in[(bt * S + s) * D + c];
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
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int64_t i = (bt * S + s) * D + c0 + v;
        a.H_out[i] = a.H_in[i] + omega * x[v][s];
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

// One channel per lane: the cell step per element already holds G + RC + S + S² values.
constexpr int kChannelsPerLane = 1;

template <class CellMath, class T>
int64_t step_chunk() {
  return scan_default_chunk(CellMath::kSlots, ScanAlgorithm::single_pass);
}

}  // namespace
}  // namespace detail

template <class CellMath, class T>
std::size_t newton_step_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels) {
  if (batch <= 0 || time <= 0 || channels <= 0) return 0;
  return detail::single_pass_layout(CellMath::kSlots, sizeof(T), detail::kChannelsPerLane, batch, time, channels,
                                    detail::step_chunk<CellMath, T>())
      .total;
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
  const detail::NewtonStepSource<CellMath, T, detail::kChannelsPerLane> source{a, static_cast<T>(a.omega), T(0)};
  return detail::run_single_pass<S, T, detail::kChannelsPerLane, false>(source, a.head, a.batch, a.time,
                                                                        a.channels, detail::step_chunk<CellMath, T>(),
                                                                        workspace, workspace_bytes, stream);
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
