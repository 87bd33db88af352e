// Device side of launch_sequential_apply (kernels/sequential.hpp): one thread per chain, gate
// pre-activations of the next kPrefetch steps loaded while the current ones are computed, so the
// loop waits on the cell's arithmetic rather than on memory. The Picard passes of sLSTM's initial
// guess are the same loop with the hidden slot entering each non-head step replaced
// (zero_hidden, frozen_hidden). Included by sequential.cu and by the benchmark that measures the
// prefetch distance (bench/shape_sweep.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/kernels/newton_cells.hpp"
#include "pararnn/kernels/sequential.hpp"

namespace pararnn::kernels::detail {


using std::int64_t;

// 32 threads a block: a few thousand chains then spread over as many multiprocessors as possible
// (each chain is a latency-bound dependency chain).
constexpr int kSequentialThreads = 32;
// The production prefetch distance in steps: 24 for cells of up to three gates (GRU-diag at S1:
// 18.8 ms against 20.7 ms at 8, bitwise the same result; bench/shape_sweep.cu), 8 for wider
// cells (their register arrays grow with the gates; not measured yet).
constexpr int sequential_prefetch(int gates) { return gates <= 3 ? 24 : 8; }

// kHeads: the problem has heads after t = 0 or h0 rows (packed input); without, the only head
// is t = 0 and no per-step head flag is loaded. kPicard: the launch may be a Picard pass
// (frozen_hidden, zero_hidden); without, those arguments are not read, and a step has no branch
// before the cell's arithmetic (the launcher picks it only when both are unset). The loop is issue-bound (a few thousand chains,
// a warp per scheduler at most), so the addresses advance by a stride per step instead of being
// recomputed from (b, t) with 64-bit multiplies, and full prefetch blocks run without per-step
// bounds checks; the arithmetic of a step is the cell's and nothing else.
template <class CellMath, class StorageT, int kPrefetch = sequential_prefetch(CellMath::kGates), bool kHeads = true,
          bool kPicard = true>
__global__ void __launch_bounds__(kSequentialThreads)
    sequential_kernel(SequentialArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int R = CellMath::kRecurrent + CellMath::kConstants;  // clamped entries, then constants
  const int64_t D = a.channels, T = a.time;
  const int64_t chain = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chain >= a.batch * D) return;
  const int64_t b = chain / D;
  const int64_t c = chain - b * D;

  ComputeT rec[R];
#pragma unroll
  for (int k = 0; k < R; ++k) rec[k] = a.recurrent[k * D + c];

  const int64_t gate_step = G * D, state_step = S * D;
  const ComputeT* const wx = a.wx + b * T * gate_step + c;  // this chain's step 0
  StorageT* const out = a.H + b * T * state_step + c;
  const ComputeT* const frozen =  // the hidden slot of this chain's step 0 in frozen_hidden
      kPicard && a.frozen_hidden != nullptr ? a.frozen_hidden + b * T * state_step + (S - 1) * D + c : nullptr;

  ComputeT cur[kPrefetch][G], nxt[kPrefetch][G];
  bool cur_head[kPrefetch], nxt_head[kPrefetch];
  // The gates (and, with kHeads, the head flags) of the n <= kPrefetch steps from t0.
  auto load_steps = [&](int64_t t0, int n, ComputeT (&w)[kPrefetch][G], bool (&hd)[kPrefetch]) {
    const ComputeT* p = wx + t0 * gate_step;
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      if (u < n) {
#pragma unroll
        for (int g = 0; g < G; ++g) w[u][g] = p[g * D];
        if constexpr (kHeads) hd[u] = t0 + u == 0 || (a.head != nullptr && a.head[t0 + u] != 0);
      }
      p += gate_step;
    }
  };

  ComputeT h[S];
#pragma unroll
  for (int s = 0; s < S; ++s) h[s] = ComputeT(0);
  bool finite = true;
  int64_t off = 0;  // t · state_step: step t's offset in out and frozen
  // One step of the recurrence at t (u: its slot in the prefetch block).
  auto run_step = [&](int u, int64_t t, bool at_head) {
    ComputeT h_prev[S];
    if (at_head) {
      const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = a.h0 != nullptr ? a.h0[(row * S + s) * D + c] : ComputeT(0);
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = h[s];
      // A Picard pass: the hidden slot (the last) entering the step is the previous pass's.
      if constexpr (kPicard)
        if (frozen != nullptr) h_prev[S - 1] = frozen[off - state_step];
    }
    if constexpr (kPicard)
      if (a.zero_hidden) h_prev[S - 1] = ComputeT(0);  // the zero-hidden pass, heads included
    ComputeT h_new[S];
    CellMath::step(rec, cur[u], h_prev, h_new, static_cast<ComputeT*>(nullptr));
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const StorageT stored = static_cast<StorageT>(h_new[s]);
      out[off + s * D] = stored;
      h[s] = static_cast<ComputeT>(stored);
      finite = finite && isfinite(h[s]);
    }
    off += state_step;
  };

  load_steps(0, static_cast<int>(T < kPrefetch ? T : kPrefetch), cur, cur_head);
  for (int64_t t0 = 0; t0 < T; t0 += kPrefetch) {
    const int64_t left = T - t0 - kPrefetch;  // steps after this block
    if (left > 0) load_steps(t0 + kPrefetch, static_cast<int>(left < kPrefetch ? left : kPrefetch), nxt, nxt_head);
    if (left >= 0) {  // a full block: no bounds checks
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u)
        run_step(u, t0 + u, kHeads ? cur_head[u] : (u == 0 && t0 == 0));
    } else {
      const int n = static_cast<int>(T - t0);
#pragma unroll
      for (int u = 0; u < kPrefetch; ++u)
        if (u < n) run_step(u, t0 + u, kHeads ? cur_head[u] : (u == 0 && t0 == 0));
    }
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      cur_head[u] = nxt_head[u];
#pragma unroll
      for (int g = 0; g < G; ++g) cur[u][g] = nxt[u][g];
    }
  }
  if (!finite && a.non_finite != nullptr) atomicOr(a.non_finite, 1u);
}

}  // namespace pararnn::kernels::detail
