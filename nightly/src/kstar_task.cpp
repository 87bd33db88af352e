// K*(T) of one (variant, dtype, class) over its ladder (measure_kstar), and run_task's dispatch.
#include <fmt/format.h>

#include "pararnn/contracts/kstar.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "tasks.hpp"

namespace pararnn::nightly::detail {
namespace {

using Json = nlohmann::ordered_json;

KstarOptions kstar_options(const TaskSpec& spec, const TaskContext& ctx) {
  const Variant& v = *spec.key.variant;
  const CellSpec& cell_spec = spec_of(v);
  const bool hard = spec.key.cls == "hard";
  KstarOptions ko;
  ko.cell = v.cell;
  ko.mix = v.mix;
  ko.n_heads = v.n_heads;
  ko.dtype = spec.key.dtype;
  ko.times = spec.kstar_times;
  ko.seeds = ctx.plan.seeds;
  ko.batch = ctx.plan.batch;
  ko.d_in = ctx.plan.d_in;
  ko.d_h = v.d_h.value_or(ctx.plan.d_h);
  ko.k_dim = v.k_dim;
  ko.v_dim = v.v_dim;
  ko.k_limit = ctx.plan.kstar_k_limit;
  ko.weight_std = hard ? v.hard_std : std::nullopt;
  ko.max_recurrent_norm = hard ? std::nullopt : cell_spec.default_cap;
  ko.progress = [&ctx](const std::string&) { ctx.checkpoint(); };
  ko.poll = ctx.checkpoint;
  return ko;
}

}  // namespace

std::string prediction_outcome(std::int64_t kstar, std::optional<std::int64_t> predicted, std::int64_t k_limit) {
  if (!predicted) return "none";
  if (kstar < 0) return *predicted + kPredictedKMargin > k_limit ? "hit" : "under";  // K* is beyond the limit
  if (*predicted + kPredictedKMargin < kstar) return "under";
  return *predicted <= kstar + 1 ? "hit" : "over";
}

void run_kstar(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const Variant& v = *spec.key.variant;
  const std::string dtype = std::string(dtype_name(spec.key.dtype));
  const KstarOptions ko = kstar_options(spec, ctx);
  try {
    const KstarTable table = measure_kstar(ko);
    for (std::size_t i = 0; i < table.max_kstar_by_t.size(); ++i) {
      const std::int64_t t = table.max_kstar_by_t[i].first;
      Json by_seed = Json::array(), predicted_by_seed = Json::array(), lambda_by_seed = Json::array(),
           outcome_by_seed = Json::array(), iterate_by_seed = Json::array(), lambda_iterate_by_seed = Json::array();
      double floor = 0.0;
      for (const KstarRow& r : table.rows)
        if (r.time == t) {
          by_seed.push_back(r.kstar);
          predicted_by_seed.push_back(r.predicted_k ? Json(*r.predicted_k) : Json(nullptr));
          lambda_by_seed.push_back(r.lambda_max ? Json(*r.lambda_max) : Json(nullptr));  // null: no estimate
          iterate_by_seed.push_back(r.predicted_k_iterate ? Json(*r.predicted_k_iterate) : Json(nullptr));
          lambda_iterate_by_seed.push_back(r.lambda_max_iterate ? Json(*r.lambda_max_iterate) : Json(nullptr));
          outcome_by_seed.push_back(prediction_outcome(r.kstar, r.predicted_k, ko.k_limit));
          floor = std::max(floor, r.sequential_max_abs);
        }
      const std::int64_t predicted = table.max_predicted_by_t[i].second;
      out.kstar_rows.push_back({{"variant", v.name}, {"cell", v.cell}, {"mix", v.mix}, {"dtype", dtype},
                                {"class", spec.key.cls}, {"T", t}, {"kstar_by_seed", by_seed},
                                {"max_kstar", table.max_kstar_by_t[i].second},
                                {"shipped_k", table.shipped_k_by_t[i].second}, {"k_limit", ko.k_limit},
                                {"sequential_max_abs", floor}, {"tau", table.tau},
                                {"predicted_k_by_seed", predicted_by_seed},
                                {"max_predicted_k", predicted >= 0 ? Json(predicted) : Json(nullptr)},
                                {"prediction_by_seed", outcome_by_seed},
                                {"lambda_max_by_seed", lambda_by_seed},
                                {"predicted_k_iterate_by_seed", iterate_by_seed},
                                {"lambda_max_iterate_by_seed", lambda_iterate_by_seed}});
    }
  } catch (const std::exception& e) {
    out.skipped.push_back({{"what", fmt::format("kstar {} {} {}", v.name, dtype, spec.key.cls)},
                           {"reason", std::string("measure_kstar failed: ") + e.what()}});
  }
}

void run_task(const TaskSpec& spec, const TaskContext& context, TaskOutput& out) {
  switch (spec.kind) {
    case TaskKind::rows:
      return context.options.external ? run_external_rows(spec, context, out) : run_rows(spec, context, out);
    case TaskKind::packed_vs_per_sequence:
      return context.options.external ? run_external_packed(spec, context, out)
                                      : run_packed_vs_per_sequence(spec, context, out);
    case TaskKind::strided_vs_contiguous: return run_strided_vs_contiguous(spec, context, out);
    case TaskKind::recompute_vs_stored: return run_recompute_vs_stored(spec, context, out);
    case TaskKind::gpu_vs_cpu: return run_gpu_vs_cpu(spec, context, out);
    case TaskKind::kstar: return run_kstar(spec, context, out);
  }
}

}  // namespace pararnn::nightly::detail
