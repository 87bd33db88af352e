// The tolerance table of the numerics contract (docs/numerics-contract.md), as data with
// provenance: one default per (dtype, metric), and scoped overrides (cell, dtype, backend,
// metric) that carry a reason string which reports show. No test or tool writes a tolerance
// literal; they all ask here. Example:
//   Tolerance tau = tolerance_for({.dtype = DType::f32});            // atol 1e-4, rtol 0
//   ScopedToleranceOverride wide({.cell = "slstm", .metric = Metric::trajectory},
//                                {.atol = 2e-3, .rtol = 0}, "sLSTM band of spec §4.3");
#pragma once

#include <optional>
#include <string>

#include "pararnn/core/dtype.hpp"

namespace pararnn {

enum class Metric {
  trajectory,         // solver (or any implementation) vs the oracle: τ
  gradient_diag,      // gradients of diagonal cells vs the oracle's BPTT
  gradient_coupled,   // gradients of LSTM, sLSTM and head mixes
  jacobian,           // analytic Jacobian vs the oracle's AD Jacobian
  decode,             // decode_step vs one sequential step
  oracle_self_check,  // the oracle at two precisions ("far below τ")
  gradcheck,          // adjoint vs central finite differences (f64, eps 1e-6)
  linear_scan,        // an exact scan (no Newton: RWKV-7's (G, U)) vs its sequential unroll
  quality_ratio,      // solver error / same-dtype sequential error allowed on ill-conditioned
                      // cases (atol holds the ratio)
};
std::string_view metric_name(Metric metric);

struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  std::string source;  // "default" or the reason of the override that applied
  // rtol relative to max(|expected|, RMS of the expected tensor) instead of |expected| alone:
  // used for gradients, whose elements are sums that can cancel to values far below the
  // tensor's scale (e.g. one ∇x entry of 6.6 among entries of 3000).
  bool relative_to_rms = false;
};

struct ToleranceScope {
  std::optional<std::string> cell;
  std::optional<DType> dtype;
  std::optional<std::string> backend;
  std::optional<Metric> metric;
};

struct ToleranceQuery {
  DType dtype = DType::f32;
  Metric metric = Metric::trajectory;
  std::string cell;
  std::string backend;
};

Tolerance tolerance_for(const ToleranceQuery& query);

// Registers an override for as long as the object lives (innermost wins); thread-safe.
class ScopedToleranceOverride {
 public:
  ScopedToleranceOverride(ToleranceScope scope, Tolerance tolerance, std::string reason);
  ~ScopedToleranceOverride();
  ScopedToleranceOverride(const ScopedToleranceOverride&) = delete;
  ScopedToleranceOverride& operator=(const ScopedToleranceOverride&) = delete;

 private:
  std::size_t id_;
};

}  // namespace pararnn
