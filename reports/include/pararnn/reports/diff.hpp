// `pararnn report diff old.json new.json`: what got worse between two nightly reports, as
// Markdown a bot can post, and whether anything did (exit 1) or not (exit 0).
//
// Rows are matched by their id (variant.dtype.T.class.seed.backend), equivalences by id, K* by
// (variant, dtype, class, T), timings by the group (variant, dtype, backend, T, class). A
// regression is:
// - new failure: a row or equivalence that is not Agree in the new run and was Agree in the old
//   one or absent from it;
// - error growth: a row Agree in both whose max |solver − oracle| grew beyond
//   error_factor × max(old error, quality bound × new sequential floor) (growth within the
//   contract's quality bound of the same-dtype rounding is not a regression);
// - gradients lost: a row whose gradients were judged in the old run and are not in the new one;
// - K* increase: a larger max K* at the same T, or K* no longer reached (-1);
// - time regression: the median Newton time of a group grew beyond (1 + band) × the old median
//   and by more than time_floor_ms, where band = max(time_noise, the spread max/min − 1 of the
//   group's repeated runs in either report: its seeds, and the repeats of class init rows,
//   newton_ms_repeats), the median taken over the same runs; groups with a single run in either
//   report have no measured noise and are not compared.
// Rows only in one report are listed (coverage), not counted as regressions unless failing.
// Example:
//   DiffResult d = diff_reports(load_report("old.json"), load_report("new.json"), {});
//   std::cout << d.markdown; return d.regressions.empty() ? 0 : 1;
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pararnn::reports {

struct DiffOptions {
  double error_factor = 10.0;
  double time_noise = 0.5;     // relative: 0.5 = 50 % slower
  double time_floor_ms = 5.0;  // below this difference a time change is noise
  std::string old_name = "old", new_name = "new";
};

struct Regression {
  std::string kind;  // new_failure, error_growth, gradients_lost, kstar_increase, time_regression
  std::string key;   // the row id, equivalence id, K* key or timing group
  std::string detail;
};

struct DiffResult {
  std::vector<Regression> regressions;
  std::vector<std::string> fixed;        // failing before, Agree now
  std::vector<std::string> only_in_old, only_in_new;
  std::string markdown;
};

DiffResult diff_reports(const nlohmann::ordered_json& old_report, const nlohmann::ordered_json& new_report,
                        const DiffOptions& options = {});

}  // namespace pararnn::reports
