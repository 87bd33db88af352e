// Claims on the Newton schedule and on what storage means, which the agreement properties cannot
// see because a wrong schedule or a rounded iterate can still land within τ of the oracle:
// - Newton is exact after T − 1 updates from the App. A guess (the guess makes step 1 exact and
//   every update makes one more step exact), so a dropped update shows at the last step;
// - the adaptive loop stops at the first residual below residual_atol after the minimum K, with
//   exactly one more update (CONTRACT §3);
// - a half-precision (f16/bf16) solve is the f32 solve of the same, exactly lifted, problem
//   rounded once at the end: storage never enters the iteration or the scan;
// - an adaptive solve that is not converged by k_max returns units below residual_atol (the
//   sequential fallback), never the unconverged iterate.
// Found missing by the fault catalog (docs/faults/catalog.json): each of these caught a fault the
// other suites let through.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;
using testing::GeneratedProblem;

// Every per-channel cell whose guess is App. A's (sLSTM starts from its Picard passes).
std::vector<std::string> app_a_cells() {
  std::vector<std::string> out;
  for (const std::string& label : testing::kPerChannelCellLabels)
    if (!cell_spec(testing::label_options(label).cell).picard) out.push_back(label);
  return out;
}

struct Solved {
  Tensor H;
  NewtonStats stats;
};

Solved solve(const Cell& cell, const Tensor& x, const std::optional<Tensor>& h0, const NewtonConfig& config) {
  ApplyOptions apply;
  if (h0) apply.h0 = h0->view();
  const QuietWarnings quiet;
  Solved out;
  out.H = newton_apply(cell, x, config, apply, &out.stats);
  return out;
}

RC_GTEST_PROP(Schedule, NewtonIsExactAfterTMinusOneUpdates, ()) {
  auto p = *gen_problem(64, app_a_cells(), {DType::f64});
  p.time = *rc::gen::inRange<std::int64_t>(2, 65);
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  const Solved newton =
      solve(cell, x, h0, {.max_iters = p.time - 1, .residual_atol = std::nullopt, .residual_fail = std::nullopt});
  RC_ASSERT(newton.stats.updates == p.time - 1);
  ApplyOptions apply;
  if (h0) apply.h0 = h0->view();
  const Tensor sequential = sequential_apply(cell, x, apply);
  const ComparisonResult c =
      compare(newton.H, sequential, tolerance_for({.dtype = p.dtype, .cell = p.cell}));
  if (!c.ok()) RC_FAIL(p.describe() + ": " + c.describe());
}

RC_GTEST_PROP(Schedule, AdaptiveStopIsTheFirstResidualBelowAtol, ()) {
  const auto p = *gen_problem(400, testing::kPerChannelCellLabels, testing::kNewtonDtypes);
  const Cell cell = p.make_cell();
  const NewtonConfig config{.residual_fail = std::nullopt};
  const Solved s = solve(cell, p.make_input(), p.make_h0(cell.slots()), config);
  const double atol = *resolved_residual_atol(config, p.dtype);
  const auto& history = s.stats.residual_history;
  RC_CLASSIFY(s.stats.converged, "converged");
  RC_ASSERT(!history.empty());
  // Every evaluation from the minimum K on but the last is at or above atol ...
  for (std::size_t j = static_cast<std::size_t>(std::max<std::int64_t>(s.stats.k.k - 1, 0)); j + 1 < history.size(); ++j)
    if (!(history[j] >= atol)) {
      const std::string why = fmt::format("{}: residual {:.3e} < atol {:.1e} at evaluation {} but the loop went on to {}",
                                          p.describe(), history[j], atol, j, history.size());
      RC_FAIL(why);
    }
  // ... and a converged loop stopped on one below it, with one more update.
  if (s.stats.converged) {
    if (!(history.back() < atol)) {
      const std::string why = fmt::format("{}: converged on residual {:.3e} >= atol {:.1e}", p.describe(), history.back(), atol);
      RC_FAIL(why);
    }
    RC_ASSERT(s.stats.updates == s.stats.iters);
  }
}

RC_GTEST_PROP(Storage, HalfPrecisionSolveIsTheF32SolveRoundedOnce, ()) {
  const auto p = *gen_problem(300, testing::kPerChannelCellLabels, {DType::bf16, DType::f16});
  const Cell half = p.make_cell();
  GeneratedProblem lifted_problem = p;
  lifted_problem.dtype = DType::f32;
  Cell lifted = lifted_problem.make_cell();
  for (const auto& [name, tensor] : half.parameters())
    lifted.set_parameter(name, Tensor::converted(tensor.view(), DType::f32));
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(half.slots());
  std::optional<Tensor> h0_lifted;
  if (h0) h0_lifted = Tensor::converted(h0->view(), DType::f32);
  // One configuration for both (the f32 and half-precision defaults of K and atol may differ).
  const NewtonConfig config{.max_iters = resolve_newton_iters({}, half.spec(), p.dtype, p.time).k,
                            .residual_atol = resolved_residual_atol({}, p.dtype),
                            .residual_fail = std::nullopt};
  const Solved h = solve(half, x, h0, config);
  const Solved f = solve(lifted, Tensor::converted(x.view(), DType::f32), h0_lifted, config);
  const Tensor rounded = Tensor::converted(f.H.view(), p.dtype);
  RC_ASSERT(h.stats.residual_history == f.stats.residual_history);
  RC_ASSERT(h.H.to_f64_vector() == rounded.to_f64_vector());
}

TEST(Fallback, UnconvergedAdaptiveSolveReturnsUnitsBelowAtol) {
  // Hard weights at long T with the adaptive loop capped at one update: some tiles cannot
  // converge and must come back as the sequential answer, whose residual is below atol.
  int fallbacks = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 512, .d_in = 4,
                             .d_h = 8, .weight_std = 0.7, .clamped = false, .seed = seed};
    const Cell cell = p.make_cell();
    const NewtonConfig config{.residual_fail = std::nullopt, .k_max = 1, .newton_iters_by_t = {{1, 1}}};
    const Solved s = solve(cell, p.make_input(), std::nullopt, config);
    if (s.stats.fallback_tiles == 0) continue;
    ++fallbacks;
    EXPECT_LT(s.stats.max_residual, *resolved_residual_atol(config, p.dtype)) << p.describe();
  }
  EXPECT_GT(fallbacks, 0) << "no unconverged case found: the fallback is untested";
}

}  // namespace
}  // namespace pararnn
