// Running external programs (gnuplot, tar, an external solver of the campaign) without a shell:
// argv is passed as it is (no quoting, no expansion), stdin is /dev/null, stdout is streamed into
// a caller's stream (or discarded), stderr is kept for the error message; optionally under a
// timeout (the program's whole process group is killed past it) and with variables set or
// removed in its environment.
// Example:
//   ProcessResult r = run_process({"tar", "--list", "--file", "a.tar"}, &listing);
//   ProcessResult s = run_process(argv, nullptr, {.timeout_s = 60, .set_env = {{"PARARNN_GRADIENTS", "1"}}});
#pragma once

#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace pararnn::reports {

struct ProcessOptions {
  std::filesystem::path cwd;                                  // empty: the caller's
  std::optional<double> timeout_s;                            // past it: SIGKILL to its process group
  std::vector<std::pair<std::string, std::string>> set_env;   // set (replacing an inherited value)
  std::vector<std::string> unset_env;                         // removed from the inherited environment
  bool keep_stderr_tail = false;                              // the last 64 KiB of stderr, not the first
};

struct ProcessResult {
  int exit_code = -1;        // the program's exit status; 128 + signal when killed; 127 when it could not be started
  std::string stderr_text;   // what it printed on stderr (64 KiB of it: the first, or the last)
  bool timed_out = false;    // killed at the timeout
  double wall_s = 0.0;
};

// Runs argv[0] (looked up in PATH) with the rest of argv. stdout goes to `out` when given, else
// it is discarded. The program runs in its own process group. Never throws for the program's own
// failure; a failure to create pipes or to spawn throws pararnn::Error.
ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out, const ProcessOptions& options);
ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out = nullptr,
                          const std::filesystem::path& cwd = {});

// Whether `program` is an executable file in PATH.
bool program_in_path(const std::string& program);

// A fresh directory under `parent` (mkdtemp), removed with everything in it when the object
// dies (the scratch space of a plot, a bundle or a solver run: nothing of it is left behind on failure).
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::filesystem::path& parent, const std::string& prefix);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace pararnn::reports
