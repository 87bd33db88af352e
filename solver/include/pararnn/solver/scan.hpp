// CPU scans of the affine monoid (cells/affine_monoid.hpp) along time, for S x S blocks per
// channel, batch x channel parallel.
//
// Layout (shared with the CUDA kernels): J[t][out][in][c] and r[t][s][c] for one batch row,
// c < channels contiguous, rows `channel_stride` apart (a channel tile of a wider row). Solves δ_t = J_t δ_{t−1} + r_t with δ_{−1} = 0 in place on r; time
// steps flagged as segment heads act with J = 0. Guarantees: with `chunk_len` < T the scan runs
// in three phases (chunk aggregates by `compose`, an exclusive scan of the aggregates, a
// re-run of each chunk from its carry), and on inputs whose arithmetic is exact (dyadic
// rationals) its result equals sequential substitution bit for bit, for every chunk length.
#pragma once

#include <cstdint>
#include <span>

namespace pararnn {

struct ScanShape {
  std::int64_t time = 0;
  std::int64_t channels = 0;
  std::int64_t chunk_len = 0;  // 0 or >= time: one chunk (sequential substitution)
  std::int64_t channel_stride = 0;  // elements between (t, s) rows; 0 means `channels`
};

// `heads` is empty or has `time` entries (nonzero = J treated as 0 at that step).
template <int S, class ComputeT>
void scan_affine(const ComputeT* J, ComputeT* r, const ScanShape& shape,
                 std::span<const std::uint8_t> heads = {});

// The aggregate of every channel's steps [0, time): the element (A, b) with δ_last = A δ_in + b
// for the δ entering step 0, written to out[channel][S·S + S] (A [out][in], then b): the
// monoid's composition of the steps in order, step 0's J taken as 0 when `first_is_head`, every
// other step's as given (no segment heads inside). A sequence-parallel solve composes the
// ranks' aggregates into the carry entering each rank's chunk (seq_parallel.hpp).
template <int S, class ComputeT>
void scan_aggregates(const ComputeT* J, const ComputeT* r, const ScanShape& shape, bool first_is_head,
                     ComputeT* out);

// One chain of dense n x n blocks (Hopfield, GRU-head): J[t][out][in] contiguous, r[t * r_stride
// + i] (r_stride 0 means n: a chain's channels inside a wider row). The same monoid
// (compose_dense / apply_dense of cells/affine_monoid.hpp), the same head rule and the same
// three-phase chunking as scan_affine, with the same bitwise guarantee on exact inputs.
struct DenseScanShape {
  std::int64_t time = 0;
  std::int64_t n = 0;
  std::int64_t chunk_len = 0;  // 0 or >= time: sequential substitution
  std::int64_t r_stride = 0;
};

template <class ComputeT>
void scan_dense(const ComputeT* J, ComputeT* r, const DenseScanShape& shape,
                std::span<const std::uint8_t> heads = {});

}  // namespace pararnn
