// The CPU backend of the per-channel cells: App. A initial guess, Newton iterations with a
// batch x channel parallel scan, the implicit adjoint, and the same-dtype sequential loop, each
// the one Newton driver (newton/driver.hpp) over CpuSolver (cpu/per_channel_solver.hpp). One
// template per (cell math, storage dtype); the cell math itself lives in cells/ and is shared
// with the CUDA kernels.
#include "cpu/per_channel_solver.hpp"

namespace pararnn::detail {
namespace {

Tensor cpu_newton_apply(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                        const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  return deliver(dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
                   return CpuSolver<CellMath, StorageT>(cell, x, options, std::move(layout)).newton(config, stats);
                 }),
                 out, "out");
}

Tensor cpu_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                            Layout layout) {
  return dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    return CpuSolver<CellMath, StorageT>(cell, x, options, std::move(layout)).sequential();
  });
}

NewtonForward cpu_newton_forward(const Cell& cell, const TensorView& x, const TensorView* H_out,
                                 const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
  NewtonForward forward;
  dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    const CpuSolver<CellMath, StorageT> solver(cell, x, options, std::move(layout));
    const auto H = solver.newton_trajectory(config, forward.stats);
    forward.H = solver.to_storage(H);
    if (!config.recompute)
      forward.saved_trajectory = saved_on_host(solver.to_compute_tensor(H));
  });
  forward.H = deliver(std::move(forward.H), H_out, "H_out");
  return forward;
}

NewtonGradients cpu_newton_backward(const Cell& cell, const TensorView& x,
                                    const NewtonForward& forward, const TensorView& grad_H,
                                    const TensorView* grad_x, const NewtonConfig& config,
                                    const ApplyOptions& options, Layout layout) {
  NewtonGradients gradients = dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    const CpuSolver<CellMath, StorageT> solver(cell, x, options, layout);
    if (forward.saved_trajectory)
      return solver.backward(solver.from_saved(forward.saved_trajectory->host()), grad_H, x, options);
    // Level 2: re-solve H* with the same configuration (bitwise the forward's trajectory).
    NewtonStats stats;
    if (PARARNN_FAULT_POINT("stale_h0_recompute"))
      return solver.backward(CpuSolver<CellMath, StorageT>(cell, x, without_h0(options), layout).newton_trajectory(config, stats), grad_H, x, options);
    return solver.backward(solver.newton_trajectory(config, stats), grad_H, x, options);
  });
  gradients.x = deliver(std::move(gradients.x), grad_x, "grad_x");
  return gradients;
}

double cpu_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                        const ApplyOptions& options, Layout layout) {
  return dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    return CpuSolver<CellMath, StorageT>(cell, x, options, std::move(layout)).residual_of(H);
  });
}

}  // namespace

const FamilyBackend kCpuPerChannel{.name = "cpu per_channel",
                                   .supports = nullptr,
                                   .newton = cpu_newton_apply,
                                   .sequential = cpu_sequential_apply,
                                   .forward = cpu_newton_forward,
                                   .backward = cpu_newton_backward,
                                   .max_residual = cpu_max_residual,
                                   .fused_windows = nullptr};

}  // namespace pararnn::detail
