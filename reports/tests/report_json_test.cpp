// report.json is ours or refused: another schema version, a truncated file, a document that is
// not a pararnn nightly report, and missing keys are refused naming the file and the key.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "pararnn/core/errors.hpp"
#include "pararnn/reports/report_json.hpp"
#include "test_support.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

// Writes `text` to a file and returns the ContractViolation load_report raises for it.
ContractViolation refusal_of(const std::string& name, const std::string& text) {
  const auto path = testing::scratch("report_json") / name;
  std::ofstream(path, std::ios::binary) << text;
  try {
    (void)load_report(path);
  } catch (const ContractViolation& e) {
    EXPECT_NE(std::string(e.argument()).find(path.string()), std::string::npos) << e.what();
    return e;
  }
  ADD_FAILURE() << "load_report accepted " << name;
  return ContractViolation("none", "none", "none");
}

TEST(ReportJson, GoldenReportIsAcceptedWithItsSchema) {
  const Json r = testing::golden_report();
  EXPECT_EQ(r["format"], kReportFormat);
  EXPECT_EQ(r["schema_version"], kNightlySchemaVersion);
  EXPECT_EQ(r["summary"]["rows"].get<std::size_t>(), r["rows"].size());
}

TEST(ReportJson, AnotherSchemaVersionIsRefusedNamingTheKey) {
  Json r = testing::golden_report();
  r["schema_version"] = kNightlySchemaVersion + 1;
  const ContractViolation e = refusal_of("v2.json", r.dump());
  EXPECT_NE(e.argument().find("'schema_version'"), std::string::npos) << e.what();
  EXPECT_NE(e.value().find(std::to_string(kNightlySchemaVersion + 1)), std::string::npos) << e.what();
}

TEST(ReportJson, TruncatedFileIsRefused) {
  const std::string text = testing::golden_report().dump(2);
  const ContractViolation e = refusal_of("truncated.json", text.substr(0, text.size() / 2));
  EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  EXPECT_NE(e.value().find("parse error at byte"), std::string::npos) << e.what();
}

// fuzz_report_json's finding (2026-12-01): a number beyond a double's range escaped load_report
// as nlohmann's untyped out_of_range.
TEST(ReportJson, NumberBeyondADoubleIsRefusedTyped) {
  std::string text = testing::golden_report().dump();
  const std::string key = "\"schema_version\":";
  const std::size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"huge\":2.0637708e36342547,");
  const ContractViolation e = refusal_of("huge_number.json", text);
  EXPECT_NE(e.argument().find("(document)"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("double"), std::string::npos) << e.what();
}

TEST(ReportJson, DocumentThatIsNotOursIsRefused) {
  const ContractViolation agreement = refusal_of("agreement.json", R"({"ok": true, "schema_version": 1})");
  EXPECT_NE(agreement.argument().find("'format'"), std::string::npos) << agreement.what();
  Json r = testing::golden_report();
  r["format"] = "google-benchmark";
  const ContractViolation other = refusal_of("other.json", r.dump());
  EXPECT_NE(other.argument().find("'format'"), std::string::npos) << other.what();
  const ContractViolation array = refusal_of("array.json", "[1, 2, 3]");
  EXPECT_NE(array.argument().find("(document)"), std::string::npos) << array.what();
}

TEST(ReportJson, RowWithoutItsAgreementIsRefusedNamingThePath) {
  Json r = testing::golden_report();
  ASSERT_EQ(r["rows"][0]["outcome"], "Disagree");
  r["rows"][0].erase("agreement");
  const ContractViolation e = refusal_of("no_agreement.json", r.dump());
  EXPECT_NE(e.argument().find("'rows[0].agreement'"), std::string::npos) << e.what();
}

TEST(ReportJson, OutcomeThatContradictsItsVerdictIsRefused) {
  Json r = testing::golden_report();
  r["rows"][0]["outcome"] = "Agree";  // the AgreementReport says Disagree: never a pass
  const ContractViolation e = refusal_of("contradiction.json", r.dump());
  EXPECT_NE(e.argument().find("rows[0].agreement.verdict"), std::string::npos) << e.what();
}

TEST(ReportJson, SummaryMustCountTheRows) {
  Json r = testing::golden_report();
  r["rows"].erase(r["rows"].begin());
  const ContractViolation e = refusal_of("count.json", r.dump());
  EXPECT_NE(e.argument().find("'summary.rows'"), std::string::npos) << e.what();
}

TEST(ReportJson, NonFiniteNumbersReadBackAsNaN) {
  EXPECT_TRUE(std::isnan(number_or_nan(Json(nullptr))));
  EXPECT_EQ(number_or_nan(Json(0.25)), 0.25);
  Json j = {{"x", NAN}};
  EXPECT_TRUE(j.dump().find("null") != std::string::npos);
}

// The report's context carries the fault catalog's summary as the source tree records it: the
// counts equal those read here from docs/faults/catalog.json (each fault and whether it was
// detected) and property_tests/faults/catalog.json (which are GPU faults), and a report whose
// summary is malformed is refused naming the key.
TEST(ReportJson, ContextCarriesTheFaultCatalogAsTheSourceTreeRecordsIt) {
  const std::filesystem::path root = PARARNN_SOURCE_DIR;
  const Json record = Json::parse(testing::read_text(root / "docs/faults/catalog.json"));
  const Json plan = Json::parse(testing::read_text(root / "property_tests/faults/catalog.json"));
  std::set<std::string> gpu;
  for (const Json& f : plan["faults"])
    if (f.value("gpu_only", false)) gpu.insert(f["name"].get<std::string>());
  std::map<std::string, std::array<long long, 3>> counts;  // side -> faults, run, caught
  for (const Json& f : record["faults"]) {
    auto& c = counts[gpu.contains(f["name"].get<std::string>()) ? "gpu" : "cpu"];
    ++c[0];
    if (f["detected"].is_boolean()) {
      ++c[1];
      if (f["detected"].get<bool>()) ++c[2];
    }
  }
  const Json context = context_block(BuildContext{}, {"pararnn", "report", "nightly"}, {1});
  const Json& summary = context.at("fault_catalog");
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["faults"].get<long long>(), static_cast<long long>(record["faults"].size()));
  for (const char* side : {"cpu", "gpu"}) {
    const auto& c = counts[side];
    EXPECT_EQ(summary[side]["faults"].get<long long>(), c[0]) << side;
    EXPECT_EQ(summary[side]["run"].get<long long>(), c[1]) << side;
    // Each detection is caught or stale (issue 58: stale once the files of its fault point changed
    // since its run; which is which is the script's rule, checked by fault_catalog_staleness).
    EXPECT_EQ(summary[side]["caught"].get<long long>() + summary[side]["stale"].get<long long>(), c[2]) << side;
  }
  EXPECT_EQ(summary["caught"].get<long long>() + summary["stale"].get<long long>(), counts["cpu"][2] + counts["gpu"][2]);
  EXPECT_GT(counts["gpu"][0], 0) << "the catalog holds a GPU fault: the backend split is exercised";

  Json r = testing::golden_report();
  r["context"]["fault_catalog"] = summary;
  EXPECT_NO_THROW(validate_report(r, "with.json"));
  r["context"]["fault_catalog"]["caught"] = "all";
  const ContractViolation e = refusal_of("bad_catalog.json", r.dump());
  EXPECT_NE(std::string(e.what()).find("context.fault_catalog.caught"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace pararnn::reports
