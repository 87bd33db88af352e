// The nightly campaign: every cell variant x dtype x backend x T ladder x conditioning class x
// seed, each row judged by verify_agreement (solver vs the certified oracle, the same-dtype
// sequential floor, the quality ratio, gradients where the cell has an adjoint), beside K*(T)
// (measure_kstar) and the equivalences packed = per-sequence and GPU = CPU (compare() at the
// contract's τ), strided = contiguous and recompute = stored (bitwise, CONTRACT §5). With
// `external`, each row is solved by an external command instead (external_solver.hpp,
// docs/external-solvers.md) and judged by compare_trajectory; a failing row keeps a bundle under
// <out>/bundles/. The result is one report.json (pararnn/reports/report_json.hpp), the
// system of record.
//
// The campaign is four parts (docs/architecture.md): the plan, a pure function of the options
// (plan.hpp: make_plan); the tasks it lists (tasks.hpp: one function per kind); a generic
// budgeted pool that runs them (pool.hpp); and the assembly of report.json from their outputs
// in the planned order (assemble.hpp).
//
// Guarantees:
// - A row passes only when its AgreementReport says Agree. A row that throws is kept with
//   outcome "Error" and its message; a gradient check the cell does not have is recorded as
//   "not_applicable", never as a pass; a backend without a device, a class a cell has no
//   parameter for, and an explicit path the solver refuses (UnsupportedPath) are listed under
//   "skipped" with the reason.
// - The bitwise equivalences (strided ≡ contiguous, recompute ≡ stored) pass on the same bytes
//   with no NaN, infinities included; otherwise a non-finite value makes them Inconclusive.
// - Every row whose outcome is not Agree keeps its case under <out>/cases/<row id>.safetensors
//   (write_case) with a one-line repro (`pararnn verify cases/... ...`, run from <out>) and the
//   `pararnn bug-bundle` command, plus the error of solver and sequential loop along t.
// - <out>/cases/ holds this run's cases only: they are staged and replace the folder when the
//   report is written; a run that fails leaves the previous report and cases as they were.
// - report.json is written atomically (write_file_atomically), once, at the end; with a time
//   budget the rows not started are counted (summary.rows_not_run), never reported as passing.
// Example:
//   CampaignResult r = run_campaign({.out_dir = "nightly", .quick = true});
//   // nightly/report.json; r.exit_code: 0 all Agree, 1 a Disagree or Error, 2 an Inconclusive or a cut plan
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/nightly/external_solver.hpp"
#include "pararnn/nightly/pool.hpp"
#include "pararnn/reports/report_json.hpp"

namespace pararnn::nightly {

// Tasks done / total, elapsed, ETA, the task started or finished (pool.hpp).
using CampaignProgress = PoolProgress;

struct CampaignOptions {
  std::filesystem::path out_dir;                 // created if missing; report.json, cases/
  bool quick = false;                            // <= 60 s on 2 cores: every variant in f32
  bool kstar_only = false;                       // only the K* tasks (with their predicted K): no
                                                 // row judged; a failed measurement, or none, exits 2
  std::vector<std::string> backends = {"cpu"};   // cpu, cuda
  std::vector<std::string> variants;             // campaign_variants() names; empty: all
  std::vector<std::string> dtypes;               // empty: f32 (quick) or f64, f32, f16, bf16
  std::vector<std::int64_t> times;               // empty: the ladder of the backends
  std::vector<std::string> classes;              // init, hard, saturating, h0, packed; empty: the plan's
  std::optional<std::int64_t> seeds;             // per configuration; default 1 (quick) or 2
  std::optional<std::int64_t> max_iters;         // a fixed K for every row (the seed's fixed-K
                                                 // behaviour); default: the K table + adaptive
  std::optional<double> time_budget_s;           // no task starts after it; one running stops
                                                 // at its next phase or inside its oracle (not run, exit 2)
  std::optional<std::int64_t> jobs;              // tasks run at once (default: the CPUs); each
                                                 // task's OpenMP loops get CPUs / jobs threads;
                                                 // the report does not depend on it, its timings do
  std::optional<ExternalSolver> external;        // rows solved by this command instead of ours
  reports::BuildContext build;                   // from the caller (the CLI's env)
  bool gpu_available = false;                    // a CUDA device answers (the CLI checks)
  std::vector<std::string> argv;                 // recorded in the context block
  std::optional<nlohmann::ordered_json> performance;  // a validated bench summary: the report's
                                                 // "performance", its peer_versions the context's peers
  std::function<void(const CampaignProgress&)> progress;  // once per task started, once per task
                                                         // finished, and at the end
};

struct CampaignResult {
  nlohmann::ordered_json report;
  std::filesystem::path report_path;
  int exit_code = 0;  // 0: every row and equivalence Agree, whole plan run; 1: any Disagree or Error;
                     // 2: else an Inconclusive, or the time budget left tasks not run
};

// The names the campaign knows (`--cells`): gru, gru-head, lstm, nlru, slstm, slstm-head,
// slstm-dense, cfc, cfc-diag-h, titans, hopfield, m2rnn, rwkv7.
std::vector<std::string> campaign_variants();

CampaignResult run_campaign(const CampaignOptions& options);

}  // namespace pararnn::nightly
