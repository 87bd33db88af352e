// make_bug_bundle: stage every file in a scratch folder next to the output, minimise, check the
// size cap, archive with the system tar, check the listing, copy the archive into place.
#include "pararnn/nightly/bug_bundle.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/reports/plot.hpp"
#include "pararnn/reports/render.hpp"
#include "pararnn/reports/report_json.hpp"
#include "pararnn/solver/solver.hpp"
#include "bundle_archive.hpp"
#include "pararnn/nightly/error_profile.hpp"
#include "pararnn/reports/process.hpp"

namespace pararnn::nightly {

using reports::number_or_nan;
using reports::sci;
namespace {

using Json = nlohmann::ordered_json;

ApplyOptions apply_of(const Case& problem) {
  ApplyOptions a;
  if (problem.h0) a.h0 = problem.h0->view();
  if (problem.cu_seqlens) a.cu_seqlens = problem.cu_seqlens->view();
  return a;
}

// Elements of `t` whose index along `axis` is in [first, stop), blocks of `block` consecutive
// entries repeated `groups` times along that axis (an affine weight's gate blocks).
Tensor gather(const Tensor& t, std::int64_t axis, std::int64_t first, std::int64_t stop, std::int64_t groups = 1) {
  const std::int64_t extent = t.size(axis);
  const std::int64_t block = extent / groups;
  Shape shape = t.shape();
  shape[static_cast<std::size_t>(axis)] = groups * (stop - first);
  Tensor out(t.dtype(), shape);
  const std::int64_t n = out.numel();
  std::vector<std::int64_t> index(shape.size(), 0), source(shape.size(), 0);
  const Tensor flat = out.reshaped({n});
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i;
    for (std::size_t d = shape.size(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    source = index;
    const std::int64_t k = index[static_cast<std::size_t>(axis)];
    const std::int64_t width = stop - first;
    source[static_cast<std::size_t>(axis)] = (k / width) * block + first + k % width;
    flat.store({i}, t.load(source));
  }
  return out;
}

std::string verdict_text(Verdict v) { return std::string(verdict_name(v)); }

int exit_code_of(Verdict v) { return v == Verdict::agree ? 0 : (v == Verdict::disagree ? 1 : 2); }

std::string shape_text(const Case& c) { return shape_string(c.x.shape()); }

}  // namespace

AgreementReport verify_case(const Case& problem, const VerifyOptions& base) {
  const Cell cell = checked_case(problem);
  VerifyOptions options = base;
  options.h0.reset();
  options.cu_seqlens.reset();
  options.grad_H.reset();
  if (problem.h0) options.h0 = problem.h0->view();
  if (problem.cu_seqlens) options.cu_seqlens = problem.cu_seqlens->view();
  if (problem.grad_H) options.grad_H = problem.grad_H->view();
  options.cell_version = problem.meta("cell_version").value_or("");
  return verify_agreement(cell, problem.x, options);
}

Case keep_batch_rows(const Case& problem, std::int64_t first, std::int64_t stop) {
  if (problem.cu_seqlens) throw ContractViolation("batch rows", "a packed case has one row (B = 1)", "cu_seqlens");
  if (!(0 <= first && first < stop && stop <= problem.x.size(0)))
    throw ContractViolation("batch rows", fmt::format("must be a range within [0, {})", problem.x.size(0)),
                            fmt::format("[{}, {})", first, stop));
  Case c = problem;
  c.x = Tensor::copy_of(problem.x.view().slice(0, first, stop));
  if (problem.h0) c.h0 = Tensor::copy_of(problem.h0->view().slice(0, first, stop));
  if (problem.grad_H) c.grad_H = Tensor::copy_of(problem.grad_H->view().slice(0, first, stop));
  (void)checked_case(c);
  return c;
}

Case keep_channels(const Case& problem, std::int64_t first, std::int64_t stop) {
  const Cell cell = checked_case(problem);
  if (cell.spec().jacobian != JacobianClass::per_channel)
    throw ContractViolation("channels", "only per-channel cells have independent channels",
                            fmt::format("{} mix {}", cell.spec().python_class, cell.spec().mix));
  const std::int64_t d_h = cell.d_h();
  if (!(0 <= first && first < stop && stop <= d_h))
    throw ContractViolation("channels", fmt::format("must be a range within [0, {})", d_h), fmt::format("[{}, {})", first, stop));
  Case c = problem;
  for (const ParameterSpec& p : cell.spec().parameters) {
    const std::string name(p.name);
    const Tensor& t = problem.parameter(name);
    switch (p.shape) {
      case ParameterShape::vector: c.parameters[name] = gather(t, 0, first, stop); break;
      case ParameterShape::rows: c.parameters[name] = gather(t, 1, first, stop); break;
      case ParameterShape::affine_weight:
      case ParameterShape::affine_bias: c.parameters[name] = gather(t, 0, first, stop, t.size(0) / d_h); break;
      default:
        throw ContractViolation("channels", "parameter shape not per channel", name);
    }
  }
  if (problem.h0) c.h0 = gather(*problem.h0, problem.h0->dim() - 1, first, stop);
  if (problem.grad_H) c.grad_H = gather(*problem.grad_H, problem.grad_H->dim() - 1, first, stop);
  c.metadata["hidden_size"] = std::to_string(stop - first);
  (void)checked_case(c);
  return c;
}

Case time_window(const Case& problem, std::int64_t start, std::int64_t stop, const std::optional<Tensor>& carried) {
  if (problem.cu_seqlens) throw ContractViolation("time window", "a packed case restarts at its segments", "cu_seqlens");
  if (!(0 <= start && start < stop && stop <= problem.x.size(1)))
    throw ContractViolation("time window", fmt::format("must be a range within [0, {})", problem.x.size(1)),
                            fmt::format("[{}, {})", start, stop));
  Case c = problem;
  c.x = Tensor::copy_of(problem.x.view().slice(1, start, stop));
  if (problem.grad_H) c.grad_H = Tensor::copy_of(problem.grad_H->view().slice(1, start, stop));
  if (start > 0) {
    if (!carried) throw ContractViolation("time window", "a window after t = 0 needs the carried state", "none");
    c.h0 = Tensor::converted(*carried, problem.dtype());
  }
  (void)checked_case(c);
  return c;
}

MinimisedCase minimise_case(const Case& problem, const AgreementReport& original, const VerifyOptions& options,
                            const std::function<void(const std::string&)>& progress) {
  MinimisedCase m{problem, original, {}};
  const Verdict want = original.verdict;
  const auto say = [&](const std::string& line) {
    m.attempts.push_back(line);
    if (progress) progress(line);
  };
  if (want == Verdict::agree) {
    say("nothing to minimise: the verdict is Agree");
    return m;
  }
  // Tries `candidate`; keeps it when the verdict is unchanged.
  const auto attempt = [&](const std::string& what, const std::function<Case()>& make) {
    Case candidate;
    try {
      candidate = make();
    } catch (const std::exception& e) {
      say(fmt::format("{}: not tried ({})", what, e.what()));
      return false;
    }
    AgreementReport r;
    try {
      r = verify_case(candidate, options);
    } catch (const NewtonDivergenceError& e) {
      say(fmt::format("{}: the solver raised NewtonDivergenceError, not the original verdict: not kept", what));
      return false;
    }
    const bool same = r.verdict == want;
    say(fmt::format("{}: {} (max error {:.3e}){}", what, verdict_text(r.verdict), r.max_abs,
                    same ? ", same verdict: kept" : ", verdict changed: not kept"));
    if (same) {
      m.problem = std::move(candidate);
      m.report = std::move(r);
    }
    return same;
  };
  // 1. Batch rows: the row of the worst element.
  const std::int64_t batch = m.problem.x.size(0);
  if (batch > 1 && !m.problem.cu_seqlens && m.report.worst_index.size() >= 2) {
    const std::int64_t b = m.report.worst_index[0];
    attempt(fmt::format("batch rows {} -> 1 (row {}, the worst element's)", batch, b),
            [&] { return keep_batch_rows(m.problem, b, b + 1); });
  }
  // 2. Channels (per-channel cells): the smallest block around the worst channel.
  const Cell cell = checked_case(m.problem);
  if (cell.spec().jacobian == JacobianClass::per_channel && cell.d_h() > 1 && m.report.worst_index.size() >= 3) {
    const std::int64_t d_h = cell.d_h(), worst = m.report.worst_index.back();
    for (std::int64_t width = 1; width < d_h; width *= 2) {
      const std::int64_t first = std::clamp<std::int64_t>(worst - width / 2, 0, d_h - width);
      if (attempt(fmt::format("channels {} -> {} ([{}, {}), around the worst channel {})", d_h, width, first, first + width,
                              worst),
                  [&] { return keep_channels(m.problem, first, first + width); }))
        break;
    }
  }
  // 3. Time: a window ending just after the first failing step (Disagree only).
  if (want == Verdict::disagree && !m.problem.cu_seqlens) {
    const Cell c = checked_case(m.problem);
    std::optional<Tensor> H;
    try {
      H = newton_apply(c, m.problem.x, options.config, apply_of(m.problem));
    } catch (const std::exception&) {
    }
    const auto oracle = reference::oracle_sequential(m.problem, {.certify = false});
    const std::int64_t time = m.problem.x.size(1);
    const std::int64_t first_fail = H ? first_failing_t(*H, oracle.H, m.report.atol, m.report.rtol) : -1;
    if (first_fail < 0) {
      say("time window: not tried (no step of the solver's trajectory breaks tau: the verdict comes from elsewhere)");
    } else if (first_fail + 1 < time || time > 1) {
      const std::int64_t stop = first_fail + 1;
      bool kept = stop == time;
      if (!kept)
        kept = attempt(fmt::format("time {} -> {} ([0, {}): ends just after the first failing step t = {})", time, stop, stop,
                                   first_fail),
                       [&] { return time_window(m.problem, 0, stop, std::nullopt); });
      // Shorter windows [start, stop) of the prefix start from the oracle's state at start − 1 (the
      // carried state, rounded to the dtype); each is cut from the prefix, whose oracle is `oracle`'s.
      if (kept) {
        const Case prefix = m.problem;
        for (std::int64_t length = stop / 2; length >= 1; length /= 2) {
          const std::int64_t start = stop - length;
          const Tensor carried = Tensor::copy_of(oracle.H.view().select(1, start - 1));
          if (!attempt(fmt::format("time window [{}, {}), h0 = the oracle's state at t = {}", start, stop, start - 1),
                       [&] { return time_window(prefix, start, stop, carried); }))
            break;
        }
      }
    }
  }
  return m;
}

BundleResult make_bug_bundle(const BundleOptions& options) {
  check_output_path(options.out, "--out");
  const std::string out_name = options.out.filename().string();
  if (out_name.size() <= 7 || out_name.substr(out_name.size() - 7) != ".tar.gz")
    throw ContractViolation("--out", "must name a .tar.gz file", options.out.string());
  if (options.max_bytes < 1)
    throw ContractViolation("--max-bytes", "must be >= 1", std::to_string(options.max_bytes));
  if (!reports::program_in_path("tar"))
    throw Error("bug-bundle needs the system tar (GNU tar) in PATH");
  const auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const Case problem = read_case(options.case_path);
  const Cell cell = checked_case(problem);
  std::optional<Tensor> theirs;
  if (options.trajectory) {
    const SafetensorsFile file = read_safetensors(*options.trajectory);
    const auto it = file.tensors.find("H");
    if (it == file.tensors.end())
      throw CaseFileError(fmt::format("{}: tensor 'H': missing (a trajectory file holds H)", options.trajectory->string()));
    theirs = it->second;
  }
  std::string stem = options.out.filename().string();
  stem = stem.substr(0, stem.size() - 7);
  BundleResult result;
  result.out = options.out;
  result.folder = stem;

  const std::filesystem::path parent = options.out.parent_path().empty() ? "." : options.out.parent_path();
  const reports::ScratchDirectory scratch(parent, ".bundle-");
  const std::filesystem::path dir = scratch.path() / stem;
  std::filesystem::create_directories(dir / "plots");
  std::vector<std::pair<std::string, std::string>> files;  // name, what
  const auto add = [&](const std::string& name, const std::string& what) { files.emplace_back(name, what); };
  const auto write_text = [&](const std::string& name, const std::string& text, const std::string& what) {
    write_file_atomically(dir / name, [&](std::ostream& out) { out << text; });
    add(name, what);
  };

  // The case and the env line.
  std::filesystem::copy_file(options.case_path, dir / "case.safetensors");
  add("case.safetensors", "the case as given");
  write_text("env.txt", options.env_line + "\n", "`pararnn env` of the machine that made the bundle");

  // Verify (and compare).
  const QuietWarnings quiet;
  VerifyOptions vo;
  vo.config = options.config;
  vo.seed = options.seed;
  vo.certify_budget = options.certify_budget;
  vo.gradients = options.gradients;
  const std::string budget_flag = options.certify_budget ? fmt::format(" --certify-budget {}", *options.certify_budget) : "";
  const auto verify_command = [&](const std::string& file) {
    return fmt::format("pararnn verify {} --backend {} --max-iters {} --seed {}{}{}", file, options.backend,
                       options.max_iters, options.seed, budget_flag, options.gradients ? " --grad" : "");
  };
  vo.repro_command = verify_command("case.safetensors");
  say("verify: solver vs oracle");
  std::optional<AgreementReport> report;
  std::string divergence;
  try {
    report = verify_case(problem, vo);
  } catch (const NewtonDivergenceError& e) {
    divergence = e.what();  // `pararnn verify` exits 1 on it: a disagreement
  }
  if (report) {
    result.verdict = report->verdict;
    write_text("verify.json", report->to_json().dump(2) + "\n", "verify report (AgreementReport JSON)");
    write_text("verify.md", reports::render_agreement_markdown(report->to_json(), "pararnn verify: case.safetensors"),
               "verify report, Markdown");
  } else {
    result.verdict = Verdict::disagree;
    write_text("verify.txt", "NewtonDivergenceError: " + divergence + "\n", "the residual gate's message");
  }
  std::optional<AgreementReport> comparison;
  if (theirs) {
    say("compare: their trajectory vs oracle");
    VerifyOptions co = vo;
    co.repro_command = fmt::format("pararnn compare case.safetensors --trajectory theirs.safetensors --seed {}{}",
                                   options.seed, budget_flag);
    comparison = compare_trajectory(problem, *theirs, co);
    result.compare_verdict = comparison->verdict;
    std::filesystem::copy_file(*options.trajectory, dir / "theirs.safetensors");
    add("theirs.safetensors", "the trajectory given with --trajectory");
    write_text("compare.json", comparison->to_json().dump(2) + "\n", "compare report (AgreementReport JSON)");
    write_text("compare.md", reports::render_agreement_markdown(comparison->to_json(), "pararnn compare: theirs.safetensors"),
               "compare report, Markdown");
  }

  // Trajectories and the picture.
  say("trajectories: oracle and solver");
  const auto oracle = reference::oracle_sequential(problem, {.certify = false});
  write_safetensors(dir / "oracle.safetensors", {{"H", oracle.H}},
                    {{"producer", "pararnn oracle"}, {"oracle_type", oracle.type}});
  add("oracle.safetensors", fmt::format("the oracle's trajectory H (f64, {})", oracle.type));
  try {
    NewtonStats stats;
    const Tensor H = newton_apply(cell, problem.x, options.config, apply_of(problem), &stats);
    write_safetensors(dir / "solver.safetensors", {{"H", H}},
                      {{"producer", "pararnn solve"}, {"backend", std::string(solve_backend_name(stats.scan_backend))},
                       {"newton_iters", std::to_string(stats.iters)}, {"max_residual", fmt::format("{:.6e}", stats.max_residual)}});
    add("solver.safetensors", fmt::format("the solver's trajectory H ({}, backend {})", dtype_name(H.dtype()), solve_backend_name(stats.scan_backend)));
  } catch (const NewtonDivergenceError& e) {
    write_text("solver.txt", std::string("no trajectory: ") + e.what() + "\n", "why there is no solver trajectory");
  }
  const Json profile = error_along_t(cell, problem, options.config);
  Json profile_file = profile;
  if (theirs) {
    const auto t = binned_series(max_abs_along_t(*theirs, oracle.H), 256);
    profile_file["theirs"] = t["max_abs"];
    profile_file["theirs_first_failing_t"] = first_failing_t(*theirs, oracle.H, profile["atol"].get<double>(),
                                                             profile["rtol"].get<double>());
  }
  write_text("error_along_t.json", profile_file.dump(2) + "\n",
             "the largest error of the solver and of the sequential loop against the oracle per step (binned), the first failing step, the residual history");
  if (options.plots) {
    reports::Figure f = reports::failure_figure("failure", fmt::format("{} {} {}: {}", problem.cell, dtype_name(problem.dtype()),
                                                     shape_text(problem), verdict_text(result.verdict)),
                              profile);
    if (theirs) {
      reports::Series s{.title = "theirs", .color = 3};
      for (std::size_t i = 0; i < profile_file["t"].size() && i < profile_file["theirs"].size(); ++i)
        s.points.emplace_back(profile_file["t"][i].get<double>(), number_or_nan(profile_file["theirs"][i]));
      f.panels[0].series.insert(f.panels[0].series.begin() + 1, s);
    }
    reports::render_figure(f, dir / "plots");
    add("plots/failure.png", "the error along t (and τ) and the residual history");
    add("plots/failure.svg", "the same, SVG");
  }

  // The minimised case.
  std::optional<MinimisedCase> minimised;
  if (options.minimise && report) {
    say("minimise");
    minimised = minimise_case(problem, *report, vo, say);
    write_case(dir / "case.min.safetensors", minimised->problem);
    add("case.min.safetensors", "the minimised case (same verdict)");
    Json mj = minimised->report.to_json();
    mj["repro"] = verify_command("case.min.safetensors");
    write_text("minimised.json", Json{{"attempts", minimised->attempts}, {"verify", mj}}.dump(2) + "\n",
               "the minimisation attempts and the verify report of the minimised case");
    write_text("minimised.md", reports::render_agreement_markdown(mj, "pararnn verify: case.min.safetensors"),
               "verify report of the minimised case, Markdown");
    result.minimised_verdict = minimised->report.verdict;
    result.minimisation = minimised->attempts;
  }

  // README.
  const int expected = exit_code_of(result.verdict);
  std::string readme = fmt::format("# pararnn bug bundle: {}\n\n", options.case_path.filename().string());
  readme += fmt::format("**Verdict: {}** — cell {} ({}), dtype {}, x {}, backend {}, max-iters {}.\n\n",
                        verdict_text(result.verdict), problem.cell, problem.meta("mix").value_or("diag"),
                        dtype_name(problem.dtype()), shape_text(problem), options.backend, options.max_iters);
  if (report) {
    readme += fmt::format("max |solver − oracle| = {} (τ atol {}, rtol {}); same-dtype sequential floor {}; "
                          "{} of {} elements outside τ; first failing step t = {}.\n\n",
                          sci(report->max_abs), sci(report->atol), sci(report->rtol), sci(report->sequential_max_abs),
                          report->mismatches, report->count, profile.value("first_failing_t", Json(-1)).dump());
    if (!report->inconclusive_reason.empty()) readme += "Inconclusive: " + report->inconclusive_reason + "\n\n";
  } else {
    readme += "The solver raised NewtonDivergenceError (see verify.txt): `pararnn verify` exits 1 on it.\n\n";
  }
  if (comparison)
    readme += fmt::format("Their trajectory: **{}**, max |theirs − oracle| = {}.\n\n", verdict_text(comparison->verdict),
                          sci(comparison->max_abs));
  readme += fmt::format("Made by `{}` on `{}` at {}.\n\n", options.command_line, options.env_line, reports::utc_now());
  if (options.plots)
    readme += "![the error along t against the oracle, and the Newton residual](plots/failure.png)\n\n";
  readme += "## Reproduce\n\nUnpack, then run from the bundle folder; each command gives the exit code in its comment "
            "(0 Agree, 1 Disagree, 2 Inconclusive):\n\n";
  readme += fmt::format("```bash\ntar -xzf {} && cd {}\n```\n\n", out_name, stem);
  readme += "<!-- reproduce: every line is a command and the exit code it must give -->\n```bash\n";
  readme += fmt::format("{}   # expect exit {}\n", verify_command("case.safetensors"), expected);
  if (minimised)
    readme += fmt::format("{}   # expect exit {}\n", verify_command("case.min.safetensors"),
                          exit_code_of(minimised->report.verdict));
  if (comparison)
    readme += fmt::format("pararnn compare case.safetensors --trajectory theirs.safetensors --seed {}{}   # expect exit {}\n",
                          options.seed, budget_flag, exit_code_of(comparison->verdict));
  readme += "```\n\n";
  if (minimised) {
    readme += fmt::format("## Minimisation\n\nx {} → {} (only steps that keep the verdict {} are kept):\n\n",
                          shape_text(problem), shape_text(minimised->problem), verdict_text(result.verdict));
    for (const auto& line : minimised->attempts) readme += "- " + line + "\n";
    readme += "\n";
  }
  readme += "## Files\n\n| file | what |\n|---|---|\n";
  for (const auto& [name, what] : files) readme += fmt::format("| `{}` | {} |\n", name, what);
  readme += "| `README.md` | this file |\n\n";
  if (report) readme += "## Verify summary\n\n```\n" + report->summary() + "\n```\n";
  write_text("README.md", readme, "this file");

  // Size cap, archive with the system tar, listing checked, copied into place.
  say("archive");
  const detail::ArchiveResult archived = detail::archive_bundle(scratch.path(), stem, options.out, options.max_bytes);
  result.files = archived.files;
  result.bytes = archived.bytes;
  return result;
}

}  // namespace pararnn::nightly
