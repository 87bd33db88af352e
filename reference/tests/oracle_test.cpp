// Claims about the oracle: its three precisions agree, its AD Jacobian is the derivative of its
// step, one step is the cell's equations (sLSTM at the tie of its max too, with the
// specification's Jacobian; CfC with Δt below its floor), h0 and packing mean what the contract
// says, bad cases are refused with typed errors, large cases are certified on a seeded sample.
// Every case is generated from a printed seed (SCOPED_TRACE) and replays from it.
#include <atomic>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../src/oracle_internal.hpp"
#include "oracle_test_cases.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace {

// The oracle's internal bands come from the tolerance table (contracts/tolerance.hpp,
// OracleBand: each with the reason for its size).
const double kDoubleVsFloat128 = oracle_band(OracleBand::double_vs_float128).atol;
const double kFloat128VsBin50 = oracle_band(OracleBand::float128_vs_bin50).atol;
const double kSameMathInDouble = oracle_band(OracleBand::same_math_in_double).atol;
const double kJacobianVsDifferences = oracle_band(OracleBand::jacobian_vs_differences).atol;
const double kContinuationFromRoundedState = oracle_band(OracleBand::continuation_from_rounded_state).atol;
const double kSpecJacobianVsAd = oracle_band(OracleBand::spec_jacobian_vs_ad).atol;
// At the tie of the sLSTM max (test_cases::slstm_tie_case): α = β = 1/2, exactly.
constexpr double kTieDerivative = 0.5;
// The default clamp.
constexpr double kDefaultCap = 0.5;
// CfC: the floor on Δt, and raw Δt values below it (clamped) and above it.
constexpr double kTimeFloor = 1e-4;
constexpr std::array<double, 4> kRawTimeSteps = {-0.5, 0.0, 5e-5, 0.75};
// sLSTM's eps default and PyTorch's softplus threshold.
constexpr double kSlstmEps = 1e-6;
constexpr double kSoftplusThreshold = 20.0;

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

// The self-check compares every value of its sample: in a case certified on every chain, the
// primary's trajectory changed at any one value (each in turn: every batch row, step, slot and
// channel) makes self_check_delta exceed the band that certification requires, for both
// primaries. A chain or a step left out of the comparison would let its change through.
TEST_P(OracleCellTest, SelfCheckSeesAChangeAtEveryValueOfItsSample) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 2, .time = 4, .d_h = 2, .dtype = dtype, .seed = 41,
                        .with_h0 = true};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const detail::PreparedCase prepared = detail::prepare_case(c);
    std::vector<double> H = oracle_sequential(c, OracleOptions{.certify = false}).H.to_f64_vector();
    const OracleOptions options;
    const double band = dtype == DType::f64 ? kFloat128VsBin50 : kDoubleVsFloat128;
    ASSERT_TRUE(detail::certify(prepared, H.data(), options).all_chains);
    ASSERT_LE(detail::certify(prepared, H.data(), options).self_check_delta, band);
    std::vector<std::size_t> unseen;
    for (std::size_t i = 0; i < H.size(); ++i) {
      const double value = H[i];
      // Far beyond the band, and at least a few ulps of the value (so that it changes in double).
      H[i] = value + std::max(1e3 * band, 4 * (std::nextafter(std::abs(value), INFINITY) - std::abs(value)));
      if (!(detail::certify(prepared, H.data(), options).self_check_delta > band)) unseen.push_back(i);
      H[i] = value;
    }
    EXPECT_TRUE(unseen.empty()) << unseen.size() << " of " << H.size()
                                << " changed values passed the self-check, the first at flat index " << unseen.front();
  }
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
    const std::vector<double> h_prev = random_state(gen, spec.cell, spec.d_h);

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
  std::vector<double> gate_pre;  // W·x + b for each gate of this channel (cfc: f_pre, c_x, b, Δt)
  std::vector<double> recurrent; // clamped, state_dict order (slstm: R's rows i, f, z, o)
  std::vector<double> state;     // previous (c, h), (c, n, m, h) or (h)
};

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double softplus(double v) { return v > kSoftplusThreshold ? v : std::log1p(std::exp(v)); }

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
  if (cell == "slstm") {
    const double c = in.state[0], n = in.state[1], m = in.state[2], h = in.state[3];
    const double z_i = g[0] + a[0] * h;
    const double z_f = g[1] + a[1] * h;
    const double z_z = g[2] + a[2] * h;
    const double z_o = g[3] + a[3] * h;
    const double m_new = std::max(z_f + m, z_i);
    const double i = std::exp(z_i - m_new);
    const double f = std::exp(z_f + m - m_new);
    const double z = std::tanh(z_z);
    const double o = sigmoid(z_o);
    const double n_new = f * n + i;
    const double c_new = f * c + i * z;
    return {c_new, n_new, m_new, o * c_new / (n_new + kSlstmEps)};
  }
  if (cell == "cfc") {
    const double h = in.state[0];
    const double gate = sigmoid(-(softplus(g[0]) * g[3] + g[2]));
    const double n = std::tanh(g[1] + a[0] * h);
    return {gate * h + (1.0 - gate) * n};
  }
  if (cell == "titans") {
    const double h = in.state[0];
    const double alpha = sigmoid(g[0]);
    const double theta = softplus(g[1]);
    const double k = g[2], v = g[3];
    const double grad = (h * k - v) * k;
    return {(1.0 - alpha) * h - theta * grad + a[0] * std::tanh(g[4] + a[1] * h)};
  }
  const double h = in.state[0];
  const double gate = sigmoid(g[0]);
  const double n = std::tanh(g[1] + a[0] * h);
  return {gate * h + (1.0 - gate) * n};
}

// W·feat + b of row `row` of an affine at (b, t), summed in double.
double affine_row(const Case& c, const std::string& weight, const std::string& bias,
                  std::int64_t row, std::int64_t b, std::int64_t t) {
  const Tensor& w = c.parameters.at(weight);
  double sum = 0.0;
  for (std::int64_t k = 0; k < w.size(1); ++k) sum += w.load({row, k}) * c.x.load({b, t, k});
  return sum + c.parameters.at(bias).load({row});
}

// The channel's inputs of step t of row b from the case, in the closed form's order.
ChannelInputs channel_inputs(const Case& c, std::int64_t b, std::int64_t t, std::int64_t j,
                             std::int64_t d_h, double cap, const std::vector<double>& state) {
  ChannelInputs in;
  for (int g = 0; g < gates_of(c.cell); ++g) {
    in.gate_pre.push_back(affine_row(c, "W_x.weight", "W_x.bias", g * d_h + j, b, t));
  }
  if (c.cell == "cfc") {
    in.gate_pre.push_back(affine_row(c, "W_b.weight", "W_b.bias", j, b, t));
    in.gate_pre.push_back(std::max(c.x.load({b, t, c.x.size(2) - 1}), kTimeFloor));
  }
  for (const auto& name : recurrent_names(c.cell)) {
    const Tensor& r = c.parameters.at(name);
    for (std::int64_t row = 0; row < recurrent_rows(c.cell); ++row) {
      const double raw = r.dim() == 1 ? r.load({j}) : r.load({row, j});
      in.recurrent.push_back(std::clamp(raw, -cap, cap));
    }
  }
  in.state = state;
  return in;
}

// h0's row b, channel j, every slot.
std::vector<double> h0_channel(const Case& c, std::int64_t b, std::int64_t j) {
  std::vector<double> state;
  for (int s = 0; s < slots_of(c.cell); ++s) {
    state.push_back(c.h0->dim() == 2 ? c.h0->load({b, j}) : c.h0->load({b, s, j}));
  }
  return state;
}

double trajectory_at(const Tensor& H, std::int64_t b, std::int64_t t, int slot, std::int64_t j) {
  return H.dim() == 3 ? H.load({b, t, j}) : H.load({b, t, slot, j});
}

TEST_P(OracleCellTest, OneStepEqualsTheClosedFormEquationsPerChannel) {
  CaseSpec spec{.cell = GetParam(), .time = 1, .seed = 16, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  // Channel 0 of cfc and titans goes through softplus's identity branch.
  Case c = with_softplus_above_threshold(make_case(spec));
  // Entries beyond the default cap 0.5 make the clamp part of the claim.
  Tensor& first = c.parameters[recurrent_names(spec.cell).front()];
  first.reshaped({first.numel()}).store({0}, 3.0);
  first.reshaped({first.numel()}).store({1}, -2.0);
  constexpr double kCap = 0.5;
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const int slots = slots_of(spec.cell);
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    for (std::int64_t j = 0; j < spec.d_h; ++j) {
      const ChannelInputs in = channel_inputs(c, b, 0, j, spec.d_h, kCap, h0_channel(c, b, j));
      const std::vector<double> expected = closed_form_step(spec.cell, in);
      for (int s = 0; s < slots; ++s) {
        EXPECT_NEAR(trajectory_at(r.H, b, 0, s, j), expected[static_cast<std::size_t>(s)],
                    kSameMathInDouble)
            << "b=" << b << " channel=" << j << " slot=" << s;
      }
    }
  }
}

// The sLSTM Jacobian of one channel (4×4, [out][in] over c, n, m, h) from the specification's
// hand-written formulas (pararnn-torch-spec.md §1.4), with α the derivative of the max.
std::array<std::array<double, 4>, 4> slstm_spec_jacobian(const ChannelInputs& in, double alpha) {
  const auto& g = in.gate_pre;
  const double r_i = in.recurrent[0], r_f = in.recurrent[1], r_z = in.recurrent[2],
               r_o = in.recurrent[3];
  const double c = in.state[0], n = in.state[1], m = in.state[2], h = in.state[3];
  const double beta = 1.0 - alpha;
  const double z_i = g[0] + r_i * h, z_f = g[1] + r_f * h;
  const double m_new = std::max(z_f + m, z_i);
  const double i = std::exp(z_i - m_new), f = std::exp(z_f + m - m_new);
  const double z = std::tanh(g[2] + r_z * h), o = sigmoid(g[3] + r_o * h);
  const double n_new = f * n + i, c_new = f * c + i * z;
  const double dm_dh = alpha * r_f + beta * r_i;
  const double di_dh = i * (r_i - dm_dh), df_dh = f * (r_f - dm_dh);
  const double dz_dh = (1.0 - z * z) * r_z, do_dh = o * (1.0 - o) * r_o;
  const double D = n_new + kSlstmEps;
  const double inv = o / D, dn = -o * c_new / (D * D), du = c_new / D;
  const double J_cm = f * beta * c - i * alpha * z;
  const double J_ch = df_dh * c + di_dh * z + i * dz_dh;
  const double J_nm = f * beta * n - i * alpha;
  const double J_nh = df_dh * n + di_dh;
  return {{{f, 0.0, J_cm, J_ch},
           {0.0, f, J_nm, J_nh},
           {0.0, 0.0, alpha, dm_dh},
           {inv * f, dn * f, inv * J_cm + dn * J_nm, inv * J_ch + dn * J_nh + du * do_dh}}};
}

TEST(OracleSlstm, TieOfTheMaxTakesHalfOfEachSideAndTheJacobianIsTheSpecifications) {
  const CaseSpec spec{.cell = "slstm", .batch = 2, .time = 1, .d_h = 3, .seed = 31,
                      .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case c = slstm_tie_case(spec);
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const std::int64_t n = 4 * spec.d_h;
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    std::vector<double> h_prev(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) h_prev[static_cast<std::size_t>(k)] = c.h0->load({b, k / spec.d_h, k % spec.d_h});
    const OracleStep step = oracle_step_with_jacobian(c, b, 0, h_prev);
    for (std::int64_t j = 0; j < spec.d_h; ++j) {
      const ChannelInputs in = channel_inputs(c, b, 0, j, spec.d_h, kDefaultCap, h0_channel(c, b, j));
      const double left = in.gate_pre[1] + in.recurrent[1] * in.state[3] + in.state[2];
      const double right = in.gate_pre[0] + in.recurrent[0] * in.state[3];
      if (j == kTieChannel) ASSERT_EQ(left, right) << "the case must be at the tie";
      const double alpha = left > right ? 1.0 : left == right ? kTieDerivative : 0.0;
      // The state is the closed form's (the value of the max does not depend on α).
      const std::vector<double> expected = closed_form_step("slstm", in);
      const auto jacobian = slstm_spec_jacobian(in, alpha);
      for (int out = 0; out < 4; ++out) {
        EXPECT_NEAR(trajectory_at(r.H, b, 0, out, j), expected[static_cast<std::size_t>(out)],
                    kSameMathInDouble)
            << "b=" << b << " channel=" << j << " slot=" << out;
        for (std::int64_t k = 0; k < n; ++k) {
          const double got = step.jacobian[static_cast<std::size_t>((out * spec.d_h + j) * n + k)];
          if (k % spec.d_h != j) {
            EXPECT_EQ(got, 0.0) << "channels never mix";
            continue;
          }
          EXPECT_NEAR(got, jacobian[static_cast<std::size_t>(out)][static_cast<std::size_t>(k / spec.d_h)],
                      kSpecJacobianVsAd)
              << "b=" << b << " channel=" << j << " J[" << out << "][" << k / spec.d_h << "]";
        }
      }
      if (j == kTieChannel) {
        // dm'/dm = α = 1/2 and dm'/dh = (r_f + r_i) / 2, exactly.
        const auto at = [&](int out, int in_slot) {
          return step.jacobian[static_cast<std::size_t>((out * spec.d_h + j) * n + in_slot * spec.d_h + j)];
        };
        EXPECT_EQ(at(kSlstmStabilizer, kSlstmStabilizer), kTieDerivative);
        EXPECT_EQ(at(kSlstmStabilizer, kSlstmHidden),
                  kTieDerivative * (kTieRecurrentF + kTieRecurrentI));
      }
    }
  }
}

TEST(OracleCfc, TimeStepIsFlooredAtOneTenThousandth) {
  const CaseSpec spec{.cell = "cfc", .batch = static_cast<std::int64_t>(kRawTimeSteps.size()),
                      .time = 1, .d_in = 4, .d_h = 3, .dtype = DType::f64, .seed = 32,
                      .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  Case c = make_case(spec);
  Case at_floor = c;
  at_floor.x = Tensor::copy_of(c.x);
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    const double raw = kRawTimeSteps[static_cast<std::size_t>(b)];
    c.x.store({b, 0, spec.d_in - 1}, raw);
    at_floor.x.store({b, 0, spec.d_in - 1}, std::max(raw, kTimeFloor));
  }
  const OracleResult r = oracle_sequential(c, {.certify = false});
  for (std::int64_t b = 0; b < spec.batch; ++b) {
    for (std::int64_t j = 0; j < spec.d_h; ++j) {
      const ChannelInputs in = channel_inputs(c, b, 0, j, spec.d_h, kDefaultCap, h0_channel(c, b, j));
      EXPECT_NEAR(r.H.load({b, 0, j}), closed_form_step("cfc", in).front(), kSameMathInDouble)
          << "b=" << b << " channel=" << j;
    }
  }
  // A raw Δt below the floor is the floor itself, bit for bit.
  EXPECT_EQ(max_abs_difference(r.H, oracle_sequential(at_floor, {.certify = false}).H), 0.0);
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
  EXPECT_EQ(oracle_sequential(make_case({.cell = "slstm"}), no_certify).H.shape(),
            (Shape{2, 16, 4, 4}));
  EXPECT_EQ(oracle_sequential(make_case({.cell = "cfc"}), no_certify).H.shape(), (Shape{2, 16, 4}));
  EXPECT_EQ(oracle_sequential(make_case({.cell = "titans"}), no_certify).H.shape(),
            (Shape{2, 16, 4}));
  EXPECT_EQ(oracle_state_shape(make_case({.cell = "slstm", .d_h = 7})).slots, 4);
  EXPECT_EQ(oracle_state_shape(make_case({.cell = "cfc", .d_in = 5, .d_h = 7})).d_h, 7);
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

// OracleOptions::poll: called through the unroll and the certification (a caller's time budget
// stops a long oracle through it); what it throws comes out of oracle_sequential.
TEST(Oracle, PollRunsThroughUnrollAndCertificationAndWhatItThrowsStopsTheOracle) {
  const CaseSpec spec{.cell = "gru", .batch = 2, .time = 3000, .seed = 25};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const std::int64_t polls_per_chain = (spec.time + 1023) / 1024;  // every 1024 steps from t = 0
  std::atomic<std::int64_t> unroll_polls{0}, all_polls{0};
  (void)oracle_sequential(c, {.certify = false, .poll = [&] { ++unroll_polls; }});
  EXPECT_EQ(unroll_polls.load(), spec.batch * polls_per_chain);  // one chain per row
  (void)oracle_sequential(c, {.certify = true, .poll = [&] { ++all_polls; }});
  EXPECT_GE(all_polls.load(), 2 * spec.batch * polls_per_chain) << "the certification never polled";
  struct Stop {};
  std::atomic<std::int64_t> calls{0};
  EXPECT_THROW((void)oracle_sequential(c, {.poll = [&] { if (++calls > 0) throw Stop{}; }}), Stop);
  // Stopped in the certification (the unroll's polls pass): the same.
  calls = 0;
  EXPECT_THROW((void)oracle_sequential(c, {.poll = [&] { if (++calls > unroll_polls.load()) throw Stop{}; }}), Stop);
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

// Fuzzing found k_dim·v_dim overflowing int64 (signed overflow, UB) in the oracle's reading of an
// M2RNN case (fuzz_metadata, input kept as seed regression-m2rnn-state-overflow): a state beyond
// 2^31 values per row is refused by name, as the library reading refuses it.
TEST(OracleRefuses, M2rnnStateBeyondTwoToThe31ValuesByName) {
  for (const auto& [k_dim, v_dim] : {std::pair<std::string, std::string>{"8333333333333333333", "2"},
                                     {"65536", "32769"}}) {
    Case c;
    c.cell = "m2rnn";
    c.metadata = {{"cell", "m2rnn"}, {"k_dim", k_dim}, {"v_dim", v_dim}};
    c.x = Tensor(DType::f32, {1, 3, 3});
    c.parameters.emplace("W_x.weight", Tensor(DType::f32, {5, 3}));
    c.parameters.emplace("W_x.bias", Tensor(DType::f32, {5}));
    c.parameters.emplace("W", Tensor(DType::f32, {2, 2}));
    try {
      (void)oracle_state_shape(c);
      ADD_FAILURE() << "k_dim=" << k_dim << " v_dim=" << v_dim << " was accepted";
    } catch (const ContractViolation& e) {
      EXPECT_EQ(std::string(e.argument()), "k_dim, v_dim") << e.what();
    }
  }
}

TEST(OracleRefuses, UnknownCellOrMixWithContractViolation) {
  Case c = make_case({});
  c.cell = "m2rnn";
  EXPECT_THROW((void)oracle_sequential(c), ContractViolation);
  Case slstm_sideways = make_case({.cell = "slstm"});
  slstm_sideways.metadata["mix"] = "sideways";
  EXPECT_THROW((void)oracle_sequential(slstm_sideways), ContractViolation);
  Case slstm_head = make_case({.cell = "slstm"});
  slstm_head.metadata["mix"] = "head";  // without n_heads
  EXPECT_THROW((void)oracle_sequential(slstm_head), ContractViolation);
  Case slstm_dense = make_case({.cell = "slstm"});
  slstm_dense.metadata["mix"] = "dense";  // without R_dense.weight
  EXPECT_THROW((void)oracle_sequential(slstm_dense), CaseFileError);
  Case slstm_heads = make_case({.cell = "slstm"});
  slstm_heads.metadata["n_heads"] = "2";
  EXPECT_THROW((void)oracle_sequential(slstm_heads), ContractViolation);
  Case slstm_eps = make_case({.cell = "slstm"});
  slstm_eps.metadata["eps"] = "tiny";
  EXPECT_THROW((void)oracle_sequential(slstm_eps), ContractViolation);
  for (const std::string gate_mix : {"dense", "diag"}) {
    Case cfc = make_case({.cell = "cfc"});
    cfc.metadata["gate_mix"] = gate_mix;
    EXPECT_THROW((void)oracle_sequential(cfc), ContractViolation) << gate_mix;
  }
  Case cfc_absent = make_case({.cell = "cfc"});
  cfc_absent.metadata["gate_mix"] = "";  // what str(None) users write: absent, the default 'input'
  EXPECT_NO_THROW((void)oracle_sequential(cfc_absent));
  Case cfc_diag_h = make_case({.cell = "cfc"});
  cfc_diag_h.metadata["gate_mix"] = "diag_h";  // needs the state_dict entry v
  EXPECT_THROW((void)oracle_sequential(cfc_diag_h), CaseFileError);
  cfc_diag_h.parameters.emplace("v", cfc_diag_h.parameters.at("u"));
  EXPECT_NO_THROW((void)oracle_sequential(cfc_diag_h, {.certify = false}));
  Case cfc_input = make_case({.cell = "cfc"});
  cfc_input.metadata["gate_mix"] = "input";
  EXPECT_NO_THROW((void)oracle_sequential(cfc_input, {.certify = false}));
  for (const std::string cell : {"cfc", "titans"}) {
    Case mixed = make_case({.cell = cell});
    mixed.metadata["mix"] = "head";
    EXPECT_THROW((void)oracle_sequential(mixed), ContractViolation) << cell;
  }
  Case head = make_case({});
  head.metadata["mix"] = "head";
  EXPECT_THROW((void)oracle_sequential(head), ContractViolation);
  Case negative_cap = make_case({});
  negative_cap.metadata["max_recurrent_norm"] = "-1";
  EXPECT_THROW((void)oracle_sequential(negative_cap), ContractViolation);
}

TEST(OracleCellList, EveryRowIsSelectedByItsCellMixAndGateMix) {
  for (const detail::OracleCellEntry& row : detail::oracle_cells()) {
    EXPECT_EQ(&detail::oracle_cell(row.kind), &row) << row.cell;
    for (const std::string& mix : row.mixes) {
      Case c;
      c.cell = row.cell;
      if (!mix.empty()) c.metadata["mix"] = mix;
      if (!row.gate_mix.empty()) c.metadata["gate_mix"] = row.gate_mix;
      if (row.n_heads == detail::HeadsRule::required) c.metadata["n_heads"] = "1";
      EXPECT_EQ(&detail::select_cell(c), &row) << row.cell << ", mix '" << mix << "'";
    }
  }
}

TEST(OracleCellList, UnknownCellIsRefusedWithEveryCellOfTheList) {
  Case c;
  c.cell = "gru_sideways";
  try {
    (void)detail::select_cell(c);
    ADD_FAILURE() << "cell gru_sideways was selected";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(std::string(e.what()),
              "cell: must be a cell the oracle implements: gru (mix diag or head), lstm, nlru, "
              "slstm (mix diag, head or dense), cfc (gate_mix input or diag_h), titans, hopfield, "
              "rwkv7, m2rnn (got gru_sideways)");
  }
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

  Case no_r = make_case({.cell = "slstm"});
  no_r.parameters.erase("R");
  EXPECT_THROW((void)oracle_sequential(no_r), CaseFileError);
  Case flat_r = make_case({.cell = "slstm"});
  flat_r.parameters["R"] = Tensor(DType::f32, {4});  // a (d_h) vector, not (4, d_h)
  EXPECT_THROW((void)oracle_sequential(flat_r), CaseFileError);
  Case three_rows = make_case({.cell = "slstm"});
  three_rows.parameters["R"] = Tensor(DType::f32, {3, 4});
  EXPECT_THROW((void)oracle_sequential(three_rows), CaseFileError);
  Case slstm_weight = make_case({.cell = "slstm"});
  slstm_weight.parameters["W_x.weight"] = Tensor(DType::f32, {12, 3});  // 3 gates, not 4
  EXPECT_THROW((void)oracle_sequential(slstm_weight), CaseFileError);
  for (const std::string name : {"W_b.weight", "W_b.bias", "u"}) {
    Case cfc = make_case({.cell = "cfc"});
    cfc.parameters.erase(name);
    EXPECT_THROW((void)oracle_sequential(cfc), CaseFileError) << name;
  }
  Case w_b_columns = make_case({.cell = "cfc"});  // d_in = 3: F = 2 features
  w_b_columns.parameters["W_b.weight"] = Tensor(DType::f32, {4, 3});
  EXPECT_THROW((void)oracle_sequential(w_b_columns), CaseFileError);
  Case w_b_rows = make_case({.cell = "cfc"});
  w_b_rows.parameters["W_b.bias"] = Tensor(DType::f32, {8});
  EXPECT_THROW((void)oracle_sequential(w_b_rows), CaseFileError);
  Case no_titans_r = make_case({.cell = "titans"});
  no_titans_r.parameters.erase("r");
  EXPECT_THROW((void)oracle_sequential(no_titans_r), CaseFileError);
  Case titans_rows = make_case({.cell = "titans"});
  titans_rows.parameters["W_x.weight"] = Tensor(DType::f32, {16, 3});  // 4 gates of 4, not 5
  EXPECT_THROW((void)oracle_sequential(titans_rows), CaseFileError);
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
  Case slstm_flat_h0 = make_case({.cell = "slstm"});
  slstm_flat_h0.h0 = Tensor(DType::f32, {2, 4});
  EXPECT_THROW((void)oracle_sequential(slstm_flat_h0), ContractViolation);
  Case slstm_two_slots = make_case({.cell = "slstm"});
  slstm_two_slots.h0 = Tensor(DType::f32, {2, 2, 4});
  EXPECT_THROW((void)oracle_sequential(slstm_two_slots), ContractViolation);
  // CfC needs a feature and the Δt channel; x's last dimension is W's columns + 1.
  Case cfc_one_channel = make_case({.cell = "cfc"});
  cfc_one_channel.x = Tensor(DType::f32, {2, 16, 1});
  EXPECT_THROW((void)oracle_sequential(cfc_one_channel), ContractViolation);
  Case cfc_no_time = make_case({.cell = "cfc"});
  cfc_no_time.x = Tensor(DType::f32, {2, 16, 2});  // W_x reads F = 2 features: d_in must be 3
  EXPECT_THROW((void)oracle_sequential(cfc_no_time), ContractViolation);
  const std::vector<double> h(4, 0.0);
  EXPECT_THROW((void)oracle_step_with_jacobian(make_case({.cell = "lstm"}), 0, 0, h),
               ContractViolation);
  EXPECT_THROW((void)oracle_step_with_jacobian(make_case({.cell = "slstm"}), 0, 0, h),
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
