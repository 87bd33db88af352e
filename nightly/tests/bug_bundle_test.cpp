// The minimiser's reductions are the same problem on fewer rows, channels or steps, a minimised
// case keeps its verdict, and a bundle over its size cap writes nothing.
#include <gtest/gtest.h>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/nightly/bug_bundle.hpp"
#include "test_support.hpp"

namespace pararnn::nightly {
namespace {

namespace testing = reports::testing;

Case make_case(const std::string& cell_name, DType dtype, std::int64_t batch, std::int64_t time, bool hard,
               std::uint64_t seed) {
  const Cell cell = Cell::initialise({.cell = cell_name, .d_in = 6, .d_h = 8,
                                      .max_recurrent_norm = hard ? std::nullopt : std::optional<double>(0.5),
                                      .weight_std = hard ? std::optional<double>(0.7) : std::nullopt},
                                     dtype, seed);
  return cell.make_case(generated_case_input(dtype, batch, time, 6, seed));
}

TEST(BugBundle, KeepChannelsIsTheSameProblemOnThoseChannels) {
  const Case full = make_case("lstm", DType::f64, 2, 40, false, 3);
  const Case part = keep_channels(full, 2, 5);
  const auto o_full = reference::oracle_sequential(full, {.certify = false});
  const auto o_part = reference::oracle_sequential(part, {.certify = false});
  ASSERT_EQ(o_part.H.shape(), (Shape{2, 40, 2, 3}));
  // Channels of a per-channel cell are independent chains: the oracle's own arithmetic on them is
  // unchanged, bit for bit.
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t t = 0; t < 40; ++t)
      for (std::int64_t s = 0; s < 2; ++s)
        for (std::int64_t c = 0; c < 3; ++c)
          ASSERT_EQ(o_part.H.load({b, t, s, c}), o_full.H.load({b, t, s, c + 2})) << b << " " << t << " " << s << " " << c;
  EXPECT_THROW((void)keep_channels(full, 3, 3), ContractViolation);
  const Cell hopfield = Cell::initialise({.cell = "hopfield", .mix = "dense", .d_in = 6, .d_h = 8}, DType::f32, 1);
  EXPECT_THROW((void)keep_channels(hopfield.make_case(generated_case_input(DType::f32, 1, 4, 6, 1)), 0, 1),
               ContractViolation);
}

TEST(BugBundle, KeepBatchRowsIsTheSameProblemOnThoseRows) {
  const Case full = make_case("gru", DType::f64, 3, 20, false, 4);
  const Case row = keep_batch_rows(full, 1, 2);
  const auto o_full = reference::oracle_sequential(full, {.certify = false});
  const auto o_row = reference::oracle_sequential(row, {.certify = false});
  for (std::int64_t t = 0; t < 20; ++t)
    for (std::int64_t c = 0; c < 8; ++c) ASSERT_EQ(o_row.H.load({0, t, c}), o_full.H.load({1, t, c}));
}

TEST(BugBundle, TimeWindowFromTheCarriedStateFollowsTheFullTrajectory) {
  const Case full = make_case("gru", DType::f32, 2, 64, true, 5);
  const auto o_full = reference::oracle_sequential(full, {.certify = false});
  const Tensor carried = Tensor::copy_of(o_full.H.view().select(1, 39));
  const Case window = time_window(full, 40, 64, carried);
  ASSERT_TRUE(window.h0.has_value());
  EXPECT_EQ(window.h0->dtype(), DType::f32);
  const auto o_window = reference::oracle_sequential(window, {.certify = false});
  const ComparisonResult c = compare(o_window.H, Tensor::copy_of(o_full.H.view().slice(1, 40, 64)),
                                     tolerance_for({.dtype = DType::f32}));
  EXPECT_TRUE(c.ok()) << c.describe();
  EXPECT_THROW((void)time_window(full, 10, 20, std::nullopt), ContractViolation);
}

TEST(BugBundle, MinimisedCaseKeepsTheDisagreeAndIsSmaller) {
  const QuietWarnings quiet;
  const Case problem = make_case("gru", DType::f32, 2, 128, true, 3);
  VerifyOptions options;
  options.config.max_iters = 1;  // a planted failure: one Newton step on hard weights
  options.seed = 1;
  const AgreementReport original = verify_case(problem, options);
  ASSERT_EQ(original.verdict, Verdict::disagree) << original.summary();
  const MinimisedCase m = minimise_case(problem, original, options);
  EXPECT_EQ(m.report.verdict, Verdict::disagree);
  EXPECT_EQ(verify_case(m.problem, options).verdict, Verdict::disagree) << "the minimised case replays its verdict";
  EXPECT_LT(m.problem.x.numel(), problem.x.numel());
  EXPECT_EQ(m.problem.x.size(0), 1);
  EXPECT_LT(m.problem.x.size(1), 128);
  EXPECT_FALSE(m.attempts.empty());
}

TEST(BugBundle, AnAgreeingCaseIsNotMinimised) {
  const Case problem = make_case("nlru", DType::f32, 2, 32, false, 2);
  const AgreementReport original = verify_case(problem, {});
  ASSERT_EQ(original.verdict, Verdict::agree);
  const MinimisedCase m = minimise_case(problem, original, {});
  EXPECT_EQ(m.problem.x.shape(), problem.x.shape());
  ASSERT_EQ(m.attempts.size(), 1u);
}

TEST(BugBundle, OverTheSizeCapNothingIsWritten) {
  const auto dir = testing::scratch("bundle_cap");
  write_case(dir / "case.safetensors", make_case("gru", DType::f32, 1, 16, false, 1));
  BundleOptions options{.case_path = dir / "case.safetensors", .plots = false, .out = dir / "b.tar.gz", .max_bytes = 1000};
  try {
    (void)make_bug_bundle(options);
    FAIL() << "a bundle over the cap was made";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "--max-bytes");
    EXPECT_NE(e.rule().find("largest"), std::string::npos) << e.what();
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename(), "case.safetensors") << "left behind: " << entry.path();
  options.out = dir / "b.zip";
  EXPECT_THROW((void)make_bug_bundle(options), ContractViolation);
}

}  // namespace
}  // namespace pararnn::nightly
