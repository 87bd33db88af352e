// `pararnn`: make-case | oracle | diagnose | solve | verify | compare | kstar | seqpar | report | bug-bundle | env. Thin: parses with CLI11,
// calls the library, prints, and maps errors to exit codes (refused input: 2, with the
// library's message naming the argument, the rule and the value).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <new>
#include <optional>
#include <string>

#include "commands.hpp"
#include "env_line.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/progress.hpp"

namespace {

// Strict flag values: the whole text must be the number, in range; the message (prefixed by
// CLI11 with the flag's name) quotes the text. CLI11's own conversion would wrap "-1" into an
// unsigned seed and accept "nan" or a negative tolerance.
template <class T>
std::optional<T> whole_number(const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

CLI::Validator integer_at_least(std::int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        const auto v = whole_number<std::int64_t>(text);
        if (!v) return fmt::format("must be an integer, got '{}'", text);
        if (*v < min) return fmt::format("must be >= {}, got {}", min, text);
        return {};
      },
      fmt::format("INT>={}", min));
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!whole_number<std::uint64_t>(text))
          return fmt::format("must be an integer in [0, 2^64), got '{}'", text);
        return {};
      },
      "UINT64");
}

CLI::Validator finite_number(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        const auto v = whole_number<double>(text);
        if (!v) return fmt::format("must be a number, got '{}'", text);
        if (!std::isfinite(*v)) return fmt::format("must be finite, got '{}'", text);
        if (zero_allowed ? *v < 0.0 : *v <= 0.0)
          return fmt::format("must be {}, got '{}'", zero_allowed ? ">= 0" : "> 0", text);
        return {};
      },
      zero_allowed ? "FINITE>=0" : "FINITE>0");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pararnn::tools;
  const CLI::Validator count = integer_at_least(1), non_negative = integer_at_least(0);
  const CLI::Validator seed = unsigned_integer();
  const CLI::Validator magnitude = finite_number(true), positive = finite_number(false);
  CLI::App app{"pararnn: parallel Newton RNN solver and its independent oracle"};
  app.require_subcommand(1);
  // Progress on stderr (core/progress.hpp): drawn on a terminal unless --quiet; --verbose writes
  // it as plain lines even when stderr is piped. Accepted before or after the subcommand.
  bool quiet = false, verbose = false;
  auto* quiet_flag = app.add_flag("--quiet", quiet, "no progress on stderr");
  app.add_flag("--verbose", verbose, "progress as plain lines on stderr, terminal or not")->excludes(quiet_flag);
  app.fallthrough();

  MakeCaseArgs mk;
  auto* make = app.add_subcommand("make-case", "generate a case file (cell parameters + input)");
  make->add_option("--cell", mk.cell, "gru | lstm | nlru | slstm | cfc | titans | hopfield | rwkv7 | m2rnn");
  make->add_option("--mix", mk.mix, "recurrent mix (diag; gru: head)");
  make->add_option("--beta", mk.beta, "inverse temperature (hopfield; default 1/sqrt(d_h))")->check(positive);
  make->add_option("--n-heads", mk.n_heads, "heads (head mixes; rwkv7, default 1; must divide --d-h)")->check(count);
  make->add_option("--gate-mix", mk.gate_mix, "cfc: input | diag_h");
  make->add_option("--eps", mk.eps, "slstm: h = o c / (n + eps) (default 1e-6)")->check(positive);
  make->add_option("--k-dim", mk.k_dim, "rows K of the matrix state (m2rnn; required there)")->check(count);
  make->add_option("--v-dim", mk.v_dim, "columns V of the matrix state (m2rnn; required there)")->check(count);
  make->add_option("--batch", mk.batch)->check(count);
  make->add_option("--time", mk.time)->check(count);
  make->add_option("--d-in", mk.d_in)->check(count);
  make->add_option("--d-h", mk.d_h, "hidden size (default 16; m2rnn: k_dim·v_dim, leave unset)")->check(count);
  make->add_option("--dtype", mk.dtype, "f64 | f32 | f16 | bf16");
  make->add_option("--seed", mk.seed)->check(seed);
  make->add_option("--weight-std", mk.weight_std, "std of the recurrent parameters")->check(magnitude);
  make->add_option("--max-recurrent-norm", mk.max_recurrent_norm,
                   "clamp cap, a number or none (default: the cell's, 0.5; none for mix head)");
  make->add_option("--h0-std", mk.h0_std, "add a random h0 with this std")->check(magnitude);
  make->add_option("--cu-seqlens", mk.cu_seqlens, "packed case: 0,n1,...,N (needs --batch 1)");
  make->add_option("--out", mk.out)->required();
  make->add_option("--op", mk.op, "an op case instead of a cell: gla | simple_gla | delta_rule | gated_delta_rule | "
                                  "dplr_delta_rule | rwkv7 (docs/ops/README.md)");
  make->add_option("--variant", mk.variant, "op: chunk | fused_recurrent (the mode an adapter runs)");
  make->add_option("--decay", mk.decay, "op: log gates normal | hard (decays near 1) | none");
  make->add_option("--key-scale", mk.key_scale, "op: keys times this (large keys)")->check(positive);
  make->add_option("--scale", mk.scale, "op: the op's scale (default K^-0.5)")->check(positive);
  make->add_flag("--qk-l2norm", mk.qk_l2norm, "op: use_qk_l2norm_in_kernel (delta rules)");

  SolveArgs sa;
  std::string trajectory, gradients;
  auto add_case = [&](CLI::App* cmd) { cmd->add_option("case", sa.case_path)->required(); };
  auto add_solver = [&](CLI::App* cmd) {
    cmd->add_option("--backend", sa.backend, "auto | eager | cpu | cuda");
    cmd->add_option("--max-iters", sa.max_iters, "fixed K, or none (K table + adaptive)");
    cmd->add_option("--picard-adapt", sa.picard_adapt, "sLSTM: auto (on iff auto P) | on | off");
    cmd->add_option("--picard-retry-atol", sa.picard_retry_atol, "sLSTM adapt retry threshold, or none (default 1e-3)");
    cmd->add_flag("--newton-backtrack", sa.newton_backtrack, "M2RNN: reject steps that increase a row's max|F|");
    cmd->add_option("--coords", sa.coords, "sLSTM: native | log (Newton on c/n, ln n, m, h; CPU backend)");
    cmd->add_flag("--newton-only", sa.newton_only, "adaptive solves stay Newton (the auto rule may pick the sequential kernel)");
  };
  auto add_judge = [&](CLI::App* cmd) {
    cmd->add_option("--json", sa.json, "write the report as JSON");
    cmd->add_option("--seed", sa.seed, "seed of the oracle's certified-chain sample")->check(seed);
    cmd->add_option("--certify-budget", sa.certify_budget, "chain-steps of the certifying unroll")->check(non_negative);
    cmd->add_option("--atol", sa.atol, "explicit agreement atol (default: the contract table)")->check(magnitude);
  };
  auto* oracle_cmd = app.add_subcommand("oracle", "high-precision sequential trajectory");
  add_case(oracle_cmd);
  oracle_cmd->add_option("--out", sa.out)->required();
  oracle_cmd->add_flag("--grad", sa.grad);
  oracle_cmd->add_option("--certify-budget", sa.certify_budget)->check(non_negative);
  auto* solve_cmd = app.add_subcommand("solve", "parallel Newton solve");
  add_case(solve_cmd);
  add_solver(solve_cmd);
  solve_cmd->add_option("--out", sa.out)->required();
  solve_cmd->add_flag("--grad", sa.grad);
  solve_cmd->add_flag("--recompute", sa.recompute, "with --grad: keep nothing of H*, re-solve it");
  auto* verify_cmd = app.add_subcommand("verify", "solver vs oracle: exit 0 Agree, 1 Disagree, 2 Inconclusive/refused");
  add_case(verify_cmd);
  add_solver(verify_cmd);
  add_judge(verify_cmd);
  verify_cmd->add_flag("--grad", sa.grad);
  verify_cmd->add_flag("--recompute", sa.recompute, "with --grad: the backward re-solves H*");
  auto* compare_cmd = app.add_subcommand("compare", "an external trajectory vs the oracle");
  add_case(compare_cmd);
  compare_cmd->add_option("--trajectory", trajectory, "safetensors file holding H (and grad.*: judged too)")->required();
  compare_cmd->add_option("--gradients", gradients,
                          "safetensors file holding grad.x, grad.h0, grad.<parameter> of sum(grad.H * H): judged "
                          "against the oracle's BPTT");
  add_judge(compare_cmd);
  KstarArgs ka;
  auto* kstar_cmd = app.add_subcommand("kstar", "measure K*(T), the smallest K that agrees with the oracle");
  kstar_cmd->add_option("--cell", ka.cell);
  kstar_cmd->add_option("--mix", ka.mix, "recurrent mix (gru: head; slstm: head, dense)");
  kstar_cmd->add_option("--n-heads", ka.n_heads, "heads (head mixes)")->check(count);
  kstar_cmd->add_option("--dtype", ka.dtype);
  kstar_cmd->add_option("--T", ka.times, "comma-separated lengths, e.g. 32,64,...,131072");
  kstar_cmd->add_option("--seeds", ka.seeds)->check(count);
  kstar_cmd->add_option("--batch", ka.batch)->check(count);
  kstar_cmd->add_option("--d-in", ka.d_in)->check(count);
  kstar_cmd->add_option("--d-h", ka.d_h)->check(count);
  kstar_cmd->add_option("--k-dim", ka.k_dim, "m2rnn: rows K of the state")->check(count);
  kstar_cmd->add_option("--v-dim", ka.v_dim, "m2rnn: columns V of the state")->check(count);
  kstar_cmd->add_option("--k-limit", ka.k_limit)->check(non_negative);
  kstar_cmd->add_option("--weight-std", ka.weight_std)->check(magnitude);
  kstar_cmd->add_option("--max-recurrent-norm", ka.max_recurrent_norm);
  kstar_cmd->add_option("--picard-iters", ka.picard_iters, "slstm: Picard passes P (default auto)")->check(non_negative);
  kstar_cmd->add_option("--picard-adapt", ka.picard_adapt, "slstm: auto (on iff auto P) | on | off");
  kstar_cmd->add_flag("--newton-backtrack", ka.newton_backtrack, "m2rnn: newton_backtrack");
  kstar_cmd->add_option("--coords", ka.coords, "slstm: native | log");
  kstar_cmd->add_option("--json", ka.json);
  SeqparArgs sp;
  auto* seqpar_cmd = app.add_subcommand(
      "seqpar", "sequence-parallel Newton: x split over P ranks vs one rank: exit 0 Agree, 1 Disagree, 2 refused");
  seqpar_cmd->add_option("case", sp.case_path)->required();
  seqpar_cmd->add_option("--ranks", sp.ranks, "in-process ranks (threads); the case's x is split evenly")->check(count);
  seqpar_cmd->add_option("--chunks", sp.chunks, "explicit chunk lengths, e.g. 100,1,27 (one per rank, summing to T)");
  seqpar_cmd->add_option("--launcher", sp.launcher,
                         "in-process (threads) | env (one process per GPU over NCCL: RANK, WORLD_SIZE, LOCAL_RANK, "
                         "PARARNN_NCCL_ID_FILE; untested here)");
  seqpar_cmd->add_option("--max-iters", sp.max_iters, "fixed K, or none (K table + adaptive)");
  seqpar_cmd->add_option("--k-max", sp.k_max, "cap of the adaptive loop (default 16)")->check(count);
  seqpar_cmd->add_option("--picard-adapt", sp.picard_adapt, "sLSTM: auto (on iff auto P) | on | off");
  seqpar_cmd->add_option("--picard-retry-atol", sp.picard_retry_atol, "sLSTM adapt retry threshold, or none (default 1e-3)");
  seqpar_cmd->add_option("--out", sp.out, "write the reassembled H");
  seqpar_cmd->add_option("--json", sp.json, "write the judgement as JSON");
  DiagnoseArgs dg;
  for (int i = 0; i < argc; ++i) dg.argv.emplace_back(argv[i]);
  auto* diagnose_cmd = app.add_subcommand(
      "diagnose", "why a case is hard, before solving it: Lyapunov exponent and stretch along the oracle's "
                  "trajectory (no solver run): exit 0, or 2 refused/inconclusive");
  diagnose_cmd->add_option("case", dg.case_path)->required();
  diagnose_cmd->add_option("--json", dg.json, "write the estimate as JSON");
  diagnose_cmd->add_option("--window", dg.window, "W of the finite-time stretch, in steps (default 64)")->check(count);
  diagnose_cmd->add_option("--chains", dg.chains, "chains used at most, sampled by --seed (default 64)")->check(count);
  diagnose_cmd->add_option("--seed", dg.seed, "seed of the chain sample and the oracle's certified sample")->check(seed);
  diagnose_cmd->add_option("--certify-budget", dg.certify_budget, "chain-steps of the certifying unroll")->check(non_negative);
  auto* env_cmd = app.add_subcommand("env", "one line: version, compiler, CUDA, GPU");

  auto* report_cmd = app.add_subcommand("report", "nightly campaign, rendering and diff of report.json");
  report_cmd->require_subcommand(1);
  NightlyArgs na;
  for (int i = 0; i < argc; ++i) na.argv.emplace_back(argv[i]);
  auto* nightly_cmd = report_cmd->add_subcommand(
      "nightly", "run the campaign: DIR/report.json, DIR/cases/, and rendered from report.json as `report render` "
                 "does: DIR/report.md, DIR/plots/");
  nightly_cmd->add_option("--out", na.out, "report folder (created if missing)")->required();
  nightly_cmd->add_flag("--quick", na.quick, "every cell in f32, small sizes (<= 60 s on 2 cores)");
  nightly_cmd->add_flag("--kstar-only", na.kstar_only,
                        "only the plan's K* measurements with their predicted K (docs/kstar.md's validation table): "
                        "no row is judged; exit 2 when a measurement failed or none was planned");
  nightly_cmd->add_option("--backends", na.backends, "cpu,cuda (cuda is skipped, and recorded, without a GPU)");
  nightly_cmd->add_option("--cells", na.cells, "variants, e.g. gru,gru-head,lstm (default: all)");
  nightly_cmd->add_option("--dtypes", na.dtypes, "f64,f32,f16,bf16 (default: f32 quick, all four otherwise)");
  nightly_cmd->add_option("--T", na.times, "comma-separated lengths (default: the ladder)");
  nightly_cmd->add_option("--classes", na.classes, "init,hard,saturating,h0,packed (default: the plan's)");
  nightly_cmd->add_option("--max-iters", na.max_iters, "a fixed K for every row, or none (default: K table + adaptive)");
  nightly_cmd->add_option("--seeds", na.seeds, "seeds per configuration")->check(count);
  nightly_cmd->add_option("--time-budget", na.time_budget, "seconds; no task starts after it")->check(positive);
  nightly_cmd->add_option("--jobs", na.jobs, "tasks run at once (default: the CPUs; 1: one after another)")->check(count);
  nightly_cmd->add_option("--solver", na.solver,
                          "an external solver's command, with {case} and {out} (docs/external-solvers.md)");
  nightly_cmd->add_option("--solver-name", na.solver_name, "the external solver's name in reports and bundles");
  nightly_cmd->add_option("--solver-version-cmd", na.solver_version_cmd,
                          "a command whose first output line is the external solver's version");
  nightly_cmd->add_option("--solver-timeout", na.solver_timeout, "seconds per external solver run (default 600)")
      ->check(positive);
  nightly_cmd->add_option("--bench-summary", na.bench_summary,
                          "a bench summary (bench/results/h200-summary.json) to embed as the report's performance");
  nightly_cmd->add_flag("--no-render", na.no_render,
                        "report.json alone: no report.md nor plots/ (`report render` makes them later); a report.md "
                        "of an earlier run is removed either way");
  nightly_cmd->add_option("--junit", na.junit,
                          "also write the report as JUnit XML: a testcase per row and equivalence; Disagree and Error "
                          "fail, Inconclusive is skipped, only Agree passes (removed first: a failed run leaves none; "
                          "the exit code is the campaign's, but never 0 when the file cannot be written)");
  RenderArgs ra;
  auto* render_cmd = report_cmd->add_subcommand(
      "render", "report.json -> DIR/report.md and DIR/plots/*.svg|png (what `report nightly` writes unless --no-render)");
  render_cmd->add_option("report", ra.report, "a report.json of `pararnn report nightly`")->required();
  render_cmd->add_option("--out", ra.out, "output folder (created if missing)")->required();
  render_cmd->add_flag("--no-plots", ra.no_plots, "the Markdown alone (no gnuplot needed)");
  render_cmd->add_option("--junit", ra.junit,
                         "also write the report as JUnit XML (as `report nightly --junit`: Disagree and Error fail, "
                         "Inconclusive is skipped, only Agree passes)");
  DiffArgs da;
  auto* diff_cmd = report_cmd->add_subcommand("diff", "regressions from old.json to new.json: exit 1 on any, 0 on none");
  diff_cmd->add_option("old", da.old_report)->required();
  diff_cmd->add_option("new", da.new_report)->required();
  diff_cmd->add_option("--out", da.out, "also write the Markdown here");
  diff_cmd->add_option("--error-factor", da.error_factor, "error growth flagged beyond this factor (default 10)")->check(positive);
  diff_cmd->add_option("--time-noise", da.time_noise, "relative noise band of timings (default 0.5)")->check(magnitude);
  diff_cmd->add_option("--time-floor-ms", da.time_floor_ms, "time changes below this are noise (default 5)")->check(magnitude);

  BundleArgs ba;
  auto* bundle_cmd = app.add_subcommand("bug-bundle", "one .tar.gz to attach to a bug report: case, reports, plots, "
                                                      "trajectories, a minimised case, README");
  bundle_cmd->add_option("case", ba.case_path)->required();
  bundle_cmd->add_option("--trajectory", ba.trajectory, "their trajectory (safetensors holding H): also compare");
  bundle_cmd->add_option("--backend", ba.backend, "auto | eager | cpu | cuda");
  bundle_cmd->add_option("--max-iters", ba.max_iters, "fixed K, or none (K table + adaptive)");
  bundle_cmd->add_option("--seed", ba.seed, "seed of the oracle's certified-chain sample")->check(seed);
  bundle_cmd->add_option("--certify-budget", ba.certify_budget, "chain-steps of the certifying unroll")->check(non_negative);
  bundle_cmd->add_flag("--grad", ba.grad, "also judge gradients");
  bundle_cmd->add_flag("--no-minimise", ba.no_minimise, "leave out the minimised case");
  bundle_cmd->add_option("--max-bytes", ba.max_bytes, "size cap of the bundle's files (default 64 MiB)")->check(count);
  bundle_cmd->add_option("--out", ba.out, "bundle.tar.gz")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitInconclusiveOrRefused;
  }
  pararnn::set_verbosity(quiet ? pararnn::Verbosity::quiet
                               : verbose ? pararnn::Verbosity::verbose : pararnn::Verbosity::normal);
  try {
    if (make->parsed()) return make_case(mk);
    if (kstar_cmd->parsed()) return kstar(ka);
    if (oracle_cmd->parsed()) return oracle(sa);
    if (solve_cmd->parsed()) return solve(sa);
    if (verify_cmd->parsed()) return verify(sa);
    if (compare_cmd->parsed()) return compare(sa, trajectory, gradients);
    if (seqpar_cmd->parsed()) return seqpar(sp);
    if (diagnose_cmd->parsed()) return diagnose(dg);
    if (nightly_cmd->parsed()) {
      na.backends_given = nightly_cmd->count("--backends") > 0;
      return report_nightly(na);
    }
    if (render_cmd->parsed()) return report_render(ra);
    if (diff_cmd->parsed()) return report_diff(da);
    if (bundle_cmd->parsed()) return bug_bundle(ba);
    if (env_cmd->parsed()) {
      std::cout << env_line() << "\n";
      return 0;
    }
  } catch (const pararnn::NewtonDivergenceError& e) {
    // The solver failed to produce the sequential answer: a disagreement, not a refusal.
    std::cerr << "pararnn: " << e.what() << "\n";
    return kExitDisagree;
  } catch (const pararnn::ContractViolation& e) {
    std::cerr << "pararnn: refused input: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const pararnn::CaseFileError& e) {
    std::cerr << "pararnn: bad case file: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const pararnn::UnsupportedPath& e) {
    std::cerr << "pararnn: unsupported: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  } catch (const std::bad_alloc&) {
    std::cerr << "pararnn: refused: out of memory (the case or its results need more memory than this "
                 "machine has; try a smaller --batch, --time or width)\n";
    return kExitInconclusiveOrRefused;
  } catch (const std::exception& e) {
    std::cerr << "pararnn: error: " << e.what() << "\n";
    return kExitInconclusiveOrRefused;
  }
  return kExitInconclusiveOrRefused;
}
