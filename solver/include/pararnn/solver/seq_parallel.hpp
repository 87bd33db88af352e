// Sequence-parallel Newton (docs/seq_parallel.md): the time axis split across the ranks of a
// Communicator, each rank holding its chunk [t0, t1) of x, for the per-channel cells (GRU, LSTM,
// NLRU, sLSTM-diag, CfC, Titans) on the CPU backend; the solve and its training pair.
//
// Guarantees:
// - The same Newton solve as newton_apply on the whole sequence (the one driver,
//   newton/driver.hpp, over the CPU per-channel family): K resolved on the total T, the same
//   guess, early stop, adaptive stop and per-unit sequential fallback; every max|F| is the
//   maximum over the ranks (NaN wins), so every rank takes the same iterations and returns the
//   same NewtonStats (scan_backend "cpu_seq_parallel").
// - Per Newton iteration three small collectives: the last state of every rank's iterate
//   (B·slots·d_h values: the residual at a chunk's first step reads h_{t0−1}), max|F| (one
//   double), and the chunk aggregates (A = ∏J, b) of every chain (B·d_h·(slots² + slots)
//   values: an exclusive scan of the affine monoid over the ranks, composed locally).
// - On inputs whose arithmetic is exact (dyadic values) the result equals newton_apply's bit
//   for bit, for every split; otherwise within the contract's τ.
// - Refused with pararnn::Error on every rank (the message names the argument, the rule and the
//   value, and the rank): a rank with zero steps, ranks with different B, d_in, dtype, cell
//   parameters or NewtonConfig, h0 on a rank other than 0, cu_seqlens and window_len (not
//   built; these first), then every input newton_apply refuses (the same plan: ApplyOptions::
//   parameters too, which the CPU rows do not read); the CUDA backend and cells outside the
//   per-channel family by the row's one rule ("the <backend> <family> row does not serve
//   seq_parallel"; without a usable CUDA device, the plan's "scan_backend=cuda: ...").
// Returns the rank's chunk of H, (B, t1 − t0, ...) in the storage dtype.
// Example:
//   InProcessGroup group(2);
//   group.run([&](Communicator& comm) {
//     const TensorView x_r = x.view().slice(1, comm.rank() == 0 ? 0 : 100, comm.rank() == 0 ? 100 : T);
//     Tensor H_r = seq_parallel_newton_apply(comm, cell, x_r, NewtonConfig{}, {}, &stats[comm.rank()]);
//   });
#pragma once

#include <cstdint>
#include <vector>

#include "pararnn/solver/communicator.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {

[[nodiscard]] Tensor seq_parallel_newton_apply(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                                               const NewtonConfig& config = {},
                                               const ApplyOptions& options = {},
                                               NewtonStats* stats = nullptr);

// Training across ranks (training.hpp's newton_forward / newton_backward, one chunk per rank):
// the forward keeps the chunk's H* (or nothing with recompute); the backward takes the chunk of
// grad_H and returns ∇x of the chunk, ∇h0 on rank 0 (when it passed h0) and, on every rank, the
// parameter gradients of the whole sequence (the ranks' double sums summed in rank order, then
// rounded once). The adjoint μ_t = g_t + J_{t+1}ᵀ μ_{t+1} crosses the ranks from the last to the
// first as an exclusive scan of the ranks' adjoint elements (one allgather of
// B·d_h·(slots² + slots) doubles), after one allgather of the boundary states; the parameter
// sums take one allgather per gradient tensor. Within the gradient tolerance of newton_backward
// on the whole sequence.
[[nodiscard]] NewtonForward seq_parallel_newton_forward(Communicator& comm, const Cell& cell,
                                                        const TensorView& x_chunk,
                                                        const NewtonConfig& config = {},
                                                        const ApplyOptions& options = {});
[[nodiscard]] NewtonGradients seq_parallel_newton_backward(Communicator& comm, const Cell& cell,
                                                           const TensorView& x_chunk, const NewtonForward& forward,
                                                           const TensorView& grad_H_chunk,
                                                           const NewtonConfig& config = {},
                                                           const ApplyOptions& options = {});

// The chunk lengths of an even split of `time` steps over `ranks` (the first time % ranks
// ranks get one step more); refuses ranks < 1 and time < ranks (a rank would have no step).
std::vector<std::int64_t> even_chunks(std::int64_t time, int ranks);

}  // namespace pararnn
