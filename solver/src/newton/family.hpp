// The family interface of the Newton driver (driver.hpp) and what every family shares.
//
// A family implementation (one per cell family x backend: cpu/per_channel.cpp, cpu/dense.cpp,
// cpu/matrix_state.cpp, cuda/per_channel.cpp, cuda/dense.cpp, cuda/matrix_state.cpp; RWKV-7's
// exact linear family, cpu/exact_linear.cpp and cuda/exact_linear.cpp, has no Newton) owns its
// iterate H, residual F and Jacobian (M2RNN: gains) and is a `NewtonFamily` (below): the
// concept names every member the driver calls and what each guarantees, and `solve_newton` takes
// nothing else. The optional hooks come in groups (`FusedStepFamily`, `DeferredGuessFamily`,
// `ResidualMaxFamily`, `StrategyFamily`, `AutoSequentialFamily`, `FinishingFamily`,
// `OtherCoordinatesFamily`, `DeviceLoopFamily`): a family has a group whole or not at all (a part of one is refused
// at compile time, where the driver would silently have taken the plain path). Each family is
// checked by a static_assert where it is solved. The fallback unit of each family is the same on
// both backends: a per-channel chain tile (one batch row x kFallbackTileChannels channels), a
// dense chain (a batch row, or a (row, head)), a matrix-state batch row.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/logging.hpp"

namespace pararnn::detail {

// The operations every family supplies (F: the family, on its own iterate H):
template <class F>
concept NewtonFamily = requires(F& f, bool flag, double value, std::int64_t count) {
  // cpu or cuda: NewtonStats::scan_backend of the solve.
  { f.backend() } -> std::convertible_to<SolveBackend>;
  // What fallback_tiles counts ("chain tile(s) of 64 channels"), for the warning.
  { f.fallback_unit() } -> std::convertible_to<std::string>;
  // H = 0.
  f.zero_iterate();
  // F = f(prepend(H)) − H, the Jacobian J too where `jacobian` (M2RNN: its gains); where
  // `reduce`, returns max|F| (NaN wins) and keeps the maximum per fallback unit; else any value.
  { f.evaluate(flag, flag) } -> std::convertible_to<double>;
  // H ← F (after zero_iterate and an evaluation: the App. A guess).
  f.iterate_from_residual();
  // δ from (J, F) by the family's linear step, then H += ω δ (value: ω).
  f.update(value);
  // sLSTM: the zero-hidden pass and `count` Picard passes with the hidden input frozen; a family
  // whose cells have no Picard guess throws Error (the driver calls it only where spec.picard).
  f.picard_guess(count);
  // The units whose max|F| at the last evaluation is at or above atol (value; NaN included)
  // replaced by their sequential solution in the compute type; returns how many were.
  { f.sequential_fallback(value) } -> std::convertible_to<std::int64_t>;
} && ((!requires(F& f) { f.fused(); } && !requires(F& f, double w) { f.evaluate_and_step(w); } &&
       !requires(F& f) { f.commit_step(); }) ||
      requires(F& f, double omega) {
        // The fused strategy: where fused(), evaluate_and_step(ω) returns max|F| of H and computes
        // the candidate H + ωδ in the same pass; commit_step() makes the candidate H (the driver
        // commits exactly where the host-driven strategy would update).
        { f.fused() } -> std::convertible_to<bool>;
        { f.evaluate_and_step(omega) } -> std::convertible_to<double>;
        f.commit_step();
      }) &&
    ((!requires(F& f) { f.prefer_sequential(); } && !requires(F& f) { f.solve_sequential(); }) ||
     requires(F& f) {
       // The auto rule: where prefer_sequential(), an adaptive solve is solve_sequential(), the
       // sequential solution in the compute type; it returns 0, or +inf for a non-finite state.
       { f.prefer_sequential() } -> std::convertible_to<bool>;
       { f.solve_sequential() } -> std::convertible_to<double>;
     }) &&
    ((!requires(F& f) { f.loop_residual_is_final(); } && !requires(F& f, double w) { f.polish(w); }) ||
     requires(F& f, double omega) {
       // A loop in other coordinates than the contract's (sLSTM log coordinates):
       // loop_residual_is_final() false, so the reported residual is always residual_max(), and
       // polish(ω) ends an adaptive solve with updates in the contract's coordinates (returns
       // their count, added to NewtonStats::updates).
       { f.loop_residual_is_final() } -> std::convertible_to<bool>;
       { f.polish(omega) } -> std::convertible_to<std::int64_t>;
     });

// The optional groups, each whole (NewtonFamily refuses a part of one).
template <class F>
concept FusedStepFamily = NewtonFamily<F> && requires(F& f) { f.fused(); };
// defer_guess(k): true where the App. A guess is evaluated inside the first fused step instead
// (written out on demand); k is the number of updates the solve expects.
template <class F>
concept DeferredGuessFamily = NewtonFamily<F> && requires(F& f, std::int64_t updates) {
  { f.defer_guess(updates) } -> std::convertible_to<bool>;
};
// residual_max(): max|F| of H without writing F (the final residual).
template <class F>
concept ResidualMaxFamily = NewtonFamily<F> && requires(F& f) {
  { f.residual_max() } -> std::convertible_to<double>;
};
// strategy(): NewtonStats::strategy of its Newton solves (else host_driven).
template <class F>
concept StrategyFamily = NewtonFamily<F> && requires(F& f) {
  { f.strategy() } -> std::convertible_to<SolveStrategy>;
};
template <class F>
concept AutoSequentialFamily = NewtonFamily<F> && requires(F& f) { f.prefer_sequential(); };
// finish(): after the solve, the result in place (the caller's buffer).
template <class F>
concept FinishingFamily = NewtonFamily<F> && requires(F& f) { f.finish(); };
template <class F>
concept OtherCoordinatesFamily = NewtonFamily<F> && requires(F& f) { f.loop_residual_is_final(); };

// What a fixed-K loop decided on the device returns, read once after its last step: the steps
// committed, whether a step stopped it (its max|F| not finite, or below the threshold: then
// `converged`), max|F| of every step that ran, and the residual of the iterate it ends with.
// `on_device`: the loop ran on a stream being captured into a CUDA graph, so nothing was read:
// the other fields are unknown (left at their defaults), the iterate was delivered on the device,
// and the residual gate was applied there (the iterate all NaN when it fires).
struct FixedLoopOutcome {
  std::int64_t committed = 0;
  bool stopped = false, converged = false;
  std::vector<double> history;
  double final_residual = 0.0;
  bool on_device = false;
};
// fixed_loop(steps, stop_atol, ω, residual_fail), where fused(): the fused steps of a fixed K (no
// adaptive minimum, no fallback) with the driver's fixed-K rule applied on the device after each
// step (kernels/newton_loop.hpp), so that nothing is read back before the last; the iterate is
// the host loop's bit for bit, and so is the outcome. `residual_fail` is the gate a loop that
// cannot be read applies on the device (FixedLoopOutcome::on_device).
template <class F>
concept DeviceLoopFamily = FusedStepFamily<F> && requires(F& f, std::int64_t steps, std::optional<double> atol,
                                                          double omega) {
  { f.fixed_loop(steps, atol, omega, atol) } -> std::convertible_to<FixedLoopOutcome>;
};

// The fallback unit of the per-channel families: one batch row x this many channels.
inline constexpr std::int64_t kFallbackTileChannels = 64;

// max that lets NaN win (a NaN residual must never look small).
inline double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}

// max|F| of the per-unit maxima `values` (0 when empty; NaN when any is NaN), folded in order.
inline double nan_max_of(const std::vector<double>& values) {
  double result = 0.0;
  for (double v : values) result = nan_max(result, v);
  return result;
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

// The fallback of a CPU family (the CUDA one is cuda::sequential_fallback_units): every unit
// whose max|F| at the last evaluation (`unit_max`) is at or above `atol` (NaN included) is
// re-solved by `solve(unit)`, units in parallel; returns how many were.
template <class Solve>
std::int64_t host_fallback_units(const std::vector<double>& unit_max, double atol, Solve&& solve) {
  std::vector<std::int64_t> flagged;
  for (std::size_t u = 0; u < unit_max.size(); ++u)
    if (!(unit_max[u] < atol)) flagged.push_back(static_cast<std::int64_t>(u));
  const auto count = static_cast<std::int64_t>(flagged.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t k = 0; k < count; ++k) solve(flagged[static_cast<std::size_t>(k)]);
  return count;
}

// max|F| of a trajectory tensor (the public max_residual) through a CPU solver's
// `residual(H, F, nullptr)`, in the compute type.
template <class ComputeT, class Solver>
double host_residual_of(const Solver& solver, const TensorView& H_view) {
  constexpr DType kCompute = StorageTraits<ComputeT>::dtype;
  const Tensor Hc = Tensor::converted(H_view, kCompute);
  std::vector<ComputeT> H(Hc.data_as<ComputeT>(), Hc.data_as<ComputeT>() + Hc.numel());
  std::vector<ComputeT> F(H.size());
  return solver.residual(H, F, nullptr);
}

// The iterate of a CPU family in host vectors (the compute type): H, F and J (or M2RNN's
// gains), owned here, with the family operations of the driver forwarded to a CPU solver that
// supplies
//   double residual(const Vec& H, Vec& F, Vec* J) const;   // max|F|, NaN wins; per-unit maxima
//   void update(Vec& H, const Vec& J, Vec& F, double omega) const;
//   std::int64_t sequential_fallback(Vec& H, double atol) const;  // units at/above atol re-solved
//   Vec picard_guess(std::int64_t passes) const;             // cells with Picard passes
template <class Solver, class Vec>
class HostIterate {
 public:
  HostIterate(const Solver& solver, std::size_t state_size, std::size_t jacobian_size, std::string unit)
      : solver_(solver), F_(state_size), J_(jacobian_size), state_size_(state_size), unit_(std::move(unit)) {}

  SolveBackend backend() const { return SolveBackend::cpu; }
  const std::string& fallback_unit() const { return unit_; }
  void zero_iterate() { H_.assign(state_size_, typename Vec::value_type(0)); }
  double evaluate(bool jacobian, bool /*reduce: free on the host*/) {
    return solver_.residual(H_, F_, jacobian ? &J_ : nullptr);
  }
  void iterate_from_residual() { H_ = F_; }
  void update(double omega) { solver_.update(H_, J_, F_, omega); }
  void picard_guess(std::int64_t passes) {
    if constexpr (requires { solver_.picard_guess(passes); }) {
      H_ = solver_.picard_guess(passes);
    } else {
      throw Error("picard_guess: this family has no Picard passes");
    }
  }
  std::int64_t sequential_fallback(double atol) { return solver_.sequential_fallback(H_, atol); }

  Vec& iterate() { return H_; }

 private:
  const Solver& solver_;
  Vec H_, F_, J_;
  std::size_t state_size_;
  std::string unit_;
};

}  // namespace pararnn::detail
