// The fused windowed launch of the per-channel family (cuda::per_channel_fused_windows): every window
// of window_len steps solved in one kernel (kernels/windowed_newton.hpp), taken where its answer is
// the window loop's (newton/windows.cpp window_loop); std::nullopt hands the solve back to that
// loop. The schedule (K, threshold, adaptive or fixed, cap) is the driver's own
// (newton/windows.hpp resolve_schedule).
// - Fixed K (max_iters set): K Newton updates per window; taken where the loop's early stop on
//   residual_atol cannot have fired.
// - Adaptive (max_iters unset, residual_atol set: the default): the driver's adaptive rule decided
//   on the device per chain and window (the table's K of the whole length as the minimum, k_max
//   as the cap); taken where every chain stopped below residual_atol with finite residuals; a
//   window that did not keeps the loop (its fallback). An adaptive solve the auto rule makes
//   sequential (B·d_h at its threshold) is the sequential kernel over the whole sequence, the
//   loop's sequential windows bit for bit.
#include "cuda/per_channel.hpp"

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "newton/windows.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/windowed_newton.hpp"

namespace pararnn::detail {

std::optional<Tensor> cuda::per_channel_fused_windows(const Cell& cell, const TensorView& x,
                                                     const NewtonConfig& config, const ApplyOptions& options,
                                                     Layout layout, const TensorView* out, NewtonStats& stats) {
  const CellSpec& spec = cell.spec();
  const DType storage = cell.dtype();
  if (!config.window_len || options.cu_seqlens || spec.picard || config.coords != Coords::native ||
      config.newton_backtrack || (storage != DType::f32 && storage != DType::f64))
    return std::nullopt;
  // A faults build injecting into the driver's loop keeps that loop (the catalog measures it).
  if (PARARNN_FAULT_POINT("dropped_last_update") || PARARNN_FAULT_POINT("loose_early_stop")) return std::nullopt;
  // The driver's schedule (newton/windows.hpp resolve_schedule): K, the threshold, adaptive or
  // fixed, and the adaptive loop's cap (the fixed K otherwise).
  const NewtonSchedule schedule = resolve_schedule(config, spec, storage, layout.time);
  const KResolution k = schedule.k;
  const std::optional<double> stop = schedule.stop;
  const bool adaptive = schedule.adaptive;
  const std::int64_t cap = schedule.cap;
  // The launch's bounds (kernels/windowed_newton.hpp): beyond them the window loop, which has none.
  if (cap > kernels::kWindowedMaxIterations || layout.batch > kernels::kWindowedMaxBatch) return std::nullopt;
  const std::int64_t window = *config.window_len;
  const std::int64_t windows = (layout.time + window - 1) / window;
  const int K = static_cast<int>(cap);
  cuda::require_cuda_cell(cell.kind());
  std::optional<Tensor> result;
  cuda::dispatch_cuda_cell(spec.kind, [&]<class CellMath>() {
    cuda::dispatch_compute(storage, [&]<class T>() {
      if (window > kernels::windowed_newton_max_window<CellMath, T>()) return;
      cuda::PerChannelSolve solve(cell, x, options, layout, out, "newton_apply on the CUDA backend", "out");
      const cuda::DeviceProblem& p = solve.inputs().problem();
      using Bits = typename kernels::WindowedNewtonArgs<T>::Bits;
      // The launch writes into `out` itself where it can (as cuda_newton_apply_into).
      const bool in_place = out && out->device() == Device::cuda && out->is_contiguous() && out->dtype() == storage;
      cuda::DeviceBuffer H;
      if (!in_place) H = cuda::DeviceBuffer(cuda::checked_bytes(solve.elements(), sizeof(T), "H"), "H");
      T* const target = in_place ? static_cast<T*>(out->data()) : H.as<T>();
      // H into `out` or returned, with the stats.
      const auto finish = [&](NewtonStats&& s) {
        stats = std::move(s);
        if (out) {
          cuda::store_into(target, storage, *out, "out");
          result = Tensor();
        } else {
          result = cuda::download_trajectory(H, storage, cell, cell.trajectory_shape(layout.batch, layout.time));
        }
      };
      if (adaptive && config.allow_sequential && solve.workspace().sequential) {  // the auto rule's answer
        // The auto rule makes every window the sequential kernel's from the previous window's
        // last state (f32/f64: nothing rounds between windows), which is that kernel over the
        // whole sequence: one launch, the loop's answer bit for bit.
        NewtonConfig whole = config;
        whole.window_len.reset();
        NewtonStats s;
        cuda::newton_solve(spec, storage, p, whole, target, solve.workspace(), s);
        s.k.source = KSource::newton_iters_by_t;  // the loop's per-window K, as below
        finish(std::move(s));
        return;
      }
      const std::int64_t maxima = windows * (K + 1);
      cuda::DeviceBuffer residual(cuda::checked_bytes(maxima, sizeof(Bits), "the windows' residual maxima"),
                                  "the windows' residual maxima");
      PARARNN_CUDA_CHECK(cudaMemsetAsync(residual.get(), 0, residual.bytes(), cuda::current_stream()));
      cuda::DeviceBuffer evaluations;
      if (adaptive) {
        evaluations = cuda::DeviceBuffer(cuda::checked_bytes(windows, sizeof(unsigned int), "the windows' evaluations"),
                                         "the windows' evaluations");
        PARARNN_CUDA_CHECK(cudaMemsetAsync(evaluations.get(), 0, evaluations.bytes(), cuda::current_stream()));
      }
      const kernels::WindowedNewtonArgs<T> args{
          .wx = static_cast<const T*>(p.wx), .recurrent = static_cast<const T*>(p.recurrent),
          .h0 = PARARNN_FAULT_POINT("cuda_windowed_h0_dropped") ? nullptr : static_cast<const T*>(p.h0),
          .H = target, .residual_max = residual.as<Bits>(),
          .evaluations = adaptive ? evaluations.as<unsigned int>() : nullptr,
          .batch = layout.batch, .time = layout.time, .channels = layout.d_h, .window = window,
          .iterations = K, .omega = static_cast<T>(config.omega), .adaptive = adaptive,
          .min_iterations = adaptive ? static_cast<int>(k.k) : 0, .stop_atol = adaptive ? *stop : 0.0};
      PARARNN_CUDA_CHECK((kernels::launch_windowed_newton<CellMath, T>(args, cuda::current_stream())));
      std::vector<Bits> bits(static_cast<std::size_t>(maxima));
      cuda::copy_to_host(bits.data(), residual.get(), residual.bytes());
      std::vector<unsigned int> ran(adaptive ? static_cast<std::size_t>(windows) : 0);
      if (adaptive) cuda::copy_to_host(ran.data(), evaluations.get(), evaluations.bytes());
      cuda::synchronize();
      // Fixed K, the driver's loop per window (newton/driver.hpp): evaluation k is followed by an
      // update unless it is non-finite or below the early-stop threshold. Where either may have
      // happened the kernel's K updates are not that loop's answer: the caller runs the window loop.
      // Adaptive: the kernel applied that loop's rule per chain (kernels/windowed_newton.hpp).
      NewtonStats s;
      s.k = k;
      // The window loop pins the table's K per window with a one-entry newton_iters_by_t
      // (newton/windows.cpp window_config), so its stats name that source.
      if (!config.max_iters) s.k.source = KSource::newton_iters_by_t;
      s.scan_backend = SolveBackend::cuda;
      s.strategy = SolveStrategy::fused_windowed;
      s.iters = s.updates = adaptive ? 0 : K;
      s.converged = adaptive;
      // The final residual is the worst window's; a NaN in any window stays a NaN.
      double worst = 0.0;
      bool nan = false;
      for (std::int64_t w = 0; w < windows; ++w) {
        const auto at = [&](int e) {
          return static_cast<double>(std::bit_cast<T>(bits[static_cast<std::size_t>(w * (K + 1) + e)]));
        };
        if (adaptive) {
          // Every evaluation finite (each followed by its chains' updates, as the loop's), and
          // every chain stopped below the threshold within the cap; else the loop and its fallback.
          const int n = static_cast<int>(ran[static_cast<std::size_t>(w)]);
          if (n < 1 || n > K || (n == K && !(at(K - 1) < *stop))) return;
          for (int e = 0; e < n; ++e) {
            if (!std::isfinite(at(e))) return;
            s.residual_history.push_back(at(e));
          }
          s.iters = s.updates = std::max<std::int64_t>(s.iters, n);
        }
        for (int e = adaptive ? K : 0; e <= K; ++e) {
          const double v = at(e);
          if (e < K) {
            // Within the band above the threshold (newton/windows.hpp kFusedWindowStopBand) the
            // loop decides: the kernel's residual and the loop's differ by rounding.
            if (!std::isfinite(v) || (stop && v < kFusedWindowStopBand * *stop)) return;
            s.residual_history.push_back(v);
          } else if (std::isnan(v)) {
            nan = true;
          } else {
            worst = std::max(worst, v);
          }
        }
      }
      s.max_residual = nan ? std::numeric_limits<double>::quiet_NaN() : worst;
      finish(std::move(s));
    });
  });
  return result;
}

}  // namespace pararnn::detail
