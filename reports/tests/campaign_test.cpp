// run_campaign's time budget: a task still running when the budget runs out stops at its next
// phase boundary and is counted as not run; nothing of it reaches the report.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "pararnn/reports/campaign.hpp"
#include "test_support.hpp"

namespace pararnn::reports {
namespace {

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

}  // namespace
}  // namespace pararnn::reports
