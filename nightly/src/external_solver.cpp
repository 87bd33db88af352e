#include "pararnn/nightly/external_solver.hpp"

#include <fmt/format.h>

#include <sstream>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reports/process.hpp"

namespace pararnn::nightly {
namespace {

constexpr std::size_t kStderrTail = 4000;
constexpr const char* kGradientsVariable = "PARARNN_GRADIENTS";

std::string tail_of(const std::string& text, std::size_t n) {
  return text.size() <= n ? text : "…" + text.substr(text.size() - n);
}

bool contains_placeholder(const std::vector<std::string>& words, const std::string& placeholder) {
  for (const auto& w : words)
    if (w.find(placeholder) != std::string::npos) return true;
  return false;
}

std::string substituted(std::string word, const std::string& case_path, const std::string& out_path) {
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"{case}", case_path}, {"{out}", out_path}}) {
    for (std::size_t at = word.find(key); at != std::string::npos; at = word.find(key, at + value.size()))
      word.replace(at, key.size(), value);
  }
  return word;
}

std::string default_name(const std::vector<std::string>& words) {
  // "python -m pkg.mod ..." is named by its module, anything else by its program's file name.
  if (words.size() >= 3 && std::filesystem::path(words[0]).filename().string().starts_with("python") && words[1] == "-m")
    return words[2];
  return std::filesystem::path(words[0]).filename().string();
}

std::optional<std::string> run_version_command(const std::string& command) {
  if (command.empty()) return std::nullopt;
  const std::vector<std::string> words = split_command(command, "--solver-version-cmd");
  std::ostringstream out;
  const reports::ProcessResult r = reports::run_process(words, &out, {.timeout_s = 60.0, .keep_stderr_tail = true});
  std::string line = out.str().substr(0, out.str().find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (r.exit_code != 0 || r.timed_out || line.empty())
    throw ContractViolation("--solver-version-cmd", "must exit 0 within 60 s and print the version on its first line",
                            fmt::format("{} (exit {}{}; stderr: {})", command, r.exit_code,
                                        r.timed_out ? ", timed out" : "", tail_of(r.stderr_text, 400)));
  return line;
}

}  // namespace

std::vector<std::string> split_command(const std::string& command, const std::string& argument) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      const std::size_t close = command.find('\'', i + 1);
      if (close == std::string::npos) throw ContractViolation(argument, "quotes must close (a ' is open)", command);
      word += command.substr(i + 1, close - i - 1);
      i = close;
      in_word = true;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < command.size() && command[j] != '"'; ++j) {
        if (command[j] == '\\' && j + 1 < command.size() && std::string_view("\"\\$`").find(command[j + 1]) != std::string_view::npos)
          ++j;
        word += command[j];
      }
      if (j >= command.size()) throw ContractViolation(argument, "quotes must close (a \" is open)", command);
      i = j;
      in_word = true;
    } else if (c == '\\') {
      if (i + 1 >= command.size()) throw ContractViolation(argument, "must not end with a lone backslash", command);
      word += command[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) throw ContractViolation(argument, "needs a command", "(empty)");
  return words;
}

std::string shell_line(const std::vector<std::string>& words) {
  std::string line;
  for (const auto& w : words) {
    const bool plain = !w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                         "_-./=:,+@%{}") == std::string::npos;
    std::string quoted = plain ? w : "'";
    if (!plain) {
      for (const char c : w) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
    }
    line += (line.empty() ? "" : " ") + quoted;
  }
  return line;
}

ExternalSolver make_external_solver(const ExternalSolverOptions& options) {
  ExternalSolver s;
  s.command = options.command;
  s.words = split_command(options.command, "--solver");
  for (const char* placeholder : {"{case}", "{out}"})
    if (!contains_placeholder(s.words, placeholder))
      throw ContractViolation("--solver", fmt::format("must contain {} (the harness substitutes the case file and the "
                                                      "answer file; docs/external-solvers.md)", placeholder),
                              options.command);
  if (!(options.timeout_s > 0.0))
    throw ContractViolation("--solver-timeout", "must be > 0 seconds", fmt::format("{}", options.timeout_s));
  s.timeout_s = options.timeout_s;
  s.name = options.name.empty() ? default_name(s.words) : options.name;
  for (const char c : s.name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw ContractViolation("--solver-name", "must be printable (no control characters)", s.name);
  s.version_command = options.version_command;
  s.version = run_version_command(options.version_command);
  return s;
}

std::string external_command_line(const ExternalSolver& solver, const std::string& case_path,
                                  const std::string& out_path, bool gradients) {
  std::vector<std::string> argv;
  for (const auto& w : solver.words) argv.push_back(substituted(w, case_path, out_path));
  return (gradients ? std::string(kGradientsVariable) + "=1 " : std::string()) + shell_line(argv);
}

std::string SolverRun::failure() const {
  if (timed_out) return fmt::format("the solver did not finish within its timeout ({:.1f} s, killed)", wall_s);
  if (exit_code == 127) return "the solver could not be started (exit 127)";
  if (exit_code > 128) return fmt::format("the solver was killed by signal {} (exit {})", exit_code - 128, exit_code);
  if (exit_code != 0) return fmt::format("the solver exited with status {} (only 0 is an answer)", exit_code);
  return "";
}

SolverRun run_external_solver(const ExternalSolver& solver, const std::filesystem::path& case_path,
                              const std::filesystem::path& out_path, bool gradients) {
  SolverRun run;
  for (const auto& w : solver.words) run.argv.push_back(substituted(w, case_path.string(), out_path.string()));
  reports::ProcessOptions po{.timeout_s = solver.timeout_s, .keep_stderr_tail = true};
  if (gradients)
    po.set_env.emplace_back(kGradientsVariable, "1");
  else
    po.unset_env.emplace_back(kGradientsVariable);
  const reports::ProcessResult r = reports::run_process(run.argv, nullptr, po);
  run.exit_code = r.exit_code;
  run.timed_out = r.timed_out;
  run.wall_s = r.wall_s;
  run.stderr_tail = tail_of(r.stderr_text, kStderrTail);
  return run;
}

ExternalAnswer read_external_answer(const std::filesystem::path& path, bool gradients) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw CaseFileError(fmt::format("{}: the solver exited 0 but wrote no answer file there", path.string()));
  SafetensorsFile file = read_safetensors(path);
  ExternalAnswer answer;
  bool has_h = false;
  for (auto& [name, tensor] : file.tensors) {
    if (name == "H") {
      answer.H = std::move(tensor);
      has_h = true;
    } else if (!gradients) {
      throw ContractViolation(fmt::format("{}: tensor '{}'", path.string(), name),
                              "is not H: a row that does not judge gradients (PARARNN_GRADIENTS unset) reads H only",
                              "an unexpected tensor");
    } else {
      answer.gradients.emplace(name, std::move(tensor));
    }
  }
  if (!has_h)
    throw CaseFileError(fmt::format("{}: tensor 'H': missing (an answer file holds H, as `pararnn solve` writes it)",
                                    path.string()));
  return answer;
}

}  // namespace pararnn::nightly
