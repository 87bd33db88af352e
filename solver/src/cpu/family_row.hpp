// The entry points of a CPU FamilyBackend row (backends.hpp), written once over a family's host
// solver: the Newton solve, the sequential loop, the training forward and backward, and
// max_residual. A family file (cpu/per_channel.cpp, cpu/dense.cpp, cpu/matrix_state.cpp) keeps
// its solver and the dispatch to it, and defines its row in one line:
//
//   struct DenseFamily {  // the solver of the cell's dense-chain math and storage dtype
//     template <class Body> static decltype(auto) with_solver(const Cell& cell, Body&& body) {
//       return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() -> decltype(auto) {
//         return dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() -> decltype(auto) {
//           return body.template operator()<DenseSolver<DenseMath, StorageT>>(); }); });
//     }
//   };
//   const FamilyBackend kCpuDense = cpu_family_row<DenseFamily>("cpu dense", nullptr);
//
// Guarantees: each entry point builds the family's solver once, from (cell, x, options, layout),
// and makes exactly the solver calls the hand-written rows made before this template, so results
// are bit for bit theirs:
//   newton        to_storage(newton_trajectory(config, stats)), delivered into `out` when given;
//   sequential    sequential();
//   forward       H* = newton_trajectory(config, forward.stats), forward.H = to_storage(H*) and,
//                 unless config.recompute, saved_trajectory = saved_on_host(to_compute_tensor(H*));
//                 forward.H delivered into `H_out` when given;
//   backward      backward(H*, grad_H, x, options) at the saved trajectory (from_saved) or, with
//                 none (level 2), at H* re-solved with the same configuration (bitwise the
//                 forward's trajectory; that solve's stats are dropped); gradients.x delivered
//                 into `grad_x` when given;
//   max_residual  residual_of(H).
// A family may declare a fault point of its level-2 re-solve, `static bool stale_h0_recompute()`
// (the per-channel family does): where it returns true (only in a faults build with that fault
// named), the re-solve runs without the caller's h0 (cpu/fault_models.hpp). The row serves newton,
// sequential, training and max_residual, not fused_windows (no CPU row has one); `supports` is
// the family's own.
//
// Family: `with_solver(cell, body)` returns `body.template operator()<Solver>()`, Solver the
// family's solver of the cell. Solver: constructible from (const Cell&, const TensorView& x,
// const ApplyOptions&, Layout); const members newton_trajectory(const NewtonConfig&,
// NewtonStats&) -> Iterate, to_storage(Iterate) -> Tensor, to_compute_tensor(Iterate) -> Tensor,
// from_saved(const Tensor&) -> Iterate, backward(Iterate, grad_H, x, options) -> NewtonGradients,
// sequential() -> Tensor, residual_of(const TensorView&) -> double. An entry point instantiates
// only what it calls: ParaRWKV7 (cpu/exact_linear.cpp), an exact scan with no Newton iteration,
// takes only `sequential` and `max_residual` from here.
#pragma once

#include <utility>

#include "backends.hpp"
#include "cpu/fault_models.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::detail {

template <class Family>
struct CpuFamilyRow {
  static Tensor newton(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                       const ApplyOptions& options, Layout layout, NewtonStats& stats) {
    return deliver(Family::with_solver(cell,
                                       [&]<class Solver>() {
                                         const Solver solver(cell, x, options, std::move(layout));
                                         return solver.to_storage(solver.newton_trajectory(config, stats));
                                       }),
                   out, "out");
  }

  static Tensor sequential(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout) {
    return Family::with_solver(cell, [&]<class Solver>() {
      return Solver(cell, x, options, std::move(layout)).sequential();
    });
  }

  static NewtonForward forward(const Cell& cell, const TensorView& x, const TensorView* H_out,
                               const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
    NewtonForward forward;
    Family::with_solver(cell, [&]<class Solver>() {
      const Solver solver(cell, x, options, std::move(layout));
      const auto H = solver.newton_trajectory(config, forward.stats);
      forward.H = solver.to_storage(H);
      if (!config.recompute) forward.saved_trajectory = saved_on_host(solver.to_compute_tensor(H));
    });
    forward.H = deliver(std::move(forward.H), H_out, "H_out");
    return forward;
  }

  static NewtonGradients backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                  const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig& config,
                                  const ApplyOptions& options, Layout layout) {
    NewtonGradients gradients = Family::with_solver(cell, [&]<class Solver>() {
      const Solver solver(cell, x, options, layout);
      if (forward.saved_trajectory)
        return solver.backward(solver.from_saved(forward.saved_trajectory->host()), grad_H, x, options);
      // Level 2: re-solve H* with the same configuration (bitwise the forward's trajectory).
      NewtonStats stats;
      if constexpr (requires { Family::stale_h0_recompute(); })
        if (Family::stale_h0_recompute())
          return solver.backward(Solver(cell, x, without_h0(options), std::move(layout)).newton_trajectory(config, stats),
                                 grad_H, x, options);
      return solver.backward(solver.newton_trajectory(config, stats), grad_H, x, options);
    });
    gradients.x = deliver(std::move(gradients.x), grad_x, "grad_x");
    return gradients;
  }

  static double max_residual(const Cell& cell, const TensorView& x, const TensorView& H, const ApplyOptions& options,
                             Layout layout) {
    return Family::with_solver(cell, [&]<class Solver>() {
      return Solver(cell, x, options, std::move(layout)).residual_of(H);
    });
  }
};

// The family of a solver that depends on the storage dtype alone (Solver<StorageT>: ParaM2RNN's,
// ParaRWKV7's).
template <template <class> class Solver>
struct SolverOfDtype {
  template <class Body>
  static decltype(auto) with_solver(const Cell& cell, Body&& body) {
    return dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() -> decltype(auto) {
      return body.template operator()<Solver<StorageT>>();
    });
  }
};

// The row of `Family` on the CPU: every entry point above, `supports` the family's refusals.
template <class Family>
constexpr FamilyBackend cpu_family_row(const char* name, decltype(FamilyBackend::supports) supports) {
  using Row = CpuFamilyRow<Family>;
  return FamilyBackend{.name = name,
                       .serves = {Capability::newton, Capability::sequential, Capability::training,
                                  Capability::max_residual},
                       .supports = supports,
                       .newton = Row::newton,
                       .sequential = Row::sequential,
                       .forward = Row::forward,
                       .backward = Row::backward,
                       .max_residual = Row::max_residual};
}

}  // namespace pararnn::detail
