// The one warning sink of pararnn. Warnings are structured records (an event name and JSON
// fields, e.g. "newton_residual_high" {max_residual, iters, ...}) written through spdlog;
// tests and tools can capture them. Example:
//   WarningCapture capture;
//   newton_apply(...);
//   EXPECT_TRUE(capture.contains("newton_residual_high"));
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pararnn {

struct WarningRecord {
  std::string event;
  nlohmann::json fields;
  std::string message;
};

// Emits a warning record: to every live WarningCapture and to the spdlog logger "pararnn".
void emit_warning(const std::string& event, const std::string& message,
                  nlohmann::json fields = nlohmann::json::object());
// Informational lines (progress, timings) go to the same logger at info level.
void emit_info(const std::string& message);

// While one lives, warnings are not written to the log (captures still receive them): for
// measurements that provoke warnings on purpose, e.g. K*(T) runs at too-small K.
class QuietWarnings {
 public:
  QuietWarnings();
  ~QuietWarnings();
  QuietWarnings(const QuietWarnings&) = delete;
  QuietWarnings& operator=(const QuietWarnings&) = delete;
};

// Collects the records emitted while it lives (thread-safe; nests).
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  std::vector<WarningRecord> records() const;
  bool contains(const std::string& event) const;

 private:
  friend void emit_warning(const std::string&, const std::string&, nlohmann::json);
  void add(WarningRecord record);
  struct State;
  State* state_;
};

}  // namespace pararnn
