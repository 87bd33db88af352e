// Subcommand bodies: read a case, call the library, print, write outputs (atomically, through
// write_safetensors), return the exit code.
#include "commands.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn::tools {
namespace {

std::optional<double> parse_cap(const std::string& text) {
  if (text == "none" || text == "None") return std::nullopt;
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw ContractViolation("--max-recurrent-norm", "must be a number or 'none'", text);
}

NewtonConfig config_from(const SolveArgs& args) {
  NewtonConfig config;
  config.scan_backend = parse_scan_backend(args.backend);
  if (args.max_iters != "none" && args.max_iters != "None") {
    try {
      std::size_t used = 0;
      config.max_iters = std::stoll(args.max_iters, &used);
      if (used != args.max_iters.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw ContractViolation("--max-iters", "must be a non-negative integer or 'none'",
                              args.max_iters);
    }
  }
  return config;
}

std::vector<std::int64_t> parse_int_list(const std::string& text, const char* argument) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoll(item));
    } catch (const std::exception&) {
      throw ContractViolation(argument, "must be a comma-separated list of integers", text);
    }
  }
  return out;
}

ApplyOptions apply_options(const Case& problem) {
  ApplyOptions options;
  if (problem.h0) options.h0 = problem.h0->view();
  if (problem.cu_seqlens) options.cu_seqlens = problem.cu_seqlens->view();
  return options;
}

void refuse_grad(bool grad) {
  if (grad)
    throw UnsupportedPath(
        "--grad: gradients (newton_backward and the oracle's BPTT) are not in this build yet");
}

void write_json(const std::string& path, const nlohmann::ordered_json& json) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << json.dump(2) << "\n";
    if (!out) throw CaseFileError(fmt::format("{}: cannot write the JSON report", path));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

int make_case(const MakeCaseArgs& args) {
  if (args.out.empty()) throw ContractViolation("--out", "is required", "(empty)");
  const DType dtype = parse_dtype(args.dtype, "--dtype");
  if (!is_floating(dtype))
    throw ContractViolation("--dtype", "must be one of f64, f32, f16, bf16", args.dtype);
  if (args.batch < 1) throw ContractViolation("--batch", "must be >= 1", std::to_string(args.batch));
  if (args.time < 1) throw ContractViolation("--time", "must be >= 1", std::to_string(args.time));
  Cell cell = Cell::initialise({.cell = args.cell,
                                .mix = args.mix,
                                .d_in = args.d_in,
                                .d_h = args.d_h,
                                .n_heads = args.n_heads,
                                .max_recurrent_norm = parse_cap(args.max_recurrent_norm),
                                .weight_std = args.weight_std},
                               dtype, args.seed);
  // Inputs from a stream of its own, so the parameters do not depend on the input size.
  std::mt19937_64 rng(args.seed ^ 0x9e3779b97f4a7c15ULL);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor x(dtype, {args.batch, args.time, args.d_in});
  for (std::int64_t b = 0; b < args.batch; ++b)
    for (std::int64_t t = 0; t < args.time; ++t)
      for (std::int64_t i = 0; i < args.d_in; ++i) x.store({b, t, i}, normal(rng));
  std::optional<Tensor> cu;
  std::int64_t states = args.batch;
  if (!args.cu_seqlens.empty()) {
    const auto values = parse_int_list(args.cu_seqlens, "--cu-seqlens");
    Tensor c(DType::i64, {static_cast<std::int64_t>(values.size())});
    for (std::size_t i = 0; i < values.size(); ++i)
      c.store({static_cast<std::int64_t>(i)}, static_cast<double>(values[i]));
    validate_cu_seqlens(c, args.time);
    if (args.batch != 1)
      throw ContractViolation("--batch", "must be 1 with --cu-seqlens", std::to_string(args.batch));
    states = c.numel() - 1;
    cu = c;
  }
  std::optional<Tensor> h0;
  if (args.h0_std) {
    Shape shape = cell.slots() == 1 ? Shape{states, args.d_h} : Shape{states, cell.slots(), args.d_h};
    Tensor h(dtype, shape);
    std::normal_distribution<double> h_normal(0.0, *args.h0_std);
    const std::int64_t n = h.numel();
    Tensor flat = h.reshaped({n});
    for (std::int64_t i = 0; i < n; ++i) flat.store({i}, h_normal(rng));
    h0 = h;
  }
  Case problem = cell.make_case(x, h0);
  problem.cu_seqlens = cu;
  problem.metadata["seed"] = std::to_string(args.seed);
  if (args.weight_std) problem.metadata["weight_std"] = fmt::format("{}", *args.weight_std);
  write_case(args.out, problem);
  std::cout << fmt::format("wrote {}: cell {} dtype {} x {} seed {}\n", args.out, args.cell,
                           dtype_name(dtype), shape_string(x.shape()), args.seed);
  return 0;
}

int oracle(const SolveArgs& args) {
  refuse_grad(args.grad);
  if (args.out.empty()) throw ContractViolation("--out", "is required", "(empty)");
  const Case problem = read_case(args.case_path);
  const auto result = reference::oracle_sequential(
      problem, {.certify = true, .certify_budget = args.certify_budget, .seed = args.seed});
  write_safetensors(args.out, {{"H", result.H}},
                    {{"producer", "pararnn oracle"},
                     {"oracle_type", result.type},
                     {"oracle_digits", std::to_string(result.digits)},
                     {"certifier_type", result.certifier_type},
                     {"self_check_delta", fmt::format("{:.6e}", result.self_check_delta)},
                     {"certified_all_chains", result.certified_all_chains ? "true" : "false"}});
  std::cout << fmt::format("wrote {}: H {} f64, oracle {} certified by {} (self-check delta {:.3e})\n",
                           args.out, shape_string(result.H.shape()), result.type,
                           result.certifier_type, result.self_check_delta);
  return result.finite ? 0 : kExitInconclusiveOrRefused;
}

int solve(const SolveArgs& args) {
  refuse_grad(args.grad);
  if (args.out.empty()) throw ContractViolation("--out", "is required", "(empty)");
  const Case problem = read_case(args.case_path);
  const Cell cell = Cell::from_case(problem);
  NewtonStats stats;
  const Tensor H = newton_apply(cell, problem.x, config_from(args), apply_options(problem), &stats);
  write_safetensors(args.out, {{"H", H}},
                    {{"producer", "pararnn solve"},
                     {"backend", stats.scan_backend},
                     {"newton_iters", std::to_string(stats.iters)},
                     {"max_residual", fmt::format("{:.6e}", stats.max_residual)},
                     {"k_source", stats.k.source}});
  std::cout << fmt::format("wrote {}: H {} {}, backend {}, iters {}, max_residual {:.3e}\n",
                           args.out, shape_string(H.shape()), dtype_name(H.dtype()),
                           stats.scan_backend, stats.iters, stats.max_residual);
  return 0;
}

int verify(const SolveArgs& args) {
  refuse_grad(args.grad);
  const Case problem = read_case(args.case_path);
  const Cell cell = Cell::from_case(problem);
  VerifyOptions options;
  options.config = config_from(args);
  if (problem.h0) options.h0 = problem.h0->view();
  if (problem.cu_seqlens) options.cu_seqlens = problem.cu_seqlens->view();
  options.atol = args.atol;
  options.seed = args.seed;
  options.certify_budget = args.certify_budget;
  options.repro_command = fmt::format("pararnn verify {} --backend {} --max-iters {}",
                                      args.case_path, args.backend, args.max_iters);
  const AgreementReport report = verify_agreement(cell, problem.x, options);
  std::cout << report.summary() << "\n";
  if (report.verdict != Verdict::agree) std::cout << report.failure_message() << "\n";
  write_json(args.json, report.to_json());
  if (!args.json.empty()) std::cout << "report: " << args.json << "\n";
  return report.verdict == Verdict::agree      ? kExitAgree
         : report.verdict == Verdict::disagree ? kExitDisagree
                                               : kExitInconclusiveOrRefused;
}

int compare(const SolveArgs& args, const std::string& trajectory_path) {
  const Case problem = read_case(args.case_path);
  const SafetensorsFile theirs = read_safetensors(trajectory_path);
  auto it = theirs.tensors.find("H");
  if (it == theirs.tensors.end())
    throw CaseFileError(fmt::format("{}: tensor 'H': missing (a trajectory file holds H)",
                                    trajectory_path));
  VerifyOptions options;
  options.atol = args.atol;
  options.seed = args.seed;
  options.certify_budget = args.certify_budget;
  options.repro_command =
      fmt::format("pararnn compare {} --trajectory {}", args.case_path, trajectory_path);
  const AgreementReport report = compare_trajectory(problem, it->second, options);
  std::cout << report.summary() << "\n";
  if (report.verdict != Verdict::agree) std::cout << report.failure_message() << "\n";
  write_json(args.json, report.to_json());
  return report.verdict == Verdict::agree      ? kExitAgree
         : report.verdict == Verdict::disagree ? kExitDisagree
                                               : kExitInconclusiveOrRefused;
}

}  // namespace pararnn::tools
