// The dense affine scan on the GPU: chains of n ≤ 64 values whose Jacobian blocks J_t are full
// n x n matrices (Hopfield, GRU and sLSTM head mixes, sLSTM dense; RWKV-7's rows with J_t = G_tᵀ),
// forward or reverse (adjoint), in place, arithmetic in T (float for float, double for double). The device twin
// of `scan_dense` (solver/scan.hpp): the same element (J, r) acting as δ ↦ J δ + r, the same head
// rule, the same dot-product order in every matrix-vector step (acc = r_i, then += J_ik δ_k for
// k = 0 .. n−1, as cells::apply_dense).
//
// What it solves, for every chain (b, g, i) with b < batch, g < groups, i < rows:
//   δ_t = J_t δ_{t−1} + r_t   for t = 0 .. T−1,  J_t treated as 0 at t = 0 and wherever
//   head[t] != 0 (a restart: δ_t = r_t exactly, J_t is not read, so it may hold anything, and
//   nothing before a restart reaches anything after it, not even a NaN).
// With `reverse`, the transpose of that operator (the adjoint scan, for backward passes):
//   μ_t = g_t + J_{t+1}ᵀ μ_{t+1}   for t = T−1 .. 0,
// the coupling treated as 0 at t = T−1 and wherever head[t+1] != 0 (the last step of a packed
// segment: the same head array, nothing shifted); J_0 is never read in either direction. The
// chunks then run over the reversed time axis and J_{t+1} is staged transposed; the dot-product
// order is acc = g_i, then += J_{t+1}[k][i] μ_{t+1}[k] for k = 0 .. n−1.
// The `rows` chains of one group (b, g) share their J; this is how RWKV-7 scans the d rows of a
// head's matrix state with one J_t = G_tᵀ.
//
// Layout (int64 element offsets throughout; a chain's n values are contiguous):
//   r (in) / δ (out)  element e of chain (b, g, i) at time t:
//                     r[b·r_batch + g·r_group + i·r_row + t·r_time + e]
//   J                 jac[((b·groups + g)·T + t)·n² + out·n + in]   ([b][g][t][out][in])
//   head[t], t < T    optional device bytes (nullptr: the only restart is t = 0)
// The two users:
//   dense backend (chain-major H/F [chain][t][N], chain = b·groups + g):
//     groups = chains per batch row, rows = 1, r_time = N, r_group = T·N, r_batch = groups·T·N
//   RWKV-7 (trajectory [b][t][head][i][j], n = d):
//     groups = heads, rows = d, r_row = d, r_time = H·d², r_group = d², r_batch = T·H·d²
//
// Algorithm: three phases over time chunks of L steps (DenseScanArgs::chunk_length, 0 = the
// default max(64, n), so the chunk aggregates take no more memory than r).
//   (1) one block per (b, g, chunk, column tile) folds the chunk into [A | B]: A = J_end ⋯ J_begin
//       (restarts → 0), B's column i = the chunk's δ from a zero carry for row i; thread (e, c)
//       owns entry e of column c, J_t is staged in shared memory once per step for all columns;
//   (2) one block per (b, g, row tile) walks the chunks in order: carry_{k+1} = A_k carry_k + B_k
//       (B_k alone when chunk k holds a restart), storing carry_k over B_k in the workspace;
//   (3) one block per (b, g, chunk, row tile) re-runs the chunk from its carry, writing δ.
// J and r are read twice; phase 1 costs n times the arithmetic of the sequential substitution
// (the n columns of A), as any parallel dense scan does.
//
// Guarantees: on inputs whose arithmetic is exact (dyadic rationals with bounded exponents and
// sums, e.g. J_t a scaled partial signed permutation, small integer r) the result equals
// sequential substitution bit for bit, for every chunk length; otherwise it differs from it by
// re-association only. Never allocates, never synchronises; the workspace holds the aggregates
// and must not be shared by launches that may run concurrently.
//
// Example (dense backend, B = 8, one chain per row, N = 16, T = 65536, f32):
//   DenseScanArgs<float> a{.jac = d_J, .delta = d_F, .head = nullptr, .batch = 8, .groups = 1,
//                          .rows = 1, .time = 65536, .n = 16, .r_batch = 65536 * 16,
//                          .r_group = 65536 * 16, .r_row = 0, .r_time = 16};
//   size_t bytes = scan_dense_workspace_bytes<float>(a);            // caller allocates
//   cudaError_t e = launch_scan_dense<float>(a, d_workspace, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

// The largest chain width the dense scan accepts.
inline constexpr std::int64_t kDenseScanMaxN = 64;

template <class T>
struct DenseScanArgs {
  const T* jac = nullptr;              // J, [b][g][t][out][in]
  T* delta = nullptr;                  // in: r; out: δ (strided, see above)
  const std::uint8_t* head = nullptr;  // optional, [t]: nonzero where a packed segment starts
  std::int64_t batch = 0;
  std::int64_t groups = 1;
  std::int64_t rows = 1;
  std::int64_t time = 0;
  std::int64_t n = 0;                  // 1 .. kDenseScanMaxN
  std::int64_t r_batch = 0;            // element strides of r / δ
  std::int64_t r_group = 0;
  std::int64_t r_row = 0;
  std::int64_t r_time = 0;
  std::int64_t chunk_length = 0;       // time steps per chunk; 0: dense_scan_default_chunk(n)
  bool reverse = false;                // the adjoint scan (see above)
};

constexpr std::int64_t dense_scan_default_chunk(std::int64_t n) { return n > 64 ? n : 64; }

// Bytes of workspace `launch_scan_dense` needs for this shape and chunk length (the strides and
// pointers of `args` are not read). Zero-sized problems need none; invalid shapes report 0.
template <class T>
std::size_t scan_dense_workspace_bytes(const DenseScanArgs<T>& args);

// Solves the scan described above in place on args.delta, on `stream`. Returns
// cudaErrorInvalidValue for a null jac or delta, a negative size, n outside 1 .. 64, a negative
// chunk length, or a workspace that is null, too small or not aligned to 16 bytes; otherwise the
// launches' error. A problem with no chain or no step succeeds without touching anything.
template <class T>
cudaError_t launch_scan_dense(const DenseScanArgs<T>& args, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace pararnn::kernels
