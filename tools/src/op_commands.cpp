// The op-case side of make-case, oracle, solve and compare (issue 56, docs/ops/README.md).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "commands.hpp"
#include "pararnn/contracts/op_judge.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/op_case.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::tools {
namespace {

std::vector<std::int64_t> parse_cu(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      throw ContractViolation("--cu-seqlens", "must be comma-separated integers like 0,5,12", text);
    out.push_back(value);
    start = end + 1;
  }
  return out;
}

int exit_code(Verdict v) {
  return v == Verdict::agree ? kExitAgree : v == Verdict::disagree ? kExitDisagree : kExitInconclusiveOrRefused;
}

}  // namespace

bool is_op_case_file(const std::string& path) { return is_op_file(read_safetensors(path)); }

int make_op_case(const MakeCaseArgs& args) {
  if (args.out.empty()) throw ContractViolation("--out", "is required", "empty");
  check_output_path(args.out, "--out");
  OpGenerateOptions o{.op = args.op,
                      .variant = args.variant,
                      .dtype = parse_dtype(args.dtype, "--dtype"),
                      .batch = args.batch,
                      .time = args.time,
                      .heads = args.n_heads.value_or(2),
                      .k_dim = args.k_dim.value_or(16),
                      .v_dim = args.v_dim.value_or(args.op == "selective_scan" ? 1 : 16),
                      .seed = args.seed,
                      .decay = args.decay,
                      .key_scale = args.key_scale,
                      .h0_std = args.h0_std,
                      .scale = args.scale,
                      .qk_l2norm = args.qk_l2norm};
  (void)op_spec(args.op);  // "op: must be one of ..." before anything else
  const long double bytes = static_cast<long double>(o.batch) * o.time * o.heads * (4.0L * o.k_dim + o.v_dim) * 8.0L;
  if (bytes > 64.0L * (1ULL << 30))
    throw ContractViolation("--batch, --time, --n-heads, --k-dim, --v-dim", "must give a case below 64 GiB while generated",
                            fmt::format("{:.3g} GiB", static_cast<double>(bytes / (1ULL << 30))));
  if (!args.cu_seqlens.empty()) o.cu_seqlens = parse_cu(args.cu_seqlens);
  OpCase problem;
  try {
    problem = generate_op_case(o);
  } catch (const ContractViolation& e) {
    // Name the flag, not the generator's field.
    const std::map<std::string, std::string> flags = {{"decay", "--decay"}, {"key_scale", "--key-scale"},
                                                      {"dtype", "--dtype"}, {"op", "--op"},
                                                      {"use_qk_l2norm_in_kernel", "--qk-l2norm"}, {"h0_std", "--h0-std"},
                                                      {"scale", "--scale"}, {"v_dim", "--v-dim"}};
    const auto flag = flags.find(e.argument());
    if (flag != flags.end()) throw ContractViolation(flag->second, e.rule(), e.value());
    if (e.argument().find("cu_seqlens") != std::string::npos) throw ContractViolation("--cu-seqlens", e.rule(), e.value());
    if (e.argument().find("initial_state") != std::string::npos) throw ContractViolation("--h0-std", e.rule(), e.value());
    throw;
  }
  for (const auto& [name, tensor] : problem.inputs)
    if (const auto where = describe_first_non_finite(tensor, name))
      throw ContractViolation("--key-scale", fmt::format("must give finite inputs in {}", args.dtype), *where);
  write_op_case(args.out, problem);
  const std::string first(op_spec(problem.op).inputs.front().name);
  std::cout << fmt::format("wrote {}: op {} ({}) dtype {} {} {} seed {}\n", args.out, problem.op, problem.variant,
                           args.dtype, first, shape_string(problem.input(first).shape()), args.seed);
  return 0;
}

int op_oracle(const SolveArgs& args) {
  check_output_path(args.out, "--out");
  const OpCase problem = read_op_case(args.case_path);
  const std::int64_t budget = args.certify_budget.value_or(default_certify_budget(problem.dtype()));
  const reference::OpOracleResult r =
      reference::oracle_op(problem, {.certify = budget > 0, .certify_budget = budget, .seed = args.seed});
  const double band = tolerance_for({.dtype = problem.dtype(), .metric = Metric::oracle_self_check}).atol;
  std::string why;
  if (!r.finite) why = "the oracle's outputs are not finite";
  else if (r.certified_chains.empty()) why = fmt::format("the oracle is not certified (certify budget {})", budget);
  else if (!(r.self_check_delta <= band)) why = fmt::format("self-check {:.3e} above its band {:g}", r.self_check_delta, band);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata = {
      {"producer", "pararnn oracle"}, {"op", problem.op}, {"oracle_type", r.type}, {"certifier_type", r.certifier_type},
      {"self_check_delta", fmt::format("{:.6e}", r.self_check_delta)},
      {"certified_all_chains", r.certified_all_chains ? "true" : "false"}};
  std::string gradients_line;
  if (why.empty() && args.grad) {
    // The gradients of L (the case's grad.<output> cotangents, or the default loss), by the same
    // certification rule as the outputs.
    const reference::OpOracleGradients g =
        reference::oracle_op_gradients(problem, {.certify = budget > 0, .certify_budget = budget, .seed = args.seed});
    if (!g.finite) why = "the oracle's gradients are not finite";
    else if (g.certified_chains.empty()) why = fmt::format("the oracle's gradients are not certified (certify budget {})", budget);
    else if (!(g.self_check_delta <= band))
      why = fmt::format("gradient self-check {:.3e} above its band {:g}", g.self_check_delta, band);
    for (const auto& [name, t] : g.tensors) tensors.emplace("grad." + name, t);
    metadata["gradient_self_check_delta"] = fmt::format("{:.6e}", g.self_check_delta);
    metadata["gradient_certified_all_chains"] = g.certified_all_chains ? "true" : "false";
    gradients_line = fmt::format("; {} gradient(s) of L = {}, certified on {} chain(s) (self-check delta {:.3e})",
                                 g.tensors.size(), problem.cotangents.empty() ? "the default loss" : "the case's cotangents",
                                 g.certified_chains.size(), g.self_check_delta);
  }
  if (!why.empty()) {
    std::cerr << fmt::format("pararnn: oracle: {}; {} not written\n", why, args.out);
    return kExitInconclusiveOrRefused;
  }
  for (const std::string& name : op_output_names(problem)) tensors.emplace(name, r.outputs.at(name));
  write_safetensors(args.out, tensors, metadata);
  std::cout << fmt::format("wrote {}: {} {} f64, op {}, oracle {} certified by {} on {} chain(s) (self-check delta {:.3e}){}\n",
                           args.out, op_output_names(problem).front(), shape_string(problem.o_shape()), problem.op, r.type, r.certifier_type,
                           r.certified_chains.size(), r.self_check_delta, gradients_line);
  return 0;
}

int op_solve(const SolveArgs& args) {
  check_output_path(args.out, "--out");
  const OpCase problem = read_op_case(args.case_path);
  std::map<std::string, Tensor> answer = reference::op_sequential_in_dtype(problem);
  if (args.grad)  // the same-dtype floor of the gradients: the reverse loop in the case's dtype
    for (const auto& [name, t] : reference::op_gradients_in_dtype(problem)) answer.emplace("grad." + name, t);
  write_safetensors(args.out, answer, {{"producer", "pararnn solve (op: the sequential loop in the case's dtype)"}, {"op", problem.op}});
  std::cout << fmt::format("wrote {}: {} {} {} (op {}: sequential loop, compute {}){}\n", args.out,
                           op_output_names(problem).front(), shape_string(problem.o_shape()), dtype_name(problem.dtype()), problem.op,
                           problem.dtype() == DType::f64 ? "f64" : "f32",
                           args.grad ? ", with the gradients of its reverse loop" : "");
  return 0;
}

int op_compare(const SolveArgs& args, const std::string& answer_path, const std::string& gradients_path) {
  // compare() has done this before reading the case; again here, so that no caller skips it.
  reserve_report_file(args.json, "--json",
                      {{"case", args.case_path}, {"--trajectory", answer_path}, {"--gradients", gradients_path}});
  if (args.atol)
    throw ContractViolation("--atol",
                            "is not taken by an op case: its tau is relative, Metric::op_output of the case's dtype "
                            "(docs/ops/README.md, \"Verdicts\")",
                            fmt::format("{:g}", *args.atol));
  const OpCase problem = read_op_case(args.case_path);
  SafetensorsFile theirs = read_safetensors(answer_path);
  // --gradients naming the answer file itself: the answer's own grad.* (as for cells); either way
  // the gradients were asked for, so an answer without them is "missing", never Agree.
  std::error_code same_error;
  const bool own_gradients = !gradients_path.empty() && std::filesystem::equivalent(gradients_path, answer_path, same_error);
  if (!gradients_path.empty() && !own_gradients) {
    // The gradients of a separate file (as for cells): grad.<input> tensors only, the answer
    // file then holding none of its own.
    for (const auto& [name, t] : theirs.tensors)
      if (name.starts_with("grad."))
        throw ContractViolation(fmt::format("{}: tensor '{}'", answer_path, name),
                                "must not be in the answer file when --gradients names the gradients' file",
                                gradients_path);
    for (const auto& [name, t] : read_safetensors(gradients_path).tensors) {
      if (!name.starts_with("grad."))
        throw ContractViolation(fmt::format("--gradients {}: tensor '{}'", gradients_path, name),
                                "must be a gradient, grad.<input>", shape_string(t.shape()));
      theirs.tensors.emplace(name, t);
    }
  }
  const OpReport report = judge_op(
      problem, theirs.tensors,
      {.seed = args.seed, .certify_budget = args.certify_budget, .expect_gradients = !gradients_path.empty()});
  std::cout << report.summary() << "\n";
  if (report.verdict != Verdict::agree)
    std::cout << fmt::format("repro: pararnn compare {} --trajectory {}{} --seed {}{}\n", args.case_path, answer_path,
                             gradients_path.empty() ? "" : " --gradients " + gradients_path, args.seed,
                             args.certify_budget ? fmt::format(" --certify-budget {}", *args.certify_budget) : "");
  if (!args.json.empty()) {
    const std::string text = report.to_json().dump(2) + "\n";
    write_file_atomically(args.json, [&](std::ostream& out) { out << text; });
  }
  return exit_code(report.verdict);
}

}  // namespace pararnn::tools
