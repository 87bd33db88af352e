// The tolerance table of the numerics contract (docs/numerics-contract.md), as data with
// provenance: one default per (dtype, metric), and scoped overrides (cell, dtype, backend,
// metric) that carry a reason string which reports show. No test or tool writes a tolerance
// literal; they all ask here. Example:
//   Tolerance tau = tolerance_for({.dtype = DType::f32});            // atol 1e-4, rtol 0
//   ScopedToleranceOverride wide({.cell = "slstm", .metric = Metric::trajectory},
//                                {.atol = 2e-3, .rtol = 0}, "sLSTM band of spec §4.3");
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

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
  op_output,          // an op case's outputs (o, final_state) vs the oracle (issue 56): τ of ops,
                      // rtol relative to max(|expected|, RMS of the tensor)
  op_gradient,        // an op case's gradients (grad.<input>) vs the oracle's adjoint loop: relative
                      // to max(|expected|, RMS of the tensor), as op_output
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

// What a default band is there to refuse: a wrong answer seen in the field or named by the
// contract, as an error of `wrong_by` at one element of magnitude at most 1, which the default
// band of (dtype, metric) must judge Disagree, so that a band loosened by mistake (a digit slip
// in the table, the seed's f64 value restored) is caught by what it lets through, not only by a
// test that pins the table. Every default trajectory band has at least one
// (contracts/tests/tolerance_protection_test.cpp holds each through compare_trajectory).
struct ToleranceProtection {
  DType dtype;
  Metric metric;
  double wrong_by;
  std::string_view source;  // where this wrong answer was seen, or the contract clause
};
std::span<const ToleranceProtection> tolerance_protections();

// The oracle's internal bands, which its own tests hold it to (reference/tests): its working
// types against each other, its automatic differentiation against central differences, the same
// equations in another order. Each band's `source` says why it is that size (a few roundings of
// the coarser type over the steps of the test cases); none is a product claim.
enum class OracleBand {
  double_vs_float128,              // one unroll, double vs float128 (states O(1), T <= 64)
  float128_vs_bin50,               // float128 vs cpp_bin_float_50
  same_math_in_double,             // the same equations in double, in another order
  jacobian_vs_differences,         // AD Jacobian vs float128 central differences
  continuation_from_rounded_state,  // an f64 unroll continued from its own rounded state
  spec_jacobian_vs_ad,             // sLSTM's hand-written Jacobian (spec §1.4) vs AD, in double
  gradient_double_vs_differences,  // BPTT by AD in double vs float128 differences (relative)
  gradient_float128_vs_differences,  // BPTT by AD in float128 vs the differences (relative)
  gradient_double_vs_float128,     // gradient certification, double primary vs float128
  gradient_float128_vs_bin50,      // gradient certification, float128 vs cpp_bin_float_50
  tie_vs_differences,              // the sLSTM max at its tie: the kink's central difference
};
Tolerance oracle_band(OracleBand band);

// The kernels' own bands: a CUDA kernel against its host twin running the same cell math
// (kernels/tests), in units of the compute type's epsilon times the magnitude measured, so that a
// twin is held to its own rounding rather than to the product τ. Each band's `source` says where
// its count comes from; none is a product claim.
enum class KernelBand {
  residual_rounding,  // a residual F = f(h) − h in T vs in double, per unit of max|H|
  stop_decision,      // how near the adaptive stop's threshold a residual in T may decide otherwise
};
struct UlpBand {
  double ulps = 0.0;      // ulp of T at the magnitude measured
  double relative = 0.0;  // and a fraction of the value compared against, where the band has one
  std::string source;
};
UlpBand kernel_band(KernelBand band);

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
