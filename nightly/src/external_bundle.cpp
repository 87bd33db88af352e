#include "external_bundle.hpp"

#include <fmt/format.h>

#include "bundle_archive.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/reports/process.hpp"
#include "pararnn/reports/render.hpp"

namespace pararnn::nightly::detail {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::int64_t kMaxBundleBytes = 64 * 1024 * 1024;

int exit_code_of(const std::optional<AgreementReport>& report) {
  if (!report) return 2;
  return report->verdict == Verdict::agree ? 0 : (report->verdict == Verdict::disagree ? 1 : 2);
}

std::string solver_title(const ExternalSolver& s) {
  return s.version ? fmt::format("{} ({})", s.name, *s.version) : s.name;
}

std::string figures(const AgreementReport& r, const Json& row) {
  std::string text = fmt::format(
      "max |theirs − oracle| = {} at {} (τ: atol {}, rtol {}); {} of {} elements outside τ; the same-dtype "
      "sequential loop's own error (the floor any implementation pays) is {}.",
      reports::sci(r.max_abs), row["agreement"]["worst_index"].dump(), reports::sci(r.atol), reports::sci(r.rtol),
      r.mismatches, r.count, reports::sci(r.sequential_max_abs));
  if (!r.inconclusive_reason.empty()) text += " Inconclusive: " + r.inconclusive_reason + ".";
  return text;
}

std::string readme(const ExternalBundleInputs& in, const std::optional<AgreementReport>& report, bool has_answer,
                   const std::vector<std::pair<std::string, std::string>>& files) {
  const std::string outcome = in.row["outcome"].get<std::string>();
  std::string text = fmt::format("# {}: {} on {}\n\n", solver_title(in.solver), outcome, in.id);
  text += fmt::format("The pararnn nightly ran the solver **{}** on the case `case.safetensors` (cell {}, mix {}, dtype {}, "
                      "x {}, class {}) and judged its answer against pararnn's independent high-precision oracle "
                      "(a sequential unroll in higher precision, certified).\n\n",
                      solver_title(in.solver), in.row["cell"].get<std::string>(), in.row["mix"].get<std::string>(),
                      in.row["dtype"].get<std::string>(),
                      fmt::format("({}, {}, {})", in.row["batch"].get<std::int64_t>(), in.row["T"].get<std::int64_t>(),
                                  in.row["d_in"].get<std::int64_t>()),
                      in.row["class"].get<std::string>());
  if (report)
    text += fmt::format("**Verdict: {}.** {}\n\n", outcome, figures(*report, in.row));
  else
    text += fmt::format("**No verdict: Error ({}).** {}\n\n", in.row.value("error_type", std::string("error")),
                        in.row.value("error", std::string()));
  text += "## Reproduce\n\nUnpack, then from the bundle folder run your solver on the case as the nightly did, and the "
          "judge on its answer (pararnn's `compare`; exit 0 Agree, 1 Disagree, 2 Inconclusive or refused):\n\n";
  text += fmt::format("```bash\ntar -xzf {0}.tar.gz && cd {0}\n", in.id);
  text += external_command_line(in.solver, "case.safetensors", "answer.safetensors", in.gradients) +
          fmt::format("   # the nightly saw exit {}{}\n", in.run.exit_code, in.run.timed_out ? " (killed at its timeout)" : "");
  if (has_answer)
    text += fmt::format("pararnn compare case.safetensors --trajectory answer.safetensors --seed {} --certify-budget {}{}"
                        "   # expect exit {}\n",
                        in.seed, in.certify_budget, in.gradients ? " --gradients answer.safetensors" : "",
                        exit_code_of(report));
  text += "```\n\n";
  text += fmt::format("The solver was run without a shell, with stdin /dev/null, under a timeout of {} s, with "
                      "PARARNN_GRADIENTS {}; it must write `H` (and `grad.*` when asked) to the answer file as "
                      "`pararnn solve [--grad]` does (docs/external-solvers.md of pararnn).\n\n",
                      in.solver.timeout_s, in.gradients ? "=1" : "unset");
  text += "## Files\n\n| file | what |\n|---|---|\n";
  for (const auto& [name, what] : files) text += fmt::format("| `{}` | {} |\n", name, what);
  text += "| `README.md` | this file |\n";
  return text;
}

}  // namespace

void make_external_bundle(const ExternalBundleInputs& in, const std::optional<AgreementReport>& report,
                          const std::filesystem::path& out) {
  const reports::ScratchDirectory scratch(out.parent_path(), ".bundle-");
  const std::filesystem::path dir = scratch.path() / in.id;
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, std::string>> files;
  const auto write_text = [&](const std::string& name, const std::string& text, const std::string& what) {
    write_file_atomically(dir / name, [&](std::ostream& o) { o << text; });
    files.emplace_back(name, what);
  };
  std::filesystem::copy_file(in.case_path, dir / "case.safetensors");
  files.emplace_back("case.safetensors", "the case the solver was given");
  std::error_code ec;
  const bool has_answer = std::filesystem::is_regular_file(std::filesystem::symlink_status(in.answer_path, ec));
  if (has_answer) {
    std::filesystem::copy_file(in.answer_path, dir / "answer.safetensors");
    files.emplace_back("answer.safetensors", "what the solver wrote to {out}");
  }
  if (report) {
    write_text("compare.json", report->to_json().dump(2) + "\n", "the judge's report (AgreementReport JSON)");
    write_text("compare.md", reports::render_agreement_markdown(report->to_json(), "pararnn compare: " + in.id),
               "the judge's report, Markdown");
  } else {
    write_text("error.txt", in.row.value("error_type", std::string("Error")) + ": " + in.row.value("error", std::string()) + "\n",
               "why there is no verdict");
  }
  write_text("command.txt",
             fmt::format("solver: {}\ncommand template: {}\nrun as: {}\ntimeout_s: {}\nexit_code: {}\ntimed_out: {}\n"
                         "wall_s: {:.3f}\n",
                         solver_title(in.solver), in.solver.command,
                         external_command_line(in.solver, "case.safetensors", "answer.safetensors", in.gradients),
                         in.solver.timeout_s, in.run.exit_code, in.run.timed_out, in.run.wall_s),
             "the exact command line, its exit status and time");
  write_text("stderr.txt", in.run.stderr_tail, "the solver's stderr (its last 4000 characters)");
  write_text("env.txt", in.env_line + "\n", "`pararnn env` of the machine that ran the nightly");
  if (in.row.contains("error_along_t"))
    write_text("error_along_t.json", in.row["error_along_t"].dump(2) + "\n", "\\|theirs − oracle\\| along t (binned)");
  write_text("README.md", readme(in, report, has_answer, files), "this file");
  (void)archive_bundle(scratch.path(), in.id, out, kMaxBundleBytes);
}

}  // namespace pararnn::nightly::detail
