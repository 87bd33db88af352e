// judge_op: the verdicts of op cases (docs/ops/README.md, "Verdicts"). Tolerances come from the
// contract table; where a test needs the floor outside τ, it scopes an override at a quarter of
// the floor it measured (a figure of the case, not a literal band).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "pararnn/contracts/op_judge.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn {
namespace {

OpCase small_case(DType dtype, const std::string& op = "gla") {
  return generate_op_case({.op = op, .dtype = dtype, .batch = 2, .time = 24, .heads = 2, .k_dim = 4, .v_dim = 3,
                           .seed = 7, .h0_std = 0.5});
}

TEST(OpJudge, TheOraclesOwnAnswerAndTheFloorAgree) {
  for (const std::string op : {"gla", "simple_gla", "delta_rule", "gated_delta_rule", "dplr_delta_rule", "rwkv7"}) {
    const OpCase c = small_case(DType::bf16, op);
    const OpReport floor = judge_op(c, reference::op_sequential_in_dtype(c));
    EXPECT_EQ(floor.verdict, Verdict::agree) << op << ": " << floor.summary();
    const OpReport exact = judge_op(c, reference::oracle_op(c).outputs);
    EXPECT_EQ(exact.verdict, Verdict::agree) << op << ": " << exact.summary();
    EXPECT_EQ(exact.outputs.at(0).finding, "within");
    EXPECT_EQ(exact.to_json().at("tau").at("source"), "default");
  }
}

// An f32 case answered in bf16 is judged at f32's τ: worse than f32 allows, never "close enough".
TEST(OpJudge, ANarrowerAnswerIsJudgedAtTheCasesTau) {
  const OpCase c = small_case(DType::f32);
  std::map<std::string, Tensor> answer;
  for (const auto& [name, t] : reference::oracle_op(c).outputs) answer.emplace(name, Tensor::converted(t, DType::bf16));
  const OpReport r = judge_op(c, answer);
  EXPECT_EQ(r.verdict, Verdict::disagree) << r.summary();
  EXPECT_EQ(r.answer_dtype, "bf16");
  EXPECT_NE(r.reason.find("worse than f32 allows"), std::string::npos) << r.reason;
}

// Where the same-dtype loop itself is outside τ: an answer as good as the floor is Inconclusive
// (ill-conditioned, within what the dtype allows), one far worse than the floor is Disagree.
TEST(OpJudge, IllConditionedCasesAreInconclusiveWithinTheQualityBound) {
  const OpCase c = small_case(DType::bf16);
  const auto floor = reference::op_sequential_in_dtype(c);
  const reference::OpOracleResult oracle = reference::oracle_op(c);
  const Tolerance tau = tolerance_for({.dtype = DType::bf16, .metric = Metric::op_output});
  const double floor_error = compare(floor.at("o"), oracle.outputs.at("o"), tau).max_abs;
  ASSERT_GT(floor_error, 0.0);
  ScopedToleranceOverride tight({.metric = Metric::op_output}, {.atol = floor_error / 4, .rtol = 0.0},
                                "test: tau below this case's bf16 floor");
  const OpReport same = judge_op(c, floor);
  EXPECT_EQ(same.verdict, Verdict::inconclusive) << same.summary();
  EXPECT_EQ(same.outputs.at(0).finding, "ill-conditioned");
  const double bound = tolerance_for({.dtype = DType::bf16, .metric = Metric::quality_ratio}).atol;
  std::map<std::string, Tensor> worse = floor;
  Tensor o = Tensor::copy_of(floor.at("o"));
  o.store({0, 12, 1, 2}, oracle.outputs.at("o").load({0, 12, 1, 2}) + 2 * bound * floor_error);
  worse["o"] = o;
  const OpReport r = judge_op(c, worse);
  EXPECT_EQ(r.verdict, Verdict::disagree) << r.summary();
  EXPECT_NE(r.reason.find("worse than bf16 allows"), std::string::npos) << r.reason;
}

// An f16 output whose true value is beyond 65504: the floor and an answer hold it as the same
// infinity, which is counted and left out, never a NaN-like failure; any other value there is judged.
TEST(OpJudge, ValuesBeyondF16AreLeftOutWhenHeldAsThatInfinity) {
  // K = V = 1, k = v = 256, no decay: the state after t steps is 65536·t (beyond f16 from t = 1),
  // o_t = 2^-8 · 65536 t = 256 t (representable).
  SafetensorsFile f;
  const Shape one{1, 4, 1, 1};
  f.tensors.emplace("q", Tensor::from_values(DType::f16, one, std::vector<double>(4, 0x1p-8)));
  f.tensors.emplace("k", Tensor::from_values(DType::f16, one, std::vector<double>(4, 256)));
  f.tensors.emplace("v", Tensor::from_values(DType::f16, one, std::vector<double>(4, 256)));
  f.tensors.emplace("g", Tensor::from_values(DType::f16, {1, 4, 1}, std::vector<double>(4, 0)));
  f.metadata = {{"op", "simple_gla"}, {"scale", "1"}};
  const OpCase c = op_case_from_file(f, "f16 overflow");
  const OpReport r = judge_op(c, reference::op_sequential_in_dtype(c));
  ASSERT_EQ(r.outputs.at(1).unrepresentable, 1) << r.summary();
  EXPECT_EQ(r.verdict, Verdict::agree) << r.summary();
  EXPECT_NE(r.reason.find("beyond f16's range"), std::string::npos) << r.reason;
  EXPECT_EQ(r.to_json().at("outputs").at(1).at("unrepresentable"), r.outputs.at(1).unrepresentable);
}

// An f32 case whose state (2^128·t) overflows the same-dtype loop while o = 2^-64·S = 2^64·t does
// not: the floor's o is infinite where the oracle's is finite, so it bounds nothing. An answer
// outside τ there is never Agree, and the finding says the floor is not finite instead of calling
// the answer "0.00x that floor" (ill-conditioned).
TEST(OpJudge, ANonFiniteFloorBoundsNothing) {
  SafetensorsFile f;
  const Shape one{1, 4, 1, 1};
  f.tensors.emplace("q", Tensor::from_values(DType::f32, one, std::vector<double>(4, 0x1p-64)));
  f.tensors.emplace("k", Tensor::from_values(DType::f32, one, std::vector<double>(4, 0x1p64)));
  f.tensors.emplace("v", Tensor::from_values(DType::f32, one, std::vector<double>(4, 0x1p64)));
  f.tensors.emplace("g", Tensor::from_values(DType::f32, {1, 4, 1}, std::vector<double>(4, 0)));
  f.metadata = {{"op", "simple_gla"}, {"scale", "1"}};
  const OpCase c = op_case_from_file(f, "f32 state overflow");
  const reference::OpOracleResult oracle = reference::oracle_op(c);
  const Tolerance tau = tolerance_for({.dtype = DType::f32, .metric = Metric::op_output});
  ASSERT_FALSE(std::isfinite(compare(reference::op_sequential_in_dtype(c).at("o"), oracle.outputs.at("o"), tau).max_abs))
      << "the case does not overflow the f32 loop";
  std::map<std::string, Tensor> answer;
  for (const auto& [name, t] : oracle.outputs) answer.emplace(name, Tensor::converted(t, DType::f32));
  const OpReport exact = judge_op(c, answer);
  ASSERT_EQ(exact.verdict, Verdict::agree) << exact.summary();
  Tensor o = Tensor::copy_of(answer.at("o"));
  o.store({0, 2, 0, 0}, o.load({0, 2, 0, 0}) * (1 + 10 * tau.rtol));  // finite, outside τ
  answer["o"] = o;
  const OpReport r = judge_op(c, answer);
  EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.summary();
  const OpOutputCheck& check = r.outputs.at(0);
  EXPECT_EQ(check.finding, "floor-not-finite") << check.message;
  EXPECT_NE(check.message.find("the f32 sequential loop itself is not finite"), std::string::npos) << check.message;
  EXPECT_NE(check.message.find("cannot be bounded"), std::string::npos) << check.message;
  EXPECT_EQ(check.message.find("ill-conditioned"), std::string::npos) << check.message;
  EXPECT_TRUE(std::isnan(check.ratio)) << check.ratio;
  EXPECT_TRUE(r.to_json().at("outputs").at(0).at("quality_ratio").is_null()) << r.to_json().dump();
}

// The same state (65536·t) in an f32 and a bf16 case, whose dtypes hold it, answered in f16: the
// answer's infinity is no value of the case's dtype, so it is judged (non-finite), never left out
// as "beyond the range" of the narrower dtype the answer chose (CONTRACT §2: a narrower dtype
// never turns into Agree).
TEST(OpJudge, ANarrowerAnswersInfinityIsJudgedWhereTheCasesDtypeHoldsTheValue) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SafetensorsFile f;
    const Shape one{1, 4, 1, 1};
    f.tensors.emplace("q", Tensor::from_values(dtype, one, std::vector<double>(4, 0x1p-8)));
    f.tensors.emplace("k", Tensor::from_values(dtype, one, std::vector<double>(4, 256)));
    f.tensors.emplace("v", Tensor::from_values(dtype, one, std::vector<double>(4, 256)));
    f.tensors.emplace("g", Tensor::from_values(dtype, {1, 4, 1}, std::vector<double>(4, 0)));
    f.metadata = {{"op", "simple_gla"}, {"scale", "1"}};
    const OpCase c = op_case_from_file(f, "state beyond f16");
    std::map<std::string, Tensor> answer;
    for (const auto& [name, t] : reference::oracle_op(c).outputs) answer.emplace(name, Tensor::converted(t, DType::f16));
    const OpReport r = judge_op(c, answer);
    EXPECT_EQ(r.verdict, Verdict::disagree) << dtype_name(dtype) << ": " << r.summary();
    EXPECT_EQ(r.outputs.at(1).unrepresentable, 0) << r.summary();
    EXPECT_EQ(r.outputs.at(1).finding, "non-finite") << r.summary();
    // The same for a gradient answered in f16 (grad.k = Σ_t q·v-ish sums beyond f16's range here).
    std::map<std::string, Tensor> with_grads = reference::oracle_op(c).outputs;
    for (const auto& [name, t] : reference::oracle_op_gradients(c).tensors)
      with_grads.emplace("grad." + name, Tensor::converted(t, DType::f16));
    const OpReport g = judge_op(c, with_grads);
    EXPECT_NE(g.verdict, Verdict::agree) << dtype_name(dtype) << ": " << g.summary();
    for (const OpOutputCheck& check : g.gradients) EXPECT_EQ(check.unrepresentable, 0) << check.message;
  }
}

// Gradients (docs/ops/README.md's verdict table for grad.*): the oracle's own and the floor's
// Agree, one perturbed beyond τ Disagrees as worse than the dtype allows, a NaN one Disagrees, a
// missing one is never Agree, an uncertified gradient oracle is Inconclusive.
TEST(OpJudge, GradientsAreJudgedAtTheOpGradientTau) {
  for (const std::string op : {"gated_delta_rule", "ssd"}) {
    const OpCase c = small_case(DType::f32, op);
    std::map<std::string, Tensor> exact = reference::oracle_op(c).outputs;
    for (const auto& [name, t] : reference::oracle_op_gradients(c).tensors) exact.emplace("grad." + name, t);
    const OpReport r = judge_op(c, exact);
    EXPECT_EQ(r.verdict, Verdict::agree) << op << ": " << r.summary();
    EXPECT_EQ(r.gradients.size(), op_gradient_inputs(c).size());
    EXPECT_EQ(r.to_json().at("gradient_tau").at("metric"), "op_gradient");
    std::map<std::string, Tensor> floor = reference::op_sequential_in_dtype(c);
    for (const auto& [name, t] : reference::op_gradients_in_dtype(c)) floor.emplace("grad." + name, t);
    const OpReport f = judge_op(c, floor);
    EXPECT_EQ(f.verdict, Verdict::agree) << op << ": " << f.summary();

    const Tolerance tau = tolerance_for({.dtype = DType::f32, .metric = Metric::op_gradient});
    const std::string victim = op == "ssd" ? "grad.B" : "grad.k";
    std::map<std::string, Tensor> wrong = exact;
    Tensor g = Tensor::copy_of(exact.at(victim));
    Tensor flat = g.reshaped({g.numel()});
    double scale = 0.0;
    for (double x : g.to_f64_vector()) scale = std::max(scale, std::abs(x));
    flat.store({1}, flat.load({1}) + 10 * tau.rtol * scale);
    wrong[victim] = g;
    const OpReport w = judge_op(c, wrong);
    EXPECT_EQ(w.verdict, Verdict::disagree) << w.summary();
    EXPECT_NE(w.reason.find(victim + ": worse than f32 allows"), std::string::npos) << w.reason;

    std::map<std::string, Tensor> nan = exact;
    Tensor n = Tensor::copy_of(exact.at(victim));
    n.reshaped({n.numel()}).store({0}, std::nan(""));
    nan[victim] = n;
    EXPECT_EQ(judge_op(c, nan).verdict, Verdict::disagree);

    std::map<std::string, Tensor> missing = exact;
    missing.erase(victim);
    const OpReport m = judge_op(c, missing);
    EXPECT_EQ(m.verdict, Verdict::inconclusive) << m.summary();
    EXPECT_NE(m.reason.find(victim + ": missing"), std::string::npos) << m.reason;

    const OpReport none = judge_op(c, exact, {.certify_budget = 0});
    EXPECT_EQ(none.verdict, Verdict::inconclusive);
  }
}

// Gradients asked for (pararnn compare --gradients FILE) and an answer without any: every one
// missing, Inconclusive, never Agree on the outputs alone.
TEST(OpJudge, GradientsAskedForAndAbsentAreMissingNeverAgree) {
  const OpCase c = small_case(DType::f32);
  const std::map<std::string, Tensor> outputs = reference::op_sequential_in_dtype(c);
  ASSERT_EQ(judge_op(c, outputs).verdict, Verdict::agree);
  const OpReport r = judge_op(c, outputs, {.expect_gradients = true});
  EXPECT_EQ(r.verdict, Verdict::inconclusive) << r.summary();
  ASSERT_EQ(r.gradients.size(), op_gradient_inputs(c).size());
  for (const OpOutputCheck& g : r.gradients) EXPECT_EQ(g.finding, "missing") << g.name;
}

TEST(OpJudge, UnknownGradientsAndJunkAreRefused) {
  const OpCase c = small_case(DType::f32);
  auto answer = reference::op_sequential_in_dtype(c);
  answer.emplace("grad.H", Tensor(DType::f32, {2, 24, 2, 4}));
  try {
    (void)judge_op(c, answer);
    ADD_FAILURE() << "grad.H accepted";
  } catch (const ContractViolation& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'grad.H': is not the gradient of an input"), std::string::npos) << e.what();
  }
  answer.erase("grad.H");
  answer.emplace("grad.q", Tensor(DType::f32, {2, 24, 2, 3}));
  EXPECT_THROW((void)judge_op(c, answer), ContractViolation);
  answer.erase("grad.q");
  answer.emplace("H", Tensor(DType::f32, {1}));
  EXPECT_THROW((void)judge_op(c, answer), ContractViolation);
  auto integer = reference::op_sequential_in_dtype(c);
  integer["o"] = Tensor(DType::i32, c.o_shape());
  EXPECT_THROW((void)judge_op(c, integer), ContractViolation);
}

}  // namespace
}  // namespace pararnn
