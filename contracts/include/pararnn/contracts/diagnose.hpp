// Why a case is hard, before solving it (docs/diagnose.md): the oracle's trajectory, certified
// by the rule of verify and oracle (certification_failure), then the largest Lyapunov exponent
// and the finite-time stretch along it (reference::oracle_lyapunov). One implementation for
// `pararnn diagnose` and pararnn_judge.diagnose; no solver runs.
//
// Guarantees: the case is read by checked_case (the refusals of every path: ContractViolation);
// an uncertified or non-finite trajectory, or a non-finite Jacobian or growth, gives no number:
// `estimate` is empty and `inconclusive_reason` says why (the input tensor and index of a NaN).
// Example:
//   const Diagnosis d = diagnose_case(read_case("case.safetensors"), {.window = 64});
//   if (!d.estimate) throw std::runtime_error(d.inconclusive_reason);
//   fmt::print("{}\n", d.to_json().dump());
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "pararnn/contracts/predicted_k.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/reference/lyapunov.hpp"

namespace pararnn {

struct DiagnoseOptions {
  std::int64_t window = 64;  // LyapunovOptions::window
  std::int64_t chains = 64;  // LyapunovOptions::chains
  std::uint64_t seed = 0;    // the chain sample and the oracle's certified-chain sample
  std::optional<std::int64_t> certify_budget;  // default_certify_budget(dtype)
  // Called as each phase starts ("oracle unroll and certify", then "step Jacobians").
  std::function<void(std::string_view phase)> progress;
};

struct Diagnosis {
  std::string cell;
  DType dtype = DType::f32;
  Shape trajectory_shape;
  std::string oracle_type, certifier_type;
  double self_check_delta = 0.0;
  bool certified_all_chains = false;
  std::uint64_t seed = 0;
  std::optional<reference::LyapunovEstimate> estimate;  // empty when inconclusive
  std::string inconclusive_reason;
  double oracle_seconds = 0.0, jacobian_seconds = 0.0, total_seconds = 0.0;

  // Units with λ̂ > 0; whether some unit is shorter than the stretch's window.
  std::int64_t positive_units() const;
  bool window_capped() const;
  // The K the contraction model predicts from the estimate at the dtype's τ (predicted_k.hpp), as
  // every verify report carries it. Requires an estimate.
  PredictedK predicted_k() const;
  // The estimate as `pararnn diagnose --json` writes it (cell … units; the CLI adds
  // schema_version, command and case before and context after). Requires an estimate.
  nlohmann::ordered_json to_json() const;
};

[[nodiscard]] Diagnosis diagnose_case(const Case& problem, const DiagnoseOptions& options = {});

}  // namespace pararnn
