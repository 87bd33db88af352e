// Windows (NewtonConfig::window_len) in one home, and the Newton schedule they share with the
// driver. Internal to the solver.
//
// - resolve_schedule: the one reading of a configuration's K, early-stop threshold, adaptive mode
//   and cap (CONTRACT §4), used by the Newton driver (newton/driver.hpp) and by the fused
//   windowed launch (cuda/windowed.cpp) alike, so that the launch decides each window by the
//   loop's own rule.
// - The window loop (window_loop) solves x[:, begin:end) window by window on a row from the
//   previous window's last state, with the full length's K (window_config); windowed_backward
//   re-solves each window, last to first (spec §2.8); merge_stats folds the windows' stats.
// - kFusedWindowStopBand: the fused launch keeps its answer only where no residual of a window
//   came within this factor of the threshold (near it, the loop decides).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backends.hpp"

namespace pararnn::detail {

// The Newton schedule of one solve of `time` steps.
struct NewtonSchedule {
  KResolution k;               // resolve_newton_iters: K and its source; adaptive or fixed
  std::optional<double> stop;  // resolved_residual_atol: the early-stop threshold (nullopt: none)
  bool adaptive = false;       // k.adaptive with a threshold: K is a minimum and `cap` the maximum
  std::int64_t cap = 0;        // evaluations at most: max(K, k_max) when adaptive, else K
};
NewtonSchedule resolve_schedule(const NewtonConfig& config, const CellSpec& spec, DType storage,
                                std::int64_t time);

// The fused windowed launch's band (cuda/windowed.cpp): a window whose residual before an update
// is below this factor times the threshold is left to the window loop. The kernel's residual and
// the loop's differ by rounding (a few ulps of the state), so near the threshold the loop decides.
inline constexpr double kFusedWindowStopBand = 2.0;

struct Window {
  std::int64_t begin, end;
};
// [0, window_len), [window_len, 2·window_len), ..., the last one partial.
std::vector<Window> windows_of(std::int64_t time, std::int64_t window_len);

// One window's configuration: no chunking, and the K of the full length (a fixed K stays; the
// adaptive minimum is pinned with a one-entry newton_iters_by_t table).
NewtonConfig window_config(const NewtonConfig& config, const Cell& cell, std::int64_t full_time);

// The stats of a windowed solve: the first window's, then each window folded in (the worst
// residual, NaN kept; the most iterations and updates; converged only if every window did; the
// counts summed; the histories concatenated; a strategy that differs is `mixed`).
void merge_stats(NewtonStats& total, const NewtonStats& window, bool first);

// Windowed Newton serially over windows on `row` (its newton entry point), with no re-validation
// or re-resolution per window: window w solves x[:, begin:end) from h0_w (the caller's h0 for the
// first, the state at begin - 1 for the others) with the full length's K (window_config), writes
// the w-th slice of the output (the caller's view where given, on the host or on the device: a
// device view keeps every window's H and h0 on the device; else a new host tensor, returned), and
// goes through the residual gate; the windows' stats merged (merge_stats). `device`: where the
// row solves (x's layout is checked for it).
Tensor window_loop(const Cell& cell, const TensorView& x, const NewtonConfig& config, const FamilyBackend& row,
                   Device device, const Layout& layout, const ApplyOptions& options, const TensorView* out,
                   NewtonStats& stats, const char* who);

// Windows from last to first (spec §2.8): window w re-solves from h0_w = H[:, begin−1] (the
// caller's h0 for the first), its cotangent gets the next window's ∇h0 at its last step, and
// parameter gradients are summed over windows (in double, rounded once).
NewtonGradients windowed_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                  const TensorView& grad_H, const NewtonConfig& config,
                                  const ApplyOptions& options, const Layout& layout);

}  // namespace pararnn::detail
