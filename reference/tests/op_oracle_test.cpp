// The op oracle against hand-computed small cases: each test pins one convention of the library
// (docs/ops/README.md): the gate in log space, o read after the update, the K x V state layout,
// where β and the decay act in the delta rules, the default scale, the initial state and packing.
// Inputs are small dyadic numbers, so the expected values are exact; where an exp or a sqrt of a
// non-square enters, the expected value is computed in double here, and the band is the oracle's
// own (same_math_in_double), never a literal.
#include <gtest/gtest.h>

#include <cmath>

#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/op_case.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::reference {
namespace {

struct Input {
  std::string name;
  Shape shape;
  std::vector<double> values;
};

OpCase make_case(const std::string& op, const std::vector<Input>& inputs, std::map<std::string, std::string> metadata = {},
                 DType dtype = DType::f64) {
  SafetensorsFile f;
  for (const Input& in : inputs)
    f.tensors.emplace(in.name, Tensor::from_values(in.name == "cu_seqlens" ? DType::i64 : dtype, in.shape, in.values));
  metadata["op"] = op;
  f.metadata = metadata;
  return op_case_from_file(f, "test.safetensors");
}

void expect_values(const Tensor& actual, const std::vector<double>& expected) {
  const Tensor want = Tensor::from_values(DType::f64, actual.shape(), expected);
  const ComparisonResult c = compare(actual, want, oracle_band(OracleBand::same_math_in_double));
  EXPECT_TRUE(c.ok()) << c.describe();
}

// GLA, K = V = 2, scale 1: g is log-space per key, o_t = S_tᵀ q_t after the update, S is K x V.
TEST(OpOracle, GlaGateIsLogSpaceAndOutputReadsTheUpdatedState) {
  const double half = std::log(0.5);
  const OpCase c = make_case("gla",
                             {{"q", {1, 2, 1, 2}, {1, 1, 1, 0}},
                              {"k", {1, 2, 1, 2}, {1, 2, 0, 1}},
                              {"v", {1, 2, 1, 2}, {1, -1, 2, 0}},
                              {"g", {1, 2, 1, 2}, {0, half, 0, half}}},
                             {{"scale", "1"}});
  const OpOracleResult r = oracle_op(c);
  // S1 = k0 v0ᵀ = [[1, -1], [2, -2]]; o0 = S1ᵀ q0 = (3, -3).
  // S2 = diag(1, 1/2) S1 + k1 v1ᵀ = [[1, -1], [1, -1]] + [[0, 0], [2, 0]]; o1 = S2ᵀ (1, 0) = (1, -1).
  expect_values(r.outputs.at("o"), {3, -3, 1, -1});
  expect_values(r.outputs.at("final_state"), {1, -1, 3, -1});
  EXPECT_TRUE(r.certified_all_chains);
  EXPECT_TRUE(r.finite);
}

// DeltaNet: S_t = S + β k (v − Sᵀk)ᵀ: β scales the whole correction.
TEST(OpOracle, DeltaRuleBetaScalesTheCorrection) {
  const OpCase c = make_case("delta_rule",
                             {{"q", {1, 2, 1, 2}, {1, 0, 1, 1}},
                              {"k", {1, 2, 1, 2}, {1, 0, 1, 0}},
                              {"v", {1, 2, 1, 2}, {2, 4, 4, 0}},
                              {"beta", {1, 2, 1}, {0.5, 0.5}}},
                             {{"scale", "1"}});
  const OpOracleResult r = oracle_op(c);
  // S1 = 0.5 (1,0)ᵀ(2,4) = [[1,2],[0,0]], o0 = (1,2); v − S1ᵀk = (3,−2), S2 = [[2.5,1],[0,0]], o1 = (2.5,1).
  expect_values(r.outputs.at("o"), {1, 2, 2.5, 1});
  expect_values(r.outputs.at("final_state"), {2.5, 1, 0, 0});
}

// Gated DeltaNet: the decay acts on the state before the delta reads it; initial_state is S_0.
TEST(OpOracle, GatedDeltaRuleDecaysBeforeTheDelta) {
  const OpCase c = make_case("gated_delta_rule",
                             {{"q", {1, 1, 1, 1}, {1}},
                              {"k", {1, 1, 1, 1}, {1}},
                              {"v", {1, 1, 1, 1}, {3}},
                              {"g", {1, 1, 1}, {std::log(0.5)}},
                              {"beta", {1, 1, 1}, {1}},
                              {"initial_state", {1, 1, 1, 1}, {2}}},
                             {{"scale", "1"}});
  const OpOracleResult r = oracle_op(c);
  // exp(g) S0 = 1; v − 1·k = 2; S1 = 1 + 2 = 3 (decaying after the delta would give 1.5).
  expect_values(r.outputs.at("o"), {3});
  expect_values(r.outputs.at("final_state"), {3});
}

// The default scale is K^-0.5 (K = 4: 0.5); simple GLA's g is one log decay per head.
TEST(OpOracle, DefaultScaleIsInverseSqrtKeyDim) {
  const OpCase c = make_case("simple_gla", {{"q", {1, 1, 1, 4}, {1, 1, 1, 1}},
                                            {"k", {1, 1, 1, 4}, {1, 0, 0, 0}},
                                            {"v", {1, 1, 1, 1}, {2}},
                                            {"g", {1, 1, 1}, {0}}});
  EXPECT_EQ(c.scale, 0.5);
  expect_values(oracle_op(c).outputs.at("o"), {1});
}

// Packed: every segment starts from its own initial_state row, never from the previous segment.
TEST(OpOracle, PackedSegmentsStartFromTheirInitialState) {
  const OpCase c = make_case("simple_gla",
                             {{"q", {1, 2, 1, 1}, {1, 1}},
                              {"k", {1, 2, 1, 1}, {1, 1}},
                              {"v", {1, 2, 1, 1}, {1, 1}},
                              {"g", {1, 2, 1}, {0, 0}},
                              {"initial_state", {2, 1, 1, 1}, {10, 20}},
                              {"cu_seqlens", {3}, {0, 1, 2}}},
                             {{"scale", "1"}});
  const OpOracleResult r = oracle_op(c);
  expect_values(r.outputs.at("o"), {11, 21});  // the carry would give 12
  expect_values(r.outputs.at("final_state"), {11, 21});
  EXPECT_EQ(r.certified_chains.front().rfind("segment=", 0), 0u);
}

// use_qk_l2norm_in_kernel: q and k divided by sqrt(Σ x² + 1e-6) before the step.
TEST(OpOracle, QkL2NormDividesByTheNormWithEps) {
  const OpCase c = make_case("delta_rule",
                             {{"q", {1, 1, 1, 2}, {3, 4}},
                              {"k", {1, 1, 1, 2}, {3, 4}},
                              {"v", {1, 1, 1, 1}, {1}},
                              {"beta", {1, 1, 1}, {1}}},
                             {{"scale", "1"}, {"use_qk_l2norm_in_kernel", "True"}});
  const double n = std::sqrt(25.0 + 1e-6);
  const double kk = (9.0 + 16.0) / (n * n);  // S = k̂ v̂ᵀ with v̂ = 1, o = k̂ᵀ q̂
  expect_values(oracle_op(c).outputs.at("o"), {kk});
}

// DPLR and RWKV-7: S_t = S (D + a bᵀ) + v kᵀ in V x K form, i.e. b reads aᵀ S_{t-1} (the old
// state); RWKV-7 is the same op with q = r and the log decay w.
TEST(OpOracle, DplrLowRankReadsThePreviousStateAndRwkv7IsTheSameOp) {
  const std::vector<double> h0 = {1, 2};
  const OpCase dplr = make_case("dplr_delta_rule",
                                {{"q", {1, 1, 1, 2}, {1, 0}},
                                 {"k", {1, 1, 1, 2}, {0, 1}},
                                 {"v", {1, 1, 1, 1}, {1}},
                                 {"a", {1, 1, 1, 2}, {1, 1}},
                                 {"b", {1, 1, 1, 2}, {1, 0}},
                                 {"gk", {1, 1, 1, 2}, {0, 0}},
                                 {"initial_state", {1, 1, 2, 1}, h0}},
                                {{"scale", "1"}});
  // u = aᵀ S0 = 3; S1 = S0 + b u + k v = [[4], [3]]; o = S1ᵀ (1, 0) = 4.
  expect_values(oracle_op(dplr).outputs.at("o"), {4});
  expect_values(oracle_op(dplr).outputs.at("final_state"), {4, 3});
  const OpCase rwkv = make_case("rwkv7",
                                {{"r", {1, 1, 1, 2}, {1, 0}},
                                 {"w", {1, 1, 1, 2}, {0, 0}},
                                 {"k", {1, 1, 1, 2}, {0, 1}},
                                 {"v", {1, 1, 1, 1}, {1}},
                                 {"a", {1, 1, 1, 2}, {1, 1}},
                                 {"b", {1, 1, 1, 2}, {1, 0}},
                                 {"initial_state", {1, 1, 2, 1}, h0}},
                                {{"scale", "1"}});
  expect_values(oracle_op(rwkv).outputs.at("o"), {4});
}

// Mamba's selective scan: x_t = exp(Δ A) x_{t-1} + Δ B_t u_t per channel, out = C_tᵀ x_t + D u,
// times silu(z); Δ = softplus(delta + delta_bias) with delta_softplus; layout [B, D, L].
TEST(OpOracle, SelectiveScanDeltaScalesDecayAndInputAndDSkipsTheInput) {
  const double ln2 = std::log(2.0);
  const std::vector<Input> common = {{"u", {1, 1, 2}, {2, 4}},
                                     {"A", {1, 2}, {-1, -2}},
                                     {"B", {1, 1, 2, 2}, {1, 1, 1, 0}},  // [B, G, N, L]: B[n=0] = (1, 1), B[n=1] = (1, 0)
                                     {"C", {1, 1, 2, 2}, {1, 0, 0, 1}},
                                     {"D", {1}, {0.5}}};
  std::vector<Input> plain = common;
  plain.push_back({"delta", {1, 1, 2}, {ln2, ln2}});
  const OpOracleResult r = oracle_op(make_case("selective_scan", plain));
  // x0 = ln2·(1,1)·2, out0 = 2 ln2 + 0.5·2; x1 = (0.5, 0.25)⊙x0 + ln2·(1,0)·4 = (5 ln2, 0.5 ln2), out1 = 0.5 ln2 + 2.
  expect_values(r.outputs.at("out"), {2 * ln2 + 1, 0.5 * ln2 + 2});
  expect_values(r.outputs.at("last_state"), {5 * ln2, 0.5 * ln2});
  std::vector<Input> gated = common;  // softplus(0 + 0) = ln 2: the same Δ; z = (0, 2) gates by silu
  gated.push_back({"delta", {1, 1, 2}, {0, 0}});
  gated.push_back({"delta_bias", {1}, {0}});
  gated.push_back({"z", {1, 1, 2}, {0, 2}});
  const OpOracleResult g = oracle_op(make_case("selective_scan", gated, {{"delta_softplus", "True"}}));
  expect_values(g.outputs.at("out"), {0, (0.5 * ln2 + 2) * 2 / (1 + std::exp(-2.0))});
}

// Mamba-2's SSD: per head S (P x N) = exp(Δ A_h) S + Δ x_t B_tᵀ, out = S C_t (+ D x); the state is
// read and written as [N, H, P, N_state] (initial_states, final_states).
TEST(OpOracle, SsdDecaysPerHeadAndKeepsTheStateAsHeadDimByStateSize) {
  const double ln2 = std::log(2.0);
  const OpCase c = make_case("ssd", {{"x", {1, 2, 1, 2}, {2, 4, 0, 2}},
                                     {"dt", {1, 2, 1}, {0, 0}},
                                     {"A", {1}, {-1}},
                                     {"B", {1, 2, 1, 1}, {1, 1}},
                                     {"C", {1, 2, 1, 1}, {1, 2}},
                                     {"initial_states", {1, 1, 2, 1}, {8, 0}}},
                             {{"dt_softplus", "True"}});
  const OpOracleResult r = oracle_op(c);
  // S1 = 0.5 (8, 0) + ln2 (2, 4) ; S2 = 0.5 S1 + ln2 (0, 2) = (2 + ln2, 4 ln2); out_t = S_t C_t.
  expect_values(r.outputs.at("out"), {4 + 2 * ln2, 4 * ln2, 4 + 2 * ln2, 8 * ln2});
  expect_values(r.outputs.at("final_states"), {2 + ln2, 4 * ln2});
}

// Certification: all chains of a small case; none with budget 0 (which the judge refuses); a
// seeded prefix when one chain is over the budget.
TEST(OpOracle, CertificationCoversChainsWithinTheBudget) {
  std::vector<double> ones(2 * 8 * 2 * 2, 0.25), g(2 * 8 * 2, -0.125);
  const OpCase c = make_case("simple_gla", {{"q", {2, 8, 2, 2}, ones}, {"k", {2, 8, 2, 2}, ones},
                                            {"v", {2, 8, 2, 2}, ones}, {"g", {2, 8, 2}, g}},
                             {}, DType::f32);
  const OpOracleResult all = oracle_op(c);
  EXPECT_TRUE(all.certified_all_chains);
  EXPECT_EQ(all.certified_chains.size(), 4u);
  EXPECT_LE(all.self_check_delta, tolerance_for({.dtype = DType::f32, .metric = Metric::oracle_self_check}).atol);
  EXPECT_EQ(all.type, "double");
  EXPECT_EQ(all.certifier_type, "float128");
  const OpOracleResult none = oracle_op(c, {.certify_budget = 0});
  EXPECT_TRUE(none.certified_chains.empty());
  const OpOracleResult prefix = oracle_op(c, {.certify_budget = 3});
  ASSERT_EQ(prefix.certified_chains.size(), 1u);
  EXPECT_NE(prefix.certified_chains.front().find(",t<3"), std::string::npos);
  EXPECT_EQ(prefix.certified_chain_steps, 3);
}

// The same-dtype floor: storage dtype out, within the op τ of the oracle on a benign case.
TEST(OpOracle, SameDtypeFloorIsInTheCaseDtypeAndWithinTau) {
  std::vector<double> q(16 * 4), v(16 * 2), g(16 * 4);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::ldexp(static_cast<double>((i * 37) % 17) - 8.0, -3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(static_cast<double>((i * 11) % 13) - 6.0, -2);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = -std::ldexp(static_cast<double>(i % 5 + 1), -4);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const OpCase c = make_case("gla", {{"q", {1, 16, 1, 4}, q}, {"k", {1, 16, 1, 4}, q},
                                       {"v", {1, 16, 1, 2}, v}, {"g", {1, 16, 1, 4}, g}}, {}, dtype);
    const auto floor = op_sequential_in_dtype(c);
    const OpOracleResult r = oracle_op(c);
    for (const char* name : {"o", "final_state"}) {
      EXPECT_EQ(floor.at(name).dtype(), dtype);
      const ComparisonResult cmp = compare(floor.at(name), r.outputs.at(name), tolerance_for({.dtype = dtype, .metric = Metric::op_output}));
      EXPECT_TRUE(cmp.ok()) << dtype_name(dtype) << " " << name << ": " << cmp.describe();
    }
  }
}

// Bad inputs are refused naming the argument, the rule and the value.
TEST(OpCase, BadInputsAreRefusedByName) {
  const auto refused = [](const std::string& op, const std::vector<Input>& inputs, std::map<std::string, std::string> meta,
                          const std::string& needle) {
    try {
      (void)make_case(op, inputs, meta);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const ContractViolation& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const Input q{"q", {1, 2, 1, 2}, {1, 1, 1, 1}}, k{"k", {1, 2, 1, 2}, {1, 1, 1, 1}}, v{"v", {1, 2, 1, 2}, {1, 1, 1, 1}};
  const Input g{"g", {1, 2, 1, 2}, {0, 0, 0, 0}};
  refused("mamba9", {q, k, v, g}, {}, "op: must be one of");
  refused("gla", {q, k, v}, {}, "tensor 'g': is required by op gla");
  refused("gla", {q, k, v, {"g", {1, 2, 1}, {0, 0}}}, {}, "tensor 'g': must have shape (1, 2, 1, 2)");
  refused("gla", {q, k, v, g, {"beta", {1, 2, 1}, {1, 1}}}, {}, "tensor 'beta': is not an input of op gla");
  refused("gla", {q, k, v, g}, {{"scale", "-1"}}, "metadata 'scale'");
  refused("gla", {q, k, v, g}, {{"head_first", "True"}}, "metadata 'head_first'");
  refused("gla", {q, k, v, g}, {{"use_qk_l2norm_in_kernel", "True"}}, "is not an argument of op gla");
  refused("gla", {q, k, v, g, {"cu_seqlens", {2}, {0, 3}}}, {}, "must end at the packed length T = 2");
  refused("gla", {q, k, v, g, {"initial_state", {2, 1, 2, 2}, std::vector<double>(8, 0)}}, {}, "tensor 'initial_state'");
  refused("gla", {q, k, v, g}, {{"variant", "naive"}}, "metadata 'variant'");
  const std::vector<Input> ss = {{"u", {1, 1, 2}, {1, 1}}, {"delta", {1, 1, 2}, {1, 1}}, {"A", {1, 2}, {-1, -1}},
                                 {"B", {1, 2, 2}, {1, 1, 1, 1}}, {"C", {1, 2, 2}, {1, 1, 1, 1}}};
  std::vector<Input> packed = ss;
  packed.push_back({"cu_seqlens", {2}, {0, 2}});
  refused("selective_scan", packed, {}, "tensor 'cu_seqlens': is not an input of op selective_scan");
  refused("selective_scan", ss, {{"scale", "2"}}, "metadata 'scale': is not an argument of op selective_scan");
  std::vector<Input> bad_groups = ss;
  bad_groups[3] = {"B", {1, 2, 2, 2}, std::vector<double>(8, 1)};
  refused("selective_scan", bad_groups, {}, "groups G must divide");
}

}  // namespace
}  // namespace pararnn::reference
