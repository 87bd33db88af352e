#include "pararnn/reports/junit.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "pararnn/core/case_file.hpp"
#include "pararnn/reports/render.hpp"
#include "pararnn/reports/report_json.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

std::string str(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }
std::int64_t integer(const Json& v) { return v.is_number() ? v.get<std::int64_t>() : 0; }

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed UTF-8 sequence at text[i] whose code point XML 1.0 may hold, or 0.
std::size_t xml_char_length(const std::string& text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') ? 1 : 0;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  const std::uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF) return 0;
  return n;
}

// Escapes text for an attribute value or element content; line breaks and tabs in attributes are
// character references (an XML parser would turn them into spaces otherwise).
std::string xml_escape(const std::string& text, bool attribute) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = xml_char_length(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    const char c = text[i++];
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\r': out += "&#13;"; break;
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      default: out += c;
    }
  }
  return out;
}

std::string attr(const std::string& name, const std::string& value) {
  return fmt::format(" {}=\"{}\"", name, xml_escape(value, true));
}

// One <testcase>: the verdict decides the child; only "Agree" has none.
struct Case {
  std::string classname, name, verdict, reason, details;
  double seconds = NAN;  // NaN: no time attribute
};

std::string row_reason(const Json& row) {
  if (!row.contains("agreement") || !row["agreement"].is_object()) {
    const std::string type = row.contains("error_type") ? str(row["error_type"]) + ": " : "";
    return type + str(row.value("error", Json("(no error message recorded)")));
  }
  const Json& a = row["agreement"];
  if (row["outcome"] == "Inconclusive" && a.contains("inconclusive_reason")) return str(a["inconclusive_reason"]);
  std::string reason = fmt::format(
      "max |solver - oracle| {} against tau atol {}, rtol {} ({}): {} of {} elements outside tau, worst at {}; "
      "same-dtype sequential floor {}; Newton iterations {}, final max|F| {}",
      sci(a["max_abs"]), sci(a["atol"]), sci(a["rtol"]), str(a.value("tolerance_source", Json(""))),
      integer(a["mismatches"]), integer(a["count"]), worst_index_text(a.value("worst_index", Json::object())),
      sci(a["sequential_max_abs"]), integer(a["newton_iters"]), sci(a["max_residual"]));
  if (a.contains("gradients") && a["gradients"].is_object())
    for (const auto& [name, g] : a["gradients"].items())
      if (!g.value("ok", Json(false)).get<bool>())
        reason += fmt::format("; gradient {}: max abs {} (atol {}, rtol {}), {} of {} outside", name,
                              sci(g.value("max_abs", Json())), sci(g.value("atol", Json())), sci(g.value("rtol", Json())),
                              integer(g.value("mismatches", Json(0))), integer(g.value("count", Json(0))));
  return reason;
}

Case row_case(const Json& row) {
  Case c{.classname = "rows." + str(row["variant"]), .name = str(row["id"]), .verdict = str(row["outcome"])};
  if (row.contains("agreement") && row["agreement"].is_object()) {
    double ms = 0.0;
    bool any = false;
    for (const auto& [phase, value] : row["agreement"]["timings_ms"].items())
      if (const double v = number_or_nan(value); std::isfinite(v)) {
        ms += v;
        any = true;
      }
    if (any) c.seconds = ms / 1000.0;
  }
  if (c.verdict == "Agree") return c;
  c.reason = row_reason(row);
  c.details = fmt::format("{}: {}\n", c.verdict, c.reason);
  if (row.contains("repro")) c.details += "repro (from the report folder): " + str(row["repro"]) + "\n";
  if (row.contains("bug_bundle")) c.details += "bug bundle: " + str(row["bug_bundle"]) + "\n";
  if (row.contains("bundle")) c.details += "bundle for the solver's maintainers: " + str(row["bundle"]) + "\n";
  if (!row.contains("repro")) c.details += "repro: none recorded in the report for this row\n";
  return c;
}

Case equivalence_case(const Json& e) {
  Case c{.classname = "equivalences." + str(e["name"]), .name = str(e["id"]), .verdict = str(e["verdict"])};
  if (c.verdict == "Agree") return c;
  if (e.contains("error")) c.reason = str(e["error"]);
  else if (c.verdict == "Inconclusive" && e.contains("reason")) c.reason = str(e["reason"]);
  else
    c.reason = fmt::format("max abs {} against atol {}, rtol {} ({}): {} of {} elements outside{}", sci(e["max_abs"]),
                           sci(e["atol"]), sci(e.value("rtol", Json())), str(e.value("tolerance_source", Json(""))),
                           integer(e.value("mismatches", Json(0))), integer(e.value("count", Json(0))),
                           e.contains("reason") ? " (" + str(e["reason"]) + ")" : "");
  c.details = fmt::format("{}: {}\n", c.verdict, c.reason);
  if (e.contains("repro")) c.details += "repro (from the report folder): " + str(e["repro"]) + "\n";
  return c;
}

}  // namespace

std::string render_junit(const Json& report) {
  validate_report(report, "report");
  std::vector<Case> cases;
  for (const auto& row : report["rows"]) cases.push_back(row_case(row));
  for (const auto& e : report["equivalences"]) cases.push_back(equivalence_case(e));
  const Json& summary = report["summary"];
  if (summary.value("budget_exhausted", Json(false)) == Json(true))
    cases.push_back({.classname = "campaign",
                     .name = "plan",
                     .verdict = "Inconclusive",
                     .reason = fmt::format("time budget exhausted: {} tasks not run (their rows are not in this file)",
                                           integer(summary.value("rows_not_run", Json(0))))});

  std::size_t failures = 0, skipped = 0;
  std::string body;
  for (const Case& c : cases) {
    body += "    <testcase" + attr("classname", c.classname) + attr("name", c.name);
    if (std::isfinite(c.seconds)) body += attr("time", fmt::format("{:.3f}", c.seconds));
    if (c.verdict == "Agree") {
      body += "/>\n";
      continue;
    }
    body += ">\n";
    if (c.verdict == "Inconclusive") {
      ++skipped;
      body += "      <skipped" + attr("message", "Inconclusive: " + c.reason) + "/>\n";
    } else {
      ++failures;
      body += "      <failure" + attr("type", c.verdict) + attr("message", c.verdict + ": " + c.reason) + ">" +
              xml_escape(c.details, false) + "</failure>\n";
    }
    body += "    </testcase>\n";
  }

  const double duration = number_or_nan(summary["duration_s"]);
  const std::string time = std::isfinite(duration) ? attr("time", fmt::format("{:.3f}", duration)) : "";
  const std::string counts = attr("tests", std::to_string(cases.size())) + attr("failures", std::to_string(failures)) +
                             attr("errors", "0") + attr("skipped", std::to_string(skipped)) + time;
  const Json& context = report["context"];
  std::string date = str(context["date_utc"]);
  if (!date.empty() && date.back() == 'Z') date.pop_back();  // JUnit's timestamp has no zone
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += "<testsuites" + attr("name", "pararnn nightly") + counts + ">\n";
  xml += "  <testsuite" + attr("name", "pararnn nightly") + counts + attr("timestamp", date) + ">\n";
  xml += "    <properties>\n";
  for (const char* key : {"pararnn_version", "git_sha", "compiler", "gpu", "date_utc"})
    xml += "      <property" + attr("name", key) + attr("value", str(context[key])) + "/>\n";
  xml += "    </properties>\n";
  xml += body;
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

void write_junit(const Json& report, const std::filesystem::path& path) {
  const std::string xml = render_junit(report);
  write_file_atomically(path, [&](std::ostream& out) { out << xml; });
}

}  // namespace pararnn::reports
