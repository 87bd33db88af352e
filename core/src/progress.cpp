#include "pararnn/core/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>

namespace pararnn {
namespace {

std::atomic<Verbosity> current_verbosity{Verbosity::normal};

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return fmt::format("{:.0f} s", seconds);
  if (seconds < 3600) return fmt::format("{:.0f} min {:02.0f} s", std::floor(seconds / 60), std::fmod(seconds, 60));
  return fmt::format("{:.0f} h {:02.0f} min", std::floor(seconds / 3600), std::fmod(seconds, 3600) / 60);
}

}  // namespace

void set_verbosity(Verbosity verbosity) { current_verbosity = verbosity; }
Verbosity verbosity() { return current_verbosity; }

bool progress_enabled(Verbosity verbosity, bool stderr_is_terminal) {
  return verbosity == Verbosity::verbose || (verbosity == Verbosity::normal && stderr_is_terminal);
}

std::string progress_line(std::string_view label, std::int64_t done, std::int64_t total, double elapsed_s,
                          std::string_view unit, std::string_view current) {
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  std::string line;
  if (total > 0) {
    const std::string eta = done > 0 && rate > 0 ? duration(static_cast<double>(total - done) / rate) : "?";
    line = fmt::format("{}: {}/{} {} ({:.3g}/s, ETA {})", label, done, total, unit, rate, eta);
  } else {
    line = fmt::format("{}: {} {} ({:.3g}/s)", label, done, unit, rate);
  }
  if (!current.empty()) line += fmt::format("  {}", current);
  return line;
}

Progress::Progress(std::string label, std::int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), start_(std::chrono::steady_clock::now()),
      last_draw_(start_), terminal_(isatty(fileno(stderr)) != 0) {
  enabled_ = progress_enabled(verbosity(), terminal_);
  if (enabled_) update(0);
}

Progress::~Progress() { finish(); }

void Progress::update(std::int64_t done, std::string_view current) {
  if (finished_) return;
  done_ = done;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = total_ > 0 && done_ >= total_;
  if (terminal_ && drawn_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::string line = progress_line(label_, done_, total_, elapsed, unit_, current);
  if (terminal_ && verbosity() != Verbosity::verbose)
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && drawn_ && terminal_ && verbosity() != Verbosity::verbose) {
    std::fputc('\n', stderr);
    std::fflush(stderr);
  }
}

}  // namespace pararnn
