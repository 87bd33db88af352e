// Device side of launch_newton_step (kernels/newton_step.hpp): the element source of one fused
// Newton iteration for the single-pass scan of scan.cuh, and `run_newton_step`, its launch at a
// given register shape. Included by newton_step.cu (the production shape) and by the benchmark
// that measures the shapes (bench/shape_sweep.cu), so both run the same code.
//
// Per thread the source keeps, for its run of consecutive steps u = 0 .. kSteps−1, the iterate
// entering the step (the value H_in[t] or, from the guess, f(h̃_t, x_t)) in shared memory after
// the scan's group slots (kSharedPerGroup; registers would spill at 512 threads): step u + 1
// takes its h_prev from step u (a register), and the store of step u writes that value + ω δ_t
// without reading H_in again. Only the first step of a run reads H_in[t − 1] (or, from the
// guess, evaluates the guess at t − 1 once more).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "nan_max_reduce.cuh"
#include "pararnn/kernels/newton_step.hpp"
#include "scan.cuh"

namespace pararnn::kernels::detail {

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

template <class CellMath, class T, int V, int kSteps, bool kFromGuess, bool kResult = false>
struct NewtonStepSource {
  static constexpr int S = CellMath::kSlots;
  static constexpr int G = CellMath::kGates;
  static constexpr int RC = CellMath::kRecurrent + CellMath::kConstants;
  NewtonStepArgs<T> a;
  T omega;
  T local_max;             // this thread's max|F|, reduced in finish()
  T rec[RC][V];            // the channel values, loaded by step 0
  T h_last[S][V];          // the iterate entering the step loaded last (h_prev of the next)
  // Shared memory per time group after the scan's slots: the iterate of each step of the run.
  static constexpr std::size_t kSharedPerGroup = static_cast<std::size_t>(kSteps) * S * 32 * V * sizeof(T);
  // Where step u's slot s of this thread's iterate is kept (lanes contiguous: no bank conflict).
  __device__ __forceinline__ T* kept(int u, int s) const {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const std::size_t slots = static_cast<std::size_t>(blockDim.y) * (S * S + S) * 32 * V;  // the scan's
    T* base = reinterpret_cast<T*>(smem_raw) + slots;
    return base + ((static_cast<std::size_t>(u * S + s) * blockDim.y + threadIdx.y) * 32 + threadIdx.x) * V;
  }
  // With a.max_abs_result: this thread's max|F(H_out)| over its steps after the first, the
  // result at its first and at its latest stored step, and where its first step is.
  T result_max = T(0);
  T out_first[S][V] = {}, out_prev[S][V] = {};
  int64_t first_b = 0, first_t = -1, first_c0 = 0;

  // The launch does nothing (NewtonStepArgs::skip).
  __device__ __forceinline__ bool skipped() const { return a.skip != nullptr && *a.skip != 0.0; }
  __device__ __forceinline__ bool is_head(int64_t t) const {
    return t == 0 || (a.head != nullptr && a.head[t] != 0);
  }
  // h̃ at a head: h0 of its row (zeros without h0).
  __device__ __forceinline__ void initial_state(int64_t b, int64_t t, int64_t c0, T (&h)[S][V]) const {
    const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (a.h0 != nullptr) {
        const Pack<T, V> p = load_pack<T, V>(a.h0 + (row * S + s) * a.channels + c0);
#pragma unroll
        for (int v = 0; v < V; ++v) h[s][v] = p.v[v];
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) h[s][v] = T(0);
      }
    }
  }
  __device__ __forceinline__ void load_gates(int64_t bt, int64_t c0, T (&w)[G][V]) const {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const Pack<T, V> p = load_pack<T, V>(a.wx + bt * G * a.channels + g * a.channels + c0);
#pragma unroll
      for (int v = 0; v < V; ++v) w[g][v] = p.v[v];
    }
  }
  __device__ __forceinline__ void load_iterate(int64_t bt, int64_t c0, T (&h)[S][V]) const {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const Pack<T, V> p = load_pack<T, V>(a.H_in + (bt * S + s) * a.channels + c0);
#pragma unroll
      for (int v = 0; v < V; ++v) h[s][v] = p.v[v];
    }
  }
  // h_new = f(from, x) for the V channels from the kept channel values (no Jacobian).
  __device__ __forceinline__ void apply_cell(const T (&w)[G][V], const T (&from)[S][V], T (&h_new)[S][V]) const {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      T r[RC], wv[G], hp[S], hn[S];
#pragma unroll
      for (int k = 0; k < RC; ++k) r[k] = rec[k][v];
#pragma unroll
      for (int g = 0; g < G; ++g) wv[g] = w[g][v];
#pragma unroll
      for (int s = 0; s < S; ++s) hp[s] = from[s][v];
      CellMath::step(r, wv, hp, hn, static_cast<T*>(nullptr));
#pragma unroll
      for (int s = 0; s < S; ++s) h_new[s][v] = hn[s];
    }
  }
  // The App. A guess at t: f(h̃_t, x_t), h̃_t = h0 at a head, else 0.
  __device__ __forceinline__ void guess_at(int64_t b, int64_t t, int64_t c0, T (&h)[S][V]) const {
    T w[G][V], from[S][V];
    load_gates(b * a.time + t, c0, w);
    if (is_head(t)) {
      initial_state(b, t, c0, from);
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int v = 0; v < V; ++v) from[s][v] = T(0);
    }
    apply_cell(w, from, h);
  }

  __device__ __forceinline__ void load(int64_t b, int64_t t, int64_t c0, bool restart, int u,
                                       cells::AffineElement<S, T> (&e)[V]) {
    const int64_t bt = b * a.time + t;
    if (u == 0) {
#pragma unroll
      for (int k = 0; k < RC; ++k) {
        const Pack<T, V> p = load_pack<T, V>(a.recurrent + k * a.channels + c0);
#pragma unroll
        for (int v = 0; v < V; ++v) rec[k][v] = p.v[v];
      }
    }
    T w[G][V], hp[S][V], h_cur[S][V];
    if constexpr (kFromGuess) {
      guess_at(b, t, c0, h_cur);
    } else {
      load_iterate(bt, c0, h_cur);
    }
    load_gates(bt, c0, w);
    if (restart) {
      initial_state(b, t, c0, hp);
    } else if (u > 0) {
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int v = 0; v < V; ++v) hp[s][v] = h_last[s][v];
    } else if constexpr (kFromGuess) {
      guess_at(b, t - 1, c0, hp);
    } else {
      load_iterate(bt - 1, c0, hp);
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      T r[RC], wv[G], h_prev[S], h_new[S], jac[S * S];
#pragma unroll
      for (int k = 0; k < RC; ++k) r[k] = rec[k][v];
#pragma unroll
      for (int g = 0; g < G; ++g) wv[g] = w[g][v];
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = hp[s][v];
      CellMath::step(r, wv, h_prev, h_new, jac);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const T f = h_new[s] - h_cur[s][v];
        e[v].r[s] = f;
        local_max = nan_max(local_max, fabs(f));
      }
#pragma unroll
      for (int q = 0; q < S * S; ++q) e[v].J[q] = restart ? T(0) : jac[q];
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
      Pack<T, V> p;
#pragma unroll
      for (int v = 0; v < V; ++v) p.v[v] = h_last[s][v] = h_cur[s][v];
      *reinterpret_cast<Pack<T, V>*>(kept(u, s)) = p;
    }
  }

  // F of the result at t into result_max: f(from, x_t) − out, x_t read again (from L2: this
  // block read it moments ago).
  __device__ __forceinline__ void result_residual(int64_t b, int64_t t, int64_t c0, const T (&from)[S][V],
                                                  const T (&out)[S][V]) {
    T w[G][V], hn[S][V];
    load_gates(b * a.time + t, c0, w);
    apply_cell(w, from, hn);
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int v = 0; v < V; ++v) result_max = nan_max(result_max, fabs(hn[s][v] - out[s][v]));
  }

  __device__ __forceinline__ void store(int64_t b, int64_t t, int64_t c0, int u, const T (&x)[V][S]) {
    const int64_t bt = b * a.time + t;
    T out[S][V];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const Pack<T, V> h = *reinterpret_cast<const Pack<T, V>*>(kept(u, s));
      Pack<T, V> p;
#pragma unroll
      for (int v = 0; v < V; ++v) p.v[v] = out[s][v] = h.v[v] + omega * x[v][s];
      store_pack<T, V>(a.H_out + (bt * S + s) * a.channels + c0, p);
    }
    if constexpr (!kResult) return;
    if (u == 0) {
      first_b = b;
      first_t = t;
      first_c0 = c0;
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int v = 0; v < V; ++v) out_first[s][v] = out[s][v];
    } else {
      T from[S][V];
      if (is_head(t)) {
        initial_state(b, t, c0, from);
      } else {
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
          for (int v = 0; v < V; ++v) from[s][v] = out_prev[s][v];
      }
      result_residual(b, t, c0, from, out);
    }
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int v = 0; v < V; ++v) out_prev[s][v] = out[s][v];
  }

  __device__ __forceinline__ void finish() {
    T m = local_max;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if ((threadIdx.x & 31) == 0) {
      using Bits = typename BitsOf<T>::type;
      atomicMax(reinterpret_cast<Bits*>(a.max_abs_residual), bits_of(m));
    }
    if constexpr (!kResult) return;
    // The first step of a run after a block's first group: its h_prev is the last result of the
    // group before (the same lane), handed over in the scan's shared memory (free again after a
    // barrier). A block's first step is left to the caller (newton_step.hpp).
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* s_last = reinterpret_cast<T*>(smem_raw);
    constexpr int kWidth = 32 * V;
    const int lane = static_cast<int>(threadIdx.x), grp = static_cast<int>(threadIdx.y);
    __syncthreads();
    if (first_t >= 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        Pack<T, V> p;
#pragma unroll
        for (int v = 0; v < V; ++v) p.v[v] = out_prev[s][v];
        *reinterpret_cast<Pack<T, V>*>(s_last + (grp * S + s) * kWidth + lane * V) = p;
      }
    }
    __syncthreads();
    if (first_t >= 0 && grp > 0) {
      T from[S][V];
      if (is_head(first_t)) {
        initial_state(first_b, first_t, first_c0, from);
      } else {
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const Pack<T, V> p =
              *reinterpret_cast<const Pack<T, V>*>(s_last + ((grp - 1) * S + s) * kWidth + lane * V);
#pragma unroll
          for (int v = 0; v < V; ++v) from[s][v] = p.v[v];
        }
      }
      result_residual(first_b, first_t, first_c0, from, out_first);
    }
    T r = result_max;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) r = nan_max(r, __shfl_xor_sync(0xffffffffu, r, offset));
    if (lane == 0) {
      using Bits = typename BitsOf<T>::type;
      atomicMax(reinterpret_cast<Bits*>(a.max_abs_result), bits_of(r));
    }
  }
};

// The chunk of a shape: every thread of every group full.
template <class Shape>
constexpr int64_t shape_chunk() {
  return static_cast<int64_t>(Shape::kSteps) * Shape::kGroups;
}

template <class T>
bool newton_step_aligned(const NewtonStepArgs<T>& a, std::size_t bytes) {
  return aligned_to(a.wx, bytes) && aligned_to(a.recurrent, bytes) &&
         (a.from_guess || aligned_to(a.H_in, bytes)) && aligned_to(a.H_out, bytes) &&
         (a.h0 == nullptr || aligned_to(a.h0, bytes));
}

// Workspace of one launch at (V, Shape).
template <class CellMath, class T, int V, class Shape>
std::size_t newton_step_shape_bytes(int64_t batch, int64_t time, int64_t channels) {
  return single_pass_layout(CellMath::kSlots, sizeof(T), V, batch, time, channels, shape_chunk<Shape>()).total;
}

// One fused iteration at (V channels per lane, Shape); the caller checked the arguments, that
// V divides the channels and that the pointers are aligned to V values.
template <class CellMath, class T, int V, class Shape>
cudaError_t run_newton_step(const NewtonStepArgs<T>& a, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream) {
  constexpr int S = CellMath::kSlots;
  const int64_t chunk = shape_chunk<Shape>();
  const auto run = [&](auto from_guess, auto result) {
    const NewtonStepSource<CellMath, T, V, Shape::kSteps, decltype(from_guess)::value, decltype(result)::value> source{
        a, static_cast<T>(a.omega), T(0), {}, {}};
    return run_single_pass<S, T, V, false, Shape>(source, a.head, a.batch, a.time, a.channels, chunk, workspace,
                                                  workspace_bytes, stream);
  };
  const bool result = a.max_abs_result != nullptr;
  if (a.from_guess) return result ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
  return result ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
}

}  // namespace pararnn::kernels::detail
