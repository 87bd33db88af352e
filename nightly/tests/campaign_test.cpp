// run_campaign: its report is bit for bit the golden report of a small plan (timings aside, and the
// judged gradients' error metrics and λ̂ within the oracle's own rounding bands), made
// by the campaign before it moved out of reports/ (nightly/tests/golden/README.md); and its time
// budget: a task still running when the budget runs out stops at its next phase boundary and is
// counted as not run; nothing of it reaches the report.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

#include "pararnn/contracts/tolerance.hpp"
#include "assemble.hpp"  // campaign_exit_code
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/nightly/campaign.hpp"
#include "test_support.hpp"

namespace pararnn::nightly {
namespace {

using Json = nlohmann::ordered_json;
using reports::load_report;
namespace testing = reports::testing;

// The keys that hold timings or the machine (nightly/tests/golden/README.md): dropped at every depth.
const std::set<std::string> kTimingKeys = {"timings_ms", "newton_ms_repeats", "duration_s", "context", "jobs",
                                           "threads_per_job", "task_seconds_total", "slowest_tasks"};

Json without_timings(const Json& j) {
  if (j.is_object()) {
    Json out = Json::object();
    for (const auto& [key, value] : j.items())
      if (!kTimingKeys.contains(key)) out[key] = without_timings(value);
    return out;
  }
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& v : j) out.push_back(without_timings(v));
    return out;
  }
  return j;
}

// Two kinds of values show the oracle's last-ulp rounding, which depends on the machine (glibc
// picks its exp/tanh/log for the CPU at run time): a judged gradient's error metrics (max_abs,
// max_rel, mean_abs: differences of nearly equal values; the Hopfield rows' max_abs moved by
// 5.6e-17 between two x86-64 machines) and λ̂ and the stretch (means and sums of log|J| of the
// oracle's double Jacobians), with the predicted K's inputs from them. The golden holds them to the oracle's own bands (double vs
// float128); every other value, bit for bit.
bool within_the_oracles_rounding(const Json& a, const Json& b, const std::string& path) {
  static const std::set<std::string> kErrorMetrics = {"max_abs", "max_rel", "mean_abs"};
  static const std::set<std::string> kLyapunov = {"max", "median", "stretch"};
  const std::size_t dot = path.rfind('.');
  if (!a.is_number() || !b.is_number() || dot == std::string::npos) return false;
  const std::string key = path.substr(dot + 1);
  const double difference = std::abs(a.get<double>() - b.get<double>());
  if (path.find(".gradients.") != std::string::npos && kErrorMetrics.contains(key))
    return difference <= oracle_band(OracleBand::gradient_double_vs_float128).atol;
  if (path.find(".lyapunov.") != std::string::npos && kLyapunov.contains(key))
    return difference <= oracle_band(OracleBand::double_vs_float128).atol;
  // The predicted K's inputs come from the same Jacobians (and the guess's error, a difference of
  // the oracle's doubles); the memory and C·e0 scale with the memory, so relative to it. K itself:
  // bit for bit.
  static const std::set<std::string> kPredicted = {"rate", "memory", "guess_error", "basin"};
  // The cheap form's (predicted_k_iterate, lambda_max_iterate_by_seed) are the same quantities from
  // the production cell's Jacobians in double (std::log, the same glibc choice): the same band.
  if ((path.find(".predicted_k.") != std::string::npos && kPredicted.contains(key)) ||
      (path.find(".predicted_k_iterate.") != std::string::npos && kPredicted.contains(key)) ||
      key.rfind("lambda_max_by_seed[", 0) == 0 || key.rfind("lambda_max_iterate_by_seed[", 0) == 0)
    return difference <= oracle_band(OracleBand::double_vs_float128).atol * std::max(1.0, std::abs(b.get<double>()));
  return false;
}

// The first path at which two documents differ, for the failure message.
std::string first_difference(const Json& a, const Json& b, const std::string& path = "") {
  if (within_the_oracles_rounding(a, b, path)) return "";
  if (a.type() != b.type()) return path + " (type)";
  if (a.is_object()) {
    if (a.size() != b.size()) return path + " (keys: " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")";
    auto ia = a.begin();
    auto ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib) {
      if (ia.key() != ib.key()) return path + "." + ia.key() + " (key order: " + ib.key() + ")";
      if (const std::string d = first_difference(ia.value(), ib.value(), path + "." + ia.key()); !d.empty()) return d;
    }
    return "";
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return path + " (length " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")";
    for (std::size_t i = 0; i < a.size(); ++i)
      if (const std::string d = first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]"); !d.empty()) return d;
    return "";
  }
  return a == b ? "" : path + ": " + a.dump() + " vs " + b.dump();
}

TEST(CampaignGolden, SmallPlanIsBitForBitTheGoldenReport) {
  // The plan of nightly/tests/golden/README.md: rows Agree, Disagree and Error (fixed K = 2 on hard
  // weights), every equivalence the CPU runs, K*, skips, error profiles.
  CampaignOptions o;
  o.out_dir = testing::scratch("campaign-golden");
  o.variants = {"gru", "slstm", "hopfield", "m2rnn"};
  o.dtypes = {"f32"};
  o.times = {16, 48};
  o.classes = {"init", "hard", "saturating", "h0", "packed"};
  o.seeds = 1;
  o.max_iters = 2;
  o.jobs = 1;
  o.backends = {"cpu"};
  const CampaignResult result = run_campaign(o);
  const Json file = Json::parse(testing::read_text(std::filesystem::path(PARARNN_NIGHTLY_GOLDEN_DIR) / "small_campaign.json"));
  const Json& golden = file["report"];
  const Json ours = without_timings(load_report(result.report_path));
  EXPECT_EQ(first_difference(ours, golden), "") << "the campaign's report changed (timings aside)";
  EXPECT_EQ(result.exit_code, file["exit_code"].get<int>());
  // The failing rows' cases, by name.
  std::set<std::string> cases, want;
  for (const auto& e : std::filesystem::directory_iterator(o.out_dir / "cases")) cases.insert(e.path().filename().string());
  for (const Json& row : golden["rows"])
    if (row["outcome"] != "Agree") want.insert(row["id"].get<std::string>() + ".safetensors");
  EXPECT_EQ(cases, want);
}

TEST(CampaignBudget, ATaskRunningAtTheBudgetIsCutAndNotReported) {
  CampaignOptions o;
  o.out_dir = testing::scratch("campaign-budget");
  o.quick = true;
  o.variants = {"gru"};
  o.classes = {"init"};
  o.times = {64};
  o.jobs = 1;
  // Far more than planning takes, even on a loaded machine: the first task passes the start
  // check; then its start is held past the budget, and it must stop at its first phase (verify's
  // "newton") instead of running to the end.
  constexpr double kBudget = 3.0;
  o.time_budget_s = kBudget;
  bool held = false;
  o.progress = [&](const CampaignProgress& p) {
    if (!held && !p.current.empty()) {
      held = true;
      std::this_thread::sleep_for(std::chrono::duration<double>(kBudget + 0.3 - p.elapsed_s));
    }
  };
  const CampaignResult result = run_campaign(o);
  const auto report = load_report(result.report_path);
  const auto& s = report["summary"];
  EXPECT_TRUE(held);
  EXPECT_TRUE(s["budget_exhausted"].get<bool>());
  EXPECT_EQ(s["tasks_cut_at_budget"].get<std::int64_t>(), 1);
  EXPECT_EQ(s["rows_not_run"].get<std::int64_t>(), s["tasks"].get<std::int64_t>());
  EXPECT_EQ(s["rows"].get<std::int64_t>(), 0) << "a row of the cut task reached the report";
  EXPECT_TRUE(report["rows"].empty());
  EXPECT_TRUE(report["equivalences"].empty());
  EXPECT_EQ(result.exit_code, 2) << "a campaign that did not run its plan must not exit 0";
}

// report nightly --kstar-only: no row judged, every K* measurement with its predicted K and the
// outcome per seed, the summary's counts of them; it exits 0 only when its measurements ran, never
// when one failed or none was planned.
TEST(CampaignKstarOnly, MeasuresKstarWithThePredictionAndNeverExitsZeroWithoutMeasurements) {
  CampaignOptions o;
  o.out_dir = testing::scratch("campaign-kstar-only");
  o.kstar_only = true;
  o.variants = {"gru"};
  o.dtypes = {"f32"};
  o.times = {16, 48};
  o.classes = {"init"};
  o.seeds = 2;
  o.jobs = 1;
  const CampaignResult result = run_campaign(o);
  const Json report = load_report(result.report_path);
  EXPECT_TRUE(report["plan"]["kstar_only"].get<bool>());
  EXPECT_TRUE(report["rows"].empty());
  EXPECT_TRUE(report["equivalences"].empty());
  ASSERT_EQ(report["kstar"].size(), 2u);
  std::int64_t seeds = 0;
  for (const Json& k : report["kstar"]) {
    ASSERT_EQ(k["predicted_k_by_seed"].size(), k["kstar_by_seed"].size());
    ASSERT_EQ(k["prediction_by_seed"].size(), k["kstar_by_seed"].size());
    for (std::size_t i = 0; i < k["kstar_by_seed"].size(); ++i, ++seeds) {
      const std::int64_t kstar = k["kstar_by_seed"][i].get<std::int64_t>();
      const Json& predicted = k["predicted_k_by_seed"][i];
      const std::string outcome = k["prediction_by_seed"][i].get<std::string>();
      if (predicted.is_null()) {
        EXPECT_EQ(outcome, "none");
      } else if (predicted.get<std::int64_t>() + kPredictedKMargin < kstar) {
        EXPECT_EQ(outcome, "under");
      } else {
        EXPECT_EQ(outcome, predicted.get<std::int64_t>() <= kstar + 1 ? "hit" : "over");
      }
    }
  }
  const Json& counts = report["summary"]["kstar_predicted"];
  EXPECT_EQ(counts["hit"].get<std::int64_t>() + counts["over"].get<std::int64_t>() +
                counts["under"].get<std::int64_t>() + counts["none"].get<std::int64_t>(),
            seeds);
  EXPECT_EQ(result.exit_code, 0);

  Json failed = report;
  failed["summary"]["kstar_failed"] = 1;
  EXPECT_EQ(detail::campaign_exit_code(failed), 2) << "a K* measurement failed";
  Json empty = report;
  empty["summary"]["kstar_measurements"] = 0;
  EXPECT_EQ(detail::campaign_exit_code(empty), 2) << "nothing was measured";
  Json full = failed;  // a whole campaign records a failed K* among the skipped; its rows decide
  full["plan"]["kstar_only"] = false;
  EXPECT_EQ(detail::campaign_exit_code(full), 0);
}

}  // namespace
}  // namespace pararnn::nightly
