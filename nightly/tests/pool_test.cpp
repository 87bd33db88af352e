// The generic budgeted pool: its run order, its budget (no task starts after it; a cut task is
// discarded and counted), and a failure stops it and is rethrown.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "pararnn/nightly/pool.hpp"

namespace pararnn::nightly {
namespace {

TEST(Pool, RunOrderTakesOneTaskOfEachGroupInTurnCostliestFirst) {
  const std::vector<PoolItem> items = {{"a1", "a", 1.0}, {"a2", "a", 5.0}, {"b1", "b", 2.0},
                                       {"a3", "a", 5.0}, {"c1", "c", 1.0}, {"b2", "b", 3.0}};
  // a: a2, a3 (ties in list order), a1; b: b2, b1; c: c1.
  EXPECT_EQ(run_order(items), (std::vector<std::size_t>{1, 5, 4, 3, 2, 0}));
}

TEST(Pool, EveryTaskRunsOnceWhateverTheJobs) {
  std::vector<PoolItem> items;
  for (int i = 0; i < 20; ++i) items.push_back({std::to_string(i), std::to_string(i % 3), 1.0});
  for (std::int64_t jobs : {1, 3}) {
    std::vector<std::atomic<int>> runs(items.size());
    const Budget budget;
    const PoolResult r = run_budgeted(items, run_order(items), [&](std::size_t i) { ++runs[i]; },
                                      [](std::size_t) {}, {.jobs = jobs, .budget = &budget});
    EXPECT_EQ(r.done, 20);
    EXPECT_EQ(r.not_run, 0);
    EXPECT_FALSE(r.budget_exhausted);
    for (std::size_t i = 0; i < items.size(); ++i) {
      EXPECT_EQ(runs[i].load(), 1) << "task " << i << " with " << jobs << " jobs";
      EXPECT_GE(r.seconds[i], 0.0);
    }
  }
}

TEST(Pool, ATaskCutAtTheBudgetIsDiscardedAndNoTaskStartsAfterIt) {
  const std::vector<PoolItem> items = {{"first", "g", 1.0}, {"second", "g", 1.0}, {"third", "g", 1.0}};
  const Budget budget(1.0);  // far more than the first start takes, even on a loaded machine
  std::vector<std::size_t> discarded, ran;
  const PoolResult r = run_budgeted(
      items, {0, 1, 2},
      [&](std::size_t i) {
        ran.push_back(i);
        std::this_thread::sleep_for(std::chrono::milliseconds(1300));
        budget.checkpoint();  // past the budget: the task stops here
      },
      [&](std::size_t i) { discarded.push_back(i); }, {.jobs = 1, .budget = &budget});
  EXPECT_EQ(ran, (std::vector<std::size_t>{0}));
  EXPECT_EQ(discarded, (std::vector<std::size_t>{0}));
  EXPECT_TRUE(r.budget_exhausted);
  EXPECT_EQ(r.done, 0);
  EXPECT_EQ(r.cut, 1);
  EXPECT_EQ(r.not_run, 3);
  EXPECT_LT(r.seconds[0], 0.0) << "a cut task has no time: it did not run";
}

TEST(Pool, AFailureStopsThePoolAndIsRethrown) {
  std::vector<PoolItem> items(10, PoolItem{"t", "g", 1.0});
  std::atomic<int> started{0};
  const Budget budget;
  EXPECT_THROW((void)run_budgeted(items, run_order(items),
                                  [&](std::size_t i) {
                                    ++started;
                                    if (i == 2) throw std::runtime_error("boom");
                                  },
                                  [](std::size_t) {}, {.jobs = 1, .budget = &budget}),
               std::runtime_error);
  EXPECT_EQ(started.load(), 3) << "no task starts after a failure";
}

TEST(Pool, ProgressCountsEveryStartAndFinish) {
  const std::vector<PoolItem> items = {{"x", "g", 1.0}, {"y", "h", 1.0}};
  std::vector<std::string> seen;
  const Budget budget;
  (void)run_budgeted(items, run_order(items), [](std::size_t) {}, [](std::size_t) {},
                     {.jobs = 1, .budget = &budget, .progress = [&](const PoolProgress& p) {
                        EXPECT_EQ(p.total, 2);
                        seen.push_back(p.current.empty() ? (p.finished.empty() ? "end" : "done " + p.finished)
                                                         : "start " + p.current);
                      }});
  EXPECT_EQ(seen, (std::vector<std::string>{"start x", "done x", "start y", "done y", "end"}));
}

}  // namespace
}  // namespace pararnn::nightly
