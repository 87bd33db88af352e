// verify_agreement: the product claim checked on one case. Runs the production solver, the
// same-dtype sequential loop and the independent oracle on exactly the same bits, compares the
// full state (all slots) against the oracle with the contract's τ, and returns an
// AgreementReport (a value; `to_json()` gives the report keys of docs/numerics-contract.md).
//
// Verdicts: Agree (solver within τ everywhere), Disagree (not), Inconclusive (the oracle is not
// finite or its self-check is not far below τ: a harness failure, never a disagreement; or the
// case is ill-conditioned: the same-dtype sequential loop is itself outside τ and the solver is
// within the contract's quality bound of that floor, `ill_conditioned`; or, with gradients, every
// compared element agrees but some are beyond the storage dtype's range, held by the solver as
// the infinity any result of that dtype must hold, `GradientCheck::unrepresentable`). τ is always the case's
// dtype's, also for a trajectory stored narrower (`trajectory_dtype` records it).
// Example:
//   AgreementReport r = verify_agreement(cell, x, {.seed = 1});
//   if (r.verdict != Verdict::agree) std::cerr << r.failure_message();
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {

enum class Verdict { agree, disagree, inconclusive };
std::string_view verdict_name(Verdict verdict);  // "Agree", "Disagree", "Inconclusive"

inline constexpr int kReportSchemaVersion = 1;

// The gradient tolerance class of a cell: coupled slots (LSTM, sLSTM, head mixes) get the wider
// band of CONTRACT §2, diagonal one-slot cells the tighter one.
Metric gradient_metric(const Cell& cell);

// Default chain-steps of the oracle's certifying unroll: 4e6 for f32/f16/bf16 cases (float128
// certifier, ~15 s), 1e5 for f64 cases (cpp_bin_float_50 certifier, ~5-20 k steps/s).
std::int64_t default_certify_budget(DType dtype);

class OracleMemo;

struct VerifyOptions {
  NewtonConfig config{};
  std::optional<TensorView> h0;
  std::optional<TensorView> cu_seqlens;
  std::optional<double> atol;  // explicit τ (e.g. the seed's 1e-4 for f64); default: the table
  std::optional<double> rtol;
  std::uint64_t seed = 0;              // recorded; also picks the oracle's certified chains
  std::optional<std::int64_t> certify_budget;  // default_certify_budget(dtype) when unset
  bool raise_on_fail = false;          // AgreementError when not Agree
  // Also judge gradients of L = Σ grad_H ⊙ H (grad_H, or ones) against the oracle's BPTT.
  bool gradients = false;
  std::optional<TensorView> grad_H;
  std::string repro_command;           // shown in failure messages ("pararnn verify case...")
  std::string cell_version;            // recorded: the case's metadata "cell_version", if any
  // Host copies of an x / h0 that live on a CUDA device: the solver reads x where it lives, the
  // oracle (host code) reads these (same shape and dtype, else ContractViolation).
  std::optional<TensorView> host_x;
  std::optional<TensorView> host_h0;
};

// How a judging call runs, apart from what it judges (VerifyOptions): progress, cancellation, and
// one oracle shared by several calls. Every field may stay empty; no verdict depends on them.
struct JudgeHooks {
  // Called as each phase starts ("newton", "sequential", "oracle", then "gradients" when asked):
  // the CLI's progress (core/progress.hpp).
  std::function<void(std::string_view phase)> progress;
  // Cancellation inside the oracle's unroll, certification and BPTT (reference::OracleOptions::poll,
  // called on its OpenMP threads): an exception it throws abandons the call. The campaign's
  // time budget, so that one long oracle does not run a campaign past it.
  std::function<void()> poll;
  // One oracle for several calls on the same case (contracts/oracle_memo.hpp): the trajectory
  // oracle is taken from `oracle_memo` under `oracle_key`, computed by the first of its
  // `oracle_uses` calls; a key bound to another case or other oracle options throws.
  OracleMemo* oracle_memo = nullptr;
  std::string oracle_key;
  std::int64_t oracle_uses = 1;
};

struct AgreementReport {
  // The seed library's keys, in its order.
  bool ok = false;
  double max_abs = 0.0, max_rel = 0.0, mean_abs = 0.0;
  double atol = 0.0, rtol = 0.0;
  Shape shape;
  std::string dtype;
  std::string device = "cpu";
  std::int64_t newton_iters = 0;
  double max_residual = 0.0;
  std::string path = "cell";
  // Ours.
  Verdict verdict = Verdict::inconclusive;
  std::string inconclusive_reason;
  Shape worst_index;  // (b, t, [slot,] channel)
  std::string cell;
  std::int64_t slots = 1;
  std::int64_t mismatches = 0, count = 0;
  double sequential_max_abs = 0.0;     // same-dtype sequential vs oracle
  double vs_sequential_max_abs = 0.0;  // solver vs same-dtype sequential (the seed's metric)
  std::string oracle_type, certifier_type;
  int oracle_digits = 0, certifier_digits = 0;
  double self_check_delta = 0.0;
  bool certified_all_chains = false;
  std::int64_t certified_chain_steps = 0;
  std::string backend;
  std::string strategy;  // the solve's NewtonStats::strategy ("sequential": the auto rule's)
  std::string k_source;
  std::int64_t k_min = 0;
  std::vector<double> residual_history;
  std::uint64_t seed = 0;
  std::map<std::string, double> timings_ms;  // newton, sequential, oracle
  std::string tolerance_source;
  ComparisonResult comparison;  // solver vs oracle, in full
  std::string repro_command;
  std::string trajectory_dtype;  // the dtype H was stored in (compare: may be narrower than dtype)
  std::string cell_version;      // e.g. "pararnn-torch 0.17.4 (no W_b: read as W_b = 0)"
  bool ill_conditioned = false;  // Inconclusive because the same-dtype floor is outside τ
  // Why the case is hard (docs/diagnose.md): λ̂, the largest Lyapunov exponent along the
  // oracle's trajectory, and the stretch, from the oracle's own Jacobians on at most 16 chains
  // whose Jacobians fit a budget (2^24 entries, about 14 s; 2^18 for f64 cases, whose oracle is float128).
  // Absent, with `lyapunov_reason`, when the oracle is not certified, the estimate is not
  // finite or one chain alone is over the budget; never a number from either.
  struct LyapunovFields {
    std::string method;           // as pararnn diagnose: "exact log|J| per channel", ...
    double max = 0.0, median = 0.0, fraction_positive = 0.0;
    double max_stretch = 0.0;     // log of the largest growth over `window` steps
    std::int64_t window = 0, units = 0, chains_used = 0, chains_total = 0;
  };
  std::optional<LyapunovFields> lyapunov;
  std::string lyapunov_reason;
  // The K the contraction model predicts from the same estimate (contracts/predicted_k.hpp), beside
  // the K the solve used (newton_iters); absent with lyapunov. Its `k` is empty, with a reason,
  // outside the model's basin.
  std::optional<PredictedK> predicted_k;
  // The cheap form of the prediction (predict_k_from_iterate): from the judged trajectory itself
  // (verify: the solver's own answer; compare: the other solver's), no oracle, every unit. Always
  // set once the trajectory is judged; its `k` is empty with a reason where the cheap form does not
  // apply or finds no number. predicted_k beside it says how far the cheap form is from the oracle's.
  std::optional<PredictedK> predicted_k_iterate;
  // Gradient section (VerifyOptions::gradients): one comparison per tensor ("x", "h0", each
  // parameter), with the gradient tolerance of the cell class.
  struct GradientCheck {
    std::string name;
    ComparisonResult comparison;
    // Elements whose oracle value is beyond the storage dtype's range (it rounds to ±inf there,
    // e.g. |g| >= 65520 in f16) and that the solver returns as that same infinity: no result in
    // that dtype can hold them, so they are left out of `comparison` and counted here; a tensor
    // with any makes an otherwise agreeing verdict Inconclusive (never Agree, never Disagree).
    std::int64_t unrepresentable = 0;
    double largest_unrepresentable = 0.0;  // the largest |oracle| among them
  };
  std::vector<GradientCheck> gradients;
  double gradient_self_check_delta = 0.0;
  // compare with external gradients: the tensors the case's cell needs that were not given
  // (report names, "h0", "W_x.weight"); any makes the verdict Inconclusive, never Agree (a
  // Disagree elsewhere stays Disagree).
  std::vector<std::string> gradients_missing;

  nlohmann::ordered_json to_json() const;
  std::string failure_message() const;  // self-sufficient (CONTRACT §7)
  std::string summary() const;          // a few lines for a terminal
  std::string gradient_summary() const; // one line per gradient tensor
  std::string lyapunov_line() const;    // "\nlambda-hat: …" (the estimate, or why there is none)
                                        // and predicted_k_line()
  std::string predicted_k_line() const; // "\npredicted K: …" (empty without a prediction)
  std::string predicted_k_iterate_line() const;  // "\npredicted K from the trajectory itself …"
};

// The state layout of an oracle trajectory is the solver's; `compare_to_oracle` is the one
// comparison used by verify and compare (worst index reported as b, t, slot, channel).
[[nodiscard]] AgreementReport verify_agreement(const Cell& cell, const TensorView& x,
                                               const VerifyOptions& options = {}, const JudgeHooks& hooks = {});

// An external solver's gradients of L = Σ grad_H ⊙ H (the case's grad.H, or ones, as `pararnn
// solve --grad` takes them), under the names `solve --grad` writes: "grad.x", "grad.h0" (when the
// case has h0) and "grad.<state_dict name>" for each parameter. `source` (a file name) opens
// every refusal. Host tensors, each of the case's dtype and of the shape of the tensor it is the
// gradient of.
struct ExternalGradients {
  std::map<std::string, TensorView> tensors;
  std::string source = "gradients";
};

// The names above for `problem`, each with the report name it is judged under ("grad.x" ->
// "x"): the tensors an external solver must give. A parameter the case reader added (a 0.17.4
// ParaCfC's W_b, read as 0; metadata cell_version) is judged when given, never required.
struct GradientName {
  std::string file_name, report_name;
  bool required = true;
};
std::vector<GradientName> gradient_names(const Case& problem);

// Judges an external trajectory (any floating dtype, the solver's layout) against the oracle of
// `problem` (the CLI's `compare`). The case is first read by checked_case (the refusals of every
// path); τ is the case's dtype's; the same-dtype sequential floor is measured for the
// ill-conditioned rule. With `gradients`, each given tensor is judged against the oracle's BPTT
// by verify --grad's own judgement (per tensor, the gradient τ of the cell class, the
// unrepresentable rule; a NaN never passes); a tensor that is not one of gradient_names, or has
// another dtype or shape, is refused (ContractViolation naming source and tensor) before any
// work; a required one not given is listed in `gradients_missing` (never Agree).
// Example:
//   compare_trajectory(problem, H, {.seed = 1}, ExternalGradients{.tensors = {{"grad.x", gx}}, .source = "G.safetensors"});
[[nodiscard]] AgreementReport compare_trajectory(const Case& problem, const TensorView& trajectory,
                                                 const VerifyOptions& options = {},
                                                 const std::optional<ExternalGradients>& gradients = std::nullopt,
                                                 const JudgeHooks& hooks = {});

}  // namespace pararnn
