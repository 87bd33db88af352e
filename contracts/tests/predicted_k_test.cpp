// The predicted K (contracts/predicted_k.hpp): the quadratic model on hand-computed inputs, its
// refusals, the max over units, and the report's field (the same prediction as the estimate gives).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/diagnose.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/contracts/tolerance.hpp"

namespace pararnn {
namespace {

// e_k = (C e0)^(2^k) / C, written out here independently of the model's closed form.
double model_error(double C, double e0, std::int64_t k) {
  double e = e0;
  for (std::int64_t i = 0; i < k; ++i) e = C * e * e;
  return e;
}

TEST(PredictedK, IsTheFirstKWhoseQuadraticErrorIsWithinTau) {
  const double tau = tolerance_for({.dtype = DType::f32, .cell = "gru"}).atol;
  // ρ = 1/2 over a long chain: memory 1/(1 − ρ) = 2 (to rounding); C = c·2.
  const double rate = std::log(0.5);
  const double C = kCurvature * 2.0;
  for (const double share : {0.1, 0.5, 0.9, 1.0}) {  // of the basin's edge
    const double e0 = share * kBasin / C;
    const PredictedK p = predict_unit_k(rate, 4096, e0, tau);
    ASSERT_TRUE(p.k.has_value()) << e0 << ": " << p.reason;
    EXPECT_DOUBLE_EQ(p.memory, 2.0);
    EXPECT_LE(model_error(C, e0, *p.k), tau) << e0;
    ASSERT_GE(*p.k, 1);
    EXPECT_GT(model_error(C, e0, *p.k - 1), tau) << e0;
  }
}

TEST(PredictedK, ZeroWhenTheGuessIsWithinTauAndNoneOutsideTheBasin) {
  const double tau = tolerance_for({.dtype = DType::f32, .cell = "gru"}).atol;
  EXPECT_EQ(predict_unit_k(std::log(0.5), 64, tau / 2, tau).k, std::optional<std::int64_t>(0));
  // C·e0 = c·2·e0 = 2 > kBasin: no number, and the reason says why.
  const PredictedK outside = predict_unit_k(std::log(0.5), 4096, 1.0 / kCurvature, tau);
  EXPECT_FALSE(outside.k);
  EXPECT_NE(outside.reason.find("outside the quadratic basin"), std::string::npos) << outside.reason;
  // An expanding unit over a long chain: the memory overflows, no number.
  const PredictedK chaotic = predict_unit_k(0.5, 1 << 20, 0.1, tau);
  EXPECT_FALSE(chaotic.k);
  EXPECT_EQ(chaotic.to_json()["memory"], "inf");
  // An exact guess needs no update whatever the memory, and its C·e0 is 0, never inf · 0.
  const PredictedK exact = predict_unit_k(0.5, 1 << 20, 0.0, tau);
  EXPECT_EQ(exact.k, std::optional<std::int64_t>(0));
  EXPECT_EQ(exact.to_json()["basin"], 0.0);
  // Never a number from a non-finite input.
  EXPECT_FALSE(predict_unit_k(NAN, 64, 0.1, tau).k);
  EXPECT_FALSE(predict_unit_k(std::log(0.5), 64, INFINITY, tau).k);
  EXPECT_FALSE(predict_unit_k(std::log(0.5), 64, 0.1, NAN).k);
}

TEST(PredictedK, TheCaseTakesTheLargestUnitInAnyOrder) {
  const double tau = tolerance_for({.dtype = DType::f32, .cell = "gru"}).atol;
  reference::LyapunovEstimate e;
  e.window = 64;
  for (int u = 0; u < 8; ++u)
    e.units.push_back({.chain = "b=0,channel=" + std::to_string(u), .steps = 1024, .exponent = -0.7,
                       .stretch = 64 * std::log(0.3 + 0.05 * u), .guess_error = 0.05 + 0.05 * u});
  const PredictedK all = predict_k(e, tau);
  ASSERT_TRUE(all.k) << all.reason;
  std::int64_t largest = 0;
  for (const auto& u : e.units) largest = std::max(largest, *predict_unit_k(u.stretch / 64, 1024, u.guess_error, tau).k);
  EXPECT_EQ(*all.k, largest);
  std::mt19937 rng(7);
  for (int i = 0; i < 5; ++i) {
    std::shuffle(e.units.begin(), e.units.end(), rng);
    const PredictedK again = predict_k(e, tau);
    EXPECT_EQ(again.k, all.k);
    EXPECT_EQ(again.unit, all.unit);
  }
  // One unit outside the basin: the case has no number, and the reason names the unit.
  e.units.push_back({.chain = "b=1,channel=3", .steps = 1024, .exponent = -0.01, .stretch = -0.01 * 64, .guess_error = 1.0});
  const PredictedK with_outlier = predict_k(e, tau);
  EXPECT_FALSE(with_outlier.k);
  EXPECT_NE(with_outlier.reason.find("b=1,channel=3"), std::string::npos) << with_outlier.reason;
  // No finite estimate: no number.
  e.finite = false;
  e.reason = "H holds nan";
  EXPECT_FALSE(predict_k(e, tau).k);
}

TEST(PredictedK, TheReportCarriesThePredictionOfItsEstimate) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 3);
  const Tensor x = generated_case_input(DType::f32, 2, 300, 4, 3);
  const AgreementReport r = verify_agreement(cell, x, {.seed = 3});
  ASSERT_TRUE(r.lyapunov) << r.lyapunov_reason;
  ASSERT_TRUE(r.predicted_k);
  // diagnose_case's estimate on the same case and every chain (the report's 2 of 2) predicts the same.
  const Diagnosis d = diagnose_case(cell.make_case(x), {.seed = 3});
  ASSERT_TRUE(d.estimate) << d.inconclusive_reason;
  const PredictedK want = predict_k(*d.estimate, r.atol);
  EXPECT_EQ(r.predicted_k->k, want.k);
  EXPECT_EQ(r.predicted_k->unit, want.unit);
  EXPECT_EQ(r.predicted_k->basin, want.basin);
  const auto j = r.to_json();
  ASSERT_TRUE(j.contains("predicted_k"));
  EXPECT_EQ(j["predicted_k"]["k"].is_null(), !want.k.has_value());
  EXPECT_NE(r.summary().find("predicted K: "), std::string::npos) << r.summary();
}

}  // namespace
}  // namespace pararnn
