// Internal to the solver: what the CPU backends (cpu_backend.cpp, per-channel cells;
// dense_backend.cpp, dense-Jacobian cells; m2rnn_backend.cpp, M2RNN) share: the input affine
// W_x x in the compute type, and the Newton iteration loop with its K semantics (fixed K;
// adaptive: the table K is a minimum, iterate while max|F| >= residual_atol up to k_max, then
// one more update; not converged: the sequential fallback of the chains still above
// residual_atol and a newton_residual_high warning), filling NewtonStats.
//
// A backend supplies a Solver with
//   double residual(const Vec& H, Vec& F, Vec* J) const;   // max|F| (NaN wins), remembers per-unit maxima
//   void update(Vec& H, const Vec& J, Vec& F, double omega) const;
//   std::int64_t sequential_fallback(Vec& H, double atol) const;  // units re-solved
// Example: run_newton_iterations(solver, config, k, atol, H, F, J, stats, "chain(s)");
#pragma once

#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "backends.hpp"
#include "pararnn/core/logging.hpp"

namespace pararnn::detail {

// max that lets NaN win (a NaN residual must never look small).
inline double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

// sLSTM's Picard passes after its zero-hidden guess: config.picard_iters, or auto P by T
// (T <= 64 -> 1, T <= 2048 -> 3, else 5; CONTRACT §1).
inline std::int64_t picard_passes(const NewtonConfig& config, std::int64_t time) {
  if (config.picard_iters) return *config.picard_iters;
  return time <= 64 ? 1 : (time <= 2048 ? 3 : 5);
}

// Width of one step's gate inputs: Σ over the cell's affine blocks (gates·d_h, gates·d_h² for
// square blocks, K + V + 1 for M2RNN's key-value block), plus derived gates (CfC's Δt) of d_h
// each, i.e. spec.gates blocks of the first affine's block width.
inline std::int64_t gate_width(const Cell& cell) {
  const AffineBlock& first = cell.spec().affine.front();
  return cell.spec().gates * (cell.affine_rows(first) / first.gates);
}

// W_x x + b of every affine block, [b][t][gate_width(cell)] in the compute type: one GEMM per
// block and batch row. Blocks land at first_gate times their block width.
template <class ComputeT>
std::vector<ComputeT> input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  constexpr DType kComputeDType = std::is_same_v<ComputeT, double> ? DType::f64 : DType::f32;
  using RowMatrix = Eigen::Matrix<ComputeT, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<Eigen::Dynamic>;
  const std::int64_t width = gate_width(cell);
  std::vector<ComputeT> wx(static_cast<std::size_t>(L.batch * L.time * width));
  const Tensor xc = Tensor::converted(x, kComputeDType);
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t inputs = cell.affine_inputs(block);
    const Tensor w = Tensor::converted(cell.parameter(std::string(block.weight)), kComputeDType);
    const Tensor bias = Tensor::converted(cell.parameter(std::string(block.bias)), kComputeDType);
    const std::int64_t rows = cell.affine_rows(block);
    const std::int64_t offset = block.first_gate * (rows / block.gates);
    Eigen::Map<const RowMatrix> W(w.data_as<ComputeT>(), rows, inputs);
    Eigen::Map<const Eigen::Matrix<ComputeT, 1, Eigen::Dynamic>> b(bias.data_as<ComputeT>(), rows);
    for (std::int64_t bi = 0; bi < L.batch; ++bi) {
      Eigen::Map<const RowMatrix, 0, Stride> X(xc.data_as<ComputeT>() + bi * L.time * L.d_in, L.time,
                                               inputs, Stride(L.d_in));
      Eigen::Map<RowMatrix, 0, Stride> out(wx.data() + bi * L.time * width + offset, L.time, rows,
                                           Stride(width));
      out.noalias() = X * W.transpose();
      out.rowwise() += b;
    }
  }
  return wx;
}

// The Newton iterations from the initial guess in H (see the header comment). `unit` names
// what sequential_fallback counts, for the warning ("chain tile(s) of 64 channels").
template <class Solver, class Vec>
void run_newton_iterations(const Solver& solver, std::string_view cell_name, const NewtonConfig& config,
                           const KResolution& k, const std::optional<double>& atol, std::int64_t time,
                           Vec& H, Vec& F, Vec& J, NewtonStats& stats, const std::string& unit) {
  std::optional<double> final_residual;  // known when the last evaluation saw the final H
  // Adaptive: K is a minimum and k_max the cap; without an early-stop threshold it is fixed.
  const bool adaptive = k.adaptive && atol.has_value();
  const std::int64_t cap = adaptive ? std::max(k.k, config.k_max) : k.k;
  for (std::int64_t it = 0; it < cap; ++it) {
    const double res = solver.residual(H, F, &J);
    ++stats.iters;
    stats.residual_history.push_back(res);
    if (!std::isfinite(res)) {
      final_residual = res;
      break;
    }
    const bool below = atol && res < *atol;
    if (below && !adaptive) {  // seed's early stop: no update
      stats.converged = true;
      final_residual = res;
      break;
    }
    solver.update(H, J, F, config.omega);
    ++stats.updates;
    if (below && it + 1 >= k.k) {  // adaptive: the residual test passed after the minimum K,
      stats.converged = true;      // and this was the one more update
      break;
    }
  }
  stats.max_residual = final_residual ? *final_residual : solver.residual(H, F, nullptr);
  if (adaptive && !stats.converged) {
    // Not converged by k_max (or a non-finite iterate): the units whose residual is still
    // above residual_atol get the sequential answer instead of a silently wrong one.
    const double before = stats.max_residual;
    if (final_residual) (void)solver.residual(H, F, nullptr);  // per-unit maxima of the final H
    stats.fallback_tiles = solver.sequential_fallback(H, *atol);
    stats.max_residual = solver.residual(H, F, nullptr);
    emit_warning("newton_residual_high",
                 fmt::format("adaptive Newton did not reach residual_atol={:.1e} within k_max={} "
                             "(max|F|={:.3e}); {} {} were solved sequentially",
                             *atol, cap, before, stats.fallback_tiles, unit),
                 {{"k_max", cap}, {"max_residual", before}, {"reason", "k_max reached"},
                  {"fallback_tiles", stats.fallback_tiles},
                  {"cell", std::string(cell_name)}, {"T", time}});
  }
}

}  // namespace pararnn::detail
