// report diff finds each kind of regression planted in a copy of the golden report, names it,
// and finds none between a report and itself.
#include <gtest/gtest.h>

#include <algorithm>

#include "pararnn/core/errors.hpp"
#include "pararnn/reports/diff.hpp"
#include "test_support.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

Json& row_with(Json& report, const std::string& outcome, const std::string& gradients = "") {
  for (auto& row : report["rows"])
    if (row["outcome"] == outcome && (gradients.empty() || row["gradients"] == gradients)) return row;
  throw std::runtime_error("no such row in the golden report");
}

std::vector<std::string> kinds(const DiffResult& d) {
  std::vector<std::string> out;
  for (const auto& r : d.regressions) out.push_back(r.kind);
  return out;
}

TEST(Diff, AReportAgainstItselfHasNoRegression) {
  const Json r = testing::golden_report();
  const DiffResult d = diff_reports(r, r);
  EXPECT_TRUE(d.regressions.empty()) << d.markdown;
  EXPECT_NE(d.markdown.find("No regression"), std::string::npos);
}

TEST(Diff, ANewDisagreeIsARegressionNamingTheRow) {
  const Json old = testing::golden_report();
  Json now = old;
  Json& row = row_with(now, "Agree");
  const std::string id = row["id"];
  row["outcome"] = "Disagree";
  row["agreement"]["verdict"] = "Disagree";
  row["repro"] = "pararnn verify cases/" + id + ".safetensors";
  const DiffResult d = diff_reports(old, now);
  ASSERT_EQ(d.regressions.size(), 1u) << d.markdown;
  EXPECT_EQ(d.regressions[0].kind, "new_failure");
  EXPECT_EQ(d.regressions[0].key, id);
  EXPECT_NE(d.markdown.find(id), std::string::npos);
  EXPECT_NE(d.markdown.find("## New failures"), std::string::npos);
  // ... and the other way round it is fixed, not a regression.
  const DiffResult back = diff_reports(now, old);
  EXPECT_TRUE(back.regressions.empty()) << back.markdown;
  ASSERT_EQ(back.fixed.size(), 1u);
}

TEST(Diff, ErrorGrowthBeyondTheFactorIsARegressionAndWithinItIsNot) {
  const Json old = testing::golden_report();
  const DiffOptions options{.error_factor = 10.0};
  Json within = old, beyond = old;
  Json& a = row_with(within, "Agree");
  a["agreement"]["max_abs"] = a["agreement"]["max_abs"].get<double>() * 5.0;
  EXPECT_TRUE(diff_reports(old, within, options).regressions.empty());
  Json& b = row_with(beyond, "Agree");
  const double floor = b["agreement"]["sequential_max_abs"].get<double>();
  const double was = b["agreement"]["max_abs"].get<double>();
  b["agreement"]["max_abs"] = 100.0 * std::max(was, floor);  // still Agree in the planted JSON
  const DiffResult d = diff_reports(old, beyond, options);
  EXPECT_EQ(kinds(d), std::vector<std::string>{"error_growth"}) << d.markdown;
}

TEST(Diff, KstarIncreaseAndKstarNoLongerReachedAreRegressions) {
  const Json old = testing::golden_report();
  Json now = old;
  ASSERT_GE(now["kstar"].size(), 2u);
  std::size_t raised = 0, lost = 0;
  for (std::size_t i = 0; i < now["kstar"].size(); ++i)
    if (now["kstar"][i]["max_kstar"].get<std::int64_t>() >= 0) {
      if (!raised) {
        now["kstar"][i]["max_kstar"] = now["kstar"][i]["max_kstar"].get<std::int64_t>() + 1;
        raised = i + 1;
      } else if (!lost) {
        now["kstar"][i]["max_kstar"] = -1;
        lost = i + 1;
      }
    }
  ASSERT_TRUE(raised && lost);
  const DiffResult d = diff_reports(old, now);
  EXPECT_EQ(kinds(d), (std::vector<std::string>{"kstar_increase", "kstar_increase"})) << d.markdown;
  EXPECT_NE(d.markdown.find("not reached"), std::string::npos);
}

TEST(Diff, TimeRegressionBeyondTheNoiseBandOnly) {
  Json old = testing::golden_report();
  const Json first = old["rows"][0];
  const auto same_group = [&](const Json& row) {
    return row["variant"] == first["variant"] && row["dtype"] == first["dtype"] && row["T"] == first["T"] &&
           row["class"] == first["class"] && row["backend"] == first["backend"] && row.contains("agreement");
  };
  const auto set_newton_ms = [&](Json& report, double ms, double repeat_spread = 1.0) {
    for (auto& row : report["rows"])
      if (same_group(row)) {
        row["agreement"]["timings_ms"]["newton"] = ms;
        if (row.contains("newton_ms_repeats")) row["newton_ms_repeats"] = Json::array({ms, ms * repeat_spread, ms});
      }
  };
  set_newton_ms(old, 100.0);
  Json slower = old, noisy = old, tiny_old = old, tiny_new = old;
  set_newton_ms(slower, 300.0);  // 3x: beyond the 50 % band and the 5 ms floor
  const DiffResult d = diff_reports(old, slower, {.time_noise = 0.5, .time_floor_ms = 5});
  ASSERT_EQ(kinds(d), std::vector<std::string>{"time_regression"}) << d.markdown;
  set_newton_ms(noisy, 130.0);  // 1.3x: inside the band
  EXPECT_TRUE(diff_reports(old, noisy, {.time_noise = 0.5, .time_floor_ms = 5}).regressions.empty());
  set_newton_ms(tiny_old, 0.5);  // 8x, but 3.5 ms: below the floor
  set_newton_ms(tiny_new, 4.0);
  EXPECT_TRUE(diff_reports(tiny_old, tiny_new, {.time_noise = 0.5, .time_floor_ms = 5}).regressions.empty());
  // Repeats that spread 4x (a loaded machine) widen the band: 3x is then noise.
  ASSERT_TRUE(first.contains("newton_ms_repeats")) << "the golden report's init rows carry their repeats";
  Json spread_old = old, spread_new = old;
  set_newton_ms(spread_old, 100.0, 4.0);
  set_newton_ms(spread_new, 300.0);
  EXPECT_TRUE(diff_reports(spread_old, spread_new, {.time_noise = 0.5, .time_floor_ms = 5}).regressions.empty());
  // The same 3x under a different number of campaign tasks at once is not compared, and says so;
  // with equal jobs it is found again.
  Json serial = old, parallel = slower;
  serial["plan"]["jobs"] = 1;
  parallel["plan"]["jobs"] = 16;
  const DiffResult loads = diff_reports(serial, parallel, {.time_noise = 0.5, .time_floor_ms = 5});
  EXPECT_TRUE(loads.regressions.empty()) << loads.markdown;
  EXPECT_NE(loads.markdown.find("Times not compared"), std::string::npos) << loads.markdown;
  serial["plan"]["jobs"] = 16;
  EXPECT_EQ(kinds(diff_reports(serial, parallel, {.time_noise = 0.5, .time_floor_ms = 5})),
            std::vector<std::string>{"time_regression"});
}

TEST(Diff, GradientsNoLongerJudgedIsARegression) {
  const Json old = testing::golden_report();
  Json now = old;
  Json& row = row_with(now, "Agree", "judged");
  row["gradients"] = "not_applicable";
  row["gradients_reason"] = "UnsupportedPath: planted";
  const DiffResult d = diff_reports(old, now);
  EXPECT_EQ(kinds(d), std::vector<std::string>{"gradients_lost"}) << d.markdown;
}

TEST(Diff, RefusesThresholdsOutsideTheirRules) {
  const Json r = testing::golden_report();
  EXPECT_THROW((void)diff_reports(r, r, {.error_factor = 1.0}), ContractViolation);
  EXPECT_THROW((void)diff_reports(r, r, {.time_noise = -0.1}), ContractViolation);
}

}  // namespace
}  // namespace pararnn::reports
