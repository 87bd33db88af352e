// The op oracle's gradients (oracle_op_gradients): every op against finite differences of the
// oracle's own forward, a hand-computed case pinning the loss convention, packed segments
// independent, certification within the budget and the same-dtype floor within τ.
//
// The finite differences: the 4-point central difference (8(L(x+h) − L(x−h)) − (L(x+2h) −
// L(x−2h))) / 12h of L = Σ cotangent ⊙ output, the outputs from oracle_op of an f64 case (float128
// working type, rounded once to double), h = 1e-3·max(1, |x|): truncation O(h⁴) ~ 1e-12 and the
// outputs' rounding ~1e-16·|L|/h ~ 1e-13 relative, far inside the contract's gradcheck band
// (Metric::gradcheck, adjoint vs central differences in f64), which the check uses, relative to
// max(|expected|, RMS of the tensor); a wrong adjoint formula is off by O(1).
#include <gtest/gtest.h>

#include <cmath>

#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/op_case.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::reference {
namespace {

// L of the case at the default loss (or its cotangents), from the oracle's outputs.
double loss(const OpCase& c) {
  const OpOracleResult r = oracle_op(c, {.certify = false, .certify_budget = 0});
  const OpSpec& spec = op_spec(c.op);
  double sum = 0.0;
  for (const std::string& name : {std::string(spec.out_name), std::string(spec.state_name)}) {
    const std::vector<double> values = r.outputs.at(name).to_f64_vector();
    std::vector<double> cot;
    if (!c.cotangents.empty()) {
      if (!c.cotangents.contains(name)) continue;
      cot = Tensor::copy_of(c.cotangents.at(name)).to_f64_vector();
    } else {
      const auto loss_outputs = op_default_loss_outputs(c);
      if (std::find(loss_outputs.begin(), loss_outputs.end(), name) == loss_outputs.end()) continue;
      cot.assign(values.size(), 1.0);
    }
    for (std::size_t i = 0; i < values.size(); ++i) sum += cot[i] * values[i];
  }
  return sum;
}

OpCase with_value(const OpCase& c, const std::string& name, std::size_t at, double value) {
  OpCase out = c;
  const bool initial = c.initial_state && name == op_spec(c.op).initial_name;
  const Tensor& t = initial ? *c.initial_state : c.input(name);
  std::vector<double> v = t.to_f64_vector();
  v[at] = value;
  Tensor changed = Tensor::from_values(t.dtype(), t.shape(), v);
  if (initial) out.initial_state = changed;
  else out.inputs.at(name) = changed;
  return out;
}

// The gradient of every input by finite differences.
std::map<std::string, Tensor> finite_differences(const OpCase& c) {
  std::map<std::string, Tensor> out;
  for (const std::string& name : op_gradient_inputs(c)) {
    const Tensor& t = c.initial_state && name == op_spec(c.op).initial_name ? *c.initial_state : c.input(name);
    const std::vector<double> x = t.to_f64_vector();
    std::vector<double> g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double h = 1e-3 * std::max(1.0, std::abs(x[i]));
      const auto at = [&](double step) { return loss(with_value(c, name, i, x[i] + step)); };
      g[i] = (8.0 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12.0 * h);
    }
    out.emplace(name, Tensor::from_values(DType::f64, t.shape(), g));
  }
  return out;
}

Tolerance gradcheck_band() {
  Tolerance tau = tolerance_for({.dtype = DType::f64, .metric = Metric::gradcheck});
  tau.relative_to_rms = true;
  return tau;
}

struct Named {
  std::string label;
  OpGenerateOptions options;
};

TEST(OpGradients, EveryOpMatchesFiniteDifferencesOfItsOwnForward) {
  const OpGenerateOptions small{.dtype = DType::f64, .batch = 2, .time = 5, .heads = 2, .k_dim = 3, .v_dim = 2, .seed = 11};
  const auto with = [&](std::string op, auto&& change) {
    OpGenerateOptions o = small;
    o.op = std::move(op);
    change(o);
    return o;
  };
  const auto none = [](OpGenerateOptions&) {};
  const std::vector<Named> cases = {
      {"gla h0", with("gla", [](OpGenerateOptions& o) { o.h0_std = 0.5; })},
      {"simple_gla packed h0", with("simple_gla", [](OpGenerateOptions& o) {
         o.batch = 1, o.time = 7, o.cu_seqlens = {0, 3, 7}, o.h0_std = 0.5;
       })},
      {"delta_rule l2norm", with("delta_rule", [](OpGenerateOptions& o) { o.qk_l2norm = true; })},
      {"delta_rule h0", with("delta_rule", [](OpGenerateOptions& o) { o.h0_std = 0.5; })},
      {"gated_delta_rule l2norm h0", with("gated_delta_rule", [](OpGenerateOptions& o) {
         o.qk_l2norm = true, o.h0_std = 0.5, o.scale = 0.75;
       })},
      {"dplr_delta_rule h0", with("dplr_delta_rule", [](OpGenerateOptions& o) { o.h0_std = 0.5; })},
      {"rwkv7 packed", with("rwkv7", [](OpGenerateOptions& o) { o.batch = 1, o.time = 6, o.cu_seqlens = {0, 2, 6}; })},
      {"selective_scan", with("selective_scan", [](OpGenerateOptions& o) { o.heads = 4, o.v_dim = 1; })},
      {"ssd h0", with("ssd", [](OpGenerateOptions& o) { o.h0_std = 0.5; })},
      {"ssd packed", with("ssd", [](OpGenerateOptions& o) { o.batch = 1, o.time = 6, o.cu_seqlens = {0, 4, 6}; })},
      {"gla none", with("gla", none)},
  };
  for (const Named& n : cases) {
    SCOPED_TRACE(n.label);
    const OpCase c = generate_op_case(n.options);
    const OpOracleGradients g = oracle_op_gradients(c);
    EXPECT_EQ(g.type, "float128");
    EXPECT_TRUE(g.finite);
    EXPECT_TRUE(g.certified_all_chains);
    EXPECT_LE(g.self_check_delta, tolerance_for({.dtype = DType::f64, .metric = Metric::oracle_self_check}).atol);
    const auto fd = finite_differences(c);
    ASSERT_EQ(g.tensors.size(), fd.size());
    for (const auto& [name, expected] : fd) {
      const ComparisonResult cmp = compare(g.tensors.at(name), expected, gradcheck_band());
      EXPECT_TRUE(cmp.ok()) << n.label << " grad." << name << ": " << cmp.describe();
      EXPECT_GT(cmp.count, 0);
    }
  }
}

// GLA, K = V = 1, scale 1, T = 2, initial state 0, L = Σ o + Σ final_state (fla's adapter loss):
// S1 = k0 v0 = 2, o0 = q0 S1 = 2; S2 = ½ S1 + k1 v1 = 4, o1 = q1 S2 = 8. S̄2 = q1 + 1 = 3 (o1
// reads the updated state, and the final state is in L), S̄1 = q0 + ½ S̄2 = 2.5, S̄0 = e^{g0} S̄1.
// With the case's own cotangent grad.o = 1 and no grad.final_state, the state leaves L: S̄2 = 2.
TEST(OpGradients, HandComputedGlaPinsTheLossAndTheUpdatedStateRead) {
  SafetensorsFile f;
  const Shape shape{1, 2, 1, 1};
  f.tensors.emplace("q", Tensor::from_values(DType::f64, shape, std::vector<double>{1, 2}));
  f.tensors.emplace("k", Tensor::from_values(DType::f64, shape, std::vector<double>{1, 1}));
  f.tensors.emplace("v", Tensor::from_values(DType::f64, shape, std::vector<double>{2, 3}));
  f.tensors.emplace("g", Tensor::from_values(DType::f64, shape, std::vector<double>{0, std::log(0.5)}));
  f.tensors.emplace("initial_state", Tensor::from_values(DType::f64, {1, 1, 1, 1}, std::vector<double>{0}));
  f.metadata = {{"op", "gla"}, {"scale", "1"}};
  const auto expect = [](const OpOracleGradients& g, const std::string& name, const std::vector<double>& values) {
    const ComparisonResult c = compare(g.tensors.at(name), Tensor::from_values(DType::f64, g.tensors.at(name).shape(), values),
                                       oracle_band(OracleBand::same_math_in_double));
    EXPECT_TRUE(c.ok()) << name << ": " << c.describe();
  };
  const OpOracleGradients g = oracle_op_gradients(op_case_from_file(f, "gla hand"));
  expect(g, "q", {2, 4});
  expect(g, "k", {2.5 * 2, 3 * 3});
  expect(g, "v", {2.5 * 1, 3 * 1});
  expect(g, "g", {0, 3 * 0.5 * 2});
  expect(g, "initial_state", {2.5});
  f.tensors.emplace("grad.o", Tensor::from_values(DType::f32, {1, 2, 1, 1}, std::vector<double>{1, 1}));
  const OpOracleGradients only_o = oracle_op_gradients(op_case_from_file(f, "gla hand, grad.o"));
  expect(only_o, "q", {2, 4});
  expect(only_o, "k", {2 * 2, 2 * 3});
  expect(only_o, "v", {2, 2});
  expect(only_o, "g", {0, 2 * 0.5 * 2});
  expect(only_o, "initial_state", {2});
}

// A packed case's gradients are those of its segments as cases of their own: nothing flows
// across a segment boundary (each segment's adjoint ends at its own initial state).
TEST(OpGradients, PackedSegmentsGradientsAreIndependent) {
  const OpCase packed = generate_op_case({.op = "gated_delta_rule", .dtype = DType::f32, .batch = 1, .time = 9, .heads = 2,
                                          .k_dim = 3, .v_dim = 2, .seed = 5, .h0_std = 0.5, .qk_l2norm = true,
                                          .cu_seqlens = {0, 4, 9}});
  const OpOracleGradients whole = oracle_op_gradients(packed);
  const std::vector<std::pair<std::int64_t, std::int64_t>> segments = {{0, 4}, {4, 9}};
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const auto [t0, t1] = segments[s];
    SafetensorsFile f;
    f.metadata = packed.metadata;
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> row;  // per-time width of each input
    for (const auto& [name, t] : packed.inputs) {
      const std::int64_t width = t.numel() / packed.time;
      const std::vector<double> all = t.to_f64_vector();
      Shape shape = t.shape();
      shape[1] = t1 - t0;
      f.tensors.emplace(name, Tensor::from_values(t.dtype(), shape,
                                                  std::vector<double>(all.begin() + t0 * width, all.begin() + t1 * width)));
    }
    const std::vector<double> h0 = packed.initial_state->to_f64_vector();
    const std::int64_t per = packed.initial_state->numel() / 2;
    f.tensors.emplace("initial_state", Tensor::from_values(DType::f32, {1, 2, 3, 2},
                                                           std::vector<double>(h0.begin() + s * per, h0.begin() + (s + 1) * per)));
    const OpOracleGradients one = oracle_op_gradients(op_case_from_file(f, "segment"));
    for (const auto& [name, t] : one.tensors) {
      const std::vector<double> mine = t.to_f64_vector(), theirs = whole.tensors.at(name).to_f64_vector();
      const std::size_t offset = name == "initial_state" ? s * per : static_cast<std::size_t>(t0 * (t.numel() / (t1 - t0)));
      const ComparisonResult c =
          compare(t, Tensor::from_values(DType::f64, t.shape(),
                                         std::vector<double>(theirs.begin() + offset, theirs.begin() + offset + mine.size())),
                  oracle_band(OracleBand::same_math_in_double));
      EXPECT_TRUE(c.ok()) << "segment " << s << " grad." << name << ": " << c.describe();
    }
  }
}

// Certification: every chain of a small case; nothing at budget 0; the last steps of one chain
// (named ",t>=") when no whole chain fits, within the oracle's self-check band each time.
TEST(OpGradients, CertificationCoversChainsWithinTheBudget) {
  const OpCase c = generate_op_case({.op = "dplr_delta_rule", .dtype = DType::f32, .batch = 2, .time = 16, .heads = 2,
                                     .k_dim = 4, .v_dim = 3, .seed = 3, .h0_std = 0.5});
  const double band = tolerance_for({.dtype = DType::f32, .metric = Metric::oracle_self_check}).atol;
  const OpOracleGradients all = oracle_op_gradients(c);
  EXPECT_TRUE(all.certified_all_chains);
  EXPECT_EQ(all.certified_chains.size(), 4u);
  EXPECT_EQ(all.certifier_type, "float128");
  EXPECT_LE(all.self_check_delta, band);
  EXPECT_GT(all.self_check_delta, 0.0);  // double and float128 differ in their last bits: it compared
  EXPECT_TRUE(oracle_op_gradients(c, {.certify_budget = 0}).certified_chains.empty());
  const OpOracleGradients suffix = oracle_op_gradients(c, {.certify_budget = 5 * kGradientCertifyStepCost});
  ASSERT_EQ(suffix.certified_chains.size(), 1u);
  EXPECT_NE(suffix.certified_chains.front().find(",t>=11"), std::string::npos) << suffix.certified_chains.front();
  EXPECT_EQ(suffix.certified_chain_steps, 5);
  EXPECT_LE(suffix.self_check_delta, band);
  EXPECT_THROW((void)oracle_op_gradients(c, {.certify_budget = -1}), ContractViolation);
}

// The floor of the gradients: each in its input's dtype and, on benign cases, within the op
// gradient τ of the oracle.
TEST(OpGradients, SameDtypeFloorIsInTheInputsDtypeAndWithinTau) {
  for (const std::string op : {"gla", "gated_delta_rule", "rwkv7", "ssd", "selective_scan"}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      const OpCase c = generate_op_case({.op = op, .dtype = dtype, .batch = 1, .time = 12, .heads = 2, .k_dim = 4,
                                         .v_dim = op == "selective_scan" ? 1 : 3, .seed = 2,
                                         .h0_std = op == "selective_scan" ? std::nullopt : std::optional<double>(0.5)});
      const auto floor = op_gradients_in_dtype(c);
      const OpOracleGradients g = oracle_op_gradients(c);
      ASSERT_EQ(floor.size(), g.tensors.size());
      for (const auto& [name, t] : floor) {
        const Tensor& in = c.initial_state && name == op_spec(c.op).initial_name ? *c.initial_state : c.input(name);
        EXPECT_EQ(t.dtype(), in.dtype()) << op << " " << name;
        const ComparisonResult cmp = compare(t, g.tensors.at(name), tolerance_for({.dtype = dtype, .metric = Metric::op_gradient}));
        EXPECT_TRUE(cmp.ok()) << op << " " << dtype_name(dtype) << " grad." << name << ": " << cmp.describe();
      }
    }
  }
}

// Cotangents in the case: "grad.<output>" of an output's shape; anything else is refused by name.
TEST(OpGradients, CaseCotangentsAreCheckedByName) {
  const OpCase c = generate_op_case({.op = "gla", .dtype = DType::f32, .batch = 1, .time = 3, .heads = 1, .k_dim = 2, .v_dim = 2});
  SafetensorsFile f;
  f.tensors = c.inputs;
  f.metadata = c.metadata;
  f.tensors.emplace("grad.final_state", Tensor::from_values(DType::f32, {1, 1, 2, 2}, std::vector<double>{1, 0, 0, 1}));
  EXPECT_EQ(op_case_from_file(f, "ok").cotangents.size(), 1u);
  SafetensorsFile bad = f;
  bad.tensors.emplace("grad.q", Tensor::from_values(DType::f32, {1}, std::vector<double>{1}));
  try {
    (void)op_case_from_file(bad, "bad");
    ADD_FAILURE() << "grad.q accepted as a cotangent";
  } catch (const ContractViolation& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'grad.q': is no cotangent of an output"), std::string::npos) << e.what();
  }
  SafetensorsFile wrong = f;
  wrong.tensors.insert_or_assign("grad.final_state", Tensor::from_values(DType::f32, {1, 1, 1, 2}, std::vector<double>{1, 0}));
  EXPECT_THROW((void)op_case_from_file(wrong, "bad shape"), ContractViolation);
}

}  // namespace
}  // namespace pararnn::reference
