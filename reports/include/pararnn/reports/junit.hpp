// A parsed report.json as JUnit XML, for CI systems that show test results (`pararnn report
// nightly --junit FILE`, `pararnn report render --junit FILE`). Rendered from the JSON only, like
// report.md, so an old run re-renders the same way.
//
// One <testsuite name="pararnn nightly"> inside <testsuites>, one <testcase> per row of the report
// (classname "rows.<variant>", name the row id) and per equivalence check (classname
// "equivalences.<name>", name its id), in the report's order; when the time budget cut the plan,
// one more testcase, "campaign.plan", <skipped> with the number of tasks not run.
// Guarantees:
// - Only "Agree" passes. Disagree and Error (and any other verdict that is not Inconclusive) are a
//   <failure> whose message is the reason (the numbers against τ, the gradients outside, the
//   error) and whose text adds the row's repro and bug-bundle lines (run from the report folder);
//   Inconclusive is <skipped> with its reason. So the file never claims a pass the report does not.
// - tests, failures, errors (always 0: an Error row is a failure) and skipped are counted from the
//   testcases written; a row's time is the sum of its AgreementReport's timings_ms, in seconds
//   (none for an Error row); the suite's time is summary.duration_s.
// - All text is XML-escaped; characters XML 1.0 cannot hold (control characters) become U+FFFD.
// - write_junit validates the report first (validate_report) and writes through
//   write_file_atomically: on any failure no partial file is left at `path` (a file already there
//   stays as it was; `report nightly --junit` removes it before the campaign starts).
// Example:
//   write_junit(load_report("nightly/report.json"), "nightly/junit.xml");
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace pararnn::reports {

// The XML text (UTF-8, with its declaration).
std::string render_junit(const nlohmann::ordered_json& report);

// Writes render_junit(report) to `path` atomically.
void write_junit(const nlohmann::ordered_json& report, const std::filesystem::path& path);

}  // namespace pararnn::reports
