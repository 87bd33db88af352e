// The plan is a pure function of the options: the same options give the same tasks, costs and
// skips; bad options are refused naming the flag, the rule and the value.
#include <gtest/gtest.h>

#include "pararnn/core/errors.hpp"
#include "pararnn/nightly/plan.hpp"

namespace pararnn::nightly {
namespace {

std::vector<std::string> labels(const CampaignPlan& p) {
  std::vector<std::string> out;
  for (const TaskSpec& t : p.tasks) out.push_back(t.label);
  return out;
}

TEST(Plan, IsAPureFunctionOfTheOptions) {
  const CampaignOptions o{.quick = true, .variants = {"gru", "hopfield"}};
  const CampaignPlan a = make_plan(o, 2), b = make_plan(o, 2);
  EXPECT_EQ(labels(a), labels(b));
  EXPECT_EQ(a.skipped, b.skipped);
  for (std::size_t i = 0; i < a.tasks.size(); ++i) EXPECT_EQ(a.tasks[i].cost, b.tasks[i].cost);
  EXPECT_EQ(plan_json(o, a), plan_json(o, b));
}

TEST(Plan, QuickPlanOfOneVariantListsItsRowsEquivalencesAndKstar) {
  const CampaignPlan p = make_plan({.quick = true, .variants = {"gru"}}, 4);
  EXPECT_EQ(p.jobs, 4);
  EXPECT_EQ(p.threads_per_job, 1);
  const std::vector<std::string> want = {
      "gru.f32.T64.init.s1", "strided_vs_contiguous.gru.f32.T64.init.s1.cpu",
      "recompute_vs_stored.gru.f32.T64.init.s1.cpu", "gru.f32.T64.saturating.s1", "gru.f32.T64.h0.s1",
      "recompute_vs_stored.gru.f32.T64.h0.s1.cpu", "gru.f32.T1024.init.s1",
      "strided_vs_contiguous.gru.f32.T1024.init.s1.cpu", "gru.f32.T1024.hard.s1", "gru.f32.T1024.packed.s1",
      "packed_vs_per_sequence.gru.f32.T1024.packed.s1.cpu", "kstar.gru.f32.init"};
  EXPECT_EQ(labels(p), want);
  EXPECT_EQ(p.tasks.back().kstar_times, (std::vector<std::int64_t>{64, 1024}));
}

TEST(Plan, CudaWithoutADeviceIsSkippedWithTheReason) {
  CampaignOptions o{.backends = {"cpu", "cuda"}, .variants = {"gru"}, .times = {64}, .classes = {"init"}};
  const CampaignPlan p = make_plan(o, 1);
  EXPECT_EQ(p.plan.backends, (std::vector<std::string>{"cpu"}));
  ASSERT_FALSE(p.skipped.empty());
  EXPECT_EQ(p.skipped[0]["what"], "backend cuda");
}

void expect_refused(const CampaignOptions& o, const std::string& flag, const std::string& value) {
  try {
    (void)make_plan(o, 1);
    ADD_FAILURE() << "accepted " << flag << " " << value;
  } catch (const ContractViolation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(flag), std::string::npos) << what;
    EXPECT_NE(what.find(value), std::string::npos) << what;
  }
}

TEST(Plan, KstarOnlyPlansTheKstarTasksAloneAndRefusesAnExternalSolver) {
  const CampaignOptions o{.quick = true, .kstar_only = true, .variants = {"gru", "hopfield"}};
  const CampaignPlan p = make_plan(o, 1);
  ASSERT_FALSE(p.tasks.empty());
  for (const TaskSpec& t : p.tasks) EXPECT_EQ(t.kind, TaskKind::kstar) << t.label;
  EXPECT_EQ(p.tasks.size(), 2u);  // one per variant: the quick plan measures K* in f32, class init
  EXPECT_TRUE(plan_json(o, p)["kstar_only"].get<bool>());
  EXPECT_FALSE(plan_json({.quick = true, .variants = {"gru"}}, make_plan({.quick = true, .variants = {"gru"}}, 1))["kstar_only"]
                   .get<bool>());
  CampaignOptions external = o;
  external.external = ExternalSolver{.command = "solver {case} {out}", .words = {"solver", "{case}", "{out}"},
                                     .name = "their-solver"};
  expect_refused(external, "--kstar-only", "their-solver");
}

TEST(Plan, BadOptionsAreRefusedNamingFlagAndValue) {
  expect_refused({.variants = {"grux"}}, "--cells", "grux");
  expect_refused({.dtypes = {"i32"}}, "--dtypes", "i32");
  expect_refused({.backends = {"tpu"}}, "--backends", "tpu");
  expect_refused({.times = {0}}, "--T", "0");
  expect_refused({.classes = {"easy"}}, "--classes", "easy");
  expect_refused({.seeds = 0}, "--seeds", "0");
  expect_refused({.max_iters = -1}, "--max-iters", "-1");
  expect_refused({.time_budget_s = 0.0}, "--time-budget", "0");
  expect_refused({.jobs = 0}, "--jobs", "0");
}

}  // namespace
}  // namespace pararnn::nightly
