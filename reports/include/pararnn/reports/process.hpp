// Running the external programs of the reports (gnuplot, tar) without a shell: argv is passed
// as it is (no quoting, no expansion), stdout is streamed into a caller's stream, stderr is
// kept for the error message. Internal to pararnn::reports.
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace pararnn::reports {

struct ProcessResult {
  int exit_code = -1;        // the program's exit status; 127 when it could not be started
  std::string stderr_text;   // what it printed on stderr (the first 64 KiB)
};

// Runs argv[0] (looked up in PATH) with the rest of argv, in `cwd` when not empty. stdout goes
// to `out` when given, else it is discarded. Never throws for the program's own failure; a
// failure to create pipes or to spawn throws pararnn::Error.
ProcessResult run_process(const std::vector<std::string>& argv, std::ostream* out = nullptr,
                          const std::filesystem::path& cwd = {});

// Whether `program` is an executable file in PATH.
bool program_in_path(const std::string& program);

// A fresh directory under `parent` (mkdtemp), removed with everything in it when the object
// dies (the scratch space of a plot or a bundle: nothing of it is left behind on failure).
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
