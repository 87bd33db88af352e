// The predicted K (contracts/predicted_k.hpp): the quadratic model on hand-computed inputs, its
// refusals, the max over units, and the report's field (the same prediction as the estimate gives);
// the cheap form (solver/iterate_growth.hpp, predict_k_from_iterate): along the oracle's own
// trajectory it is the oracle's estimate, packed segments and batch order change nothing, a NaN
// gives no number, what it cannot measure is refused by name, and the reports carry it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "pararnn/cells/cell.hpp"
#include "pararnn/cells/registry.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/diagnose.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/solver/iterate_growth.hpp"

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

// Along the oracle's f64 trajectory the production Jacobians are the oracle's AD ones to the
// Jacobian band, so the cheap form's units are the oracle estimate's (every chain used) and their
// predicted K the same.
TEST(IterateGrowth, AlongTheOraclesTrajectoryItIsTheOraclesEstimate) {
  for (const CellSpec& spec : cell_specs()) {  // every per-channel cell of the registry
    if (spec.jacobian != JacobianClass::per_channel) continue;
    SCOPED_TRACE(cell_label(spec));
    const std::string name(spec.name);
    CellOptions options{.cell = name, .d_in = 4, .d_h = 6};
    if (!spec.gate_mix.empty()) options.gate_mix = spec.gate_mix;
    const Cell cell = Cell::initialise(options, DType::f64, 5);
    const Tensor x = generated_case_input(DType::f64, 2, 150, 4, 5);
    const Case problem = cell.make_case(x);
    const reference::OracleResult oracle = reference::oracle_sequential(problem, {.certify = false});
    const reference::LyapunovEstimate want = reference::oracle_lyapunov(problem, oracle, {.chains = 2});
    const IterateGrowth got = iterate_growth(cell, x, oracle.H);
    ASSERT_TRUE(want.finite) << want.reason;
    ASSERT_TRUE(got.finite) << got.reason;
    ASSERT_EQ(got.units.size(), want.units.size());
    EXPECT_EQ(got.method, want.method);
    const Tolerance jac = tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian, .cell = name});
    const Tolerance tau = tolerance_for({.dtype = DType::f64, .cell = name});
    const auto near = [](double a, double b, const Tolerance& t) { return std::abs(a - b) <= t.atol + t.rtol * std::abs(b); };
    for (const reference::LyapunovUnit& w : want.units) {
      const auto it = std::find_if(got.units.begin(), got.units.end(), [&](const IterateGrowthUnit& u) { return u.chain == w.chain; });
      ASSERT_NE(it, got.units.end()) << w.chain;
      EXPECT_EQ(it->steps, w.steps) << w.chain;
      EXPECT_TRUE(near(it->exponent, w.exponent, jac)) << w.chain << ": " << it->exponent << " vs " << w.exponent;
      EXPECT_TRUE(near(it->stretch, w.stretch, jac)) << w.chain << ": " << it->stretch << " vs " << w.stretch;
      EXPECT_TRUE(near(it->guess_error, w.guess_error, tau)) << w.chain << ": " << it->guess_error << " vs " << w.guess_error;
    }
    const PredictedK oracle_k = predict_k(want, tau.atol);
    const PredictedK cheap = predict_k_from_iterate(cell, x, oracle.H, {}, tau.atol);
    EXPECT_EQ(cheap.k, oracle_k.k) << cheap.describe() << " vs " << oracle_k.describe();
    EXPECT_EQ(cheap.unit, oracle_k.unit);
  }
}

TEST(IterateGrowth, PackedSegmentsAreTheirOwnChainsAndBatchOrderChangesNothing) {
  const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 5}, DType::f32, 2);
  // Packed: segments [0, 7), [7, 8), [8, 30), each its own chain from its h0 row, bit for bit.
  const Tensor x = generated_case_input(DType::f32, 1, 30, 3, 2);
  const Tensor h0 = generated_case_input(DType::f32, 3, cell.slots(), 5, 9);
  const Tensor cu = Tensor::from_values(DType::i64, {4}, std::vector<double>{0, 7, 8, 30});
  const ApplyOptions packed{.h0 = h0.view(), .cu_seqlens = cu.view()};
  const Tensor H = newton_apply(cell, x, {}, packed);
  const IterateGrowth all = iterate_growth(cell, x, H, packed, 4);
  ASSERT_TRUE(all.finite) << all.reason;
  ASSERT_EQ(all.units.size(), 3u * 5u);
  const std::int64_t bounds[] = {0, 7, 8, 30};
  for (std::int64_t s = 0; s < 3; ++s) {
    const Tensor xs = Tensor::copy_of(x.view().slice(1, bounds[s], bounds[s + 1]));
    const Tensor Hs = Tensor::copy_of(H.view().slice(1, bounds[s], bounds[s + 1]));
    const Tensor h0s = Tensor::copy_of(h0.view().slice(0, s, s + 1));
    const IterateGrowth alone = iterate_growth(cell, xs, Hs, {.h0 = h0s.view()}, 4);
    for (std::int64_t c = 0; c < 5; ++c) {
      const IterateGrowthUnit& p = all.units[static_cast<std::size_t>(s * 5 + c)];
      const IterateGrowthUnit& a = alone.units[static_cast<std::size_t>(c)];
      EXPECT_EQ(p.chain, "segment=" + std::to_string(s) + ",channel=" + std::to_string(c));
      EXPECT_EQ(p.steps, a.steps);
      EXPECT_EQ(p.exponent, a.exponent) << p.chain;
      EXPECT_EQ(p.stretch, a.stretch) << p.chain;
      EXPECT_EQ(p.guess_error, a.guess_error) << p.chain;
    }
  }
  // Rows (0, 1, 2) given as (2, 0, 1): the same units under their new rows.
  const Tensor xb = generated_case_input(DType::f32, 3, 40, 3, 4);
  const Tensor Hb = newton_apply(cell, xb);
  const std::int64_t from[] = {2, 0, 1};
  const auto rows_in = [&](const Tensor& t) {  // rows (from[0], from[1], from[2]) of t
    const std::vector<double> v = t.to_f64_vector();
    const auto row = static_cast<std::size_t>(t.numel() / 3);
    std::vector<double> out;
    for (std::int64_t b : from) out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(b * row), v.begin() + static_cast<std::ptrdiff_t>((b + 1) * row));
    return Tensor::from_values(t.dtype(), t.shape(), out);
  };
  const Tensor xp = rows_in(xb), Hp = rows_in(Hb);
  const IterateGrowth in_order = iterate_growth(cell, xb, Hb), permuted = iterate_growth(cell, xp, Hp);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t c = 0; c < 5; ++c) {
      const IterateGrowthUnit& p = permuted.units[static_cast<std::size_t>(b * 5 + c)];
      const IterateGrowthUnit& o = in_order.units[static_cast<std::size_t>(from[b] * 5 + c)];
      EXPECT_EQ(p.exponent, o.exponent);
      EXPECT_EQ(p.stretch, o.stretch);
      EXPECT_EQ(p.guess_error, o.guess_error);
    }
  EXPECT_EQ(permuted.max_stretch, in_order.max_stretch);
  const double tau = tolerance_for({.dtype = DType::f32, .cell = "lstm"}).atol;
  EXPECT_EQ(predict_k_from_iterate(cell, xp, Hp, {}, tau).k, predict_k_from_iterate(cell, xb, Hb, {}, tau).k);
}

TEST(IterateGrowth, ANonFiniteTrajectoryGivesNoNumberAndWhatItCannotMeasureIsRefusedByName) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor x = generated_case_input(DType::f32, 2, 20, 3, 1);
  Tensor H = newton_apply(cell, x);
  const double tau = tolerance_for({.dtype = DType::f32, .cell = "gru"}).atol;
  ASSERT_TRUE(iterate_growth(cell, x, H).finite);
  H.store({1, 9, 2}, NAN);
  const IterateGrowth g = iterate_growth(cell, x, H);
  EXPECT_FALSE(g.finite);
  EXPECT_NE(g.reason.find("b=1,channel=2"), std::string::npos) << g.reason;
  const PredictedK p = predict_k_from_iterate(cell, x, H, {}, tau);
  EXPECT_FALSE(p.k);
  EXPECT_NE(p.reason.find("b=1,channel=2"), std::string::npos) << p.reason;
  const auto refused = [](auto&& call, const std::string& argument) {
    try {
      (void)call();
      ADD_FAILURE() << "accepted; wanted a refusal naming " << argument;
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  const Tensor H_ok = newton_apply(cell, x);
  refused([&] { return iterate_growth(cell, x, Tensor::copy_of(H_ok.view().slice(1, 0, 19))); }, "H");
  refused([&] { return iterate_growth(cell, x, Tensor::converted(H_ok, DType::f64)); }, "H");
  refused([&] { return iterate_growth(cell, x, H_ok, {}, 0); }, "window");
  refused([&] { return iterate_growth(cell, Tensor::converted(x, DType::f64), H_ok); }, "x");
  // A cell outside the per-channel family: refused by iterate_growth, no number (with the reason)
  // from predict_k_from_iterate.
  const Cell hopfield = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor Hh = newton_apply(hopfield, x);
  EXPECT_THROW((void)iterate_growth(hopfield, x, Hh), UnsupportedPath);
  const PredictedK none = predict_k_from_iterate(hopfield, x, Hh, {}, tau);
  EXPECT_FALSE(none.k);
  EXPECT_NE(none.reason.find("per-channel"), std::string::npos) << none.reason;
}

TEST(IterateGrowth, VerifyAndCompareReportTheCheapFormBesideTheOracles) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 3);
  const Tensor x = generated_case_input(DType::f32, 2, 300, 4, 3);
  const AgreementReport r = verify_agreement(cell, x, {.seed = 3});
  ASSERT_TRUE(r.predicted_k_iterate);
  // The report's cheap form is predict_k_from_iterate on the solver's own answer.
  const PredictedK want = predict_k_from_iterate(cell, x, newton_apply(cell, x), {}, r.atol);
  EXPECT_EQ(r.predicted_k_iterate->k, want.k);
  EXPECT_EQ(r.predicted_k_iterate->basin, want.basin);
  EXPECT_TRUE(r.to_json().contains("predicted_k_iterate"));
  EXPECT_NE(r.summary().find("predicted K from the trajectory itself (no oracle): "), std::string::npos) << r.summary();
  // compare on another solver's trajectory holding a NaN: no cheap number, and never Agree.
  Tensor theirs = newton_apply(cell, x);
  theirs.store({0, 100, 3}, NAN);
  const AgreementReport c = compare_trajectory(cell.make_case(x), theirs, {.seed = 3});
  ASSERT_TRUE(c.predicted_k_iterate);
  EXPECT_FALSE(c.predicted_k_iterate->k);
  EXPECT_NE(c.verdict, Verdict::agree);
}

}  // namespace
}  // namespace pararnn
