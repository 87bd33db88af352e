#include "assemble.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace pararnn::nightly::detail {
namespace {

using Json = nlohmann::ordered_json;
using Counts = std::map<std::string, std::int64_t>;

Counts verdict_counts() { return {{"Agree", 0}, {"Disagree", 0}, {"Inconclusive", 0}, {"Error", 0}}; }

// Rows, equivalences, K* rows and skips of every task, in the run order.
void concatenate(const RunRecord& run, Json& rows, Json& equivalences, Json& kstar_rows, Json& skipped) {
  const auto append = [](Json& to, Json& from) {
    for (Json& j : from) to.push_back(std::move(j));
  };
  for (const std::size_t index : run.order) {
    TaskOutput& o = run.outputs[index];
    append(rows, o.rows);
    append(equivalences, o.equivalences);
    append(kstar_rows, o.kstar_rows);
    append(skipped, o.skipped);
  }
}

// The counts, the failures and the five worst rows by error / atol.
void summarise_rows(const Json& rows, Json& summary) {
  Counts by_outcome = verdict_counts();
  Counts gradient_counts = {{"judged", 0}, {"not_applicable", 0}, {"not_requested", 0}};
  Json failures = Json::array();
  std::vector<std::pair<double, std::string>> ranked;
  for (const Json& row : rows) {
    const std::string outcome = row["outcome"].get<std::string>();
    ++by_outcome[outcome];
    ++gradient_counts[row["gradients"].get<std::string>()];
    if (outcome != "Agree") failures.push_back(row["id"]);
    if (row.contains("agreement")) {
      const double max_abs = reports::number_or_nan(row["agreement"]["max_abs"]);
      const double atol = reports::number_or_nan(row["agreement"]["atol"]);
      ranked.emplace_back(std::isnan(max_abs) ? INFINITY : max_abs / atol, row["id"].get<std::string>());
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  Json worst = Json::array();
  for (std::size_t i = 0; i < ranked.size() && i < 5; ++i) worst.push_back(ranked[i].second);
  summary["rows"] = rows.size();
  summary["by_outcome"] = by_outcome;
  summary["gradients"] = gradient_counts;
  summary["failures"] = failures;
  summary["worst"] = worst;
}

// Where the time went: the tasks' summed wall seconds (the work to spread over --jobs) and the
// slowest tasks (the stragglers that bound a run's length).
void summarise_time(const RunRecord& run, Json& summary) {
  std::vector<std::pair<double, std::string>> timed;
  double total = 0.0;
  for (std::size_t i = 0; i < run.plan.tasks.size(); ++i)
    if (run.pool.seconds[i] >= 0.0) {
      timed.emplace_back(run.pool.seconds[i], run.plan.tasks[i].label);
      total += run.pool.seconds[i];
    }
  std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  Json slowest = Json::array();
  for (std::size_t i = 0; i < timed.size() && i < 10; ++i)
    slowest.push_back({{"task", timed[i].second}, {"seconds", std::round(timed[i].first * 100.0) / 100.0}});
  summary["task_seconds_total"] = std::round(total * 10.0) / 10.0;
  summary["oracle_runs"] = {{"computed", run.oracle_memo.computed()}, {"shared", run.oracle_memo.reused()}};
  summary["slowest_tasks"] = slowest;
}

Json summarise(const RunRecord& run, const Json& rows, const Json& equivalences, const Json& kstar_rows,
               const Json& skipped) {
  Json rows_part;
  summarise_rows(rows, rows_part);
  Counts eq_by = verdict_counts();
  for (const Json& e : equivalences) ++eq_by[e["verdict"].get<std::string>()];
  std::int64_t kstar_over_shipped = 0;
  Json predicted = {{"hit", 0}, {"over", 0}, {"under", 0}, {"none", 0}};
  for (const Json& k : kstar_rows) {
    const auto m = k["max_kstar"].get<std::int64_t>();
    if (m < 0 || m > k["shipped_k"].get<std::int64_t>()) ++kstar_over_shipped;
    for (const Json& outcome : k.value("prediction_by_seed", Json::array()))
      predicted[outcome.get<std::string>()] = predicted[outcome.get<std::string>()].get<std::int64_t>() + 1;
  }
  Json summary;
  summary["rows"] = rows_part["rows"];
  summary["by_outcome"] = rows_part["by_outcome"];
  summary["equivalences"] = eq_by;
  summary["gradients"] = rows_part["gradients"];
  summary["kstar_measurements"] = kstar_rows.size();
  summary["kstar_above_shipped"] = kstar_over_shipped;
  summary["kstar_predicted"] = predicted;  // per (T, seed): prediction_outcome's counts
  summary["failures"] = rows_part["failures"];
  summary["worst"] = rows_part["worst"];
  summary["skipped"] = skipped.size();
  std::int64_t kstar_failed = 0;
  for (const Json& k : skipped)
    if (k.value("reason", std::string()).rfind("measure_kstar failed", 0) == 0) ++kstar_failed;
  summary["kstar_failed"] = kstar_failed;
  summary["tasks"] = run.plan.tasks.size();
  summary["rows_not_run"] = run.pool.not_run;
  summary["tasks_cut_at_budget"] = run.pool.cut;
  summary["budget_exhausted"] = run.pool.budget_exhausted;
  summary["duration_s"] = std::round(run.elapsed_s * 10.0) / 10.0;
  summarise_time(run, summary);
  return summary;
}

}  // namespace

Json assemble_report(const RunRecord& run, const std::filesystem::path& report_path) {
  Json rows = Json::array(), equivalences = Json::array(), kstar_rows = Json::array();
  Json skipped = run.plan.skipped;
  concatenate(run, rows, equivalences, kstar_rows, skipped);
  Json report;
  report["format"] = reports::kReportFormat;
  report["schema_version"] = reports::kNightlySchemaVersion;
  report["context"] = reports::context_block(run.options.build, run.options.argv, run.plan.seed_list);
  if (run.options.external) report["context"]["solver"] = solver_json(*run.options.external);
  report["plan"] = plan_json(run.options, run.plan);
  Json summary = summarise(run, rows, equivalences, kstar_rows, skipped);
  report["skipped"] = std::move(skipped);
  report["rows"] = std::move(rows);
  report["equivalences"] = std::move(equivalences);
  report["kstar"] = std::move(kstar_rows);
  report["summary"] = std::move(summary);
  const auto& performance = run.options.performance;
  if (performance) {
    report["performance"] = *performance;
    if (performance->contains("peer_versions") && (*performance)["peer_versions"].is_object())
      for (const auto& [peer, version] : (*performance)["peer_versions"].items())
        report["context"]["peers"][peer] = version;
  }
  reports::validate_report(report, report_path.string());  // never write what render would refuse
  return report;
}

int campaign_exit_code(const Json& report) {
  const Json& s = report["summary"];
  const auto count = [](const Json& by, const char* verdict) { return by[verdict].get<std::int64_t>(); };
  const Json& rows = s["by_outcome"];
  const Json& eq = s["equivalences"];
  const bool failed = count(rows, "Disagree") + count(rows, "Error") + count(eq, "Disagree") + count(eq, "Error") > 0;
  // A run cut by its time budget did not judge its whole plan: never exit 0 (2, as Inconclusive).
  // A K*-only run that measured nothing, or whose measurement failed (recorded in skipped), did
  // not measure its plan: 2.
  const bool kstar_failed = report["plan"].value("kstar_only", false) &&
                            (s.value("kstar_failed", std::int64_t{0}) > 0 || s.value("kstar_measurements", std::int64_t{0}) == 0);
  const bool inconclusive = count(rows, "Inconclusive") + count(eq, "Inconclusive") > 0 || s["budget_exhausted"].get<bool>() ||
                            kstar_failed;
  return failed ? 1 : (inconclusive ? 2 : 0);
}

namespace {

// Replaces <out>/<name> by `staging` (empty: removes it, so the folder never holds another run's files).
void replace_folder(const std::filesystem::path& out_dir, const std::string& name, const std::filesystem::path& staging) {
  const std::filesystem::path folder = out_dir / name, old = out_dir / ("." + name + "-previous");
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(folder)) std::filesystem::rename(folder, old);
  if (!staging.empty()) {
    std::filesystem::rename(staging, folder);
    using std::filesystem::perms;  // mkdtemp made it 0700; it is an ordinary folder of the report
    std::filesystem::permissions(folder, perms::owner_all | perms::group_read | perms::group_exec | perms::others_read |
                                             perms::others_exec);
  }
  std::filesystem::remove_all(old);
}

}  // namespace

void publish_report(const std::filesystem::path& out_dir, const std::filesystem::path& staging,
                    const std::filesystem::path& bundles_staging, const std::filesystem::path& report_path,
                    const Json& report) {
  replace_folder(out_dir, "cases", staging);
  replace_folder(out_dir, "bundles", bundles_staging);
  reports::write_json_file(report_path, report);
}

}  // namespace pararnn::nightly::detail
