// The assembly of report.json from the tasks' outputs, concatenated in the run order whatever
// the number of workers, and its publication: cases/ replaced by this run's staged cases, then
// report.json written atomically. Internal to pararnn::nightly.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <vector>

#include "pararnn/contracts/oracle_memo.hpp"
#include "pararnn/nightly/plan.hpp"
#include "pararnn/nightly/pool.hpp"
#include "tasks.hpp"

namespace pararnn::nightly::detail {

struct RunRecord {
  const CampaignOptions& options;
  const CampaignPlan& plan;
  const std::vector<std::size_t>& order;  // the run order of plan.tasks
  std::vector<TaskOutput>& outputs;       // by task index; moved from
  const PoolResult& pool;
  const OracleMemo& oracle_memo;
  double elapsed_s = 0.0;
};

// The whole document (format, schema_version, context, plan, skipped, rows, equivalences,
// kstar, summary, performance), validated as render would read it.
nlohmann::ordered_json assemble_report(const RunRecord& run, const std::filesystem::path& report_path);

// 0: every row and equivalence Agree and the whole plan ran; 1: any Disagree or Error; 2: else
// an Inconclusive, or the time budget left tasks not run.
int campaign_exit_code(const nlohmann::ordered_json& report);

// Replaces <out>/cases by `staging` and <out>/bundles by `bundles_staging` (removed when empty:
// no external solver) and writes report.json (atomically).
void publish_report(const std::filesystem::path& out_dir, const std::filesystem::path& staging,
                    const std::filesystem::path& bundles_staging, const std::filesystem::path& report_path,
                    const nlohmann::ordered_json& report);

}  // namespace pararnn::nightly::detail
