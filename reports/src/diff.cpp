#include "pararnn/reports/diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reports/render.hpp"
#include "pararnn/reports/report_json.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

std::string str(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::map<std::string, const Json*> by_id(const Json& list) {
  std::map<std::string, const Json*> out;
  for (const auto& e : list) out[str(e["id"])] = &e;
  return out;
}

double agreement_number(const Json& row, const char* key) {
  return row.contains("agreement") ? number_or_nan(row["agreement"][key]) : NAN;
}

std::string group_of(const Json& row) {
  return fmt::format("{}.{}.{}.T{}.{}", str(row["variant"]), str(row["dtype"]), str(row["backend"]),
                     row["T"].get<std::int64_t>(), str(row["class"]));
}

struct TimeGroup {
  std::vector<double> newton_ms;
  double median() const {
    std::vector<double> v = newton_ms;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? NAN : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
  }
  double spread() const {  // max/min − 1 over the repeated runs
    if (newton_ms.size() < 2) return 0.0;
    const auto [lo, hi] = std::minmax_element(newton_ms.begin(), newton_ms.end());
    return *lo > 0.0 ? *hi / *lo - 1.0 : 0.0;
  }
};

// Every Newton time of a group: each row's judged solve and its repeats (newton_ms_repeats).
std::map<std::string, TimeGroup> time_groups(const Json& report) {
  std::map<std::string, TimeGroup> out;
  for (const auto& row : report["rows"]) {
    if (!row.contains("agreement") || !row["agreement"]["timings_ms"].contains("newton")) continue;
    const double t = number_or_nan(row["agreement"]["timings_ms"]["newton"]);
    if (std::isfinite(t)) out[group_of(row)].newton_ms.push_back(t);
    if (row.contains("newton_ms_repeats"))
      for (const auto& r : row["newton_ms_repeats"])
        if (std::isfinite(number_or_nan(r))) out[group_of(row)].newton_ms.push_back(number_or_nan(r));
  }
  return out;
}

std::string kstar_key(const Json& k) {
  return fmt::format("{}.{}.{}.T{}", str(k["variant"]), str(k["dtype"]), str(k["class"]), k["T"].get<std::int64_t>());
}

std::string context_line(const Json& report) {
  const Json& c = report["context"];
  return fmt::format("pararnn {} (git {}), {}, GPU {}, {}", str(c["pararnn_version"]), str(c["git_sha"]),
                     str(c["compiler"]), str(c["gpu"]), str(c["date_utc"]));
}

}  // namespace

DiffResult diff_reports(const Json& old_report, const Json& new_report, const DiffOptions& options) {
  if (!(options.error_factor > 1.0))
    throw ContractViolation("--error-factor", "must be > 1", fmt::format("{}", options.error_factor));
  if (!(options.time_noise >= 0.0))
    throw ContractViolation("--time-noise", "must be >= 0", fmt::format("{}", options.time_noise));
  if (!(options.time_floor_ms >= 0.0))
    throw ContractViolation("--time-floor-ms", "must be >= 0", fmt::format("{}", options.time_floor_ms));
  DiffResult d;
  const auto old_rows = by_id(old_report["rows"]), new_rows = by_id(new_report["rows"]);
  for (const auto& [id, row] : new_rows) {
    const std::string outcome = str((*row)["outcome"]);
    const auto it = old_rows.find(id);
    if (it == old_rows.end()) {
      d.only_in_new.push_back(id);
      if (outcome != "Agree")
        d.regressions.push_back({"new_failure", id, fmt::format("{} (a row the old run did not have); repro: `{}`", outcome,
                                                                 str(row->value("repro", Json(""))))});
      continue;
    }
    const Json& old = *it->second;
    const std::string old_outcome = str(old["outcome"]);
    if (outcome != "Agree" && old_outcome == "Agree") {
      std::string detail = fmt::format("{} (was Agree)", outcome);
      if (row->contains("agreement"))
        detail += fmt::format(": max error {} (was {}), τ atol {}", sci((*row)["agreement"]["max_abs"]),
                              sci(old["agreement"]["max_abs"]), sci((*row)["agreement"]["atol"]));
      else
        detail += ": " + str(row->value("error", Json("")));
      detail += fmt::format("; repro: `{}`", str(row->value("repro", Json(""))));
      d.regressions.push_back({"new_failure", id, detail});
    } else if (outcome == "Agree" && old_outcome != "Agree") {
      d.fixed.push_back(fmt::format("{}: {} → Agree", id, old_outcome));
    }
    if (outcome == "Agree" && old_outcome == "Agree") {
      const double e_new = agreement_number(*row, "max_abs"), e_old = agreement_number(old, "max_abs");
      const double floor_new = agreement_number(*row, "sequential_max_abs");
      const double bound = tolerance_for({.dtype = parse_dtype(str((*row)["dtype"])), .metric = Metric::quality_ratio,
                                          .cell = str((*row)["cell"]), .backend = str((*row)["backend"])})
                               .atol;
      const double reference = std::max(e_old, bound * floor_new);
      if (!(e_new <= options.error_factor * reference))
        d.regressions.push_back({"error_growth", id,
                                 fmt::format("max error {} (was {}): {:.1f}x, beyond {}x max(old error, {} x new floor {})",
                                             sci(e_new), sci(e_old), e_new / e_old, options.error_factor, bound,
                                             sci(floor_new))});
    }
    if (str(old["gradients"]) == "judged" && str((*row)["gradients"]) != "judged")
      d.regressions.push_back({"gradients_lost", id,
                               fmt::format("gradients were judged, now {}{}", str((*row)["gradients"]),
                                           row->contains("gradients_reason") ? ": " + str((*row)["gradients_reason"]) : "")});
  }
  for (const auto& [id, row] : old_rows)
    if (!new_rows.count(id)) d.only_in_old.push_back(id);

  const auto old_eq = by_id(old_report["equivalences"]), new_eq = by_id(new_report["equivalences"]);
  for (const auto& [id, e] : new_eq) {
    const std::string verdict = str((*e)["verdict"]);
    const auto it = old_eq.find(id);
    if (verdict != "Agree" && (it == old_eq.end() || str((*it->second)["verdict"]) == "Agree"))
      d.regressions.push_back({"new_failure", id, fmt::format("equivalence {}: max abs {} (atol {})", verdict,
                                                              sci((*e)["max_abs"]), sci((*e)["atol"]))});
  }

  std::map<std::string, const Json*> old_k;
  for (const auto& k : old_report["kstar"]) old_k[kstar_key(k)] = &k;
  for (const auto& k : new_report["kstar"]) {
    const auto it = old_k.find(kstar_key(k));
    if (it == old_k.end()) continue;
    const std::int64_t now = k["max_kstar"].get<std::int64_t>(), was = (*it->second)["max_kstar"].get<std::int64_t>();
    if ((now < 0 && was >= 0) || (was >= 0 && now > was))
      d.regressions.push_back({"kstar_increase", kstar_key(k),
                               fmt::format("K* {} (was {}; shipped K {})", now < 0 ? "not reached" : std::to_string(now),
                                           was, k["shipped_k"].get<std::int64_t>())});
  }

  // Timings taken with a different number of campaign tasks at once (--jobs) are not comparable.
  const auto jobs_of = [](const Json& report) {
    const Json& plan = report.contains("plan") ? report["plan"] : Json::object();
    return plan.contains("jobs") && plan["jobs"].is_number_integer() ? plan["jobs"].get<std::int64_t>() : std::int64_t{1};
  };
  const std::int64_t old_jobs = jobs_of(old_report), new_jobs = jobs_of(new_report);
  const bool times_comparable = old_jobs == new_jobs;
  const auto old_t = time_groups(old_report), new_t = times_comparable ? time_groups(new_report) : decltype(old_t){};
  for (const auto& [group, g] : new_t) {
    const auto it = old_t.find(group);
    if (it == old_t.end()) continue;
    // A noise band needs repeated runs in both reports; one sample is not a measurement of it.
    if (it->second.newton_ms.size() < 2 || g.newton_ms.size() < 2) continue;
    const double was = it->second.median(), now = g.median();
    const double band = std::max({options.time_noise, it->second.spread(), g.spread()});
    if (now > (1.0 + band) * was && now - was > options.time_floor_ms)
      d.regressions.push_back({"time_regression", group,
                               fmt::format("median Newton {:.1f} ms (was {:.1f} ms): {:.2f}x, beyond the noise band "
                                           "{:.0f}% and the floor {} ms",
                                           now, was, now / was, 100.0 * band, options.time_floor_ms)});
  }

  // Markdown.
  std::string md = "# pararnn report diff\n\n";
  md += fmt::format("- {}: {}\n- {}: {}\n\n", options.old_name, context_line(old_report), options.new_name,
                    context_line(new_report));
  md += d.regressions.empty() ? "**No regression.**\n\n"
                              : fmt::format("**{} regression(s).**\n\n", d.regressions.size());
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"new_failure", "New failures"}, {"error_growth", "Error growth"}, {"gradients_lost", "Gradients no longer judged"},
      {"kstar_increase", "K* increases"}, {"time_regression", "Time regressions"}};
  for (const auto& [kind, heading] : kinds) {
    std::string lines;
    for (const Regression& r : d.regressions)
      if (r.kind == kind) lines += fmt::format("- `{}`: {}\n", r.key, r.detail);
    if (!lines.empty()) md += "## " + heading + "\n\n" + lines + "\n";
  }
  if (!d.fixed.empty()) {
    md += "## Fixed\n\n";
    for (const auto& f : d.fixed) md += "- " + f + "\n";
    md += "\n";
  }
  md += fmt::format("Compared: {} rows in both runs; {} only in {}, {} only in {}. Thresholds: error factor {}, "
                    "time noise band {:.0f}% (or the spread of the repeated runs), time floor {} ms; times are "
                    "compared for groups with repeated runs in both reports.\n",
                    new_rows.size() - d.only_in_new.size(), d.only_in_old.size(), options.old_name, d.only_in_new.size(),
                    options.new_name, options.error_factor, 100.0 * options.time_noise, options.time_floor_ms);
  if (!times_comparable)
    md += fmt::format("\nTimes not compared: {} ran {} campaign task(s) at once, {} ran {} (--jobs); their timings "
                      "were taken under different loads.\n",
                      options.old_name, old_jobs, options.new_name, new_jobs);
  d.markdown = md;
  return d;
}

}  // namespace pararnn::reports
