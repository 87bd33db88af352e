// The kernel of launch_windowed_newton (kernels/windowed_newton.hpp: semantics, layouts, the
// residual maxima), at a block shape; windowed_newton.cu instantiates the production shapes, the
// kernel tests and pararnn_bench_shapes --only windowed others.
//
// Layout: one block per (batch row, group of C channels); a warp's 32 lanes are P = 32 / C time
// lanes of C channels each (C consecutive channels: coalesced 4·C-byte segments of the
// [b][t][g·D + c] layout), the block's W warps W · P time lanes, each time lane L consecutive steps
// of the window (window ≤ W · P · L). A Newton iteration per window: F and J of every step from the
// iterate (a time lane's first step takes h_prev from the lane before through shared memory, the
// window's first from the carried state, with J = 0 there), each thread's L elements composed in
// time order, the time lanes' aggregates scanned by warp shuffles (within a warp across its P
// time lanes, then the warps' totals across the W warps by one warp per channel: 2 + log2 P +
// log2 W dependent steps instead of one thread's pass over the W · P lanes) for the δ entering
// each time lane, then each thread's steps re-run from it and the iterate updated.
// With residual_max, each evaluation's max|F| (bits, NaN-propagating) is reduced per warp by
// shuffles, per block by thread 0 and over blocks by one atomicMax per block, and one more
// evaluation (F only) after the K-th update gives the final residual. Adaptive: each evaluation's
// max|F| is reduced per chain instead (per warp by shuffles across its time lanes, over the warps
// by warp 0's first C lanes, one per channel of the block), those lanes decide each chain's update
// and stop (windowed_newton.hpp) into shared memory, and the block leaves the window's loop when
// none of its chains runs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/cells/affine_monoid.hpp"
#include "pararnn/kernels/launch.hpp"
#include "pararnn/kernels/windowed_newton.hpp"

namespace pararnn::kernels::detail {

// kMinBlocksT: the blocks per SM asked of the register allocator (__launch_bounds__'s minimum):
// 1 lets a 1024-thread block use 64 registers per thread (observed with nvcc 13.0 for sm_90:
// without the minimum ptxas gave the LSTM, NLRU and Titans f64 instantiations 32), 2 caps a
// 512-thread block at 64 so that two blocks share an SM. The static_assert is the sm_80/sm_90
// bound of 64 resident warps per SM; the 64-register cap needs kWarps · kMinBlocks ≤ 32.
template <int kChannelsT, int kWarpsT, int kStepsT, int kMinBlocksT = 1>
struct WindowedShape {
  static_assert(32 % kChannelsT == 0, "C divides the warp");
  static_assert(kWarpsT >= 1 && kWarpsT <= 32, "one warp scans the warps' totals");
  static_assert(kMinBlocksT >= 1 && kWarpsT * kMinBlocksT <= 64, "an SM holds at most 64 warps (sm_80/sm_90)");
  static constexpr int kChannels = kChannelsT;            // C
  static constexpr int kWarps = kWarpsT;                  // W
  static constexpr int kSteps = kStepsT;                  // L
  static constexpr int kMinBlocks = kMinBlocksT;
  static constexpr int kLanesPerWarp = 32 / kChannelsT;  // P
  static constexpr int kTimeLanes = kWarpsT * kLanesPerWarp;
  static constexpr int kWindow = kTimeLanes * kStepsT;    // the largest window
};

// Whether Shape's static shared memory (48 KiB at most) holds CellMath's per-lane state in T:
// each time lane's last iterate, each warp's composed element and entering δ, the carried state
// and the warps' residual maxima.
template <class CellMath, class T, class Shape>
inline constexpr bool kWindowedFits =
    sizeof(T) * (Shape::kTimeLanes * CellMath::kSlots * Shape::kChannels +
                 (Shape::kWarps + 1) * CellMath::kSlots * Shape::kChannels + Shape::kWarps +
                 Shape::kWarps * Shape::kChannels) +
        sizeof(cells::AffineElement<CellMath::kSlots, T>) * Shape::kWarps * Shape::kChannels +
        2 * Shape::kChannels + sizeof(int) <=
    48 * 1024;

// The bits of |v| as an unsigned integer of v's width: for non-negative values (and a NaN, whose
// sign fabs clears) the integer order is the order of the values, with a NaN above +inf.
__device__ __forceinline__ unsigned int abs_bits(float v) { return __float_as_uint(fabsf(v)); }
__device__ __forceinline__ unsigned long long abs_bits(double v) {
  return static_cast<unsigned long long>(__double_as_longlong(fabs(v)));
}
// The value of such bits, widened to double.
__device__ __forceinline__ double bits_value(unsigned int b) { return static_cast<double>(__uint_as_float(b)); }
__device__ __forceinline__ double bits_value(unsigned long long b) {
  return __longlong_as_double(static_cast<long long>(b));
}

// e from the lane `delta` below (a lane below 0 keeps its own); every lane of the warp takes part.
template <int S, class T>
__device__ __forceinline__ cells::AffineElement<S, T> shfl_up_element(const cells::AffineElement<S, T>& e,
                                                                     int delta) {
  cells::AffineElement<S, T> out;
#pragma unroll
  for (int x = 0; x < S * S; ++x) out.J[x] = __shfl_up_sync(0xffffffffu, e.J[x], delta);
#pragma unroll
  for (int s = 0; s < S; ++s) out.r[s] = __shfl_up_sync(0xffffffffu, e.r[s], delta);
  return out;
}

template <class CellMath, class T, class Shape>
__global__ void __launch_bounds__(32 * Shape::kWarps, Shape::kMinBlocks) windowed_newton_kernel(WindowedNewtonArgs<T> a) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, RC = CellMath::kRecurrent + CellMath::kConstants;
  constexpr int C = Shape::kChannels, L = Shape::kSteps, Q = Shape::kTimeLanes, W = Shape::kWarps;
  constexpr int P = Shape::kLanesPerWarp;
  using Element = cells::AffineElement<S, T>;
  static_assert(kWindowedFits<CellMath, T, Shape>, "the block's shared memory is static");
  __shared__ T s_last[Q][S][C];     // each time lane's iterate at its last step
  __shared__ Element s_wagg[W][C];  // each warp's composed elements
  __shared__ T s_win[W][S][C];      // δ entering each warp
  __shared__ T s_carry[S][C];       // the state entering the window
  using Bits = typename WindowedNewtonArgs<T>::Bits;
  __shared__ Bits s_res[Shape::kWarps];  // each warp's max|F| bits at this evaluation
  // Adaptive: each warp's max|F| bits per channel, each chain's state, whether this evaluation
  // updates it, and whether any chain of the block runs on.
  __shared__ Bits s_cres[W][C];
  __shared__ unsigned char s_running[C], s_apply[C];
  __shared__ int s_more;

  const int lane = static_cast<int>(threadIdx.x), warp = static_cast<int>(threadIdx.y);
  const int cl = lane % C;                                  // channel within the group
  const int p = lane / C;                                   // time lane within the warp
  const int q = warp * P + p;                               // time lane
  const std::int64_t b = blockIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * C + cl;
  const bool channel = c < a.channels;
  const std::int64_t D = a.channels;

  T rec[RC];
#pragma unroll
  for (int k = 0; k < RC; ++k) rec[k] = channel ? a.recurrent[k * D + c] : T(0);
  if (q == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) s_carry[s][cl] = channel && a.h0 != nullptr ? a.h0[(b * S + s) * D + c] : T(0);
  }
  __syncthreads();

  // Within a window, steps are counted in int (a window is at most Shape::kWindow steps): this
  // thread holds steps q·L + u of the window for u < held, the window's first step where
  // first_lane and u = 0.
  const bool first_lane = q == 0;
  std::int64_t window_index = 0;
  for (std::int64_t w0 = 0; w0 < a.time; w0 += a.window, ++window_index) {
    const int n = static_cast<int>(a.time - w0 < a.window ? a.time - w0 : a.window);
    const int beyond = n - q * L;
    const int held = beyond < 0 ? 0 : (beyond > L ? L : beyond);
    const std::int64_t t0 = b * a.time + w0 + q * L;  // this thread's first step in [b][t]
    // Formed for every thread, dereferenced only at its valid steps (u < held, channel < D); for
    // a thread past the window's end or the last channel it may point beyond the array.
    const T* wx_at = a.wx + t0 * G * D + c;
    // Every chain of the window runs (warp 0's first C lanes own the chains' state; a channel past
    // the last does not run).
    if (a.adaptive && warp == 0 && lane < C) s_running[lane] = channel ? 1 : 0;
    T wx[L][G], h[L][S], carry[S];
#pragma unroll
    for (int s = 0; s < S; ++s) carry[s] = s_carry[s][cl];
    // The gates of this thread's steps (zeros past the window) and the App. A guess.
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const bool valid = channel && u < held;
#pragma unroll
      for (int g = 0; g < G; ++g) wx[u][g] = valid ? wx_at[(u * G + g) * D] : T(0);
      T from[S], hn[S];
#pragma unroll
      for (int s = 0; s < S; ++s) from[s] = u == 0 && first_lane ? carry[s] : T(0);
      CellMath::step(rec, wx[u], from, hn, static_cast<T*>(nullptr));
#pragma unroll
      for (int s = 0; s < S; ++s) h[u][s] = hn[s];
    }
    const bool track = a.residual_max != nullptr;  // uniform over the grid
    // The warp's max of `worst` into s_res[warp] (lane 0), before a block-wide barrier.
    const auto warp_max_to_shared = [&](Bits worst) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const Bits other = __shfl_xor_sync(0xffffffffu, worst, offset);
        worst = other > worst ? other : worst;
      }
      if (lane == 0) s_res[warp] = worst;
    };
    // After that barrier: the block's max over its warps, onto evaluation e of this window.
    const auto block_max_to_global = [&](int e) {
      if (warp == 0 && lane == 0) {
        Bits block = 0;
        for (int v = 0; v < Shape::kWarps; ++v) block = s_res[v] > block ? s_res[v] : block;
        atomicMax(a.residual_max + window_index * (a.iterations + 1) + e, block);
      }
    };
    // Adaptive, before a block-wide barrier: the warp's max of `worst` per channel (across its P
    // time lanes, lanes C apart) into s_cres[warp][channel].
    const auto chain_max_to_shared = [&](Bits worst) {
#pragma unroll
      for (int offset = 16; offset >= C; offset /= 2) {
        const Bits other = __shfl_xor_sync(0xffffffffu, worst, offset);
        worst = other > worst ? other : worst;
      }
      if (p == 0) s_cres[warp][cl] = worst;
    };
    // Adaptive, after that barrier, by warp 0 (every lane): evaluation k's decision for each
    // running chain (lane < C holds channel `lane`): updated where its max|F| is finite, stopped
    // after the update where below stop_atol from the minimum K on, stopped without it where not
    // finite; the running chains' max onto residual_max[window][k], k + 1 onto evaluations[window].
    const auto decide = [&](int k) {
      Bits m = 0;
      bool ran = false, apply = false, more = false;
      if (lane < C && s_running[lane]) {
        ran = true;
        for (int v = 0; v < W; ++v) m = s_cres[v][lane] > m ? s_cres[v][lane] : m;
        const double value = bits_value(m);
        if (isfinite(value)) {
          apply = true;
          if (value < a.stop_atol && k + 1 >= a.min_iterations)
            s_running[lane] = 0;
          else
            more = true;
        } else {
          s_running[lane] = 0;
        }
      }
      if (lane < C) s_apply[lane] = apply ? 1 : 0;
      Bits block = m;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const Bits other = __shfl_xor_sync(0xffffffffu, block, offset);
        block = other > block ? other : block;
      }
      const bool any_ran = __any_sync(0xffffffffu, ran), any_more = __any_sync(0xffffffffu, more);
      if (lane == 0) {
        if (any_ran) {
          atomicMax(a.residual_max + window_index * (a.iterations + 1) + k, block);
          atomicMax(a.evaluations + window_index, static_cast<unsigned int>(k + 1));
        }
        s_more = any_more ? 1 : 0;
      }
    };
    for (int k = 0; k < a.iterations; ++k) {
#pragma unroll
      for (int s = 0; s < S; ++s) s_last[q][s][cl] = h[L - 1][s];
      __syncthreads();
      // F and J of every step, composed in time order.
      Element e[L];
      Element agg = Element::identity();
      Bits worst = 0;  // max of the bits of |F| over this thread's valid steps (track only)
#pragma unroll
      for (int u = 0; u < L; ++u) {
        T hp[S], hn[S], jac[S * S];
#pragma unroll
        for (int s = 0; s < S; ++s)
          hp[s] = u > 0 ? h[u - 1][s] : (first_lane ? carry[s] : s_last[q - 1][s][cl]);
        CellMath::step(rec, wx[u], hp, hn, jac);
        if (u < held) {
#pragma unroll
          for (int s = 0; s < S; ++s) e[u].r[s] = hn[s] - h[u][s];
#pragma unroll
          for (int x = 0; x < S * S; ++x) e[u].J[x] = u == 0 && first_lane ? T(0) : jac[x];
          if (track && channel)
#pragma unroll
            for (int s = 0; s < S; ++s) {
              const Bits bits = abs_bits(e[u].r[s]);
              worst = bits > worst ? bits : worst;
            }
        } else {
          e[u] = Element::identity();
        }
        agg = u == 0 ? e[u] : cells::compose(e[u], agg);
      }
      if (a.adaptive)
        chain_max_to_shared(worst);
      else if (track)
        warp_max_to_shared(worst);
      // The δ entering each time lane (δ = 0 entering the window; its first element has J = 0
      // anyway): the lanes' elements scanned within the warp by shuffles across its P time lanes
      // (C lanes apart), the warps' totals scanned by one warp per channel by shuffles across the
      // W warps, then each time lane's exclusive prefix within its warp applied to the δ entering
      // the warp.
      Element incl = agg;
#pragma unroll
      for (int o = 1; o < P; o *= 2) {
        const Element earlier = shfl_up_element(incl, o * C);
        if (p >= o) incl = cells::compose(incl, earlier);
      }
      const Element excl = P > 1 ? shfl_up_element(incl, C) : incl;  // used where p ≥ 1
      if (p == P - 1) s_wagg[warp][cl] = incl;
      __syncthreads();
      if (a.adaptive) {
        if (warp == 0) decide(k);
      } else if (track) {
        block_max_to_global(k);
      }
      for (int ch = warp; ch < C; ch += W) {  // uniform over the warp
        Element total = lane < W ? s_wagg[lane][ch] : Element::identity();
#pragma unroll
        for (int o = 1; o < W; o *= 2) {
          const Element earlier = shfl_up_element(total, o);
          if (lane >= o) total = cells::compose(total, earlier);
        }
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const T before = __shfl_up_sync(0xffffffffu, total.r[s], 1);
          if (lane < W) s_win[lane][s][ch] = lane == 0 ? T(0) : before;
        }
      }
      __syncthreads();
      T d[S];
#pragma unroll
      for (int s = 0; s < S; ++s) d[s] = s_win[warp][s][cl];
      const bool apply = !a.adaptive || s_apply[cl] != 0;
      if (P > 1 && p > 0) {
        T out[S];
        cells::apply(excl, d, out);
#pragma unroll
        for (int s = 0; s < S; ++s) d[s] = out[s];
      }
#pragma unroll
      for (int u = 0; u < L; ++u) {
        T out[S];
        cells::apply(e[u], d, out);
#pragma unroll
        for (int s = 0; s < S; ++s) {
          d[s] = out[s];
          if (apply) h[u][s] += a.omega * out[s];
        }
      }
      if (a.adaptive && s_more == 0) break;  // uniform over the block
    }
    if (track) {
      // The final iterate's residual (F only).
#pragma unroll
      for (int s = 0; s < S; ++s) s_last[q][s][cl] = h[L - 1][s];
      __syncthreads();
      Bits worst = 0;
#pragma unroll
      for (int u = 0; u < L; ++u) {
        T hp[S], hn[S];
#pragma unroll
        for (int s = 0; s < S; ++s)
          hp[s] = u > 0 ? h[u - 1][s] : (first_lane ? carry[s] : s_last[q - 1][s][cl]);
        CellMath::step(rec, wx[u], hp, hn, static_cast<T*>(nullptr));
        if (channel && u < held)
#pragma unroll
          for (int s = 0; s < S; ++s) {
            const Bits bits = abs_bits(hn[s] - h[u][s]);
            worst = bits > worst ? bits : worst;
          }
      }
      warp_max_to_shared(worst);
      __syncthreads();
      block_max_to_global(a.iterations);
    }
    // H once; the window's last state carried to the next window.
    T* H_at = a.H + t0 * S * D + c;  // like wx_at: written only at the valid steps
#pragma unroll
    for (int u = 0; u < L; ++u) {
      if (!channel || u >= held) continue;
#pragma unroll
      for (int s = 0; s < S; ++s) H_at[(u * S + s) * D] = h[u][s];
    }
    __syncthreads();  // every thread has read s_carry of this window
#pragma unroll
    for (int u = 0; u < L; ++u) {
      if (q * L + u == n - 1)
#pragma unroll
        for (int s = 0; s < S; ++s) s_carry[s][cl] = h[u][s];
    }
    __syncthreads();
  }
}

// The launch; cudaErrorInvalidValue for a window outside [1, Shape::kWindow], null arrays,
// negative sizes, more than kWindowedMaxBatch rows or kWindowedMaxIterations iterations (the
// bounds of kernels/windowed_newton.hpp). Never allocates.
template <class CellMath, class T, class Shape>
cudaError_t run_windowed_newton(const WindowedNewtonArgs<T>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0 || a.iterations < 0 || a.iterations > kWindowedMaxIterations)
    return cudaErrorInvalidValue;
  if (a.adaptive && (a.residual_max == nullptr || a.evaluations == nullptr || a.min_iterations < 0 ||
                     a.min_iterations > a.iterations))
    return cudaErrorInvalidValue;
  if (a.batch == 0 || a.time == 0 || a.channels == 0) return cudaSuccess;
  if (a.window < 1 || a.window > Shape::kWindow || a.wx == nullptr || a.recurrent == nullptr || a.H == nullptr)
    return cudaErrorInvalidValue;
  const std::int64_t groups = (a.channels + Shape::kChannels - 1) / Shape::kChannels;
  if (groups > 0x7fffffff || a.batch > kWindowedMaxBatch) return cudaErrorInvalidValue;
  windowed_newton_kernel<CellMath, T, Shape>
      <<<dim3(static_cast<unsigned>(groups), static_cast<unsigned>(a.batch)), dim3(32, Shape::kWarps), 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace pararnn::kernels::detail
