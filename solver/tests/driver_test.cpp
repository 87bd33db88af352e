// The one Newton driver (solver/src/newton/driver.hpp) on scripted families: a fused family that
// runs its first iterations in one launch (evaluate_and_steps) gives the stats and the iterate of
// the same family stepping one iteration at a time, for fixed and adaptive K; a non-finite
// residual among the batched iterations discards the launch (the loop stops where it would have);
// the seed's early stop (fixed K with a threshold) is never batched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "newton/driver.hpp"
#include "pararnn/cells/registry.hpp"

namespace pararnn::detail {
namespace {

// The residual of the iterate after u updates is script[u] (the last value repeats); the iterate
// is its update count. A fused family: evaluate_and_step reads the residual of the current
// iterate and proposes one more update, commit_step makes it current.
struct ScriptedFamily {
  std::vector<double> script;
  std::int64_t updates = 0, pending = 0;
  std::int64_t launches = 0, batched_launches = 0;

  double residual_at(std::int64_t u) const {
    return script[static_cast<std::size_t>(std::min<std::int64_t>(u, static_cast<std::int64_t>(script.size()) - 1))];
  }
  const char* backend_name() const { return "scripted"; }
  std::string fallback_unit() const { return "scripted units"; }
  void zero_iterate() { updates = 0; }
  double evaluate(bool, bool) { return residual_at(updates); }
  void iterate_from_residual() { updates = 0; }
  void update(double) { ++updates; }
  void picard_guess(std::int64_t) { updates = 0; }
  std::int64_t sequential_fallback(double) { return 0; }
  bool fused() const { return true; }
  double evaluate_and_step(double) {
    ++launches;
    pending = 1;
    return residual_at(updates);
  }
  void commit_step() { updates += pending; }
  double residual_max() { return residual_at(updates); }
};

// The same family with the batched launch.
struct BatchedFamily : ScriptedFamily {
  std::vector<double> evaluate_and_steps(double, std::int64_t n) {
    ++launches;
    ++batched_launches;
    pending = n;
    std::vector<double> history;
    for (std::int64_t i = 0; i < n; ++i) history.push_back(residual_at(updates + i));
    return history;
  }
};

struct Outcome {
  NewtonStats stats;
  std::int64_t updates, batched_launches;
};

template <class Family>
Outcome solve(const std::vector<double>& script, const NewtonConfig& config) {
  Family family;
  family.script = script;
  NewtonStats stats;
  solve_newton(family, cell_spec(CellKind::gru), DType::f32, config, /*time=*/64, stats);
  return {stats, family.updates, family.batched_launches};
}

void expect_same(const Outcome& batched, const Outcome& loop) {
  EXPECT_EQ(batched.updates, loop.updates);
  EXPECT_EQ(batched.stats.iters, loop.stats.iters);
  EXPECT_EQ(batched.stats.updates, loop.stats.updates);
  EXPECT_EQ(batched.stats.converged, loop.stats.converged);
  EXPECT_EQ(batched.stats.residual_history.size(), loop.stats.residual_history.size());
  for (std::size_t i = 0; i < std::min(batched.stats.residual_history.size(), loop.stats.residual_history.size()); ++i) {
    const double a = batched.stats.residual_history[i], b = loop.stats.residual_history[i];
    EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "residual_history[" << i << "]: " << a << " vs " << b;
  }
  const double a = batched.stats.max_residual, b = loop.stats.max_residual;
  EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "max_residual: " << a << " vs " << b;
}

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TEST(NewtonDriver, BatchedIterationsGiveTheLoopsStatsAndIterate) {
  const double atol = *resolved_residual_atol(NewtonConfig{}, DType::f32);
  // Converging fast, converging at the table's K, converging late (the loop continues past the
  // batch), never converging (k_max, fallback).
  const std::vector<std::vector<double>> scripts = {
      {1.0, atol / 10},
      {1.0, 0.1, atol / 2, atol / 4},
      {1.0, 0.5, 0.25, 0.1, atol / 3},
      {1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1}};
  const NewtonConfig fixed3{.max_iters = 3, .residual_atol = std::nullopt};
  for (const auto& script : scripts) {
    SCOPED_TRACE("script of " + std::to_string(script.size()) + " residuals");
    const Outcome adaptive = solve<BatchedFamily>(script, NewtonConfig{});
    expect_same(adaptive, solve<ScriptedFamily>(script, NewtonConfig{}));
    EXPECT_EQ(adaptive.batched_launches, 1) << "the adaptive solve's minimum K is one launch";
    const Outcome fixed = solve<BatchedFamily>(script, fixed3);
    expect_same(fixed, solve<ScriptedFamily>(script, fixed3));
    EXPECT_EQ(fixed.batched_launches, 1);
    EXPECT_EQ(fixed.updates, 3) << "fixed K = 3 without a threshold: three updates in the launch";
  }
}

TEST(NewtonDriver, NonFiniteResidualInTheBatchIsReplayedOneByOne) {
  for (const double bad : {kNan, kInf}) {
    const std::vector<double> script = {1.0, bad, 0.5};
    for (const NewtonConfig& config : {NewtonConfig{}, NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt}}) {
      const Outcome batched = solve<BatchedFamily>(script, config);
      const Outcome loop = solve<ScriptedFamily>(script, config);
      expect_same(batched, loop);
      EXPECT_EQ(batched.updates, 1) << "the loop stops at the non-finite residual, before its update";
    }
  }
}

TEST(NewtonDriver, SeedsEarlyStopIsNotBatched) {
  const double atol = *resolved_residual_atol(NewtonConfig{}, DType::f32);
  const NewtonConfig seed{.max_iters = 3, .residual_atol = atol};
  const std::vector<double> script = {1.0, atol / 10, atol / 100};
  const Outcome batched = solve<BatchedFamily>(script, seed);
  expect_same(batched, solve<ScriptedFamily>(script, seed));
  EXPECT_EQ(batched.batched_launches, 0);
  EXPECT_EQ(batched.updates, 1) << "the early stop keeps the iterate whose residual passed";
}

}  // namespace
}  // namespace pararnn::detail
