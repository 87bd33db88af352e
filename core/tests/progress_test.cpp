// The one progress mechanism: when it writes, and what a line says.
#include <gtest/gtest.h>

#include "pararnn/core/progress.hpp"

namespace pararnn {

TEST(Progress, NormalVerbosityWritesOnlyToATerminal) {
  EXPECT_TRUE(progress_enabled(Verbosity::normal, true));
  EXPECT_FALSE(progress_enabled(Verbosity::normal, false));
  EXPECT_FALSE(progress_enabled(Verbosity::quiet, true));
  EXPECT_TRUE(progress_enabled(Verbosity::verbose, false));
}

TEST(Progress, LineShowsDoneTotalRateAndEta) {
  EXPECT_EQ(progress_line("kstar", 3, 12, 6.0, "cases", "T=64 seed=2"),
            "kstar: 3/12 cases (0.5/s, ETA 18 s)  T=64 seed=2");
  EXPECT_EQ(progress_line("nightly", 0, 40, 0.0, "tasks"), "nightly: 0/40 tasks (0/s, ETA ?)");
  EXPECT_EQ(progress_line("oracle", 5, 0, 2.0, "rows"), "oracle: 5 rows (2.5/s)");
  EXPECT_EQ(progress_line("nightly", 10, 610, 10.0, "tasks"), "nightly: 10/610 tasks (1/s, ETA 10 min 00 s)");
}

TEST(Progress, QuietProgressWritesNothing) {
  set_verbosity(Verbosity::quiet);
  testing::internal::CaptureStderr();
  {
    Progress progress("verify", 3, "phases");
    progress.advance("newton");
    progress.advance("oracle");
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  set_verbosity(Verbosity::verbose);
  testing::internal::CaptureStderr();
  {
    Progress progress("verify", 2, "phases");
    progress.advance("newton");
  }
  EXPECT_NE(testing::internal::GetCapturedStderr().find("verify: 1/2 phases"), std::string::npos);
  set_verbosity(Verbosity::normal);
}

}  // namespace pararnn
