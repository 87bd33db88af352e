#include "pararnn/reports/report_json.hpp"

#include "fault_catalog_summary.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

std::string type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::string shown(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return fmt::format("{} {}", type_name(v), text);
}

struct Checker {
  std::string_view file;
  std::string_view kind = "a pararnn nightly report";

  [[noreturn]] void refuse(const std::string& key, const std::string& rule, const std::string& value) const {
    throw ContractViolation(fmt::format("{}: key '{}'", file, key), rule, value);
  }
  const Json& member(const Json& object, const std::string& path, const std::string& key) const {
    const std::string where = path.empty() ? key : path + "." + key;
    if (!object.contains(key)) refuse(where, fmt::format("is required in {}", kind), "missing");
    return object.at(key);
  }
  const Json& object(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& v = member(parent, path, key);
    if (!v.is_object()) refuse(path.empty() ? key : path + "." + key, "must be an object", shown(v));
    return v;
  }
  const Json& array(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& v = member(parent, path, key);
    if (!v.is_array()) refuse(path.empty() ? key : path + "." + key, "must be an array", shown(v));
    return v;
  }
  void string(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& v = member(parent, path, key);
    if (!v.is_string()) refuse(path.empty() ? key : path + "." + key, "must be a string", shown(v));
  }
  void integer(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& v = member(parent, path, key);
    if (!v.is_number_integer() && !v.is_number_unsigned())
      refuse(path.empty() ? key : path + "." + key, "must be an integer", shown(v));
  }
  // A number, or null (NaN and infinities are written as null).
  void number(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& v = member(parent, path, key);
    if (!v.is_number() && !v.is_null())
      refuse(path.empty() ? key : path + "." + key, "must be a number (or null for NaN)", shown(v));
  }
  void verdict(const Json& parent, const std::string& path, const std::string& key, bool error_allowed) const {
    string(parent, path, key);
    const std::string v = parent.at(key).get<std::string>();
    if (v == "Agree" || v == "Disagree" || v == "Inconclusive" || (error_allowed && v == kOutcomeError)) return;
    refuse(path + "." + key,
           error_allowed ? "must be Agree, Disagree, Inconclusive or Error" : "must be Agree, Disagree or Inconclusive",
           shown(parent.at(key)));
  }
};

}  // namespace

Json context_block(const BuildContext& build, const std::vector<std::string>& argv,
                   const std::vector<std::uint64_t>& seeds) {
  Json j;
  j["pararnn_version"] = build.pararnn_version;
  j["git_sha"] = build.git_sha;
  j["compiler"] = build.compiler;
  j["cuda_runtime"] = build.cuda_runtime;
  j["cuda_driver"] = build.cuda_driver;
  j["gpu"] = build.gpu;
  j["gpu_clocks"] = nullptr;  // not read: the runtime API of CUDA 13 no longer reports clocks
  j["env_line"] = build.env_line;
  j["argv"] = argv;
  j["date_utc"] = utc_now();
  j["seeds"] = seeds;
  j["host_cpus"] = std::thread::hardware_concurrency();
  // The peers (pararnn-torch, accelerated-scan, flashrnn) are measured by bench/ on the GPU
  // machine; the campaign does not run them, so their versions are null, not guessed.
  j["peers"] = {{"pararnn-torch", nullptr}, {"accelerated-scan", nullptr}, {"flashrnn", nullptr}};
  j["fault_catalog"] = fault_catalog_summary();
  return j;
}

Json fault_catalog_summary() {
  using namespace generated;
  if (kFaultCatalogFaults < 0) return nullptr;
  // caught: detected at a run newer than every change to the files of the fault's point in this
  // source tree; stale: detected, but those files changed since (issue 58; scripts/fault-catalog.py).
  const auto side = [](long long faults, long long run, long long caught, long long stale) {
    return Json{{"faults", faults}, {"run", run}, {"caught", caught}, {"stale", stale}};
  };
  return Json{{"source", "docs/faults/catalog.json"},
              {"last_run", kFaultCatalogDate},
              {"faults", kFaultCatalogFaults},
              {"run", kFaultCatalogCpuRun + kFaultCatalogGpuRun},
              {"caught", kFaultCatalogCpuCaught + kFaultCatalogGpuCaught},
              {"stale", kFaultCatalogCpuStale + kFaultCatalogGpuStale},
              {"cpu", side(kFaultCatalogCpuFaults, kFaultCatalogCpuRun, kFaultCatalogCpuCaught, kFaultCatalogCpuStale)},
              {"gpu", side(kFaultCatalogGpuFaults, kFaultCatalogGpuRun, kFaultCatalogGpuCaught, kFaultCatalogGpuStale)}};
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void validate_report(const Json& report, std::string_view file) {
  const Checker c{file};
  if (!report.is_object()) c.refuse("(document)", "must be a JSON object (a pararnn nightly report)", shown(report));
  c.string(report, "", "format");
  if (report.at("format").get<std::string>() != kReportFormat)
    c.refuse("format", fmt::format("must be \"{}\" (not a pararnn nightly report)", kReportFormat),
             shown(report.at("format")));
  c.integer(report, "", "schema_version");
  if (report.at("schema_version").get<std::int64_t>() != kNightlySchemaVersion)
    c.refuse("schema_version",
             fmt::format("must be {} (this pararnn reads schema version {} only)", kNightlySchemaVersion,
                         kNightlySchemaVersion),
             shown(report.at("schema_version")));
  const Json& context = c.object(report, "", "context");
  for (const char* key : {"pararnn_version", "git_sha", "compiler", "cuda_runtime", "cuda_driver", "gpu", "date_utc"})
    c.string(context, "context", key);
  c.array(context, "context", "argv");
  c.array(context, "context", "seeds");
  if (context.contains("fault_catalog") && !context.at("fault_catalog").is_null()) {
    const Json& catalog = c.object(context, "context", "fault_catalog");
    for (const char* key : {"faults", "run", "caught"}) c.integer(catalog, "context.fault_catalog", key);
  }
  const Json& plan = c.object(report, "", "plan");
  for (const char* key : {"variants", "dtypes", "backends", "times", "classes"}) c.array(plan, "plan", key);
  c.array(report, "", "skipped");
  const Json& rows = c.array(report, "", "rows");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string path = fmt::format("rows[{}]", i);
    const Json& row = rows[i];
    if (!row.is_object()) c.refuse(path, "must be an object", shown(row));
    for (const char* key : {"id", "variant", "cell", "mix", "dtype", "backend", "class", "gradients"})
      c.string(row, path, key);
    for (const char* key : {"T", "batch", "seed"}) c.integer(row, path, key);
    c.verdict(row, path, "outcome", true);
    if (row.at("outcome").get<std::string>() == kOutcomeError) {
      c.string(row, path, "error");
    } else {
      const Json& a = c.object(row, path, "agreement");
      const std::string apath = path + ".agreement";
      c.verdict(a, apath, "verdict", false);
      if (a.at("verdict") != row.at("outcome"))
        c.refuse(apath + ".verdict", "must equal the row's outcome", shown(a.at("verdict")));
      for (const char* key : {"max_abs", "atol", "rtol", "sequential_max_abs", "quality_ratio", "max_residual"})
        c.number(a, apath, key);
      for (const char* key : {"newton_iters", "mismatches", "count"}) c.integer(a, apath, key);
      c.object(a, apath, "timings_ms");
      c.array(a, apath, "residual_history");
    }
  }
  const Json& equivalences = c.array(report, "", "equivalences");
  for (std::size_t i = 0; i < equivalences.size(); ++i) {
    const std::string path = fmt::format("equivalences[{}]", i);
    const Json& e = equivalences[i];
    if (!e.is_object()) c.refuse(path, "must be an object", shown(e));
    for (const char* key : {"id", "name", "variant", "dtype", "backend"}) c.string(e, path, key);
    c.integer(e, path, "T");
    c.verdict(e, path, "verdict", true);
    for (const char* key : {"max_abs", "atol"}) c.number(e, path, key);
  }
  const Json& kstar = c.array(report, "", "kstar");
  for (std::size_t i = 0; i < kstar.size(); ++i) {
    const std::string path = fmt::format("kstar[{}]", i);
    const Json& k = kstar[i];
    if (!k.is_object()) c.refuse(path, "must be an object", shown(k));
    for (const char* key : {"variant", "dtype", "class"}) c.string(k, path, key);
    for (const char* key : {"T", "max_kstar", "shipped_k"}) c.integer(k, path, key);
    c.array(k, path, "kstar_by_seed");
  }
  if (report.contains("performance")) validate_bench_summary(report.at("performance"), std::string(file) + " (performance)");
  const Json& summary = c.object(report, "", "summary");
  c.object(summary, "summary", "by_outcome");
  c.integer(summary, "summary", "rows");
  c.array(summary, "summary", "failures");
  c.number(summary, "summary", "duration_s");
  if (summary.at("rows").get<std::int64_t>() != static_cast<std::int64_t>(rows.size()))
    c.refuse("summary.rows", fmt::format("must equal the number of rows ({})", rows.size()), shown(summary.at("rows")));
}

void validate_bench_summary(const Json& summary, std::string_view file) {
  const Checker c{file, "a bench summary (bench/summarize.py)"};
  if (!summary.is_object()) c.refuse("(document)", "must be a JSON object (a bench summary)", shown(summary));
  c.integer(summary, "", "schema_version");
  c.string(summary, "", "gpu");
  const Json& targets = c.object(summary, "", "targets");
  for (const auto& [id, t] : targets.items()) {
    const std::string path = "targets." + id;
    if (!t.is_object()) c.refuse(path, "must be an object", shown(t));
    c.number(t, path, "value");
    c.number(t, path, "target");
    c.string(t, path, "unit");
    const Json& met = c.member(t, path, "met");
    if (!met.is_boolean()) c.refuse(path + ".met", "must be a boolean", shown(met));
    // Honest: a target without a value is never met.
    if (met.get<bool>() && t.at("value").is_null()) c.refuse(path + ".met", "must be false when value is null", "true");
  }
}

Json load_bench_summary(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ContractViolation("--bench-summary", "must be a readable bench summary JSON", path.string());
  std::stringstream text;
  text << in.rdbuf();
  Json summary;
  try {
    summary = Json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw ContractViolation(fmt::format("{}: key '(document)'", path.string()), "must be complete JSON",
                            fmt::format("parse error at byte {} of {}: {}", e.byte, text.str().size(), e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number no double holds (out_of_range 406)
    throw ContractViolation(fmt::format("{}: key '(document)'", path.string()),
                            "must be JSON whose numbers a double holds", e.what());
  }
  validate_bench_summary(summary, path.string());
  return summary;
}

Json load_report(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ContractViolation(path.string(), "must be a readable report.json", "cannot open the file");
  std::stringstream text;
  text << in.rdbuf();
  Json report;
  try {
    report = Json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw ContractViolation(fmt::format("{}: key '(document)'", path.string()),
                            "must be complete JSON (a truncated or corrupt report is refused)",
                            fmt::format("parse error at byte {} of {}: {}", e.byte, text.str().size(), e.what()));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number no double holds (out_of_range 406)
    throw ContractViolation(fmt::format("{}: key '(document)'", path.string()),
                            "must be JSON whose numbers a double holds", e.what());
  }
  validate_report(report, path.string());
  return report;
}

void write_json_file(const std::filesystem::path& path, const Json& json) {
  write_file_atomically(path, [&](std::ostream& out) { out << json.dump(2) << "\n"; });
}

double number_or_nan(const Json& value) { return value.is_number() ? value.get<double>() : NAN; }

}  // namespace pararnn::reports
