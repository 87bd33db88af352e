// libFuzzer target: report JSON (reports/report_json.hpp) as `pararnn report render` and
// `report diff` read it. Claim: text that is not JSON, or JSON that is not a valid report, is
// refused with a typed error (validate_report); an accepted report renders to Markdown and
// diffs against itself without an exception.
#include <nlohmann/json.hpp>

#include "fuzz_input.hpp"
#include "pararnn/reports/diff.hpp"
#include "pararnn/reports/render.hpp"
#include "pararnn/reports/report_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  const auto path = fuzz::input_file(data, size, "report");
  nlohmann::ordered_json report;
  if (!fuzz::accepts([&] { report = reports::load_report(path); })) return 0;
  (void)fuzz::accepts([&] { (void)reports::render_markdown(report, /*plots=*/false); });
  (void)fuzz::accepts([&] { (void)reports::diff_reports(report, report); });
  return 0;
}
