// diagnose_case (diagnose.hpp).
#include "pararnn/contracts/diagnose.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {

std::int64_t Diagnosis::positive_units() const {
  if (!estimate) return 0;
  return static_cast<std::int64_t>(
      std::llround(estimate->fraction_positive * static_cast<double>(estimate->units.size())));
}

bool Diagnosis::window_capped() const {
  return estimate && std::any_of(estimate->units.begin(), estimate->units.end(),
                                 [&](const auto& u) { return u.steps < estimate->window; });
}

PredictedK Diagnosis::predicted_k() const {
  if (!estimate) throw Error("Diagnosis::predicted_k: no estimate (" + inconclusive_reason + ")");
  return predict_k(*estimate, tolerance_for({.dtype = dtype, .cell = cell}).atol);
}

nlohmann::ordered_json Diagnosis::to_json() const {
  if (!estimate) throw Error("Diagnosis::to_json: no estimate (" + inconclusive_reason + ")");
  const reference::LyapunovEstimate& e = *estimate;
  nlohmann::ordered_json units = nlohmann::ordered_json::array();
  for (const auto& u : e.units)
    units.push_back({{"chain", u.chain}, {"steps", u.steps}, {"exponent", u.exponent}, {"stretch", u.stretch},
                     {"guess_error", std::isfinite(u.guess_error) ? nlohmann::ordered_json(u.guess_error)
                                                                   : nlohmann::ordered_json("inf")}});
  return {{"cell", cell},
          {"dtype", dtype_name(dtype)},
          {"trajectory_shape", trajectory_shape},
          {"method", e.method},
          {"jacobian_block", e.block},
          {"lyapunov", {{"max", e.max_exponent},
                        {"median", e.median_exponent},
                        {"fraction_positive", e.fraction_positive},
                        {"positive_units", positive_units()},
                        {"units", e.units.size()}}},
          {"stretch", {{"max", e.max_stretch}, {"window", e.window}, {"window_capped_by_a_chain", window_capped()},
                       {"chain", e.max_stretch_chain}}},
          {"chains", {{"total", e.chains_total}, {"used", e.chains_used}, {"all", e.all_chains},
                      {"seed", seed}, {"list", e.chains}}},
          {"jacobian_steps", e.jacobian_steps},
          {"predicted_k", predicted_k().to_json()},
          {"oracle", {{"type", oracle_type},
                      {"certifier_type", certifier_type},
                      {"self_check_delta", self_check_delta},
                      {"certified_all_chains", certified_all_chains}}},
          {"seconds", {{"total", total_seconds}, {"oracle", oracle_seconds}, {"jacobians", jacobian_seconds}}},
          {"units", units}};
}

Diagnosis diagnose_case(const Case& problem, const DiagnoseOptions& options) {
  if (options.window < 1) throw ContractViolation("window", "must be >= 1", std::to_string(options.window));
  if (options.chains < 1) throw ContractViolation("chains", "must be >= 1", std::to_string(options.chains));
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point from) {
    return std::chrono::duration<double>(Clock::now() - from).count();
  };
  const auto start = Clock::now();
  (void)checked_case(problem);
  Diagnosis d;
  d.cell = problem.cell;
  d.dtype = problem.dtype();
  d.seed = options.seed;
  if (options.progress) options.progress("oracle unroll and certify");
  const reference::OracleResult trajectory = reference::oracle_sequential(
      problem, {.certify = true,
                .certify_budget = options.certify_budget.value_or(default_certify_budget(problem.dtype())),
                .seed = options.seed});
  d.oracle_seconds = seconds_since(start);
  d.trajectory_shape = trajectory.H.shape();
  d.oracle_type = trajectory.type;
  d.certifier_type = trajectory.certifier_type;
  d.self_check_delta = trajectory.self_check_delta;
  d.certified_all_chains = trajectory.certified_all_chains;
  // The certification rule of verify and oracle: an uncertified trajectory is no basis for λ̂.
  if (const auto why = certification_failure(trajectory.finite, trajectory.self_check_delta,
                                             trajectory.certified_chain_steps, problem, "trajectory")) {
    d.inconclusive_reason = *why;
    d.total_seconds = seconds_since(start);
    return d;
  }
  if (options.progress) options.progress("step Jacobians");
  const auto jacobian_start = Clock::now();
  reference::LyapunovEstimate e = reference::oracle_lyapunov(
      problem, trajectory, {.window = options.window, .chains = options.chains, .seed = options.seed});
  d.jacobian_seconds = seconds_since(jacobian_start);
  d.total_seconds = seconds_since(start);
  if (!e.finite) {
    d.inconclusive_reason = e.reason;
    return d;
  }
  d.estimate = std::move(e);
  return d;
}

}  // namespace pararnn
