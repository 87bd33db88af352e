// An external solver in the campaign (docs/external-solvers.md): a command line run once per
// row on a case file the harness writes, whose answer file is read back as untrusted input and
// judged by the oracle (compare_trajectory), never by the solver's own word.
//
// Protocol: the harness writes the case to a fresh folder, substitutes `{case}` and `{out}` in
// the command's words, sets PARARNN_GRADIENTS=1 when the row judges gradients (and removes it
// otherwise), and runs the command without a shell, with stdin /dev/null, in its own process
// group, under a per-row timeout (the whole group is killed past it). The solver writes {out} as
// `pararnn solve [--grad]` does: `H`, and `grad.x`, `grad.h0`, `grad.<state_dict name>`.
//
// Guarantees:
// - Exit 0 is an answer; any other exit, a signal, a timeout, or an answer that cannot be read
//   or is refused (a missing H, an unexpected, mis-shaped or wrongly typed tensor) is an Error
//   row naming the problem, with the solver's stderr tail; never a pass.
// - The harness's files (the case, the answer) live in a scratch folder removed in every case;
//   a failing row keeps copies under cases/ and a bundle under bundles/.
// Example:
//   const ExternalSolver s = make_external_solver({.command = "mysolver {case} {out}", .name = "mine"});
//   const SolverRun run = run_external_solver(s, "case.safetensors", "out.safetensors", false);
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/core/tensor.hpp"

namespace pararnn::nightly {

struct ExternalSolverOptions {
  std::string command;          // --solver: the command line, with {case} and {out}
  std::string name;             // --solver-name (default: the command's first word's file name)
  std::string version_command;  // --solver-version-cmd: the first line of its stdout is the version
  double timeout_s = 600.0;     // --solver-timeout: per solver run
};

struct ExternalSolver {
  std::string command;
  std::vector<std::string> words;  // the command split as a POSIX shell would, before substitution
  std::string name;
  std::optional<std::string> version;
  std::string version_command;
  double timeout_s = 600.0;
};

// Splits a command line into words: blanks separate words; '…' is literal; "…" is literal but
// for \" \\ \$ \`; a backslash outside quotes escapes the next character. No expansion, no
// pipes or redirections (those characters are ordinary). Unclosed quotes or an empty command:
// ContractViolation naming `argument`.
std::vector<std::string> split_command(const std::string& command, const std::string& argument);

// A word list as one line a shell reads back to the same words (quoted where needed).
std::string shell_line(const std::vector<std::string>& words);

// Checks the options (the command splits, holds {case} and {out}, the name is printable and
// the timeout > 0) and runs the version command once; refusals name the flag, the rule and the
// value (a version command that fails: its exit status and stderr).
ExternalSolver make_external_solver(const ExternalSolverOptions& options);

// The line a person types to run the solver on `case_path` writing `out_path` (with
// PARARNN_GRADIENTS=1 in front when `gradients`): the README's and the report's command.
std::string external_command_line(const ExternalSolver& solver, const std::string& case_path,
                                  const std::string& out_path, bool gradients);

struct SolverRun {
  std::vector<std::string> argv;  // the words after substitution, as run
  int exit_code = -1;             // 128 + signal when killed; 127 when it could not start
  bool timed_out = false;
  double wall_s = 0.0;
  std::string stderr_tail;        // the last 4000 characters of its stderr
  bool answered() const { return exit_code == 0 && !timed_out; }
  // Why it is not an answer ("" when it is).
  std::string failure() const;
};

SolverRun run_external_solver(const ExternalSolver& solver, const std::filesystem::path& case_path,
                              const std::filesystem::path& out_path, bool gradients);

// An answer file read back: H (any floating dtype; compare judges its shape and values) and,
// when gradients were asked for, every other tensor (gradients under their file names, checked
// by compare_trajectory). Without gradients, a tensor other than H is refused by name. A missing
// or unreadable file, or a missing H: CaseFileError naming the file.
struct ExternalAnswer {
  Tensor H;
  std::map<std::string, Tensor> gradients;
};
ExternalAnswer read_external_answer(const std::filesystem::path& path, bool gradients);

}  // namespace pararnn::nightly
