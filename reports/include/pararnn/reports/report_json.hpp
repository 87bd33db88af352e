// The nightly report as data: report.json is the system of record, and everything else (the
// Markdown, the plots, the diff) is rendered from a parsed report.json, so last year's runs
// re-render and any two runs diff.
//
// Layout (schema_version 1; docs/reports.md lists every key):
//   { "format": "pararnn-nightly-report", "schema_version": 1,
//     "context": { pararnn_version, git_sha, compiler, cuda_runtime, cuda_driver, gpu, env_line,
//                  argv, date_utc, seeds, host_cpus, peers },
//     "plan": { variants, dtypes, backends, times, classes, seeds, batch, d_in, d_h, ... },
//     "skipped": [ { what, reason } ],
//     "rows": [ { id, variant, cell, mix, dtype, backend, T, batch, class, seed, gradients,
//                 outcome, agreement (AgreementReport::to_json(), unchanged) | error,
//                 case_file, repro, bug_bundle, error_along_t } ],
//     "equivalences": [ { id, name, variant, dtype, backend, T, class, seed, verdict, max_abs,
//                         atol, rtol, mismatches, count, worst_index, tolerance_source } ],
//     "kstar": [ { variant, cell, mix, dtype, class, T, kstar_by_seed, max_kstar, shipped_k,
//                  sequential_max_abs, tau } ],
//     "summary": { rows, by_outcome, equivalences, gradients, failures, worst, duration_s,
//                  budget_exhausted, rows_not_run },
//     "performance": (optional) the bench summary of `report nightly --bench-summary`
//                    (bench/results/h200-summary.json: { schema_version, gpu, date, targets:
//                    { "P1": { value, unit, target, met, peer, note, ... } }, peer_versions }) }
//
// Guarantees: `load_report` returns only a document that is ours and of this schema version,
// with every key the renderers and the diff read present and of the right type; anything else is
// a ContractViolation whose argument is "<file>: key '<key>'" (or the parse position for a
// truncated or non-JSON file), whose rule says what was expected and whose value says what was
// found. Example:
//   const nlohmann::ordered_json report = load_report("nightly/report.json");
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace pararnn::reports {

inline constexpr std::string_view kReportFormat = "pararnn-nightly-report";
inline constexpr int kNightlySchemaVersion = 1;

// Row outcomes: the AgreementReport's verdict, or "Error" when the row threw (the message is
// kept in the row); only "Agree" counts as a pass.
inline constexpr std::string_view kOutcomeError = "Error";

// What the caller (the CLI) knows of its build and machine; the campaign adds argv, date, seeds.
struct BuildContext {
  std::string pararnn_version = "unknown";
  std::string git_sha = "unknown";
  std::string compiler = "unknown";
  std::string cuda_runtime = "none";  // "13.0", or "none" when built without CUDA
  std::string cuda_driver = "none";   // "13.0", or "none" when no driver answers
  std::string gpu = "cpu";            // "NVIDIA H200 (sm_90)", or "cpu" when no device
  std::string env_line;               // `pararnn env`
};

// The report's context: the build, the command, the date, the seeds, and the fault catalog's
// summary (fault_catalog_summary).
nlohmann::ordered_json context_block(const BuildContext& build, const std::vector<std::string>& argv,
                                     const std::vector<std::uint64_t>& seeds);

// How strong the suites of this build are, as docs/faults/catalog.json of its source tree records
// (compiled in at configure time): {"source", "last_run", "faults", "run", "caught", "cpu":
// {"faults", "run", "caught"}, "gpu": {…}}, a fault "run" when its suites could run (a GPU fault
// without a device is not), "caught" when one of them failed with it planted; null when the
// source tree had no catalog.
nlohmann::ordered_json fault_catalog_summary();

// The current time as "YYYY-MM-DDTHH:MM:SSZ".
std::string utc_now();

// Checks a parsed document against the schema (see above); `file` names it in messages.
void validate_report(const nlohmann::ordered_json& report, std::string_view file);

// A bench summary (bench/summarize.py's output): an object with schema_version, gpu and
// targets, each target with value (number or null), target, unit and met (a boolean, false
// whenever value is null). Refusals as for the report.
void validate_bench_summary(const nlohmann::ordered_json& summary, std::string_view file);
nlohmann::ordered_json load_bench_summary(const std::filesystem::path& path);

// Reads, parses and validates report.json.
nlohmann::ordered_json load_report(const std::filesystem::path& path);

// Writes `json` (2-space indent, trailing newline) through write_file_atomically.
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);

// A number of the report: NaN and infinities are stored as null by JSON; read back as NaN.
double number_or_nan(const nlohmann::ordered_json& value);

}  // namespace pararnn::reports
