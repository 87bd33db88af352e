// Claims about compare() and the tolerance table: a value, not a bool; NaN never passes; the
// worst index is the planted one; overrides are scoped and carry their reason.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "pararnn/cells/registry.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/core/random.hpp"

namespace pararnn {
namespace {

Tensor ramp(DType dtype, Shape shape) {
  Tensor t(dtype, shape);
  Tensor flat = t.reshaped({t.numel()});
  for (std::int64_t i = 0; i < t.numel(); ++i) flat.store({i}, 0.25 * static_cast<double>(i % 13));
  return t;
}

TEST(Compare, IdenticalTensorsPassWithZeroDifference) {
  const Tensor a = ramp(DType::f32, {2, 3, 4});
  const ComparisonResult r = compare(a, a, tolerance_for({.dtype = DType::f32}));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.count, 24);
  EXPECT_EQ(r.max_abs, 0.0);
}

TEST(Compare, WorstIndexIsThePlantedOneAndMessageIsSelfSufficient) {
  const Tensor expected = ramp(DType::f64, {2, 5, 2, 3});
  Tensor actual = Tensor::converted(expected, DType::f32);
  const Tolerance tau = tolerance_for({.dtype = DType::f32});
  actual.store({1, 3, 1, 2}, actual.load({1, 3, 1, 2}) + 3 * tau.atol);
  actual.store({0, 1, 0, 0}, actual.load({0, 1, 0, 0}) + 2 * tau.atol);
  const ComparisonResult r = compare(actual, expected, tau);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mismatches, 2);
  EXPECT_EQ(r.worst_abs_index, (Shape{1, 3, 1, 2}));
  ASSERT_EQ(r.first_mismatches.size(), 2u);
  EXPECT_EQ(r.first_mismatches[0].index, (Shape{0, 1, 0, 0}));
  const std::string text = r.describe();
  for (const char* part : {"2 of 60", "(1, 3, 1, 2)", "0x", "f32", "(2, 5, 2, 3)"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " missing in\n" << text;
}

TEST(Compare, NanNeverPassesEvenWithInfiniteTolerance) {
  const Tensor expected = ramp(DType::f64, {4});
  Tensor actual = Tensor::copy_of(expected);
  actual.store({2}, std::nan(""));
  const ComparisonResult r = compare(actual, expected, {.atol = INFINITY, .rtol = 0, .source = "test"});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.nan_count, 1);
  EXPECT_EQ(r.worst_abs_index, (Shape{2}));
}

TEST(Compare, ShapeMismatchIsRefused) {
  EXPECT_THROW(compare(ramp(DType::f32, {2, 3}), ramp(DType::f32, {3, 2}), {}), ContractViolation);
}

// split_unrepresentable leaves out exactly the elements whose expected value rounds to ±inf in
// the actual's dtype and that the actual holds as that same infinity; every other element,
// including an infinity where the expected value is representable, the other infinity, a NaN, or
// a finite value where the expected overflows, stays in and is judged by compare().
TEST(Compare, OnlyMatchingInfinitiesBeyondTheDtypesRangeAreLeftOut) {
  const double inf = std::numeric_limits<double>::infinity();
  const double beyond = 2.0 * static_cast<double>(std::numeric_limits<Eigen::half>::max());  // rounds to inf
  const double representable = 0.5 * static_cast<double>(std::numeric_limits<Eigen::half>::max());
  //                        left out  left out  judged: the oracle is representable, wrong sign, NaN, finite, ordinary
  const std::vector<double> actual = {inf, -inf, inf, -inf, NAN, 100.0, 1.0};
  const std::vector<double> expected = {beyond, -beyond, representable, beyond, beyond, beyond, 1.0};
  const Tensor a = Tensor::from_values(DType::f16, {7}, actual);
  const Tensor e = Tensor::from_values(DType::f64, {7}, expected);
  const Unrepresentable u = split_unrepresentable(a, e);
  EXPECT_EQ(u.count, 2);
  EXPECT_EQ(u.largest, beyond);
  const Tolerance tau = tolerance_for({.dtype = DType::f16});
  const ComparisonResult c = compare(u.actual, u.expected, tau);
  EXPECT_EQ(c.mismatches, 4) << c.describe();  // the four judged elements that are wrong
  EXPECT_FALSE(c.ok());
  // Nothing to leave out in f64, nor where every expected value is representable.
  const auto one = [](DType dtype, double v) { return Tensor::from_values(dtype, {1}, std::vector<double>{v}); };
  EXPECT_EQ(split_unrepresentable(one(DType::f64, inf), one(DType::f64, beyond)).count, 0);
  EXPECT_EQ(split_unrepresentable(one(DType::f16, inf), one(DType::f64, representable)).count, 0);
  // With the dtype the answer claims: left out only when that dtype cannot hold the value either
  // (an f16 answer's infinity for an f32 or bf16 claim is judged; for an f16 claim it is left out).
  EXPECT_EQ(split_unrepresentable(one(DType::f16, inf), one(DType::f64, beyond), DType::f16).count, 1);
  EXPECT_EQ(split_unrepresentable(one(DType::f16, inf), one(DType::f64, beyond), DType::f32).count, 0);
  EXPECT_EQ(split_unrepresentable(one(DType::f16, inf), one(DType::f64, beyond), DType::bf16).count, 0);
  EXPECT_EQ(split_unrepresentable(one(DType::f16, inf), one(DType::f64, beyond), DType::f64).count, 0);
}

TEST(Compare, SameBitsIsDtypeShapeAndBytes) {
  const Tensor a = ramp(DType::f32, {2, 3});
  EXPECT_TRUE(same_bits(a, Tensor::copy_of(a.view())));
  EXPECT_FALSE(same_bits(a, ramp(DType::f32, {3, 2})));
  EXPECT_FALSE(same_bits(a, ramp(DType::f64, {2, 3})));
  Tensor b = Tensor::copy_of(a.view());
  b.store({1, 2}, std::nextafter(static_cast<float>(b.load({1, 2})), 10.0f));
  EXPECT_FALSE(same_bits(a, b));
}

// The band is anchored on the reference (the expected value), never on the judged one: every
// tolerance the contract table gives, at reference magnitudes from 1e-3 to 1e4 and both signs, an
// answer pushed away from zero just beyond atol + rtol·|expected| (by a fraction of the band below
// rtol, where a band anchored on |actual| would still cover it), or far beyond, is a mismatch, and
// one inside the band passes.
TEST(Compare, TheBandIsAnchoredOnTheExpectedValueForEveryTableTolerance) {
  std::vector<Tolerance> taus;
  // No cell (""), and every cell of the registry by its name (the table is keyed by name).
  std::vector<std::string> cells = {""};
  for (const CellSpec& spec : cell_specs())
    if (std::find(cells.begin(), cells.end(), spec.name) == cells.end()) cells.emplace_back(spec.name);
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16})
    for (const Metric metric : {Metric::trajectory, Metric::gradient_diag, Metric::gradient_coupled,
                                Metric::jacobian, Metric::decode, Metric::linear_scan})
      for (const std::string& cell : cells)
        for (const char* backend : {"cpu", "cuda"})
          for (const bool rms : {false, true}) {
            Tolerance tau;
            try {
              tau = tolerance_for({.dtype = dtype, .metric = metric, .cell = cell, .backend = backend});
            } catch (const ContractViolation&) {
              continue;  // the table has no such entry (e.g. linear_scan in f16)
            }
            tau.relative_to_rms = rms;
            taus.push_back(tau);
          }
  SplitMix64 rng(20261205);
  std::int64_t banded = 0;
  for (const Tolerance& tau : taus) {
    if (tau.rtol > 0) ++banded;
    std::vector<double> expected, outside, inside;
    for (int i = 0; i < 64; ++i) {
      const double magnitude = std::pow(10.0, -3.0 + 7.0 * rng.uniform());
      const double y = (rng.uniform() < 0.5 ? -1.0 : 1.0) * magnitude;
      expected.push_back(y);
    }
    // relative_to_rms widens the band to rtol·max(|y|, RMS): the edge below uses that scale.
    double rms = 0.0;
    for (const double y : expected) rms += y * y;
    rms = std::sqrt(rms / static_cast<double>(expected.size()));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double y = expected[i];
      const double band = tau.atol + tau.rtol * std::max(std::abs(y), tau.relative_to_rms ? rms : 0.0);
      const double away = y < 0 ? -1.0 : 1.0;  // away from zero: |actual| > |expected|
      const double beyond = i % 4 == 0 ? 1.0 + 1e-6 : i % 4 == 1 ? 1.0 + tau.rtol / 2 : i % 4 == 2 ? 2.0 : 1e3;
      // Where the band is near one ulp of y, rounding moves the answer: step it until its
      // difference (as compare computes it) is strictly beyond, or within, the band.
      double x = y + away * band * beyond;
      while (!(std::abs(x - y) > band)) x = std::nextafter(x, away * INFINITY);
      outside.push_back(x);
      x = y + away * band * (1.0 - 1e-6);
      while (std::abs(x - y) > band) x = std::nextafter(x, y);
      inside.push_back(x);
    }
    const Shape shape{static_cast<std::int64_t>(expected.size())};
    const Tensor e = Tensor::from_values(DType::f64, shape, expected);
    const ComparisonResult out = compare(Tensor::from_values(DType::f64, shape, outside), e, tau);
    EXPECT_EQ(out.mismatches, out.count) << "atol " << tau.atol << " rtol " << tau.rtol << " rms " << tau.relative_to_rms
                                         << ": an answer beyond the band around the expected value passed";
    const ComparisonResult in = compare(Tensor::from_values(DType::f64, shape, inside), e, tau);
    EXPECT_EQ(in.mismatches, 0) << "atol " << tau.atol << " rtol " << tau.rtol << " rms " << tau.relative_to_rms;
  }
  EXPECT_GT(banded, 0) << "the table has no tolerance with rtol > 0: the anchoring is untested";
}

TEST(Tolerance, DefaultsAreTheContractTable) {
  // The table is data: these are its documented rows (docs/numerics-contract.md).
  EXPECT_EQ(tolerance_for({.dtype = DType::f32}).source, "default");
  EXPECT_LT(tolerance_for({.dtype = DType::f64}).atol, tolerance_for({.dtype = DType::f32}).atol);
  EXPECT_LT(tolerance_for({.dtype = DType::f32}).atol, tolerance_for({.dtype = DType::bf16}).atol);
  EXPECT_EQ(tolerance_for({.dtype = DType::f16}).atol, tolerance_for({.dtype = DType::bf16}).atol);
}

TEST(Tolerance, OverridesAreScopedAndCarryTheirReason) {
  const Tolerance before = tolerance_for({.dtype = DType::f32, .cell = "lstm"});
  {
    ScopedToleranceOverride wide({.cell = "lstm", .metric = Metric::trajectory},
                                 {.atol = 10 * before.atol, .rtol = 0}, "reasoned band");
    EXPECT_EQ(tolerance_for({.dtype = DType::f32, .cell = "lstm"}).source, "reasoned band");
    EXPECT_EQ(tolerance_for({.dtype = DType::f32, .cell = "gru"}).source, "default");
  }
  EXPECT_EQ(tolerance_for({.dtype = DType::f32, .cell = "lstm"}).atol, before.atol);
}

}  // namespace
}  // namespace pararnn
