// The agreement rows of one case: on every backend of its T, one verify_agreement each (the
// second row takes the case's oracle from the memo), and for a failing row its case file, repro,
// bug-bundle command and error profile.
#include <fmt/format.h>

#include <chrono>

#include "cases.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/nightly/error_profile.hpp"
#include "tasks.hpp"

namespace pararnn::nightly::detail {
using Json = nlohmann::ordered_json;

Json row_identity(const CaseKey& key, const std::string& id, const std::string& backend, const BuiltCase& built) {
  const Variant& v = *key.variant;
  Json row;
  row["id"] = id;
  row["variant"] = v.name;
  row["cell"] = v.cell;
  row["mix"] = v.mix;
  row["dtype"] = dtype_name(key.dtype);
  row["backend"] = backend;
  row["T"] = key.time;
  row["batch"] = built.x.size(0);
  row["d_in"] = built.cell.d_in();
  row["d_h"] = built.cell.d_h();
  row["class"] = key.cls;
  row["seed"] = key.seed_index;
  row["case_seed"] = key.case_seed;
  return row;
}

namespace {

// The verify flags that replay a row: backend, K, seed, certification budget, --grad.
std::string verify_flags(const TaskContext& ctx, const CaseKey& key, const std::string& backend, bool gradients) {
  const std::string k_text = ctx.options.max_iters ? std::to_string(*ctx.options.max_iters) : "none";
  return fmt::format("--backend {} --max-iters {} --seed {} --certify-budget {}{}", backend, k_text, key.case_seed,
                     ctx.plan.certify_budget_for(key.dtype), gradients ? " --grad" : "");
}

// Verifies the row; returns false when the solver refuses the path (the row is skipped).
bool judge_row(const BuiltCase& built, const VerifyOptions& vo, const JudgeHooks& hooks, const std::string& id,
               Json& row, TaskOutput& out) {
  try {
    const AgreementReport r = verify_agreement(built.cell, built.x, vo, hooks);
    row["outcome"] = std::string(verdict_name(r.verdict));
    row["agreement"] = r.to_json();
  } catch (const UnsupportedPath& e) {
    out.skipped.push_back({{"what", "row " + id}, {"reason", e.what()}});
    return false;
  } catch (const NewtonDivergenceError& e) {
    // The residual gate: the solver did not produce the sequential answer (`pararnn verify` exits
    // 1 on it); no AgreementReport exists, so the outcome is Error.
    record_row_error(row, "NewtonDivergenceError", e.what());
  } catch (const std::exception& e) {
    record_row_error(row, "exception", e.what());
  }
  return true;
}

// Rows of class init time newton_apply again (newton_ms_repeats: the diff's noise band).
void time_repeats(const TaskContext& ctx, const BuiltCase& built, const NewtonConfig& config, Json& row) {
  if (!row.contains("agreement") ||
      !(reports::number_or_nan(row["agreement"]["timings_ms"].value("newton", Json(nullptr))) <=
        ctx.plan.timing_repeat_max_ms))
    return;
  Json repeats = Json::array();
  for (std::int64_t r = 0; r < ctx.plan.timing_repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      (void)newton_apply(built.cell, built.x, config, built.apply());
    } catch (const std::exception&) {
      break;  // the verdict above already says what happened
    }
    repeats.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  row["newton_ms_repeats"] = repeats;
}

void run_row(const CaseKey& key, const std::string& backend, const TaskContext& ctx, TaskOutput& out) {
  const Plan& plan = ctx.plan;
  const std::string id = case_id(key) + "." + backend;
  const Variant& v = *key.variant;
  const BuiltCase built = build_case(plan, key);
  Json row = row_identity(key, id, backend, built);
  const bool wants_gradients = judges_gradients(plan, v, key.dtype, key.time, key.cls, key.seed_index);
  std::optional<std::string> no_gradients;
  if (wants_gradients) no_gradients = gradient_unsupported(v, key.dtype, backend, plan);
  const bool gradients = wants_gradients && !no_gradients;
  row["gradients"] = gradients ? "judged" : (wants_gradients ? "not_applicable" : "not_requested");
  if (no_gradients) row["gradients_reason"] = *no_gradients;
  const std::string case_rel = "cases/" + id + ".safetensors";
  const std::string flags = verify_flags(ctx, key, backend, gradients);
  const std::string repro = fmt::format("pararnn verify {} {}", case_rel, flags);
  VerifyOptions vo;
  vo.config = config_for(backend, ctx.options.max_iters);
  if (built.h0) vo.h0 = built.h0->view();
  if (built.cu_seqlens) vo.cu_seqlens = built.cu_seqlens->view();
  vo.seed = key.case_seed;
  vo.certify_budget = plan.certify_budget_for(key.dtype);
  vo.gradients = gradients;
  vo.repro_command = repro;
  // The case's rows on every backend share one oracle trajectory.
  const JudgeHooks hooks{.progress = [&](std::string_view) { ctx.checkpoint(); },
                         .poll = ctx.checkpoint,
                         .oracle_memo = &ctx.oracle_memo,
                         .oracle_key = case_id(key),
                         .oracle_uses = static_cast<std::int64_t>(plan.backends_at(key.time).size())};
  if (!judge_row(built, vo, hooks, id, row, out)) return;
  if (row["outcome"] != "Agree") {
    out.case_files.push_back(ctx.staging / (id + ".safetensors"));
    write_case(out.case_files.back(), built.problem());
    row["case_file"] = case_rel;
    row["repro"] = repro;
    row["bug_bundle"] = fmt::format("pararnn bug-bundle {} {} --out {}.bundle.tar.gz", case_rel, flags, id);
    try {
      row["error_along_t"] = error_along_t(built.cell, built.problem(), vo.config, 128);
    } catch (const std::exception& e) {
      row["error_along_t"] = {{"error", e.what()}};
    }
  }
  if (key.cls == "init") time_repeats(ctx, built, vo.config, row);
  out.rows.push_back(std::move(row));
}

}  // namespace

void run_rows(const TaskSpec& spec, const TaskContext& context, TaskOutput& out) {
  for (const std::string& backend : context.plan.backends_at(spec.key.time)) run_row(spec.key, backend, context, out);
}

}  // namespace pararnn::nightly::detail
