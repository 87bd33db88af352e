// Claims about the oracle's gradients: every gradient (x, h0, W_x, CfC's W_b, the recurrent
// tensors) is the derivative of the oracle's own L = Σ grad_H ⊙ H, checked element by element
// against float128 central differences of L, for every cell, with and without h0, packed,
// clamped, with a custom cotangent and at T = 1; CfC's Δt gradient is zero below the floor; at
// the sLSTM max's tie it is the mean of both sides; the certifier agrees; bad cotangents are
// refused.
// Every case is generated from a printed seed (SCOPED_TRACE) and replays from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../src/oracle_internal.hpp"
#include "oracle_test_cases.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace {

using namespace pararnn::reference::test_cases;  // NOLINT: the shared case generator

// Central-difference step: 2^-30. In float128 the truncation error is ε²/6·|L'''| ≈ 2e-19·|L'''|
// and the rounding error 2^-113·|L|/ε ≈ 1e-25·|L|: the differences are exact to far below double.
constexpr double kDifferenceStep = 0x1.0p-30;
// The oracle's internal bands come from the tolerance table (contracts/tolerance.hpp,
// OracleBand: each with the reason for its size).
const double kAdDoubleVsDifferences = oracle_band(OracleBand::gradient_double_vs_differences).rtol;
const double kAdFloat128VsDifferences = oracle_band(OracleBand::gradient_float128_vs_differences).rtol;
const double kGradientDoubleVsFloat128 = oracle_band(OracleBand::gradient_double_vs_float128).atol;
const double kGradientFloat128VsBin50 = oracle_band(OracleBand::gradient_float128_vs_bin50).atol;
const double kTieVsDifferences = oracle_band(OracleBand::tie_vs_differences).rtol;
// CfC: raw Δt values below the floor 1e-4 (clamped: zero gradient) and above it, one per row.
constexpr std::array<double, 4> kRawTimeSteps = {-0.5, 0.0, 5e-5, 0.75};
constexpr std::array<bool, 4> kTimeStepLive = {false, false, false, true};
// The default clamp (max_recurrent_norm 0.5) and entries well outside it: the clamp is flat
// there for any step of the differences.
constexpr double kCap = 0.5;
constexpr double kFarAboveCap = 3.0;
constexpr double kFarBelowMinusCap = -2.0;

// The tensor of `c` a gradient key names.
Tensor& tensor_of(Case& c, const std::string& key) {
  if (key == "x") return c.x;
  if (key == "h0") return *c.h0;
  return c.parameters.at(key);
}

// dL/d(element i of tensor `key`) by float128 central differences of L on the case widened
// (exactly) to f64, the perturbed values rounded to f64 and the step their exact difference.
double central_difference(const Case& problem, const std::string& key, std::int64_t i) {
  const Case wide = widened_to_f64(problem);
  const std::vector<double> cotangent =
      problem.grad_H ? problem.grad_H->to_f64_vector() : std::vector<double>{};
  const auto perturbed = [&](double delta, double* value) {
    Case c = wide;
    Tensor& t = tensor_of(c, key);
    t = Tensor::copy_of(t);  // do not write into the storage `wide` shares
    Tensor flat = t.reshaped({t.numel()});
    *value = flat.load({i}) + delta;
    flat.store({i}, *value);
    return detail::prepare_case(c);
  };
  double plus = 0.0, minus = 0.0;
  const detail::PreparedCase up = perturbed(kDifferenceStep, &plus);
  const detail::PreparedCase down = perturbed(-kDifferenceStep, &minus);
  return detail::central_difference_float128(up, down, cotangent, plus - minus);
}

std::vector<std::string> gradient_keys(const Case& c) {
  std::vector<std::string> keys = {"x"};
  if (c.h0) keys.push_back("h0");
  for (const auto& [name, t] : c.parameters) keys.push_back(name);
  return keys;
}

// Every element of every gradient equals the central difference of L (within `tolerance`, or
// the primary's AD tolerance when it is 0).
void expect_gradients_equal_differences(const Case& c, const OracleGradients& g,
                                        double tolerance = 0.0) {
  if (tolerance == 0.0) {
    tolerance = c.dtype() == DType::f64 ? kAdFloat128VsDifferences : kAdDoubleVsDifferences;
  }
  ASSERT_EQ(g.tensors.size(), gradient_keys(c).size());
  for (const std::string& key : gradient_keys(c)) {
    ASSERT_TRUE(g.tensors.contains(key)) << key;
    const Tensor& got = g.tensors.at(key);
    Case copy = c;
    EXPECT_EQ(got.shape(), tensor_of(copy, key).shape()) << key;
    EXPECT_EQ(got.dtype(), DType::f64) << key;
    const std::vector<double> ad = got.to_f64_vector();
    for (std::int64_t i = 0; i < got.numel(); ++i) {
      const double fd = central_difference(c, key, i);
      const double a = ad[static_cast<std::size_t>(i)];
      EXPECT_LE(std::abs(a - fd), tolerance * std::max(1.0, std::abs(fd)))
          << key << "[" << i << "]: AD " << a << " vs differences " << fd;
    }
  }
}

class OracleGradientTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleGradientTest, EqualCentralDifferencesWithH0InBothPrimaries) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .time = 6, .d_h = 3, .dtype = dtype, .seed = 101,
                        .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const OracleGradients g = oracle_gradients(c, {.certify = false});
    EXPECT_EQ(g.type, dtype == DType::f64 ? "float128" : "double");
    EXPECT_EQ(g.digits, dtype == DType::f64 ? 113 : 53);
    EXPECT_TRUE(g.finite);
    expect_gradients_equal_differences(c, g);
  }
}

TEST_P(OracleGradientTest, EqualCentralDifferencesFromZeroState) {
  const CaseSpec spec{.cell = GetParam(), .time = 7, .d_h = 3, .seed = 102};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const OracleGradients g = oracle_gradients(c, {.certify = false});
  EXPECT_FALSE(g.tensors.contains("h0"));
  expect_gradients_equal_differences(c, g);
}

TEST_P(OracleGradientTest, PackedEqualCentralDifferences) {
  for (const bool with_h0 : {false, true}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 1, .time = 8, .d_h = 3, .seed = 103,
                        .with_h0 = with_h0, .cu_seqlens = {0, 3, 4, 8}};
    SCOPED_TRACE(describe(spec) + (with_h0 ? " packed, h0 per segment" : " packed, zeros"));
    const Case c = make_case(spec);
    const OracleGradients g = oracle_gradients(c);
    EXPECT_TRUE(g.certified_all_chains);
    EXPECT_EQ(g.certified_chains,
              (std::vector<std::string>{"segment=0", "segment=1", "segment=2"}));
    EXPECT_LE(g.self_check_delta, kGradientDoubleVsFloat128);
    expect_gradients_equal_differences(c, g);
  }
}

TEST_P(OracleGradientTest, ClampedEntriesGetZeroGradientAndTheRestEqualDifferences) {
  const CaseSpec spec{.cell = GetParam(), .time = 5, .d_h = 3, .seed = 104, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  Case c = make_case(spec);
  const std::string first = recurrent_names(spec.cell).front();
  // Flat entries 0, 1, 2 of the first recurrent tensor (sLSTM: R[i] of channels 0, 1, 2).
  const auto flat = [](const Tensor& t) { return t.reshaped({t.numel()}); };
  flat(c.parameters[first]).store({0}, kFarAboveCap);
  flat(c.parameters[first]).store({1}, kFarBelowMinusCap);
  flat(c.parameters[first]).store({2}, kCap / 2);
  const OracleGradients g = oracle_gradients(c, {.certify = false});
  const Tensor grad = flat(g.tensors.at(first));
  EXPECT_EQ(grad.load({0}), 0.0);
  EXPECT_EQ(grad.load({1}), 0.0);
  EXPECT_NE(grad.load({2}), 0.0);
  expect_gradients_equal_differences(c, g);

  // Without a cap the same entries are live.
  c.metadata["max_recurrent_norm"] = "none";
  const OracleGradients unclamped = oracle_gradients(c, {.certify = false});
  EXPECT_NE(flat(unclamped.tensors.at(first)).load({0}), 0.0);
  EXPECT_NE(flat(unclamped.tensors.at(first)).load({1}), 0.0);
  expect_gradients_equal_differences(c, unclamped);
}

TEST_P(OracleGradientTest, CustomCotangentEqualsCentralDifferences) {
  const CaseSpec spec{.cell = GetParam(), .time = 6, .d_h = 3, .seed = 105, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  Case c = make_case(spec);
  const Shape trajectory = oracle_sequential(c, {.certify = false}).H.shape();
  Generator gen(spec.seed + 1000);
  c.grad_H = gen.normal_tensor(spec.dtype, trajectory, 1.0);
  const OracleGradients g = oracle_gradients(c);
  EXPECT_LE(g.self_check_delta, kGradientDoubleVsFloat128);
  expect_gradients_equal_differences(c, g);
  // A zero cotangent has zero gradients.
  c.grad_H = Tensor(spec.dtype, trajectory);
  for (const auto& [name, t] : oracle_gradients(c, {.certify = false}).tensors) {
    EXPECT_EQ(max_abs_difference(t, Tensor(DType::f64, t.shape())), 0.0) << name;
  }
}

TEST_P(OracleGradientTest, SingleStepEqualsCentralDifferences) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 3, .time = 1, .d_h = 3, .dtype = dtype,
                        .seed = 106, .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const OracleGradients g = oracle_gradients(c);
    EXPECT_TRUE(g.certified_all_chains);
    EXPECT_LE(g.self_check_delta,
              dtype == DType::f64 ? kGradientFloat128VsBin50 : kGradientDoubleVsFloat128);
    expect_gradients_equal_differences(c, g);
  }
}

TEST_P(OracleGradientTest, CertifierAgreesOnEveryChainOfSmallCases) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 3, .time = 24, .d_h = 5, .dtype = dtype,
                        .seed = 107, .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    const OracleGradients g = oracle_gradients(make_case(spec));
    EXPECT_EQ(g.certifier_type, dtype == DType::f64 ? "cpp_bin_float_50" : "float128");
    EXPECT_GT(g.certifier_digits, dtype == DType::f64 ? 113 : 53);
    EXPECT_TRUE(g.certified_all_chains);
    EXPECT_EQ(g.certified_chains, (std::vector<std::string>{"b=0", "b=1", "b=2"}));
    EXPECT_EQ(g.certified_chain_steps, spec.batch * spec.time * slots_of(spec.cell) * spec.d_h);
    EXPECT_TRUE(g.finite);
    EXPECT_LE(g.self_check_delta,
              dtype == DType::f64 ? kGradientFloat128VsBin50 : kGradientDoubleVsFloat128);
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, OracleGradientTest, ::testing::ValuesIn(kCells),
                         [](const auto& info) { return info.param; });

TEST(OracleGradients, CfcTimeStepGradientIsZeroWhereTheFloorClampsIt) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = "cfc", .batch = static_cast<std::int64_t>(kRawTimeSteps.size()),
                        .time = 3, .d_in = 4, .d_h = 3, .dtype = dtype, .seed = 114,
                        .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    Case c = make_case(spec);
    for (std::int64_t b = 0; b < spec.batch; ++b) {
      for (std::int64_t t = 0; t < spec.time; ++t) {
        c.x.store({b, t, spec.d_in - 1}, kRawTimeSteps[static_cast<std::size_t>(b)]);
      }
    }
    const OracleGradients g = oracle_gradients(c);
    EXPECT_LE(g.self_check_delta,
              dtype == DType::f64 ? kGradientFloat128VsBin50 : kGradientDoubleVsFloat128);
    const Tensor& dx = g.tensors.at("x");
    for (std::int64_t b = 0; b < spec.batch; ++b) {
      for (std::int64_t t = 0; t < spec.time; ++t) {
        if (kTimeStepLive[static_cast<std::size_t>(b)]) {
          EXPECT_NE(dx.load({b, t, spec.d_in - 1}), 0.0) << "b=" << b << " t=" << t;
        } else {
          EXPECT_EQ(dx.load({b, t, spec.d_in - 1}), 0.0) << "b=" << b << " t=" << t;
        }
      }
    }
    expect_gradients_equal_differences(c, g);
  }
}

TEST(OracleGradients, SoftplusAboveItsThresholdIsTheIdentity) {
  // T = 2: Titans with θ ≈ 25 expands by |1 - α - θk²| >> 1 a step, which would grow double's
  // roundings past kAdDoubleVsDifferences over longer chains (seen: 2.8e-15 at T = 2).
  for (const std::string cell : {"cfc", "titans"}) {
    const CaseSpec spec{.cell = cell, .time = 2, .d_h = 3, .seed = 116, .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    const Case c = with_softplus_above_threshold(make_case(spec));
    expect_gradients_equal_differences(c, oracle_gradients(c, {.certify = false}));
  }
}

TEST(OracleGradients, SlstmTieOfTheMaxHasTheMeanOfBothSidesDerivatives) {
  const CaseSpec spec{.cell = "slstm", .batch = 2, .time = 1, .d_h = 3, .seed = 115,
                      .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case c = slstm_tie_case(spec);
  const OracleGradients g = oracle_gradients(c);
  EXPECT_LE(g.self_check_delta, kGradientDoubleVsFloat128);
  expect_gradients_equal_differences(c, g, kTieVsDifferences);
}

TEST(OracleGradients, LargeCasesAreCertifiedOnASeededSampleOfChannelChains) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = "lstm", .batch = 3, .time = 30, .d_h = 6, .dtype = dtype,
                        .seed = 108};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    // Room for three (chain, channel) pairs of the certifying BPTT, less than one whole row.
    const std::int64_t pair = spec.time * slots_of(spec.cell);
    const OracleOptions options{.certify_budget = (3 * pair + 1) * kGradientCertifyStepCost,
                                .seed = 4};
    const OracleGradients g = oracle_gradients(c, options);
    EXPECT_FALSE(g.certified_all_chains);
    EXPECT_EQ(g.certified_chains.size(), 3u);
    EXPECT_EQ(g.certified_chain_steps, 3 * pair);
    for (const auto& chain : g.certified_chains) {
      EXPECT_NE(chain.find(",channel="), std::string::npos) << chain;
    }
    EXPECT_LE(g.self_check_delta,
              dtype == DType::f64 ? kGradientFloat128VsBin50 : kGradientDoubleVsFloat128);
    // The sample replays from the seed, and the gradients do not depend on it.
    const OracleGradients again = oracle_gradients(c, options);
    EXPECT_EQ(again.certified_chains, g.certified_chains);
    for (const auto& [name, t] : g.tensors) {
      EXPECT_EQ(max_abs_difference(t, again.tensors.at(name)), 0.0) << name;
    }
  }
}

TEST(OracleGradients, ABudgetBelowOnePairStillCertifiesOnePair) {
  const CaseSpec spec{.cell = "gru", .batch = 2, .time = 40, .d_h = 4, .seed = 113};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const OracleGradients g = oracle_gradients(c, {.certify_budget = 1, .seed = 2});
  EXPECT_FALSE(g.certified_all_chains);
  ASSERT_EQ(g.certified_chains.size(), 1u);
  EXPECT_NE(g.certified_chains.front().find(",channel="), std::string::npos);
  EXPECT_EQ(g.certified_chain_steps, spec.time);
  EXPECT_LE(g.self_check_delta, kGradientDoubleVsFloat128);
  // A zero budget certifies nothing.
  EXPECT_TRUE(oracle_gradients(c, {.certify_budget = 0}).certified_chains.empty());
}

TEST(OracleGradients, H0GradientHasTheShapeH0WasGivenIn) {
  const CaseSpec spec{.cell = "gru", .time = 5, .seed = 109, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case flat = make_case(spec);
  Case with_axis = flat;
  with_axis.h0 = flat.h0->reshaped({spec.batch, 1, spec.d_h});
  const OracleGradients g_flat = oracle_gradients(flat, {.certify = false});
  const OracleGradients g_axis = oracle_gradients(with_axis, {.certify = false});
  EXPECT_EQ(g_flat.tensors.at("h0").shape(), (Shape{spec.batch, spec.d_h}));
  EXPECT_EQ(g_axis.tensors.at("h0").shape(), (Shape{spec.batch, 1, spec.d_h}));
  EXPECT_EQ(max_abs_difference(g_flat.tensors.at("h0"), g_axis.tensors.at("h0")), 0.0);
  // And a one-slot cotangent may carry the slot axis too.
  Case cotangent_axis = flat;
  cotangent_axis.grad_H = Tensor(DType::f32, {spec.batch, spec.time, 1, spec.d_h});
  Case cotangent_flat = flat;
  cotangent_flat.grad_H = Tensor(DType::f32, {spec.batch, spec.time, spec.d_h});
  Generator gen(spec.seed);
  for (std::int64_t i = 0; i < cotangent_flat.grad_H->numel(); ++i) {
    const double v = gen.uniform(-1.0, 1.0);
    cotangent_flat.grad_H->reshaped({cotangent_flat.grad_H->numel()}).store({i}, v);
    cotangent_axis.grad_H->reshaped({cotangent_axis.grad_H->numel()}).store({i}, v);
  }
  const OracleGradients a = oracle_gradients(cotangent_flat, {.certify = false});
  const OracleGradients b = oracle_gradients(cotangent_axis, {.certify = false});
  for (const auto& [name, t] : a.tensors) {
    EXPECT_EQ(max_abs_difference(t, b.tensors.at(name)), 0.0) << name;
  }
}

TEST(OracleGradients, CertifyOffLeavesNoCertificate) {
  const OracleGradients g = oracle_gradients(make_case({.seed = 110}), {.certify = false});
  EXPECT_TRUE(g.certifier_type.empty());
  EXPECT_FALSE(g.certified_all_chains);
  EXPECT_TRUE(g.certified_chains.empty());
  EXPECT_EQ(g.certified_chain_steps, 0);
}

TEST(OracleGradients, NonFiniteInputIsReportedNotHidden) {
  Case c = make_case({.seed = 111});
  c.x.store({1, 3, 0}, std::numeric_limits<double>::quiet_NaN());
  const OracleGradients g = oracle_gradients(c);
  EXPECT_FALSE(g.finite);
  EXPECT_TRUE(std::isnan(g.self_check_delta));
  EXPECT_TRUE(std::isfinite(g.tensors.at("x").load({0, 3, 0})));  // the other row is untouched
}

TEST(OracleGradientsRefuse, BadCotangentOrBudgetWithContractViolation) {
  Case wrong_shape = make_case({.seed = 112});
  wrong_shape.grad_H = Tensor(DType::f32, {2, 16, 5});
  EXPECT_THROW((void)oracle_gradients(wrong_shape), ContractViolation);
  Case lstm_flat = make_case({.cell = "lstm", .seed = 112});
  lstm_flat.grad_H = Tensor(DType::f32, {2, 16, 4});
  EXPECT_THROW((void)oracle_gradients(lstm_flat), ContractViolation);
  Case integer = make_case({.seed = 112});
  integer.grad_H = Tensor(DType::i32, {2, 16, 4});
  EXPECT_THROW((void)oracle_gradients(integer), ContractViolation);
  EXPECT_THROW((void)oracle_gradients(make_case({}), {.certify_budget = -1}), ContractViolation);
}

}  // namespace
}  // namespace pararnn::reference
