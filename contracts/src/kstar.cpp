// measure_kstar: for each (T, seed) one oracle unroll, then fixed-K Newton solves K = 0, 1, ...
// until the trajectory agrees at τ (no early stop, no divergence gate: the raw K-step iterate).
#include "pararnn/contracts/kstar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {

KstarTable measure_kstar(const KstarOptions& options) {
  if (options.times.empty()) throw ContractViolation("--T", "needs at least one length", "(empty)");
  for (auto t : options.times)
    if (t < 1) throw ContractViolation("--T", "lengths must be >= 1", std::to_string(t));
  if (options.seeds < 1) throw ContractViolation("--seeds", "must be >= 1", std::to_string(options.seeds));
  const QuietWarnings quiet;  // fixed K below K* leaves a high residual on purpose
  KstarTable table;
  table.options = options;
  const Tolerance tau = tolerance_for({.dtype = options.dtype, .cell = options.cell});
  table.tau = tau.atol;
  const CellSpec& spec = cell_spec(options.cell, options.mix, "cell");
  for (std::int64_t time : options.times) {
    std::int64_t worst = 0, worst_predicted = 0;
    for (std::int64_t s = 0; s < options.seeds; ++s) {
      const auto seed = static_cast<std::uint64_t>(1000 * time + s + 1);
      const Cell cell = Cell::initialise({.cell = options.cell, .mix = options.mix, .d_in = options.d_in,
                                          .d_h = spec.kind == CellKind::m2rnn ? 0 : options.d_h,
                                          .n_heads = options.n_heads,
                                          .max_recurrent_norm = options.max_recurrent_norm,
                                          .weight_std = options.weight_std,
                                          .k_dim = options.k_dim, .v_dim = options.v_dim},
                                         options.dtype, seed);
      const Tensor x = generated_case_input(options.dtype, options.batch, time, options.d_in, seed);
      const Case problem = cell.make_case(x);
      const auto oracle = reference::oracle_sequential(problem, {.certify = false, .poll = options.poll});
      KstarRow row{.time = time, .seed = seed};
      {
        const reference::LyapunovEstimate e =
            reference::oracle_lyapunov(problem, oracle, {.chains = options.batch, .poll = options.poll});
        const PredictedK p = predict_k(e, tau.atol);
        if (e.finite) {
          row.lambda_max = e.max_exponent;
          row.max_stretch = e.max_stretch;
          row.guess_error = e.max_guess_error;
        }
        row.predicted_k = p.k;
        row.predicted_reason = p.reason;
      }
      row.sequential_max_abs = compare(sequential_apply(cell, x), oracle.H, tau).max_abs;
      {
        NewtonStats stats;
        const Tensor H = newton_apply(cell, x, {.residual_fail = std::nullopt,
                                                .picard_iters = options.picard_iters,
                                                .picard_adapt = options.picard_adapt,
                                                .newton_backtrack = options.newton_backtrack,
                                                .coords = options.coords,
                                                .allow_sequential = false},  // K* is Newton's
                                      {}, &stats);
        row.default_converged = stats.converged;
        row.default_fallback_units = stats.fallback_tiles;
        row.default_picard_retries = stats.picard_retries;
        row.default_picard_iters = stats.picard_iters;
        row.default_updates = stats.updates;
        row.default_max_abs = compare(H, oracle.H, tau).max_abs;
        // One growth pass gives both the cheap λ̂ and the cheap K.
        const IteratePrediction cheap = predict_from_iterate(cell, x, H, {}, tau.atol);
        if (cheap.growth && cheap.growth->finite) row.lambda_max_iterate = cheap.growth->max_exponent;
        row.predicted_k_iterate = cheap.predicted.k;
        row.iterate_reason = cheap.predicted.reason;
      }
      for (std::int64_t k = 0; k <= options.k_limit; ++k) {
        const Tensor H = newton_apply(cell, x, {.max_iters = k, .residual_atol = std::nullopt,
                                                .residual_fail = std::nullopt,
                                                .picard_iters = options.picard_iters,
                                                .picard_adapt = options.picard_adapt,
                                                .newton_backtrack = options.newton_backtrack,
                                                .coords = options.coords});
        const ComparisonResult c = compare(H, oracle.H, tau);
        row.max_abs_by_k.push_back(c.max_abs);
        if (c.ok()) {
          row.kstar = k;
          break;
        }
      }
      worst = row.kstar < 0 || worst < 0 ? -1 : std::max(worst, row.kstar);
      worst_predicted = !row.predicted_k || worst_predicted < 0 ? -1 : std::max(worst_predicted, *row.predicted_k);
      if (options.progress)
        options.progress(fmt::format("T={} seed={} K*={} predicted={} default: converged={} fallback={} P={} "
                                     "retries={} (errors by K: {})",
                                     time, seed, row.kstar, row.predicted_k ? std::to_string(*row.predicted_k) : "none",
                                     row.default_converged, row.default_fallback_units,
                                     row.default_picard_iters, row.default_picard_retries,
                                     nlohmann::json(row.max_abs_by_k).dump()));
      table.rows.push_back(std::move(row));
    }
    table.max_kstar_by_t.emplace_back(time, worst);
    table.max_predicted_by_t.emplace_back(time, worst_predicted);
    table.shipped_k_by_t.emplace_back(time, resolve_newton_iters({}, spec, options.dtype, time).k);
  }
  return table;
}

namespace {
// A number, or null for "no estimate" (never 0.0, which is a number).
nlohmann::ordered_json or_null(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}
}  // namespace

nlohmann::ordered_json KstarTable::to_json() const {
  nlohmann::ordered_json j;
  j["cell"] = options.cell;
  if (options.mix != "diag") j["mix"] = options.mix;
  if (options.n_heads) j["n_heads"] = *options.n_heads;
  j["dtype"] = dtype_name(options.dtype);
  j["tau"] = tau;
  j["shape"] = {{"batch", options.batch}, {"d_in", options.d_in}, {"d_h", options.d_h}};
  if (options.k_dim || options.v_dim)
    j["shape"] = {{"batch", options.batch}, {"d_in", options.d_in},
                  {"k_dim", options.k_dim.value_or(0)}, {"v_dim", options.v_dim.value_or(0)}};
  j["weight_std"] = options.weight_std ? nlohmann::ordered_json(*options.weight_std) : nlohmann::ordered_json("init");
  j["max_recurrent_norm"] = options.max_recurrent_norm ? nlohmann::ordered_json(*options.max_recurrent_norm)
                                                       : nlohmann::ordered_json("none");
  j["seeds"] = options.seeds;
  j["picard_iters"] = options.picard_iters ? nlohmann::ordered_json(*options.picard_iters) : nlohmann::ordered_json("auto");
  j["picard_adapt"] = options.picard_adapt ? nlohmann::ordered_json(*options.picard_adapt) : nlohmann::ordered_json("auto");
  j["newton_backtrack"] = options.newton_backtrack;
  j["coords"] = std::string(coords_name(options.coords));
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& r : this->rows) {
    rows.push_back({{"T", r.time}, {"seed", r.seed}, {"kstar", r.kstar},
                    {"max_abs_by_k", r.max_abs_by_k}, {"sequential_max_abs", r.sequential_max_abs},
                    {"default", {{"converged", r.default_converged}, {"fallback_units", r.default_fallback_units},
                                 {"picard_retries", r.default_picard_retries},
                                 {"picard_iters", r.default_picard_iters}, {"updates", r.default_updates},
                                 {"max_abs", r.default_max_abs}}},
                    {"lambda_max", or_null(r.lambda_max)}, {"max_stretch", or_null(r.max_stretch)},
                    {"guess_error", or_null(r.guess_error)},
                    {"predicted_k", r.predicted_k ? nlohmann::ordered_json(*r.predicted_k) : nlohmann::ordered_json(nullptr)}});
    if (!r.predicted_k) rows.back()["predicted_reason"] = r.predicted_reason;
    rows.back()["lambda_max_iterate"] = or_null(r.lambda_max_iterate);
    rows.back()["predicted_k_iterate"] =
        r.predicted_k_iterate ? nlohmann::ordered_json(*r.predicted_k_iterate) : nlohmann::ordered_json(nullptr);
    if (!r.predicted_k_iterate) rows.back()["iterate_reason"] = r.iterate_reason;
  }
  j["rows"] = rows;
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < max_kstar_by_t.size(); ++i)
    table.push_back({{"T", max_kstar_by_t[i].first},
                     {"max_kstar", max_kstar_by_t[i].second},
                     {"shipped_k", shipped_k_by_t[i].second},
                     {"max_predicted_k", max_predicted_by_t[i].second}});
  j["table"] = table;
  j["schema_version"] = 1;
  return j;
}

}  // namespace pararnn
