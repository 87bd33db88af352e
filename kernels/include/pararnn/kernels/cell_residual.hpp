// The Newton residual and Jacobian of a trajectory on the GPU, every (b, t, c) in parallel:
//   h_prev = h0 row (or zeros) at t = 0 and at heads, else H[b, t−1];
//   (f, J) = CellMath::step(rec[c], wx[b, t, :, c], h_prev);
//   F[b, t, s, c] = f_s − H[b, t, s, c],   J[b, t, o, i, c] = ∂f_o/∂h_prev,i,
// written in the layouts launch_scan_affine reads (kernels/scan.hpp), and max|F| over all
// entries reduced into one device scalar.
//
// Layout and head/h0 conventions are those of kernels/sequential.hpp (wx, recurrent, h0, h0_row,
// head in ComputeT / int64 / bytes; H in StorageT). J is written at heads too (it is ∂h_t/∂h0 there,
// which the backward pass needs); the scan does not read it. `jac` may be null (residual only),
// `max_abs_residual` may be null (no reduction; no workspace needed then), `residual` may be
// null when `max_abs_residual` is not (max|F| only: the final residual of a solve).
//
// Guarantees: max|F| ranks NaN above every number, so any NaN in F makes the scalar NaN; an
// Inf makes it Inf. The reduction is a per-block partial into the workspace followed by one
// final block, deterministic for a given shape. Never allocates. Example:
//   CellResidualArgs<float> a{.wx = d_wx, .recurrent = d_rec, .H = d_H, .residual = d_F,
//                             .jac = d_J, .max_abs_residual = d_max,
//                             .batch = 8, .time = 65536, .channels = 256};
//   size_t bytes = cell_residual_workspace_bytes<float>();
//   cudaError_t e = launch_cell_residual<cells::GruDiagMath, float>(a, d_ws, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class StorageT>
struct CellResidualArgs {
  using ComputeT = ComputeOf<StorageT>;
  const ComputeT* wx = nullptr;
  const ComputeT* recurrent = nullptr;
  const ComputeT* h0 = nullptr;
  const std::int64_t* h0_row = nullptr;
  const std::uint8_t* head = nullptr;
  const StorageT* H = nullptr;
  ComputeT* residual = nullptr;          // F, [b][t][s][c]
  ComputeT* jac = nullptr;               // J, [b][t][out][in][c]; optional
  ComputeT* max_abs_residual = nullptr;  // one device scalar; optional
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
  // Only the steps t = 0, time_stride, 2·time_stride, ... are evaluated (F written there only;
  // max|F| over them): the steps a fused Newton step leaves out of its result's residual.
  std::int64_t time_stride = 1;
  // Optional device flag (kernels/newton_loop.hpp): when *skip != 0 nothing is evaluated or
  // written and max|F| is 0.
  const double* skip = nullptr;
};

// Workspace for the max|F| partials (independent of the shape).
template <class StorageT>
std::size_t cell_residual_workspace_bytes();

// Instantiated for the cell maths of kHasNewtonKernels (newton_cells.hpp) × {float, double}.
// A zero-sized problem writes max|F| = 0 when the scalar is given.
template <class CellMath, class StorageT>
cudaError_t launch_cell_residual(const CellResidualArgs<StorageT>& args, void* workspace,
                                 std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace pararnn::kernels
