// ParaM2RNN on the GPU (cells/m2rnn.hpp's math, entry by entry): the Newton residual with the
// gains, the factorized walk that is its Newton linear step, and the sequential loop. The walk
// and the loop are sequential in T (composing J maps would materialise K·V x K·V matrices; the
// CPU backend walks the same way): one block per batch row, the K·V state in shared memory,
// threads over its entries, two barriers a step.
//
// Layouts (one chain per batch row; rectangular batches, so the only head is t = 0):
//   wx[b][t][K + V + 1]   ComputeT, raw = W_x x + b: k, v, f_logit
//   W[j][e]               ComputeT, (V, V) row-major, never clamped
//   h0[b][i·V + e]        ComputeT, required (a zero buffer when the solve has no h0)
//   H, F, gain            [b][t][i·V + e]  (the trajectory (B, T, K, V))
//
// launch_m2rnn_residual: F = f(prepend(H)) − H for every (b, t, i, e) in parallel (prepend(H)
//   = h0 at t = 0), optionally the gains G and max|F| into a device scalar (NaN wins;
//   deterministic). With H = 0 it yields the App. A guess.
// launch_m2rnn_walk: δ_t = J_t[δ_{t−1}] + F_t in place on F (δ_0 = F_0), J_t[Δ] = f_t Δ +
//   G_t ⊙ (Δ W).
// launch_m2rnn_sequential: H_t = step(H_{t−1}), the state rounded to StorageT after every step.
// The backward of training (in double, cells/m2rnn.hpp's adjoint and VJP):
// launch_m2rnn_adjoint_walk: μ_t = g_t + J_{t+1}ᵀ[μ_{t+1}] for t = T−1 .. 0 in place on mu (in:
//   the cotangent g, out: μ), J_tᵀ[μ] = f_t μ + (G_t ⊙ μ) Wᵀ with the gains at H*; d_h0
//   (optional, [b][K·V]) receives J_0ᵀ[μ_0] = ∇h0. A block per row, μ and G ⊙ μ in shared memory
//   next to W (the walk's footprint in double: m2rnn_fits_on_gpu(k, v, 8)).
// launch_m2rnn_vjp: M2rnnMath::vjp at every (b, t) (h_prev = H[b][t−1], h0[b] at t = 0):
//   d_wx[b][t][K + V + 1] (written, OutT) and dW_partials[b][chunk][V²] (Σ over the chunk's
//   steps in order); (b, chunk) items as launch.hpp's vjp_chunks, each thread's dA and d_raw scratch in
//   the workspace (m2rnn_vjp_workspace_bytes). Deterministic (no atomics).
//
// Guarantees: never allocate; return cudaErrorInvalidValue for null required arrays, negative
// sizes, K or V < 1, a too small or misaligned workspace, or a state that does not fit the
// block's shared memory (m2rnn_fits_on_gpu), else the launch's error. Example:
//   M2rnnInputs<float> in{.wx = d_wx, .W = d_W, .h0 = d_h0, .batch = 8, .time = 4096, .k = 16, .v = 16};
//   launch_m2rnn_residual<float>({.in = in, .H = d_H, .residual = d_F, .gain = d_G,
//                                 .max_abs_residual = d_max}, d_ws, bytes, stream);
//   launch_m2rnn_walk<float>(in, d_G, d_F, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class ComputeT>
struct M2rnnInputs {
  const ComputeT* wx = nullptr;
  const ComputeT* W = nullptr;
  const ComputeT* h0 = nullptr;  // required
  std::int64_t batch = 0, time = 0;
  int k = 0, v = 0;
};

// Shared memory a row block (walk, sequential loop) may use: W and two K x V state buffers,
// (2·K·V + V²) values (H200: 227 KB per block with the opt-in).
inline constexpr std::size_t kM2rnnRowSharedLimit = 200 * 1024;

// Whether a K x V state (with W and a second state buffer) fits one block's shared memory.
bool m2rnn_fits_on_gpu(int k, int v, std::size_t element_bytes);

template <class ComputeT>
struct M2rnnResidualArgs {
  M2rnnInputs<ComputeT> in;
  const ComputeT* H = nullptr;
  ComputeT* residual = nullptr;
  ComputeT* gain = nullptr;              // optional
  ComputeT* max_abs_residual = nullptr;  // optional
};

template <class ComputeT>
std::size_t m2rnn_residual_workspace_bytes();

// ComputeT: float, double.
template <class ComputeT>
cudaError_t launch_m2rnn_residual(const M2rnnResidualArgs<ComputeT>& args, void* workspace,
                                  std::size_t workspace_bytes, cudaStream_t stream);
template <class ComputeT>
cudaError_t launch_m2rnn_walk(const M2rnnInputs<ComputeT>& in, const ComputeT* gain, ComputeT* delta,
                              cudaStream_t stream);
// StorageT: float, double, __half, __nv_bfloat16 (f32 arithmetic for the half types).
template <class StorageT>
cudaError_t launch_m2rnn_sequential(const M2rnnInputs<ComputeOf<StorageT>>& in, StorageT* H,
                                    cudaStream_t stream);

struct M2rnnAdjointArgs {
  M2rnnInputs<double> in;
  const double* gain = nullptr;  // G at H*, [b][t][K·V]
  double* mu = nullptr;          // in: the cotangent; out: μ, [b][t][K·V]
  double* d_h0 = nullptr;        // optional, [b][K·V]
};
cudaError_t launch_m2rnn_adjoint_walk(const M2rnnAdjointArgs& args, cudaStream_t stream);

template <class OutT>
struct M2rnnVjpArgs {
  M2rnnInputs<double> in;
  const double* H = nullptr;      // H*, [b][t][K·V]
  const double* mu = nullptr;     // [b][t][K·V]
  OutT* d_wx = nullptr;           // [b][t][K + V + 1]
  double* dW_partials = nullptr;  // [b][chunk][V·V]
};
std::size_t m2rnn_vjp_workspace_bytes(const M2rnnInputs<double>& in);
// OutT: float, double.
template <class OutT>
cudaError_t launch_m2rnn_vjp(const M2rnnVjpArgs<OutT>& args, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream);

}  // namespace pararnn::kernels
