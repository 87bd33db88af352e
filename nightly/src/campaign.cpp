// run_campaign: the plan (make_plan) becomes a list of tasks, run in the interleaved order by
// --jobs workers under the time budget (run_budgeted); report.json is assembled from their
// outputs in that order (whatever the number of workers) and written once.
#include "pararnn/nightly/campaign.hpp"

#include <optional>
#include <thread>

#include "assemble.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reports/process.hpp"
#include "tasks.hpp"

namespace pararnn::nightly {
namespace {

void check_out_dir(const std::filesystem::path& out_dir) {
  if (out_dir.empty()) throw ContractViolation("--out", "needs a directory", "(empty)");
  std::error_code ec;
  if (std::filesystem::exists(out_dir, ec) && !std::filesystem::is_directory(out_dir, ec))
    throw ContractViolation("--out", "must be a directory (the report folder)", out_dir.string());
}

std::vector<PoolItem> pool_items(const std::vector<TaskSpec>& tasks) {
  std::vector<PoolItem> items;
  items.reserve(tasks.size());
  for (const TaskSpec& t : tasks) items.push_back({.label = t.label, .group = t.group, .cost = t.cost});
  return items;
}

}  // namespace

CampaignResult run_campaign(const CampaignOptions& options) {
  const Budget budget(options.time_budget_s);
  check_out_dir(options.out_dir);
  const CampaignPlan plan =
      make_plan(options, static_cast<std::int64_t>(std::thread::hardware_concurrency()));

  std::filesystem::create_directories(options.out_dir);
  // This run's cases are written to a staging folder that replaces <out>/cases only when the
  // report is written, so cases/ never mixes runs and a failed run leaves the previous one whole.
  const reports::ScratchDirectory staging(options.out_dir, ".cases-");
  // ... and an external solver's bundles the same way, into <out>/bundles.
  std::optional<reports::ScratchDirectory> bundles;
  if (options.external) bundles.emplace(options.out_dir, ".bundles-");
  const std::filesystem::path report_path = options.out_dir / "report.json";
  check_output_path(report_path, "--out");

  const QuietWarnings quiet;  // fixed-K and hard rows warn on purpose; the report keeps the figures
  OracleMemo oracle_memo;
  const detail::TaskContext context{.options = options, .plan = plan.plan, .oracle_memo = oracle_memo,
                                    .staging = staging.path(),
                                    .bundles_staging = bundles ? bundles->path() : std::filesystem::path(),
                                    .checkpoint = [&budget] { budget.checkpoint(); }};
  const std::vector<PoolItem> items = pool_items(plan.tasks);
  const std::vector<std::size_t> order = run_order(items);
  std::vector<detail::TaskOutput> outputs(plan.tasks.size());
  const PoolResult pool = run_budgeted(
      items, order, [&](std::size_t i) { detail::run_task(plan.tasks[i], context, outputs[i]); },
      [&](std::size_t i) {
        // Nothing of a task cut short reaches the report or cases/ (its cpu row may have written
        // a case before its cuda row was cut).
        for (const auto& f : outputs[i].case_files) {
          std::error_code ignored;
          std::filesystem::remove(f, ignored);
        }
        outputs[i] = detail::TaskOutput{};
      },
      {.jobs = plan.jobs, .threads_per_job = plan.threads_per_job, .budget = &budget, .progress = options.progress});

  const nlohmann::ordered_json report = detail::assemble_report(
      {.options = options, .plan = plan, .order = order, .outputs = outputs, .pool = pool, .oracle_memo = oracle_memo,
       .elapsed_s = budget.elapsed()},
      report_path);
  detail::publish_report(options.out_dir, staging.path(), bundles ? bundles->path() : std::filesystem::path(),
                         report_path, report);
  return {report, report_path, detail::campaign_exit_code(report)};
}

}  // namespace pararnn::nightly
