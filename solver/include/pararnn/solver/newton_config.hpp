// NewtonConfig, NewtonStats and the K schedule (CONTRACT §3-§4, pararnn-torch §3.1).
//
// Guarantees: `validate(config)` refuses every bad field with a ContractViolation naming it;
// `resolve_newton_iters` gives the K of a solve and where it came from. With
// `max_iters = nullopt` (Python None) the K of the table is a minimum: the solver keeps iterating
// while max|F| >= residual_atol, up to k_max, and applies one more update after the residual
// test passes. Example:
//   NewtonConfig cfg{.max_iters = std::nullopt};          // adaptive, the default
//   NewtonConfig fixed{.max_iters = 3, .residual_atol = std::nullopt};  // seed's fixed K = 3
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/dtype.hpp"

namespace pararnn {

enum class ScanBackend { auto_select, eager, cpu, cuda };
ScanBackend parse_scan_backend(std::string_view name);  // "auto", "eager", "cpu", "cuda"
std::string_view scan_backend_name(ScanBackend backend);

// `residual_atol` value meaning "the default of the storage dtype" (1e-5 for f32/f16/bf16,
// 1e-12 for f64); std::nullopt disables the early stop.
inline constexpr double kDtypeDefaultAtol = -1.0;

struct NewtonConfig {
  std::optional<std::int64_t> max_iters = std::nullopt;  // nullopt = K table (minimum) + adaptive
  double omega = 1.0;
  ScanBackend scan_backend = ScanBackend::auto_select;
  std::optional<double> residual_atol = kDtypeDefaultAtol;  // early stop on max|F|
  std::optional<double> residual_fail = 1.0;   // nullopt disables the divergence gate
  std::int64_t k_max = 16;                     // cap of the adaptive loop
  std::optional<std::int64_t> picard_iters;    // sLSTM / M2RNN only
  std::map<std::int64_t, std::int64_t> newton_iters_by_t;  // left-step K(T); needs max_iters unset
  // Windowed Newton (spec §2.8): consecutive windows of chunk_len steps, each a full solve whose
  // h0 is the previous window's last state; K is resolved on the full T. A different fixed
  // point from the global solve when K is small: its agreement is reported, not assumed.
  // Not with cu_seqlens.
  std::optional<std::int64_t> chunk_len;
  bool recompute = false;
};

// The default early-stop threshold for a storage dtype.
double default_residual_atol(DType dtype);
// residual_atol resolved for a dtype (nullopt when disabled).
std::optional<double> resolved_residual_atol(const NewtonConfig& config, DType dtype);

void validate(const NewtonConfig& config, const CellSpec& cell);

struct KResolution {
  std::int64_t k = 0;      // fixed K, or the adaptive minimum
  bool adaptive = false;   // true when max_iters is unset
  std::string source;      // "max_iters", "newton_iters_by_t", "table", "table+2(f64)"
};
// K for a solve of total length `time` (packed: N).
KResolution resolve_newton_iters(const NewtonConfig& config, const CellSpec& cell, DType dtype,
                                 std::int64_t time);

struct NewtonStats {
  double max_residual = 0.0;              // final max|F(H)|
  std::int64_t iters = 0;                 // residual evaluations inside the loop
  std::int64_t updates = 0;               // Newton updates applied
  std::string scan_backend;               // resolved backend
  std::int64_t picard_iters = 0;
  std::vector<double> residual_history;   // max|F| at every evaluation
  KResolution k;
  bool converged = false;                 // residual test passed (adaptive or early stop)
  std::int64_t fallback_tiles = 0;        // tiles solved sequentially after k_max (adaptive)
};

// Above this final residual a `newton_residual_high` warning is emitted.
inline constexpr double kResidualWarn = 1e-3;

}  // namespace pararnn
