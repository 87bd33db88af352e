// The Newton solve, written once for every cell family and backend (Ginkgo's one algorithm over
// many executors): K resolution, the stats, the initial guess, the iterations with their K
// semantics, the per-unit sequential fallback and the final residual. A family implementation
// (family.hpp: per-channel, dense chain, matrix state; each on the CPU and on CUDA) supplies the
// operations on its own iterate and never the loop, the schedule, the gate or the fallback rule;
// it is a NewtonFamily (family.hpp, the named contract of those operations), the only kind of
// argument solve_newton takes.
//
// Guarantees (CONTRACT §3, §4):
// - K: `resolve_schedule` (windows.hpp; `resolve_newton_iters`: fixed `max_iters`, or the table's
//   K as a minimum, f64 + 2); early stop on max|F| < residual_atol (`resolved_residual_atol`).
// - The guess is the App. A guess for every family: the residual at H = 0, then H ← F (so
//   H_t = f(h̃_t, x_t) with h̃ = 0 except h0 at heads); sLSTM's is the zero-hidden sequential pass
//   and P Picard passes with the hidden input frozen to the previous pass (P = picard_passes).
// - sLSTM Picard adapt (`picard_adapt_enabled`): a solve that ends with max|F| non-finite, above
//   picard_retry_atol or above residual_fail is redone from a guess with the next rung of
//   kPicardRungs passes (NewtonStats::picard_retries), before the fallback below.
// - Fixed K: K evaluations, each followed by an update unless the residual is already below
//   residual_atol (the seed's early stop, no update). A fused family that decides this rule on
//   the device (DeviceLoopFamily, the CUDA per-channel family) runs the K steps without reading
//   anything back in between: the same steps, stats and iterate, one read after the last. Adaptive: the table's K is a minimum and
//   k_max the cap; once the residual test passes after the minimum, one more update and stop.
//   A non-finite residual stops the loop. A family whose loop iterates in other coordinates than
//   the contract's (sLSTM log coordinates) may end an adaptive solve, converged or not and before
//   any fallback, with updates in the contract's coordinates (`polish`, counted in
//   NewtonStats::updates); the fallback then judges the polished iterate.
// - Adaptive and not converged by k_max: every fallback unit (family.hpp: the same unit on both
//   backends) whose residual is still at or above residual_atol is replaced by its sequential
//   solution in the compute type; their count is `NewtonStats::fallback_tiles`; a
//   `newton_residual_high` warning names the unit.
// - `stats.max_residual` is the residual of the returned iterate (one more evaluation unless the
//   last one already saw it). The residual gate (common.cpp) then judges it.
// - Strategy: an adaptive solve (config.allow_sequential) on a family whose auto rule prefers
//   the sequential solve (`prefer_sequential()`, the CUDA per-channel family) is that solve:
//   no guess, no iteration (iters = updates = 0), `stats.strategy` sequential, and as
//   max_residual what `solve_sequential()` returns: 0 (the solution is the recurrence evaluated
//   step by step in the compute type, so nothing is left to converge) or +inf when a state is
//   not finite, which the residual gate then raises, as for RWKV-7's exact scan; otherwise
//   `stats.strategy` is the family's `strategy()`.
// Example:
//   CpuPerChannelFamily<GruMath, float> family(cell, x, options, layout);
//   solve_newton(family, cell.spec(), cell.dtype(), config, layout.time, stats);
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <optional>
#include <string>

#include "backends.hpp"
#include "family.hpp"
#include "windows.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/core/logging.hpp"

namespace pararnn::detail {

template <NewtonFamily Family>
void solve_newton(Family& family, const CellSpec& spec, DType storage, const NewtonConfig& config,
                  std::int64_t time, NewtonStats& stats) {
  // K, the early-stop threshold, adaptive or fixed and the cap: the one reading of them
  // (windows.hpp), which the fused windowed launch shares.
  const NewtonSchedule schedule = resolve_schedule(config, spec, storage, time);
  const KResolution k = schedule.k;
  const std::optional<double> atol = schedule.stop;
  // The threshold the loop stops on (fault "loose_early_stop": 100x looser than the contract's).
  const std::optional<double> stop_atol =
      atol && PARARNN_FAULT_POINT("loose_early_stop") ? std::optional<double>(100.0 * *atol) : atol;
  stats = NewtonStats{};
  stats.k = k;
  stats.scan_backend = family.backend();

  // Adaptive: K is a minimum and k_max the cap; without an early-stop threshold it is fixed.
  const bool adaptive = schedule.adaptive;
  const std::int64_t cap = schedule.cap;
  // A family with a fused strategy (family.hpp) evaluates and steps in one pass; the step is
  // committed exactly where the host-driven strategy would update.
  bool fused = false;
  if constexpr (FusedStepFamily<Family>) fused = family.fused();
  const auto evaluate_for_update = [&] {
    if constexpr (FusedStepFamily<Family>) {
      if (fused) return family.evaluate_and_step(config.omega);
    }
    return family.evaluate(/*jacobian=*/true, /*reduce=*/true);
  };
  const auto apply_update = [&] {
    if constexpr (FusedStepFamily<Family>) {
      if (fused) return family.commit_step();
    }
    family.update(config.omega);
  };
  // max|F| of the current iterate; a family may compute it without writing F.
  const auto residual_max = [&] {
    if constexpr (ResidualMaxFamily<Family>) {
      return family.residual_max();
    } else {
      return family.evaluate(false, true);
    }
  };
  if constexpr (StrategyFamily<Family>) stats.strategy = family.strategy();
  if constexpr (AutoSequentialFamily<Family>) {
    if (adaptive && config.allow_sequential && family.prefer_sequential()) {
      stats.max_residual = family.solve_sequential();
      stats.strategy = SolveStrategy::sequential;
      stats.converged = stats.max_residual < *atol;
      if constexpr (FinishingFamily<Family>) family.finish();
      return;
    }
  }
  std::optional<double> final_residual;  // known when the last evaluation saw the final H
  // ... unless the loop's residual is not the reported one (sLSTM in log coordinates).
  bool loop_residual_final = true;
  if constexpr (OtherCoordinatesFamily<Family>) loop_residual_final = family.loop_residual_is_final();
  // One solve from the guess: the guess, the iterations, the final residual.
  const auto attempt = [&](std::int64_t passes) {
    stats.iters = stats.updates = 0;
    stats.converged = false;
    stats.residual_history.clear();
    final_residual.reset();
    if (spec.picard) {
      stats.picard_iters = passes;
      family.picard_guess(passes - (PARARNN_FAULT_POINT("picard_off_by_one") ? 1 : 0));
    } else {  // App. A: the residual of the zero trajectory is the guess
      // A fused family may evaluate the guess inside its first step instead (it writes the
      // guess out if anything else needs it); `k.k` is the number of updates it should expect.
      bool deferred = false;
      if constexpr (DeferredGuessFamily<Family>) deferred = family.defer_guess(k.k);
      if (!deferred) {
        family.zero_iterate();
        (void)family.evaluate(/*jacobian=*/false, /*reduce=*/false);
        family.iterate_from_residual();
      }
    }
    if constexpr (DeviceLoopFamily<Family>) {
      // A fixed K on a fused family: the rule of the loop below, applied on the device after each
      // step (family.hpp), read back once (no wait per step).
      static_assert(!OtherCoordinatesFamily<Family>, "the device loop reports its own residual as final");
      if (fused && !adaptive) {
        const FixedLoopOutcome r = family.fixed_loop(cap, stop_atol, config.omega, config.residual_fail);
        if (r.on_device) {  // captured into a CUDA graph: the outcome stays on the device
          if (picard_adapt_enabled(config, spec))
            throw UnsupportedPath(fmt::format(
                "{}: Picard adapt decides from the solve's residual, which is not read back while the stream is "
                "captured into a CUDA graph or with sync_free; pass picard_adapt=false (or picard_iters)",
                spec.name));
          stats.outcome_on_device = true;
          stats.max_residual = std::numeric_limits<double>::quiet_NaN();
          return;
        }
        stats.iters = r.stopped ? r.committed + 1 : cap;
        stats.updates = r.committed;
        stats.converged = r.converged;
        stats.residual_history = r.history;
        stats.max_residual = r.final_residual;
        return;
      }
    }
    for (std::int64_t it = 0; it < cap; ++it) {
      const double res = evaluate_for_update();
      ++stats.iters;
      stats.residual_history.push_back(res);
      if (!std::isfinite(res)) {
        final_residual = res;
        break;
      }
      const bool below = stop_atol && res < *stop_atol;
      if (below && !adaptive) {  // seed's early stop: no update
        stats.converged = true;
        final_residual = res;
        break;
      }
      const bool last = it + 1 == cap || (below && it + 1 >= k.k);
      if (!(last && PARARNN_FAULT_POINT("dropped_last_update"))) apply_update();
      ++stats.updates;
      if (below && it + 1 >= k.k) {  // adaptive: the residual test passed after the minimum K,
        stats.converged = true;      // and this was the one more update
        break;
      }
    }
    if constexpr (OtherCoordinatesFamily<Family>) {
      if (adaptive) stats.updates += family.polish(config.omega);
    }
    stats.max_residual = final_residual && loop_residual_final ? *final_residual : residual_max();
  };
  std::int64_t passes = spec.picard ? picard_passes(config, time) : 0;
  attempt(passes);
  // Picard adapt (spec §2.3): raise P, not K, while the solve ends above picard_retry_atol (or
  // residual_fail, or non-finite) and a higher rung exists; before any sequential fallback.
  if (picard_adapt_enabled(config, spec) && !stats.outcome_on_device) {
    for (;;) {
      const double res = stats.max_residual;
      const bool retry = !std::isfinite(res) || (config.picard_retry_atol && res > *config.picard_retry_atol) ||
                         (config.residual_fail && res > *config.residual_fail);
      const auto* rung = std::find_if(std::begin(kPicardRungs), std::end(kPicardRungs),
                                      [&](std::int64_t r) { return r > passes; });
      if (!retry || rung == std::end(kPicardRungs)) break;
      passes = *rung;
      ++stats.picard_retries;
      attempt(passes);
    }
  }
  if (adaptive && !stats.converged) {
    // Not converged by k_max (or a non-finite iterate): the units whose residual is still at or
    // above residual_atol get the sequential answer instead of a silently wrong one.
    const double before = stats.max_residual;
    constexpr bool kResidualWritten = !ResidualMaxFamily<Family>;
    if (final_residual || !kResidualWritten) (void)family.evaluate(false, true);  // per-unit maxima of the final H
    stats.fallback_tiles = PARARNN_FAULT_POINT("fallback_returns_unconverged")
                               ? std::max<std::int64_t>(1, stats.fallback_tiles)
                               : family.sequential_fallback(*atol);
    stats.max_residual = residual_max();
    emit_warning("newton_residual_high",
                 fmt::format("adaptive Newton did not reach residual_atol={:.1e} within k_max={} "
                             "(max|F|={:.3e}); {} {} were solved sequentially",
                             *atol, cap, before, stats.fallback_tiles, family.fallback_unit()),
                 {{"k_max", cap}, {"max_residual", before}, {"reason", "k_max reached"},
                  {"fallback_tiles", stats.fallback_tiles},
                  {"cell", std::string(spec.name)}, {"T", time}});
  }
  if constexpr (FinishingFamily<Family>) family.finish();
}

}  // namespace pararnn::detail
