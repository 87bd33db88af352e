// The parameter, gate-input and initial-state cotangents of the implicit adjoint of the
// dense-chain cells on the GPU (the backward of training, CONTRACT §1), in double whatever the
// storage — the device twin of the CPU dense backward's VJP loop (solver/src/cpu/dense.cpp):
//   h_prev = the head state (h0 row or zeros) at t = 0 and at heads, else H[chain][t−1];
//   μ_tᵀ ∂h_t/∂(gate inputs, the chain's parameters, h_prev at heads) by one reverse pass of the
//     step, DenseMath::vjp (cells/hopfield.hpp): O(n²) per step;
//   d_wx[b][t][columns of chain q]            (written, in OutT: the forward's compute type),
//   d_h0[row][offsets[q·n + i]] = ∂/∂h_prev,i at heads (written when d_h0 is given; row =
//                                              h0_row[t] when given, else b),
//   d_param_partials[q][b][chunk][k]          (Σ over the chunk's steps, in order, of ∂/∂param_k;
//                                              q-major, so a row_sum over [b][chunk] of each
//                                              chain q of a row sums its partials on the device).
// μ is the adjoint trajectory μ_t = g_t + J_{t+1}ᵀ μ_{t+1}, 0-coupled across segment ends:
// launch_scan_dense with reverse = true on J at H* (dense_residual.hpp) yields it.
//
// Layouts: `in` as kernels/dense_chain.hpp (in double); H and μ chain-major [chain][t][n];
// d_wx [b][t][in.width], each column written by the one chain that reads it; the partials
// [q][b][chunk][params_size(n)] with vjp_chunks(chains, T) chunks of vjp_chunk_steps(chains, T)
// consecutive steps (launch.hpp's time split: about kVjpMaxThreads threads); each
// thread keeps the reverse pass's work array (DenseMath::vjp_work_size(n) doubles) in its slot of
// the caller's workspace (dense_vjp_workspace_bytes).
//
// Guarantees: deterministic (every partial is one thread's fixed-order sum; no atomics); never
// allocates; returns cudaErrorInvalidValue for null required arrays, negative sizes, n outside
// 1 .. kDenseKernelMaxN, h0 without offsets, or a missing, too small or misaligned workspace,
// else the launch's error. Example (GRU head, B = 2, 2 heads of 4, T = 40):
//   DenseVjpArgs<float> a{.in = inputs64, .H = d_H64, .mu = d_mu, .d_wx = d_dwx,
//                         .d_param_partials = d_partials};
//   size_t bytes = dense_vjp_workspace_bytes<cells::GruHeadMath>(a.in);
//   cudaError_t e = launch_dense_vjp<cells::GruHeadMath, float>(a, d_ws, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/dense_chain.hpp"

namespace pararnn::kernels {

template <class OutT>
struct DenseVjpArgs {
  DenseChainInputs<double> in;
  const double* H = nullptr;          // H*, [chain][t][n]
  const double* mu = nullptr;         // the adjoint trajectory, [chain][t][n]
  OutT* d_wx = nullptr;               // [b][t][in.width]
  double* d_h0 = nullptr;             // optional, [row][in.state_row]
  double* d_param_partials = nullptr; // [q][b][chunk][params_size(n)]
};

// The workspace of one launch on `in`'s shape (the threads' work arrays).
template <class DenseMath>
std::size_t dense_vjp_workspace_bytes(const DenseChainInputs<double>& in);

// Instantiated for cells::HopfieldMath, GruHeadMath, SlstmHeadMath × OutT ∈ {float, double}.
template <class DenseMath, class OutT>
cudaError_t launch_dense_vjp(const DenseVjpArgs<OutT>& args, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream);

}  // namespace pararnn::kernels
