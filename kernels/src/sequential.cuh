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

template <class CellMath, class StorageT, int kPrefetch = sequential_prefetch(CellMath::kGates)>
__global__ void __launch_bounds__(kSequentialThreads)
    sequential_kernel(SequentialArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int R = CellMath::kRecurrent + CellMath::kConstants;  // clamped entries, then constants
  const int64_t D = a.channels;
  const int64_t chain = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chain >= a.batch * D) return;
  const int64_t b = chain / D;
  const int64_t c = chain - b * D;

  ComputeT rec[R];
#pragma unroll
  for (int k = 0; k < R; ++k) rec[k] = a.recurrent[k * D + c];

  ComputeT cur[kPrefetch][G], nxt[kPrefetch][G];
  bool cur_head[kPrefetch], nxt_head[kPrefetch];
  auto load_steps = [&](int64_t t0, ComputeT (&w)[kPrefetch][G], bool (&hd)[kPrefetch]) {
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      const int64_t t = t0 + u;
      hd[u] = false;
      if (t < a.time) {
        const ComputeT* row = a.wx + (b * a.time + t) * G * D + c;
#pragma unroll
        for (int g = 0; g < G; ++g) w[u][g] = row[g * D];
        hd[u] = t == 0 || (a.head != nullptr && a.head[t] != 0);
      }
    }
  };

  ComputeT h[S];
#pragma unroll
  for (int s = 0; s < S; ++s) h[s] = ComputeT(0);
  bool finite = true;
  load_steps(0, cur, cur_head);
  for (int64_t t0 = 0; t0 < a.time; t0 += kPrefetch) {
    if (t0 + kPrefetch < a.time) load_steps(t0 + kPrefetch, nxt, nxt_head);
#pragma unroll
    for (int u = 0; u < kPrefetch; ++u) {
      const int64_t t = t0 + u;
      if (t < a.time) {
        ComputeT h_prev[S];
        if (cur_head[u]) {
          const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
          for (int s = 0; s < S; ++s)
            h_prev[s] = a.h0 != nullptr ? a.h0[(row * S + s) * D + c] : ComputeT(0);
        } else {
#pragma unroll
          for (int s = 0; s < S; ++s) h_prev[s] = h[s];
          // A Picard pass: the hidden slot (the last) entering the step is the previous pass's.
          if (a.frozen_hidden != nullptr)
            h_prev[S - 1] = a.frozen_hidden[((b * a.time + t - 1) * S + S - 1) * D + c];
        }
        if (a.zero_hidden) h_prev[S - 1] = ComputeT(0);  // the zero-hidden pass, heads included
        ComputeT h_new[S];
        CellMath::step(rec, cur[u], h_prev, h_new, static_cast<ComputeT*>(nullptr));
        StorageT* out = a.H + (b * a.time + t) * S * D + c;
#pragma unroll
        for (int s = 0; s < S; ++s) {
          const StorageT stored = static_cast<StorageT>(h_new[s]);
          out[s * D] = stored;
          h[s] = static_cast<ComputeT>(stored);
          finite = finite && isfinite(h[s]);
        }
      }
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
