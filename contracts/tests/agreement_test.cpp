// Claims about verify_agreement and its report: an easy case agrees; the JSON keys are the
// contract's, in its order; a non-finite oracle is Inconclusive, never Disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/diagnose.hpp"
#include "pararnn/contracts/oracle_memo.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/random.hpp"

namespace pararnn {
namespace {

Tensor normal_input(DType dtype, Shape shape, std::uint64_t seed) {
  SplitMix64 rng(seed);
  Tensor x(dtype, shape);
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal());
  return x;
}

TEST(VerifyAgreement, LibraryInitGruAgreesAndReportsEverything) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 1);
  const Tensor x = normal_input(DType::f32, {2, 300, 4}, 2);
  const AgreementReport r = verify_agreement(cell, x, {.seed = 5});
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  EXPECT_EQ(r.oracle_type, "double");
  EXPECT_EQ(r.certifier_type, "float128");
  EXPECT_TRUE(r.certified_all_chains);
  EXPECT_LE(r.vs_sequential_max_abs, r.atol);
}

// JudgeHooks::poll reaches the oracle: what it throws abandons verify_agreement (the
// campaign's time budget cuts a row inside a long oracle this way), and the memo's key is
// released on that path too.
TEST(VerifyAgreement, PollStopsTheCallInsideTheOracle) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 1);
  const Tensor x = normal_input(DType::f32, {2, 3000, 4}, 2);
  struct Stop {};
  std::string phase_at_stop;
  OracleMemo memo;
  std::string phase;
  const JudgeHooks hooks{.progress = [&](std::string_view p) { phase = p; },
                         .poll =
                             [&] {
                               phase_at_stop = phase;
                               throw Stop{};
                             },
                         .oracle_memo = &memo,
                         .oracle_key = "poll",
                         .oracle_uses = 1};
  EXPECT_THROW((void)verify_agreement(cell, x, {.seed = 5}, hooks), Stop);
  EXPECT_EQ(phase_at_stop, "oracle");
  EXPECT_EQ(memo.live(), 0u);
}

// compare_trajectory runs under the same hooks: its phases are reported and the poll reaches its
// oracle, so a campaign's time budget cuts an external solver's row inside a long oracle too.
TEST(CompareTrajectory, PollStopsTheCallInsideTheOracle) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 1);
  const Case problem = cell.make_case(normal_input(DType::f32, {2, 3000, 4}, 2));
  const Tensor H = sequential_apply(cell, problem.x);
  struct Stop {};
  std::string phase, phase_at_stop;
  const JudgeHooks hooks{.progress = [&](std::string_view p) { phase = p; },
                         .poll = [&] {
                           phase_at_stop = phase;
                           throw Stop{};
                         }};
  EXPECT_THROW((void)compare_trajectory(problem, H, {.seed = 5}, std::nullopt, hooks), Stop);
  EXPECT_EQ(phase_at_stop, "oracle");
}

// Every report says why its case is hard: λ̂ and the stretch from the oracle's own Jacobians,
// the numbers `pararnn diagnose` gives with the same chains and seed (bit for bit), in verify
// and compare alike; none from an uncertified oracle; none where one chain's Jacobians are over
// the report's budget (a 64 x 64 RWKV-7 state: 4096^2 entries a step), with the reason.
TEST(Lyapunov, TheReportCarriesTheEstimateDiagnoseGives) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 3);
  const Case problem = cell.make_case(normal_input(DType::f32, {3, 200, 4}, 4));
  const AgreementReport verified = verify_agreement(cell, problem.x, {.seed = 2});
  const AgreementReport compared = compare_trajectory(problem, sequential_apply(cell, problem.x), {.seed = 2});
  const Diagnosis d = diagnose_case(problem, {.chains = 16, .seed = 2});
  ASSERT_TRUE(d.estimate.has_value()) << d.inconclusive_reason;
  for (const AgreementReport* r : {&verified, &compared}) {
    ASSERT_TRUE(r->lyapunov.has_value()) << r->lyapunov_reason;
    EXPECT_EQ(r->lyapunov->max, d.estimate->max_exponent);
    EXPECT_EQ(r->lyapunov->median, d.estimate->median_exponent);
    EXPECT_EQ(r->lyapunov->max_stretch, d.estimate->max_stretch);
    EXPECT_EQ(r->lyapunov->units, 3 * 8);
    EXPECT_EQ(r->lyapunov->chains_used, 3);
    EXPECT_LT(r->lyapunov->max, 0.0);  // a clamped GRU contracts
    const auto j = r->to_json()["lyapunov"];
    EXPECT_EQ(j["max"], d.estimate->max_exponent);
    EXPECT_EQ(j["method"], "exact log|J| per channel");
    EXPECT_NE(r->summary().find("lambda-hat: max "), std::string::npos) << r->summary();
  }
}

TEST(Lyapunov, NoNumberFromAnUncertifiedOracleOrOverTheBudget) {
  const Cell gru = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 3);
  const AgreementReport uncertified = verify_agreement(gru, normal_input(DType::f32, {1, 50, 4}, 4), {.certify_budget = 0});
  EXPECT_FALSE(uncertified.lyapunov.has_value());
  EXPECT_NE(uncertified.lyapunov_reason.find("not certified"), std::string::npos) << uncertified.lyapunov_reason;
  EXPECT_EQ(uncertified.to_json()["lyapunov"]["reason"], uncertified.lyapunov_reason);
  const Cell rwkv = Cell::initialise({.cell = "rwkv7", .d_in = 8, .d_h = 64, .n_heads = 1}, DType::f32, 3);
  const AgreementReport big = verify_agreement(rwkv, normal_input(DType::f32, {1, 16, 8}, 5));
  EXPECT_FALSE(big.lyapunov.has_value());
  EXPECT_NE(big.lyapunov_reason.find("over the report's budget"), std::string::npos) << big.lyapunov_reason;
}

// f16 sLSTM gradients at T = 1024 (the nightly's case slstm.f16.T1024.init.s1): ∇W_x sums the
// growing c and n slots past f16's 65504, so their true values round to inf in f16 and the
// solver returns inf there, as any f16 result must. Those elements are not judged (counted per
// tensor); the verdict is Inconclusive, never Agree and no longer Disagree. Before: Disagree.
TEST(VerifyAgreement, GradientsBeyondTheDtypesRangeAreInconclusiveNeverAgree) {
  const std::uint64_t seed = 1024001;
  const Cell cell = Cell::initialise({.cell = "slstm", .d_in = 8, .d_h = 16, .max_recurrent_norm = 0.5},
                                     DType::f16, seed);
  const Tensor x = generated_case_input(DType::f16, 2, 1024, 8, seed);
  const AgreementReport r = verify_agreement(cell, x, {.seed = seed, .certify_budget = 100'000, .gradients = true});
  EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.failure_message();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.inconclusive_reason.find("beyond f16's range"), std::string::npos) << r.inconclusive_reason;
  std::int64_t beyond = 0;
  for (const auto& g : r.gradients) {
    EXPECT_TRUE(g.comparison.ok()) << g.name << ": " << g.comparison.describe();
    if (g.unrepresentable > 0) {
      EXPECT_TRUE(std::isinf(static_cast<double>(round_to_storage<Eigen::half>(g.largest_unrepresentable)))) << g.name;
      EXPECT_TRUE(r.to_json()["gradients"][g.name].contains("unrepresentable")) << g.name;
    }
    beyond += g.unrepresentable;
  }
  EXPECT_GT(beyond, 0);
  // The same case in f32 holds every gradient: nothing is left out.
  const Cell wide = Cell::initialise({.cell = "slstm", .d_in = 8, .d_h = 16, .max_recurrent_norm = 0.5},
                                     DType::f32, seed);
  const AgreementReport rw = verify_agreement(wide, generated_case_input(DType::f32, 2, 1024, 8, seed),
                                              {.seed = seed, .certify_budget = 100'000, .gradients = true});
  for (const auto& g : rw.gradients) EXPECT_EQ(g.unrepresentable, 0) << g.name;
}

TEST(VerifyAgreement, JsonKeysFollowTheContractOrder) {
  const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4}, DType::f64, 1);
  const AgreementReport r = verify_agreement(cell, normal_input(DType::f64, {1, 20, 3}, 3));
  const auto json = r.to_json();
  const std::vector<std::string> seed_keys = {"ok", "max_abs", "max_rel", "mean_abs", "atol", "rtol",
                                              "shape", "dtype", "device", "newton_iters",
                                              "max_residual", "path"};
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  ASSERT_GE(keys.size(), seed_keys.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 12), seed_keys);
  for (const char* key : {"verdict", "worst_index", "sequential_max_abs", "vs_sequential_max_abs",
                          "oracle", "backend", "k_source", "residual_history", "seed", "timings_ms",
                          "tolerance_source", "lyapunov", "schema_version"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_EQ(json["oracle"]["type"], "float128");
  EXPECT_EQ(keys.back(), "schema_version");
}

TEST(VerifyAgreement, NonFiniteOracleIsInconclusiveNotDisagree) {
  const Cell cell = Cell::initialise({.cell = "nlru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  Tensor x = normal_input(DType::f32, {1, 5, 2}, 4);
  x.store({0, 2, 0}, std::nan(""));
  const Case problem = cell.make_case(x);
  const Tensor theirs(DType::f32, {1, 5, 3});
  const AgreementReport r = compare_trajectory(problem, theirs);
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_FALSE(r.inconclusive_reason.empty());
}

TEST(VerifyAgreement, RaiseOnFailThrowsAgreementError) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  const Tensor x = normal_input(DType::f32, {1, 50, 2}, 6);
  const Case problem = cell.make_case(x);
  Tensor theirs(DType::f32, {1, 50, 3});  // zeros: far from the trajectory
  EXPECT_THROW((void)compare_trajectory(problem, theirs, {.raise_on_fail = true}), AgreementError);
}

}  // namespace
}  // namespace pararnn
