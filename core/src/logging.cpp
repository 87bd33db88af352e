#include "pararnn/core/logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <atomic>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace pararnn {

namespace {

// The logger "pararnn": created once (or taken over if a tool registered it first), coloured
// stderr, level from PARARNN_LOG_LEVEL (trace, debug, info, warn, error, critical, off),
// default warn.
std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    if (auto existing = spdlog::get("pararnn")) return existing;
    std::shared_ptr<spdlog::logger> created;
    try {
      created = spdlog::stderr_color_mt("pararnn");
    } catch (const spdlog::spdlog_ex&) {  // registered concurrently by someone else
      created = spdlog::get("pararnn");
    }
    auto level = spdlog::level::warn;
    if (const char* env = std::getenv("PARARNN_LOG_LEVEL"); env != nullptr && *env != '\0') {
      const std::string name(env);
      const auto parsed = spdlog::level::from_str(name);
      // from_str answers "off" for unknown names; only honour "off" when asked for.
      if (parsed != spdlog::level::off || name == "off") level = parsed;
    }
    created->set_level(level);
    return created;
  }();
  return instance;
}

// Live captures. Records go to every capture alive when they are emitted.
std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<WarningCapture*>& registry() {
  static std::vector<WarningCapture*> captures;
  return captures;
}

}  // namespace

struct WarningCapture::State {
  mutable std::mutex mutex;
  std::vector<WarningRecord> records;
};

WarningCapture::WarningCapture() : state_(new State) {
  const std::lock_guard lock(registry_mutex());
  registry().push_back(this);
}

WarningCapture::~WarningCapture() {
  {
    const std::lock_guard lock(registry_mutex());
    auto& captures = registry();
    captures.erase(std::remove(captures.begin(), captures.end(), this), captures.end());
  }
  delete state_;
}

std::vector<WarningRecord> WarningCapture::records() const {
  const std::lock_guard lock(state_->mutex);
  return state_->records;
}

bool WarningCapture::contains(const std::string& event) const {
  const std::lock_guard lock(state_->mutex);
  return std::any_of(state_->records.begin(), state_->records.end(),
                     [&](const WarningRecord& record) { return record.event == event; });
}

void WarningCapture::add(WarningRecord record) {
  const std::lock_guard lock(state_->mutex);
  state_->records.push_back(std::move(record));
}

static std::atomic<int>& quiet_depth() {
  static std::atomic<int> depth{0};
  return depth;
}

QuietWarnings::QuietWarnings() { ++quiet_depth(); }
QuietWarnings::~QuietWarnings() { --quiet_depth(); }

void emit_warning(const std::string& event, const std::string& message, nlohmann::json fields) {
  if (quiet_depth().load() == 0) {
    const std::string fields_text =
        fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    logger()->warn("[{}] {} {}", event, message, fields_text);
  }
  const std::lock_guard lock(registry_mutex());
  for (WarningCapture* capture : registry()) {
    capture->add(WarningRecord{event, fields, message});
  }
}

void emit_info(const std::string& message) { logger()->info("{}", message); }

}  // namespace pararnn
