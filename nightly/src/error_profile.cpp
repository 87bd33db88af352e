#include "pararnn/nightly/error_profile.hpp"

#include <algorithm>
#include <cmath>

#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn::nightly {

std::vector<double> max_abs_along_t(const TensorView& a, const TensorView& b) {
  const Tensor ca = Tensor::copy_of(a), cb = Tensor::copy_of(b);
  const std::vector<double> va = ca.to_f64_vector(), vb = cb.to_f64_vector();
  const std::int64_t batch = a.size(0), time = a.size(1);
  const std::int64_t per_step = time > 0 ? a.numel() / (batch * time) : 0;
  std::vector<double> out(static_cast<std::size_t>(time), 0.0);
  for (std::int64_t r = 0; r < batch; ++r)
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t i = 0; i < per_step; ++i) {
        const auto k = static_cast<std::size_t>((r * time + t) * per_step + i);
        const double d = std::abs(va[k] - vb[k]);
        double& m = out[static_cast<std::size_t>(t)];
        if (std::isnan(d) || d > m) m = std::isnan(m) ? m : d;  // NaN sticks
      }
  return out;
}

std::int64_t first_failing_t(const TensorView& actual, const TensorView& expected, double atol, double rtol) {
  const Tensor ca = Tensor::copy_of(actual), ce = Tensor::copy_of(expected);
  const std::vector<double> va = ca.to_f64_vector(), ve = ce.to_f64_vector();
  const std::int64_t batch = actual.size(0), time = actual.size(1);
  const std::int64_t per_step = time > 0 ? actual.numel() / (batch * time) : 0;
  std::int64_t first = -1;
  for (std::int64_t r = 0; r < batch; ++r)
    for (std::int64_t t = 0; t < time && (first < 0 || t < first); ++t)
      for (std::int64_t i = 0; i < per_step; ++i) {
        const auto k = static_cast<std::size_t>((r * time + t) * per_step + i);
        const double d = std::abs(va[k] - ve[k]);
        if (!(d <= atol + rtol * std::abs(ve[k]))) {
          first = t;
          break;
        }
      }
  return first;
}

nlohmann::ordered_json binned_series(const std::vector<double>& values, std::size_t max_points) {
  nlohmann::ordered_json t = nlohmann::ordered_json::array(), v = nlohmann::ordered_json::array();
  const std::size_t n = values.size();
  const std::size_t width = std::max<std::size_t>(1, (n + max_points - 1) / std::max<std::size_t>(1, max_points));
  for (std::size_t start = 0; start < n; start += width) {
    double m = 0.0;
    for (std::size_t i = start; i < std::min(n, start + width); ++i)
      if (std::isnan(values[i]) || values[i] > m) m = std::isnan(m) ? m : values[i];
    t.push_back(start);
    v.push_back(m);  // NaN is written as null
  }
  return {{"t", t}, {"max_abs", v}};
}

nlohmann::ordered_json error_along_t(const Cell& cell, const Case& problem, const NewtonConfig& config,
                                     std::size_t max_points) {
  ApplyOptions apply;
  if (problem.h0) apply.h0 = problem.h0->view();
  if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
  NewtonStats stats;
  std::optional<Tensor> H;
  std::string solver_error;
  try {
    H = newton_apply(cell, problem.x, config, apply, &stats);
  } catch (const std::exception& e) {
    solver_error = e.what();  // e.g. the residual gate: the picture keeps the floor and the message
  }
  const Tensor H_seq = sequential_apply(cell, problem.x, apply);
  const reference::OracleResult oracle = reference::oracle_sequential(problem, {.certify = false});
  const Tolerance tau = tolerance_for({.dtype = problem.dtype(), .metric = Metric::trajectory, .cell = problem.cell,
                                       .backend = std::string(scan_backend_name(config.scan_backend))});
  nlohmann::ordered_json j;
  j["T"] = problem.x.size(1);
  j["atol"] = tau.atol;
  j["rtol"] = tau.rtol;
  if (H) {
    const auto solver = binned_series(max_abs_along_t(*H, oracle.H), max_points);
    j["t"] = solver["t"];
    j["solver"] = solver["max_abs"];
    j["first_failing_t"] = first_failing_t(*H, oracle.H, tau.atol, tau.rtol);
  } else {
    j["solver_error"] = solver_error;
  }
  const auto sequential = binned_series(max_abs_along_t(H_seq, oracle.H), max_points);
  if (!H) j["t"] = sequential["t"];
  j["sequential"] = sequential["max_abs"];
  j["sequential_first_failing_t"] = first_failing_t(H_seq, oracle.H, tau.atol, tau.rtol);
  j["residual_history"] = stats.residual_history;
  if (H) j["max_residual"] = stats.max_residual;
  j["newton_iters"] = stats.iters;
  return j;
}

nlohmann::ordered_json external_error_along_t(const Case& problem, const TensorView& theirs, std::size_t max_points) {
  const Cell cell = Cell::from_case(problem);
  ApplyOptions apply;
  if (problem.h0) apply.h0 = problem.h0->view();
  if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
  const Tensor H_seq = sequential_apply(cell, problem.x, apply);
  const reference::OracleResult oracle = reference::oracle_sequential(problem, {.certify = false});
  if (theirs.shape() != oracle.H.shape())
    throw ContractViolation("H", "must have the oracle's shape " + shape_string(oracle.H.shape()), shape_string(theirs.shape()));
  const Tolerance tau = tolerance_for({.dtype = problem.dtype(), .metric = Metric::trajectory, .cell = problem.cell,
                                       .backend = "external"});
  nlohmann::ordered_json j;
  j["T"] = problem.x.size(1);
  j["atol"] = tau.atol;
  j["rtol"] = tau.rtol;
  const auto solver = binned_series(max_abs_along_t(theirs, oracle.H), max_points);
  j["t"] = solver["t"];
  j["solver"] = solver["max_abs"];
  j["first_failing_t"] = first_failing_t(theirs, oracle.H, tau.atol, tau.rtol);
  j["sequential"] = binned_series(max_abs_along_t(H_seq, oracle.H), max_points)["max_abs"];
  j["sequential_first_failing_t"] = first_failing_t(H_seq, oracle.H, tau.atol, tau.rtol);
  j["residual_history"] = nlohmann::ordered_json::array();
  return j;
}

}  // namespace pararnn::nightly
