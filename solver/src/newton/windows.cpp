// Windows in one home (windows.hpp): the schedule shared with the driver, the window loop, the
// windowed backward and the merge of the windows' stats.
#include "newton/windows.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace pararnn::detail {

NewtonSchedule resolve_schedule(const NewtonConfig& config, const CellSpec& spec, DType storage,
                                std::int64_t time) {
  NewtonSchedule s;
  s.k = resolve_newton_iters(config, spec, storage, time);
  s.stop = resolved_residual_atol(config, storage);
  // Adaptive: K is a minimum and k_max the cap; without an early-stop threshold it is fixed.
  s.adaptive = s.k.adaptive && s.stop.has_value();
  s.cap = s.adaptive ? std::max(s.k.k, config.k_max) : s.k.k;
  return s;
}

NewtonConfig window_config(const NewtonConfig& config, const Cell& cell, std::int64_t full_time) {
  NewtonConfig w = config;
  w.window_len.reset();
  if (!config.max_iters)
    w.newton_iters_by_t = {{1, resolve_schedule(config, cell.spec(), cell.dtype(), full_time).k.k}};
  return w;
}

std::vector<Window> windows_of(std::int64_t time, std::int64_t window_len) {
  std::vector<Window> out;
  for (std::int64_t t = 0; t < time; t += window_len) out.push_back({t, std::min(time, t + window_len)});
  return out;
}

void merge_stats(NewtonStats& total, const NewtonStats& window, bool first) {
  if (first) {
    total = window;
    return;
  }
  // The worst window's residual; a NaN in any window stays a NaN (std::max would drop it).
  if (!std::isnan(total.max_residual) && !(window.max_residual <= total.max_residual))
    total.max_residual = window.max_residual;
  total.iters = std::max(total.iters, window.iters);
  total.updates = std::max(total.updates, window.updates);
  total.converged = total.converged && window.converged;
  total.fallback_tiles += window.fallback_tiles;
  total.picard_retries += window.picard_retries;
  total.backtracks += window.backtracks;
  if (total.strategy != window.strategy) total.strategy = SolveStrategy::mixed;
  total.picard_iters = std::max(total.picard_iters, window.picard_iters);
  total.residual_history.insert(total.residual_history.end(), window.residual_history.begin(),
                                window.residual_history.end());
}

NewtonGradients windowed_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                  const TensorView& grad_H, const NewtonConfig& config,
                                  const ApplyOptions& options, const Layout& layout) {
  const NewtonConfig w = window_config(config, cell, layout.time);
  const std::vector<Window> wins = windows_of(layout.time, *config.window_len);
  const Shape trajectory = cell.trajectory_shape(layout.batch, layout.time);
  if (grad_H.shape() != trajectory)
    throw ContractViolation("grad_H", "must have the trajectory's shape " + shape_string(trajectory),
                            shape_string(grad_H.shape()));
  if (forward.H.shape() != trajectory)
    throw ContractViolation("forward", "must come from newton_forward on this x",
                            shape_string(forward.H.shape()));
  Tensor dx(cell.dtype(), {layout.batch, layout.time, layout.d_in});
  std::map<std::string, std::vector<double>> param_sums;
  std::optional<Tensor> carry;  // ∇ of the next window's h0 (its shape: (B, slots, d_h) or (B, d_h))
  NewtonGradients out;
  for (auto it = wins.rbegin(); it != wins.rend(); ++it) {
    const Window win = *it;
    std::optional<Tensor> h0_w;
    if (win.begin > 0)
      h0_w = Tensor::copy_of(forward.H.view().select(1, win.begin - 1));
    else if (options.h0)
      h0_w = Tensor::copy_of(*options.h0);
    Tensor g_w = Tensor::converted(grad_H.slice(1, win.begin, win.end), DType::f64);
    if (carry) {
      // g_w is contiguous f64 (B, T_w, state...): add the carry at every row's last step.
      const std::int64_t tw = win.end - win.begin;
      const std::int64_t state = g_w.numel() / (layout.batch * tw);
      const auto add = Tensor::converted(*carry, DType::f64).to_f64_vector();
      double* g = g_w.data_as<double>();
      for (std::int64_t b = 0; b < layout.batch; ++b)
        for (std::int64_t i = 0; i < state; ++i)
          g[(b * tw + tw - 1) * state + i] += add[static_cast<std::size_t>(b * state + i)];
    }
    ApplyOptions wo{.cuda_stream = options.cuda_stream, .cuda_allocator = options.cuda_allocator,
                    .parameters = options.parameters};
    if (h0_w) wo.h0 = h0_w->view();
    const TensorView x_w = x.slice(1, win.begin, win.end);
    const NewtonForward fw = newton_forward(cell, x_w, w, wo);
    const NewtonGradients gw = newton_backward(cell, x_w, fw, g_w, w, wo);
    for (std::int64_t b = 0; b < layout.batch; ++b) {
      const TensorView dst = dx.view().select(0, b).slice(0, win.begin, win.end);
      const TensorView src = gw.x.view().select(0, b);
      std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * dtype_size(dx.dtype()));
    }
    for (const auto& [name, grad] : gw.parameters) {
      auto& sum = param_sums[name];
      const auto v = grad.to_f64_vector();
      if (sum.empty()) sum.assign(v.size(), 0.0);
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    carry = gw.h0;
    if (win.begin == 0 && options.h0) out.h0 = gw.h0;
  }
  out.x = dx;
  for (const auto& [name, sum] : param_sums)
    out.parameters.emplace(name, Tensor::from_values(cell.dtype(), cell.parameter(name).shape(), sum));
  return out;
}

Tensor window_loop(const Cell& cell, const TensorView& x, const NewtonConfig& config, const FamilyBackend& row,
                   Device device, const Layout& layout, const ApplyOptions& options, const TensorView* out,
                   NewtonStats& stats, const char* who) {
  row.require(Capability::newton, who);
  const NewtonConfig w = window_config(config, cell, layout.time);
  Tensor H;
  if (out == nullptr) H = Tensor(cell.dtype(), cell.trajectory_shape(layout.batch, layout.time));
  const TensorView target = out ? *out : H.view();
  std::optional<Tensor> host_h0;  // a contiguous copy of the last state, where the output is on the host
  bool first = true;
  for (const Window& win : windows_of(layout.time, *config.window_len)) {
    ApplyOptions wo{.cuda_stream = options.cuda_stream, .cuda_allocator = options.cuda_allocator,
                    .parameters = options.parameters};
    if (win.begin == 0) {
      wo.h0 = options.h0;
    } else if (target.device() == Device::cuda) {
      wo.h0 = target.select(1, win.begin - 1);
    } else {
      host_h0 = Tensor::copy_of(target.select(1, win.begin - 1));
      wo.h0 = host_h0->view();
    }
    const TensorView x_w = x.slice(1, win.begin, win.end);
    const TensorView out_w = target.slice(1, win.begin, win.end);
    Layout layout_w = check_inputs(cell, x_w, wo, who, device);
    NewtonStats ws;
    (void)row.newton(cell, x_w, &out_w, w, wo, std::move(layout_w), ws);
    residual_gate(cell, w, ws, x_w, wo);
    merge_stats(stats, ws, first);
    first = false;
  }
  return H;
}

}  // namespace pararnn::detail
