#include "pararnn/reports/render.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "pararnn/core/case_file.hpp"
#include "pararnn/reports/report_json.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

std::string str(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }
std::int64_t integer(const Json& v) { return v.is_number() ? v.get<std::int64_t>() : 0; }

std::string row_label(const Json& row) {
  return fmt::format("{} {} {} T={} {} s{}", str(row["variant"]), str(row["dtype"]), str(row["backend"]),
                     integer(row["T"]), str(row["class"]), integer(row["seed"]));
}

bool has_agreement(const Json& row) { return row.contains("agreement") && row["agreement"].is_object(); }
double metric(const Json& row, const char* key) {
  return has_agreement(row) && row["agreement"].contains(key) ? number_or_nan(row["agreement"][key]) : NAN;
}
double ratio_to_tau(const Json& row) { return metric(row, "max_abs") / metric(row, "atol"); }

// max that lets NaN win (a NaN error is the worst error).
double worse(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return NAN;
  return std::max(a, b);
}

std::string md_escape(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::vector<std::string> strings(const Json& array) {
  std::vector<std::string> out;
  if (array.is_array())
    for (const auto& v : array) out.push_back(str(v));
  return out;
}

std::vector<std::int64_t> ints(const Json& array) {
  std::vector<std::int64_t> out;
  if (array.is_array())
    for (const auto& v : array) out.push_back(integer(v));
  return out;
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string ms(double v) { return std::isnan(v) ? "-" : fmt::format("{:.1f}", v); }

// Rows of (variant, dtype) in plan order, then any variant or dtype the plan does not list.
std::vector<std::string> ordered(const Json& plan_list, const Json& rows, const char* key) {
  std::vector<std::string> out = strings(plan_list);
  for (const auto& row : rows) {
    const std::string v = str(row[key]);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<std::int64_t> times_of(const Json& report) {
  std::set<std::int64_t> t;
  for (const auto& row : report["rows"]) t.insert(integer(row["T"]));
  for (const auto& k : report["kstar"]) t.insert(integer(k["T"]));
  return {t.begin(), t.end()};
}

std::vector<const Json*> failing_rows(const Json& report) {
  std::vector<const Json*> out;
  for (const auto& row : report["rows"])
    if (str(row["outcome"]) != "Agree") out.push_back(&row);
  return out;
}

std::string figure_links(const std::string& name, const std::string& alt) {
  return fmt::format("![{0}](plots/{1}.png) ([SVG](plots/{1}.svg))\n", alt, name);
}

std::string safe_name(std::string text) {
  for (char& c : text)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) c = '_';
  return text;
}

}  // namespace

std::string sci(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.2e}", value);
}
std::string sci(const Json& value) { return sci(number_or_nan(value)); }

namespace {

// The row's λ̂ (AgreementReport::lyapunov, docs/diagnose.md) as a line of its failure, or why it
// has none; nothing for a report written before the field existed.
std::string why_hard_line(const Json& agreement) {
  if (!agreement.contains("lyapunov") || !agreement["lyapunov"].is_object()) return "";
  const Json& l = agreement["lyapunov"];
  if (!l.contains("max")) return fmt::format("- why hard: λ̂ {}\n", md_escape(str(l.value("reason", Json("not given")))));
  const double units = number_or_nan(l.value("units", Json()));
  const double positive = std::round(number_or_nan(l.value("fraction_positive", Json())) * units);
  return fmt::format("- why hard: λ̂ (the largest Lyapunov exponent along the oracle's trajectory) max {}, median {}, "
                     "positive in {} of {} unit(s); the largest growth of an error over {} steps: x{}\n",
                     sci(l["max"]), sci(l["median"]), std::isfinite(positive) ? fmt::format("{:.0f}", positive) : "NaN",
                     integer(l.value("units", Json(0))), integer(l.value("window", Json(0))),
                     sci(std::exp(number_or_nan(l.value("stretch", Json())))));
}

}  // namespace

std::string worst_index_text(const Json& worst_index) {
  if (!worst_index.is_object() || worst_index.empty()) return "-";
  std::string out;
  for (const auto& [k, v] : worst_index.items()) out += (out.empty() ? "" : " ") + k + "=" + str(v);
  return out;
}

Figure failure_figure(const std::string& name, const std::string& title, const Json& profile) {
  Figure f{.name = name, .title = title, .height = 380};
  Panel along{.title = "|solver - oracle| and |sequential - oracle| along t (max over batch and state)",
              .xlabel = "t", .ylabel = "max abs error", .logy = true};
  const std::vector<std::int64_t> t = ints(profile.value("t", Json::array()));
  auto series = [&](const char* key, const std::string& label, bool dashed, int color) {
    Series s{.title = label, .dashed = dashed, .color = color};
    const Json values = profile.value(key, Json::array());
    for (std::size_t i = 0; i < t.size() && i < values.size(); ++i)
      s.points.emplace_back(static_cast<double>(t[i]), number_or_nan(values[i]));
    return s;
  };
  along.series.push_back(series("solver", "solver", false, 1));
  along.series.push_back(series("sequential", "sequential loop (same dtype)", true, 0));
  if (!t.empty() && profile.contains("atol"))
    along.series.push_back({.title = "tau (atol)",
                            .points = {{static_cast<double>(t.front()), number_or_nan(profile["atol"])},
                                       {static_cast<double>(t.back()), number_or_nan(profile["atol"])}},
                            .dashed = true, .color = -1});
  along.key_inside = true;
  Panel residual{.title = "Newton residual max|F| at each evaluation, then after the last update",
                 .xlabel = "residual evaluation", .ylabel = "max |F|", .logy = true, .key_inside = true,
                 .integer_x = true};
  Series r{.title = "max|F| during the solve", .color = 2};
  const Json history = profile.value("residual_history", Json::array());
  for (std::size_t i = 0; i < history.size(); ++i) r.points.emplace_back(static_cast<double>(i + 1), number_or_nan(history[i]));
  residual.series.push_back(r);
  if (profile.contains("max_residual"))
    residual.series.push_back({.title = "final max|F| (the residual gate's)",
                               .points = {{static_cast<double>(history.size() + 1), number_or_nan(profile["max_residual"])}},
                               .points_only = true, .color = 1});
  f.panels = {along, residual};
  return f;
}

std::vector<Figure> report_figures(const Json& report) {
  std::vector<Figure> figures;
  const Json& rows = report["rows"];
  const Json& plan = report["plan"];
  const std::vector<std::string> variants = ordered(plan["variants"], rows, "variant");
  const std::vector<std::string> dtypes = ordered(plan["dtypes"], rows, "dtype");
  const std::vector<std::string> backends = ordered(plan["backends"], rows, "backend");
  const std::vector<std::int64_t> times = times_of(report);
  auto color_of = [&](const std::string& variant) {
    return static_cast<int>(std::find(variants.begin(), variants.end(), variant) - variants.begin());
  };
  // K*(T) per dtype.
  for (const std::string& dtype : dtypes) {
    Panel p{.title = fmt::format("K*(T) in {}: the smallest fixed K that agrees with the oracle (max over seeds)", dtype),
            .xlabel = "T", .ylabel = "K*", .logx = true};
    std::vector<std::pair<std::string, std::string>> keys;
    for (const auto& k : report["kstar"])
      if (str(k["dtype"]) == dtype) {
        const std::pair key{str(k["variant"]), str(k["class"])};
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    for (const auto& [variant, cls] : keys) {
      Series s{.title = variant + " " + cls, .dashed = cls != "init", .color = color_of(variant)};
      // The predicted K (contracts/predicted_k.hpp), max over seeds, as markers beside the line.
      Series predicted{.title = variant + " " + cls + " predicted", .points_only = true, .color = color_of(variant)};
      for (const auto& k : report["kstar"])
        if (str(k["dtype"]) == dtype && str(k["variant"]) == variant && str(k["class"]) == cls) {
          const double t = static_cast<double>(integer(k["T"]));
          if (integer(k["max_kstar"]) >= 0) s.points.emplace_back(t, static_cast<double>(integer(k["max_kstar"])));
          if (k.contains("max_predicted_k") && k["max_predicted_k"].is_number_integer())
            predicted.points.emplace_back(t, static_cast<double>(integer(k["max_predicted_k"])));
        }
      p.series.push_back(s);
      if (!predicted.points.empty()) p.series.push_back(predicted);
    }
    if (!keys.empty()) figures.push_back({.name = "kstar-" + dtype, .title = p.title, .panels = {p}});
  }
  // λ̂ vs T per dtype (docs/diagnose.md): the largest Lyapunov exponent along the oracle's trajectory,
  // max over seeds and backends, class init solid and hard dashed; rows without one are left out.
  for (const std::string& dtype : dtypes) {
    Panel p{.title = fmt::format("lambda-hat vs T in {}: the largest Lyapunov exponent along the oracle's trajectory "
                                 "(init solid, hard dashed; above 0: chaotic)", dtype),
            .xlabel = "T", .ylabel = "lambda-hat (max over seeds)", .logx = true};
    for (const std::string& variant : variants)
      for (const char* cls : {"init", "hard"}) {
        Series s{.title = fmt::format("{} {}", variant, cls), .dashed = std::string(cls) != "init", .color = color_of(variant)};
        for (std::int64_t t : times) {
          double worst = NAN;
          for (const auto& row : rows)
            if (str(row["dtype"]) == dtype && str(row["variant"]) == variant && str(row["class"]) == cls &&
                integer(row["T"]) == t && row.contains("agreement") && row["agreement"].contains("lyapunov") &&
                row["agreement"]["lyapunov"].contains("max")) {
              const double l = number_or_nan(row["agreement"]["lyapunov"]["max"]);
              if (std::isfinite(l)) worst = std::isnan(worst) ? l : std::max(worst, l);
            }
          if (!std::isnan(worst)) s.points.emplace_back(static_cast<double>(t), worst);
        }
        if (s.points.size() >= 2) p.series.push_back(s);
      }
    if (!p.series.empty()) figures.push_back({.name = "lambda-" + dtype, .title = p.title, .panels = {p}});
  }
  // Error vs T per dtype and class (init, hard: the classes a ladder runs at every T), with the
  // sequential floor and τ.
  for (const std::string& dtype : dtypes)
    for (const char* cls : {"init", "hard"}) {
      Panel p{.title = fmt::format("max |solver - oracle| vs T in {}, class {} (solid), same-dtype sequential floor "
                                   "(dashed)", dtype, cls),
              .xlabel = "T", .ylabel = "max abs error (over seeds, backends)", .logx = true, .logy = true};
      double atol = NAN;
      for (const std::string& variant : variants) {
        Series solver{.title = variant, .color = color_of(variant)};
        Series floor{.title = variant + " floor", .dashed = true, .color = color_of(variant)};
        for (std::int64_t t : times) {
          double e = -1.0, f = -1.0;
          bool any = false;
          for (const auto& row : rows)
            if (str(row["dtype"]) == dtype && str(row["variant"]) == variant && str(row["class"]) == cls &&
                integer(row["T"]) == t && has_agreement(row)) {
              e = any ? worse(e, metric(row, "max_abs")) : metric(row, "max_abs");
              f = any ? worse(f, metric(row, "sequential_max_abs")) : metric(row, "sequential_max_abs");
              atol = std::isnan(atol) ? metric(row, "atol") : std::max(atol, metric(row, "atol"));
              any = true;
            }
          if (any) {
            solver.points.emplace_back(static_cast<double>(t), e);
            floor.points.emplace_back(static_cast<double>(t), f);
          }
        }
        if (!solver.points.empty()) {
          p.series.push_back(solver);
          p.series.push_back(floor);
        }
      }
      std::set<double> distinct_t;
      for (const Series& sr : p.series)
        for (const auto& pt : sr.points) distinct_t.insert(pt.first);
      if (distinct_t.size() < 2) continue;  // one T is no line: its numbers are in the table
      if (!std::isnan(atol) && !times.empty())
        p.series.push_back({.title = "tau (atol)",
                            .points = {{static_cast<double>(times.front()), atol}, {static_cast<double>(times.back()), atol}},
                            .dashed = true, .color = -1});
      figures.push_back({.name = fmt::format("error-{}-{}", dtype, cls), .title = p.title, .panels = {p}, .height = 640});
    }
  // Timings vs T per backend and dtype (rows of class init; median over seeds and repeats).
  for (const std::string& backend : backends)
    for (const std::string& dtype : dtypes) {
      Panel p{.title = fmt::format("time vs T on {} in {}: Newton (solid) and the sequential loop (dashed), class init",
                                   backend, dtype),
              .xlabel = "T", .ylabel = "ms (median over seeds and repeats)", .logx = true, .logy = true};
      for (const std::string& variant : variants) {
        Series newton{.title = variant + " newton", .color = color_of(variant)};
        Series seq{.title = variant + " sequential", .dashed = true, .color = color_of(variant)};
        for (std::int64_t t : times) {
          std::vector<double> n, s;
          for (const auto& row : rows)
            if (str(row["backend"]) == backend && str(row["dtype"]) == dtype && str(row["variant"]) == variant &&
                integer(row["T"]) == t && str(row["class"]) == "init" && has_agreement(row)) {
              const Json& tm = row["agreement"]["timings_ms"];
              n.push_back(tm.contains("newton") ? number_or_nan(tm["newton"]) : NAN);
              for (const auto& r : row.value("newton_ms_repeats", Json::array())) n.push_back(number_or_nan(r));
              s.push_back(tm.contains("sequential") ? number_or_nan(tm["sequential"]) : NAN);
            }
          if (!n.empty()) {
            newton.points.emplace_back(static_cast<double>(t), median(n));
            seq.points.emplace_back(static_cast<double>(t), median(s));
          }
        }
        if (!newton.points.empty()) {
          p.series.push_back(newton);
          p.series.push_back(seq);
        }
      }
      if (!p.series.empty())
        figures.push_back({.name = fmt::format("timings-{}-{}", backend, dtype), .title = p.title, .panels = {p},
                           .height = 640});
    }
  // Failures: where each leaves the true trajectory.
  std::size_t shown = 0;
  for (const Json* row : failing_rows(report)) {
    if (shown == kMaxFailureFigures) break;
    if (!row->contains("error_along_t") || !(*row)["error_along_t"].contains("t")) continue;
    figures.push_back(failure_figure("failure-" + safe_name(str((*row)["id"])),
                                     fmt::format("{}: {}", row_label(*row), str((*row)["outcome"])),
                                     (*row)["error_along_t"]));
    ++shown;
  }
  return figures;
}

std::string render_markdown(const Json& report, bool plots, const std::vector<UndrawnFigure>& undrawn) {
  const Json& ctx = report["context"];
  const Json& plan = report["plan"];
  const Json& rows = report["rows"];
  const Json& summary = report["summary"];
  const std::vector<std::string> variants = ordered(plan["variants"], rows, "variant");
  const std::vector<std::string> dtypes = ordered(plan["dtypes"], rows, "dtype");
  const std::vector<std::string> backends = ordered(plan["backends"], rows, "backend");
  const std::vector<std::int64_t> times = times_of(report);
  const std::vector<const Json*> failures = failing_rows(report);
  std::string md;
  md += "# pararnn nightly report\n\n";
  md += fmt::format("pararnn {} (git {}) · {} · CUDA runtime {}, driver {} · GPU {} · {}\n\n", str(ctx["pararnn_version"]),
                    str(ctx["git_sha"]), str(ctx["compiler"]), str(ctx["cuda_runtime"]), str(ctx["cuda_driver"]),
                    str(ctx["gpu"]), str(ctx["date_utc"]));
  std::string argv;
  for (const auto& a : ctx["argv"]) argv += fmt::format("{}{}", argv.empty() ? "" : " ", str(a));
  md += fmt::format("Command: `{}`  \n", argv);
  if (const Json catalog = ctx.value("fault_catalog", Json()); catalog.is_object()) {
    // "N caught, M stale": a detection older than a change to its fault point's files is not
    // counted as caught (issue 58). Reports written before that have no "stale" key.
    const auto caught = [&](const Json& s) {
      const std::int64_t stale = s.contains("stale") ? integer(s["stale"]) : 0;
      return stale > 0 ? fmt::format("{} caught, {} stale", integer(s["caught"]), stale)
                       : fmt::format("{} caught", integer(s["caught"]));
    };
    const auto side = [&](const char* key) {
      const Json& s = catalog[key];
      return fmt::format("{} {} of {} run", key, caught(s), integer(s["run"]));
    };
    md += fmt::format("Suites of this build against the {} planted faults of the catalog: {} ({}, {}; "
                      "{}, last run {}).  \n",
                      integer(catalog["faults"]), caught(catalog), side("cpu"), side("gpu"),
                      str(catalog["source"]), str(catalog["last_run"]));
  }
  md += fmt::format("Plan: {} variants × {} × backends {} × T {} × classes {} × {} seed(s); B {}, d_in {}, d_h {}; "
                    "oracle certification budget {} chain-steps{}{}.\n\n",
                    variants.size(), fmt::join(strings(plan["dtypes"]), ", "), fmt::join(strings(plan["backends"]), ", "),
                    fmt::join(ints(plan["times"]), ", "), fmt::join(strings(plan["classes"]), ", "),
                    integer(plan.value("seeds", Json(0))), integer(plan.value("batch", Json(0))),
                    integer(plan.value("d_in", Json(0))), integer(plan.value("d_h", Json(0))),
                    integer(plan.value("certify_budget", Json(0))),
                    plan.value("quick", Json(false)).get<bool>() ? "; quick" : "",
                    plan.contains("jobs") ? fmt::format("; {} tasks at once (timings under that load)", integer(plan["jobs"])) : "");
  if (plan.contains("solver") && plan["solver"].is_object()) {  // an external solver (docs/external-solvers.md)
    const Json& s = plan["solver"];
    md += fmt::format("**Solver: {}{}**, run as `{}` (external: every row judged by the oracle through `compare`; "
                      "strided, recompute and K\\* not applicable, listed under Skipped).\n\n",
                      md_escape(str(s.value("name", Json("")))),
                      s.value("version", Json(nullptr)).is_string() ? " " + md_escape(str(s["version"])) : "",
                      str(s.value("command", Json(""))));
  }

  // Summary.
  md += "## Summary\n\n";
  const Json& by = summary["by_outcome"];
  md += "| outcome | rows |\n|---|---|\n";
  for (const char* key : {"Agree", "Disagree", "Inconclusive", "Error"})
    md += fmt::format("| {} | {} |\n", key, integer(by.value(key, Json(0))));
  md += fmt::format("| **total** | **{}** |\n\n", integer(summary["rows"]));
  const Json eq = summary.value("equivalences", Json::object());
  md += fmt::format("- Equivalences: {} Agree, {} Disagree, {} Inconclusive, {} Error.\n",
                    integer(eq.value("Agree", Json(0))), integer(eq.value("Disagree", Json(0))),
                    integer(eq.value("Inconclusive", Json(0))), integer(eq.value("Error", Json(0))));
  const Json gr = summary.value("gradients", Json::object());
  std::int64_t gradient_mismatch_rows = 0;
  for (const auto& row : rows)
    if (has_agreement(row) && row["agreement"].contains("gradients"))
      for (const auto& [name, g] : row["agreement"]["gradients"].items())
        if (!g.value("ok", Json(false)).get<bool>()) {
          ++gradient_mismatch_rows;
          break;
        }
  md += fmt::format("- Gradients: judged on {} rows ({} with a mismatching tensor), not applicable on {} "
                    "(the solver has no adjoint for that cell: recorded, never passed), not requested on {}.\n",
                    integer(gr.value("judged", Json(0))), gradient_mismatch_rows, integer(gr.value("not_applicable", Json(0))),
                    integer(gr.value("not_requested", Json(0))));
  md += fmt::format("- K*(T): {} measurements; {} above the shipped K (or not reached).\n",
                    integer(summary.value("kstar_measurements", Json(0))), integer(summary.value("kstar_above_shipped", Json(0))));
  md += fmt::format("- Skipped: {} (listed below).", report["skipped"].size());
  if (summary.value("budget_exhausted", Json(false)).get<bool>())
    md += fmt::format(" **Time budget exhausted: {} tasks not run.**", integer(summary["rows_not_run"]));
  md += fmt::format("\n- Duration: {} s.\n", str(summary["duration_s"]));
  if (summary.contains("task_seconds_total") && summary.contains("slowest_tasks")) {
    std::vector<std::string> slowest;
    for (const auto& t : summary["slowest_tasks"])
      if (t.is_object() && slowest.size() < 3)
        slowest.push_back(fmt::format("`{}` {} s", str(t.value("task", Json(""))), str(t.value("seconds", Json(0)))));
    md += fmt::format("- Task time: {} s in all; slowest {}.\n", str(summary["task_seconds_total"]), fmt::join(slowest, ", "));
  }
  md += "\n";

  // Failures first.
  md += fmt::format("## Failures ({})\n\n", failures.size());
  if (failures.empty()) md += "No row failed: every row's verdict is Agree.\n\n";
  for (const Json* row : failures) {
    const Json& r = *row;
    md += fmt::format("### {} — {}\n\n", row_label(r), str(r["outcome"]));
    if (has_agreement(r)) {
      const Json& a = r["agreement"];
      md += fmt::format("- max |solver − oracle| {} (τ atol {}, rtol {}; {}), {} of {} elements outside τ, worst at {}\n",
                        sci(a["max_abs"]), sci(a["atol"]), sci(a["rtol"]), str(a.value("tolerance_source", Json(""))),
                        integer(a["mismatches"]), integer(a["count"]), worst_index_text(a.value("worst_index", Json::object())));
      md += fmt::format("- same-dtype sequential floor {}, quality ratio {}; Newton iterations {} ({}), final max|F| {}\n",
                        sci(a["sequential_max_abs"]), sci(a["quality_ratio"]), integer(a["newton_iters"]),
                        str(a.value("k_source", Json(""))), sci(a["max_residual"]));
      md += why_hard_line(a);
      if (a.contains("inconclusive_reason")) md += fmt::format("- Inconclusive: {}\n", str(a["inconclusive_reason"]));
      if (a.contains("gradients"))
        for (const auto& [name, g] : a["gradients"].items())
          if (!g.value("ok", Json(false)).get<bool>())
            md += fmt::format("- gradient `{}`: max abs {} (atol {}, rtol {}), {} of {} outside\n", name, sci(g["max_abs"]),
                              sci(g["atol"]), sci(g["rtol"]), integer(g["mismatches"]), integer(g["count"]));
    } else {
      md += fmt::format("- error: {}\n", md_escape(str(r.value("error", Json("")))));
    }
    if (r.contains("error_along_t") && r["error_along_t"].contains("first_failing_t"))
      md += fmt::format("- first step outside τ: t = {} (the sequential loop's: {})\n",
                        integer(r["error_along_t"]["first_failing_t"]),
                        integer(r["error_along_t"].value("sequential_first_failing_t", Json(-1))));
    md += "\nReplay (from the report folder), and make a bug bundle:\n\n```bash\n";
    md += str(r.value("repro", Json(""))) + "\n" + str(r.value("bug_bundle", Json(""))) + "\n```\n\n";
    if (r.contains("bundle")) md += fmt::format("Bundle for the solver's maintainers: `{}`.\n\n", str(r["bundle"]));
  }

  // Worst rows.
  std::vector<const Json*> ranked;
  for (const auto& row : rows)
    if (has_agreement(row)) ranked.push_back(&row);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Json* a, const Json* b) {
    const double ra = ratio_to_tau(*a), rb = ratio_to_tau(*b);
    if (std::isnan(ra) != std::isnan(rb)) return std::isnan(ra);
    return ra > rb;
  });
  md += "## Worst rows (error relative to τ's atol)\n\n";
  md += "| row | outcome | max error | error / atol | floor | quality ratio | worst index |\n|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < ranked.size() && i < 5; ++i) {
    const Json& a = (*ranked[i])["agreement"];
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", row_label(*ranked[i]), str((*ranked[i])["outcome"]),
                      sci(a["max_abs"]), sci(ratio_to_tau(*ranked[i])), sci(a["sequential_max_abs"]),
                      sci(a["quality_ratio"]), worst_index_text(a.value("worst_index", Json::object())));
  }
  md += "\n";

  // Per variant x dtype.
  md += "## Agreement by variant × dtype\n\n";
  md += "| variant | dtype | rows | Agree | Disagree | Inconclusive | Error | max error / atol | max floor / atol | "
        "max quality ratio | max iters | gradients judged |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& dtype : dtypes)
    for (const std::string& variant : variants) {
      std::map<std::string, std::int64_t> count;
      std::int64_t n = 0, iters = 0, judged = 0;
      double err = 0.0, floor = 0.0, quality = 0.0;
      for (const auto& row : rows) {
        if (str(row["variant"]) != variant || str(row["dtype"]) != dtype) continue;
        ++n;
        ++count[str(row["outcome"])];
        if (str(row["gradients"]) == "judged") ++judged;
        if (!has_agreement(row)) continue;
        err = worse(err, ratio_to_tau(row));
        floor = worse(floor, metric(row, "sequential_max_abs") / metric(row, "atol"));
        quality = worse(quality, metric(row, "quality_ratio"));
        iters = std::max(iters, integer(row["agreement"]["newton_iters"]));
      }
      if (n == 0) continue;
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", variant, dtype, n, count["Agree"],
                        count["Disagree"], count["Inconclusive"], count["Error"], sci(err), sci(floor), sci(quality), iters,
                        judged);
    }
  md += "\n";

  // Error vs T (the numbers of the error plots, and of every other class).
  md += "## Error vs T (max over seeds and backends; the same-dtype sequential floor in brackets)\n\n";
  const std::vector<std::string> classes = ordered(plan["classes"], rows, "class");
  for (const std::string& dtype : dtypes) {
    std::string table = fmt::format("**{}**\n\n| variant | class |", dtype);
    std::string rule = "|---|---|";
    for (std::int64_t t : times) {
      table += fmt::format(" T={} |", t);
      rule += "---|";
    }
    table += "\n" + rule + "\n";
    bool any_row = false;
    for (const std::string& variant : variants)
      for (const std::string& cls : classes) {
        std::string line = "| " + variant + " | " + cls + " |";
        bool any = false;
        for (std::int64_t t : times) {
          double e = 0.0, f = 0.0;
          bool here = false;
          for (const auto& row : rows)
            if (str(row["dtype"]) == dtype && str(row["variant"]) == variant && str(row["class"]) == cls &&
                integer(row["T"]) == t && has_agreement(row)) {
              e = here ? worse(e, metric(row, "max_abs")) : metric(row, "max_abs");
              f = here ? worse(f, metric(row, "sequential_max_abs")) : metric(row, "sequential_max_abs");
              here = true;
            }
          line += here ? fmt::format(" {} ({}) |", sci(e), sci(f)) : " - |";
          any = any || here;
        }
        if (any) {
          table += line + "\n";
          any_row = true;
        }
      }
    if (any_row) md += table + "\n";
  }

  // K*.
  md += "## K*(T) (max over seeds; the shipped K in brackets; -1: no K up to the limit agreed; after the arrow the "
        "predicted K, max over seeds, '-' where the model gives no number)\n\n";
  if (report["kstar"].empty()) md += "Not measured in this run.\n\n";
  else {
    std::vector<std::int64_t> ktimes;
    for (const auto& k : report["kstar"])
      if (std::find(ktimes.begin(), ktimes.end(), integer(k["T"])) == ktimes.end()) ktimes.push_back(integer(k["T"]));
    std::sort(ktimes.begin(), ktimes.end());
    md += "| variant | dtype | class |";
    std::string rule = "|---|---|---|";
    for (std::int64_t t : ktimes) {
      md += fmt::format(" T={} |", t);
      rule += "---|";
    }
    md += "\n" + rule + "\n";
    std::vector<std::tuple<std::string, std::string, std::string>> keys;
    for (const auto& k : report["kstar"]) {
      const auto key = std::make_tuple(str(k["variant"]), str(k["dtype"]), str(k["class"]));
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
    }
    for (const auto& [variant, dtype, cls] : keys) {
      md += fmt::format("| {} | {} | {} |", variant, dtype, cls);
      for (std::int64_t t : ktimes) {
        std::string cell = " - |";
        for (const auto& k : report["kstar"])
          if (str(k["variant"]) == variant && str(k["dtype"]) == dtype && str(k["class"]) == cls && integer(k["T"]) == t) {
            const std::int64_t m = integer(k["max_kstar"]), shipped = integer(k["shipped_k"]);
            const std::string predicted =
                !k.contains("max_predicted_k") ? ""
                : k["max_predicted_k"].is_number_integer() ? fmt::format(" → {}", integer(k["max_predicted_k"]))
                                                           : " → -";
            cell = m < 0 || m > shipped ? fmt::format(" **{}** ({}){} |", m, shipped, predicted)
                                        : fmt::format(" {} ({}){} |", m, shipped, predicted);
          }
        md += cell;
      }
      md += "\n";
    }
    md += "\n";
    const Json& s = report["summary"];
    if (s.contains("kstar_predicted") && s["kstar_predicted"].is_object()) {
      const Json& c = s["kstar_predicted"];
      const std::int64_t hit = integer(c.value("hit", Json(0))), over = integer(c.value("over", Json(0))),
                         under = integer(c.value("under", Json(0))), none = integer(c.value("none", Json(0)));
      const std::int64_t total = hit + over + under + none;
      if (total > 0)
        md += fmt::format("Predicted K against K*, per (T, seed) (docs/kstar.md, \"The predicted K\"): {} hit (K* - 1 to K* + 1), "
                          "{} over, **{} under**, {} without a number; hit rate {:.0f}% of {} ({:.0f}% of the {} with a "
                          "number).\n\n",
                          hit, over, under, none, 100.0 * static_cast<double>(hit) / static_cast<double>(total), total,
                          hit + over + under > 0 ? 100.0 * static_cast<double>(hit) / static_cast<double>(hit + over + under) : 0.0,
                          hit + over + under);
    }
  }

  // Timings.
  md += "## Timings (class init, medians over seeds and repeats: Newton ms / sequential ms / oracle ms)\n\n";
  for (const std::string& backend : backends)
    for (const std::string& dtype : dtypes) {
      std::string table = fmt::format("**{} {}**\n\n| variant |", backend, dtype);
      std::string rule = "|---|";
      for (std::int64_t t : times) {
        table += fmt::format(" T={} |", t);
        rule += "---|";
      }
      table += "\n" + rule + "\n";
      bool any_row = false;
      for (const std::string& variant : variants) {
        std::string line = "| " + variant + " |";
        bool any = false;
        for (std::int64_t t : times) {
          std::vector<double> n, s, o;
          for (const auto& row : rows)
            if (str(row["backend"]) == backend && str(row["dtype"]) == dtype && str(row["variant"]) == variant &&
                integer(row["T"]) == t && str(row["class"]) == "init" && has_agreement(row)) {
              const Json& tm = row["agreement"]["timings_ms"];
              n.push_back(tm.contains("newton") ? number_or_nan(tm["newton"]) : NAN);
              for (const auto& r : row.value("newton_ms_repeats", Json::array())) n.push_back(number_or_nan(r));
              s.push_back(tm.contains("sequential") ? number_or_nan(tm["sequential"]) : NAN);
              o.push_back(tm.contains("oracle") ? number_or_nan(tm["oracle"]) : NAN);
            }
          line += n.empty() ? " - |" : fmt::format(" {} / {} / {} |", ms(median(n)), ms(median(s)), ms(median(o)));
          any = any || !n.empty();
        }
        if (any) {
          table += line + "\n";
          any_row = true;
        }
      }
      if (any_row) md += table + "\n";
    }

  // Equivalences.
  md += "## Equivalences\n\n";
  if (report["equivalences"].empty()) md += "None in this run.\n\n";
  else {
    md += "| equivalence | verdict | max abs | atol | rtol | mismatches | tolerance |\n|---|---|---|---|---|---|---|\n";
    for (const auto& e : report["equivalences"])
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", str(e["id"]), str(e["verdict"]), sci(e["max_abs"]),
                        sci(e["atol"]), sci(e.value("rtol", Json(nullptr))),
                        e.contains("mismatches")
                            ? fmt::format("{}/{}{}", integer(e["mismatches"]), integer(e["count"]),
                                          e.contains("reason") ? " (" + str(e["reason"]) + ")" : "")
                            : md_escape(str(e.value("error", Json("-")))),
                        md_escape(str(e.value("tolerance_source", Json("-")))));
    md += "\n";
  }

  // Performance: the bench summary, when the run embedded one (report nightly --bench-summary).
  if (report.contains("performance")) {
    const Json& perf = report["performance"];
    const Json& targets = perf["targets"];
    std::int64_t met = 0, measured = 0;
    for (const auto& [id, t] : targets.items()) {
      met += t["met"].get<bool>() ? 1 : 0;
      measured += t["value"].is_null() ? 0 : 1;
    }
    md += fmt::format("## Performance ({}, {}: {} targets, {} measured, {} met)\n\n", str(perf["gpu"]),
                      str(perf.value("date", Json("undated"))), targets.size(), measured, met);
    md += "| target | value | unit | goal | met | peer | note |\n|---|---|---|---|---|---|---|\n";
    for (const auto& [id, t] : targets.items()) {
      const std::string goal = fmt::format("{} {}", t.value("better", Json("lower")) == "higher" ? ">=" : "<=", sci(t["target"]));
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", id, t["value"].is_null() ? "not measured" : sci(t["value"]),
                        md_escape(str(t["unit"])), goal, t["met"].get<bool>() ? "yes" : "**no**",
                        t.value("peer", Json()).is_null() ? "-" : sci(t["peer"]), md_escape(str(t.value("note", Json("")))));
    }
    md += "\n";
  }

  // Skipped.
  md += "## Skipped\n\n";
  if (report["skipped"].empty()) md += "Nothing.\n\n";
  for (const auto& s : report["skipped"]) md += fmt::format("- {}: {}\n", str(s["what"]), md_escape(str(s["reason"])));
  if (!report["skipped"].empty()) md += "\n";

  // Figures.
  md += "## Plots\n\n";
  const std::vector<Figure> figures = report_figures(report);
  if (!plots) md += "Not rendered (`--no-plots`); every number plotted is in the tables above.\n\n";
  else if (figures.empty()) md += "Nothing to plot.\n\n";
  else {
    // Figures asked for and not drawn: named with the reason (one line per distinct reason).
    std::map<std::string, std::vector<std::string>> by_reason;
    std::set<std::string> missing;
    for (const UndrawnFigure& u : undrawn) {
      by_reason[u.reason].push_back(u.name);
      missing.insert(u.name);
    }
    for (const auto& [reason, names] : by_reason)
      md += fmt::format("**Not drawn ({} of {} plots): {}**: {}. Every number plotted is in the tables above.\n\n",
                        names.size(), figures.size(), fmt::join(names, ", "), md_escape(reason));
    for (const Figure& f : figures)
      if (!missing.contains(f.name)) md += figure_links(f.name, f.title) + "\n";
  }

  // Every row.
  md += "## All rows\n\n";
  md += "| row | outcome | max error | floor | quality ratio | iters | K source | max\\|F\\| | gradients | Newton ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& row : rows) {
    if (!has_agreement(row)) {
      md += fmt::format("| {} | {} | - | - | - | - | - | - | {} | - |\n", row_label(row), str(row["outcome"]), str(row["gradients"]));
      continue;
    }
    const Json& a = row["agreement"];
    const Json& tm = a["timings_ms"];
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", row_label(row), str(row["outcome"]),
                      sci(a["max_abs"]), sci(a["sequential_max_abs"]), sci(a["quality_ratio"]), integer(a["newton_iters"]),
                      str(a.value("k_source", Json(""))), sci(a["max_residual"]), str(row["gradients"]),
                      tm.contains("newton") ? ms(number_or_nan(tm["newton"])) : "-");
  }
  return md;
}

std::vector<std::filesystem::path> render_report(const Json& report, const std::filesystem::path& out_dir,
                                                 const RenderOptions& options) {
  validate_report(report, "report");
  std::filesystem::create_directories(out_dir);
  std::vector<std::filesystem::path> written;
  std::vector<UndrawnFigure> undrawn;
  if (options.plots) {
    const std::filesystem::path plots = out_dir / "plots";
    const std::vector<Figure> figures = report_figures(report);
    if (!figures.empty() && !plotting_available()) {
      // No gnuplot: the Markdown needs none (every plotted number is in its tables).
      for (const Figure& f : figures)
        undrawn.push_back({f.name, "gnuplot is not in PATH (Debian package gnuplot-nox; scripts/install-deps.sh "
                                   "installs it); `pararnn report render` draws them where it is"});
    } else {
      if (!figures.empty()) std::filesystem::create_directories(plots);
      for (const Figure& f : figures) {
        try {
          render_figure(f, plots);
          written.push_back(plots / (f.name + ".svg"));
          written.push_back(plots / (f.name + ".png"));
        } catch (const std::exception& e) {  // gnuplot failed on it, or its file could not be written
          undrawn.push_back({f.name, e.what()});
        }
      }
    }
  }
  const std::string md = render_markdown(report, options.plots, undrawn);
  write_file_atomically(out_dir / "report.md", [&](std::ostream& out) { out << md; });
  written.push_back(out_dir / "report.md");
  if (options.undrawn) *options.undrawn = std::move(undrawn);
  return written;
}

std::string render_agreement_markdown(const Json& a, const std::string& title) {
  std::string md = "# " + title + "\n\n";
  md += fmt::format("**Verdict: {}**\n\n", str(a["verdict"]));
  if (a.contains("inconclusive_reason")) md += fmt::format("Inconclusive: {}\n\n", str(a["inconclusive_reason"]));
  md += "| key | value |\n|---|---|\n";
  md += fmt::format("| cell | {} |\n| dtype (τ) | {} |\n| trajectory dtype | {} |\n| shape | {} |\n", str(a["cell"]),
                    str(a["dtype"]), str(a.value("trajectory_dtype", a["dtype"])), a["shape"].dump());
  md += fmt::format("| path, backend | {}, {} |\n", str(a["path"]), str(a["backend"]));
  md += fmt::format("| max \\|solver − oracle\\| | {} |\n| τ | atol {}, rtol {} ({}) |\n", sci(a["max_abs"]), sci(a["atol"]),
                    sci(a["rtol"]), str(a.value("tolerance_source", Json(""))));
  md += fmt::format("| elements outside τ | {} of {} |\n| worst index | {} |\n", integer(a["mismatches"]), integer(a["count"]),
                    worst_index_text(a.value("worst_index", Json::object())));
  md += fmt::format("| same-dtype sequential floor | {} |\n| solver vs sequential | {} |\n| quality ratio | {} |\n",
                    sci(a["sequential_max_abs"]), sci(a["vs_sequential_max_abs"]), sci(a["quality_ratio"]));
  md += fmt::format("| Newton iterations (K min, source) | {} ({}, {}) |\n| final max\\|F\\| | {} |\n",
                    integer(a["newton_iters"]), integer(a.value("k_min", Json(0))), str(a.value("k_source", Json(""))),
                    sci(a["max_residual"]));
  std::string history;
  for (const auto& h : a["residual_history"]) history += (history.empty() ? "" : ", ") + sci(h);
  md += fmt::format("| residual history | {} |\n", history.empty() ? "-" : history);
  const Json& o = a["oracle"];
  md += fmt::format("| oracle | {} ({} bits), certified by {} ({} bits): self-check {} over {} chain-steps{} |\n",
                    str(o["type"]), integer(o["digits"]), str(o["certifier_type"]), integer(o["certifier_digits"]),
                    sci(o["self_check_delta"]), integer(o["certified_chain_steps"]),
                    o.value("certified_all_chains", Json(false)).get<bool>() ? " (all chains)" : " (seeded sample)");
  std::string timings;
  for (const auto& [k, v] : a["timings_ms"].items()) timings += (timings.empty() ? "" : ", ") + k + " " + ms(number_or_nan(v)) + " ms";
  md += fmt::format("| timings | {} |\n| seed | {} |\n", timings, str(a["seed"]));
  if (a.contains("cell_version")) md += fmt::format("| cell version | {} |\n", str(a["cell_version"]));
  md += "\n";
  if (a.contains("gradients")) {
    md += "## Gradients\n\n| tensor | ok | max abs | max rel | atol | rtol | outside |\n|---|---|---|---|---|---|---|\n";
    for (const auto& [name, g] : a["gradients"].items())
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {}/{} |\n", name, g["ok"].get<bool>() ? "yes" : "**no**",
                        sci(g["max_abs"]), sci(g["max_rel"]), sci(g["atol"]), sci(g["rtol"]), integer(g["mismatches"]),
                        integer(g["count"]));
    md += "\n";
  }
  if (a.contains("repro") && !str(a["repro"]).empty()) md += fmt::format("Replay:\n\n```bash\n{}\n```\n", str(a["repro"]));
  return md;
}

}  // namespace pararnn::reports
