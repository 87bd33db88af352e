// The bundle of an external solver's failing row: what a maintainer of that library needs to
// reproduce and see the failure without asking anything back. Internal to pararnn::nightly.
//
// <row id>/ holds: case.safetensors (the case the solver was given), answer.safetensors (what it
// wrote, when it wrote a regular file), compare.json and compare.md (the judge's report) or
// error.txt (why there is no verdict), command.txt (the exact command line, its environment
// variable, timeout, exit status and wall time), stderr.txt (the solver's stderr tail), env.txt
// (`pararnn env`), error_along_t.json (when judged) and README.md (the verdict, the figures, the
// commands to rerun the solver and the judge, each with the exit code it must give).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/nightly/external_solver.hpp"

namespace pararnn::nightly::detail {

struct ExternalBundleInputs {
  std::string id;  // the row id: the bundle's folder
  const ExternalSolver& solver;
  const SolverRun& run;
  std::filesystem::path case_path, answer_path;  // in the row's scratch folder
  nlohmann::ordered_json row;                    // the row as judged (outcome, error, agreement)
  bool gradients = false;
  std::uint64_t seed = 0;
  std::int64_t certify_budget = 0;
  std::string env_line;
};

// Writes <out> (a .tar.gz; its folder is the row id), through archive_bundle.
void make_external_bundle(const ExternalBundleInputs& in, const std::optional<AgreementReport>& report,
                          const std::filesystem::path& out);

}  // namespace pararnn::nightly::detail
