// Properties of the product claim: Newton (default max_iters = None) agrees with the independent
// oracle within τ for every cell and dtype; a fixed K = 3 on hard weights is reported as
// Disagree rather than passing; the report points at a planted error; each default band refuses
// the wrong answers it exists to catch (tolerance_protections). Built once per backend
// (backend.hpp): the solver claims run on the backend under test.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdio>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;
using testing::GeneratedProblem;
using testing::kTestBackend;

const std::vector<std::string>& kCells = testing::kPerChannelCellLabels;
constexpr std::int64_t kCertifyBudget = 20'000;

// `config` on the backend under test.
AgreementReport verify(const GeneratedProblem& p, NewtonConfig config) {
  config.scan_backend = kTestBackend;
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  // Certify a sample of chains: a property run makes hundreds of cases.
  VerifyOptions options{.config = config, .seed = p.seed, .certify_budget = kCertifyBudget};
  if (h0) options.h0 = h0->view();
  options.repro_command = "property: " + p.describe();
  return verify_agreement(cell, x, options);
}

RC_GTEST_PROP(Agreement, NewtonAgreesWithOracleWithinTau, ()) {
  const auto p = *gen_problem(3000, testing::backend_cells(kCells), testing::kNewtonDtypes);
  RC_TAG(std::string(p.conditioning));
  RC_CLASSIFY(p.time > 1000, "T > 1000");
  RC_TAG(std::string(dtype_name(p.dtype)));
  const AgreementReport r = verify(p, NewtonConfig{});
  // A case whose floor (the same-dtype f32 loop; for f16/bf16 the f32 loop rounded once) is
  // itself outside τ of the oracle is beyond what any solver in that dtype can reach; there the
  // claim is Newton within the band of that floor on the same backend (testing::floor_outside_tau,
  // docs/choices.md, the rule of the M2RNN property).
  if (r.verdict != Verdict::agree) {
    const NewtonConfig config{.scan_backend = kTestBackend};
    const std::optional<Tensor> floor = testing::floor_outside_tau(p, r, config);
    RC_CLASSIFY(floor.has_value(), "judged against the floor");
    if (!(floor && testing::newton_reaches_the_floor(p, r, config, *floor)))
      RC_FAIL(r.failure_message() + testing::save_failure_artifacts(p, "agreement", NewtonConfig{}));
  }
  RC_ASSERT(r.backend == std::string(testing::kTestBackendName));
  // Reported, not asserted: a bf16/f16 sequential loop rounds its state every step and can
  // drift past τ on hard weights (docs/numerics-contract.md), while Newton rounds once.
  RC_CLASSIFY(r.sequential_max_abs > r.atol, "same-dtype sequential outside tau");
}

TEST(Agreement, FixedThreeIterationsOnHardWeightsIsReportedAsDisagree) {
  // Unclamped recurrent std 0.7 at long T: three Newton steps do not reach the sequential
  // answer; the harness must say Disagree (with the default adaptive K it agrees).
  int disagreements = 0;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 4096, .d_in = 4,
                       .d_h = 32, .weight_std = 0.7, .clamped = false, .seed = seed};
    const AgreementReport fixed = verify(p, NewtonConfig{.max_iters = 3, .residual_fail = std::nullopt});
    const AgreementReport adaptive = verify(p, NewtonConfig{});
    EXPECT_EQ(adaptive.verdict, Verdict::agree) << adaptive.failure_message();
    if (fixed.verdict == Verdict::disagree) ++disagreements;
    EXPECT_NE(fixed.verdict, Verdict::inconclusive) << fixed.failure_message();
  }
  EXPECT_GT(disagreements, 0) << "no hard case found: the fixed-K claim is untested";
}

#if !PARARNN_TEST_ON_CUDA  // the comparison itself involves no backend: tested once, on the host
RC_GTEST_PROP(Agreement, ReportPointsAtAPlantedError, ()) {
  const auto p = *gen_problem(200, kCells, {DType::f32, DType::f64});
  const Cell cell = p.make_cell();
  Case problem = cell.make_case(p.make_input(), p.make_h0(cell.slots()));
  const auto oracle = reference::oracle_sequential(problem, {.certify_budget = kCertifyBudget});
  Tensor theirs = Tensor::converted(oracle.H, p.dtype);
  const Shape shape = theirs.shape();
  Shape index(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d)
    index[d] = *rc::gen::inRange<std::int64_t>(0, shape[d]);
  const Tolerance tau = tolerance_for({.dtype = p.dtype, .cell = p.cell});
  const double value = theirs.view().load(index);
  const double planted = 10.0 * (tau.atol + tau.rtol * std::abs(value));
  theirs.view().store(index, value + planted);
  const AgreementReport r = compare_trajectory(problem, theirs, {.certify_budget = kCertifyBudget});
  RC_ASSERT(r.verdict == Verdict::disagree);
  RC_ASSERT(r.worst_index == index);
  RC_ASSERT(r.mismatches == 1);
}

// What each default trajectory band protects (tolerance_protections(): a wrong answer seen in the
// field or named by the contract): an answer that agrees (the oracle stored in the case's dtype)
// with the row's error planted at one element of magnitude at most 1 is judged Disagree through
// the judge's own path, on generated cases of the cells whose band is the default. A band
// loosened by mistake (a digit slip, the seed's f64 value restored) lets the error through, which
// the test that pins the table alone would otherwise be the only one to see. On an
// ill-conditioned case (the same-dtype loop itself outside τ) the planted answer may be
// Inconclusive within the quality bound of that floor, never Agree.
RC_GTEST_PROP(ToleranceProtection, EveryDefaultBandRefusesTheWrongAnswersItProtects, ()) {
  for (const ToleranceProtection& row : tolerance_protections()) {
    std::vector<std::string> cells;
    for (const std::string& label : kCells)
      if (tolerance_for({.dtype = row.dtype, .metric = row.metric, .cell = testing::label_options(label).cell})
              .source == "default")
        cells.push_back(label);
    RC_ASSERT(!cells.empty());
    const auto p = *gen_problem(200, cells, {row.dtype});
    const Cell cell = p.make_cell();
    const Case problem = cell.make_case(p.make_input(), p.make_h0(cell.slots()));
    const auto oracle = reference::oracle_sequential(problem, {.certify_budget = kCertifyBudget});
    Tensor answer = Tensor::converted(oracle.H, p.dtype);
    const VerifyOptions options{.seed = p.seed, .certify_budget = kCertifyBudget};
    const AgreementReport right = compare_trajectory(problem, answer, options);
    RC_ASSERT(right.verdict == Verdict::agree);

    const Tensor truth = oracle.H.reshaped({oracle.H.numel()});
    std::vector<std::int64_t> unit;  // the elements of magnitude at most 1, the rows' unit
    for (std::int64_t i = 0; i < truth.numel(); ++i)
      if (std::abs(truth.load({i})) <= 1.0) unit.push_back(i);
    if (unit.empty()) continue;
    const std::int64_t at = *rc::gen::elementOf(unit);
    const double sign = *rc::gen::arbitrary<bool>() ? 1.0 : -1.0;
    const double exact = truth.load({at});
    // Stored in the case's dtype, the planted value is moved outward until its error is at least
    // the row's: rounding to the storage grid must not shrink the error below what the row names.
    Tensor flat = answer.reshaped({answer.numel()});
    for (double extra = 0.0; std::abs(flat.load({at}) - exact) < row.wrong_by; extra += row.wrong_by / 64)
      flat.store({at}, exact + sign * (row.wrong_by + extra));
    const AgreementReport wrong = compare_trajectory(problem, answer, options);
    const Tolerance tau = tolerance_for({.dtype = row.dtype, .metric = row.metric, .cell = p.cell});
    RC_CLASSIFY(wrong.ill_conditioned, "ill-conditioned");
    if (wrong.ill_conditioned) {
      RC_ASSERT(wrong.verdict != Verdict::agree);
    } else {
      if (wrong.verdict != Verdict::disagree)
        RC_FAIL(fmt::format("{} planted at element {} of {}: {} (band atol {:g} rtol {:g}; protects: {})",
                            row.wrong_by, at, p.describe(), verdict_name(wrong.verdict), tau.atol, tau.rtol,
                            row.source));
      RC_ASSERT(wrong.mismatches == 1);
    }
  }
}

TEST(ToleranceProtection, EveryDtypesTrajectoryBandNamesAWrongAnswerItRefuses) {
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    int named = 0;
    for (const ToleranceProtection& row : tolerance_protections())
      if (row.dtype == dtype && row.metric == Metric::trajectory) {
        ++named;
        EXPECT_FALSE(row.source.empty());
      }
    EXPECT_GT(named, 0) << dtype_name(dtype) << "'s trajectory band says nothing of what it protects";
  }
}

// The predicted K (contracts/predicted_k.hpp) is never below the K* it predicts on the campaign's
// classes init ("easy": the library's weights, clamped) and hard beyond the documented margin (issue
// 45, item 4; kPredictedKMargin): where the model gives a number, Newton with exactly that many
// updates plus the margin (no early stop, no fallback: the raw iterate measure_kstar times) agrees
// with the oracle at τ.
// A case whose same-dtype sequential loop is itself outside τ has no K* and makes no claim.
// Not vacuous (issue 58 item 5): a case without a number makes no claim, so the test also asserts
// that at least kMinShareWithANumber of its cases got one, and prints the shares.
// kMinShareWithANumber: the share measured 2026-12-06 is 39 % (789 of 2000 cases,
// docs/kstar/predicted_k_property.log; 38 to 44 % in five runs of 100), so 20 % is about 4 standard
// deviations of a 100-case run below it: a model that stops giving numbers fails, a seed does not.
constexpr double kMinShareWithANumber = 0.2;

TEST(PredictedK, NeverBelowTheMeasuredKstarOnInitAndHardCases) {
  int cases = 0, with_a_number = 0, judged = 0;
  const bool held = rc::check("predicted K + margin agrees with the oracle where the model gives a number", [&] {
    auto p = *gen_problem(1000, kCells, {DType::f32, DType::bf16});
    p.condition(testing::conditioning_class(*rc::gen::element<std::string>("easy", "hard")));
    const Cell cell = p.make_cell();
    const Tensor x = p.make_input();
    const auto h0 = p.make_h0(cell.slots());
    const Case problem = cell.make_case(x, h0);
    const auto oracle = reference::oracle_sequential(problem, {.certify = false});
    const reference::LyapunovEstimate e = reference::oracle_lyapunov(problem, oracle, {.chains = p.batch});
    const Tolerance tau = tolerance_for({.dtype = p.dtype, .cell = p.cell});
    const PredictedK predicted = predict_k(e, tau.atol);
    RC_CLASSIFY(predicted.k.has_value(), "a number");
    RC_CLASSIFY(p.conditioning == "hard", "hard");
    ++cases;
    if (!predicted.k) return;
    ++with_a_number;
    ApplyOptions apply;
    if (h0) apply.h0 = h0->view();
    if (!compare(sequential_apply(cell, x, apply), oracle.H, tau).ok()) return;
    ++judged;
    const QuietWarnings quiet;  // a fixed K leaves a residual above the warning level on purpose
    const Tensor H = newton_apply(cell, x, {.max_iters = *predicted.k + kPredictedKMargin, .residual_atol = std::nullopt,
                                            .residual_fail = std::nullopt, .allow_sequential = false}, apply);
    const ComparisonResult c = compare(H, oracle.H, tau);
    if (!c.ok())
      RC_FAIL(fmt::format("predicted K {} + margin {} (unit {}, C*e0 {:.3g}, memory {:.3g}, guess error {:.3g}) leaves {:.3e} > tau on {}",
                          *predicted.k, kPredictedKMargin, predicted.unit, predicted.basin, predicted.memory, predicted.guess_error,
                          c.max_abs, p.describe()));
  });
  ASSERT_TRUE(held);
  ASSERT_GT(cases, 0);
  const double share = static_cast<double>(with_a_number) / cases;
  std::printf("PredictedK: %d cases, %d with a number (%.0f %%; at least %.0f %% asserted), %d judged against the oracle\n",
              cases, with_a_number, 100.0 * share, 100.0 * kMinShareWithANumber, judged);
  EXPECT_GE(share, kMinShareWithANumber) << "the model gave a number on too few cases: the property is nearly vacuous";
  EXPECT_GT(judged, 0) << "no case was judged against the oracle";
}
#endif

}  // namespace
}  // namespace pararnn

namespace pararnn {
namespace {

TEST(Agreement, FailureArtifactsAreWrittenAndReplayable) {
  // The evidence a failing property leaves: a case file that reads back to the same problem, and
  // both trajectories, named in the message with the verify command.
  const testing::GeneratedProblem p{.cell = "lstm", .dtype = DType::f32, .batch = 2, .time = 9,
                                    .d_in = 3, .d_h = 4, .with_h0 = true, .seed = 77};
  const std::string text = testing::save_failure_artifacts(p, "artifact-check", NewtonConfig{});
  const auto start = text.find("Artifacts: ") + 11;
  const std::string case_path = text.substr(start, text.find(" (+", start) - start);
  EXPECT_NE(text.find("pararnn verify " + case_path), std::string::npos) << text;
  const Case problem = read_case(case_path);
  EXPECT_EQ(problem.x.to_f64_vector(), p.make_input().to_f64_vector());
  ASSERT_TRUE(problem.h0.has_value());
  const std::string stem = case_path.substr(0, case_path.size() - std::string(".safetensors").size());
  EXPECT_EQ(read_safetensors(stem + ".solver.safetensors").tensors.at("H").shape(), (Shape{2, 9, 2, 4}));
  EXPECT_EQ(read_safetensors(stem + ".oracle.safetensors").tensors.at("H").dtype(), DType::f64);
}

}  // namespace
}  // namespace pararnn
