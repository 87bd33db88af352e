// The renderers read the JSON only: the committed golden report renders to the committed
// Markdown byte for byte, and its figures hold the report's numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "pararnn/reports/render.hpp"
#include "test_support.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;

const Series* find_series(const Figure& f, const std::string& title) {
  for (const Panel& p : f.panels)
    for (const Series& s : p.series)
      if (s.title == title) return &s;
  return nullptr;
}

TEST(Render, GoldenJsonRendersToTheGoldenMarkdown) {
  const std::string expected = testing::read_text(testing::golden_dir() / "nightly.md");
  const std::string actual = render_markdown(testing::golden_report(), true);
  if (actual != expected) {
    const auto out = testing::scratch("render") / "nightly.actual.md";
    std::ofstream(out) << actual;
    FAIL() << "report.md differs from reports/tests/golden/nightly.md; the actual text is in " << out
           << " (update the golden file only for an intended change)";
  }
}

// The header says how strong the suites of the build were when the report carries the fault
// catalog's summary (its numbers, not fixed text), and says nothing of it when it does not.
TEST(Render, HeaderStatesTheFaultCatalogWhenTheReportCarriesIt) {
  Json r = testing::golden_report();
  ASSERT_FALSE(r["context"].contains("fault_catalog"));
  EXPECT_EQ(render_markdown(r, false).find("planted faults"), std::string::npos);
  r["context"]["fault_catalog"] = {{"source", "docs/faults/catalog.json"}, {"last_run", "2026-12-05T11:14:15+00:00"},
                                   {"faults", 26}, {"run", 25}, {"caught", 24},
                                   {"cpu", {{"faults", 23}, {"run", 23}, {"caught", 23}}},
                                   {"gpu", {{"faults", 3}, {"run", 2}, {"caught", 1}}}};
  const std::string md = render_markdown(r, false);
  EXPECT_NE(md.find("against the 26 planted faults of the catalog: 24 caught (cpu 23 caught of 23 run, gpu 1 caught of 2 "
                    "run; docs/faults/catalog.json, last run 2026-12-05T11:14:15+00:00)"),
            std::string::npos)
      << md.substr(0, 800);
  // Detections older than a change to their fault point's files are stale, never caught (issue 58).
  r["context"]["fault_catalog"]["caught"] = 7;
  r["context"]["fault_catalog"]["stale"] = 17;
  r["context"]["fault_catalog"]["cpu"] = {{"faults", 23}, {"run", 23}, {"caught", 6}, {"stale", 17}};
  r["context"]["fault_catalog"]["gpu"] = {{"faults", 3}, {"run", 2}, {"caught", 1}, {"stale", 0}};
  const std::string stale = render_markdown(r, false);
  EXPECT_NE(stale.find("against the 26 planted faults of the catalog: 7 caught, 17 stale (cpu 6 caught, 17 stale of "
                       "23 run, gpu 1 caught of 2 run;"),
            std::string::npos)
      << stale.substr(0, 800);
}

TEST(Render, FailuresComeFirstWithTheirReplayLines) {
  const Json r = testing::golden_report();
  const std::string md = render_markdown(r, true);
  const auto failures = md.find("## Failures");
  ASSERT_NE(failures, std::string::npos);
  EXPECT_LT(md.find("## Summary"), failures);
  EXPECT_LT(failures, md.find("## Agreement by variant"));
  for (const auto& row : r["rows"])
    if (row["outcome"] != "Agree") {
      EXPECT_NE(md.find(row["repro"].get<std::string>()), std::string::npos) << row["id"];
      EXPECT_NE(md.find(row["bug_bundle"].get<std::string>()), std::string::npos) << row["id"];
    }
}

// A failing row says why its case is hard when the report carries λ̂ (AgreementReport::lyapunov),
// or why there is no number; a report without the field renders as before.
TEST(Render, AFailingRowSaysWhyItsCaseIsHardFromLambdaHat) {
  Json r = testing::golden_report();
  const std::string before = render_markdown(r, true);
  EXPECT_EQ(before.find("why hard"), std::string::npos);
  std::size_t failing = r["rows"].size();
  for (std::size_t i = 0; i < r["rows"].size(); ++i)
    if (r["rows"][i]["outcome"] != "Agree" && r["rows"][i].contains("agreement")) failing = i;
  ASSERT_LT(failing, r["rows"].size());
  r["rows"][failing]["agreement"]["lyapunov"] = {{"max", 0.031}, {"median", -0.5}, {"fraction_positive", 0.25},
                                                 {"stretch", std::log(773.0)}, {"window", 64}, {"units", 8},
                                                 {"chains", 2}, {"chains_total", 2}, {"method", "Benettin dense"}};
  const std::string md = render_markdown(r, true);
  EXPECT_NE(md.find("why hard: λ̂ (the largest Lyapunov exponent along the oracle's trajectory) max 3.10e-02, "
                    "median -5.00e-01, positive in 2 of 8 unit(s); the largest growth of an error over 64 steps: x7.73e+02"),
            std::string::npos)
      << md;
  r["rows"][failing]["agreement"]["lyapunov"] = {{"reason", "not estimated: the oracle's trajectory is not certified"}};
  EXPECT_NE(render_markdown(r, true).find("why hard: λ̂ not estimated: the oracle's trajectory is not certified"),
            std::string::npos);
}

TEST(Render, ChangingOneNumberOfTheJsonChangesTheMarkdown) {
  Json r = testing::golden_report();
  const std::string before = render_markdown(r, true);
  r["rows"][0]["agreement"]["max_abs"] = 0.5;
  EXPECT_NE(render_markdown(r, true), before);
  EXPECT_NE(render_markdown(r, true).find("5.00e-01"), std::string::npos);
}

TEST(Render, ErrorFigureHoldsTheMaximumOfTheRowsAndTheFloor) {
  const Json r = testing::golden_report();
  const auto figures = report_figures(r);
  const auto it = std::find_if(figures.begin(), figures.end(), [](const Figure& f) { return f.name == "error-f32-init"; });
  ASSERT_NE(it, figures.end());
  const Series* solver = find_series(*it, "gru");
  const Series* floor = find_series(*it, "gru floor");
  ASSERT_TRUE(solver && floor && find_series(*it, "tau (atol)"));
  double e64 = 0.0, f64 = 0.0;
  for (const auto& row : r["rows"])
    if (row["variant"] == "gru" && row["class"] == "init" && row["T"] == 64 && row.contains("agreement")) {
      e64 = std::max(e64, row["agreement"]["max_abs"].get<double>());
      f64 = std::max(f64, row["agreement"]["sequential_max_abs"].get<double>());
    }
  ASSERT_FALSE(solver->points.empty());
  EXPECT_EQ(solver->points.front(), std::make_pair(64.0, e64));
  EXPECT_EQ(floor->points.front(), std::make_pair(64.0, f64));
}

TEST(Render, EveryFailingRowWithAProfileGetsAFigureUpToTheLimit) {
  const Json r = testing::golden_report();
  std::size_t with_profile = 0;
  for (const auto& row : r["rows"])
    if (row["outcome"] != "Agree" && row.contains("error_along_t") && row["error_along_t"].contains("t")) ++with_profile;
  ASSERT_GT(with_profile, 0u);
  std::size_t failure_figures = 0;
  for (const Figure& f : report_figures(r))
    if (f.name.rfind("failure-", 0) == 0) {
      ++failure_figures;
      ASSERT_EQ(f.panels.size(), 2u);
      EXPECT_NE(find_series(f, "solver"), nullptr);
      EXPECT_NE(find_series(f, "sequential loop (same dtype)"), nullptr);
    }
  EXPECT_EQ(failure_figures, std::min(with_profile, kMaxFailureFigures));
}

TEST(Render, KstarFigureLeavesOutUnreachedKstar) {
  const Json r = testing::golden_report();
  for (const Figure& f : report_figures(r))
    if (f.name == "kstar-f32")
      for (const Series& s : f.panels[0].series)
        for (const auto& [t, k] : s.points) EXPECT_GE(k, 0.0) << s.title << " T=" << t;
}

// The predicted K (issue 45): each K* cell shows it after an arrow ('-' without a number), the
// figure carries it as markers, the summary's counts give the hit rate; λ̂ vs T is plotted from the
// rows' estimates (max over seeds).
TEST(Render, KstarTableAndFigureCarryThePredictedKAndLambdaHatIsPlottedAgainstT) {
  Json r = testing::golden_report();
  ASSERT_GE(r["kstar"].size(), 2u);
  r["kstar"][0]["max_predicted_k"] = 7;
  r["kstar"][1]["max_predicted_k"] = nullptr;
  r["summary"]["kstar_predicted"] = {{"hit", 3}, {"over", 1}, {"under", 0}, {"none", 4}};
  const std::string md = render_markdown(r, false);
  EXPECT_NE(md.find(" → 7 |"), std::string::npos);
  EXPECT_NE(md.find(" → - |"), std::string::npos);
  EXPECT_NE(md.find("3 hit (K* - 1 to K* + 1), 1 over, **0 under**, 4 without a number; hit rate 38% of 8 (75% of the 4 "
                    "with a number)"),
            std::string::npos);
  const std::string variant = r["kstar"][0]["variant"], cls = r["kstar"][0]["class"], dtype = r["kstar"][0]["dtype"];
  const auto figures = report_figures(r);
  const auto kstar = std::find_if(figures.begin(), figures.end(), [&](const Figure& f) { return f.name == "kstar-" + dtype; });
  ASSERT_NE(kstar, figures.end());
  const Series* predicted = find_series(*kstar, variant + " " + cls + " predicted");
  ASSERT_NE(predicted, nullptr);
  EXPECT_TRUE(predicted->points_only);
  EXPECT_EQ(predicted->points, (std::vector<std::pair<double, double>>{{r["kstar"][0]["T"].get<double>(), 7.0}}));

  // λ̂: plant two rows' estimates of one (variant, init) at two T and read them back.
  std::vector<std::int64_t> planted;
  for (auto& row : r["rows"])
    if (row["dtype"] == "f32" && row["class"] == "init" && row["variant"] == "gru" && row.contains("agreement") &&
        std::find(planted.begin(), planted.end(), row["T"].get<std::int64_t>()) == planted.end() && planted.size() < 2) {
      planted.push_back(row["T"].get<std::int64_t>());
      row["agreement"]["lyapunov"] = {{"max", -0.25 * static_cast<double>(planted.size())}};
    } else if (row.contains("agreement")) {
      row["agreement"].erase("lyapunov");
    }
  ASSERT_EQ(planted.size(), 2u);
  const auto again = report_figures(r);
  const auto lambda = std::find_if(again.begin(), again.end(), [](const Figure& f) { return f.name == "lambda-f32"; });
  ASSERT_NE(lambda, again.end());
  const Series* gru = find_series(*lambda, "gru init");
  ASSERT_NE(gru, nullptr);
  EXPECT_EQ(gru->points, (std::vector<std::pair<double, double>>{{static_cast<double>(planted[0]), -0.25},
                                                                 {static_cast<double>(planted[1]), -0.5}}));
}

TEST(Render, GnuplotProgramNamesEverySeriesAndBothTerminals) {
  const Figure f{.name = "x", .title = "t",
                 .panels = {{.title = "p", .logy = true,
                             .series = {{.title = "it's one", .points = {{1, 1e-3}, {2, 0.0}}},
                                        {.title = "never shown", .points = {{1, -1.0}}}}}}};
  const std::string program = gnuplot_program(f, "data.txt", "x.svg", "x.png");
  EXPECT_NE(program.find("title 'it''s one'"), std::string::npos) << program;
  EXPECT_EQ(program.find("never shown"), std::string::npos) << "a series without a point a log axis can show is left out";
  EXPECT_NE(program.find("set terminal svg"), std::string::npos);
  EXPECT_NE(program.find("set terminal pngcairo"), std::string::npos);
}

TEST(Render, NaNIsWrittenAsNaNNeverAsANumber) {
  EXPECT_EQ(sci(Json(nullptr)), "NaN");
  EXPECT_EQ(sci(NAN), "NaN");
  EXPECT_EQ(sci(1.5e-7), "1.50e-07");
}

}  // namespace
}  // namespace pararnn::reports
