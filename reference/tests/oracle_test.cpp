// Claims about the oracle: its three precisions agree, its AD Jacobian is the derivative of its
// step, one step is the cell's equations, h0 and packing mean what the contract says, bad cases
// are refused with typed errors, large cases are certified on a seeded sample.
// Every case is generated from a printed seed (SCOPED_TRACE) and replays from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../src/oracle_internal.hpp"
#include "oracle_test_cases.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace {

// Precision ladder, double vs float128: states are O(1), double rounds at 1.1e-16 a step and
// T <= 64 here; far below the f32 tau of 1e-4, we require 1e-12 absolute.
constexpr double kDoubleVsFloat128 = 1e-12;
// Precision ladder, float128 vs cpp_bin_float_50: float128 rounds at 1e-34 a step; far below the
// f64 tau of 1e-10, we require 1e-28 absolute.
constexpr double kFloat128VsBin50 = 1e-28;
// The same equations evaluated in double in another order (hand-written scalars vs matrix form,
// a GEMM vs a loop for W·x): a few roundings of O(1) values.
constexpr double kSameMathInDouble = 1e-14;
// AD Jacobian (double or float128, rounded to double) vs float128 central differences (accurate
// to ~1e-22): entries are O(1), so they must agree to a few double roundings.
constexpr double kJacobianVsDifferences = 1e-13;
// Continuing an f64 unroll from its own rounded state (h0 = H[t-1] rounded to f64): a perturbation
// of 1e-16 carried by a contracting cell over a few steps.
constexpr double kContinuationFromRoundedState = 1e-13;

using namespace pararnn::reference::test_cases;  // NOLINT: the shared case generator

class OracleCellTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleCellTest, DoublePrimaryAgreesWithFloat128OnEveryChain) {
  const CaseSpec spec{.cell = GetParam(), .time = 64, .seed = 11, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const OracleResult r = oracle_sequential(make_case(spec));
  EXPECT_EQ(r.type, "double");
  EXPECT_EQ(r.digits, 53);
  EXPECT_EQ(r.certifier_type, "float128");
  EXPECT_EQ(r.certifier_digits, 113);
  EXPECT_TRUE(r.certified_all_chains);
  EXPECT_EQ(r.certified_chains, (std::vector<std::string>{"b=0", "b=1"}));
  EXPECT_EQ(r.certified_chain_steps, spec.batch * spec.time * slots_of(spec.cell) * spec.d_h);
  EXPECT_TRUE(r.finite);
  EXPECT_LE(r.self_check_delta, kDoubleVsFloat128);
}

TEST_P(OracleCellTest, Float128PrimaryAgreesWithCppBinFloat50OnEveryChain) {
  const CaseSpec spec{.cell = GetParam(), .dtype = DType::f64, .seed = 12, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const OracleResult r = oracle_sequential(make_case(spec));
  EXPECT_EQ(r.type, "float128");
  EXPECT_EQ(r.digits, 113);
  EXPECT_EQ(r.certifier_type, "cpp_bin_float_50");
  EXPECT_GT(r.certifier_digits, 113);
  EXPECT_TRUE(r.certified_all_chains);
  EXPECT_TRUE(r.finite);
  EXPECT_LE(r.self_check_delta, kFloat128VsBin50);
}

TEST_P(OracleCellTest, DoubleAndFloat128PrimariesAgreeOnTheSameInputBits) {
  const CaseSpec spec{.cell = GetParam(), .time = 48, .seed = 13, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case f32_case = make_case(spec);
  const OracleOptions no_certify{.certify = false};
  const OracleResult in_double = oracle_sequential(f32_case, no_certify);
  const OracleResult in_float128 = oracle_sequential(widened_to_f64(f32_case), no_certify);
  ASSERT_EQ(in_double.type, "double");
  ASSERT_EQ(in_float128.type, "float128");
  EXPECT_LE(max_abs_difference(in_double.H, in_float128.H), kDoubleVsFloat128);
}

TEST_P(OracleCellTest, AdJacobianEqualsFloat128CentralDifferences) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .time = 3, .d_h = 5, .dtype = dtype, .seed = 14};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const std::int64_t n = slots_of(spec.cell) * spec.d_h;
    Generator gen(spec.seed + 1000);
    std::vector<double> h_prev(static_cast<std::size_t>(n));
    for (double& v : h_prev) v = gen.uniform(-1.0, 1.0);

    const OracleStep step = oracle_step_with_jacobian(c, 1, 2, h_prev);
    const std::vector<double> differences = detail::finite_difference_jacobian_float128(
        detail::prepare_case(c), 1, 2, h_prev);
    ASSERT_EQ(step.jacobian.size(), static_cast<std::size_t>(n * n));
    ASSERT_EQ(differences.size(), step.jacobian.size());
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t k = 0; k < n; ++k) {
        const auto at = static_cast<std::size_t>(i * n + k);
        EXPECT_NEAR(step.jacobian[at], differences[at], kJacobianVsDifferences)
            << "J[" << i << "][" << k << "]";
      }
    }
  }
}

TEST_P(OracleCellTest, AdStepEqualsTheUnrolledStep) {
  const CaseSpec spec{.cell = GetParam(), .time = 4, .seed = 15, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const std::int64_t n = slots_of(spec.cell) * spec.d_h;
  const std::vector<double> H = r.H.to_f64_vector();
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    const auto row = [&](std::int64_t t) {
      const auto begin = H.begin() + (b * spec.time + t) * n;
      return std::vector<double>(begin, begin + n);
    };
    const OracleStep step = oracle_step_with_jacobian(c, b, 3, row(2));
    const std::vector<double> expected = row(3);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(step.h_new[static_cast<std::size_t>(i)], expected[static_cast<std::size_t>(i)],
                  kSameMathInDouble);
    }
  }
}

// The cell's equations for one channel, written out with scalars from the specification.
struct ChannelInputs {
  std::vector<double> gate_pre;  // W·x + b for each gate of this channel
  std::vector<double> recurrent; // clamped, state_dict order
  std::vector<double> state;     // previous (c, h) or (h)
};

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

std::vector<double> closed_form_step(const std::string& cell, const ChannelInputs& in) {
  const auto& g = in.gate_pre;
  const auto& a = in.recurrent;
  if (cell == "gru") {
    const double h = in.state[0];
    const double z = sigmoid(a[0] * h + g[0]);
    const double r = sigmoid(a[1] * h + g[1]);
    const double n = std::tanh(a[2] * (r * h) + g[2]);
    return {(1.0 - z) * h + z * n};
  }
  if (cell == "lstm") {
    const double c = in.state[0];
    const double h = in.state[1];
    const double f = sigmoid(a[0] * h + a[3] * c + g[0]);
    const double z = std::tanh(a[1] * h + g[1]);
    const double c_new = f * c + (1.0 - f) * z;
    const double o = sigmoid(a[2] * h + a[4] * c_new + g[2]);
    return {c_new, o * std::tanh(c_new)};
  }
  const double h = in.state[0];
  const double gate = sigmoid(g[0]);
  const double n = std::tanh(g[1] + a[0] * h);
  return {gate * h + (1.0 - gate) * n};
}

TEST_P(OracleCellTest, OneStepEqualsTheClosedFormEquationsPerChannel) {
  CaseSpec spec{.cell = GetParam(), .time = 1, .seed = 16, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  Case c = make_case(spec);
  // Entries beyond the default cap 0.5 make the clamp part of the claim.
  const std::string first = recurrent_names(spec.cell).front();
  c.parameters[first].store({0}, 3.0);
  c.parameters[first].store({1}, -2.0);
  constexpr double kCap = 0.5;
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const int slots = slots_of(spec.cell);
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    for (std::int64_t j = 0; j < spec.d_h; ++j) {
      ChannelInputs in;
      for (int g = 0; g < gates_of(spec.cell); ++g) {
        const std::int64_t row = g * spec.d_h + j;
        double sum = 0.0;
        for (std::int64_t k = 0; k < spec.d_in; ++k) {
          sum += c.parameters.at("W_x.weight").load({row, k}) * c.x.load({b, 0, k});
        }
        in.gate_pre.push_back(sum + c.parameters.at("W_x.bias").load({row}));
      }
      for (const auto& name : recurrent_names(spec.cell)) {
        in.recurrent.push_back(std::clamp(c.parameters.at(name).load({j}), -kCap, kCap));
      }
      for (int s = 0; s < slots; ++s) {
        in.state.push_back(slots == 1 ? c.h0->load({b, j}) : c.h0->load({b, s, j}));
      }
      const std::vector<double> expected = closed_form_step(spec.cell, in);
      for (int s = 0; s < slots; ++s) {
        const double got = slots == 1 ? r.H.load({b, 0, j}) : r.H.load({b, 0, s, j});
        EXPECT_NEAR(got, expected[static_cast<std::size_t>(s)], kSameMathInDouble)
            << "b=" << b << " channel=" << j << " slot=" << s;
      }
    }
  }
}

TEST_P(OracleCellTest, UnrollContinuedFromH0EqualsTheFullUnroll) {
  const CaseSpec spec{.cell = GetParam(), .time = 12, .dtype = DType::f64, .seed = 17,
                      .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case full = make_case(spec);
  const OracleResult whole = oracle_sequential(full, {.certify = false});
  constexpr std::int64_t kSplit = 5;
  Case tail = full;
  tail.x = Tensor::copy_of(full.x.view().slice(1, kSplit, spec.time));
  // H[:, kSplit - 1] is (B, d_h) or (B, slots, d_h): an h0 as it stands.
  tail.h0 = Tensor::copy_of(whole.H.view().select(1, kSplit - 1));
  const OracleResult continued = oracle_sequential(tail, {.certify = false});
  const Tensor expected = Tensor::copy_of(whole.H.view().slice(1, kSplit, spec.time));
  EXPECT_LE(max_abs_difference(continued.H, expected), kContinuationFromRoundedState);
  // And h0 matters: from zeros the same tail is a different trajectory.
  tail.h0.reset();
  const OracleResult from_zeros = oracle_sequential(tail, {.certify = false});
  EXPECT_GT(max_abs_difference(from_zeros.H, expected), kContinuationFromRoundedState);
}

TEST_P(OracleCellTest, PackedEqualsEachSegmentAlone) {
  for (const bool with_h0 : {false, true}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 1, .time = 16, .seed = 18,
                        .with_h0 = with_h0, .cu_seqlens = {0, 5, 6, 13, 16}};
    SCOPED_TRACE(describe(spec) + (with_h0 ? " with h0" : " h0 zeros"));
    const Case packed = make_case(spec);
    const OracleResult r = oracle_sequential(packed);
    EXPECT_TRUE(r.certified_all_chains);
    EXPECT_EQ(r.certified_chains,
              (std::vector<std::string>{"segment=0", "segment=1", "segment=2", "segment=3"}));
    EXPECT_LE(r.self_check_delta, kDoubleVsFloat128);
    for (std::size_t s = 0; s + 1 < spec.cu_seqlens.size(); ++s) {
      const std::int64_t begin = spec.cu_seqlens[s];
      const std::int64_t end = spec.cu_seqlens[s + 1];
      Case alone = packed;
      alone.cu_seqlens.reset();
      alone.x = Tensor::copy_of(packed.x.view().slice(1, begin, end));
      if (with_h0) {
        alone.h0 = Tensor::copy_of(packed.h0->view().slice(0, static_cast<std::int64_t>(s),
                                                           static_cast<std::int64_t>(s) + 1));
      }
      const OracleResult one = oracle_sequential(alone, {.certify = false});
      const Tensor packed_part = Tensor::copy_of(r.H.view().slice(1, begin, end));
      EXPECT_EQ(max_abs_difference(one.H, packed_part), 0.0) << "segment " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, OracleCellTest, ::testing::ValuesIn(kCells),
                         [](const auto& info) { return info.param; });

TEST(Oracle, TrajectoryLayoutIsBTdOrBTSlotsD) {
  const OracleOptions no_certify{.certify = false};
  EXPECT_EQ(oracle_sequential(make_case({.cell = "gru"}), no_certify).H.shape(), (Shape{2, 16, 4}));
  EXPECT_EQ(oracle_sequential(make_case({.cell = "nlru"}), no_certify).H.shape(), (Shape{2, 16, 4}));
  EXPECT_EQ(oracle_sequential(make_case({.cell = "lstm"}), no_certify).H.shape(),
            (Shape{2, 16, 2, 4}));
  EXPECT_EQ(oracle_state_shape(make_case({.cell = "lstm", .d_h = 7})).slots, 2);
  EXPECT_EQ(oracle_state_shape(make_case({.cell = "lstm", .d_h = 7})).d_h, 7);
}

TEST(Oracle, OneSlotH0MayCarryTheSlotAxis) {
  const CaseSpec spec{.cell = "gru", .seed = 19, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case flat = make_case(spec);
  Case with_axis = flat;
  with_axis.h0 = flat.h0->reshaped({spec.batch, 1, spec.d_h});
  EXPECT_EQ(max_abs_difference(oracle_sequential(flat, {.certify = false}).H,
                               oracle_sequential(with_axis, {.certify = false}).H),
            0.0);
}

TEST(Oracle, ClampFollowsMaxRecurrentNorm) {
  const CaseSpec spec{.cell = "gru", .seed = 20};
  SCOPED_TRACE(describe(spec));
  Case big = make_case(spec);
  big.parameters["a_z"].store({0}, 3.0);
  Case at_cap = big;
  at_cap.parameters["a_z"] = Tensor::copy_of(big.parameters["a_z"]);
  at_cap.parameters["a_z"].store({0}, 0.25);
  at_cap.metadata["max_recurrent_norm"] = "0.25";
  big.metadata["max_recurrent_norm"] = "0.25";
  const OracleOptions no_certify{.certify = false};
  // Clamped to 0.25: the same as storing 0.25.
  EXPECT_EQ(max_abs_difference(oracle_sequential(big, no_certify).H,
                               oracle_sequential(at_cap, no_certify).H),
            0.0);
  // "none" disables the clamp: 3.0 is used as is.
  Case unclamped = big;
  unclamped.metadata["max_recurrent_norm"] = "none";
  EXPECT_GT(max_abs_difference(oracle_sequential(unclamped, no_certify).H,
                               oracle_sequential(at_cap, no_certify).H),
            0.0);
}

TEST(Oracle, F64CaseUsesFloat128PrimaryAndF32FamilyUsesDouble) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const CaseSpec spec{.cell = "gru", .time = 8, .dtype = dtype, .seed = 21};
    SCOPED_TRACE(describe(spec));
    const OracleResult r = oracle_sequential(make_case(spec));
    EXPECT_EQ(r.type, dtype == DType::f64 ? "float128" : "double");
    EXPECT_EQ(r.certifier_type, dtype == DType::f64 ? "cpp_bin_float_50" : "float128");
    EXPECT_EQ(r.H.dtype(), DType::f64);
    EXPECT_LE(r.self_check_delta, dtype == DType::f64 ? kFloat128VsBin50 : kDoubleVsFloat128);
  }
}

TEST(Oracle, LargeCasesAreCertifiedOnASeededSampleOfRows) {
  const CaseSpec spec{.cell = "lstm", .batch = 6, .time = 20, .seed = 22};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const std::int64_t row = spec.time * 2 * spec.d_h;  // one row's chain-steps
  const OracleOptions options{.certify_budget = 2 * row + row / 2, .seed = 5};
  const OracleResult r = oracle_sequential(c, options);
  EXPECT_FALSE(r.certified_all_chains);
  EXPECT_EQ(r.certified_chains.size(), 2u);
  EXPECT_EQ(r.certified_chain_steps, 2 * row);
  for (const auto& chain : r.certified_chains) EXPECT_EQ(chain.rfind("b=", 0), 0u) << chain;
  EXPECT_LE(r.self_check_delta, kDoubleVsFloat128);
  // The sample replays from the seed.
  EXPECT_EQ(oracle_sequential(c, options).certified_chains, r.certified_chains);
}

TEST(Oracle, RowsBeyondTheBudgetAreCertifiedOnChannelChainsOverFullT) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = "gru", .batch = 3, .time = 40, .d_h = 6, .dtype = dtype,
                        .seed = 23};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const OracleOptions options{.certify_budget = 3 * spec.time + 7, .seed = 9};
    const OracleResult r = oracle_sequential(c, options);
    EXPECT_FALSE(r.certified_all_chains);
    EXPECT_EQ(r.certified_chains.size(), 3u);
    EXPECT_EQ(r.certified_chain_steps, 3 * spec.time);
    for (const auto& chain : r.certified_chains) {
      EXPECT_NE(chain.find(",channel="), std::string::npos) << chain;
    }
    EXPECT_LE(r.self_check_delta, dtype == DType::f64 ? kFloat128VsBin50 : kDoubleVsFloat128);
    EXPECT_EQ(oracle_sequential(c, options).certified_chains, r.certified_chains);
  }
}

TEST(Oracle, CertifyOffLeavesNoCertificate) {
  const OracleResult r = oracle_sequential(make_case({}), {.certify = false});
  EXPECT_TRUE(r.certifier_type.empty());
  EXPECT_FALSE(r.certified_all_chains);
  EXPECT_TRUE(r.certified_chains.empty());
  EXPECT_EQ(r.certified_chain_steps, 0);
}

TEST(Oracle, NonFiniteInputIsReportedNotHidden) {
  Case c = make_case({.seed = 24});
  c.x.store({1, 3, 0}, std::numeric_limits<double>::quiet_NaN());
  const OracleResult r = oracle_sequential(c);
  EXPECT_FALSE(r.finite);
  EXPECT_TRUE(std::isnan(r.self_check_delta));
  EXPECT_TRUE(std::isfinite(r.H.load({0, 15, 0})));  // the other row is untouched
}

// ---- refusals ----

TEST(OracleRefuses, UnknownCellOrMixWithContractViolation) {
  Case c = make_case({});
  c.cell = "slstm";
  EXPECT_THROW((void)oracle_sequential(c), ContractViolation);
  Case head = make_case({});
  head.metadata["mix"] = "head";
  EXPECT_THROW((void)oracle_sequential(head), ContractViolation);
  Case negative_cap = make_case({});
  negative_cap.metadata["max_recurrent_norm"] = "-1";
  EXPECT_THROW((void)oracle_sequential(negative_cap), ContractViolation);
}

TEST(OracleRefuses, MissingOrMisshapenParameterWithCaseFileError) {
  Case missing = make_case({.cell = "lstm"});
  missing.parameters.erase("c_o");
  EXPECT_THROW((void)oracle_sequential(missing), CaseFileError);
  Case no_weight = make_case({});
  no_weight.parameters.erase("W_x.weight");
  EXPECT_THROW((void)oracle_sequential(no_weight), CaseFileError);
  Case wrong_vector = make_case({});
  wrong_vector.parameters["a_r"] = Tensor(DType::f32, {5});
  EXPECT_THROW((void)oracle_sequential(wrong_vector), CaseFileError);
  Case wrong_rows = make_case({});
  wrong_rows.parameters["W_x.weight"] = Tensor(DType::f32, {13, 3});
  EXPECT_THROW((void)oracle_sequential(wrong_rows), CaseFileError);
  Case wrong_bias = make_case({.cell = "nlru"});
  wrong_bias.parameters["W_x.bias"] = Tensor(DType::f32, {12});
  EXPECT_THROW((void)oracle_sequential(wrong_bias), CaseFileError);
  Case wrong_dtype = make_case({});
  wrong_dtype.parameters["a_z"] = Tensor::converted(wrong_dtype.parameters["a_z"], DType::f64);
  EXPECT_THROW((void)oracle_sequential(wrong_dtype), CaseFileError);
}

TEST(OracleRefuses, BadShapesWithContractViolation) {
  Case flat_x = make_case({});
  flat_x.x = flat_x.x.reshaped({32, 3});
  EXPECT_THROW((void)oracle_sequential(flat_x), ContractViolation);
  Case wrong_d_in = make_case({});
  wrong_d_in.x = Tensor(DType::f32, {2, 16, 4});
  EXPECT_THROW((void)oracle_sequential(wrong_d_in), ContractViolation);
  Case wrong_h0 = make_case({.with_h0 = true});
  wrong_h0.h0 = Tensor(DType::f32, {3, 4});
  EXPECT_THROW((void)oracle_sequential(wrong_h0), ContractViolation);
  Case lstm_flat_h0 = make_case({.cell = "lstm"});
  lstm_flat_h0.h0 = Tensor(DType::f32, {2, 4});
  EXPECT_THROW((void)oracle_sequential(lstm_flat_h0), ContractViolation);
  Case h0_dtype = make_case({.with_h0 = true});
  h0_dtype.h0 = Tensor::converted(*h0_dtype.h0, DType::f64);
  EXPECT_THROW((void)oracle_sequential(h0_dtype), ContractViolation);
  Case int_x = make_case({});
  int_x.x = Tensor(DType::i32, {2, 16, 3});
  EXPECT_THROW((void)oracle_sequential(int_x), ContractViolation);
  const std::vector<double> h(4, 0.0);
  EXPECT_THROW((void)oracle_step_with_jacobian(make_case({.cell = "lstm"}), 0, 0, h),
               ContractViolation);
  EXPECT_THROW((void)oracle_step_with_jacobian(make_case({}), 2, 0, h), ContractViolation);
}

TEST(OracleRefuses, InvalidPackingWithContractViolation) {
  const auto packed = [](std::vector<double> offsets, DType dtype = DType::i64) {
    Case c = make_case({.batch = 1, .time = 10, .cu_seqlens = {0, 4, 10}});
    c.cu_seqlens = Tensor::from_values(dtype, {static_cast<std::int64_t>(offsets.size())}, offsets);
    return c;
  };
  EXPECT_NO_THROW((void)oracle_sequential(packed({0, 4, 10}, DType::i32), {.certify = false}));
  EXPECT_THROW((void)oracle_sequential(packed({1, 4, 10})), ContractViolation);
  EXPECT_THROW((void)oracle_sequential(packed({0, 4, 9})), ContractViolation);
  EXPECT_THROW((void)oracle_sequential(packed({0, 4, 4, 10})), ContractViolation);
  EXPECT_THROW((void)oracle_sequential(packed({0})), ContractViolation);
  EXPECT_THROW((void)oracle_sequential(packed({0, 4, 10}, DType::f32)), ContractViolation);
  Case two_rows = make_case({.batch = 2, .time = 10});
  two_rows.cu_seqlens = Tensor::from_values(DType::i64, {3}, std::vector<double>{0, 4, 10});
  EXPECT_THROW((void)oracle_sequential(two_rows), ContractViolation);
  Case h0_per_batch = make_case({.batch = 1, .time = 10, .with_h0 = true,
                                 .cu_seqlens = {0, 4, 10}});
  h0_per_batch.h0 = Tensor(DType::f32, {1, 4});  // needs S = 2 rows
  EXPECT_THROW((void)oracle_sequential(h0_per_batch), ContractViolation);
}

}  // namespace
}  // namespace pararnn::reference
