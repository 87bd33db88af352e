// The implicit adjoint of a per-channel cell in one kernel: the reverse single-pass scan of
// scan.cuh whose elements are computed from H* and W_x x on the fly (J_{t+1}ᵀ at H*_t, the seed
// g_t) and whose store runs the per-step VJP, so neither J nor μ is ever written. The
// three-launch path of kernels/cell_vjp.hpp (J and the seed, the reverse scan, the VJP) writes
// and reads J and μ in double: 4 · S · (S + 1) bytes per token-channel more.
//
// Two variants for measurement (pararnn_bench_shapes --only backward), neither production:
// - kVjpInStore = false, the μ form: the store writes μ_t in double ([b][t][s][c], as the
//   three-phase scan leaves it) and runs no VJP; launch_cell_vjp then reads it. J is still never
//   written, and the scan kernel holds no VJP registers.
// - C = float: J and the VJP computed in float from the inputs as stored (the scan elements, μ
//   and the recurrent sums stay double). Not the production backward's arithmetic (its J and VJP
//   are double); it measures what that choice would buy.
//
// Guarantees:
// - With C = double, the same arithmetic per element as the three launches: J by CellMath::step
//   in double at the inputs widened in registers, transposed into the reverse element as
//   load_element does, restarts where a segment ends; the VJP by CellMath::vjp in double on μ_t;
//   d_wx rounded once to T; ∇h0 written (not accumulated) at heads.
// - μ itself differs from the three-phase scan's (the tests' reference) only by the scan's
//   association; at SinglePassLimits<S> it is the production backward's single-pass scan's μ
//   (the same shape, chunk and anchors); the recurrent partials are per scan chunk (the shape's steps ×
//   groups: 128, 32, 16 steps at S = 1, 2, 4 with SinglePassLimits, where cell_vjp.hpp's are 128
//   forward steps), summed in reverse time within a thread and in group order within a block,
//   so their totals equal the three launches' to rounding, not bit for bit. Deterministic:
//   every sum has a fixed order.
// - Partials: d_rec_partials[b][k][r][c] for scan chunk k (times T−1−k·chunk downwards),
//   ceil(T / chunk) chunks per row.
// Measured by pararnn_bench_shapes --only backward against the three launches: slower on the
// H200 (2026-12-03, S1: 6.13 ms at its best shape against 5.56 with the three-phase scan and
// 5.28 with the single-pass one production now runs; register-bound in double, ncu in
// bench/backward_fused_ncu_h200.txt), so not production; the μ form (4.99 ms at two channels per
// lane) and the float form (4.11 ms) neither; CHANGELOG.md (2026-12-03) has the figures.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cell_adjoint_fused_args.hpp"
#include "scan.cuh"

namespace pararnn::kernels::detail {


template <class CellMath, class T, int V, bool kVjpInStore = true, class C = double>
struct FusedAdjointSource {
  static constexpr int S = CellMath::kSlots;
  static constexpr int G = CellMath::kGates;
  static constexpr int R = CellMath::kRecurrent;
  static constexpr int RC = R + CellMath::kConstants;
  // After the scan's group slots: this group's recurrent sums, reduced over groups in finish().
  static constexpr std::size_t kSharedPerGroup =
      kVjpInStore ? static_cast<std::size_t>(R) * 32 * V * sizeof(double) : 0;
  FusedAdjointArgs<T> a;
  C rec[RC][V] = {};
  double acc[R][V] = {};
  std::int64_t first_b = 0, first_t = -1, tile_c0 = 0;  // this thread's first step (store, u = 0)

  __device__ __forceinline__ bool is_head(std::int64_t t) const {
    return t == 0 || (a.head != nullptr && a.head[t] != 0);
  }
  template <class U>
  __device__ __forceinline__ void load_gates(std::int64_t bt, std::int64_t c0, U (&w)[G][V]) const {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const Pack<T, V> p = load_pack<T, V>(a.wx + bt * G * a.channels + g * a.channels + c0);
#pragma unroll
      for (int v = 0; v < V; ++v) w[g][v] = static_cast<U>(p.v[v]);
    }
  }
  template <class U>
  __device__ __forceinline__ void load_state(const T* base, std::int64_t row, std::int64_t c0,
                                             U (&h)[S][V]) const {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const Pack<T, V> p = load_pack<T, V>(base + (row * S + s) * a.channels + c0);
#pragma unroll
      for (int v = 0; v < V; ++v) h[s][v] = static_cast<U>(p.v[v]);
    }
  }
  // h_prev of step t: h0's row (zeros without h0) at a head, else H*_{t−1}.
  __device__ __forceinline__ void h_prev_at(std::int64_t b, std::int64_t t, std::int64_t c0, C (&h)[S][V]) const {
    if (!is_head(t)) return load_state(a.H, b * a.time + t - 1, c0, h);
    if (a.h0 != nullptr) return load_state(a.h0, a.h0_row != nullptr ? a.h0_row[t] : b, c0, h);
#pragma unroll
    for (int s = 0; s < S; ++s)
#pragma unroll
      for (int v = 0; v < V; ++v) h[s][v] = C(0);
  }

  // Reverse element at t: r = g_t, J = J_{t+1}ᵀ (step t + 1 at h_prev = H*_t), 0 at a restart.
  __device__ __forceinline__ void load(std::int64_t b, std::int64_t t, std::int64_t c0, bool restart, int u,
                                       cells::AffineElement<S, double> (&e)[V]) {
    const std::int64_t bt = b * a.time + t;
    if (u == 0) {
#pragma unroll
      for (int k = 0; k < RC; ++k) {
        const Pack<T, V> p = load_pack<T, V>(a.recurrent + k * a.channels + c0);
#pragma unroll
        for (int v = 0; v < V; ++v) rec[k][v] = static_cast<C>(p.v[v]);
      }
    }
    double g[S][V];
    load_state(a.grad_H, bt, c0, g);
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int s = 0; s < S; ++s) e[v].r[s] = g[s][v];
    if (restart) {
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int q = 0; q < S * S; ++q) e[v].J[q] = 0.0;
      return;
    }
    C w[G][V], h[S][V];
    load_gates(bt + 1, c0, w);
    load_state(a.H, bt, c0, h);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      C r[RC], wv[G], hp[S], hn[S], jac[S * S];
#pragma unroll
      for (int k = 0; k < RC; ++k) r[k] = rec[k][v];
#pragma unroll
      for (int q = 0; q < G; ++q) wv[q] = w[q][v];
#pragma unroll
      for (int s = 0; s < S; ++s) hp[s] = h[s][v];
      CellMath::step(r, wv, hp, hn, jac);
#pragma unroll
      for (int o = 0; o < S; ++o)
#pragma unroll
        for (int i = 0; i < S; ++i) e[v].J[i * S + o] = static_cast<double>(jac[o * S + i]);
    }
  }

  // μ_t: the VJP of step t (the μ form: μ_t written).
  __device__ __forceinline__ void store(std::int64_t b, std::int64_t t, std::int64_t c0, int u,
                                        const double (&mu)[V][S]) {
    if constexpr (!kVjpInStore) {
      store_state<S, double, V>(a.mu, b, t, a.time, a.channels, c0, mu);
      return;
    }
    if (u == 0) {
      first_b = b;
      first_t = t;
      tile_c0 = c0;
    }
    const std::int64_t bt = b * a.time + t;
    const bool head = is_head(t);
    C w[G][V], h[S][V];
    load_gates(bt, c0, w);
    h_prev_at(b, t, c0, h);
    T d_wx_out[G][V];
    double d_hp_out[S][V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      C r[RC], wv[G], hp[S], cot[S], d_rec[RC], d_wx[G], d_hp[S];
#pragma unroll
      for (int k = 0; k < RC; ++k) {
        r[k] = rec[k][v];
        d_rec[k] = C(0);
      }
#pragma unroll
      for (int q = 0; q < G; ++q) wv[q] = w[q][v];
#pragma unroll
      for (int s = 0; s < S; ++s) {
        hp[s] = h[s][v];
        cot[s] = static_cast<C>(mu[v][s]);
      }
      CellMath::vjp(r, wv, hp, cot, d_rec, d_wx, d_hp);
#pragma unroll
      for (int k = 0; k < R; ++k) acc[k][v] += static_cast<double>(d_rec[k]);
#pragma unroll
      for (int q = 0; q < G; ++q) d_wx_out[q][v] = static_cast<T>(d_wx[q]);
#pragma unroll
      for (int s = 0; s < S; ++s) d_hp_out[s][v] = static_cast<double>(d_hp[s]);
    }
#pragma unroll
    for (int q = 0; q < G; ++q) {
      Pack<T, V> p;
#pragma unroll
      for (int v = 0; v < V; ++v) p.v[v] = d_wx_out[q][v];
      store_pack<T, V>(a.d_wx + bt * G * a.channels + q * a.channels + c0, p);
    }
    if (head && a.d_h0 != nullptr) {
      const std::int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
      for (int s = 0; s < S; ++s)
#pragma unroll
        for (int v = 0; v < V; ++v) a.d_h0[(row * S + s) * a.channels + c0 + v] = d_hp_out[s][v];
    }
  }

  // The block's recurrent sums: each group's in shared memory, then group 0 adds them in group
  // order and writes the chunk's partial.
  __device__ __forceinline__ void finish() {
    if constexpr (!kVjpInStore) return;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const std::size_t slots = static_cast<std::size_t>(blockDim.y) * (S * S + S) * 32 * V;  // the scan's, in double
    double* sums = reinterpret_cast<double*>(smem_raw) + slots;  // [group][r][lane·V + v]
    const int lane = static_cast<int>(threadIdx.x), grp = static_cast<int>(threadIdx.y);
    constexpr int kWidth = 32 * V;
#pragma unroll
    for (int k = 0; k < R; ++k)
#pragma unroll
      for (int v = 0; v < V; ++v) sums[(grp * R + k) * kWidth + lane * V + v] = acc[k][v];
    __syncthreads();
    if (grp != 0 || first_t < 0) return;
    const std::int64_t chunks = (a.time + a.chunk - 1) / a.chunk;
    const std::int64_t k_chunk = (a.time - 1 - first_t) / a.chunk;
    for (int k = 0; k < R; ++k)
#pragma unroll
      for (int v = 0; v < V; ++v) {
        double total = 0.0;
        for (int q = 0; q < static_cast<int>(blockDim.y); ++q) total += sums[(q * R + k) * kWidth + lane * V + v];
        a.d_rec_partials[((first_b * chunks + k_chunk) * R + k) * a.channels + tile_c0 + v] = total;
      }
  }
};

// The fused adjoint at V channels per lane and Shape (steps, groups; the chunk is their
// product); workspace: single_pass_layout(S, sizeof(double), V, …). The caller checked the
// arguments and that V divides the channels with aligned pointers (and a.mu in the μ form).
template <class CellMath, class T, int V, class Shape, bool kVjpInStore = true, class C = double>
cudaError_t run_fused_adjoint(FusedAdjointArgs<T> a, void* workspace, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  a.chunk = static_cast<std::int64_t>(Shape::kSteps) * Shape::kGroups;
  const FusedAdjointSource<CellMath, T, V, kVjpInStore, C> source{a};
  return run_single_pass<CellMath::kSlots, double, V, /*kReverse=*/true, Shape>(
      source, a.head, a.batch, a.time, a.channels, a.chunk, workspace, workspace_bytes, stream);
}

template <class CellMath, class T, int V, class Shape>
std::size_t fused_adjoint_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels) {
  return single_pass_layout(CellMath::kSlots, sizeof(double), V, batch, time, channels,
                            static_cast<std::int64_t>(Shape::kSteps) * Shape::kGroups)
      .total;
}

}  // namespace pararnn::kernels::detail
