// The judge of op cases (issue 56): an answer (o, final_state) to an op case against the op
// oracle, with the contract's τ for ops (Metric::op_output) and the same-dtype floor, so that
// every verdict says whether the answer is within what its dtype allows or worse than it, never
// only "close to the fp32 loop".
//
// Rules (docs/ops/README.md, "Verdicts"), per output:
//   within τ of the oracle                                   -> within the dtype (Agree)
//   outside τ, a NaN or infinity in the answer               -> Disagree
//   outside τ, the same-dtype sequential loop within τ       -> worse than the dtype allows (Disagree)
//   outside τ, the loop not finite (NaN or ∞, the oracle finite) -> floor-not-finite: the loop bounds
//                                                               nothing, no ratio (Inconclusive)
//   outside τ, the loop outside τ too, error <= bound·floor  -> ill-conditioned (Inconclusive)
//   outside τ, the loop outside τ too, error >  bound·floor  -> worse than the dtype allows (Disagree)
// (bound: Metric::quality_ratio). The verdict is Disagree if any output disagrees, else
// Inconclusive if any output is inconclusive or missing (final_state when the case asks for it),
// or if the oracle is not finite or not certified (no chain certified, or its self-check above
// Metric::oracle_self_check); only then Agree. Gradients: an answer that carries any
// "grad.<input>" (or any answer, with OpJudgeOptions::expect_gradients) has every gradient of
// op_gradient_inputs judged by the same rules against the
// oracle's adjoint loop (reference::oracle_op_gradients) at Metric::op_gradient, with the
// same-dtype floor of the gradients (reference::op_gradients_in_dtype); a gradient it lacks is
// "missing" (never Agree), and the gradient oracle's certification counts as the outputs'. An
// answer without its output ("o"; mamba "out"), with an output or gradient of another shape or a
// non-floating dtype, or with a tensor that is neither an output nor "grad.<input>" of an input
// of the op is refused: ContractViolation naming the tensor, the rule and the value.
// Example:
//   const OpReport r = judge_op(read_op_case("c.safetensors"), read_safetensors("a.safetensors").tensors);
//   fmt::print("{}\n", r.summary());   // exit code: 0 Agree, 1 Disagree, 2 Inconclusive
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/core/op_case.hpp"

namespace pararnn {

struct OpJudgeOptions {
  std::uint64_t seed = 0;                       // picks the certified chains
  std::optional<std::int64_t> certify_budget;   // default: default_certify_budget(dtype)
  std::function<void()> poll;                   // cancellation, as OracleOptions::poll
  // The gradients were asked for (`pararnn compare --gradients FILE`): judged even when the answer
  // carries no "grad.*", each then "missing" (Inconclusive, never Agree).
  bool expect_gradients = false;
};

struct OpOutputCheck {
  std::string name;        // op_output_names: "o", "final_state" (mamba "out", "last_state" / "final_states"),
                           // or "grad.<input>"
  bool present = false;
  std::string finding;     // "within", "worse", "ill-conditioned", "floor-not-finite", "non-finite", "missing"
  std::string message;     // the sentence a person reads
  ComparisonResult vs_oracle;        // the answer
  ComparisonResult floor_vs_oracle;  // the same-dtype sequential loop
  double ratio = 0.0;                // answer max_abs / floor max_abs (0 when the floor is exact; NaN, JSON
                                     // null, when the floor is not finite: it bounds nothing)
  std::int64_t unrepresentable = 0;  // values beyond the answer dtype's range held as that infinity (left out)
};

struct OpReport {
  Verdict verdict = Verdict::inconclusive;
  std::string reason;
  std::string op, library, variant;
  std::string dtype;         // the case's
  std::string answer_dtype;  // of the answer's output
  Tolerance tau;
  double quality_bound = 0.0;
  std::vector<OpOutputCheck> outputs;
  // Gradients, when the answer carries any "grad.*": one check per op_gradient_inputs name
  // ("grad.q", ...), at gradient_tau (Metric::op_gradient), against the oracle's adjoint loop.
  std::vector<OpOutputCheck> gradients;
  Tolerance gradient_tau;
  struct GradientOracle {
    std::string type, certifier_type;
    double self_check_delta = 0.0;
    bool certified_all_chains = false;
    std::vector<std::string> certified_chains;
    std::int64_t certified_chain_steps = 0;
    bool finite = true;
  };
  std::optional<GradientOracle> gradient_oracle;  // present when gradients were judged
  std::string oracle_type, certifier_type;
  int oracle_digits = 0, certifier_digits = 0;
  double self_check_delta = 0.0;
  double self_check_band = 0.0;
  bool certified_all_chains = false;
  std::vector<std::string> certified_chains;
  std::int64_t certified_chain_steps = 0;
  std::uint64_t seed = 0;
  std::int64_t certify_budget = 0;

  nlohmann::json to_json() const;
  std::string summary() const;  // one paragraph: verdict, each output's finding
};

[[nodiscard]] OpReport judge_op(const OpCase& problem, const std::map<std::string, Tensor>& answer,
                                const OpJudgeOptions& options = {});

}  // namespace pararnn
