// The Newton residual and dense Jacobian of dense-chain cells on the GPU, every (chain, t) in
// parallel (one thread each), from the production math (kernels/dense_chain.hpp):
//   h_prev = the head state (h0 row or zeros) at t = 0 and at heads, else H[chain][t−1];
//   (f, J) = DenseMath::step(h_prev, gates of (b, t, q));
//   F[chain][t][i] = f_i − H[chain][t][i],   J[chain][t][out][in] = ∂f_out/∂h_prev,in,
// in the layouts of the CPU dense backend and of launch_scan_dense (kernels/scan_dense.hpp,
// dense-backend addressing), and max|F| reduced into one device scalar.
//
// Layout: H, F [chain][t][n] and J [chain][t][n][n] in ComputeT (float or double), chain =
// b · chains_per_row + q. J is written at heads too (∂h_t/∂h0 there); the scan does not read it.
// `jac` and `max_abs_residual` are optional (no workspace is needed without the scalar).
// With H = 0 the kernel yields F = f(h̃) with h̃ = 0 except the head states: the App. A guess.
//
// Guarantees: max|F| ranks NaN above every number, so any NaN in F makes the scalar NaN; the
// reduction (per-block partials, then one block) is deterministic for a given shape. n is
// limited to kDenseKernelMaxN (the per-thread h_prev, h_new and work arrays). Never allocates.
// Example (GRU head, B = 4, 4 heads of 16, T = 1024, f32):
//   DenseResidualArgs<float> a{.in = inputs, .H = d_H, .residual = d_F, .jac = d_J,
//                              .max_abs_residual = d_max};
//   size_t bytes = dense_residual_workspace_bytes<float>();
//   cudaError_t e = launch_dense_residual<cells::GruHeadMath, float>(a, d_ws, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/dense_chain.hpp"

namespace pararnn::kernels {

template <class ComputeT>
struct DenseResidualArgs {
  DenseChainInputs<ComputeT> in;
  const ComputeT* H = nullptr;           // [chain][t][n]
  ComputeT* residual = nullptr;          // F, [chain][t][n]
  ComputeT* jac = nullptr;               // J, [chain][t][n][n]; optional
  ComputeT* max_abs_residual = nullptr;  // one device scalar; optional
};

// Workspace for the max|F| partials (independent of the shape).
template <class ComputeT>
std::size_t dense_residual_workspace_bytes();

// Instantiated for cells::HopfieldMath, GruHeadMath, SlstmHeadMath × {float, double}. Returns
// cudaErrorInvalidValue for negative sizes, a null wx, params, H or residual, n outside
// 1 .. kDenseKernelMaxN, h0 without offsets, or a missing/too small/misaligned workspace when
// the scalar is asked for. A zero-sized problem writes max|F| = 0 when the scalar is given.
template <class DenseMath, class ComputeT>
cudaError_t launch_dense_residual(const DenseResidualArgs<ComputeT>& args, void* workspace,
                                  std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace pararnn::kernels
