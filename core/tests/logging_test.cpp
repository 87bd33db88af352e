// The warning sink: records reach every live WarningCapture (nested ones included) and no
// capture after it is gone; emitting from many threads loses nothing.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "pararnn/core/logging.hpp"

namespace pararnn {
namespace {

TEST(WarningCapture, CollectsStructuredRecords) {
  WarningCapture capture;
  emit_warning("newton_residual_high", "residual above the gate", {{"max_residual", 0.5}});
  emit_info("not a warning");
  const auto records = capture.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].event, "newton_residual_high");
  EXPECT_EQ(records[0].message, "residual above the gate");
  EXPECT_EQ(records[0].fields["max_residual"], 0.5);
  EXPECT_TRUE(capture.contains("newton_residual_high"));
  EXPECT_FALSE(capture.contains("other"));
}

TEST(WarningCapture, NestedCapturesBothSeeInnerRecords) {
  WarningCapture outer;
  emit_warning("first", "before the inner capture");
  {
    WarningCapture inner;
    emit_warning("second", "inside");
    EXPECT_FALSE(inner.contains("first"));
    EXPECT_TRUE(inner.contains("second"));
  }
  emit_warning("third", "after the inner capture");
  EXPECT_EQ(outer.records().size(), 3u);
}

TEST(WarningCapture, ConcurrentEmittersLoseNothing) {
  WarningCapture capture;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 25; ++i) emit_warning("concurrent", "x", {{"thread", t}, {"i", i}});
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(capture.records().size(), 100u);
}

}  // namespace
}  // namespace pararnn
