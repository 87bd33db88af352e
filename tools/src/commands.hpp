// The subcommands of `pararnn` (DESIGN.md "Command-line tool"). Each returns the process exit
// code; errors from the library propagate to main(), which maps them to exit codes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pararnn::tools {

// Exit codes of verify and compare.
inline constexpr int kExitAgree = 0;
inline constexpr int kExitDisagree = 1;
inline constexpr int kExitInconclusiveOrRefused = 2;

// Another file of the same command line, named by its flag ("case", "--trajectory", "--out").
struct NamedPath {
  std::string flag;
  std::string path;
};

// A command's report file (--json; `report nightly|render`'s --junit), taken before any work, so
// that a report of an earlier run never stands for this one: refused as check_output_path refuses
// it (a directory, no existing directory), and when it is the file of one of `others` (an input the
// command reads, or another output: the report would overwrite it), with nothing removed; then a
// file there is removed. A run that ends without writing its report (refused, failed, cancelled)
// therefore leaves none; one that writes it does so afterwards, atomically. Refusals are
// ContractViolation naming `flag`, the rule and the path; a file that cannot be removed raises.
// An empty `path` (no report asked for) does nothing. One mechanism for every report flag: the
// commands call it first. A command line that CLI11 refuses never reaches a command and touches
// no file (a mistyped line must not delete what its --json names).
//   reserve_report_file(args.json, "--json", {{"case", args.case_path}});
void reserve_report_file(const std::string& path, std::string_view flag, const std::vector<NamedPath>& others = {});

struct MakeCaseArgs {
  std::string cell = "gru", mix = "diag";
  std::optional<std::int64_t> n_heads;
  std::optional<std::int64_t> k_dim, v_dim;  // ParaM2RNN (d_h = k_dim·v_dim)
  std::int64_t batch = 2, time = 64, d_in = 8;
  std::optional<std::int64_t> d_h;  // default 16; unset for m2rnn
  std::string dtype = "f32";
  std::uint64_t seed = 1;
  std::optional<double> weight_std;
  std::string max_recurrent_norm;  // a number, none, or empty: the cell's default (none for head)
  std::optional<double> beta;       // ParaHopfield; default 1/√d_h
  std::string gate_mix = "input";   // ParaCfC: input | diag_h
  std::optional<double> eps;        // ParaSLSTM; default 1e-6
  std::optional<double> h0_std;
  std::string cu_seqlens;  // "0,5,12" (packed case; batch must be 1)
  std::string out;
  // Op cases (--op, issue 56; op_commands.cpp): heads are --n-heads (default 2), K and V
  // --k-dim and --v-dim (default 16).
  std::string op;                   // empty: a cell case
  std::string variant;              // chunk | fused_recurrent (empty: the op's native mode)
  std::string decay = "normal";     // normal | hard | none
  double key_scale = 1.0;
  std::optional<double> scale;      // metadata "scale" (default None: K^-0.5)
  bool qk_l2norm = false;           // use_qk_l2norm_in_kernel
};

// Op cases (op_commands.cpp): make-case --op, and oracle / solve / compare of a file whose
// metadata names an "op" (compare's trajectory file holds o and final_state).
struct SolveArgs;
bool is_op_case_file(const std::string& path);
int make_op_case(const MakeCaseArgs& args);
int op_oracle(const SolveArgs& args);
int op_solve(const SolveArgs& args);
// gradients_path: a separate file of grad.<input> tensors (compare --gradients), or empty. Its
// --json is reserved first (reserve_report_file): a refused compare leaves no report.
int op_compare(const SolveArgs& args, const std::string& answer_path, const std::string& gradients_path);

struct SolveArgs {
  std::string case_path, backend = "auto", max_iters = "none", out, json;
  bool grad = false;
  bool recompute = false;  // NewtonConfig::recompute (Level 2: the backward re-solves H*)
  std::uint64_t seed = 0;
  std::optional<std::int64_t> certify_budget;  // default: default_certify_budget(dtype)
  std::optional<double> atol;
  // NewtonConfig's sLSTM / M2RNN options (spec §2.3, §1.9).
  std::string picard_adapt = "auto", picard_retry_atol = "1e-3";
  bool newton_backtrack = false;
  std::string coords = "native";  // sLSTM: native | log (NewtonConfig::coords)
  bool newton_only = false;  // NewtonConfig::allow_sequential = false
};

struct KstarArgs {
  std::string cell = "gru", mix = "diag", dtype = "f32", times = "32,64,128,256,512,1024", json;
  std::int64_t seeds = 3, batch = 1, d_in = 16, d_h = 64, k_limit = 16;
  std::optional<std::int64_t> k_dim, v_dim;  // ParaM2RNN
  std::optional<std::int64_t> n_heads;
  std::optional<double> weight_std;
  std::string max_recurrent_norm = "0.5";
  std::optional<std::int64_t> picard_iters;  // sLSTM P (default auto)
  std::string picard_adapt = "auto";         // auto | on | off
  bool newton_backtrack = false;             // M2RNN
  std::string coords = "native";             // sLSTM: native | log
};

// `pararnn seqpar`: a case's x split along time over P ranks (threads of this process, or one
// process per GPU over NCCL with --launcher env), solved by seq_parallel_newton_apply,
// reassembled and judged against the one-rank solve: exit 0 when the ranks agree with one rank
// within τ and report the same stats, 1 otherwise, 2 for a refused input.
struct SeqparArgs {
  std::string case_path, launcher = "in-process", chunks, max_iters = "none", out, json;
  std::optional<std::int64_t> ranks;
  std::optional<std::int64_t> k_max;
  std::string picard_adapt = "auto", picard_retry_atol = "1e-3";
};
int seqpar(const SeqparArgs& args);

// `pararnn report nightly|render|diff` and `pararnn bug-bundle` (report_commands.cpp).
struct NightlyArgs {
  std::string out, backends = "cpu", cells, dtypes, times, classes, max_iters = "none";
  std::string bench_summary;  // bench/results/h200-summary.json, embedded as "performance"
  bool quick = false;
  bool kstar_only = false;
  std::optional<std::int64_t> seeds;
  std::optional<double> time_budget;
  std::optional<std::int64_t> jobs;
  std::vector<std::string> argv;
  // An external solver (docs/external-solvers.md): its command, name, version command, timeout.
  std::string solver, solver_name, solver_version_cmd;
  double solver_timeout = 600.0;
  bool backends_given = false;  // --backends on the command line (refused with --solver)
  bool no_render = false;       // --no-render: report.json alone, no report.md nor plots/
  std::string junit;            // --junit FILE: the report as JUnit XML
};

struct RenderArgs {
  std::string report, out;
  bool no_plots = false;
  std::string junit;  // --junit FILE: the report as JUnit XML
};

struct DiffArgs {
  std::string old_report, new_report, out;
  double error_factor = 10.0;
  double time_noise = 0.5;
  double time_floor_ms = 5.0;
};

struct BundleArgs {
  std::string case_path, trajectory, backend = "auto", max_iters = "none", out;
  std::uint64_t seed = 0;
  std::optional<std::int64_t> certify_budget;
  std::int64_t max_bytes = 64 * 1024 * 1024;
  bool grad = false;
  bool no_minimise = false;
};

int report_nightly(const NightlyArgs& args);
int report_render(const RenderArgs& args);
int report_diff(const DiffArgs& args);
int bug_bundle(const BundleArgs& args);

// `pararnn diagnose CASE`: λ̂ and the finite-time stretch along the oracle's trajectory
// (reference/lyapunov.hpp), no solver run: exit 0 with the numbers, 2 for a refused input or
// an inconclusive estimate (uncertified or non-finite oracle, non-finite Jacobian or growth),
// then with the reason and no --json file.
struct DiagnoseArgs {
  std::string case_path, json;
  std::int64_t window = 64;  // LyapunovOptions::window
  std::int64_t chains = 64;  // LyapunovOptions::chains
  std::uint64_t seed = 0;    // chain sample and the oracle's certified-chain sample
  std::optional<std::int64_t> certify_budget;  // default_certify_budget(dtype)
  std::vector<std::string> argv;               // for the JSON context block
};
int diagnose(const DiagnoseArgs& args);

int make_case(const MakeCaseArgs& args);
int kstar(const KstarArgs& args);
int oracle(const SolveArgs& args);
int solve(const SolveArgs& args);
int verify(const SolveArgs& args);
// `gradients_path` empty: the trajectory file's own grad.* tensors, if any, are judged.
int compare(const SolveArgs& args, const std::string& trajectory_path, const std::string& gradients_path);

}  // namespace pararnn::tools
