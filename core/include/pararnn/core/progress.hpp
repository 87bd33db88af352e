// Progress of long work (the oracle, verify, kstar, the nightly campaign) on stderr: steps done
// of the total, the rate and the ETA. The one progress mechanism of pararnn: commands make a
// Progress and update it; whether anything is shown is decided here, once.
//
// Guarantees: with Verbosity::normal (the default) progress is drawn only when stderr is a
// terminal (one line, redrawn in place, at most 10 times a second, finished with a newline);
// Verbosity::quiet never writes; Verbosity::verbose writes one plain line per update, terminal
// or not (for logs). stdout is never touched. Example:
//   Progress progress("kstar", /*total=*/times * seeds, "cases");
//   for (...) { ...; progress.advance("T=64 seed=2"); }
//   // terminal: "kstar: 3/12 cases (0.8/s, ETA 11 s)  T=64 seed=2"
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace pararnn {

enum class Verbosity { quiet, normal, verbose };
void set_verbosity(Verbosity verbosity);  // the CLI's --quiet / --verbose
Verbosity verbosity();

// Whether progress is written at all: verbose always, normal only to a terminal, quiet never.
bool progress_enabled(Verbosity verbosity, bool stderr_is_terminal);

// "label: done/total unit (rate/s, ETA t)  current"; without a total (0): "label: done unit (rate/s)".
std::string progress_line(std::string_view label, std::int64_t done, std::int64_t total, double elapsed_s,
                          std::string_view unit, std::string_view current = {});

class Progress {
 public:
  Progress(std::string label, std::int64_t total, std::string unit = "steps");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::int64_t done, std::string_view current = {});
  void advance(std::string_view current = {}) { update(done_ + 1, current); }
  void set_total(std::int64_t total) { total_ = total; }
  // Ends the line (terminal); later updates are ignored.
  void finish();

 private:
  std::string label_, unit_;
  std::int64_t total_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool enabled_ = false, terminal_ = false, drawn_ = false, finished_ = false;
};

}  // namespace pararnn
