// `pararnn report nightly|render|diff` and `pararnn bug-bundle`: parse the CLI's strings, call
// pararnn::reports, print, return the exit code. `report nightly` renders what `report render`
// writes (report.md, plots/, --junit) through the same function, write_renderings.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <map>

#include "commands.hpp"
#include "pararnn/core/progress.hpp"
#include "env_line.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/nightly/campaign.hpp"
#include "pararnn/reports/diff.hpp"
#include "pararnn/reports/junit.hpp"
#include "pararnn/reports/render.hpp"
#include "pararnn/reports/report_json.hpp"

namespace pararnn::tools {
namespace {

std::vector<std::string> split_list(const std::string& text, const char* argument) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty())
      throw ContractViolation(argument, fmt::format("must be a comma-separated list without empty items (item {})",
                                                    out.size()),
                              text);
    out.push_back(item);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::int64_t> split_ints(const std::string& text, const char* argument) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(text, argument)) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size())
      throw ContractViolation(argument, fmt::format("must be a comma-separated list of integers (item {} is '{}')",
                                                    out.size(), item),
                              text);
    out.push_back(v);
  }
  return out;
}

// The one rendering path of `report render` and `report nightly`: the JUnit XML first (when
// asked; it needs no gnuplot), then report.md and plots/ under out_dir (when `render`). Each file
// is written atomically. Plots that cannot be drawn (no gnuplot) do not stop report.md, which names
// them; they are named on stderr too, and the exit status does not change (issue 58). Returns the
// paths written.
std::vector<std::filesystem::path> write_renderings(const nlohmann::ordered_json& report,
                                                    const std::filesystem::path& out_dir, bool render, bool plots,
                                                    const std::string& junit) {
  std::vector<std::filesystem::path> written;
  if (!junit.empty()) {
    reports::write_junit(report, junit);
    written.emplace_back(junit);
  }
  if (render) {
    std::vector<reports::UndrawnFigure> undrawn;
    for (const auto& path : reports::render_report(report, out_dir, {.plots = plots, .undrawn = &undrawn}))
      written.push_back(path);
    std::map<std::string, std::vector<std::string>> by_reason;
    for (const auto& u : undrawn) by_reason[u.reason].push_back(u.name);
    for (const auto& [reason, names] : by_reason)
      std::cerr << fmt::format("pararnn: {} plot(s) not drawn ({}): {}; report.md is written without them and "
                               "says so\n",
                               names.size(), fmt::join(names, ", "), reason);
  }
  return written;
}

}  // namespace

int report_nightly(const NightlyArgs& args) {
  // --junit is reserved before any argument is refused (reserve_report_file). `--out nightly
  // --junit nightly/junit.xml` may name the report folder before the campaign makes it: a folder
  // not there yet holds no JUnit file of an earlier run, and is made once the arguments are taken.
  const auto folder = [](const std::filesystem::path& p) { return (std::filesystem::absolute(p) / "").lexically_normal(); };
  const std::filesystem::path junit_dir = std::filesystem::path(args.junit).parent_path();
  const bool junit_in_new_out = !args.junit.empty() && !args.out.empty() && !std::filesystem::exists(args.out) &&
                                folder(junit_dir.empty() ? "." : junit_dir) == folder(args.out);
  const std::vector<NamedPath> junit_others = {{"--bench-summary", args.bench_summary},
                                               {"--out", (std::filesystem::path(args.out) / "report.json").string()}};
  if (!junit_in_new_out) reserve_report_file(args.junit, "--junit", junit_others);
  nightly::CampaignOptions options;
  options.out_dir = args.out;
  options.quick = args.quick;
  options.kstar_only = args.kstar_only;
  options.backends = split_list(args.backends, "--backends");
  options.variants = split_list(args.cells, "--cells");
  options.dtypes = split_list(args.dtypes, "--dtypes");
  options.times = split_ints(args.times, "--T");
  options.classes = split_list(args.classes, "--classes");
  if (args.max_iters != "none" && args.max_iters != "None") {
    const auto k = split_ints(args.max_iters, "--max-iters");
    if (k.size() != 1 || k[0] < 0)
      throw ContractViolation("--max-iters", "must be a non-negative integer or 'none'", args.max_iters);
    options.max_iters = k[0];
  }
  options.seeds = args.seeds;
  options.time_budget_s = args.time_budget;
  options.jobs = args.jobs;
  const bool solver_flags = !args.solver_name.empty() || !args.solver_version_cmd.empty();
  if (args.solver.empty() && solver_flags)
    throw ContractViolation(!args.solver_name.empty() ? "--solver-name" : "--solver-version-cmd",
                            "needs --solver (it names the external solver)",
                            !args.solver_name.empty() ? args.solver_name : args.solver_version_cmd);
  if (!args.solver.empty()) {
    if (args.backends_given)
      throw ContractViolation("--backends", "does not apply with --solver (the external command is the only backend)",
                              args.backends);
    options.external = nightly::make_external_solver({.command = args.solver, .name = args.solver_name,
                                                      .version_command = args.solver_version_cmd,
                                                      .timeout_s = args.solver_timeout});
  }
  if (!args.bench_summary.empty()) options.performance = reports::load_bench_summary(args.bench_summary);
  if (junit_in_new_out) {
    std::filesystem::create_directories(args.out);
    reserve_report_file(args.junit, "--junit", junit_others);
  }
  options.build = build_context();
  options.gpu_available = cuda_device_available();
  options.argv = args.argv;
  Progress progress("nightly", 0, "tasks");
  options.progress = [&](const nightly::CampaignProgress& p) {
    progress.set_total(p.total);
    // A finished task's line names it with its seconds (a log of where a campaign's time went).
    progress.update(p.done, p.finished.empty() ? p.current : fmt::format("done {} ({:.1f} s)", p.finished, p.finished_s));
  };
  const nightly::CampaignResult result = nightly::run_campaign(options);
  progress.finish();
  const auto& summary = result.report["summary"];
  const auto& by = summary["by_outcome"];
  std::cout << fmt::format("rows {}: Agree {}, Disagree {}, Inconclusive {}, Error {}; equivalences: {}; "
                           "K* measurements {}; skipped {}; {} s\n",
                           summary["rows"].get<std::int64_t>(), by["Agree"].get<std::int64_t>(),
                           by["Disagree"].get<std::int64_t>(), by["Inconclusive"].get<std::int64_t>(),
                           by["Error"].get<std::int64_t>(), summary["equivalences"].dump(),
                           summary["kstar_measurements"].get<std::int64_t>(), summary["skipped"].get<std::int64_t>(),
                           summary["duration_s"].dump());
  if (summary["budget_exhausted"].get<bool>())
    std::cout << fmt::format("time budget exhausted: {} tasks not run\n", summary["rows_not_run"].get<std::int64_t>());
  for (const auto& row : result.report["rows"])
    if (row["outcome"] != "Agree")
      std::cout << fmt::format("{} {}: {}{}\n", row["outcome"].get<std::string>(), row["id"].get<std::string>(),
                               row["repro"].get<std::string>(),
                               row.contains("bundle") ? "  (bundle: " + row["bundle"].get<std::string>() + ")" : "");
  std::cout << "report: " << result.report_path.string() << "\n";
  try {
    // report.md of an earlier run must not sit beside this run's report.json, rendered or not.
    std::filesystem::remove(options.out_dir / "report.md");
    if (args.no_render && args.junit.empty()) return result.exit_code;
    // What `report render DIR/report.json --out DIR` writes, from the file just written.
    const auto report = reports::load_report(result.report_path);
    for (const auto& path : write_renderings(report, options.out_dir, !args.no_render, true, args.junit))
      if (path.extension() != ".svg" && path.extension() != ".png") std::cout << "wrote " << path.string() << "\n";
  } catch (const std::exception& e) {
    // report.json stands; the readable outputs do not. Never exit 0 without what was asked for.
    std::cerr << "pararnn: report.json is written but its rendering failed: " << e.what()
              << "\n  retry with: pararnn report render " << result.report_path.string() << " --out "
              << options.out_dir.string() << (args.junit.empty() ? "" : " --junit " + args.junit)
              << "\n";
    return result.exit_code != kExitAgree ? result.exit_code : kExitInconclusiveOrRefused;
  }
  return result.exit_code;
}

}  // namespace pararnn::tools

namespace pararnn::tools {

int report_render(const RenderArgs& args) {
  reserve_report_file(args.junit, "--junit", {{"report", args.report}});
  const auto report = reports::load_report(args.report);
  if (args.out.empty()) throw ContractViolation("--out", "needs a directory", "(empty)");
  if (std::filesystem::exists(args.out) && !std::filesystem::is_directory(args.out))
    throw ContractViolation("--out", "must be a directory (report.md and plots/ are written there)", args.out);
  const auto written = write_renderings(report, args.out, true, !args.no_plots, args.junit);
  for (const auto& path : written) std::cout << "wrote " << path.string() << "\n";
  return 0;
}

int report_diff(const DiffArgs& args) {
  if (!args.out.empty()) check_output_path(args.out, "--out");
  const auto old_report = reports::load_report(args.old_report);
  const auto new_report = reports::load_report(args.new_report);
  const reports::DiffResult d = reports::diff_reports(old_report, new_report,
                                                      {.error_factor = args.error_factor,
                                                       .time_noise = args.time_noise,
                                                       .time_floor_ms = args.time_floor_ms,
                                                       .old_name = args.old_report,
                                                       .new_name = args.new_report});
  std::cout << d.markdown;
  if (!args.out.empty())
    write_file_atomically(args.out, [&](std::ostream& out) { out << d.markdown; });
  return d.regressions.empty() ? 0 : 1;
}

}  // namespace pararnn::tools
