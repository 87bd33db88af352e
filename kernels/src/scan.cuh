// Device implementation of launch_scan_affine (kernels/scan.hpp): the single-pass decoupled
// look-back scan, the three-phase twin, their workspace layouts and the host dispatch. Included
// only by the .cu files that instantiate it (scan_f32.cu, scan_f64.cu).
//
// Thread geometry, both algorithms: 32 lanes along channels (lane l owns channels
// c0 .. c0+V−1, c0 = tile·32·V + l·V, so a warp moves 32·V·sizeof(T) contiguous bytes per row);
// chains are grouped in tiles (b, channel tile) and time in chunks of L steps. "Scan position"
// p = 0 .. T−1 runs forward in time, or backward when reversing (t = T−1−p), so both directions
// share every kernel. Elements are folded with cells::compose; a restart element (J treated as
// 0) starts a fold afresh instead of composing, and a carry crossing a span that holds a restart
// is replaced by that span's r, so nothing crosses a restart (kernels/scan.hpp).
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "device_util.cuh"
#include "pararnn/cells/affine_monoid.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/scan.hpp"

namespace pararnn::kernels::detail {

using std::int64_t;

// ---------------------------------------------------------------------------------------------
// Shape of one launch, passed by value to every kernel.
struct ScanGeometry {
  int64_t batch = 0;
  int64_t time = 0;
  int64_t channels = 0;
  int64_t chunk = 0;     // L, time steps per chunk
  int64_t n_chunks = 0;  // K = ceil(T / L)
  int64_t n_ctiles = 0;  // channel tiles per batch row
  int64_t n_tiles = 0;   // batch · n_ctiles
  int steps = 0;         // single pass: steps per thread
  int groups = 0;        // single pass: time groups per block (blockDim.y)
};

// The register shape of one single-pass launch: at most kStepsT steps per thread held in
// registers, at most kGroupsT warps (time groups) per block, and kMinBlocksT blocks per SM asked
// of the register allocator (__launch_bounds__). The plain scan uses SinglePassLimits<S>; the
// fused Newton step (newton_step.cu) picks its own, measured, shape.
// Every kAnchorT-th chunk is a look-back anchor: a chunk composes the aggregates of at most
// kAnchorT − 1 predecessors, read in one round trip, onto the end state of the anchor before it
// (the fixed association that makes the scan repeat bit for bit; 1: every chunk waits for its
// predecessor's end state, a chained scan).
template <int kStepsT, int kGroupsT, int kMinBlocksT = 1, int kAnchorT = 4>
struct SinglePassShape {
  static constexpr int kSteps = kStepsT;
  static constexpr int kGroups = kGroupsT;
  static constexpr int kThreads = 32 * kGroupsT;
  static constexpr int kMinBlocks = kMinBlocksT;
  static constexpr int kAnchor = kAnchorT;
};
// S = 1: chunks of 128 steps (16 warps of 8 steps) with an anchor every 2nd chunk, the fastest
// of pararnn_bench_shapes' sweep at S1 for the plain scan (0.61 ms against 0.86 at 64 steps and
// anchors every 4) and for the fused step (1.29 ms against 1.37; CHANGELOG.md, 2026-12-02).
template <int S>
using SinglePassLimits =
    SinglePassShape<scan_max_steps_per_thread(S), scan_max_time_groups(S), 1, S == 1 ? 2 : 4>;

inline constexpr unsigned kFlagAggregate = 1;  // a chunk's aggregate is published
inline constexpr unsigned kFlagInclusive = 2;  // the state at a chunk's end is published
inline constexpr unsigned kMaxSpins = 1u << 26;  // look-back polls before giving up (seconds)

// ---------------------------------------------------------------------------------------------
// Elements.

template <bool kReverse>
__device__ __forceinline__ int64_t time_at(int64_t p, int64_t time) {
  return kReverse ? time - 1 - p : p;
}

// Whether the element at time t restarts the scan (its J is treated as 0).
template <bool kReverse>
__device__ __forceinline__ bool is_restart(const std::uint8_t* head, int64_t t, int64_t time) {
  if constexpr (kReverse) {
    return t + 1 >= time || (head != nullptr && head[t + 1] != 0);
  } else {
    return t == 0 || (head != nullptr && head[t] != 0);
  }
}

// The element at time t for channels c0 .. c0+V−1 of batch row b: r_t and J_t (forward) or
// g_t and J_{t+1}ᵀ (reverse); J is not read at a restart.
template <int S, class T, int V, bool kReverse>
__device__ __forceinline__ void load_element(const T* __restrict__ jac, const T* delta, int64_t b,
                                             int64_t t, int64_t time, int64_t channels,
                                             int64_t c0, bool restart,
                                             cells::AffineElement<S, T> (&e)[V]) {
  const int64_t r_base = (b * time + t) * S * channels + c0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const Pack<T, V> x = load_pack<T, V>(delta + r_base + s * channels);
#pragma unroll
    for (int v = 0; v < V; ++v) e[v].r[s] = x.v[v];
  }
  if (restart) {
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int q = 0; q < S * S; ++q) e[v].J[q] = T(0);
    return;
  }
  const int64_t tj = kReverse ? t + 1 : t;
  const int64_t j_base = (b * time + tj) * S * S * channels + c0;
#pragma unroll
  for (int o = 0; o < S; ++o)
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const Pack<T, V> x = load_pack<T, V>(jac + j_base + (o * S + i) * channels);
      const int q = kReverse ? i * S + o : o * S + i;
#pragma unroll
      for (int v = 0; v < V; ++v) e[v].J[q] = x.v[v];
    }
}

template <int S, class T, int V>
__device__ __forceinline__ void store_state(T* delta, int64_t b, int64_t t, int64_t time,
                                            int64_t channels, int64_t c0, const T (&x)[V][S]) {
  const int64_t r_base = (b * time + t) * S * channels + c0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    Pack<T, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = x[v][s];
    store_pack<T, V>(delta + r_base + s * channels, p);
  }
}

// Where the single-pass scan reads its elements and writes its states: the Source of
// scan_single_pass_kernel. BufferSource is the scan of kernels/scan.hpp (J and r from memory,
// δ in place of r); the fused Newton step (newton_step.cu) computes its elements from the cell
// instead. A Source supplies load(b, t, c0, restart, u, e) (J is not read at a restart),
// store(b, t, c0, u, x) and finish() (called once by every thread at the end of the kernel), and
// kSharedPerGroup: bytes of dynamic shared memory per time group it uses after the scan's slots.
// u = 0 .. steps−1 is the step's place in the thread's run of consecutive scan positions (a
// compile-time constant after unrolling): loads come in increasing u, so a source may keep
// what step u loaded for step u + 1 and for the store of step u.
template <int S, class T, int V, bool kReverse>
struct BufferSource {
  static constexpr std::size_t kSharedPerGroup = 0;
  const T* __restrict__ jac;
  T* delta;
  int64_t time, channels;
  __device__ __forceinline__ void load(int64_t b, int64_t t, int64_t c0, bool restart, int /*u*/,
                                       cells::AffineElement<S, T> (&e)[V]) {
    load_element<S, T, V, kReverse>(jac, delta, b, t, time, channels, c0, restart, e);
  }
  __device__ __forceinline__ void store(int64_t b, int64_t t, int64_t c0, int /*u*/, const T (&x)[V][S]) {
    store_state<S, T, V>(delta, b, t, time, channels, c0, x);
  }
  __device__ __forceinline__ void finish() {}
};

// acc ← e (first element or restart) or e ∘ acc.
template <int S, class T>
__device__ __forceinline__ void fold_into(cells::AffineElement<S, T>& acc,
                                          const cells::AffineElement<S, T>& e, bool fresh) {
  if (fresh) {
    acc = e;
  } else {
    acc = cells::compose(e, acc);
  }
}

// The state after span `e` entered with `carry`: e.r alone when the span holds a restart.
template <int S, class T>
__device__ __forceinline__ void advance(const cells::AffineElement<S, T>& e, bool restart,
                                        T (&carry)[S]) {
  if (restart) {
#pragma unroll
    for (int s = 0; s < S; ++s) carry[s] = e.r[s];
  } else {
    T out[S];
    cells::apply(e, carry, out);
#pragma unroll
    for (int s = 0; s < S; ++s) carry[s] = out[s];
  }
}

// ---------------------------------------------------------------------------------------------
// Single pass (decoupled look-back).
//
// Workspace: [ticket | flags[n_blocks]] (zeroed before each launch), aggregates
// [n_blocks][S·S+S][32·V], inclusive states [n_blocks][S][32·V]. Logical block lb = k·n_tiles +
// tile is handed out in the order blocks start (atomic ticket), so every block a block waits on
// has started, and it publishes before it waits on anything: the look-back cannot deadlock.

struct SinglePassLayout {
  std::size_t flags = 0;      // offset of flags (the ticket is at 0)
  std::size_t aggregate = 0;  // offset of aggregates
  std::size_t inclusive = 0;  // offset of inclusive states
  std::size_t zeroed = 0;     // bytes to zero before a launch
  std::size_t total = 0;
  int64_t n_blocks = 0;
};

inline SinglePassLayout single_pass_layout(int S, std::size_t value_bytes, int V, int64_t batch,
                                           int64_t time, int64_t channels, int64_t chunk) {
  SinglePassLayout l;
  const int64_t n_ctiles = (channels + 32 * V - 1) / (32 * V);
  const int64_t n_chunks = (time + chunk - 1) / chunk;
  l.n_blocks = batch * n_ctiles * n_chunks;
  const std::size_t nb = static_cast<std::size_t>(l.n_blocks);
  const std::size_t width = static_cast<std::size_t>(32 * V);
  l.flags = kWorkspaceAlignment;
  l.zeroed = l.flags + nb * sizeof(unsigned);
  l.aggregate = align_up(l.zeroed, kWorkspaceAlignment);
  l.inclusive =
      align_up(l.aggregate + nb * static_cast<std::size_t>(S * S + S) * width * value_bytes,
               kWorkspaceAlignment);
  l.total = align_up(l.inclusive + nb * static_cast<std::size_t>(S) * width * value_bytes,
                     kWorkspaceAlignment);
  return l;
}

__device__ __forceinline__ unsigned load_flag_acquire(unsigned* flag) {
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> ref(*flag);
  return ref.load(cuda::memory_order_acquire);
}

// Called by all 32 lanes of one warp after each wrote its share of a publication.
__device__ __forceinline__ void publish_flag(unsigned* flag, unsigned value) {
  __threadfence();
  __syncwarp();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<unsigned, cuda::thread_scope_device> ref(*flag);
    ref.store(value, cuda::memory_order_release);
  }
}

// kMissingBarrier is the fault `missing_scan_barrier` (core/fault.hpp): the barrier between the
// look-back and the groups' re-run is left out, so a group may read its slot before warp 0 has
// written the carry into it (a real race). Only a faults build instantiates it.
template <int S, class T, int V, bool kReverse, class Source, class Shape, bool kMissingBarrier = false>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kMinBlocks)
    scan_single_pass_kernel(Source src, const std::uint8_t* __restrict__ head, ScanGeometry g,
                            unsigned* ticket, unsigned* flags, T* aggregates, T* inclusives) {
  using Elem = cells::AffineElement<S, T>;
  constexpr int kSteps = Shape::kSteps;
  constexpr int kGroups = Shape::kGroups;
  constexpr int kElem = S * S + S;
  constexpr int kWidth = 32 * V;
  constexpr unsigned kFull = 0xffffffffu;

  // Group aggregates [group][kElem][kWidth]; after the look-back the r part of group q's slot
  // holds the state entering group q.
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_agg = reinterpret_cast<T*>(smem_raw);
  __shared__ unsigned s_ticket;
  __shared__ int s_restart[kGroups];

  // A source told to do nothing (NewtonStepSource::skipped: a fixed-K loop already stopped on
  // the device, kernels/newton_loop.hpp) leaves every block before it takes a ticket.
  if constexpr (requires { src.skipped(); }) {
    if (src.skipped()) return;
  }
  const int lane = static_cast<int>(threadIdx.x);
  const int grp = static_cast<int>(threadIdx.y);
  if (lane == 0 && grp == 0) s_ticket = atomicAdd(ticket, 1u);
  __syncthreads();
  const int64_t lb = s_ticket;
  const int64_t k = lb / g.n_tiles;
  const int64_t tile = lb - k * g.n_tiles;
  const int64_t b = tile / g.n_ctiles;
  const int64_t c0 = (tile - b * g.n_ctiles) * kWidth + static_cast<int64_t>(lane) * V;
  const bool active = c0 < g.channels;
  const int64_t chunk_start = k * g.chunk;
  const int64_t group_start = chunk_start + static_cast<int64_t>(grp) * g.steps;
  const int64_t remaining = g.time - group_start;
  const int n_valid = remaining <= 0 ? 0 : (remaining < g.steps ? static_cast<int>(remaining) : g.steps);
  const int64_t chunk_remaining = g.time - chunk_start;  // >= 1
  const int64_t groups_needed = (chunk_remaining + g.steps - 1) / g.steps;
  const int n_groups = groups_needed < g.groups ? static_cast<int>(groups_needed) : g.groups;

  // Load every element of this thread before using any (all loads in flight at once).
  Elem e[kSteps][V];
  bool restart[kSteps];
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
    restart[u] = false;
    if (u < n_valid) {
      const int64_t t = time_at<kReverse>(group_start + u, g.time);
      restart[u] = is_restart<kReverse>(head, t, g.time);
      if (active) {
        src.load(b, t, c0, restart[u], u, e[u]);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) e[u][v] = Elem::identity();
      }
    }
  }

  // This thread's aggregate.
  if (n_valid > 0) {
    Elem agg[V];
    bool any_restart = false;
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      if (u < n_valid) {
#pragma unroll
        for (int v = 0; v < V; ++v) fold_into(agg[v], e[u][v], u == 0 || restart[u]);
        any_restart = any_restart || restart[u];
      }
    }
#pragma unroll
    for (int q = 0; q < kElem; ++q) {
      Pack<T, V> x;
#pragma unroll
      for (int v = 0; v < V; ++v) x.v[v] = q < S * S ? agg[v].J[q] : agg[v].r[q - S * S];
      *reinterpret_cast<Pack<T, V>*>(s_agg + (grp * kElem + q) * kWidth + lane * V) = x;
    }
    if (lane == 0) s_restart[grp] = any_restart ? 1 : 0;
  }
  __syncthreads();

  if (grp == 0) {
    // One warp: the block's aggregate, its publication, the look-back, the group carries.
    auto read_slot = [&](int q, Elem (&out)[V]) {
#pragma unroll
      for (int m = 0; m < kElem; ++m) {
        const Pack<T, V> x = *reinterpret_cast<const Pack<T, V>*>(
            s_agg + (q * kElem + m) * kWidth + lane * V);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          if (m < S * S) {
            out[v].J[m] = x.v[v];
          } else {
            out[v].r[m - S * S] = x.v[v];
          }
        }
      }
    };

    Elem block_agg[V];
    bool block_restart = false;
    for (int q = 0; q < n_groups; ++q) {
      Elem ga[V];
      read_slot(q, ga);
      const bool rq = s_restart[q] != 0;
#pragma unroll
      for (int v = 0; v < V; ++v) fold_into(block_agg[v], ga[v], q == 0 || rq);
      block_restart = block_restart || rq;
    }

    T* my_agg = aggregates + lb * kElem * kWidth + lane * V;
    T* my_inc = inclusives + lb * S * kWidth + lane * V;
    auto publish_inclusive = [&](const T (&x)[V][S]) {
      if (active) {
#pragma unroll
        for (int s = 0; s < S; ++s) {
          Pack<T, V> p;
#pragma unroll
          for (int v = 0; v < V; ++v) p.v[v] = x[v][s];
          store_pack<T, V>(my_inc + s * kWidth, p);
        }
      }
      publish_flag(flags + lb, kFlagInclusive);
    };

    // A chunk holding a restart knows its end state without a carry: publish it at once (the
    // first chunk always does, so every look-back ends).
    if (block_restart) {
      T x[V][S];
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int s = 0; s < S; ++s) x[v][s] = block_agg[v].r[s];
      publish_inclusive(x);
    } else {
      if (active) {
#pragma unroll
        for (int m = 0; m < kElem; ++m) {
          Pack<T, V> p;
#pragma unroll
          for (int v = 0; v < V; ++v)
            p.v[v] = m < S * S ? block_agg[v].J[m] : block_agg[v].r[m - S * S];
          store_pack<T, V>(my_agg + m * kWidth, p);
        }
      }
      publish_flag(flags + lb, kFlagAggregate);
    }

    // The state entering this chunk.
    T carry[V][S];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
      for (int s = 0; s < S; ++s) carry[v][s] = T(0);
    if (k > 0) {
      // Fixed association (CONTRACT §5: a solve repeats bit for bit, whatever finishes first).
      // Chunks whose index is a multiple of kAnchor are anchors. The state entering chunk k is
      //   agg(k−1) ∘ … ∘ agg(s+1) applied to the state at the end of chunk s,
      // s = the nearest chunk before k that is an anchor or holds a restart (chunk 0 is both), so
      // s ≥ k − kAnchor and the window k−1 … s is read in one round trip. Only anchors and
      // restart chunks publish an end state (kFlagInclusive); every other chunk publishes its
      // aggregate alone, so a window position flagged inclusive before the anchor is a restart.
      // The window's aggregates are composed (later ∘ earlier) while the anchor may still be
      // waiting on its own anchor; then its end state is awaited.
      constexpr int kAnchor = Shape::kAnchor;
      const int n_win = static_cast<int>((k - 1) % kAnchor) + 1;  // chunks k−1 … k−n_win (the anchor)
      int stop = -1;  // window position of the end state used (a restart chunk, or the anchor)
      for (unsigned spins = 0;; ++spins) {
        unsigned f[kAnchor];
#pragma unroll
        for (int w = 0; w < kAnchor; ++w)
          f[w] = w < n_win ? load_flag_acquire(flags + (k - 1 - w) * g.n_tiles + tile) : 0u;
        // The warp agrees on the smallest flag each lane saw, so every lane acquired what it reads.
        bool ready = false, blocked = false;
        stop = -1;
#pragma unroll
        for (int w = 0; w < kAnchor; ++w) {
          if (w < n_win) f[w] = __reduce_min_sync(kFull, f[w]);
          if (w < n_win && stop < 0 && !ready && !blocked) {
            if (f[w] == kFlagInclusive) {
              stop = w;
            } else if (w == n_win - 1) {
              ready = true;  // every aggregate is in; the anchor's end state is awaited below
            } else if (f[w] == 0) {
              blocked = true;
            }
          }
        }
        if (stop >= 0 || ready) break;
        // A predecessor silent for seconds means a broken invariant: fail the launch
        // (cudaErrorLaunchFailure) rather than hang the device.
        if (spins > kMaxSpins) __trap();
        __nanosleep(40);
      }
      const int n_agg = stop >= 0 ? stop : n_win - 1;
      Elem acc[V];  // composite of the window's aggregates before the end state (later ∘ earlier)
#pragma unroll
      for (int w = 0; w < kAnchor - 1; ++w) {  // n_agg <= kAnchor − 1
        if (active && w < n_agg) {
          const int64_t jl = (k - 1 - w) * g.n_tiles + tile;
          Elem a[V];
#pragma unroll
          for (int m = 0; m < kElem; ++m) {
            const Pack<T, V> p = load_pack_cg<T, V>(aggregates + (jl * kElem + m) * kWidth + lane * V);
#pragma unroll
            for (int v = 0; v < V; ++v) {
              if (m < S * S) {
                a[v].J[m] = p.v[v];
              } else {
                a[v].r[m - S * S] = p.v[v];
              }
            }
          }
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] = w == 0 ? a[v] : cells::compose(acc[v], a[v]);
        }
      }
      if (stop < 0) {
        stop = n_win - 1;
        unsigned* anchor = flags + (k - 1 - stop) * g.n_tiles + tile;
        for (unsigned spins = 0; __reduce_min_sync(kFull, load_flag_acquire(anchor)) != kFlagInclusive; ++spins) {
          if (spins > kMaxSpins) __trap();
          __nanosleep(40);
        }
      }
      if (active) {
        const int64_t jl = (k - 1 - stop) * g.n_tiles + tile;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const Pack<T, V> p = load_pack_cg<T, V>(inclusives + (jl * S + s) * kWidth + lane * V);
#pragma unroll
          for (int v = 0; v < V; ++v) carry[v][s] = p.v[v];
        }
        if (n_agg > 0) {
#pragma unroll
          for (int v = 0; v < V; ++v) {
            T out[S];
            cells::apply(acc[v], carry[v], out);
#pragma unroll
            for (int s = 0; s < S; ++s) carry[v][s] = out[s];
          }
        }
      }
    }

    if (!block_restart && k % Shape::kAnchor == 0) {
      T x[V][S];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        T out[S];
        cells::apply(block_agg[v], carry[v], out);
#pragma unroll
        for (int s = 0; s < S; ++s) x[v][s] = out[s];
      }
      publish_inclusive(x);
    }

    // The state entering each group, into the r part of its slot.
    for (int q = 0; q < n_groups; ++q) {
      Elem ga[V];
      read_slot(q, ga);
#pragma unroll
      for (int s = 0; s < S; ++s) {
        Pack<T, V> p;
#pragma unroll
        for (int v = 0; v < V; ++v) p.v[v] = carry[v][s];
        *reinterpret_cast<Pack<T, V>*>(s_agg + (q * kElem + S * S + s) * kWidth + lane * V) = p;
      }
      const bool rq = s_restart[q] != 0;
#pragma unroll
      for (int v = 0; v < V; ++v) advance(ga[v], rq, carry[v]);
    }
  }
  if constexpr (!kMissingBarrier) __syncthreads();

  // Every thread re-runs its elements from the state entering its group.
  if (active && n_valid > 0) {
    T prev[V][S];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(
          s_agg + (grp * kElem + S * S + s) * kWidth + lane * V);
#pragma unroll
      for (int v = 0; v < V; ++v) prev[v][s] = p.v[v];
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      if (u < n_valid) {
#pragma unroll
        for (int v = 0; v < V; ++v) advance(e[u][v], restart[u], prev[v]);
        src.store(b, time_at<kReverse>(group_start + u, g.time), c0, u, prev);
      }
    }
  }
  src.finish();
}

// ---------------------------------------------------------------------------------------------
// Three phases. Workspace: restart flags [K] bytes, then aggregates [b][k][S·S+S][D]; phase 2
// overwrites each aggregate's r part with the state entering its chunk.

struct ThreePhaseLayout {
  std::size_t aggregate = 0;
  std::size_t total = 0;
};

inline ThreePhaseLayout three_phase_layout(int S, std::size_t value_bytes, int64_t batch,
                                           int64_t time, int64_t channels, int64_t chunk) {
  ThreePhaseLayout l;
  const int64_t n_chunks = (time + chunk - 1) / chunk;
  l.aggregate = align_up(static_cast<std::size_t>(n_chunks), kWorkspaceAlignment);
  l.total = align_up(l.aggregate + static_cast<std::size_t>(batch * n_chunks * (S * S + S) *
                                                            channels) *
                                       value_bytes,
                     kWorkspaceAlignment);
  return l;
}

inline constexpr int kPhaseChunksPerBlock = 8;  // blockDim.y of phases 1 and 3

// Thread (lane, y) of block x handles chunk k of tile `tile` for idx = x·8 + y = k·n_tiles + tile.
struct PhaseThread {
  int64_t k, b, c0;
  bool valid, active;
};

template <int V>
__device__ __forceinline__ PhaseThread phase_thread(const ScanGeometry& g) {
  PhaseThread p;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kPhaseChunksPerBlock + threadIdx.y;
  p.valid = idx < g.n_tiles * g.n_chunks;
  p.k = idx / g.n_tiles;
  const int64_t tile = idx - p.k * g.n_tiles;
  p.b = tile / g.n_ctiles;
  p.c0 = (tile - p.b * g.n_ctiles) * (32 * V) + static_cast<int64_t>(threadIdx.x) * V;
  p.active = p.valid && p.c0 < g.channels;
  return p;
}

template <int S, class T, int V, bool kReverse>
__global__ void scan_phase1_kernel(const T* __restrict__ jac, const T* __restrict__ delta,
                                   const std::uint8_t* __restrict__ head, ScanGeometry g,
                                   std::uint8_t* __restrict__ chunk_restart,
                                   T* __restrict__ aggregates) {
  using Elem = cells::AffineElement<S, T>;
  constexpr int kElem = S * S + S;
  const PhaseThread th = phase_thread<V>(g);
  if (!th.valid) return;
  const int64_t begin = th.k * g.chunk;
  const int64_t end = begin + g.chunk < g.time ? begin + g.chunk : g.time;
  Elem agg[V];
  bool any_restart = false;
#pragma unroll 4
  for (int64_t p = begin; p < end; ++p) {
    const int64_t t = time_at<kReverse>(p, g.time);
    const bool restart = is_restart<kReverse>(head, t, g.time);
    any_restart = any_restart || restart;
    if (th.active) {
      Elem e[V];
      load_element<S, T, V, kReverse>(jac, delta, th.b, t, g.time, g.channels, th.c0, restart, e);
#pragma unroll
      for (int v = 0; v < V; ++v) fold_into(agg[v], e[v], p == begin || restart);
    }
  }
  if (th.active) {
    T* out = aggregates + (th.b * g.n_chunks + th.k) * kElem * g.channels + th.c0;
#pragma unroll
    for (int m = 0; m < kElem; ++m) {
      Pack<T, V> x;
#pragma unroll
      for (int v = 0; v < V; ++v) x.v[v] = m < S * S ? agg[v].J[m] : agg[v].r[m - S * S];
      store_pack<T, V>(out + m * g.channels, x);
    }
  }
  if (th.b == 0 && th.c0 == 0) chunk_restart[th.k] = any_restart ? 1 : 0;
}

// One thread per (b, V channels): the states entering each chunk, sequentially over chunks.
template <int S, class T, int V>
__global__ void scan_phase2_kernel(ScanGeometry g, const std::uint8_t* __restrict__ chunk_restart,
                                   T* __restrict__ aggregates) {
  using Elem = cells::AffineElement<S, T>;
  constexpr int kElem = S * S + S;
  constexpr int kBatch = 4;  // chunks whose aggregates are loaded before any is used
  const int64_t vectors = g.channels / V;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= g.batch * vectors) return;
  const int64_t b = idx / vectors;
  const int64_t c0 = (idx - b * vectors) * V;
  T carry[V][S];
#pragma unroll
  for (int v = 0; v < V; ++v)
#pragma unroll
    for (int s = 0; s < S; ++s) carry[v][s] = T(0);
  for (int64_t k0 = 0; k0 < g.n_chunks; k0 += kBatch) {
    Elem a[kBatch][V];
    bool restart[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      restart[j] = false;
      if (k0 + j < g.n_chunks) {
        restart[j] = chunk_restart[k0 + j] != 0;
        const T* in = aggregates + (b * g.n_chunks + k0 + j) * kElem * g.channels + c0;
#pragma unroll
        for (int m = 0; m < kElem; ++m) {
          const Pack<T, V> x = load_pack<T, V>(in + m * g.channels);
#pragma unroll
          for (int v = 0; v < V; ++v) {
            if (m < S * S) {
              a[j][v].J[m] = x.v[v];
            } else {
              a[j][v].r[m - S * S] = x.v[v];
            }
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (k0 + j < g.n_chunks) {
        T* out = aggregates + (b * g.n_chunks + k0 + j) * kElem * g.channels + c0;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          Pack<T, V> x;
#pragma unroll
          for (int v = 0; v < V; ++v) x.v[v] = carry[v][s];
          store_pack<T, V>(out + (S * S + s) * g.channels, x);
        }
#pragma unroll
        for (int v = 0; v < V; ++v) advance(a[j][v], restart[j], carry[v]);
      }
    }
  }
}

template <int S, class T, int V, bool kReverse>
__global__ void scan_phase3_kernel(const T* __restrict__ jac, T* __restrict__ delta,
                                   const std::uint8_t* __restrict__ head, ScanGeometry g,
                                   const T* __restrict__ aggregates) {
  using Elem = cells::AffineElement<S, T>;
  constexpr int kElem = S * S + S;
  const PhaseThread th = phase_thread<V>(g);
  if (!th.active) return;
  const int64_t begin = th.k * g.chunk;
  const int64_t end = begin + g.chunk < g.time ? begin + g.chunk : g.time;
  T prev[V][S];
  const T* in = aggregates + (th.b * g.n_chunks + th.k) * kElem * g.channels + th.c0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const Pack<T, V> x = load_pack<T, V>(in + (S * S + s) * g.channels);
#pragma unroll
    for (int v = 0; v < V; ++v) prev[v][s] = x.v[v];
  }
#pragma unroll 4
  for (int64_t p = begin; p < end; ++p) {
    const int64_t t = time_at<kReverse>(p, g.time);
    const bool restart = is_restart<kReverse>(head, t, g.time);
    Elem e[V];
    load_element<S, T, V, kReverse>(jac, delta, th.b, t, g.time, g.channels, th.c0, restart, e);
#pragma unroll
    for (int v = 0; v < V; ++v) advance(e[v], restart, prev[v]);
    store_state<S, T, V>(delta, th.b, t, g.time, g.channels, th.c0, prev);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

template <class T>
constexpr int vector_width() {
  return static_cast<int>(16 / sizeof(T));
}
// Channels per thread: 16-byte vectors for S <= 2; one for larger blocks, whose elements
// (S² + S values each, kSteps of them) already fill the registers and the shared memory.
template <int S, class T>
constexpr int channel_vector_width() {
  return S <= 2 ? vector_width<T>() : 1;
}

inline bool aligned_to(const void* p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

// One single-pass launch over `source`'s elements (the workspace of single_pass_layout), with
// the register shape `Shape` (SinglePassShape).
template <int S, class T, int V, bool kReverse, class Shape = SinglePassLimits<S>, class Source>
cudaError_t run_single_pass(const Source& source, const std::uint8_t* head, int64_t batch, int64_t time,
                            int64_t channels, int64_t chunk, void* workspace, std::size_t workspace_bytes,
                            cudaStream_t stream) {
  ScanGeometry g;
  g.batch = batch;
  g.time = time;
  g.channels = channels;
  g.chunk = chunk;
  g.n_chunks = (time + chunk - 1) / chunk;
  g.n_ctiles = (channels + 32 * V - 1) / (32 * V);
  g.n_tiles = batch * g.n_ctiles;
  auto* base = static_cast<unsigned char*>(workspace);
  const SinglePassLayout l = single_pass_layout(S, sizeof(T), V, batch, time, channels, chunk);
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  if (l.n_blocks > INT_MAX) return cudaErrorInvalidValue;
  // Largest steps per thread that divides the chunk within the group limit.
  int steps = 0;
  for (int s = Shape::kSteps; s >= 1; --s)
    if (chunk % s == 0 && chunk / s <= Shape::kGroups) {
      steps = s;
      break;
    }
  if (steps == 0) return cudaErrorInvalidValue;
  g.steps = steps;
  g.groups = static_cast<int>(chunk / steps);
  if (cudaError_t e = cudaMemsetAsync(base, 0, l.zeroed, stream); e != cudaSuccess) return e;
  // The group slots, then what the source keeps per group (Source::kSharedPerGroup).
  const std::size_t smem =
      static_cast<std::size_t>(g.groups) * ((S * S + S) * 32 * V * sizeof(T) + Source::kSharedPerGroup);
  auto launch = [&](auto kernel) {
    // The kernel's static shared memory (ticket, restart flags) counts against the same 48 KiB
    // default as the dynamic size (sLSTM's fused adjoint: exactly 48 KiB dynamic, which did not
    // launch). Past it, the limit is raised to the device's most, a value that does not depend
    // on this launch, so another thread's launch of the same kernel cannot lower it under us.
    cudaFuncAttributes fa{};
    if (cudaError_t e = cudaFuncGetAttributes(&fa, kernel); e != cudaSuccess) return e;
    if (fa.sharedSizeBytes + smem > 48 * 1024) {
      int device = 0, optin = 0;
      if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
      if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
          e != cudaSuccess)
        return e;
      if (fa.sharedSizeBytes + smem > static_cast<std::size_t>(optin)) return cudaErrorInvalidValue;
      if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               optin - static_cast<int>(fa.sharedSizeBytes));
          e != cudaSuccess)
        return e;
    }
    kernel<<<static_cast<unsigned>(l.n_blocks), dim3(32, static_cast<unsigned>(g.groups)), smem, stream>>>(
        source, head, g, reinterpret_cast<unsigned*>(base), reinterpret_cast<unsigned*>(base + l.flags),
        reinterpret_cast<T*>(base + l.aggregate), reinterpret_cast<T*>(base + l.inclusive));
    return cudaGetLastError();
  };
#if defined(PARARNN_FAULTS) && PARARNN_FAULTS  // both passes: the device pass must compile the faulty kernel
  if (PARARNN_FAULT_POINT("missing_scan_barrier"))
    return launch(scan_single_pass_kernel<S, T, V, kReverse, Source, Shape, true>);
#endif
  return launch(scan_single_pass_kernel<S, T, V, kReverse, Source, Shape>);
}

template <int S, class T, int V, bool kReverse>
cudaError_t run_scan(const ScanArgs<T>& a, int64_t chunk, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  ScanGeometry g;
  g.batch = a.batch;
  g.time = a.time;
  g.channels = a.channels;
  g.chunk = chunk;
  g.n_chunks = (a.time + chunk - 1) / chunk;
  g.n_ctiles = (a.channels + 32 * V - 1) / (32 * V);
  g.n_tiles = a.batch * g.n_ctiles;
  auto* base = static_cast<unsigned char*>(workspace);

  if (a.tiling.algorithm == ScanAlgorithm::single_pass)
    return run_single_pass<S, T, V, kReverse>(
        BufferSource<S, T, V, kReverse>{a.jac, a.delta, a.time, a.channels}, a.head, a.batch, a.time,
        a.channels, chunk, workspace, workspace_bytes, stream);

  const ThreePhaseLayout l = three_phase_layout(S, sizeof(T), a.batch, a.time, a.channels, chunk);
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;
  const int64_t phase_blocks =
      (g.n_tiles * g.n_chunks + kPhaseChunksPerBlock - 1) / kPhaseChunksPerBlock;
  const int64_t chain_vectors = a.batch * (a.channels / V);
  const int64_t phase2_blocks = (chain_vectors + 127) / 128;
  if (phase_blocks > INT_MAX || phase2_blocks > INT_MAX) return cudaErrorInvalidValue;
  auto* chunk_restart = reinterpret_cast<std::uint8_t*>(base);
  T* aggregates = reinterpret_cast<T*>(base + l.aggregate);
  const dim3 phase_block(32, kPhaseChunksPerBlock);
  scan_phase1_kernel<S, T, V, kReverse>
      <<<static_cast<unsigned>(phase_blocks), phase_block, 0, stream>>>(
          a.jac, a.delta, a.head, g, chunk_restart, aggregates);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  scan_phase2_kernel<S, T, V>
      <<<static_cast<unsigned>(phase2_blocks), 128, 0, stream>>>(g, chunk_restart, aggregates);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  scan_phase3_kernel<S, T, V, kReverse>
      <<<static_cast<unsigned>(phase_blocks), phase_block, 0, stream>>>(a.jac, a.delta, a.head,
                                                                        g, aggregates);
  return cudaGetLastError();
}

template <int S, class T>
std::size_t workspace_bytes_impl(int64_t batch, int64_t time, int64_t channels,
                                 ScanTiling tiling) {
  if (batch <= 0 || time <= 0 || channels <= 0) return 0;
  const int64_t chunk =
      tiling.chunk_length > 0 ? tiling.chunk_length : scan_default_chunk(S, tiling.algorithm);
  if (tiling.algorithm == ScanAlgorithm::three_phase)
    return three_phase_layout(S, sizeof(T), batch, time, channels, chunk).total;
  const std::size_t narrow = single_pass_layout(S, sizeof(T), 1, batch, time, channels, chunk).total;
  const std::size_t wide =
      single_pass_layout(S, sizeof(T), channel_vector_width<S, T>(), batch, time, channels, chunk).total;
  return narrow > wide ? narrow : wide;
}

template <int S, class T>
cudaError_t launch_impl(const ScanArgs<T>& a, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.time == 0 || a.channels == 0) return cudaSuccess;
  if (a.jac == nullptr || a.delta == nullptr) return cudaErrorInvalidValue;
  if (!scan_chunk_supported(S, a.tiling.algorithm, a.tiling.chunk_length))
    return cudaErrorInvalidValue;
  if (workspace == nullptr || !aligned_to(workspace, 16)) return cudaErrorInvalidValue;
  const int64_t chunk = a.tiling.chunk_length > 0 ? a.tiling.chunk_length
                                                  : scan_default_chunk(S, a.tiling.algorithm);
  constexpr int kWide = channel_vector_width<S, T>();
  const bool wide =
      kWide > 1 && a.channels % kWide == 0 && aligned_to(a.jac, 16) && aligned_to(a.delta, 16);
  if (wide) {
    return a.reverse ? run_scan<S, T, kWide, true>(a, chunk, workspace, workspace_bytes, stream)
                     : run_scan<S, T, kWide, false>(a, chunk, workspace, workspace_bytes, stream);
  }
  return a.reverse ? run_scan<S, T, 1, true>(a, chunk, workspace, workspace_bytes, stream)
                   : run_scan<S, T, 1, false>(a, chunk, workspace, workspace_bytes, stream);
}

}  // namespace pararnn::kernels::detail

namespace pararnn::kernels {

template <int S, class T>
std::size_t scan_affine_workspace_bytes(std::int64_t batch, std::int64_t time,
                                        std::int64_t channels, ScanTiling tiling) {
  return detail::workspace_bytes_impl<S, T>(batch, time, channels, tiling);
}

template <int S, class T>
cudaError_t launch_scan_affine(const ScanArgs<T>& args, void* workspace,
                               std::size_t workspace_bytes, cudaStream_t stream) {
  return detail::launch_impl<S, T>(args, workspace, workspace_bytes, stream);
}

}  // namespace pararnn::kernels

#define PARARNN_INSTANTIATE_SCAN_AFFINE(S, T)                                                 \
  template std::size_t pararnn::kernels::scan_affine_workspace_bytes<S, T>(                   \
      std::int64_t, std::int64_t, std::int64_t, pararnn::kernels::ScanTiling);                \
  template cudaError_t pararnn::kernels::launch_scan_affine<S, T>(                            \
      const pararnn::kernels::ScanArgs<T>&, void*, std::size_t, cudaStream_t);
