// sLSTM in log coordinates (NewtonConfig::coords = log; cells/slstm_log.hpp, solver/src/cpu/
// log_coords.hpp): the map is the native step in other coordinates (decode ∘ step ∘ encode is
// the native step, eps included), its Jacobian is the chain rule of the native Jacobian through
// the coordinate change, and Newton in these coordinates agrees with the oracle within τ in
// every dtype, forward and gradients; the refusals name the argument and the rule.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "generators.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/slstm_log.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {
namespace {

using cells::SlstmDiagMath;
using cells::SlstmLogMath;
constexpr int S = 4;
constexpr std::int64_t kCertifyBudget = 20'000;

// A native sLSTM step's inputs: R̃ rows (clamped values) and eps, pre-activations, a state with
// n > 0 and |c| <= n (a true state's ratio), m and h anywhere.
struct StepInputs {
  double rec[5], wx[4], native[4];
};
rc::Gen<StepInputs> gen_step_inputs() {
  return rc::gen::apply(
      [](std::vector<int> r, std::vector<int> w, int u, int l, int m, int h) {
        StepInputs in{};
        for (int k = 0; k < 4; ++k) in.rec[k] = r[static_cast<std::size_t>(k)] / 200.0;  // [-0.5, 0.5]
        in.rec[4] = 1e-6;
        for (int k = 0; k < 4; ++k) in.wx[k] = w[static_cast<std::size_t>(k)] / 100.0;  // [-4, 4]
        const double n = std::exp(l / 100.0);                                             // [e^-3, e^3]
        in.native[0] = (u / 100.0) * n;
        in.native[1] = n;
        in.native[2] = m / 100.0;
        in.native[3] = h / 100.0;
        return in;
      },
      rc::gen::container<std::vector<int>>(4, rc::gen::inRange(-100, 101)),
      rc::gen::container<std::vector<int>>(4, rc::gen::inRange(-400, 401)), rc::gen::inRange(-100, 101),
      rc::gen::inRange(-300, 301), rc::gen::inRange(-300, 301), rc::gen::inRange(-100, 101));
}

Tensor values(const double* v, std::int64_t n) {
  return Tensor::from_values(DType::f64, {n}, std::vector<double>(v, v + n));
}

RC_GTEST_PROP(SlstmLogCoords, StepDecodesToTheNativeStep, ()) {
  const StepInputs in = *gen_step_inputs();
  double native_new[S], log_state[S], log_new[S], decoded[S];
  SlstmDiagMath::step(in.rec, in.wx, in.native, native_new, static_cast<double*>(nullptr));
  SlstmLogMath::encode(in.native, log_state);
  SlstmLogMath::step(in.rec, in.wx, log_state, log_new, static_cast<double*>(nullptr));
  SlstmLogMath::decode(log_new, decoded);
  const ComparisonResult c = compare(values(decoded, S).view(), values(native_new, S).view(),
                                     tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian}));
  RC_ASSERT(c.ok());
}

// J_log = E'(s') · J_native · D'(s): D' the Jacobian of decode at the log state, E' that of
// encode at the native new state (u = c/n, ℓ = ln n; m, h unchanged).
RC_GTEST_PROP(SlstmLogCoords, JacobianIsTheNativeJacobianThroughTheCoordinateChange, ()) {
  const StepInputs in = *gen_step_inputs();
  double log_state[S], log_new[S], j_log[S * S], native_new[S], j_native[S * S];
  SlstmLogMath::encode(in.native, log_state);
  SlstmLogMath::step(in.rec, in.wx, log_state, log_new, j_log);
  SlstmDiagMath::step(in.rec, in.wx, in.native, native_new, j_native);
  double D[S * S] = {}, E[S * S] = {};
  const double n = in.native[1], u = log_state[0];
  D[0 * S + 0] = n, D[0 * S + 1] = u * n, D[1 * S + 1] = n, D[2 * S + 2] = 1, D[3 * S + 3] = 1;
  const double c1 = native_new[0], n1 = native_new[1];
  E[0 * S + 0] = 1 / n1, E[0 * S + 1] = -c1 / (n1 * n1), E[1 * S + 1] = 1 / n1, E[2 * S + 2] = 1, E[3 * S + 3] = 1;
  double chained[S * S] = {};
  for (int o = 0; o < S; ++o)
    for (int i = 0; i < S; ++i)
      for (int a = 0; a < S; ++a)
        for (int b = 0; b < S; ++b) chained[o * S + i] += E[o * S + a] * j_native[a * S + b] * D[b * S + i];
  const ComparisonResult c = compare(values(j_log, S * S).view(), values(chained, S * S).view(),
                                     tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian}));
  RC_ASSERT(c.ok());
}

TEST(SlstmLogCoords, ZeroNormalizerIsExact) {
  // n = 0 (the zero initial state): ℓ = −∞, γ = 1, so u' = tanh(z_z), ℓ' = z_i − m', and the
  // Jacobian stays finite.
  const double rec[5] = {0.3, -0.2, 0.4, 0.1, 1e-6}, wx[4] = {0.5, -1.0, 0.7, 0.2};
  const double native[S] = {0, 0, 0, 0};
  double log_state[S], log_new[S], jac[S * S], decoded[S], native_new[S];
  SlstmLogMath::encode(native, log_state);
  EXPECT_EQ(log_state[1], -std::numeric_limits<double>::infinity());
  SlstmLogMath::step(rec, wx, log_state, log_new, jac);
  for (double v : jac) EXPECT_TRUE(std::isfinite(v));
  const double z = std::tanh(wx[2]);  // may be folded at compile time: compare within the band
  EXPECT_TRUE(compare(values(log_new, 1).view(), values(&z, 1).view(),
                      tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian}))
                  .ok());
  SlstmLogMath::decode(log_new, decoded);
  SlstmDiagMath::step(rec, wx, native, native_new, static_cast<double*>(nullptr));
  EXPECT_TRUE(compare(values(decoded, S).view(), values(native_new, S).view(),
                      tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian}))
                  .ok());
}

// The product claim in log coordinates: the default adaptive Newton agrees with the oracle
// within τ (the floor rule of Agreement.NewtonAgreesWithOracleWithinTau), in four dtypes.
RC_GTEST_PROP(SlstmLogCoords, NewtonAgreesWithOracleWithinTau, ()) {
  const auto p = *testing::gen_problem(3000, {"slstm"}, {DType::f64, DType::f32, DType::f16, DType::bf16});
  // Not claimed: f32 with hard weights (σ 0.7 unclamped, |J| near 1). There every f32 Newton
  // fixed point lies up to ~T ulps from the loop's, and the log iterate starts far from the
  // loop's answer: RapidCheck found T 692 converged in 4 iterations at max|F| 7.6e-6 and 5.9x
  // the f32 loop's error (the judge: Disagree, as it should). Native coordinates, the default,
  // keep that class in Agreement.NewtonAgreesWithOracleWithinTau (docs/choices.md).
  RC_PRE(!(p.dtype == DType::f32 && p.conditioning == "hard"));
  RC_TAG(std::string(dtype_name(p.dtype)));
  RC_TAG(std::string(p.conditioning));
  const testing::GeneratedProblem::Made m = p.make();
  const NewtonConfig config{.scan_backend = ScanBackend::cpu, .coords = Coords::log};
  VerifyOptions options{.config = config, .seed = p.seed, .certify_budget = kCertifyBudget};
  if (m.h0) options.h0 = m.h0->view();
  const AgreementReport r = verify_agreement(m.cell, m.x, options);
  // Where the floor is outside τ, log coordinates are held to the contract's rule (the judge's
  // Inconclusive: within the quality bound of the same-dtype floor, r.ill_conditioned) or to the
  // band of the floor. RapidCheck found sLSTM f32, saturating, T 476 with h0: the log step from
  // the converged Picard guess overshoots (max|F| 0.39 -> 9.0), the solve reaches k_max, the
  // unconverged tiles fall back, and the rest lands 1.69x the f32 loop's error (7.1e-4 from that
  // loop where the band allows 1.8e-4): what the contract calls ill-conditioned, not what the
  // native property's stricter band allows.
  if (r.verdict != Verdict::agree) {
    const std::optional<Tensor> floor = testing::floor_outside_tau(p, r, config);
    RC_CLASSIFY(floor.has_value(), "judged against the floor");
    RC_CLASSIFY(r.ill_conditioned, "ill-conditioned (the judge's quality bound)");
    if (!(floor && (r.ill_conditioned || testing::newton_reaches_the_floor(p, r, config, *floor))))
      RC_FAIL(p.describe() + " coords=log\n" + r.failure_message());
  }
}

// The case CI's RapidCheck run found (f32, T 2566, |m| up to 34): the log iterate converges to an
// ulp of its own system, but the decoded trajectory was 3.5x further from the oracle than the
// f32 sequential loop (n 9.3e-4 vs 2.7e-4, m outside τ), since decoding n = e^ℓ loses a factor of
// about ℓ in precision and n, m accumulate it. A converged solve ends with native updates
// (log_coords.hpp), which bring it to native accuracy.
TEST(SlstmLogCoords, ConvergedSolveEndsAtTheNativeFixedPoint) {
  testing::GeneratedProblem p{.cell = "slstm", .dtype = DType::f32, .batch = 1, .time = 2566, .d_in = 2, .d_h = 11,
                              .seed = 95633727};
  p.condition(testing::kConditioningClasses[0]);
  const testing::GeneratedProblem::Made m = p.make();
  const NewtonConfig config{.scan_backend = ScanBackend::cpu, .coords = Coords::log};
  const AgreementReport r = verify_agreement(m.cell, m.x, {.config = config, .seed = p.seed,
                                                           .certify_budget = kCertifyBudget});
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  NewtonStats stats;
  (void)newton_apply(m.cell, m.x, config, m.options(), &stats);
  EXPECT_TRUE(stats.converged);
  EXPECT_GT(stats.updates, stats.iters);  // the loop's updates, then the native ones
}

// The log-coordinate solve on the CPU, and the judge's report of it on p's case.
const NewtonConfig kLogOnCpu{.scan_backend = ScanBackend::cpu, .coords = Coords::log};
AgreementReport judged_log_solve(const testing::GeneratedProblem& p) {
  const testing::GeneratedProblem::Made m = p.make();
  return verify_agreement(m.cell, m.x, {.config = kLogOnCpu, .seed = p.seed, .certify_budget = kCertifyBudget});
}

// The f16 case RapidCheck found (saturating inputs, T 1955, |m| up to 307): the adaptive log
// solve reaches k_max and falls back to the f32 loop, whose n is 0.041 from the oracle where
// the f16 band allows 0.0395; the f16 loop is 20 away, so the judge says Inconclusive. The floor
// of an f16 solver (the f32 loop rounded once) is outside τ there, and Newton reaches it.
TEST(SlstmLogCoords, HalfPrecisionFloorIsTheRoundedF32Loop) {
  testing::GeneratedProblem p{.cell = "slstm", .dtype = DType::f16, .batch = 1, .time = 1955, .d_in = 7, .d_h = 10,
                              .seed = 720946596};
  p.condition(testing::conditioning_class("saturating"));
  const NewtonConfig config = kLogOnCpu;
  const AgreementReport r = judged_log_solve(p);
  EXPECT_NE(r.verdict, Verdict::disagree) << r.failure_message();
  const std::optional<Tensor> floor = testing::floor_outside_tau(p, r, config);
  ASSERT_TRUE(floor.has_value());
  EXPECT_TRUE(testing::newton_reaches_the_floor(p, r, config, *floor));
}

// The dyadic case RapidCheck found (f32, T 1193, weights σ 0.5 on a dyadic grid): the log step
// overshoots from the converged Picard guess (max|F| 0.047 -> 4.2), the solve reaches k_max, and
// before the native updates ran ahead of the fallback the converged tiles it kept were 2.6x the
// f32 loop's error: Disagree. Now within the quality bound.
TEST(SlstmLogCoords, UnconvergedSolveKeepsItsConvergedTilesAtNativeAccuracy) {
  testing::GeneratedProblem p{.cell = "slstm", .dtype = DType::f32, .batch = 2, .time = 1193, .d_in = 4, .d_h = 14,
                              .seed = 591649351};
  p.condition(testing::conditioning_class("dyadic"));
  const AgreementReport r = judged_log_solve(p);
  EXPECT_NE(r.verdict, Verdict::disagree) << r.failure_message();
}

// Gradients at the log-coordinate H* (the adjoint is coordinate-free: the same fixed point),
// stored and recomputed, against the oracle's BPTT.
RC_GTEST_PROP(SlstmLogCoords, GradientsAgreeWithOracleBptt, ()) {
  const auto p = *testing::gen_problem(300, {"slstm"}, {DType::f64, DType::f32});
  const bool recompute = *rc::gen::arbitrary<bool>();
  const testing::GeneratedProblem::Made m = p.make();
  VerifyOptions options{.config = {.scan_backend = ScanBackend::cpu, .coords = Coords::log, .recompute = recompute},
                        .seed = p.seed, .certify_budget = kCertifyBudget, .gradients = true};
  if (m.h0) options.h0 = m.h0->view();
  const AgreementReport r = verify_agreement(m.cell, m.x, options);
  if (r.verdict != Verdict::agree)
    RC_FAIL(fmt::format("{} coords=log recompute={}\n{}", p.describe(), recompute, r.failure_message()));
  RC_ASSERT(!r.gradients.empty());
}

// The loop judges the log residual, but the stats (and the residual gate after them) report the
// native max|F| of the trajectory returned.
TEST(SlstmLogCoords, StatsReportTheNativeResidualOfTheDecodedTrajectory) {
  const testing::GeneratedProblem p{.cell = "slstm", .dtype = DType::f64, .batch = 2, .time = 200, .d_in = 3,
                                    .d_h = 5, .with_h0 = true, .seed = 17};
  const testing::GeneratedProblem::Made m = p.make();
  NewtonStats stats;
  const Tensor H = newton_apply(m.cell, m.x, {.coords = Coords::log}, m.options(), &stats);
  EXPECT_TRUE(stats.converged);
  EXPECT_EQ(stats.fallback_tiles, 0);
  EXPECT_EQ(stats.max_residual, max_residual(m.cell, m.x, H.view(), m.options()));
}

TEST(SlstmLogCoords, RefusedConfigurations) {
  const testing::GeneratedProblem gru{.cell = "gru", .dtype = DType::f32, .time = 8, .d_in = 2, .d_h = 3, .seed = 1};
  const auto g = gru.make();
  try {
    (void)newton_apply(g.cell, g.x, {.coords = Coords::log});
    FAIL() << "coords=log on GRU was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_NE(std::string(e.what()).find("coords"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ParaSLSTM"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)parse_coords("logarithmic"), ContractViolation);

  // h0 whose normalizer is negative, or zero under a non-zero c: the ratio c/n is undefined.
  const testing::GeneratedProblem s{.cell = "slstm", .dtype = DType::f32, .time = 8, .d_in = 2, .d_h = 3, .seed = 2};
  const auto m = s.make();
  for (const auto& [c, n] : {std::pair{0.5, -0.25}, std::pair{0.5, 0.0}}) {
    Tensor h0(DType::f32, {1, 4, 3});
    h0.store({0, 0, 1}, c);
    h0.store({0, 1, 1}, n);
    try {
      (void)newton_apply(m.cell, m.x, {.coords = Coords::log}, {.h0 = h0.view()});
      FAIL() << "h0 with c=" << c << " n=" << n << " was accepted";
    } catch (const ContractViolation& e) {
      EXPECT_NE(std::string(e.what()).find("h0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("normalizer"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace pararnn

