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
// Coordinates of the Newton iterate (spec §1.4): native, or ParaSLSTM's log coordinates
// (u = c/n, ln n, m, h; cells/slstm_log.hpp). The trajectory returned is native either way.
enum class Coords { native, log };
Coords parse_coords(std::string_view name);  // "native", "log"
std::string_view coords_name(Coords coords);
ScanBackend parse_scan_backend(std::string_view name);  // "auto", "eager", "cpu", "cuda"
std::string_view scan_backend_name(ScanBackend backend);

// What ran a solve (NewtonStats::scan_backend): a backend's Newton family, the CPU
// sequence-parallel solve, or RWKV-7's exact scan or sequential loop. Its name is the string the
// reports and the JSON carry ("cpu", "cuda", "cpu_seq_parallel", "rwkv7_scan", "rwkv7_sequential",
// "rwkv7_scan_cuda").
enum class SolveBackend { cpu, cuda, cpu_seq_parallel, rwkv7_scan, rwkv7_sequential, rwkv7_scan_cuda };
std::string_view solve_backend_name(SolveBackend backend);
// How a per-channel solve ran (NewtonStats::strategy): "host_driven" (the CPU families, and the
// CUDA residual-scan-axpy loop), "fused" (one fused kernel per iteration), "sequential" (the auto
// rule's sequential kernel), "fused_windowed" (window_len windows in one launch) or "mixed" (the
// windows of a window loop ran differently).
enum class SolveStrategy { host_driven, fused, sequential, fused_windowed, mixed };
std::string_view solve_strategy_name(SolveStrategy strategy);
// Where a solve's K came from (KResolution::source): NewtonConfig::max_iters, newton_iters_by_t,
// the contract's table, the table + 2 for f64, or none (RWKV-7's exact scan has no Newton).
enum class KSource { max_iters, newton_iters_by_t, table, table_f64, exact_scan };
std::string_view k_source_name(KSource source);  // "table+2(f64)", "rwkv7 (linear: …, no Newton)", ...

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
  // sLSTM Picard adapt (spec §2.3): when a solve ends with max|F| non-finite, above
  // picard_retry_atol or above residual_fail, it is redone from a guess with the next rung of
  // kPicardRungs passes (before any sequential fallback). nullopt = on iff the cell has Picard
  // passes and picard_iters is unset (auto P); true on a cell without Picard passes is refused.
  std::optional<bool> picard_adapt;
  std::optional<double> picard_retry_atol = 1e-3;  // nullopt: retry only on non-finite / > fail
  // M2RNN host backtracking (0.17.5): a Newton step that increases a batch row's max|F| is
  // rejected and retried with ω halved for that row, at most kBacktrackHalvings times.
  // ParaM2RNN only.
  bool newton_backtrack = false;
  // sLSTM (mix='diag') log coordinates: Newton iterates on (c/n, ln n, m, h), whose c and n
  // slots no longer grow with T; the fixed point is the native one (eps kept), the residual
  // gate and the stats judge the decoded native trajectory. CPU backend; other cells refuse it.
  Coords coords = Coords::native;
  std::map<std::int64_t, std::int64_t> newton_iters_by_t;  // left-step K(T); needs max_iters unset
  // Windowed Newton (spec §2.8): consecutive windows of window_len steps, each a full solve whose
  // h0 is the previous window's last state; K is resolved on the full T. A different fixed
  // point from the global solve when K is small: its agreement is reported, not assumed.
  // Not with cu_seqlens. (Not the scan's chunk, ScanShape::chunk_len.)
  std::optional<std::int64_t> window_len;
  // The old name of window_len, kept so that code setting it is refused at run time with a message
  // naming window_len (validate) rather than solved without windows. Never read otherwise.
  std::optional<std::int64_t> chunk_len;
  bool recompute = false;
  // An adaptive solve (max_iters unset) may be solved by the sequential kernel where the auto
  // rule says it is faster (the CUDA per-channel family, docs/cuda.md "The auto rule"); its
  // answer is the sequential answer in the compute type, judged by the same residual gate.
  // false keeps Newton.
  bool allow_sequential = true;
};

// Picard rungs of the adapt loop: a retry moves to the smallest rung above the passes just used;
// none above it ends the adapt. The seed's (1, 3, 5) (spec §2.3, `_PICARD_RUNGS`) continued by
// doublings: auto P is already 5 above T = 2048, where the seed's ladder has no rung left, and
// measured (docs/kstar.md, "Picard rungs above 5") P = 20 makes the default solve converge in
// Newton on every seed at T = 32768 and 131072, where P = 5 and 10 fall back.
inline constexpr std::int64_t kPicardRungs[] = {1, 3, 5, 10, 20, 40};

// newton_backtrack: halvings of ω per (row, step) before the last candidate is taken anyway.
inline constexpr int kBacktrackHalvings = 10;

// Whether the Picard adapt loop runs for this cell and config (spec §2.3).
bool picard_adapt_enabled(const NewtonConfig& config, const CellSpec& cell);

// The default early-stop threshold for a storage dtype.
double default_residual_atol(DType dtype);
// residual_atol resolved for a dtype (nullopt when disabled).
std::optional<double> resolved_residual_atol(const NewtonConfig& config, DType dtype);

void validate(const NewtonConfig& config, const CellSpec& cell);

struct KResolution {
  std::int64_t k = 0;      // fixed K, or the adaptive minimum
  bool adaptive = false;   // true when max_iters is unset
  KSource source = KSource::table;
};
// K for a solve of total length `time` (packed: N).
KResolution resolve_newton_iters(const NewtonConfig& config, const CellSpec& cell, DType dtype,
                                 std::int64_t time);

struct NewtonStats {
  double max_residual = 0.0;              // final max|F(H)|
  std::int64_t iters = 0;                 // residual evaluations inside the loop
  std::int64_t updates = 0;               // Newton updates applied
  SolveBackend scan_backend = SolveBackend::cpu;  // what ran it (solve_backend_name for its string)
  SolveStrategy strategy = SolveStrategy::host_driven;
  std::int64_t picard_iters = 0;          // passes of the solve returned (after any adapt)
  std::int64_t picard_retries = 0;        // adapt retries (solves redone with more passes)
  std::int64_t backtracks = 0;            // newton_backtrack: rejected (row, step) trials
  std::vector<double> residual_history;   // max|F| at every evaluation
  KResolution k;
  bool converged = false;                 // residual test passed (adaptive or early stop)
  std::int64_t fallback_tiles = 0;        // tiles solved sequentially after k_max (adaptive)
  // The solve ran on a CUDA stream being captured into a graph (a fixed K of the CUDA per-channel
  // family): its outcome stayed on the device, so iters, updates, converged and the history are
  // unknown (0, false, empty) and max_residual is NaN; the residual gate (residual_fail) was
  // applied on the device instead of raising: H is all NaN where it fires (docs/cuda.md).
  bool outcome_on_device = false;
};

// Above this final residual a `newton_residual_high` warning is emitted.
inline constexpr double kResidualWarn = 1e-3;

}  // namespace pararnn
