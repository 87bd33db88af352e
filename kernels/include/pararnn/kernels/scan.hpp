// The affine scan of the Newton linear step on the GPU: S x S blocks per channel (S = 1 for
// diagonal Jacobians, S = 2 for the LSTM, S = 4 for sLSTM-diag), every chain (b, c) independent, in place, arithmetic
// in T (float for float, double for double) through cells/affine_monoid.hpp's `compose` and
// `apply`, the monoid the CPU scans use too.
//
// What it solves.
//   Forward (reverse = false):  δ_t = J_t δ_{t−1} + r_t   for t = 0 .. T−1,  δ_{−1} = 0.
//     J_t is treated as 0 (δ_t = r_t exactly) at t = 0 and wherever head[t] != 0.
//   Reverse (reverse = true), the transpose of the forward operator (the adjoint scan):
//                               μ_t = g_t + J_{t+1}ᵀ μ_{t+1}   for t = T−1 .. 0.
//     The coupling J_{t+1}ᵀ is treated as 0 (μ_t = g_t exactly) at t = T−1 and wherever
//     head[t+1] != 0, i.e. at the last step of every packed segment: μ restarts after each
//     segment END. The same `head` array (1 where a segment STARTS) serves both directions; the
//     caller shifts nothing. J_0 is never read in either direction.
//   A step whose J is treated as 0 is a restart: nothing before it reaches anything after it,
//   not even a NaN or an Inf (J there is not read, so it may hold anything).
//
// Layout (shared with the CPU solver; D = channels, int64 offsets throughout):
//   J(b, t, o, i, c)  at ((b·T + t)·S·S + o·S + i)·D + c      ([b][t][out][in][c])
//   r(b, t, s, c)     at ((b·T + t)·S + s)·D + c              ([b][t][s][c]); δ (μ) overwrites r
//   head[t], t < T    optional device bytes (nullptr: the only head is t = 0)
//
// Algorithms (ScanTiling::algorithm).
//   single_pass (default): decoupled look-back. Each block owns a tile of 32·V channels (V = 16
//     bytes / sizeof(T) when S <= 2 and D and both pointers allow 16-byte vectors, else 1: a
//     4x4 element already fills the registers a vector would need) × one time chunk,
//     holds its elements in registers, publishes the chunk's aggregate, looks back over the
//     predecessors' aggregates / inclusive values for its carry, and writes δ: J and r are read
//     once and δ written once (12 bytes per token-channel for f32 diag). Chunk length
//     L = steps_per_thread × time_groups with steps_per_thread <= scan_max_steps_per_thread(S)
//     (8 for S = 1, 4 for S = 2, 2 for S = 4) and time_groups <= scan_max_time_groups(S) (16
//     for S = 1, else 8): any L <= 8, and larger L with such a split (at most 128 for S = 1, 32
//     for S = 2, 16 for S = 4; default 128 / 32 / 16); scan_chunk_supported says which.
//   three_phase: the simple twin. (1) each chunk's aggregate, (2) a sequential scan of the
//     aggregates per chain giving each chunk's carry, (3) each chunk re-run from its carry.
//     Reads J and r twice. Any chunk length >= 1.
//
// Guarantees: on inputs whose arithmetic is exact (dyadic rationals with bounded exponents and
// sums, e.g. J ∈ {0, ±½, ±1, ±2}, small integer r) the result equals sequential substitution bit
// for bit, for both algorithms, every supported chunk length and both directions; otherwise it
// differs from sequential substitution by re-association only, and that association is fixed by
// the shape and the chunking (the single-pass look-back composes a fixed set of chunks onto a
// fixed anchor, whatever finishes first), so a launch repeats bit for bit. Blocks of one launch synchronise
// through the workspace (flags reset with cudaMemsetAsync on `stream`), so a workspace must not
// be shared by launches that may run concurrently.
//
// Example (B·D = 2048 chains, T = 65536, f32 diagonal):
//   ScanArgs<float> args{.jac = d_J, .delta = d_r, .head = nullptr,
//                        .batch = 8, .time = 65536, .channels = 256};
//   size_t bytes = scan_affine_workspace_bytes<1, float>(8, 65536, 256);   // caller allocates
//   cudaError_t e = launch_scan_affine<1, float>(args, d_workspace, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

enum class ScanAlgorithm : int { single_pass = 0, three_phase = 1 };

struct ScanTiling {
  ScanAlgorithm algorithm = ScanAlgorithm::single_pass;
  std::int64_t chunk_length = 0;  // time steps per chunk; 0: the default for (S, algorithm)
};

template <class T>
struct ScanArgs {
  const T* jac = nullptr;             // J, [b][t][out][in][c]
  T* delta = nullptr;                 // in: r (or g); out: δ (or μ); [b][t][s][c]
  const std::uint8_t* head = nullptr; // optional, [t]: nonzero where a packed segment starts
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
  bool reverse = false;
  ScanTiling tiling{};
};

// Single-pass limits (registers and shared memory per block).
constexpr int scan_max_steps_per_thread(int S) { return S == 1 ? 8 : (S == 2 ? 4 : 2); }
constexpr int scan_max_time_groups(int S) { return S == 1 ? 16 : 8; }

constexpr std::int64_t scan_default_chunk(int S, ScanAlgorithm algorithm) {
  return algorithm == ScanAlgorithm::three_phase ? 256 : scan_max_time_groups(S) * scan_max_steps_per_thread(S);
}

// Whether `chunk_length` (0 = default) is accepted for S and the algorithm.
constexpr bool scan_chunk_supported(int S, ScanAlgorithm algorithm, std::int64_t chunk_length) {
  if (chunk_length == 0) return true;
  if (chunk_length < 0) return false;
  if (algorithm == ScanAlgorithm::three_phase) return true;
  for (int steps = scan_max_steps_per_thread(S); steps >= 1; --steps)
    if (chunk_length % steps == 0 && chunk_length / steps <= scan_max_time_groups(S)) return true;
  return false;
}

// Bytes of workspace `launch_scan_affine` needs for this shape and tiling (an upper bound over
// the vector widths it may pick). Zero-sized problems need none.
template <int S, class T>
std::size_t scan_affine_workspace_bytes(std::int64_t batch, std::int64_t time,
                                        std::int64_t channels, ScanTiling tiling = {});

// Solves the scan described above in place on args.delta, on `stream`. Returns
// cudaErrorInvalidValue for a null array, a negative size, an unsupported chunk length, or a
// workspace that is too small or not aligned to 16 bytes; otherwise the launch's error.
template <int S, class T>
cudaError_t launch_scan_affine(const ScanArgs<T>& args, void* workspace,
                               std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace pararnn::kernels
