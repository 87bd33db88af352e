// The judge is never talked into Agree: τ is the case's, whatever dtype a trajectory is stored
// in; every path refuses the same malformed cases; an uncertified oracle is no answer; an
// ill-conditioned case is Inconclusive, not Disagree, only within the quality bound; cases as
// pararnn-torch writes them (0.17.4 CfC, "None" arguments, M2RNN without k_dim) read as meant.
// Every planted error is a multiple of a contract tolerance, never a literal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

Tensor normal_input(DType dtype, Shape shape, std::uint64_t seed, double scale = 1.0) {
  SplitMix64 rng(seed);
  Tensor x(dtype, shape);
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal(0.0, scale));
  return x;
}

double tau(DType dtype) { return tolerance_for({.dtype = dtype}).atol; }

// The oracle's trajectory with `shift` added everywhere, stored in `dtype`.
Tensor shifted_oracle(const Case& problem, double shift, DType dtype) {
  Tensor H = Tensor::copy_of(reference::oracle_sequential(problem).H);
  Tensor flat = H.reshaped({H.numel()});
  for (std::int64_t i = 0; i < H.numel(); ++i) flat.store({i}, flat.load({i}) + shift);
  return Tensor::converted(H, dtype);
}

// Whether reading `problem` is refused (ContractViolation or CaseFileError), and the message.
template <class Read>
std::optional<std::string> refusal(Read&& read) {
  try {
    read();
  } catch (const ContractViolation& e) {
    return std::string(e.what());
  } catch (const CaseFileError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

TEST(CompareTau, NarrowTrajectoryOfAnF32CaseIsJudgedAtTheF32Tau) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 1);
  const Case problem = cell.make_case(normal_input(DType::f32, {2, 64, 4}, 2));
  const double planted = 50 * tau(DType::f32);  // inside the bf16/f16 band, 50x outside f32's
  ASSERT_LT(planted, tau(DType::bf16));
  for (DType stored : {DType::bf16, DType::f16}) {
    const AgreementReport r = compare_trajectory(problem, shifted_oracle(problem, planted, stored));
    EXPECT_EQ(r.verdict, Verdict::disagree) << dtype_name(stored) << "\n" << r.failure_message();
    EXPECT_EQ(r.atol, tau(DType::f32));
    EXPECT_EQ(r.dtype, "f32");
    EXPECT_EQ(r.trajectory_dtype, std::string(dtype_name(stored)));
    EXPECT_EQ(r.to_json()["trajectory_dtype"], std::string(dtype_name(stored)));
  }
  const AgreementReport same = compare_trajectory(problem, shifted_oracle(problem, 0.0, DType::f32));
  EXPECT_EQ(same.verdict, Verdict::agree) << same.failure_message();
}

TEST(CompareTau, F32TrajectoryOfAnF64CaseIsJudgedAtTheF64Tau) {
  const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4}, DType::f64, 1);
  const Case problem = cell.make_case(normal_input(DType::f64, {1, 32, 3}, 3));
  const double planted = tau(DType::f32) / 2;  // inside f32's band, far outside f64's
  const AgreementReport r = compare_trajectory(problem, shifted_oracle(problem, planted, DType::f32));
  EXPECT_EQ(r.verdict, Verdict::disagree) << r.failure_message();
  EXPECT_EQ(r.atol, tau(DType::f64));
  EXPECT_EQ(r.trajectory_dtype, "f32");
  // --atol stays the explicit override.
  const AgreementReport loose = compare_trajectory(problem, shifted_oracle(problem, planted, DType::f32),
                                                   {.atol = tau(DType::f32)});
  EXPECT_EQ(loose.verdict, Verdict::agree) << loose.failure_message();
  EXPECT_EQ(loose.tolerance_source, "explicit (caller)");
}

TEST(Certification, LargeNanAndMissingSelfChecksAreNotCertified) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  const Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 2}, 4));
  const double limit = tolerance_for({.dtype = DType::f32, .metric = Metric::oracle_self_check}).atol;
  EXPECT_FALSE(certification_failure(true, limit, 8, problem, "trajectory"));
  for (double delta : {2.5e15, 2 * limit, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const auto why = certification_failure(true, delta, 8, problem, "trajectory");
    ASSERT_TRUE(why) << delta;
    EXPECT_NE(why->find("not certified"), std::string::npos) << *why;
  }
  EXPECT_TRUE(certification_failure(true, 0.0, 0, problem, "trajectory"));  // nothing re-run
  EXPECT_TRUE(certification_failure(false, 0.0, 8, problem, "trajectory"));
}

TEST(Certification, ZeroBudgetMakesCompareInconclusive) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  const Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 2}, 5));
  const AgreementReport r = compare_trajectory(problem, shifted_oracle(problem, 0.0, DType::f32),
                                               {.certify_budget = 0});
  EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.failure_message();
}

TEST(Certification, NonFiniteOracleNamesTheInputTensorAndIndex) {
  const Cell cell = Cell::initialise({.cell = "nlru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  Tensor x = normal_input(DType::f32, {1, 5, 2}, 4);
  x.store({0, 2, 1}, std::nan(""));
  const AgreementReport r = compare_trajectory(cell.make_case(x), Tensor(DType::f32, {1, 5, 3}));
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_NE(r.inconclusive_reason.find("x holds nan at index (0, 2, 1)"), std::string::npos)
      << r.inconclusive_reason;
}

TEST(OneValidation, ExtraTensorsAreRefusedByEveryPath) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  for (const char* extra : {"foo", "H"}) {
    Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 2}, 6));
    problem.parameters.emplace(extra, Tensor(DType::f32, {1, 8, 3}));
    EXPECT_TRUE(refusal([&] { (void)Cell::from_case(problem); })) << extra;
    EXPECT_TRUE(refusal([&] { (void)reference::oracle_sequential(problem); })) << extra;
    EXPECT_TRUE(refusal([&] { (void)compare_trajectory(problem, Tensor(DType::f32, {1, 8, 3})); })) << extra;
  }
}

TEST(OneValidation, SlstmEpsMustBeFiniteAndPositiveOnEveryPath) {
  const Cell cell = Cell::initialise({.cell = "slstm", .d_in = 2, .d_h = 3}, DType::f32, 1);
  for (const char* eps : {"0", "-1", "inf", "nan"}) {
    Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 2}, 7));
    problem.metadata["eps"] = eps;
    EXPECT_TRUE(refusal([&] { (void)Cell::from_case(problem); })) << eps;
    EXPECT_TRUE(refusal([&] { (void)reference::oracle_sequential(problem); })) << eps;
  }
}

TEST(PararnnTorchCases, Rwkv7WithoutNHeadsIsRefusedOnEveryPath) {
  const Cell cell = Cell::initialise({.cell = "rwkv7", .d_in = 4, .d_h = 8, .n_heads = 2}, DType::f32, 1);
  Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 4}, 8));
  problem.metadata.erase("n_heads");
  for (const auto& why : {refusal([&] { (void)Cell::from_case(problem); }),
                          refusal([&] { (void)reference::oracle_sequential(problem); })}) {
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("n_heads"), std::string::npos) << *why;
  }
}

TEST(PararnnTorchCases, NoneIsAnAbsentArgumentOnEveryPath) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 4}, DType::f32, 1);
  for (const char* none : {"None", "none", ""}) {
    Case problem = cell.make_case(normal_input(DType::f32, {1, 16, 2}, 9));
    problem.metadata["n_heads"] = none;
    EXPECT_NO_THROW((void)checked_case(problem)) << none;
    const AgreementReport r = compare_trajectory(problem, shifted_oracle(problem, 0.0, DType::f32));
    EXPECT_EQ(r.verdict, Verdict::agree) << none << r.failure_message();
  }
}

TEST(PararnnTorchCases, Cfc0174CaseWithoutWbReadsAsWbZero) {
  const Cell cell = Cell::initialise({.cell = "cfc", .d_in = 4, .d_h = 6}, DType::f32, 2);
  Tensor x = normal_input(DType::f32, {2, 48, 4}, 10);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t t = 0; t < 48; ++t) x.store({b, t, 3}, 0.1 + 0.01 * static_cast<double>(t % 7));
  // As torch.save_file writes a 0.17.4 ParaCfC: u, W_x.weight (2 d_h, d_in - 1), W_x.bias, x.
  SafetensorsFile file;
  for (const char* name : {"u", "W_x.weight", "W_x.bias"}) file.tensors.emplace(name, cell.parameter(name));
  file.tensors.emplace("x", x);
  file.metadata = {{"cell", "cfc"}, {"max_recurrent_norm", "0.5"}};
  const Case legacy = case_from_file(file, "cfc_0174.safetensors");
  EXPECT_EQ(legacy.meta("cell_version").value_or(""), "pararnn-torch 0.17.4 (no W_b: read as W_b = 0)");
  const Cell read = checked_case(legacy);
  EXPECT_EQ(read.parameter("W_b.weight").to_f64_vector(), std::vector<double>(6 * 3, 0.0));
  const AgreementReport r = verify_agreement(read, legacy.x, {.cell_version = *legacy.meta("cell_version")});
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  EXPECT_EQ(r.to_json()["cell_version"], *legacy.meta("cell_version"));
  // A half-present W_b is not the 0.17.4 cell: it stays refused.
  file.tensors.emplace("W_b.bias", Tensor(DType::f32, {6}));
  EXPECT_TRUE(refusal([&] { (void)checked_case(case_from_file(file, "half.safetensors")); }));
}

TEST(PararnnTorchCases, M2rnnDimensionsFollowFromTheTensorsWhenAbsent) {
  const Cell cell = Cell::initialise({.cell = "m2rnn", .d_in = 3, .k_dim = 2, .v_dim = 3}, DType::f32, 1);
  const Case made = cell.make_case(normal_input(DType::f32, {1, 16, 3}, 11));
  SafetensorsFile file{.tensors = made.parameters, .metadata = {{"cell", "m2rnn"}, {"k_dim", "None"}}};
  file.tensors.emplace("x", made.x);
  const Case problem = case_from_file(file, "m2rnn.safetensors");
  EXPECT_EQ(problem.meta("k_dim"), "2");
  EXPECT_EQ(problem.meta("v_dim"), "3");
  const AgreementReport r = compare_trajectory(problem, shifted_oracle(problem, 0.0, DType::f32));
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  // Present but wrong: refused by both readings, naming the mismatch.
  file.metadata["v_dim"] = "2";
  const Case wrong = case_from_file(file, "m2rnn.safetensors");
  EXPECT_TRUE(refusal([&] { (void)Cell::from_case(wrong); }));
  EXPECT_TRUE(refusal([&] { (void)reference::oracle_sequential(wrong); }));
}

TEST(Cotangent, NonFiniteGradHIsRefused) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  Case problem = cell.make_case(normal_input(DType::f32, {1, 8, 2}, 12));
  Tensor g(DType::f32, {1, 8, 3});
  g.store({0, 4, 2}, std::nan(""));
  problem.grad_H = g;
  const auto why = refusal([&] { (void)checked_case(problem); });
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("grad.H holds nan at index (0, 4, 2)"), std::string::npos) << *why;
  const NewtonForward forward = newton_forward(cell, problem.x);
  EXPECT_THROW((void)newton_backward(cell, problem.x, forward, g), ContractViolation);
}

// The ill-conditioned rule, on a case whose floor is made to lie outside τ by a scoped τ of a
// quarter of the measured floor: a trajectory at the floor is Inconclusive (ill-conditioned);
// one beyond the quality bound is Disagree; with the default τ the floor is inside and a planted
// error stays Disagree.
TEST(IllConditioned, WithinTheQualityBoundOfTheFloorIsInconclusiveBeyondItDisagree) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, 3);
  const Case problem = cell.make_case(normal_input(DType::f32, {1, 256, 4}, 13));
  const Tensor sequential = sequential_apply(cell, problem.x);
  const AgreementReport at_default = compare_trajectory(problem, sequential);
  ASSERT_EQ(at_default.verdict, Verdict::agree) << at_default.failure_message();
  const double floor = at_default.sequential_max_abs;
  ASSERT_GT(floor, 0.0);
  const double bound = tolerance_for({.dtype = DType::f32, .metric = Metric::quality_ratio}).atol;
  {
    const ScopedToleranceOverride tight({.metric = Metric::trajectory}, {.atol = floor / 4, .rtol = 0.0},
                                        "test: a floor outside tau");
    const AgreementReport r = compare_trajectory(problem, sequential);
    EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.failure_message();
    EXPECT_TRUE(r.ill_conditioned);
    EXPECT_NE(r.inconclusive_reason.find("ill-conditioned in f32"), std::string::npos) << r.inconclusive_reason;
    EXPECT_EQ(r.to_json()["quality_ratio"], 1.0);
    const AgreementReport worse =
        compare_trajectory(problem, shifted_oracle(problem, 2 * bound * floor, DType::f64));
    EXPECT_EQ(worse.verdict, Verdict::disagree) << worse.failure_message();
    EXPECT_FALSE(worse.ill_conditioned);
  }
  const AgreementReport planted = compare_trajectory(problem, shifted_oracle(problem, 2 * tau(DType::f32), DType::f64));
  EXPECT_EQ(planted.verdict, Verdict::disagree) << planted.failure_message();
}

// A same-dtype floor that is not finite bounds nothing: an f16 RWKV-7 case whose matrix state
// (not squashed) grows past f16's range under large inputs, while the oracle's stays finite. The
// f16 sequential loop is inf from the oracle, so a wrong trajectory (zeros) is Inconclusive with
// that said, never "ill-conditioned ... 0.00x that floor" (max_abs / inf), and the report's
// quality_ratio is null, not 0.
TEST(IllConditioned, ANonFiniteFloorBoundsNothing) {
  const Cell cell = Cell::initialise({.cell = "rwkv7", .d_in = 8, .d_h = 8, .n_heads = 1}, DType::f16, 1);
  const Case problem = cell.make_case(normal_input(DType::f16, {1, 256, 8}, 15, 300.0));
  const Tensor zeros(DType::f16, cell.trajectory_shape(1, 256));
  ASSERT_TRUE(reference::oracle_sequential(problem).finite);
  const AgreementReport r = compare_trajectory(problem, zeros);
  ASSERT_FALSE(std::isfinite(r.sequential_max_abs)) << "the case must overflow the f16 loop: " << r.failure_message();
  EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.failure_message();
  EXPECT_FALSE(r.ill_conditioned) << r.inconclusive_reason;
  EXPECT_NE(r.inconclusive_reason.find("the f16 sequential loop itself is not finite"), std::string::npos)
      << r.inconclusive_reason;
  EXPECT_TRUE(r.to_json()["quality_ratio"].is_null()) << r.to_json()["quality_ratio"];
}

// The ill-conditioned reason names its cause by λ̂ (reference::oracle_lyapunov on the oracle's
// trajectory): "the cause is chaos" exactly when λ̂ > 0, "not chaos" otherwise, on a contracting
// GRU and on an unclamped sLSTM head with large recurrent weights (chaotic along its trajectory);
// each made ill-conditioned by a scoped τ of a quarter of its floor.
TEST(IllConditioned, TheReasonNamesChaosExactlyWhenLambdaHatIsPositive) {
  const std::pair<CellOptions, std::uint64_t> cases[] = {
      {{.cell = "gru", .d_in = 4, .d_h = 8}, 13},
      {{.cell = "slstm", .mix = "head", .d_in = 4, .d_h = 8, .n_heads = 1, .max_recurrent_norm = std::nullopt,
        .weight_std = 2.0},
       14}};
  int chaotic = 0, contracting = 0;
  for (const auto& [options, seed] : cases) {
    SCOPED_TRACE(options.cell + " mix " + options.mix);
    const Cell cell = Cell::initialise(options, DType::f32, 3);
    const Case problem = cell.make_case(normal_input(DType::f32, {1, 256, 4}, seed));
    const Tensor sequential = sequential_apply(cell, problem.x);
    const double floor = compare_trajectory(problem, sequential).sequential_max_abs;
    ASSERT_GT(floor, 0.0);
    const reference::LyapunovEstimate e =
        reference::oracle_lyapunov(problem, reference::oracle_sequential(problem), {.chains = 16});
    ASSERT_TRUE(e.finite) << e.reason;
    (e.max_exponent > 0.0 ? chaotic : contracting) += 1;
    const ScopedToleranceOverride tight({.metric = Metric::trajectory}, {.atol = floor / 4, .rtol = 0.0},
                                        "test: a floor outside tau");
    const AgreementReport r = compare_trajectory(problem, sequential);
    ASSERT_TRUE(r.ill_conditioned) << r.failure_message();
    const bool says_chaos = r.inconclusive_reason.find("the cause is chaos") != std::string::npos;
    const bool says_not = r.inconclusive_reason.find("not chaos") != std::string::npos;
    EXPECT_EQ(says_chaos, e.max_exponent > 0.0) << "lambda-hat " << e.max_exponent << ": " << r.inconclusive_reason;
    EXPECT_EQ(says_not, !(e.max_exponent > 0.0)) << "lambda-hat " << e.max_exponent << ": " << r.inconclusive_reason;
  }
  EXPECT_EQ(chaotic, 1) << "the sLSTM head case must be chaotic, the GRU one contracting";
  EXPECT_EQ(contracting, 1);
}

}  // namespace
}  // namespace pararnn
