// Claims about oracle_lyapunov (lyapunov.hpp): a constant Jacobian gives λ̂ = log|a| and the
// stretch W·log|a| exactly, by both methods (exact log|J|, Benettin); expanding cases give
// λ̂ > 0 and contracting ones λ̂ < 0; the per-channel Jacobian blocks are exactly the dense AD
// Jacobian's; λ̂ depends neither on the order of the batch rows nor on packing; non-finite
// input gives no number but a reason. Every case is generated from a printed seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../src/oracle_internal.hpp"
#include "oracle_test_cases.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace {

using namespace pararnn::reference::test_cases;  // NOLINT: the shared case generator

// Dyadic values that make the Jacobian a constant the test computes exactly:
// σ(0) = 1/2 exactly, and softplus is the identity above PyTorch's threshold 20
// (kAboveSoftplusThreshold = 25), so Titans' j = (1 - σ(0)) - 25·k² for k dyadic.
constexpr double kHalf = 0.5;
// Titans' k per channel: |j| = 1.0625, 0.109375, 5.75, 3.015625 (three expanding, one
// contracting).
constexpr std::array<double, 4> kTitansKeys = {0.25, 0.125, 0.5, 0.375};

Tensor zeros_like(const Tensor& t) { return Tensor(t.dtype(), t.shape()); }

// The units' exponents, sorted: the distribution over chains.
std::vector<double> sorted_exponents(const LyapunovEstimate& e) {
  std::vector<double> v;
  for (const LyapunovUnit& u : e.units) v.push_back(u.exponent);
  std::sort(v.begin(), v.end());
  return v;
}

LyapunovEstimate estimate(const Case& c, const LyapunovOptions& options = {}) {
  return oracle_lyapunov(c, oracle_sequential(c, {.certify = false}), options);
}

// A GRU whose Jacobian is the constant diagonal 1 - σ(b_z) (spec §1.1: j = (1 - z) + terms in
// ã_z, ã_n, ã_r; with ã = 0 and W_x = 0, z = σ(b_z)), here b_z = 0: j = 1/2.
Case constant_gru(const CaseSpec& spec) {
  Case c = make_case(spec);
  for (const char* name : {"a_z", "a_r", "a_n"}) c.parameters.at(name) = zeros_like(c.parameters.at(name));
  c.parameters.at("W_x.weight") = zeros_like(c.parameters.at("W_x.weight"));
  Tensor& bias = c.parameters.at("W_x.bias");
  for (std::int64_t j = 0; j < spec.d_h; ++j) bias.store({j}, 0.0);  // b_z
  return c;
}

// ParaGRU mix 'head' (spec §1.2) with one head of width d_h: A_z, A_r, A_n (1, d_h, d_h), each
// gain·N(0, 1/d_h); W_x's z bias 0, its r bias `r_bias`.
Case gru_head_case(const CaseSpec& spec, double gain, double r_bias) {
  Case c = make_case(spec);
  for (const char* name : {"a_z", "a_r", "a_n"}) c.parameters.erase(name);
  c.metadata["mix"] = "head";
  c.metadata["n_heads"] = "1";
  Generator gen(spec.seed + 1);
  for (const char* name : {"A_z", "A_r", "A_n"}) {
    const double stddev = std::string(name) == "A_n" ? gain / std::sqrt(static_cast<double>(spec.d_h)) : 0.0;
    c.parameters[name] = stddev == 0.0 ? Tensor(spec.dtype, {1, spec.d_h, spec.d_h})
                                       : gen.normal_tensor(spec.dtype, {1, spec.d_h, spec.d_h}, stddev);
  }
  Tensor& bias = c.parameters.at("W_x.bias");
  for (std::int64_t j = 0; j < spec.d_h; ++j) {
    bias.store({j}, 0.0);
    bias.store({spec.d_h + j}, r_bias);
  }
  return c;
}

TEST(OracleLyapunov, ConstantDiagonalJacobianGivesExactlyLogA) {
  const CaseSpec spec{.cell = "gru", .batch = 3, .time = 100, .d_h = 4, .seed = 41, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const LyapunovEstimate e = estimate(constant_gru(spec), {.window = 16});
  ASSERT_TRUE(e.finite) << e.reason;
  EXPECT_EQ(e.method, "exact log|J| per channel");
  EXPECT_EQ(e.units.size(), static_cast<std::size_t>(spec.batch * spec.d_h));
  const double log_a = std::log(1.0 - kHalf);  // closed form: j = 1 - σ(0)
  for (const LyapunovUnit& u : e.units) {
    EXPECT_EQ(u.exponent, log_a) << u.chain;
    EXPECT_EQ(u.stretch, 16 * log_a) << u.chain;
    EXPECT_EQ(u.steps, spec.time);
  }
  EXPECT_EQ(e.max_exponent, log_a);
  EXPECT_EQ(e.median_exponent, log_a);
  EXPECT_EQ(e.fraction_positive, 0.0);
  EXPECT_TRUE(e.all_chains);
  EXPECT_EQ(e.jacobian_steps, spec.batch * spec.time);
}

TEST(OracleLyapunov, WindowLongerThanTheChainStretchesOverTheWholeChain) {
  const CaseSpec spec{.cell = "gru", .batch = 1, .time = 10, .d_h = 2, .seed = 42};
  SCOPED_TRACE(describe(spec));
  const LyapunovEstimate e = estimate(constant_gru(spec), {.window = 64});
  ASSERT_TRUE(e.finite) << e.reason;
  for (const LyapunovUnit& u : e.units) EXPECT_EQ(u.stretch, spec.time * std::log(1.0 - kHalf));
}

TEST(OracleLyapunov, ConstantDenseJacobianGivesExactlyLogAByBenettin) {
  // gru head with A = 0 and W_x = 0: J = (1 - σ(0)) I = I/2. d_h = 16 = 4²: v = 1/4 per entry,
  // ‖J v‖ = 1/2, all exact in double.
  const CaseSpec spec{.cell = "gru", .batch = 2, .time = 40, .d_h = 16, .seed = 43};
  SCOPED_TRACE(describe(spec) + " mix=head");
  Case c = gru_head_case(spec, 0.0, 0.0);
  c.parameters.at("W_x.weight") = zeros_like(c.parameters.at("W_x.weight"));
  const LyapunovEstimate e = estimate(c, {.window = 8});
  ASSERT_TRUE(e.finite) << e.reason;
  EXPECT_EQ(e.method, "Benettin dense");
  EXPECT_EQ(e.block, spec.d_h);
  ASSERT_EQ(e.units.size(), static_cast<std::size_t>(spec.batch));
  const double log_a = std::log(1.0 - kHalf);
  for (const LyapunovUnit& u : e.units) {
    EXPECT_EQ(u.exponent, log_a) << u.chain;
    EXPECT_EQ(u.stretch, 8 * log_a) << u.chain;
  }
}

TEST(OracleLyapunov, TitansConstantExpandingAndContractingChannelsGiveLogAbsJExactly) {
  // Titans (spec §1.7): j = (1 - α) - θ k² + ũ (1 - tanh²) r̃. With u = r = 0, W_x = 0, biases
  // α_pre = 0, θ_pre = 25 (softplus = identity), k = kTitansKeys[c]: j = 1/2 - 25 k², constant
  // and exact; |j| > 1 expands (λ̂ > 0), |j| < 1 contracts (λ̂ < 0).
  const CaseSpec spec{.cell = "titans", .batch = 2, .time = 30, .d_h = 4, .seed = 44, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  Case c = make_case(spec);
  for (const char* name : {"u", "r"}) c.parameters.at(name) = zeros_like(c.parameters.at(name));
  c.parameters.at("W_x.weight") = zeros_like(c.parameters.at("W_x.weight"));
  Tensor& bias = c.parameters.at("W_x.bias");
  std::vector<double> expected;
  for (std::int64_t j = 0; j < spec.d_h; ++j) {
    const double k = kTitansKeys[static_cast<std::size_t>(j)];
    bias.store({j}, 0.0);                                      // α_pre
    bias.store({spec.d_h + j}, kAboveSoftplusThreshold);       // θ_pre
    bias.store({2 * spec.d_h + j}, k);                         // k
    expected.push_back(std::log(std::abs((1.0 - kHalf) - kAboveSoftplusThreshold * k * k)));
  }
  const LyapunovEstimate e = estimate(c, {.window = 5});
  ASSERT_TRUE(e.finite) << e.reason;
  ASSERT_EQ(e.units.size(), static_cast<std::size_t>(spec.batch * spec.d_h));
  std::int64_t positive = 0;
  for (std::size_t i = 0; i < e.units.size(); ++i) {
    const double want = expected[i % static_cast<std::size_t>(spec.d_h)];
    EXPECT_EQ(e.units[i].exponent, want) << e.units[i].chain;
    EXPECT_EQ(e.units[i].stretch, 5 * want) << e.units[i].chain;
    positive += want > 0.0 ? 1 : 0;
  }
  EXPECT_GT(e.max_exponent, 0.0);
  EXPECT_EQ(e.max_exponent, *std::max_element(expected.begin(), expected.end()));
  EXPECT_EQ(e.fraction_positive, static_cast<double>(positive) / static_cast<double>(e.units.size()));
  EXPECT_LT(*std::min_element(expected.begin(), expected.end()), 0.0);  // one contracting channel
}

TEST(OracleLyapunov, StrongDenseRecurrenceExpandsAndWeakOneContracts) {
  // h' = h/2 + tanh(A_nᵀ h + n_x)/2 (z = 1/2, r ≈ 1): with gain 8 the random recurrence is
  // chaotic (λ̂ > 0); with gain 0.1 it contracts like the leak (λ̂ < 0).
  constexpr double kRBias = 8.0;  // r = σ(8 + W·x) ≈ 1
  const CaseSpec spec{.cell = "gru", .batch = 2, .time = 400, .d_h = 16, .seed = 45, .with_h0 = true};
  SCOPED_TRACE(describe(spec) + " mix=head");
  const LyapunovEstimate strong = estimate(gru_head_case(spec, 8.0, kRBias));
  ASSERT_TRUE(strong.finite) << strong.reason;
  EXPECT_GT(strong.max_exponent, 0.0);
  EXPECT_GT(strong.median_exponent, 0.0);
  const LyapunovEstimate weak = estimate(gru_head_case(spec, 0.1, kRBias));
  ASSERT_TRUE(weak.finite) << weak.reason;
  EXPECT_LT(weak.max_exponent, 0.0);
  EXPECT_EQ(weak.fraction_positive, 0.0);
}

TEST(OracleLyapunov, EachStepsJacobianIsTakenAtTheStateBeforeItH0AtEverySegmentHead) {
  // Packed segments [0, 2), [2, 3), [3, 5) with h0 rows 0, 1, 2: the growth of a segment's first
  // step is log|J| from its h0 row, of a later step from H[t - 1]. With W = 1 the stretch is the
  // largest single growth; λ̂ of two steps is their mean (exact: float128 sum, one rounding).
  const CaseSpec spec{.cell = "gru", .batch = 1, .time = 5, .d_h = 3, .seed = 53, .with_h0 = true,
                      .cu_seqlens = {0, 2, 3, 5}};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const LyapunovEstimate e = oracle_lyapunov(c, r, {.window = 1});
  ASSERT_TRUE(e.finite) << e.reason;
  ASSERT_EQ(e.units.size(), static_cast<std::size_t>(3 * spec.d_h));
  const auto h0_row = [&](std::int64_t s) {
    const Tensor row = Tensor::copy_of(c.h0->view().select(0, s));
    return row.to_f64_vector();
  };
  const auto h_at = [&](std::int64_t t) { return Tensor::copy_of(r.H.view().select(0, 0).select(0, t)).to_f64_vector(); };
  const auto growth = [&](std::int64_t t, const std::vector<double>& h_prev, std::int64_t j) {
    const OracleStep step = oracle_step_with_jacobian(c, 0, t, h_prev);
    return std::log(std::abs(step.jacobian[static_cast<std::size_t>(j * spec.d_h + j)]));
  };
  for (std::int64_t j = 0; j < spec.d_h; ++j) {
    const LyapunovUnit& first = e.units[static_cast<std::size_t>(j)];
    const double g0 = growth(0, h0_row(0), j), g1 = growth(1, h_at(0), j);
    EXPECT_EQ(first.chain, "segment=0,channel=" + std::to_string(j));
    EXPECT_EQ(first.exponent, (g0 + g1) / 2);
    EXPECT_EQ(first.stretch, std::max(g0, g1));
    const LyapunovUnit& second = e.units[static_cast<std::size_t>(spec.d_h + j)];
    EXPECT_EQ(second.exponent, growth(2, h0_row(1), j)) << second.chain;
    const LyapunovUnit& third = e.units[static_cast<std::size_t>(2 * spec.d_h + j)];
    const double g3 = growth(3, h0_row(2), j), g4 = growth(4, h_at(3), j);
    EXPECT_EQ(third.exponent, (g3 + g4) / 2) << third.chain;
    EXPECT_NE(g3, growth(3, h_at(2), j)) << "h0 and the previous segment's state give the same growth";
  }
}

class OracleLyapunovCellTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleLyapunovCellTest, ChannelBlocksAreExactlyTheDenseJacobiansBlocks) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    const CaseSpec spec{.cell = GetParam(), .batch = 2, .time = 6, .d_h = 5, .dtype = dtype, .seed = 46};
    SCOPED_TRACE(describe(spec));
    const Case c = make_case(spec);
    const detail::PreparedCase prepared = detail::prepare_case(c);
    Generator gen(spec.seed);
    const std::int64_t n = prepared.state_size(), slots = prepared.slots, d = prepared.d_h;
    for (std::int64_t t = 0; t < spec.time; t += 2) {
      const std::vector<double> h = random_state(gen, spec.cell, spec.d_h);
      const OracleStep dense = oracle_step_with_jacobian(c, 1, t, h);
      const std::vector<double> blocks = detail::channel_jacobian_blocks(prepared, 1, t, h);
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t k = 0; k < n; ++k) {
          const double entry = dense.jacobian[static_cast<std::size_t>(i * n + k)];
          if (i % d != k % d) {
            EXPECT_EQ(entry, 0.0) << "channels mix at [" << i << "][" << k << "] t=" << t;
          } else {
            EXPECT_EQ(entry, blocks[static_cast<std::size_t>(((i % d) * slots + i / d) * slots + k / d)])
                << "[" << i << "][" << k << "] t=" << t;
          }
        }
      }
    }
  }
}

TEST_P(OracleLyapunovCellTest, DistributionDoesNotDependOnBatchOrder) {
  const CaseSpec spec{.cell = GetParam(), .batch = 4, .time = 24, .d_h = 3, .seed = 47, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const std::vector<std::int64_t> order = {2, 0, 3, 1};
  Case permuted = c;  // a Case's tensors share storage: x and h0 are copied before writing
  permuted.x = Tensor::copy_of(c.x.view());
  permuted.h0 = Tensor::copy_of(c.h0->view());
  for (std::size_t b = 0; b < order.size(); ++b) {
    const auto to = static_cast<std::int64_t>(b);
    for (std::int64_t t = 0; t < spec.time; ++t)
      for (std::int64_t k = 0; k < spec.d_in; ++k) permuted.x.store({to, t, k}, c.x.load({order[b], t, k}));
    const Tensor row = c.h0->reshaped({spec.batch, c.h0->numel() / spec.batch});
    Tensor dst = permuted.h0->reshaped({spec.batch, c.h0->numel() / spec.batch});
    for (std::int64_t k = 0; k < row.size(1); ++k) dst.store({to, k}, row.load({order[b], k}));
  }
  const LyapunovEstimate a = estimate(c, {.window = 8});
  const LyapunovEstimate b = estimate(permuted, {.window = 8});
  ASSERT_TRUE(a.finite && b.finite) << a.reason << b.reason;
  EXPECT_EQ(sorted_exponents(a), sorted_exponents(b));
  EXPECT_EQ(a.max_exponent, b.max_exponent);
  EXPECT_EQ(a.median_exponent, b.median_exponent);
  EXPECT_EQ(a.fraction_positive, b.fraction_positive);
  EXPECT_EQ(a.max_stretch, b.max_stretch);
}

TEST_P(OracleLyapunovCellTest, DistributionDoesNotDependOnPacking) {
  const CaseSpec spec{.cell = GetParam(), .batch = 3, .time = 16, .d_h = 3, .seed = 48, .with_h0 = true};
  SCOPED_TRACE(describe(spec));
  const Case rows = make_case(spec);
  Case packed = rows;
  packed.x = rows.x.reshaped({1, spec.batch * spec.time, spec.d_in});
  const std::vector<double> offsets = {0, 16, 32, 48};
  packed.cu_seqlens = Tensor::from_values(DType::i64, {4}, offsets);
  const LyapunovEstimate a = estimate(rows, {.window = 8});
  const LyapunovEstimate b = estimate(packed, {.window = 8});
  ASSERT_TRUE(a.finite && b.finite) << a.reason << b.reason;
  EXPECT_EQ(b.chains, (std::vector<std::string>{"segment=0", "segment=1", "segment=2"}));
  EXPECT_EQ(sorted_exponents(a), sorted_exponents(b));
  EXPECT_EQ(a.max_stretch, b.max_stretch);
  EXPECT_EQ(a.median_exponent, b.median_exponent);
}

INSTANTIATE_TEST_SUITE_P(Cells, OracleLyapunovCellTest, ::testing::ValuesIn(kCells),
                         [](const auto& info) { return info.param; });

TEST(OracleLyapunov, ManyChainsAreSampledBySeed) {
  const CaseSpec spec{.cell = "nlru", .batch = 6, .time = 8, .d_h = 2, .seed = 49};
  SCOPED_TRACE(describe(spec));
  const Case c = make_case(spec);
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const LyapunovEstimate a = oracle_lyapunov(c, r, {.chains = 2, .seed = 5});
  const LyapunovEstimate again = oracle_lyapunov(c, r, {.chains = 2, .seed = 5});
  EXPECT_FALSE(a.all_chains);
  EXPECT_EQ(a.chains_total, spec.batch);
  EXPECT_EQ(a.chains_used, 2);
  EXPECT_EQ(a.chains.size(), 2U);
  EXPECT_EQ(a.chains, again.chains);
  EXPECT_EQ(a.units.size(), static_cast<std::size_t>(2 * spec.d_h));
  EXPECT_EQ(a.jacobian_steps, 2 * spec.time);
}

TEST(OracleLyapunov, NonFiniteTrajectoryGivesAReasonNotANumber) {
  const CaseSpec spec{.cell = "gru", .batch = 2, .time = 8, .d_h = 2, .seed = 50};
  Case c = make_case(spec);
  c.x.store({1, 3, 0}, std::nan(""));
  const LyapunovEstimate e = estimate(c);
  EXPECT_FALSE(e.finite);
  EXPECT_TRUE(e.units.empty());
  EXPECT_NE(e.reason.find("not finite"), std::string::npos) << e.reason;
  EXPECT_NE(e.reason.find("(1, 3, 0)"), std::string::npos) << e.reason;
}

TEST(OracleLyapunov, ZeroJacobianIsReportedNotMinusInfinity) {
  // z = σ(b_z) rounds to 1 in double for b_z = 40 (e^-40 < 2^-53): j = 1 - z = 0, log 0.
  constexpr double kSaturatingBias = 40.0;
  const CaseSpec spec{.cell = "gru", .batch = 1, .time = 4, .d_h = 2, .seed = 51};
  Case c = constant_gru(spec);
  c.parameters.at("W_x.bias").store({0}, kSaturatingBias);
  const LyapunovEstimate e = estimate(c);
  EXPECT_FALSE(e.finite);
  EXPECT_NE(e.reason.find("log 0"), std::string::npos) << e.reason;
  EXPECT_NE(e.reason.find("b=0,channel=0 t=0"), std::string::npos) << e.reason;
}

TEST(OracleLyapunovRefuses, BadOptionsAndAForeignTrajectoryByName) {
  const CaseSpec spec{.cell = "gru", .batch = 1, .time = 4, .d_h = 2, .seed = 52};
  const Case c = make_case(spec);
  const OracleResult r = oracle_sequential(c, {.certify = false});
  const auto message = [&](const LyapunovOptions& o, const OracleResult& t) -> std::string {
    try {
      (void)oracle_lyapunov(c, t, o);
    } catch (const ContractViolation& e) {
      return e.what();
    }
    return "not refused";
  };
  EXPECT_NE(message({.window = 0}, r).find("window"), std::string::npos);
  EXPECT_NE(message({.chains = 0}, r).find("chains"), std::string::npos);
  OracleResult wrong = r;
  wrong.H = Tensor(DType::f64, {1, 3, 2});
  EXPECT_NE(message({}, wrong).find("trajectory"), std::string::npos);
}

}  // namespace
}  // namespace pararnn::reference
