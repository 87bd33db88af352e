// The judge of op cases (op_judge.hpp).
#include "pararnn/contracts/op_judge.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "pararnn/core/errors.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn {
namespace {

void check_answer(const OpCase& problem, const std::map<std::string, Tensor>& answer, OpReport& r) {
  const std::vector<std::string> names = op_output_names(problem);
  const std::set<std::string> outputs(names.begin(), names.end());
  const std::vector<std::string> inputs = op_gradient_inputs(problem);
  for (const auto& [name, tensor] : answer) {
    if (name.starts_with("grad.")) {
      const std::string input = name.substr(5);
      if (std::find(inputs.begin(), inputs.end(), input) == inputs.end())
        throw ContractViolation(fmt::format("answer: tensor '{}'", name),
                                fmt::format("is not the gradient of an input of this op {} case (grad.<input>, inputs: {})",
                                            problem.op, fmt::join(inputs, ", ")),
                                shape_string(tensor.shape()));
      if (!is_floating(tensor.dtype()))
        throw ContractViolation(fmt::format("answer: tensor '{}'", name), "must be floating", dtype_name(tensor.dtype()));
      const Tensor& of = input == std::string(op_spec(problem.op).initial_name) && problem.initial_state
                             ? *problem.initial_state
                             : problem.input(input);
      if (tensor.shape() != of.shape())
        throw ContractViolation(fmt::format("answer: tensor '{}'", name),
                                fmt::format("must have the shape of '{}', {}", input, shape_string(of.shape())),
                                shape_string(tensor.shape()));
      continue;
    }
    if (!outputs.contains(name))
      throw ContractViolation(fmt::format("answer: tensor '{}'", name),
                              fmt::format("is not an output of op {} (outputs: {})", problem.op, fmt::join(names, ", ")),
                              shape_string(tensor.shape()));
    if (!is_floating(tensor.dtype()))
      throw ContractViolation(fmt::format("answer: tensor '{}'", name), "must be floating", dtype_name(tensor.dtype()));
    const Shape want = name == names.front() ? problem.o_shape() : problem.final_state_shape();
    if (tensor.shape() != want)
      throw ContractViolation(fmt::format("answer: tensor '{}'", name),
                              fmt::format("must have shape {}", shape_string(want)), shape_string(tensor.shape()));
  }
  if (!answer.contains(names.front()))
    throw ContractViolation(fmt::format("answer: tensor '{}'", names.front()), fmt::format("is required (op {})", problem.op),
                            "absent");
}

nlohmann::json comparison_json(const ComparisonResult& c) {
  return {{"max_abs", c.max_abs},     {"max_rel", c.max_rel},     {"mean_abs", c.mean_abs},
          {"mismatches", c.mismatches}, {"count", c.count},       {"nan_count", c.nan_count},
          {"inf_count", c.inf_count}, {"worst_index", c.worst_abs_index}, {"actual", c.worst_actual},
          {"expected", c.worst_expected}, {"allowed", c.worst_allowed}};
}

// One output: the answer and the floor against the oracle, and what that says.
// `claimed`: the dtype the answer claims to reproduce (the case's; a gradient's input's).
OpOutputCheck judge_output(const std::string& name, const Tensor& answer, const Tensor& floor, const Tensor& oracle,
                           const Tolerance& tau, double bound, const std::string& dtype, DType claimed) {
  OpOutputCheck o;
  o.name = name;
  o.present = true;
  // Elements whose true value is beyond the range of the claimed dtype and of the answer's (f16
  // above 65504) and that the answer holds as that same infinity are left out and counted, as
  // for gradients (compare.hpp); a narrower answer dtype than the claimed one excuses nothing.
  const Unrepresentable beyond = split_unrepresentable(answer, oracle, claimed);
  o.unrepresentable = beyond.count;
  o.vs_oracle = beyond.count == 0 ? compare(answer, oracle, tau) : compare(beyond.actual, beyond.expected, tau);
  const Unrepresentable floor_beyond = split_unrepresentable(floor, oracle, claimed);
  o.floor_vs_oracle =
      floor_beyond.count == 0 ? compare(floor, oracle, tau) : compare(floor_beyond.actual, floor_beyond.expected, tau);
  const double err = o.vs_oracle.max_abs, fl = o.floor_vs_oracle.max_abs;
  // A floor that is not finite (the same-dtype loop overflowed, or made a NaN) bounds nothing: no
  // ratio (NaN), never the 0 of err / inf that would read as "as good as the floor".
  const bool floor_finite = std::isfinite(fl);
  o.ratio = !floor_finite ? std::numeric_limits<double>::quiet_NaN() : fl > 0.0 ? err / fl : 0.0;
  const std::string figures = fmt::format(
      "error {:.3e} at {} (allowed {:.3e}; tau atol {:g} rtol {:g}), the {} sequential loop {:.3e} from the oracle",
      err, shape_string(o.vs_oracle.worst_abs_index), o.vs_oracle.worst_allowed, tau.atol, tau.rtol, dtype, fl);
  const std::string left_out =
      beyond.count == 0 ? ""
                        : fmt::format(" ({} values beyond {}'s range, up to {:.3e}, held as that infinity: left out)",
                                      beyond.count, dtype_name(answer.dtype()), beyond.largest);
  if (o.vs_oracle.nan_count > 0 || o.vs_oracle.inf_count > 0) {
    o.finding = "non-finite";
    o.message = fmt::format("{}: {} NaN and {} infinite values: never within what {} allows", name, o.vs_oracle.nan_count,
                            o.vs_oracle.inf_count, dtype);
  } else if (o.vs_oracle.ok()) {
    o.finding = "within";
    o.message = fmt::format("{}: within what {} allows: {} ({}){}", name, dtype, figures,
                            floor_finite ? fmt::format("{:.2f}x that floor", o.ratio)
                                         : fmt::format("the {} sequential loop itself is not finite", dtype),
                            left_out);
  } else if (o.floor_vs_oracle.ok()) {
    o.finding = "worse";
    o.message = fmt::format("{}: worse than {} allows: {} (within tau, so {} can meet it); {} of {} values outside tau",
                            name, dtype, figures, dtype, o.vs_oracle.mismatches, o.vs_oracle.count);
  } else if (!floor_finite) {
    o.finding = "floor-not-finite";
    o.message = fmt::format("{}: the {} sequential loop itself is not finite ({} NaN and {} infinite values against the "
                            "oracle), so the quality of the answer cannot be bounded: error {:.3e} at {} (allowed {:.3e}; "
                            "tau atol {:g} rtol {:g}), {} of {} values outside tau{}",
                            name, dtype, o.floor_vs_oracle.nan_count, o.floor_vs_oracle.inf_count, err,
                            shape_string(o.vs_oracle.worst_abs_index), o.vs_oracle.worst_allowed, tau.atol, tau.rtol,
                            o.vs_oracle.mismatches, o.vs_oracle.count, left_out);
  } else if (o.ratio <= bound) {
    o.finding = "ill-conditioned";
    o.message = fmt::format("{}: ill-conditioned in {}: {}, itself outside tau; the answer is {:.2f}x that floor "
                            "(quality bound {:g}x), within what {} allows but no {} answer can meet tau",
                            name, dtype, figures, o.ratio, bound, dtype, dtype);
  } else {
    o.finding = "worse";
    o.message = fmt::format("{}: worse than {} allows: {}, itself outside tau, and the answer is {:.2f}x that floor "
                            "(quality bound {:g}x)", name, dtype, figures, o.ratio, bound);
  }
  return o;
}

}  // namespace

OpReport judge_op(const OpCase& problem, const std::map<std::string, Tensor>& answer, const OpJudgeOptions& options) {
  OpReport r;
  r.op = problem.op;
  r.library = std::string(op_spec(problem.op).library);
  r.variant = problem.variant;
  const DType dtype = problem.dtype();
  r.dtype = std::string(dtype_name(dtype));
  check_answer(problem, answer, r);
  r.answer_dtype = std::string(dtype_name(answer.at(op_output_names(problem).front()).dtype()));
  r.tau = tolerance_for({.dtype = dtype, .metric = Metric::op_output, .cell = problem.op});
  r.quality_bound = tolerance_for({.dtype = dtype, .metric = Metric::quality_ratio, .cell = problem.op}).atol;
  r.seed = options.seed;
  r.certify_budget = options.certify_budget.value_or(default_certify_budget(dtype));
  const reference::OpOracleResult oracle = reference::oracle_op(
      problem, {.certify = r.certify_budget > 0, .certify_budget = r.certify_budget, .seed = options.seed, .poll = options.poll});
  r.oracle_type = oracle.type;
  r.oracle_digits = oracle.digits;
  r.certifier_type = oracle.certifier_type;
  r.certifier_digits = oracle.certifier_digits;
  r.self_check_delta = oracle.self_check_delta;
  r.self_check_band = tolerance_for({.dtype = dtype, .metric = Metric::oracle_self_check, .cell = problem.op}).atol;
  r.certified_all_chains = oracle.certified_all_chains;
  r.certified_chains = oracle.certified_chains;
  r.certified_chain_steps = oracle.certified_chain_steps;
  const std::map<std::string, Tensor> floor = reference::op_sequential_in_dtype(problem);
  std::vector<std::string> problems;
  bool disagree = false;
  for (const std::string& name : op_output_names(problem)) {
    const auto it = answer.find(name);
    if (it == answer.end()) {
      OpOutputCheck missing;
      missing.name = name;
      missing.finding = "missing";
      missing.message = fmt::format("{}: missing from the answer (the case asks for it): never Agree", name);
      problems.push_back(missing.message);
      r.outputs.push_back(std::move(missing));
      continue;
    }
    OpOutputCheck check =
        judge_output(name, it->second, floor.at(name), oracle.outputs.at(name), r.tau, r.quality_bound, r.dtype, dtype);
    if (check.finding == "worse" || check.finding == "non-finite") disagree = true;
    if (check.finding != "within") problems.push_back(check.message);
    r.outputs.push_back(std::move(check));
  }
  // Gradients: judged when the answer carries any or they were asked for, every one the case has expected.
  std::vector<std::string> oracle_problems;
  const bool has_gradients = options.expect_gradients || std::any_of(answer.begin(), answer.end(), [](const auto& entry) {
                               return entry.first.starts_with("grad.");
                             });
  if (has_gradients) {
    r.gradient_tau = tolerance_for({.dtype = dtype, .metric = Metric::op_gradient, .cell = problem.op});
    const reference::OpOracleGradients grads = reference::oracle_op_gradients(
        problem, {.certify = r.certify_budget > 0, .certify_budget = r.certify_budget, .seed = options.seed, .poll = options.poll});
    r.gradient_oracle = OpReport::GradientOracle{grads.type,          grads.certifier_type,     grads.self_check_delta,
                                                 grads.certified_all_chains, grads.certified_chains,
                                                 grads.certified_chain_steps, grads.finite};
    const std::map<std::string, Tensor> grad_floor = reference::op_gradients_in_dtype(problem);
    for (const std::string& input : op_gradient_inputs(problem)) {
      const std::string name = "grad." + input;
      const auto it = answer.find(name);
      if (it == answer.end()) {
        OpOutputCheck missing;
        missing.name = name;
        missing.finding = "missing";
        missing.message = fmt::format("{}: missing from the answer (it carries gradients; the case has this input): never Agree", name);
        problems.push_back(missing.message);
        r.gradients.push_back(std::move(missing));
        continue;
      }
      OpOutputCheck check = judge_output(name, it->second, grad_floor.at(input), grads.tensors.at(input), r.gradient_tau,
                                         r.quality_bound, r.dtype, grad_floor.at(input).dtype());
      if (check.finding == "worse" || check.finding == "non-finite") disagree = true;
      if (check.finding != "within") problems.push_back(check.message);
      r.gradients.push_back(std::move(check));
    }
    if (!grads.finite) oracle_problems.push_back("the oracle's gradients are not finite (a harness failure, never a verdict)");
    if (grads.certified_chains.empty())
      oracle_problems.push_back(fmt::format("the oracle's gradients are not certified (certify budget {})", r.certify_budget));
    else if (!(grads.self_check_delta <= r.self_check_band))
      oracle_problems.push_back(fmt::format("the oracle's gradient self-check {:.3e} ({} vs {}) is above its band {:g}",
                                            grads.self_check_delta, grads.type, grads.certifier_type, r.self_check_band));
  }
  if (!oracle.finite) oracle_problems.push_back("the oracle's outputs are not finite (a harness failure, never a verdict)");
  if (oracle.certified_chains.empty())
    oracle_problems.push_back(fmt::format("the oracle is not certified (certify budget {})", r.certify_budget));
  else if (!(oracle.self_check_delta <= r.self_check_band))
    oracle_problems.push_back(fmt::format("the oracle's self-check {:.3e} ({} vs {}) is above its band {:g}",
                                          oracle.self_check_delta, oracle.type, oracle.certifier_type, r.self_check_band));
  if (!oracle_problems.empty()) {
    r.verdict = Verdict::inconclusive;
    r.reason = fmt::format("{}", fmt::join(oracle_problems, "; "));
  } else if (disagree) {
    r.verdict = Verdict::disagree;
    r.reason = fmt::format("{}", fmt::join(problems, "; "));
  } else if (!problems.empty()) {
    r.verdict = Verdict::inconclusive;
    r.reason = fmt::format("{}", fmt::join(problems, "; "));
  } else {
    r.verdict = Verdict::agree;
    std::vector<std::string> messages;
    for (const OpOutputCheck& c : r.outputs) messages.push_back(c.message);
    for (const OpOutputCheck& c : r.gradients) messages.push_back(c.message);
    r.reason = fmt::format("{}", fmt::join(messages, "; "));
  }
  return r;
}

nlohmann::json OpReport::to_json() const {
  // One check (an output or a gradient) as JSON.
  const auto check_json = [](const OpOutputCheck& c) {
    nlohmann::json j = {{"name", c.name}, {"present", c.present}, {"finding", c.finding}, {"message", c.message}};
    if (c.present) {
      j["vs_oracle"] = comparison_json(c.vs_oracle);
      j["floor_vs_oracle"] = comparison_json(c.floor_vs_oracle);
      j["floor_within_tau"] = c.floor_vs_oracle.ok();
      // No ratio (null) where the floor is not finite.
      j["quality_ratio"] = std::isfinite(c.ratio) ? nlohmann::json(c.ratio) : nlohmann::json(nullptr);
      j["unrepresentable"] = c.unrepresentable;
    }
    return j;
  };
  nlohmann::json outs = nlohmann::json::array(), grads = nlohmann::json::array();
  for (const OpOutputCheck& c : outputs) outs.push_back(check_json(c));
  for (const OpOutputCheck& c : gradients) grads.push_back(check_json(c));
  nlohmann::json gradient_oracle_json = nullptr;
  if (gradient_oracle)
    gradient_oracle_json = {{"type", gradient_oracle->type}, {"certifier_type", gradient_oracle->certifier_type},
                            {"self_check_delta", gradient_oracle->self_check_delta},
                            {"certified_all_chains", gradient_oracle->certified_all_chains},
                            {"certified_chains", gradient_oracle->certified_chains},
                            {"certified_chain_steps", gradient_oracle->certified_chain_steps},
                            {"finite", gradient_oracle->finite}};
  return {{"schema_version", kReportSchemaVersion},
          {"kind", "op"},
          {"op", op},
          {"library", library},
          {"variant", variant},
          {"dtype", dtype},
          {"answer_dtype", answer_dtype},
          {"verdict", std::string(verdict_name(verdict))},
          {"ok", verdict == Verdict::agree},
          {"reason", reason},
          {"tau", {{"atol", tau.atol}, {"rtol", tau.rtol}, {"relative_to", tau.relative_to_rms ? "max(|expected|, rms)" : "|expected|"},
                   {"source", tau.source}, {"metric", "op_output"}}},
          {"quality_bound", quality_bound},
          {"outputs", outs},
          {"gradients", grads},
          {"gradient_tau", {{"atol", gradient_tau.atol}, {"rtol", gradient_tau.rtol}, {"source", gradient_tau.source},
                            {"relative_to", "max(|expected|, rms)"}, {"metric", "op_gradient"}}},
          {"gradient_oracle", gradient_oracle_json},
          {"oracle", {{"type", oracle_type}, {"digits", oracle_digits}, {"certifier_type", certifier_type},
                      {"certifier_digits", certifier_digits}, {"self_check_delta", self_check_delta},
                      {"self_check_band", self_check_band}, {"certified_all_chains", certified_all_chains},
                      {"certified_chains", certified_chains}, {"certified_chain_steps", certified_chain_steps}}},
          {"seed", seed},
          {"certify_budget", certify_budget}};
}

std::string OpReport::summary() const {
  std::string s = fmt::format("{} op {} ({}, {}, case {}, answer {}): {}", verdict_name(verdict), op, library, variant, dtype,
                              answer_dtype, reason);
  s += fmt::format("; oracle {} certified by {} on {} chain(s), self-check {:.3e}", oracle_type, certifier_type,
                   certified_chains.size(), self_check_delta);
  if (gradient_oracle)
    s += fmt::format("; {} gradient(s) judged at tau rtol {:g} against the adjoint loop in {}, certified by {} on {} "
                     "chain(s), self-check {:.3e}",
                     gradients.size(), gradient_tau.rtol, gradient_oracle->type, gradient_oracle->certifier_type,
                     gradient_oracle->certified_chains.size(), gradient_oracle->self_check_delta);
  return s;
}

}  // namespace pararnn
