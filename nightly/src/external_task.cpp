// The rows of an external solver (docs/external-solvers.md): the case written to a scratch
// folder, the command run on it, its answer read back as untrusted input and judged by
// compare_trajectory; a failing row keeps the case, the answer and a bundle. And packed =
// per sequence for an external solver: the packed case and each segment alone, all by the command.
#include <fmt/format.h>

#include "cases.hpp"
#include "external_bundle.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/nightly/error_profile.hpp"
#include "pararnn/reports/process.hpp"
#include "tasks.hpp"

namespace pararnn::nightly::detail {
namespace {

using Json = nlohmann::ordered_json;

// One run of the command on `problem`: its answer, or why there is none (the message ends with
// the solver's stderr tail).
struct Solved {
  SolverRun run;
  std::optional<ExternalAnswer> answer;
  std::string error, error_type;
};

Solved solve_externally(const ExternalSolver& solver, const Case& problem, const std::filesystem::path& dir,
                        bool gradients) {
  Solved s;
  const std::filesystem::path case_path = dir / "case.safetensors", out_path = dir / "answer.safetensors";
  write_case(case_path, problem);
  s.run = run_external_solver(solver, case_path, out_path, gradients);
  const std::string stderr_note =
      s.run.stderr_tail.empty() ? " (no stderr)" : "; stderr tail:\n" + s.run.stderr_tail;
  if (!s.run.answered()) {
    s.error_type = s.run.timed_out ? "SolverTimeout" : "SolverFailed";
    s.error = s.run.failure() + stderr_note;
    return s;
  }
  try {
    s.answer = read_external_answer(out_path, gradients);
  } catch (const std::exception& e) {
    s.error_type = "AnswerRefused";
    s.error = fmt::format("the solver exited 0 but its answer is refused: {}{}", e.what(), stderr_note);
  }
  return s;
}

// What the row says about the command's run (its argv with the scratch paths named as the
// bundle names the files, so that the line is the same from run to run).
Json run_json(const ExternalSolver& solver, const SolverRun& run, bool gradients) {
  return {{"command", external_command_line(solver, "case.safetensors", "answer.safetensors", gradients)},
          {"exit_code", run.exit_code},
          {"timed_out", run.timed_out},
          {"wall_s", std::round(run.wall_s * 1000.0) / 1000.0},
          {"stderr_tail", run.stderr_tail}};
}

// The judge's report on an answer; Error when the answer is refused (shape, dtype, names).
std::optional<AgreementReport> judge_answer(const Case& problem, const ExternalAnswer& answer, bool gradients,
                                            const VerifyOptions& vo, const JudgeHooks& hooks, Json& row) {
  try {
    // Gradients: judged by compare --gradients' own rules (issue 41 item 1): a tensor not named as
    // `solve --grad` names it, or of another dtype or shape, is refused; a missing one is named and
    // never Agree.
    std::optional<ExternalGradients> theirs;
    if (gradients) {
      theirs = ExternalGradients{.source = "the answer file"};
      for (const auto& [name, tensor] : answer.gradients) theirs->tensors.emplace(name, tensor.view());
    }
    const AgreementReport r = compare_trajectory(problem, answer.H, vo, theirs, hooks);
    row["outcome"] = std::string(verdict_name(r.verdict));
    row["agreement"] = r.to_json();
    return r;
  } catch (const ContractViolation& e) {
    record_row_error(row, "AnswerRefused", e.what());
  } catch (const std::exception& e) {
    record_row_error(row, "exception", e.what());
  }
  return std::nullopt;
}

// Where a failing row's files come from and how it is replayed.
struct FailingRow {
  std::string id;
  std::filesystem::path scratch;  // case.safetensors, answer.safetensors
  bool gradients = false;
  std::uint64_t seed = 0;
  std::int64_t certify_budget = 0;
};

// A failing row keeps the case, the answer (when there is one), its error profile and a bundle.
void keep_failing_row(const TaskContext& ctx, const FailingRow& f, const BuiltCase& built, const Solved& solved,
                      const std::optional<AgreementReport>& report, Json& row, TaskOutput& out) {
  const std::filesystem::path answer_path = f.scratch / "answer.safetensors";
  out.case_files.push_back(ctx.staging / (f.id + ".safetensors"));
  write_case(out.case_files.back(), built.problem());
  row["case_file"] = "cases/" + f.id + ".safetensors";
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::symlink_status(answer_path, ec))) {
    out.case_files.push_back(ctx.staging / (f.id + ".answer.safetensors"));
    std::filesystem::copy_file(answer_path, out.case_files.back());
    row["answer_file"] = "cases/" + f.id + ".answer.safetensors";
    row["repro"] = fmt::format("pararnn compare cases/{0}.safetensors --trajectory cases/{0}.answer.safetensors "
                               "--seed {1} --certify-budget {2}{3}",
                               f.id, f.seed, f.certify_budget,
                               f.gradients ? fmt::format(" --gradients cases/{}.answer.safetensors", f.id) : "");
  } else {
    row["repro"] = external_command_line(*ctx.options.external, row["case_file"].get<std::string>(),
                                         "answer.safetensors", f.gradients);
  }
  if (solved.answer) {
    try {
      row["error_along_t"] = external_error_along_t(built.problem(), solved.answer->H, 128);
    } catch (const std::exception& e) {
      row["error_along_t"] = {{"error", e.what()}};
    }
  }
  const std::filesystem::path bundle = ctx.bundles_staging / (f.id + ".tar.gz");
  try {
    make_external_bundle({.id = f.id, .solver = *ctx.options.external, .run = solved.run,
                          .case_path = f.scratch / "case.safetensors", .answer_path = answer_path, .row = row,
                          .gradients = f.gradients, .seed = f.seed, .certify_budget = f.certify_budget,
                          .env_line = ctx.options.build.env_line},
                         report, bundle);
    out.case_files.push_back(bundle);
    row["bundle"] = "bundles/" + f.id + ".tar.gz";
  } catch (const std::exception& e) {
    row["bundle_error"] = e.what();
  }
}

}  // namespace

void run_external_rows(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const ExternalSolver& solver = *ctx.options.external;
  const CaseKey& key = spec.key;
  const std::string id = case_id(key) + ".external";
  const BuiltCase built = build_case(ctx.plan, key);
  Json row = row_identity(key, id, "external", built);
  const bool wants_gradients = judges_gradients(ctx.plan, *key.variant, key.dtype, key.time, key.cls, key.seed_index);
  const bool gradients = wants_gradients;
  row["gradients"] = gradients ? "judged" : "not_requested";
  row["solver"] = solver.name;
  const reports::ScratchDirectory scratch(ctx.options.out_dir, ".solver-");
  ctx.checkpoint();
  const Solved solved = solve_externally(solver, built.problem(), scratch.path(), gradients);
  ctx.checkpoint();
  row["external"] = run_json(solver, solved.run, gradients);
  const std::int64_t budget = ctx.plan.certify_budget_for(key.dtype);
  VerifyOptions vo;
  vo.seed = key.case_seed;
  vo.certify_budget = budget;
  vo.repro_command = fmt::format("pararnn compare cases/{0}.safetensors --trajectory cases/{0}.answer.safetensors "
                                 "--seed {1} --certify-budget {2}{3}", id, key.case_seed, budget,
                                 gradients ? fmt::format(" --gradients cases/{}.answer.safetensors", id) : "");
  const JudgeHooks hooks{.progress = [&](std::string_view) { ctx.checkpoint(); }, .poll = ctx.checkpoint};
  std::optional<AgreementReport> report;
  if (solved.answer) {
    report = judge_answer(built.problem(), *solved.answer, gradients, vo, hooks, row);
  } else {
    record_row_error(row, solved.error_type, solved.error);
  }
  if (row["outcome"] != "Agree")
    keep_failing_row(ctx,
                     {.id = id, .scratch = scratch.path(), .gradients = gradients, .seed = key.case_seed,
                      .certify_budget = budget},
                     built, solved, report, row, out);
  out.rows.push_back(std::move(row));
}

void run_external_packed(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const ExternalSolver& solver = *ctx.options.external;
  const BuiltCase built = build_case(ctx.plan, spec.key);
  Json e = equivalence_header(spec, "packed_vs_per_sequence");
  try {
    const reports::ScratchDirectory scratch(ctx.options.out_dir, ".solver-");
    const auto answer_of = [&](const Case& problem) {
      ctx.checkpoint();
      Solved s = solve_externally(solver, problem, scratch.path(), false);
      if (!s.answer) throw Error(s.error);
      if (s.answer->H.shape() != built.cell.trajectory_shape(problem.x.size(0), problem.x.size(1)))
        throw ContractViolation("H", "must have the trajectory's shape",
                                shape_string(s.answer->H.shape()));
      return std::move(s.answer->H);
    };
    const Tensor packed = answer_of(built.problem());
    std::vector<double> alone_values(static_cast<std::size_t>(packed.numel()));
    const std::int64_t per_step = packed.numel() / spec.key.time;
    const TensorView cu = built.cu_seqlens->view();
    for (std::int64_t s = 0; s + 1 < cu.numel(); ++s) {
      const auto a = static_cast<std::int64_t>(cu.load({s})), z = static_cast<std::int64_t>(cu.load({s + 1}));
      const Tensor seg = answer_of(built.cell.make_case(Tensor::copy_of(built.x.view().slice(1, a, z)), std::nullopt));
      const std::vector<double> values = seg.to_f64_vector();
      std::copy(values.begin(), values.end(), alone_values.begin() + a * per_step);
    }
    const Tensor alone = Tensor::from_values(DType::f64, packed.shape(), alone_values);
    const Tolerance tau = tolerance_for({.dtype = spec.key.dtype, .metric = Metric::trajectory,
                                         .cell = spec.key.variant->cell, .backend = "external"});
    record_comparison(e, compare(packed, alone, tau), tau);
  } catch (const std::exception& ex) {
    record_error(e, ex);
  }
  out.equivalences.push_back(std::move(e));
}

}  // namespace pararnn::nightly::detail
