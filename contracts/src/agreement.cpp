// verify_agreement and compare_trajectory: the only code that sees the solver and the oracle.
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/oracle_memo.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The host view the oracle reads of a solver input: the input itself on the host, its host copy
// (`twin`) when it lives on a device.
const TensorView& host_view(const TensorView& input, const std::optional<TensorView>& twin,
                            std::string_view argument, std::string_view twin_name) {
  if (input.device() == Device::cpu) return input;
  if (!twin)
    throw ContractViolation(argument, fmt::format("is on a CUDA device: the oracle needs its host copy in VerifyOptions::{}",
                                                  twin_name), "cuda");
  if (twin->device() != Device::cpu || twin->shape() != input.shape() || twin->dtype() != input.dtype())
    throw ContractViolation(twin_name, fmt::format("must be a host tensor of {}'s shape {} and dtype {}", argument,
                                                   shape_string(input.shape()), dtype_name(input.dtype())),
                            fmt::format("{} {} on {}", shape_string(twin->shape()), dtype_name(twin->dtype()),
                                        twin->device() == Device::cpu ? "cpu" : "cuda"));
  return *twin;
}

Case case_for(const Cell& cell, const TensorView& x, const VerifyOptions& options) {
  std::optional<Tensor> h0;
  if (options.h0) h0 = Tensor::copy_of(host_view(*options.h0, options.host_h0, "h0", "host_h0"));
  Case problem = cell.make_case(Tensor::copy_of(host_view(x, options.host_x, "x", "host_x")), std::move(h0));
  if (options.cu_seqlens) problem.cu_seqlens = Tensor::copy_of(*options.cu_seqlens);
  return problem;
}

Tolerance trajectory_tolerance(DType dtype, const std::string& cell, const std::string& backend,
                               const VerifyOptions& options) {
  Tolerance tau = tolerance_for({.dtype = dtype, .metric = Metric::trajectory, .cell = cell,
                                 .backend = backend});
  if (options.atol || options.rtol) {
    tau.atol = options.atol.value_or(tau.atol);
    tau.rtol = options.rtol.value_or(tau.rtol);
    tau.source = "explicit (caller)";
  }
  return tau;
}

// Fills everything that comes from the comparison with the oracle. τ is the case's (the dtype
// the solver claims to reproduce), whatever dtype the trajectory is stored in.
void judge(AgreementReport& r, const TensorView& trajectory, const reference::OracleResult& oracle,
           const Tolerance& tau, const Case& problem) {
  r.shape = trajectory.shape();
  r.dtype = std::string(dtype_name(problem.dtype()));
  r.trajectory_dtype = std::string(dtype_name(trajectory.dtype()));
  r.cell_version = problem.meta("cell_version").value_or("");
  r.oracle_type = oracle.type;
  r.oracle_digits = oracle.digits;
  r.certifier_type = oracle.certifier_type;
  r.certifier_digits = oracle.certifier_digits;
  r.self_check_delta = oracle.self_check_delta;
  r.certified_all_chains = oracle.certified_all_chains;
  r.certified_chain_steps = oracle.certified_chain_steps;
  r.comparison = compare(trajectory, oracle.H, tau);
  const ComparisonResult& c = r.comparison;
  r.max_abs = c.max_abs;
  r.max_rel = c.max_rel;
  r.mean_abs = c.mean_abs;
  r.atol = tau.atol;
  r.rtol = tau.rtol;
  r.tolerance_source = tau.source;
  r.mismatches = c.mismatches;
  r.count = c.count;
  r.worst_index = c.worst_abs_index;
  r.ok = c.ok();
  if (const auto why = certification_failure(oracle.finite, oracle.self_check_delta,
                                               oracle.certified_chain_steps, problem, "trajectory")) {
    r.verdict = Verdict::inconclusive;
    r.inconclusive_reason = *why;
    r.ok = false;
  } else {
    r.verdict = r.ok ? Verdict::agree : Verdict::disagree;
  }
}

// λ̂ for the report (AgreementReport::lyapunov): the oracle's own AD Jacobians on at most 16
// chains, as many as a budget of Jacobian entries allows (per step: N x slots for the cells whose
// channels never mix, N x N for the others, N the state's size), so that a large dense state
// cannot make the judge slow; float128 Jacobians (f64 cases) cost about 64 times as much.
constexpr double kLyapunovEntries = 16777216.0;  // 2^24: about 14 s, the order of the certification
constexpr std::int64_t kLyapunovChains = 16;

AgreementReport::LyapunovFields lyapunov_fields(const reference::LyapunovEstimate& e) {
  return {.method = e.method, .max = e.max_exponent, .median = e.median_exponent,
          .fraction_positive = e.fraction_positive, .max_stretch = e.max_stretch, .window = e.window,
          .units = static_cast<std::int64_t>(e.units.size()), .chains_used = e.chains_used,
          .chains_total = e.chains_total};
}

void estimate_lyapunov(AgreementReport& r, const Cell& cell, const Case& problem,
                       const reference::OracleResult& oracle, const std::function<void()>& poll) {
  if (certification_failure(oracle.finite, oracle.self_check_delta, oracle.certified_chain_steps, problem,
                            "trajectory")) {
    r.lyapunov_reason = "not estimated: the oracle's trajectory is not certified";
    return;
  }
  const std::int64_t steps = oracle.H.size(0) * oracle.H.size(1);
  const double state = steps > 0 ? static_cast<double>(oracle.H.numel()) / static_cast<double>(steps) : 0.0;
  const bool per_channel = cell.spec().jacobian == JacobianClass::per_channel;
  const double per_step = state * (per_channel ? static_cast<double>(cell.slots()) : state);
  const std::int64_t chains_total =
      problem.cu_seqlens ? problem.cu_seqlens->numel() - 1 : oracle.H.size(0);
  const double per_chain = per_step * static_cast<double>(steps) / static_cast<double>(std::max<std::int64_t>(chains_total, 1));
  const double budget = kLyapunovEntries / (problem.dtype() == DType::f64 ? 64.0 : 1.0);
  const auto chains = static_cast<std::int64_t>(std::min<double>(static_cast<double>(kLyapunovChains), budget / std::max(per_chain, 1.0)));
  if (chains < 1) {
    r.lyapunov_reason = fmt::format("not estimated: a chain's step Jacobians hold {:.3g} entries, over the report's "
                                    "budget of {:.3g} (pararnn diagnose has none)", per_chain, budget);
    return;
  }
  const reference::LyapunovEstimate e =
      reference::oracle_lyapunov(problem, oracle, {.chains = chains, .seed = r.seed, .poll = poll});
  if (!e.finite) {
    r.lyapunov_reason = "not finite: " + e.reason;
    return;
  }
  r.lyapunov = lyapunov_fields(e);
  r.predicted_k = predict_k(e, r.atol);
}

// AgreementReport::predicted_k_iterate from the judged trajectory H (in the cell's dtype, as the
// solver would hold it); what the cheap form refuses becomes its reason, never the report's failure.
void predict_from_iterate(AgreementReport& r, const Cell& cell, const TensorView& x, const ApplyOptions& apply,
                          const TensorView& H) {
  try {
    const Tensor h = Tensor::converted(H, cell.dtype());
    r.predicted_k_iterate = predict_k_from_iterate(cell, x, h.view(), apply, r.atol);
  } catch (const Error& e) {
    PredictedK p;
    p.reason = std::string("not computed: ") + e.what();
    r.predicted_k_iterate = p;
  }
}

// What the ill-conditioned reason says of its cause (issue 45): λ̂ of the report (estimated on
// at most 16 chains without the budget here, when the report has none), so that a chaotic case
// is named as such. λ̂ > 0: a rounding error grows like e^(λ̂ t); λ̂ <= 0: the floor has another
// cause (e.g. states that grow with T).
std::string lyapunov_cause(const AgreementReport& r, const Case& problem, const reference::OracleResult& oracle,
                           const std::function<void()>& poll) {
  std::optional<AgreementReport::LyapunovFields> fields = r.lyapunov;
  if (!fields) {
    const reference::LyapunovEstimate e =
        reference::oracle_lyapunov(problem, oracle, {.chains = kLyapunovChains, .poll = poll});
    if (!e.finite) return fmt::format("; lambda-hat not available ({})", e.reason);
    fields = lyapunov_fields(e);
  }
  const auto& e = *fields;
  const bool per_channel = e.units != e.chains_used;
  const std::string over = fmt::format("max over {} {} of {} chain(s)", e.units,
                                       per_channel ? "(chain, channel) unit(s)" : "unit(s)", e.chains_used);
  if (e.max > 0.0)
    return fmt::format("; the cause is chaos: the recurrence's largest Lyapunov exponent along the oracle's "
                       "trajectory is lambda-hat = {:.3g} > 0 ({}; positive in {:.0f}%), so an error made at one "
                       "step grows like e^(lambda-hat t) (x{:.3g} over the worst {} steps)",
                       e.max, over, 100.0 * e.fraction_positive, std::exp(e.max_stretch), e.window);
  return fmt::format("; not chaos: lambda-hat = {:.3g} <= 0 along the oracle's trajectory ({}), so the floor has "
                     "another cause (e.g. states that grow with T)",
                     e.max, over);
}

// CONTRACT §2, ill-conditioned cases: where the same-dtype sequential loop is itself outside τ
// of the oracle, no implementation in that dtype can meet τ. A solver within the quality bound
// of that floor is Inconclusive ("ill-conditioned"), never Disagree; beyond the bound it stays
// Disagree. Runs after judge() and after the floor was measured. The reason ends with λ̂'s
// verdict on the cause (lyapunov_cause).
void apply_ill_conditioned_rule(AgreementReport& r, const TensorView& sequential, const Case& problem,
                                const reference::OracleResult& oracle, const Tolerance& tau,
                                const std::function<void()>& poll) {
  if (r.verdict != Verdict::disagree) return;
  if (compare(sequential, oracle.H, tau).ok()) return;  // the floor is inside τ: a real Disagree
  if (!std::isfinite(r.sequential_max_abs)) {
    // A floor that is not finite (the same-dtype loop overflowed, or made a NaN) bounds nothing:
    // never the 0 of max_abs / inf that would read as "as good as the floor".
    r.verdict = Verdict::inconclusive;
    r.inconclusive_reason = fmt::format(
        "the {0} sequential loop itself is not finite against the oracle, so the {1}'s error {2:.3e} (tau atol {3:g} "
        "rtol {4:g}) cannot be bounded by what {0} allows",
        r.dtype, r.path == "external" ? "trajectory" : "solver", r.max_abs, tau.atol, tau.rtol);
    return;
  }
  const double bound = tolerance_for({.dtype = parse_dtype(r.dtype), .metric = Metric::quality_ratio,
                                      .cell = r.cell, .backend = r.backend}).atol;
  const double ratio = r.sequential_max_abs > 0.0 ? r.max_abs / r.sequential_max_abs : INFINITY;
  if (!(ratio <= bound)) return;
  r.verdict = Verdict::inconclusive;
  r.ill_conditioned = true;
  r.inconclusive_reason = fmt::format(
      "ill-conditioned in {0}: the {0} sequential loop is {1:.3e} from the oracle, tau atol {2:g} rtol {3:g}; "
      "the {4} is {5:.2f}x that floor (quality bound {6:g}x), so no {0} implementation can be judged "
      "against tau here",
      r.dtype, r.sequential_max_abs, tau.atol, tau.rtol, r.path == "external" ? "trajectory" : "solver",
      ratio, bound) + lyapunov_cause(r, problem, oracle, poll);
}

double max_abs_between(const TensorView& a, const TensorView& b) {
  return compare(a, b, Tolerance{.atol = INFINITY, .rtol = 0.0, .source = "metric only"}).max_abs;
}

std::int64_t certify_budget(const VerifyOptions& options, DType dtype) {
  return options.certify_budget.value_or(default_certify_budget(dtype));
}

double largest_finite(DType dtype) {
  return dispatch_float_dtype(dtype, []<class StorageT>() {
    return static_cast<double>(std::numeric_limits<StorageT>::max());
  });
}

// The cotangent of L = Σ grad_H ⊙ H: a copy of grad_H as given, or ones in the cell's dtype (as
// `pararnn solve --grad` takes it).
Tensor cotangent(const Cell& cell, std::int64_t batch, std::int64_t time, const std::optional<TensorView>& grad_H) {
  if (grad_H) return Tensor::copy_of(*grad_H);
  Tensor g(cell.dtype(), cell.trajectory_shape(batch, time));
  Tensor flat = g.reshaped({g.numel()});
  for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0);
  return g;
}

// The one judgement of gradients against the oracle's BPTT, for the production adjoint (verify
// --grad) and for an external solver's (compare): per tensor ("x", "h0", each parameter: the
// report names) at the gradient τ of the cell class; any mismatch makes the verdict Disagree,
// a non-finite oracle gradient or a large certification delta makes it Inconclusive, and so do
// tensors the cell needs that were not given (r.gradients_missing) and elements beyond the
// storage dtype's range when everything else agrees. `problem` holds the cotangent (grad_H).
void judge_gradient_tensors(AgreementReport& r, const Case& problem, Metric metric,
                            const std::vector<std::pair<std::string, Tensor>>& theirs, const VerifyOptions& options,
                            const JudgeHooks& hooks) {
  const DType dtype = problem.dtype();
  const auto start = Clock::now();
  const reference::OracleOptions oracle_options{
      .certify = true, .certify_budget = certify_budget(options, dtype), .seed = options.seed, .poll = hooks.poll};
  const std::shared_ptr<const reference::OracleGradients> oracle_result =
      hooks.oracle_memo
          ? hooks.oracle_memo->gradients(hooks.oracle_key, hooks.oracle_uses, problem, oracle_options)
          : std::make_shared<const reference::OracleGradients>(reference::oracle_gradients(problem, oracle_options));
  const reference::OracleGradients& oracle = *oracle_result;
  r.timings_ms["oracle_gradients"] = ms_since(start);
  r.gradient_self_check_delta = oracle.self_check_delta;
  Tolerance tol = tolerance_for({.dtype = dtype, .metric = metric, .cell = r.cell, .backend = r.backend});
  tol.relative_to_rms = true;  // gradient elements are sums that cancel (CONTRACT §2, docs)
  for (const auto& [name, ours] : theirs) {
    auto it = oracle.tensors.find(name);
    if (it == oracle.tensors.end()) throw Error("oracle_gradients returned no '" + name + "'");
    // Elements beyond the storage dtype's range that the solver holds as the same infinity are
    // left out and counted (GradientCheck::unrepresentable).
    const Unrepresentable beyond = split_unrepresentable(ours, it->second);
    if (beyond.count == 0) {
      r.gradients.push_back({name, compare(ours, it->second, tol)});
    } else {
      r.gradients.push_back({name, compare(beyond.actual, beyond.expected, tol), beyond.count, beyond.largest});
    }
  }
  if (r.verdict == Verdict::inconclusive) return;
  if (const auto why = certification_failure(oracle.finite, oracle.self_check_delta,
                                               oracle.certified_chain_steps, problem, "gradients")) {
    r.verdict = Verdict::inconclusive;
    r.ok = false;
    r.inconclusive_reason = *why;
    return;
  }
  for (const auto& gc : r.gradients)
    if (!gc.comparison.ok()) {
      r.verdict = Verdict::disagree;
      r.ok = false;
    }
  if (r.verdict == Verdict::disagree) return;
  std::vector<std::string> reasons;
  if (!r.gradients_missing.empty()) {
    std::string names;
    for (const auto& name : r.gradients_missing) names += fmt::format("{}grad.{}", names.empty() ? "" : ", ", name);
    reasons.push_back(fmt::format("gradients missing: {} (the {} cell has them; a gradient not given is not judged, "
                                  "so the answer is incomplete)", names, r.cell));
  }
  std::string beyond;
  for (const auto& gc : r.gradients)
    if (gc.unrepresentable > 0)
      beyond += fmt::format("{}{} of `{}` (largest |oracle| {:.4g})", beyond.empty() ? "" : ", ", gc.unrepresentable,
                            gc.name, gc.largest_unrepresentable);
  if (!beyond.empty())
    reasons.push_back(fmt::format(
        "gradient elements beyond {}'s range (largest finite {:g}): {}; the solver returns them as the same "
        "infinities, as any {} result must, so they are not judged; every other element agrees",
        dtype_name(dtype), largest_finite(dtype), beyond, dtype_name(dtype)));
  if (!reasons.empty()) {
    r.verdict = Verdict::inconclusive;
    r.ok = false;
    r.inconclusive_reason = fmt::format("{}", fmt::join(reasons, "; "));
  }
}

// Production adjoint vs the oracle's BPTT (verify --grad).
void judge_gradients(AgreementReport& r, const Cell& cell, const TensorView& x, Case problem,
                     const VerifyOptions& options, const JudgeHooks& hooks) {
  const ApplyOptions apply{.h0 = options.h0, .cu_seqlens = options.cu_seqlens};
  const Tensor g = cotangent(cell, x.size(0), x.size(1), options.grad_H);
  auto start = Clock::now();
  const NewtonForward forward = newton_forward(cell, x, options.config, apply);
  const NewtonGradients grads = newton_backward(cell, x, forward, g, options.config, apply);
  r.timings_ms["backward"] = ms_since(start);
  problem.grad_H = Tensor::converted(g, cell.dtype());
  std::vector<std::pair<std::string, Tensor>> ours = {{"x", grads.x}};
  if (grads.h0) ours.emplace_back("h0", *grads.h0);
  for (const auto& [name, grad] : grads.parameters) ours.emplace_back(name, grad);
  judge_gradient_tensors(r, problem, gradient_metric(cell), ours, options, hooks);
}

// An external solver's gradients, checked against gradient_names before any work: each a host
// tensor of the case's dtype and its tensor's shape, under one of the names (ContractViolation
// naming the source and the tensor otherwise). Returns them under their report names, in
// gradient_names' order; the required names not given go to `missing`.
std::vector<std::pair<std::string, Tensor>> checked_external_gradients(const Case& problem,
                                                                       const ExternalGradients& given,
                                                                       std::vector<std::string>& missing) {
  const std::vector<GradientName> names = gradient_names(problem);
  std::string expected;
  for (const auto& n : names) expected += fmt::format("{}{}", expected.empty() ? "" : ", ", n.file_name);
  for (const auto& entry : given.tensors) {
    // Named, not a structured binding: the lambda below captures it (clang 14, the fuzz build's
    // compiler, cannot capture a structured binding).
    const std::string& name = entry.first;
    const auto& tensor = entry.second;
    const std::string argument = fmt::format("{}: tensor '{}'", given.source, name);
    const auto it = std::find_if(names.begin(), names.end(), [&](const GradientName& n) { return n.file_name == name; });
    if (it == names.end())
      throw ContractViolation(argument,
                              fmt::format("is not a gradient of this {} case: a gradient file holds only {} (the "
                                          "trajectory H goes in the trajectory file, the cotangent grad.H in the case)",
                                          problem.cell, expected),
                              "an unexpected tensor");
    if (tensor.device() != Device::cpu)
      throw ContractViolation(argument, "must be a host tensor", "a CUDA tensor");
    if (tensor.dtype() != problem.dtype())
      throw ContractViolation(argument,
                              fmt::format("must have the case's dtype {} (a gradient has its parameter's dtype)",
                                          dtype_name(problem.dtype())),
                              dtype_name(tensor.dtype()));
  }
  const auto shape_of = [&](const std::string& report_name) -> const Tensor& {
    if (report_name == "x") return problem.x;
    if (report_name == "h0") return *problem.h0;
    return problem.parameters.at(report_name);
  };
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& n : names) {
    const auto it = given.tensors.find(n.file_name);
    if (it == given.tensors.end()) {
      if (n.required) missing.push_back(n.report_name);
      continue;
    }
    const Shape& want = shape_of(n.report_name).shape();
    if (it->second.shape() != want)
      throw ContractViolation(fmt::format("{}: tensor '{}'", given.source, n.file_name),
                              fmt::format("must have the shape of {} {}", n.report_name == "x" || n.report_name == "h0"
                                                                              ? n.report_name
                                                                              : "parameter '" + n.report_name + "'",
                                          shape_string(want)),
                              shape_string(it->second.shape()));
    out.emplace_back(n.report_name, Tensor::copy_of(it->second));
  }
  return out;
}

}  // namespace

Metric gradient_metric(const Cell& cell) {
  return cell.slots() > 1 ? Metric::gradient_coupled : Metric::gradient_diag;
}

std::int64_t default_certify_budget(DType dtype) { return dtype == DType::f64 ? 100'000 : 4'000'000; }

std::vector<GradientName> gradient_names(const Case& problem) {
  // The 0.17.4 ParaCfC had no W_b: the case reader adds it as 0 (core/src/case.cpp) and says so.
  const bool added_w_b = problem.meta("cell_version").value_or("").find("no W_b") != std::string::npos;
  std::vector<GradientName> names = {{"grad.x", "x"}};
  if (problem.h0) names.push_back({"grad.h0", "h0"});
  for (const auto& [name, tensor] : problem.parameters)
    names.push_back({"grad." + name, name, !(added_w_b && name.starts_with("W_b."))});
  return names;
}

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::agree: return "Agree";
    case Verdict::disagree: return "Disagree";
    case Verdict::inconclusive: return "Inconclusive";
  }
  return "?";
}

AgreementReport verify_agreement(const Cell& cell, const TensorView& x, const VerifyOptions& options,
                                 const JudgeHooks& hooks) {
  if (hooks.oracle_memo && hooks.oracle_key.empty())
    throw ContractViolation("oracle_key", "must name the case when oracle_memo is set", "(empty)");
  if (hooks.oracle_memo && hooks.oracle_uses < 1)
    throw ContractViolation("oracle_uses", "must be >= 1 when oracle_memo is set", std::to_string(hooks.oracle_uses));
  // This call is one of the key's users on every path out, the oracle reached or not.
  struct MemoUse {
    const JudgeHooks& o;
    ~MemoUse() {
      if (o.oracle_memo) o.oracle_memo->done(o.oracle_key, o.oracle_uses);
    }
  } memo_use{hooks};
  AgreementReport r;
  r.cell = std::string(cell.name());
  r.slots = cell.slots();
  r.seed = options.seed;
  r.repro_command = options.repro_command;
  const ApplyOptions apply{.h0 = options.h0, .cu_seqlens = options.cu_seqlens};

  const auto phase = [&](std::string_view name) {
    if (hooks.progress) hooks.progress(name);
  };
  phase("newton");
  auto start = Clock::now();
  NewtonStats stats;
  const Tensor H = newton_apply(cell, x, options.config, apply, &stats);
  r.timings_ms["newton"] = ms_since(start);
  r.backend = std::string(solve_backend_name(stats.scan_backend));
  r.strategy = std::string(solve_strategy_name(stats.strategy));
  r.newton_iters = stats.iters;
  r.max_residual = stats.max_residual;
  r.residual_history = stats.residual_history;
  r.k_source = std::string(k_source_name(stats.k.source));
  r.k_min = stats.k.k;

  phase("sequential");
  start = Clock::now();
  const Tensor H_seq = sequential_apply(cell, x, apply);
  r.timings_ms["sequential"] = ms_since(start);

  phase("oracle");
  start = Clock::now();
  const Case problem = case_for(cell, x, options);
  const reference::OracleOptions oracle_options{.certify = true,
                                                .certify_budget = certify_budget(options, cell.dtype()),
                                                .seed = options.seed,
                                                .poll = hooks.poll};
  std::shared_ptr<const reference::OracleResult> oracle_result;
  if (hooks.oracle_memo) {
    oracle_result = hooks.oracle_memo->trajectory(hooks.oracle_key, hooks.oracle_uses, problem, oracle_options);
  } else {
    oracle_result = std::make_shared<const reference::OracleResult>(reference::oracle_sequential(problem, oracle_options));
  }
  const reference::OracleResult& oracle = *oracle_result;
  r.timings_ms["oracle"] = ms_since(start);  // with a memo: the wait for the shared oracle

  const Tolerance tau = trajectory_tolerance(cell.dtype(), r.cell, r.backend, options);
  judge(r, H, oracle, tau, problem);
  r.cell_version = options.cell_version;
  r.sequential_max_abs = max_abs_between(H_seq, oracle.H);
  r.vs_sequential_max_abs = max_abs_between(H, H_seq);
  phase("lyapunov");
  start = Clock::now();
  estimate_lyapunov(r, cell, problem, oracle, hooks.poll);
  predict_from_iterate(r, cell, x, apply, H);
  r.timings_ms["lyapunov"] = ms_since(start);
  apply_ill_conditioned_rule(r, H_seq, problem, oracle, tau, hooks.poll);
  if (options.gradients) {
    phase("gradients");
    judge_gradients(r, cell, x, problem, options, hooks);
  }
  if (options.raise_on_fail && r.verdict != Verdict::agree) throw AgreementError(r.failure_message());
  return r;
}

AgreementReport compare_trajectory(const Case& problem, const TensorView& trajectory,
                                   const VerifyOptions& options, const std::optional<ExternalGradients>& gradients,
                                   const JudgeHooks& hooks) {
  const Cell cell = checked_case(problem);  // the same refusals as verify and solve
  AgreementReport r;
  std::vector<std::pair<std::string, Tensor>> theirs;
  if (gradients) theirs = checked_external_gradients(problem, *gradients, r.gradients_missing);
  r.cell = problem.cell;
  r.seed = options.seed;
  r.repro_command = options.repro_command;
  r.path = "external";
  r.backend = "external";
  r.k_source = "external";
  if (!is_floating(trajectory.dtype()))
    throw ContractViolation("trajectory", "H must have a floating dtype (F64, F32, F16, BF16)",
                            dtype_name(trajectory.dtype()));
  if (hooks.progress) hooks.progress("oracle");
  auto start = Clock::now();
  const reference::OracleResult oracle = reference::oracle_sequential(
      problem, {.certify = true, .certify_budget = certify_budget(options, problem.dtype()), .seed = options.seed,
                .poll = hooks.poll});
  r.timings_ms["oracle"] = ms_since(start);
  r.slots = cell.slots();
  if (trajectory.shape() != oracle.H.shape())
    throw ContractViolation("trajectory", "must have the oracle's shape " + shape_string(oracle.H.shape()),
                            shape_string(trajectory.shape()));
  ApplyOptions apply;
  if (problem.h0) apply.h0 = problem.h0->view();
  if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
  if (hooks.progress) hooks.progress("sequential");
  start = Clock::now();
  const Tensor H_seq = sequential_apply(cell, problem.x, apply);  // the case dtype's floor
  r.timings_ms["sequential"] = ms_since(start);
  const Tolerance tau = trajectory_tolerance(problem.dtype(), r.cell, r.backend, options);
  judge(r, trajectory, oracle, tau, problem);
  r.sequential_max_abs = max_abs_between(H_seq, oracle.H);
  r.vs_sequential_max_abs = max_abs_between(trajectory, H_seq);
  if (hooks.progress) hooks.progress("lyapunov");
  start = Clock::now();
  estimate_lyapunov(r, cell, problem, oracle, hooks.poll);
  predict_from_iterate(r, cell, problem.x, apply, trajectory);
  r.timings_ms["lyapunov"] = ms_since(start);
  apply_ill_conditioned_rule(r, H_seq, problem, oracle, tau, hooks.poll);
  r.newton_iters = 0;
  r.max_residual = NAN;
  if (gradients) {
    Case with_cotangent = problem;  // the case's grad.H, or ones
    if (!with_cotangent.grad_H) with_cotangent.grad_H = cotangent(cell, problem.x.size(0), problem.x.size(1), std::nullopt);
    if (hooks.progress) hooks.progress("gradients");
    // The oracle memo is verify's (its key is released there): compare's gradients take their own.
    judge_gradient_tensors(r, with_cotangent, gradient_metric(cell), theirs, options, {.poll = hooks.poll});
  }
  if (options.raise_on_fail && r.verdict != Verdict::agree) throw AgreementError(r.failure_message());
  return r;
}

nlohmann::ordered_json AgreementReport::to_json() const {
  nlohmann::ordered_json j;
  j["ok"] = ok;
  j["max_abs"] = max_abs;
  j["max_rel"] = max_rel;
  j["mean_abs"] = mean_abs;
  j["atol"] = atol;
  j["rtol"] = rtol;
  j["shape"] = shape;
  j["dtype"] = dtype;
  j["device"] = device;
  j["newton_iters"] = newton_iters;
  j["max_residual"] = max_residual;
  j["path"] = path;
  j["verdict"] = verdict_name(verdict);
  if (!inconclusive_reason.empty()) j["inconclusive_reason"] = inconclusive_reason;
  nlohmann::ordered_json worst;
  if (worst_index.size() == 5) {  // a matrix state (B, T, n_heads, d, d): RWKV-7
    worst["b"] = worst_index[0];
    worst["t"] = worst_index[1];
    worst["head"] = worst_index[2];
    worst["row"] = worst_index[3];
    worst["column"] = worst_index[4];
  } else if (worst_index.size() >= 3) {
    worst["b"] = worst_index[0];
    worst["t"] = worst_index[1];
    worst["slot"] = worst_index.size() == 4 ? worst_index[2] : 0;
    worst["channel"] = worst_index.back();
  }
  j["worst_index"] = worst;
  j["mismatches"] = mismatches;
  j["count"] = count;
  j["sequential_max_abs"] = sequential_max_abs;
  j["vs_sequential_max_abs"] = vs_sequential_max_abs;
  j["oracle"] = {{"type", oracle_type},
                 {"digits", oracle_digits},
                 {"self_check_delta", self_check_delta},
                 {"certifier_type", certifier_type},
                 {"certifier_digits", certifier_digits},
                 {"certified_all_chains", certified_all_chains},
                 {"certified_chain_steps", certified_chain_steps}};
  j["backend"] = backend;
  if (!strategy.empty()) j["strategy"] = strategy;
  j["k_source"] = k_source;
  j["k_min"] = k_min;
  j["residual_history"] = residual_history;
  j["seed"] = seed;
  j["timings_ms"] = timings_ms;
  j["tolerance_source"] = tolerance_source;
  j["cell"] = cell;
  // No ratio (null) where the floor is not finite.
  j["quality_ratio"] = !std::isfinite(sequential_max_abs) ? nlohmann::ordered_json(nullptr)
                       : sequential_max_abs > 0           ? nlohmann::ordered_json(max_abs / sequential_max_abs)
                                                          : nlohmann::ordered_json(0.0);
  j["repro"] = repro_command;
  j["trajectory_dtype"] = trajectory_dtype.empty() ? dtype : trajectory_dtype;
  j["ill_conditioned"] = ill_conditioned;
  if (!cell_version.empty()) j["cell_version"] = cell_version;
  if (!gradients.empty()) {
    nlohmann::ordered_json grads;
    for (const auto& gc : gradients) {
      const ComparisonResult& c = gc.comparison;
      grads[gc.name] = {{"ok", c.ok()},         {"max_abs", c.max_abs},     {"max_rel", c.max_rel},
                        {"atol", c.tolerance.atol}, {"rtol", c.tolerance.rtol}, {"worst_index", c.worst_abs_index},
                        {"mismatches", c.mismatches}, {"count", c.count}};
      if (gc.unrepresentable > 0) {  // left out of the comparison (GradientCheck)
        grads[gc.name]["unrepresentable"] = gc.unrepresentable;
        grads[gc.name]["largest_unrepresentable"] = gc.largest_unrepresentable;
      }
    }
    j["gradients"] = grads;
    j["gradient_self_check_delta"] = gradient_self_check_delta;
  }
  if (!gradients_missing.empty()) j["gradients_missing"] = gradients_missing;
  if (lyapunov) {
    j["lyapunov"] = {{"max", lyapunov->max},
                     {"median", lyapunov->median},
                     {"fraction_positive", lyapunov->fraction_positive},
                     {"stretch", lyapunov->max_stretch},
                     {"window", lyapunov->window},
                     {"units", lyapunov->units},
                     {"chains", lyapunov->chains_used},
                     {"chains_total", lyapunov->chains_total},
                     {"method", lyapunov->method}};
  } else {
    j["lyapunov"] = {{"reason", lyapunov_reason}};
  }
  if (predicted_k) j["predicted_k"] = predicted_k->to_json();
  if (predicted_k_iterate) j["predicted_k_iterate"] = predicted_k_iterate->to_json();
  j["schema_version"] = kReportSchemaVersion;
  return j;
}

std::string AgreementReport::failure_message() const {
  std::string out = fmt::format(
      "verify_agreement: verdict {} for cell {} ({}), solver vs oracle max_abs={:.6e} "
      "(atol={:g}, rtol={:g}; {}); shape={} dtype={} seed={} path={} backend={}.\n",
      verdict_name(verdict), cell, k_source, max_abs, atol, rtol, tolerance_source,
      shape_string(shape), dtype, seed, path, backend);
  out += fmt::format(
      "Same-dtype sequential vs oracle {:.6e}; solver vs sequential {:.6e}; newton iters {} "
      "(K min {}), final max|F| {:.3e}, residual history {}.\n",
      sequential_max_abs, vs_sequential_max_abs, newton_iters, k_min, max_residual,
      nlohmann::json(residual_history).dump());
  if (!inconclusive_reason.empty()) out += "Inconclusive: " + inconclusive_reason + "\n";
  out += comparison.describe();
  for (const auto& gc : gradients)
    if (!gc.comparison.ok()) out += "\nGradient '" + gc.name + "': " + gc.comparison.describe();
  if (!repro_command.empty()) out += "\nReplay: " + repro_command;
  return out;
}

std::string AgreementReport::summary() const {
  std::string worst = "-";
  if (worst_index.size() == 5)
    worst = fmt::format("b={} t={} head={} row={} column={}", worst_index[0], worst_index[1],
                        worst_index[2], worst_index[3], worst_index[4]);
  else if (worst_index.size() >= 3)
    worst = fmt::format("b={} t={} slot={} channel={}", worst_index[0], worst_index[1],
                        worst_index.size() == 4 ? worst_index[2] : 0, worst_index.back());
  return fmt::format(
      "verdict: {}\n"
      "cell {} dtype {} shape {}  backend {}  K {} ({})  iters {}  max_residual {:.3e}\n"
      "solver vs oracle: max_abs {:.3e} (tau atol {:g}, rtol {:g}, {})  worst {}  mismatches {}/{}\n"
      "sequential ({}) vs oracle: {:.3e}   solver vs sequential: {:.3e}\n"
      "oracle {} ({} bits), certified by {} ({} bits): self-check delta {:.3e} over {} chain-steps{}\n"
      "timings: newton {:.1f} ms, sequential {:.1f} ms, oracle {:.1f} ms",
      verdict_name(verdict), cell, dtype, shape_string(shape), backend, k_min, k_source,
      newton_iters, max_residual, max_abs, atol, rtol, tolerance_source, worst, mismatches, count,
      dtype, sequential_max_abs, vs_sequential_max_abs, oracle_type, oracle_digits,
      certifier_type, certifier_digits, self_check_delta, certified_chain_steps,
      certified_all_chains ? " (all chains)" : " (seeded sample)",
      timings_ms.contains("newton") ? timings_ms.at("newton") : 0.0,
      timings_ms.contains("sequential") ? timings_ms.at("sequential") : 0.0,
      timings_ms.contains("oracle") ? timings_ms.at("oracle") : 0.0) + lyapunov_line() + gradient_summary();
}

std::string AgreementReport::lyapunov_line() const {
  if (!lyapunov) return "\nlambda-hat: " + lyapunov_reason + predicted_k_iterate_line();
  return fmt::format("\nlambda-hat: max {:.3g}, median {:.3g}, positive in {:.0f}% of {} unit(s); stretch x{:.3g} over "
                     "{} steps ({} of {} chains; {})",
                     lyapunov->max, lyapunov->median, 100.0 * lyapunov->fraction_positive, lyapunov->units,
                     std::exp(lyapunov->max_stretch), lyapunov->window, lyapunov->chains_used,
                     lyapunov->chains_total, lyapunov->method) + predicted_k_line();
}

std::string AgreementReport::predicted_k_line() const {
  if (!predicted_k) return "";
  const std::string used = path == "external" ? "" : fmt::format("; the solve ran {} Newton iterations", newton_iters);
  return "\npredicted K: " + predicted_k->describe() + used + predicted_k_iterate_line();
}

std::string AgreementReport::predicted_k_iterate_line() const {
  if (!predicted_k_iterate) return "";
  return "\npredicted K from the trajectory itself (no oracle): " + predicted_k_iterate->describe();
}

std::string AgreementReport::gradient_summary() const {
  std::string out;
  for (const auto& gc : gradients)
    out += fmt::format("\ngradient {:<12} max_abs {:.3e} max_rel {:.3e} (atol {:g}, rtol {:g})  {}{}",
                       gc.name, gc.comparison.max_abs, gc.comparison.max_rel, gc.comparison.tolerance.atol,
                       gc.comparison.tolerance.rtol, gc.comparison.ok() ? "ok" : "MISMATCH",
                       gc.unrepresentable > 0
                           ? fmt::format("  ({} beyond the dtype's range, not judged)", gc.unrepresentable)
                           : std::string());
  for (const auto& name : gradients_missing)
    out += fmt::format("\ngradient {:<12} MISSING (not given: never Agree)", name);
  return out;
}

}  // namespace pararnn
