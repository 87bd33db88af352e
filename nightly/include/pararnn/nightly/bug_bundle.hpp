// `pararnn bug-bundle CASE`: one .tar.gz that lets a maintainer reproduce and see a failure
// without asking anything back: the case, the env line, the verify report (and the compare
// report of a given trajectory) in JSON and Markdown, the error along t and residual figures,
// the oracle's and the solver's trajectories, a minimised case that keeps the verdict, and a
// README with the exact commands (each with the exit code it must give).
//
// Guarantees:
// - The minimised case keeps the verdict of the original: each step (fewer batch rows: the row
//   of the worst element; fewer channels for per-channel cells: the smallest block around the
//   worst channel; a time window ending just after the first failing step, first from t = 0,
//   then shorter ones that start from the oracle's state as h0) is kept only when
//   verify_agreement on the reduced case gives the same verdict; every attempt, kept or not, is
//   listed in the README and in minimised.json.
// - The archive is made by the system tar (GNU tar, `--sort=name`, numeric owner 0), from a
//   scratch folder holding only the files written here (regular files, no links); its listing is
//   checked to hold only <folder>/... entries before it is copied into place atomically. Over
//   `max_bytes` (the files, before compression) nothing is written and the error names the
//   sizes and the largest files.
// Example:
//   BundleResult r = make_bug_bundle({.case_path = "case.safetensors", .out = "bug.tar.gz"});
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/case_file.hpp"

namespace pararnn::nightly {

struct BundleOptions {
  std::filesystem::path case_path;
  std::optional<std::filesystem::path> trajectory;  // theirs: judged by compare
  NewtonConfig config{};                            // the solver's configuration under test
  std::string backend = "auto";                     // ... as the CLI's --backend and --max-iters
  std::string max_iters = "none";                   //     texts, for the README's commands
  std::uint64_t seed = 0;
  std::optional<std::int64_t> certify_budget;
  bool gradients = false;
  bool minimise = true;
  bool plots = true;
  std::filesystem::path out;                        // <name>.tar.gz
  std::int64_t max_bytes = 64 * 1024 * 1024;
  std::string env_line;                             // `pararnn env` of the maker
  std::string command_line;                         // how the bundle was made (README)
  std::function<void(const std::string&)> progress;
};

struct BundleResult {
  std::filesystem::path out;
  std::string folder;              // the archive's top folder
  Verdict verdict = Verdict::inconclusive;
  std::optional<Verdict> compare_verdict;
  Verdict minimised_verdict = Verdict::inconclusive;
  std::vector<std::string> minimisation;  // one line per attempt
  std::vector<std::string> files;         // inside the folder
  std::int64_t bytes = 0;                 // of the archive
};

BundleResult make_bug_bundle(const BundleOptions& options);

// The reductions the minimiser tries (exposed for tests). Each returns a case every command
// accepts (checked_case) or throws ContractViolation.
Case keep_batch_rows(const Case& problem, std::int64_t first, std::int64_t stop);
Case keep_channels(const Case& problem, std::int64_t first, std::int64_t stop);  // per-channel cells
// [start, stop) of the time axis; `carried` (B, state...) becomes h0 when start > 0.
Case time_window(const Case& problem, std::int64_t start, std::int64_t stop, const std::optional<Tensor>& carried);

struct MinimisedCase {
  Case problem;
  AgreementReport report;
  std::vector<std::string> attempts;
};
// Verifies `problem` with `options` (h0, cu_seqlens and grad.H taken from the case) and
// minimises it while the verdict stays that of `original`.
MinimisedCase minimise_case(const Case& problem, const AgreementReport& original, const VerifyOptions& options,
                            const std::function<void(const std::string&)>& progress = {});

// verify_agreement on a case (its h0, cu_seqlens, grad.H, cell_version), as `pararnn verify`.
AgreementReport verify_case(const Case& problem, const VerifyOptions& options);

}  // namespace pararnn::nightly
