// Subcommand bodies: read a case, call the library, print, write outputs (atomically, through
// write_safetensors), return the exit code.
#include "commands.hpp"
#include "env_line.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <map>
#include <optional>
#include <string_view>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/diagnose.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/contracts/kstar.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/progress.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/nightly/bug_bundle.hpp"
#include "pararnn/solver/nccl_communicator.hpp"
#include "pararnn/solver/seq_parallel.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::tools {
namespace {

std::optional<double> parse_cap(const std::string& text) {
  if (text == "none" || text == "None") return std::nullopt;
  double v = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0.0)
    throw ContractViolation("--max-recurrent-norm", "must be a finite number >= 0 or 'none'", text);
  return v;
}

// The whole of `text` as an integer, or nothing (no spaces, signs other than '-', fractions).
std::optional<std::int64_t> whole_integer(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// --picard-adapt: auto (nullopt: on iff auto P), on, off.
std::optional<bool> parse_picard_adapt(const std::string& text) {
  if (text == "auto") return std::nullopt;
  if (text == "on") return true;
  if (text == "off") return false;
  throw ContractViolation("--picard-adapt", "must be auto, on or off", text);
}

NewtonConfig config_from(const SolveArgs& args) {
  NewtonConfig config;
  config.picard_adapt = parse_picard_adapt(args.picard_adapt);
  if (args.picard_retry_atol == "none" || args.picard_retry_atol == "None") {
    config.picard_retry_atol.reset();
  } else {
    double v = 0.0;
    const std::string& t = args.picard_retry_atol;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v) || v < 0.0)
      throw ContractViolation("--picard-retry-atol", "must be a finite number >= 0 or 'none'", t);
    config.picard_retry_atol = v;
  }
  config.newton_backtrack = args.newton_backtrack;
  config.coords = parse_coords(args.coords);
  config.allow_sequential = !args.newton_only;
  config.scan_backend = parse_scan_backend(args.backend);
  config.recompute = args.recompute;
  if (args.max_iters != "none" && args.max_iters != "None") {
    const auto k = whole_integer(args.max_iters);
    if (!k || *k < 0)
      throw ContractViolation("--max-iters", "must be a non-negative integer or 'none'", args.max_iters);
    config.max_iters = *k;
  }
  return config;
}

// "0,5,12": every item an integer (no spaces, fractions, trailing or empty items).
std::vector<std::int64_t> parse_int_list(const std::string& text, const char* argument) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = std::string_view(text).substr(start, comma - start);
    const auto value = whole_integer(item);
    if (!value)
      throw ContractViolation(argument,
                              fmt::format("must be a comma-separated list of integers (item {} is '{}')",
                                          out.size(), item),
                              text);
    out.push_back(*value);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return out;
}

// Bytes this machine has (physical memory), for refusing sizes that cannot be allocated.
long double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<long double>(pages) * static_cast<long double>(page) : 0.0L;
}

// make-case: refuses, before allocating, a case whose input or parameters cannot fit in memory
// (half of it: the solver and the oracle need more besides), naming the flags.
void require_case_fits(const MakeCaseArgs& args, DType dtype) {
  const long double memory = machine_memory_bytes();
  if (memory <= 0) return;
  const long double element = dtype_size(dtype);
  const long double x = static_cast<long double>(args.batch) * args.time * args.d_in * element;
  if (x > memory / 2)
    throw ContractViolation("--batch, --time, --d-in",
                            fmt::format("x of B·T·d_in elements needs {:.3g} bytes, more than half of this "
                                        "machine's {:.3g} bytes", static_cast<double>(x), static_cast<double>(memory)),
                            fmt::format("--batch {} --time {} --d-in {}", args.batch, args.time, args.d_in));
  const long double d_h = args.d_h.value_or(16), d_in = args.d_in;
  const long double k = args.k_dim.value_or(1), v = args.v_dim.value_or(1);
  // A bound on every cell's parameters: 8 gate blocks of W_x, 4 d_h² recurrent matrices, the
  // Hopfield 2 d_h² x d_in projection, M2RNN's (K + V + 1) x d_in and V x V.
  const long double parameters =
      (8 * d_h * (d_in + 1) + 4 * d_h * d_h + 2 * d_h * d_h * d_in + (k + v + 1) * (d_in + 1) + v * v) * element;
  if (parameters > memory / 2)
    throw ContractViolation("--d-h, --d-in, --k-dim, --v-dim",
                            fmt::format("the parameters need up to {:.3g} bytes, more than half of this "
                                        "machine's {:.3g} bytes", static_cast<double>(parameters),
                                        static_cast<double>(memory)),
                            args.k_dim || args.v_dim
                                ? fmt::format("--d-in {} --k-dim {} --v-dim {}", args.d_in, args.k_dim.value_or(0),
                                              args.v_dim.value_or(0))
                                : fmt::format("--d-h {} --d-in {}", args.d_h.value_or(16), args.d_in));
}

ApplyOptions apply_options(const Case& problem) {
  ApplyOptions options;
  if (problem.h0) options.h0 = problem.h0->view();
  if (problem.cu_seqlens) options.cu_seqlens = problem.cu_seqlens->view();
  return options;
}

void write_json(const std::string& path, const nlohmann::ordered_json& json) {
  if (path.empty()) return;
  write_file_atomically(path, [&](std::ostream& out) { out << json.dump(2) << "\n"; });
}

// Outputs are checked before any work, so a command never computes for a path it cannot write.
void check_outputs(std::initializer_list<std::pair<const char*, const std::string*>> outputs) {
  for (const auto& [flag, path] : outputs)
    if (!path->empty()) check_output_path(*path, flag);
}

// What every rank of `seqpar` reports, gathered to compare the ranks.
struct RankStats {
  std::int64_t iters = 0, updates = 0, fallback_tiles = 0, picard_iters = 0, picard_retries = 0;
  double max_residual = 0.0;
  std::int64_t converged = 0;
  bool operator==(const RankStats& o) const {
    return iters == o.iters && updates == o.updates && fallback_tiles == o.fallback_tiles &&
           picard_iters == o.picard_iters && picard_retries == o.picard_retries && converged == o.converged &&
           std::memcmp(&max_residual, &o.max_residual, sizeof max_residual) == 0;
  }
};

RankStats rank_stats(const NewtonStats& s) {
  return {s.iters, s.updates, s.fallback_tiles, s.picard_iters, s.picard_retries, s.max_residual, s.converged ? 1 : 0};
}

struct SeqparRanks {
  Tensor H;                      // every rank's chunk, reassembled (B, T, ...)
  std::vector<RankStats> stats;  // per rank
};

// One rank of `seqpar`: its chunk of the case solved, then every chunk gathered (padded to the
// longest) so that each rank holds the whole trajectory and every rank's stats.
SeqparRanks seqpar_rank(Communicator& comm, const Cell& cell, const Case& problem, const NewtonConfig& config,
                        const std::vector<std::int64_t>& lengths) {
  const auto r = static_cast<std::size_t>(comm.rank());
  std::int64_t start = 0, longest = 0;
  for (std::size_t q = 0; q < lengths.size(); ++q) {
    if (q < r) start += lengths[q];
    longest = std::max(longest, lengths[q]);
  }
  ApplyOptions options;
  if (problem.h0 && r == 0) options.h0 = problem.h0->view();
  NewtonStats stats;
  const Tensor H_r = seq_parallel_newton_apply(comm, cell, problem.x.view().slice(1, start, start + lengths[r]),
                                               config, options, &stats);
  const std::int64_t batch = problem.x.size(0), time = problem.x.size(1);
  const std::size_t step_bytes = static_cast<std::size_t>(H_r.numel() / (batch * lengths[r])) * dtype_size(H_r.dtype());
  std::vector<std::byte> mine(static_cast<std::size_t>(batch * longest) * step_bytes);
  for (std::int64_t b = 0; b < batch; ++b)
    std::memcpy(mine.data() + static_cast<std::size_t>(b * longest) * step_bytes, H_r.view().select(0, b).data(),
                static_cast<std::size_t>(lengths[r]) * step_bytes);
  const std::vector<std::byte> all = allgather_values(comm, std::span<const std::byte>(mine));
  SeqparRanks out{.H = Tensor(cell.dtype(), cell.trajectory_shape(batch, time)),
                  .stats = allgather_values(comm, std::span<const RankStats>(std::vector<RankStats>{rank_stats(stats)}))};
  std::int64_t t0 = 0;
  for (std::size_t q = 0; q < lengths.size(); ++q) {
    for (std::int64_t b = 0; b < batch; ++b)
      std::memcpy(out.H.view().select(0, b).select(0, t0).data(),
                  all.data() + (q * static_cast<std::size_t>(batch * longest) + static_cast<std::size_t>(b * longest)) * step_bytes,
                  static_cast<std::size_t>(lengths[q]) * step_bytes);
    t0 += lengths[q];
  }
  return out;
}

// The judgement of `seqpar` (rank 0, or the in-process caller): the ranks against the one-rank
// solve within τ, and the ranks' stats against each other.
int seqpar_report(const SeqparArgs& args, const Cell& cell, const Case& problem, const NewtonConfig& config,
                  const std::vector<std::int64_t>& lengths, const SeqparRanks& ranks) {
  ApplyOptions options;
  if (problem.h0) options.h0 = problem.h0->view();
  NewtonStats one;
  const Tensor H_one = newton_apply(cell, problem.x, config, options, &one);
  const Tolerance tau = tolerance_for({.dtype = cell.dtype(), .metric = Metric::trajectory,
                                       .cell = std::string(cell.name()), .backend = "cpu"});
  const ComparisonResult c = compare(ranks.H, H_one, tau);
  const bool bitwise = std::memcmp(ranks.H.data(), H_one.data(), H_one.nbytes()) == 0;
  const bool same_stats = std::all_of(ranks.stats.begin(), ranks.stats.end(),
                                      [&](const RankStats& s) { return s == ranks.stats.front(); });
  std::string chunks;
  for (std::int64_t n : lengths) chunks += (chunks.empty() ? "" : ",") + std::to_string(n);
  const RankStats& s = ranks.stats.front();
  std::cout << fmt::format("seqpar: {} {} x {} on {} ranks ({}), chunks {}\n", cell.name(), dtype_name(cell.dtype()),
                           shape_string(problem.x.shape()), lengths.size(), args.launcher, chunks);
  std::cout << fmt::format("  ranks:    iters {} updates {} fallback_tiles {} max_residual {:.3e}; the same on every rank: {}\n",
                           s.iters, s.updates, s.fallback_tiles, s.max_residual, same_stats ? "yes" : "NO");
  std::cout << fmt::format("  one rank: iters {} updates {} fallback_tiles {} max_residual {:.3e}\n", one.iters,
                           one.updates, one.fallback_tiles, one.max_residual);
  const bool agree = c.ok() && same_stats;
  std::cout << fmt::format("  ranks vs one rank: {} (max_abs {:.3e}, tau atol {:g} rtol {:g}; bitwise {})\n",
                           agree ? "Agree" : "Disagree", c.max_abs, tau.atol, tau.rtol, bitwise ? "yes" : "no");
  if (!c.ok()) std::cout << c.describe() << "\n";
  if (!args.out.empty())
    write_safetensors(args.out, {{"H", ranks.H}}, {{"producer", "pararnn seqpar"}, {"ranks", std::to_string(lengths.size())},
                                                   {"chunks", chunks}, {"newton_iters", std::to_string(s.iters)}});
  nlohmann::ordered_json per_rank = nlohmann::ordered_json::array();
  for (const RankStats& r : ranks.stats)
    per_rank.push_back({{"iters", r.iters}, {"updates", r.updates}, {"fallback_tiles", r.fallback_tiles},
                        {"max_residual", r.max_residual}, {"converged", r.converged != 0}});
  write_json(args.json, {{"schema_version", 1}, {"verdict", agree ? "Agree" : "Disagree"}, {"cell", cell.name()},
                         {"dtype", dtype_name(cell.dtype())}, {"launcher", args.launcher}, {"chunks", lengths},
                         {"max_abs", c.max_abs}, {"mismatches", c.mismatches}, {"nan_count", c.nan_count},
                         {"atol", tau.atol}, {"rtol", tau.rtol}, {"bitwise", bitwise}, {"same_stats", same_stats},
                         {"ranks", per_rank},
                         {"one_rank", {{"iters", one.iters}, {"fallback_tiles", one.fallback_tiles},
                                       {"max_residual", one.max_residual}}}});
  return agree ? kExitAgree : kExitDisagree;
}

// --chunks "a,b,c" (every length >= 1, summing to T), else the even split over `ranks`.
std::vector<std::int64_t> seqpar_chunks(const SeqparArgs& args, std::int64_t time, std::optional<std::int64_t> ranks) {
  if (args.chunks.empty()) {
    if (!ranks) throw ContractViolation("--ranks", "must be given (or --chunks)", "unset");
    if (*ranks > time)
      throw ContractViolation("--ranks", fmt::format("must be at most the case's T = {} (every rank needs a step)", time),
                              std::to_string(*ranks));
    return even_chunks(time, static_cast<int>(*ranks));
  }
  const std::vector<std::int64_t> lengths = parse_int_list(args.chunks, "--chunks");
  std::int64_t total = 0;
  for (std::int64_t n : lengths) {
    if (n < 1) throw ContractViolation("--chunks", "every rank needs at least one step", args.chunks);
    total += n;
  }
  if (total != time)
    throw ContractViolation("--chunks", fmt::format("must sum to the case's T = {}", time), args.chunks);
  if (ranks && static_cast<std::int64_t>(lengths.size()) != *ranks)
    throw ContractViolation("--chunks", fmt::format("must have one length per rank ({} ranks)", *ranks), args.chunks);
  return lengths;
}

}  // namespace

void reserve_report_file(const std::string& path, std::string_view flag, const std::vector<NamedPath>& others) {
  if (path.empty()) return;
  check_output_path(path, flag);
  for (const NamedPath& other : others) {
    if (other.path.empty()) continue;
    // The same file by another name (a link, "./"), or the same path of a file not there yet.
    std::error_code same_error, report_error, other_error;
    const bool same = std::filesystem::equivalent(path, other.path, same_error) ||
                      (std::filesystem::weakly_canonical(path, report_error) ==
                           std::filesystem::weakly_canonical(other.path, other_error) &&
                       !report_error && !other_error);
    if (same)
      throw ContractViolation(flag,
                              fmt::format("must not name the file of {} (the command reads or writes it; the report "
                                          "would overwrite it)",
                                          other.flag),
                              path);
  }
  // A report of an earlier run must not stand for this one if this one writes none.
  std::filesystem::remove(path);
}

int seqpar(const SeqparArgs& args) {
  check_outputs({{"--out", &args.out}});
  reserve_report_file(args.json, "--json", {{"case", args.case_path}, {"--out", args.out}});
  if (args.launcher != "in-process" && args.launcher != "env")
    throw ContractViolation("--launcher", "must be in-process or env", args.launcher);
  if (args.launcher == "env" && args.ranks)
    throw ContractViolation("--ranks", "is set by the launcher (WORLD_SIZE) with --launcher env",
                            std::to_string(*args.ranks));
  const Case problem = read_case(args.case_path);
  const Cell cell = checked_case(problem);
  if (problem.cu_seqlens)
    throw ContractViolation("cu_seqlens", "seqpar: packed cases are not built (packed segments across ranks)",
                            shape_string(problem.cu_seqlens->shape()));
  SolveArgs solve_args;
  solve_args.backend = "cpu";
  solve_args.max_iters = args.max_iters;
  solve_args.picard_adapt = args.picard_adapt;
  solve_args.picard_retry_atol = args.picard_retry_atol;
  NewtonConfig config = config_from(solve_args);
  if (args.k_max) config.k_max = *args.k_max;
  const std::int64_t time = problem.x.size(1);
  if (args.launcher == "in-process") {
    const std::vector<std::int64_t> lengths = seqpar_chunks(args, time, args.ranks);
    InProcessGroup group(static_cast<int>(lengths.size()));
    std::optional<SeqparRanks> result;
    group.run([&](Communicator& comm) {
      SeqparRanks mine = seqpar_rank(comm, cell, problem, config, lengths);
      if (comm.rank() == 0) result = std::move(mine);
    });
    return seqpar_report(args, cell, problem, config, lengths, *result);
  }
  // One process per GPU: every rank reads the case and solves its chunk; rank 0 judges and every
  // rank exits with its verdict.
  const std::unique_ptr<Communicator> comm = make_nccl_communicator(nccl_launch_from_env());
  const std::vector<std::int64_t> lengths = seqpar_chunks(args, time, comm->size());
  const SeqparRanks ranks = seqpar_rank(*comm, cell, problem, config, lengths);
  // Rank 0's judgement reaches every rank even when it raises (the others would wait otherwise).
  int code = kExitAgree;
  std::exception_ptr failure;
  if (comm->rank() == 0) {
    try {
      code = seqpar_report(args, cell, problem, config, lengths, ranks);
    } catch (...) {
      failure = std::current_exception();
      code = kExitInconclusiveOrRefused;
    }
  }
  const int verdict = static_cast<int>(comm->allreduce_max(static_cast<double>(code)));
  if (failure) std::rethrow_exception(failure);
  return verdict;
}

int make_case(const MakeCaseArgs& args) {
  if (!args.op.empty()) return make_op_case(args);
  check_outputs({{"--out", &args.out}});
  const DType dtype = parse_dtype(args.dtype, "--dtype");
  if (!is_floating(dtype))
    throw ContractViolation("--dtype", "must be one of f64, f32, f16, bf16", args.dtype);
  require_case_fits(args, dtype);
  if (args.batch < 1) throw ContractViolation("--batch", "must be >= 1", std::to_string(args.batch));
  if (args.time < 1) throw ContractViolation("--time", "must be >= 1", std::to_string(args.time));
  if (args.eps && args.cell != "slstm")
    throw ContractViolation("--eps", "is a ParaSLSTM argument (--cell slstm)", fmt::format("{}", *args.eps));
  const bool matrix_state = cell_spec(args.cell, args.mix, "--cell").kind == CellKind::m2rnn;
  const std::int64_t d_h = args.d_h.value_or(matrix_state ? 0 : 16);  // m2rnn: k_dim·v_dim
  Cell cell = Cell::initialise({.cell = args.cell,
                                .mix = args.mix,
                                .d_in = args.d_in,
                                .d_h = d_h,
                                .n_heads = args.n_heads,
                                .max_recurrent_norm =
                                    args.max_recurrent_norm.empty()
                                        ? cell_spec(args.cell, args.mix, "--cell", args.gate_mix).default_cap
                                        : parse_cap(args.max_recurrent_norm),
                                .weight_std = args.weight_std,
                                .eps = args.eps.value_or(CellOptions{}.eps),
                                .gate_mix = args.gate_mix,
                                .beta = args.beta,
                                .k_dim = args.k_dim,
                                .v_dim = args.v_dim},
                               dtype, args.seed);
  const Tensor x = generated_case_input(dtype, args.batch, args.time, args.d_in, args.seed);
  SplitMix64 rng(args.seed ^ 0x5bd1e995ULL);  // h0 draws, after the input's stream
  std::optional<Tensor> cu;
  std::int64_t states = args.batch;
  if (!args.cu_seqlens.empty()) {
    const auto values = parse_int_list(args.cu_seqlens, "--cu-seqlens");
    Tensor c(DType::i64, {static_cast<std::int64_t>(values.size())});
    for (std::size_t i = 0; i < values.size(); ++i)
      c.store({static_cast<std::int64_t>(i)}, static_cast<double>(values[i]));
    try {
      validate_cu_seqlens(c, args.time);
    } catch (const ContractViolation& e) {
      throw ContractViolation("--cu-seqlens", e.rule(), e.value());
    }
    if (args.batch != 1)
      throw ContractViolation("--batch", "must be 1 with --cu-seqlens", std::to_string(args.batch));
    states = c.numel() - 1;
    cu = c;
  }
  std::optional<Tensor> h0;
  if (args.h0_std) {
    Shape shape = {states};  // (S, d_h), (S, slots, d_h) or rwkv7's (S, n_heads, d, d)
    for (std::int64_t extent : cell.state_shape()) shape.push_back(extent);
    Tensor h(dtype, shape);
    const std::int64_t n = h.numel();
    Tensor flat = h.reshaped({n});
    for (std::int64_t i = 0; i < n; ++i) flat.store({i}, rng.normal(0.0, *args.h0_std));
    if (cell.name() == "slstm")  // the normalizer n0 (slot 1) of an sLSTM state is >= 0
      for (std::int64_t b = 0; b < states; ++b)
        for (std::int64_t c = 0; c < cell.d_h(); ++c) h.store({b, 1, c}, std::abs(h.load({b, 1, c})));
    h0 = h;
  }
  Case problem = cell.make_case(x, h0);
  problem.cu_seqlens = cu;
  problem.metadata["seed"] = std::to_string(args.seed);
  if (args.weight_std) problem.metadata["weight_std"] = fmt::format("{}", *args.weight_std);
  // A written case is one every command accepts: the same reading as theirs, the flag named.
  for (const auto& [name, tensor] : problem.parameters)
    if (const auto where = describe_first_non_finite(tensor, "parameter '" + name + "'"))
      throw ContractViolation("--weight-std", fmt::format("must give finite parameters in {}", args.dtype), *where);
  if (h0)
    if (const auto where = describe_first_non_finite(*h0, "h0"))
      throw ContractViolation("--h0-std", fmt::format("must give a finite h0 in {}", args.dtype), *where);
  try {
    (void)checked_case(problem);
  } catch (const ContractViolation& e) {
    const std::map<std::string, std::string> flags = {
        {"cu_seqlens", "--cu-seqlens"}, {"h0", "--h0-std"}, {"eps", "--eps"}, {"n_heads", "--n-heads"},
        {"beta", "--beta"}, {"x", "--batch, --time, --d-in"}};
    const auto flag = flags.find(e.argument());
    if (flag == flags.end()) throw;
    throw ContractViolation(flag->second, e.rule(), e.value());
  }
  write_case(args.out, problem);
  std::cout << fmt::format("wrote {}: cell {} dtype {} x {} seed {}\n", args.out, args.cell,
                           dtype_name(dtype), shape_string(x.shape()), args.seed);
  return 0;
}

int kstar(const KstarArgs& args) {
  reserve_report_file(args.json, "--json");
  KstarOptions options;
  options.cell = args.cell;
  options.mix = args.mix;
  options.n_heads = args.n_heads;
  options.dtype = parse_dtype(args.dtype, "--dtype");
  options.times = parse_int_list(args.times, "--T");
  options.seeds = args.seeds;
  options.batch = args.batch;
  options.d_in = args.d_in;
  options.d_h = args.d_h;
  options.k_dim = args.k_dim;
  options.v_dim = args.v_dim;
  options.k_limit = args.k_limit;
  options.weight_std = args.weight_std;
  options.max_recurrent_norm = parse_cap(args.max_recurrent_norm);
  options.picard_iters = args.picard_iters;
  options.picard_adapt = parse_picard_adapt(args.picard_adapt);
  options.newton_backtrack = args.newton_backtrack;
  options.coords = parse_coords(args.coords);
  Progress progress("kstar", static_cast<std::int64_t>(options.times.size()) * options.seeds, "cases");
  options.progress = [&](const std::string& line) { progress.advance(line); };
  const KstarTable table = measure_kstar(options);
  progress.finish();
  std::cout << fmt::format("K*(T) for {} {} (tau {:g}, {} seeds, B={} d_in={} {}):\n", args.cell,
                           args.dtype, table.tau, args.seeds, args.batch, args.d_in,
                           args.k_dim ? fmt::format("k_dim={} v_dim={}", *args.k_dim, args.v_dim.value_or(0))
                                      : fmt::format("d_h={}", args.d_h));
  std::cout << "T\tmax K*\tshipped K\n";
  for (std::size_t i = 0; i < table.max_kstar_by_t.size(); ++i)
    std::cout << fmt::format("{}\t{}\t{}\n", table.max_kstar_by_t[i].first, table.max_kstar_by_t[i].second,
                             table.shipped_k_by_t[i].second);
  write_json(args.json, table.to_json());
  return 0;
}

int oracle(const SolveArgs& args) {
  if (is_op_case_file(args.case_path)) return op_oracle(args);
  check_outputs({{"--out", &args.out}});
  const Case problem = read_case(args.case_path);
  (void)checked_case(problem);
  const reference::OracleOptions options{
      .certify = true,
      .certify_budget = args.certify_budget.value_or(default_certify_budget(problem.dtype())),
      .seed = args.seed};
  Progress progress("oracle", args.grad ? 2 : 1, "phases");
  progress.update(0, "unroll and certify");
  const auto result = reference::oracle_sequential(problem, options);
  progress.advance(args.grad ? "gradients" : "");
  // The certification rule of verify: an uncertified oracle is no answer, and nothing is written.
  const auto refuse = [&](const std::string& why) {
    std::cerr << fmt::format("pararnn: oracle: {}; {} not written\n", why, args.out);
    return kExitInconclusiveOrRefused;
  };
  if (const auto why = certification_failure(result.finite, result.self_check_delta, result.certified_chain_steps,
                                             problem, "trajectory"))
    return refuse(*why);
  std::map<std::string, Tensor> tensors = {{"H", result.H}};
  std::map<std::string, std::string> metadata = {
      {"producer", "pararnn oracle"},
      {"oracle_type", result.type},
      {"oracle_digits", std::to_string(result.digits)},
      {"certifier_type", result.certifier_type},
      {"self_check_delta", fmt::format("{:.6e}", result.self_check_delta)},
      {"certified_all_chains", result.certified_all_chains ? "true" : "false"}};
  if (const auto version = problem.meta("cell_version")) metadata["cell_version"] = *version;
  if (args.grad) {
    const auto grads = reference::oracle_gradients(problem, options);
    progress.advance();
    if (const auto why = certification_failure(grads.finite, grads.self_check_delta, grads.certified_chain_steps,
                                               problem, "gradients"))
      return refuse(*why);
    for (const auto& [name, grad] : grads.tensors) tensors.emplace("grad." + name, grad);
    metadata["gradient_self_check_delta"] = fmt::format("{:.6e}", grads.self_check_delta);
    metadata["gradient_cotangent"] = problem.grad_H ? "grad.H" : "ones";
  }
  write_safetensors(args.out, tensors, metadata);
  std::cout << fmt::format("wrote {}: H {} f64{}, oracle {} certified by {} (self-check delta {:.3e})\n",
                           args.out, shape_string(result.H.shape()),
                           args.grad ? " and its gradients" : "", result.type,
                           result.certifier_type, result.self_check_delta);
  return 0;
}

int diagnose(const DiagnoseArgs& args) {
  reserve_report_file(args.json, "--json", {{"case", args.case_path}});
  const Case problem = read_case(args.case_path);
  Progress progress("diagnose", 2, "phases");
  std::int64_t phases_done = 0;
  const Diagnosis d = diagnose_case(problem, {.window = args.window,
                                              .chains = args.chains,
                                              .seed = args.seed,
                                              .certify_budget = args.certify_budget,
                                              .progress = [&](std::string_view phase) {
                                                progress.update(phases_done++, phase);
                                              }});
  progress.finish();
  if (!d.estimate) {
    std::cerr << fmt::format("pararnn: diagnose: inconclusive: {}{}\n", d.inconclusive_reason,
                             args.json.empty() ? "" : fmt::format("; {} not written", args.json));
    return kExitInconclusiveOrRefused;
  }
  const reference::LyapunovEstimate& e = *d.estimate;
  const std::string unit_kind = e.method == "Benettin dense" ? "chains" : "(chain, channel) units";
  std::cout << fmt::format("case: {} (cell {}, dtype {}, trajectory {})\n", args.case_path, problem.cell,
                           dtype_name(problem.dtype()), shape_string(d.trajectory_shape));
  std::cout << fmt::format("method: {} (Jacobian block {}x{})\n", e.method, e.block, e.block);
  std::cout << fmt::format("lyapunov exponent: max {:.6g}, median {:.6g}, positive in {} of {} {} ({:.3g})\n",
                           e.max_exponent, e.median_exponent, d.positive_units(), e.units.size(), unit_kind,
                           e.fraction_positive);
  std::cout << fmt::format("stretch: {:.6g} (largest log growth over W = {} steps{}: an error grows x{:.3g}) at {}\n",
                           e.max_stretch, e.window, d.window_capped() ? ", or a shorter chain's length" : "",
                           std::exp(e.max_stretch), e.max_stretch_chain);
  std::cout << "predicted K: " << d.predicted_k().describe() << " (docs/kstar.md)\n";
  std::cout << fmt::format("chains: {} of {}{} (seed {}), {} Jacobian steps\n", e.chains_used, e.chains_total,
                           e.all_chains ? ", all" : ", sampled", args.seed, e.jacobian_steps);
  std::cout << fmt::format("time: {:.3f} s (oracle {:.3f} s, Jacobians {:.3f} s)\n", d.total_seconds, d.oracle_seconds,
                           d.jacobian_seconds);
  if (!args.json.empty()) {
    nlohmann::ordered_json j = {{"schema_version", 1}, {"command", "diagnose"}, {"case", args.case_path}};
    const nlohmann::ordered_json estimate = d.to_json();
    for (const auto& [key, value] : estimate.items()) j[key] = value;
    j["context"] = reports::context_block(build_context(), args.argv, {args.seed});
    write_json(args.json, j);
    std::cout << "report: " << args.json << "\n";
  }
  return 0;
}

int solve(const SolveArgs& args) {
  if (is_op_case_file(args.case_path)) return op_solve(args);
  check_outputs({{"--out", &args.out}});
  const Case problem = read_case(args.case_path);
  const Cell cell = checked_case(problem);
  const NewtonConfig config = config_from(args);
  std::map<std::string, Tensor> tensors;
  NewtonStats stats;
  Tensor H;
  if (args.grad) {
    // Gradients of L = Σ grad.H ⊙ H (the case's cotangent, or ones).
    const NewtonForward forward = newton_forward(cell, problem.x, config, apply_options(problem));
    H = forward.H;
    stats = forward.stats;
    Tensor g = problem.grad_H ? *problem.grad_H : Tensor(cell.dtype(), H.shape());
    if (!problem.grad_H) {
      Tensor flat = g.reshaped({g.numel()});
      for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0);
    }
    const NewtonGradients grads = newton_backward(cell, problem.x, forward, g, config, apply_options(problem));
    std::cout << fmt::format("held between forward and backward: {} bytes (recompute={})\n",
                             forward.saved_bytes(), config.recompute);
    tensors.emplace("grad.x", grads.x);
    if (grads.h0) tensors.emplace("grad.h0", *grads.h0);
    for (const auto& [name, grad] : grads.parameters) tensors.emplace("grad." + name, grad);
  } else {
    H = newton_apply(cell, problem.x, config, apply_options(problem), &stats);
  }
  tensors.emplace("H", H);
  write_safetensors(args.out, tensors,
                    {{"producer", "pararnn solve"},
                     {"backend", std::string(solve_backend_name(stats.scan_backend))},
                     {"strategy", std::string(solve_strategy_name(stats.strategy))},
                     {"newton_iters", std::to_string(stats.iters)},
                     {"max_residual", fmt::format("{:.6e}", stats.max_residual)},
                     {"k_source", std::string(k_source_name(stats.k.source))}});
  std::cout << fmt::format("wrote {}: H {} {}, backend {} ({}), iters {}, max_residual {:.3e}\n",
                           args.out, shape_string(H.shape()), dtype_name(H.dtype()),
                           solve_backend_name(stats.scan_backend), solve_strategy_name(stats.strategy), stats.iters,
                           stats.max_residual);
  return 0;
}

int verify(const SolveArgs& args) {
  reserve_report_file(args.json, "--json", {{"case", args.case_path}});
  const Case problem = read_case(args.case_path);
  const Cell cell = checked_case(problem);
  VerifyOptions options;
  options.config = config_from(args);
  if (problem.h0) options.h0 = problem.h0->view();
  if (problem.cu_seqlens) options.cu_seqlens = problem.cu_seqlens->view();
  options.atol = args.atol;
  options.seed = args.seed;
  options.certify_budget = args.certify_budget;
  options.gradients = args.grad;
  options.cell_version = problem.meta("cell_version").value_or("");
  if (problem.grad_H) options.grad_H = problem.grad_H->view();
  options.repro_command = fmt::format("pararnn verify {} --backend {} --max-iters {}{}{}",
                                      args.case_path, args.backend, args.max_iters,
                                      args.coords != "native" ? " --coords " + args.coords : "",
                                      args.grad ? " --grad" : "");
  Progress progress("verify", args.grad ? 5 : 4, "phases");
  std::int64_t phases_done = 0;
  const JudgeHooks hooks{.progress = [&](std::string_view phase) { progress.update(phases_done++, phase); }};
  const AgreementReport report = verify_agreement(cell, problem.x, options, hooks);
  progress.update(phases_done);
  progress.finish();
  std::cout << report.summary() << "\n";
  if (report.verdict != Verdict::agree) std::cout << report.failure_message() << "\n";
  write_json(args.json, report.to_json());
  if (!args.json.empty()) std::cout << "report: " << args.json << "\n";
  if (report.verdict == Verdict::disagree)
    std::cout << fmt::format("bug bundle: pararnn bug-bundle {} --backend {} --max-iters {} --seed {}{}{} --out {}.bundle.tar.gz\n",
                             args.case_path, args.backend, args.max_iters, args.seed,
                             args.certify_budget ? fmt::format(" --certify-budget {}", *args.certify_budget) : "",
                             args.grad ? " --grad" : "", std::filesystem::path(args.case_path).stem().string());
  return report.verdict == Verdict::agree      ? kExitAgree
         : report.verdict == Verdict::disagree ? kExitDisagree
                                               : kExitInconclusiveOrRefused;
}

int compare(const SolveArgs& args, const std::string& trajectory_path, const std::string& gradients_path) {
  // Before the case is read (an op case or a cell case): a case that cannot be read is refused too.
  reserve_report_file(args.json, "--json",
                      {{"case", args.case_path}, {"--trajectory", trajectory_path}, {"--gradients", gradients_path}});
  if (is_op_case_file(args.case_path)) return op_compare(args, trajectory_path, gradients_path);
  const Case problem = read_case(args.case_path);
  const SafetensorsFile theirs = read_safetensors(trajectory_path);
  auto it = theirs.tensors.find("H");
  if (it == theirs.tensors.end())
    throw CaseFileError(fmt::format("{}: tensor 'H': missing (a trajectory file holds H)",
                                    trajectory_path));
  // The gradients: those of --gradients, or the trajectory file's own (docs/choices.md). A
  // trajectory file beside a separate --gradients file holds H only.
  const bool separate = !gradients_path.empty() && !(std::filesystem::exists(gradients_path) &&
                                                      std::filesystem::equivalent(gradients_path, trajectory_path));
  std::optional<SafetensorsFile> gradient_file;
  if (separate) gradient_file = read_safetensors(gradients_path);
  ExternalGradients gradients{.source = separate ? gradients_path : trajectory_path};
  for (const auto& [name, tensor] : theirs.tensors) {
    if (name == "H") continue;
    if (separate)
      throw ContractViolation(fmt::format("{}: tensor '{}'", trajectory_path, name),
                              fmt::format("is not H: with --gradients {} a trajectory file holds H only", gradients_path),
                              "an unexpected tensor");
    gradients.tensors.emplace(name, tensor.view());
  }
  if (gradient_file)
    for (const auto& [name, tensor] : gradient_file->tensors) gradients.tensors.emplace(name, tensor.view());
  const bool judge_gradients = !gradients_path.empty() || !gradients.tensors.empty();
  VerifyOptions options;
  options.atol = args.atol;
  options.seed = args.seed;
  options.certify_budget = args.certify_budget;
  options.repro_command =
      fmt::format("pararnn compare {} --trajectory {}{}", args.case_path, trajectory_path,
                  gradients_path.empty() ? "" : " --gradients " + gradients_path);
  const AgreementReport report =
      compare_trajectory(problem, it->second, options,
                         judge_gradients ? std::optional(gradients) : std::nullopt);
  std::cout << report.summary() << "\n";
  if (report.verdict != Verdict::agree) std::cout << report.failure_message() << "\n";
  write_json(args.json, report.to_json());
  return report.verdict == Verdict::agree      ? kExitAgree
         : report.verdict == Verdict::disagree ? kExitDisagree
                                               : kExitInconclusiveOrRefused;
}

int bug_bundle(const BundleArgs& args) {
  check_outputs({{"--out", &args.out}});
  nightly::BundleOptions options;
  options.case_path = args.case_path;
  if (!args.trajectory.empty()) options.trajectory = args.trajectory;
  SolveArgs solve_args;
  solve_args.backend = args.backend;
  solve_args.max_iters = args.max_iters;
  options.config = config_from(solve_args);
  options.backend = args.backend;
  options.max_iters = args.max_iters;
  options.seed = args.seed;
  options.certify_budget = args.certify_budget;
  options.gradients = args.grad;
  options.minimise = !args.no_minimise;
  options.out = args.out;
  options.max_bytes = args.max_bytes;
  options.env_line = env_line();
  options.command_line = fmt::format("pararnn bug-bundle {}{} --backend {} --max-iters {} --seed {}{}{} --out {}",
                                     args.case_path, args.trajectory.empty() ? "" : " --trajectory " + args.trajectory,
                                     args.backend, args.max_iters, args.seed,
                                     args.certify_budget ? fmt::format(" --certify-budget {}", *args.certify_budget) : "",
                                     args.grad ? " --grad" : "", args.out);
  Progress progress("bug-bundle", 0, "steps");
  options.progress = [&](const std::string& line) { progress.advance(line); };
  const nightly::BundleResult r = nightly::make_bug_bundle(options);
  progress.finish();
  std::cout << fmt::format("wrote {} ({} bytes, folder {}/): verdict {}{}, minimised case verdict {}\n", r.out.string(),
                           r.bytes, r.folder, verdict_name(r.verdict),
                           r.compare_verdict ? fmt::format(", their trajectory {}", verdict_name(*r.compare_verdict)) : "",
                           args.no_minimise ? "(not minimised)" : std::string(verdict_name(r.minimised_verdict)));
  for (const auto& line : r.minimisation) std::cout << "  minimise: " << line << "\n";
  std::cout << fmt::format("reproduce: tar -xzf {} && cd {} && see README.md\n", r.out.string(), r.folder);
  return 0;
}

}  // namespace pararnn::tools
