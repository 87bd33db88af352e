// The JUnit writer reads the JSON only and never claims a pass the report does not: every row and
// equivalence is one testcase, parsed back here with a real XML parser (pugixml); Disagree and
// Error are failures carrying their reason and repro, Inconclusive is skipped with its reason,
// only Agree passes; the counts are the testcases'; hostile text survives the round trip; a
// refused report or an unwritable path leaves no file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <pugixml.hpp>

#include <cmath>
#include <map>

#include "pararnn/core/errors.hpp"
#include "pararnn/reports/junit.hpp"
#include "pararnn/reports/render.hpp"
#include "test_support.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

// Text no XML writer may pass through unescaped, and a control character XML 1.0 cannot hold.
const std::string kHostile = "a<b & c>d \"q\" 'a' ]]> \x01 end\nsecond line";
const std::string kHostileReadBack = "a<b & c>d \"q\" 'a' ]]> \xEF\xBF\xBD end\nsecond line";

// The golden report (Agree, Disagree and Error rows, Agree equivalences) with an Inconclusive row
// and a Disagree, an Error and an Inconclusive equivalence planted.
Json every_verdict_report() {
  Json r = testing::golden_report();
  for (auto& row : r["rows"])
    if (row["outcome"] == "Agree") {
      row["outcome"] = "Inconclusive";
      row["agreement"]["verdict"] = "Inconclusive";
      row["agreement"]["inconclusive_reason"] = "oracle not certified: " + kHostile;
      break;
    }
  auto& eq = r["equivalences"];
  eq[0]["verdict"] = "Disagree";
  eq[0]["max_abs"] = 0.25;
  eq[0]["mismatches"] = 3;
  eq[1]["verdict"] = "Error";
  eq[1]["max_abs"] = nullptr;
  eq[1]["atol"] = nullptr;
  eq[1]["error"] = "threw: " + kHostile;
  eq[2]["verdict"] = "Inconclusive";
  eq[2]["reason"] = "2 NaN and 0 infinite values: not judged";
  return r;
}

pugi::xml_document parse(const std::string& xml) {
  pugi::xml_document doc;
  const pugi::xml_parse_result result = doc.load_string(xml.c_str());
  EXPECT_TRUE(result) << "not well-formed XML: " << result.description() << " at offset " << result.offset;
  return doc;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Junit, EveryVerdictMapsToItsTestcaseAndTheCountsAreTheTestcases) {
  const Json r = every_verdict_report();
  const pugi::xml_document doc = parse(render_junit(r));
  const pugi::xml_node suite = doc.child("testsuites").child("testsuite");
  ASSERT_TRUE(suite);

  std::map<std::string, const Json*> by_id;
  std::map<std::string, int> want;
  for (const auto& row : r["rows"]) {
    by_id[row["id"].get<std::string>()] = &row;
    ++want[row["outcome"].get<std::string>()];
  }
  for (const auto& e : r["equivalences"]) {
    by_id[e["id"].get<std::string>()] = &e;
    ++want[e["verdict"].get<std::string>()];
  }
  ASSERT_GT(want["Agree"], 0);
  ASSERT_GT(want["Disagree"], 0);
  ASSERT_GT(want["Error"], 0);
  ASSERT_GT(want["Inconclusive"], 0);

  const int tests = static_cast<int>(r["rows"].size() + r["equivalences"].size());
  for (const pugi::xml_node counted : {suite, doc.child("testsuites")}) {
    EXPECT_EQ(counted.attribute("tests").as_int(-1), tests);
    EXPECT_EQ(counted.attribute("failures").as_int(-1), want["Disagree"] + want["Error"]);
    EXPECT_EQ(counted.attribute("skipped").as_int(-1), want["Inconclusive"]);
    EXPECT_EQ(counted.attribute("errors").as_int(-1), 0);
    EXPECT_DOUBLE_EQ(counted.attribute("time").as_double(-1), r["summary"]["duration_s"].get<double>());
  }

  int seen = 0;
  for (const pugi::xml_node tc : suite.children("testcase")) {
    ++seen;
    const std::string name = tc.attribute("name").value();
    ASSERT_TRUE(by_id.contains(name)) << "a testcase that is no row nor equivalence: " << name;
    const Json& item = *by_id[name];
    const bool is_row = item.contains("outcome");
    const std::string verdict = (is_row ? item["outcome"] : item["verdict"]).get<std::string>();
    const pugi::xml_node failure = tc.child("failure");
    const pugi::xml_node skipped = tc.child("skipped");
    EXPECT_FALSE(tc.child("error")) << name;
    if (verdict == "Agree") {
      EXPECT_FALSE(failure) << name << " is Agree but carries a failure";
      EXPECT_FALSE(skipped) << name << " is Agree but is skipped";
    } else if (verdict == "Inconclusive") {
      EXPECT_FALSE(failure) << name;
      ASSERT_TRUE(skipped) << name << " is Inconclusive but not skipped";
      const std::string reason =
          is_row ? "oracle not certified: " + kHostileReadBack : item["reason"].get<std::string>();
      EXPECT_EQ(skipped.attribute("message").value(), "Inconclusive: " + reason) << name;
    } else {
      EXPECT_FALSE(skipped) << name;
      ASSERT_TRUE(failure) << name << " is " << verdict << " but carries no failure";
      EXPECT_EQ(failure.attribute("type").value(), verdict) << name;
      const std::string message = failure.attribute("message").value();
      const std::string text = failure.text().get();
      std::string reason;
      if (item.contains("error")) reason = item["error"].get<std::string>() == "threw: " + kHostile
                                               ? "threw: " + kHostileReadBack
                                               : item["error"].get<std::string>();
      else if (is_row) reason = "max |solver - oracle| " + sci(item["agreement"]["max_abs"]);
      else reason = "max abs " + sci(item["max_abs"]);
      EXPECT_TRUE(contains(message, reason)) << name << ": the failure's message does not carry the reason '" << reason
                                             << "': " << message;
      EXPECT_TRUE(contains(text, reason)) << name;
      if (item.contains("repro")) {
        EXPECT_TRUE(contains(text, item["repro"].get<std::string>())) << name << ": no repro line in " << text;
        EXPECT_TRUE(contains(text, item["bug_bundle"].get<std::string>())) << name;
      }
    }
    // A row's time is its AgreementReport's phases, in seconds to the millisecond; an Error row has none.
    if (is_row && item.contains("agreement")) {
      double ms = 0;
      for (const auto& [phase, v] : item["agreement"]["timings_ms"].items()) ms += v.get<double>();
      EXPECT_EQ(std::string(tc.attribute("time").value()), fmt::format("{:.3f}", ms / 1000.0)) << name;
    } else {
      EXPECT_FALSE(tc.attribute("time")) << name;
    }
  }
  EXPECT_EQ(seen, tests);
}

TEST(Junit, ARunCutByTheBudgetIsNeverAllPassed) {
  Json r = testing::golden_report();
  r["summary"]["budget_exhausted"] = true;
  r["summary"]["rows_not_run"] = 7;
  const pugi::xml_document doc = parse(render_junit(r));
  const pugi::xml_node suite = doc.child("testsuites").child("testsuite");
  const pugi::xml_node plan = suite.find_child_by_attribute("testcase", "name", "plan");
  ASSERT_TRUE(plan);
  EXPECT_STREQ(plan.attribute("classname").value(), "campaign");
  ASSERT_TRUE(plan.child("skipped"));
  EXPECT_TRUE(contains(plan.child("skipped").attribute("message").value(), "7 tasks not run"));
}

TEST(Junit, GoldenJsonRendersToTheGoldenJunit) {
  const std::string expected = testing::read_text(testing::golden_dir() / "nightly.junit.xml");
  const std::string actual = render_junit(testing::golden_report());
  if (actual != expected) {
    const auto out = testing::scratch("junit") / "nightly.actual.junit.xml";
    std::ofstream(out) << actual;
    FAIL() << "the JUnit XML differs from reports/tests/golden/nightly.junit.xml; the actual text is in " << out
           << " (update the golden file only for an intended change)";
  }
}

TEST(Junit, ARefusedReportOrAnUnwritablePathLeavesNoFile) {
  const auto dir = testing::scratch("junit");
  Json r = testing::golden_report();
  r["rows"][0].erase("outcome");
  EXPECT_THROW(write_junit(r, dir / "junit.xml"), ContractViolation);
  EXPECT_THROW(write_junit(testing::golden_report(), dir / "missing" / "junit.xml"), std::exception);
  write_junit(testing::golden_report(), dir / "written.xml");
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "written.xml"));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "written.xml") << "left behind: " << e.path();
  }
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace pararnn::reports
