// The campaign's tasks: each TaskSpec of the plan run into a TaskOutput (rows, equivalences, K*
// rows, skips, and the case files it wrote). One function per kind; run_task dispatches.
// Internal to pararnn::nightly.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/oracle_memo.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/nightly/campaign.hpp"
#include "pararnn/nightly/plan.hpp"
#include "cases.hpp"

namespace pararnn::nightly::detail {

// What one task adds to the report; the report concatenates them in the planned task order, so
// report.json does not depend on which worker ran what (--jobs).
struct TaskOutput {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array(), equivalences = nlohmann::ordered_json::array(),
                         kstar_rows = nlohmann::ordered_json::array(), skipped = nlohmann::ordered_json::array();
  std::vector<std::filesystem::path> case_files;  // written under the staging folder (removed if the task is cut)
};

// What every task reads: the options, the plan, the oracles shared by a case's rows, where the
// failing cases go, and the budget's checkpoint (throws BudgetCut).
struct TaskContext {
  const CampaignOptions& options;
  const Plan& plan;
  OracleMemo& oracle_memo;
  std::filesystem::path staging;          // cases/ of this run
  std::filesystem::path bundles_staging;  // bundles/ of this run (external solvers)
  std::function<void()> checkpoint;
};

void run_task(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);

void run_rows(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_packed_vs_per_sequence(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_strided_vs_contiguous(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_recompute_vs_stored(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_gpu_vs_cpu(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
// How a seed's predicted K (contracts/predicted_k.hpp) stands against its measured K*: "hit" (K* −
// kPredictedKMargin to K* + 1, or both beyond k_limit), "over" (more than K* + 1), "under" (below K*
// by more than the margin: the unsafe miss), "none" (no prediction). docs/kstar.md's validation
// table counts them.
std::string prediction_outcome(std::int64_t kstar, std::optional<std::int64_t> predicted, std::int64_t k_limit);
void run_kstar(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_external_rows(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);
void run_external_packed(const TaskSpec& spec, const TaskContext& context, TaskOutput& out);

// A row's identity (id, variant, cell, mix, dtype, backend, T, batch, d_in, d_h, class, seed, case_seed).
nlohmann::ordered_json row_identity(const CaseKey& key, const std::string& id, const std::string& backend,
                                    const BuiltCase& built);

// An equivalence entry's identity (id, name, variant, dtype, backend, T, class, seed).
nlohmann::ordered_json equivalence_header(const TaskSpec& spec, const std::string& name);

// A comparison holding NaN or infinities is Inconclusive; a bitwise equivalence whose two sides
// are the same bytes with no NaN (`identical_bytes`) is Agree (its infinities repeat bit for bit).
void record_comparison(nlohmann::ordered_json& e, const ComparisonResult& c, const Tolerance& tau,
                       bool identical_bytes = false);

// An equivalence that threw: Error, with the message.
void record_error(nlohmann::ordered_json& e, const std::exception& ex);

// A row with no verdict: outcome Error, `error_type` (what failed) and the message.
void record_row_error(nlohmann::ordered_json& row, const std::string& error_type, const std::string& message);

}  // namespace pararnn::nightly::detail
