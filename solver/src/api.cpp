// The solver's public entry points. Each resolves its solve once (plan_solve: the configuration's
// rules, the backend: auto = cuda for device tensors and cpu for host tensors, eager = cpu, an
// explicit backend that cannot run raises UnsupportedPath; then the family row of that backend,
// backends.hpp's FamilyBackend, and its refusals; then x's layout), calls the row and runs the
// residual gate. A row is called only for what it serves (FamilyBackend::require, the one refusal
// of a call it cannot serve). Windows (window_len) run here over the row: its fused launch where it
// serves one and it applies, else the window loop.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <initializer_list>
#include <map>
#include <optional>
#include <utility>

#include "backends.hpp"

namespace pararnn {
namespace {

using detail::Backend;
using detail::Capability;
using detail::FamilyBackend;

Backend resolve_backend(ScanBackend requested, const TensorView& x) {
  switch (requested) {
    case ScanBackend::eager:
    case ScanBackend::cpu:
      if (x.device() != Device::cpu)
        throw UnsupportedPath(fmt::format("scan_backend={}: x is on the GPU; use auto or cuda",
                                          scan_backend_name(requested)));
      return Backend::cpu;
    case ScanBackend::cuda: {
      std::string why;
      if (!detail::cuda_backend_available(&why))
        throw UnsupportedPath("scan_backend=cuda: " + why);
      return Backend::cuda;
    }
    case ScanBackend::auto_select:
      return x.device() == Device::cuda ? Backend::cuda : Backend::cpu;
  }
  return Backend::cpu;
}

Device device_of(Backend backend) { return backend == Backend::cuda ? Device::cuda : Device::cpu; }

void check_windowed(const NewtonConfig& config, const ApplyOptions& options) {
  if (config.window_len && options.cu_seqlens)
    throw ContractViolation("window_len", "cannot be combined with cu_seqlens",
                            std::to_string(*config.window_len));
}

// A solve resolved once: the row that runs it and x's layout.
struct Plan {
  Backend backend;
  const FamilyBackend& row;
  detail::Layout layout;
};

// The row of (the cell's family, backend), after its refusals, and x's layout. `config` null: the
// inputs alone (sequential_apply, validate_apply_inputs, max_residual).
Plan plan_on(const Cell& cell, const TensorView& x, const NewtonConfig* config, Backend backend,
             const ApplyOptions& options, const char* who) {
  const FamilyBackend& row = detail::family_backend(cell.spec().jacobian, backend);
  if (row.supports) row.supports(cell, config, options, who);
  return {backend, row, detail::check_inputs(cell, x, options, who, device_of(backend))};
}

// The one set of rules every solve applies, in this order: the configuration's (validate, no
// windows with packing), the backend's resolution, the row's refusals, x's layout.
Plan plan_solve(const Cell& cell, const TensorView& x, const NewtonConfig* config, ScanBackend requested,
                const ApplyOptions& options, const char* who) {
  if (config) {
    validate(*config, cell.spec());
    check_windowed(*config, options);
  }
  return plan_on(cell, x, config, resolve_backend(requested, x), options, who);
}

// One window's configuration: no chunking, and the K of the full length (a fixed K stays;
// the adaptive minimum is pinned with a one-entry newton_iters_by_t table).
NewtonConfig window_config(const NewtonConfig& config, const Cell& cell, std::int64_t full_time) {
  NewtonConfig w = config;
  w.window_len.reset();
  if (!config.max_iters)
    w.newton_iters_by_t = {{1, resolve_newton_iters(config, cell.spec(), cell.dtype(), full_time).k}};
  return w;
}

struct Window {
  std::int64_t begin, end;
};
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

// Windows from last to first (spec §2.8): window w re-solves from h0_w = H[:, begin−1] (the
// caller's h0 for the first), its cotangent gets the next window's ∇h0 at its last step, and
// parameter gradients are summed over windows (in double, rounded once).
NewtonGradients windowed_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                  const TensorView& grad_H, const NewtonConfig& config,
                                  const ApplyOptions& options, const detail::Layout& layout) {
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
    ApplyOptions wo{.cuda_stream = options.cuda_stream, .cuda_allocator = options.cuda_allocator};
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

// The checks of a caller's output view (the *_into entry points), before any work: the shape and
// dtype of the result, no two elements at one address, no byte shared with an input.
void check_output(const TensorView& out, const char* argument, const Shape& shape, DType dtype,
                  std::initializer_list<std::pair<const char*, const TensorView*>> inputs) {
  if (out.shape() != shape)
    throw ContractViolation(argument, "must have the shape " + shape_string(shape), shape_string(out.shape()));
  if (out.dtype() != dtype)
    throw ContractViolation(argument, fmt::format("must have the cell's dtype {}", dtype_name(dtype)),
                            dtype_name(out.dtype()));
  if (out.data() == nullptr && out.numel() > 0)
    throw ContractViolation(argument, "must point at data", "a null data pointer");
  if (elements_overlap(out))
    throw ContractViolation(argument,
                            "must have non-overlapping strides (no zero stride on an axis of size > 1, no "
                            "interleaved axes)",
                            "strides " + shape_string(out.strides()));
  if (out.device() == Device::cuda) {
    std::string why;
    if (!detail::cuda_backend_available(&why))
      throw UnsupportedPath(fmt::format("{}: is a CUDA tensor and {}", argument, why));
  }
  for (const auto& [name, input] : inputs)
    if (input != nullptr && spans_overlap(out, *input))
      throw ContractViolation(argument, fmt::format("must not share memory with {}", name),
                              fmt::format("{} overlaps {}", argument, name));
}

const TensorView* optional_ptr(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

// Windowed Newton serially over windows on the plan's row, with no re-validation or re-resolution
// per window: window w solves x[:, begin:end) from h0_w (the caller's h0 for the first, the state
// at begin - 1 for the others) with the full length's K (window_config), writes the w-th slice of
// the output (the caller's view where given, on the host or on the device: a device view keeps
// every window's H and h0 on the device; else a new host tensor, returned), and goes through the
// residual gate; the windows' stats merged (merge_stats).
Tensor window_loop(const Cell& cell, const TensorView& x, const NewtonConfig& config, const Plan& plan,
                   const ApplyOptions& options, const TensorView* out, NewtonStats& stats, const char* who) {
  plan.row.require(Capability::newton, who);
  const NewtonConfig w = window_config(config, cell, plan.layout.time);
  Tensor H;
  if (out == nullptr) H = Tensor(cell.dtype(), cell.trajectory_shape(plan.layout.batch, plan.layout.time));
  const TensorView target = out ? *out : H.view();
  std::optional<Tensor> host_h0;  // a contiguous copy of the last state, where the output is on the host
  bool first = true;
  for (const Window& win : windows_of(plan.layout.time, *config.window_len)) {
    ApplyOptions wo{.cuda_stream = options.cuda_stream, .cuda_allocator = options.cuda_allocator};
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
    detail::Layout layout = detail::check_inputs(cell, x_w, wo, who, device_of(plan.backend));
    NewtonStats ws;
    (void)plan.row.newton(cell, x_w, &out_w, w, wo, std::move(layout), ws);
    detail::residual_gate(cell, w, ws, x_w, wo);
    merge_stats(stats, ws, first);
    first = false;
  }
  return H;
}

// The plan of a solve whose trajectory is returned (out null) or written into *out, the caller's
// view named `argument`, checked before any work (shape, dtype, no memory shared with an input).
Plan plan_with_trajectory_output(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                 const ApplyOptions& options, const TensorView* out, const char* argument,
                                 const char* who) {
  Plan plan = plan_solve(cell, x, &config, config.scan_backend, options, who);
  if (out)
    check_output(*out, argument, cell.trajectory_shape(plan.layout.batch, plan.layout.time), cell.dtype(),
                 {{"x", &x}, {"h0", optional_ptr(options.h0)}, {"cu_seqlens", optional_ptr(options.cu_seqlens)}});
  return plan;
}

Tensor apply_impl(const Cell& cell, const TensorView& x, const NewtonConfig& config, const ApplyOptions& options,
                  NewtonStats* stats, const TensorView* out) {
  const char* who = out ? "newton_apply_into" : "newton_apply";
  Plan plan = plan_with_trajectory_output(cell, x, config, options, out, "out", who);
  NewtonStats local;
  NewtonStats& s = stats ? *stats : local;
  if (config.window_len && *config.window_len < plan.layout.time) {
    if (plan.row.serves.has(Capability::fused_windows)) {
      NewtonStats fused;
      if (std::optional<Tensor> H = plan.row.fused_windows(cell, x, config, options, plan.layout, out, fused)) {
        detail::residual_gate(cell, config, fused, x, options);
        s = std::move(fused);
        return std::move(*H);  // empty where written into `out`
      }
    }
    return window_loop(cell, x, config, plan, options, out, s, who);
  }
  plan.row.require(Capability::newton, who);
  Tensor H = plan.row.newton(cell, x, out, config, options, std::move(plan.layout), s);
  detail::residual_gate(cell, config, s, x, options);
  return H;
}

}  // namespace

Tensor newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                    const ApplyOptions& options, NewtonStats* stats) {
  return apply_impl(cell, x, config, options, stats, nullptr);
}

void newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out, const NewtonConfig& config,
                       const ApplyOptions& options, NewtonStats* stats) {
  (void)apply_impl(cell, x, config, options, stats, &out);
}

Tensor sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options) {
  return sequential_apply(cell, x, ScanBackend::auto_select, options);
}

Tensor sequential_apply(const Cell& cell, const TensorView& x, ScanBackend backend,
                        const ApplyOptions& options) {
  Plan plan = plan_solve(cell, x, nullptr, backend, options, "sequential_apply");
  plan.row.require(Capability::sequential, "sequential_apply");
  return plan.row.sequential(cell, x, options, std::move(plan.layout));
}

std::shared_ptr<const SavedTrajectory> saved_on_host(Tensor trajectory) {
  class OnHost final : public SavedTrajectory {
   public:
    explicit OnHost(Tensor t) : t_(std::move(t)) {}
    std::size_t bytes() const override { return t_.nbytes(); }
    Tensor host() const override { return t_; }

   private:
    Tensor t_;
  };
  return std::make_shared<const OnHost>(std::move(trajectory));
}

namespace {

// newton_forward, with H written into *H_out when given (training.hpp's newton_forward_into).
NewtonForward forward_impl(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                           const ApplyOptions& options, const TensorView* H_out) {
  const char* who = H_out ? "newton_forward_into" : "newton_forward";
  Plan plan = plan_with_trajectory_output(cell, x, config, options, H_out, "H_out", who);
  NewtonForward forward;
  if (config.window_len && *config.window_len < plan.layout.time) {
    // Windowed: the backward re-solves each window from the boundary states held in H.
    forward.H = newton_apply(cell, x, config, options, &forward.stats);
    if (H_out) (void)detail::deliver(forward.H, H_out, "H_out");
    return forward;
  }
  plan.row.require(Capability::training, who);
  forward = plan.row.forward(cell, x, H_out, config, options, std::move(plan.layout));
  detail::residual_gate(cell, config, forward.stats, x, options);
  return forward;
}

// newton_backward, with ∇x written into *grad_x when given (newton_backward_into).
NewtonGradients backward_impl(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                              const TensorView& grad_H, const NewtonConfig& config, const ApplyOptions& options,
                              const TensorView* grad_x) {
  const char* who = grad_x ? "newton_backward_into" : "newton_backward";
  Plan plan = plan_solve(cell, x, &config, config.scan_backend, options, who);
  detail::check_cotangent(grad_H, cell.trajectory_shape(plan.layout.batch, plan.layout.time), "grad_H");
  if (grad_x)
    check_output(*grad_x, "grad_x", x.shape(), cell.dtype(),
                 {{"x", &x}, {"grad_H", &grad_H}, {"h0", optional_ptr(options.h0)},
                  {"cu_seqlens", optional_ptr(options.cu_seqlens)}});
  if (config.window_len && *config.window_len < plan.layout.time) {
    NewtonGradients out = windowed_backward(cell, x, forward, grad_H, config, options, plan.layout);
    out.x = detail::deliver(std::move(out.x), grad_x, "grad_x");
    return out;
  }
  plan.row.require(Capability::training, who);
  return plan.row.backward(cell, x, forward, grad_H, grad_x, config, options, std::move(plan.layout));
}

}  // namespace

NewtonForward newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                             const ApplyOptions& options) {
  return forward_impl(cell, x, config, options, nullptr);
}

NewtonForward newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& H_out,
                                  const NewtonConfig& config, const ApplyOptions& options) {
  return forward_impl(cell, x, config, options, &H_out);
}

NewtonGradients newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                const TensorView& grad_H, const NewtonConfig& config,
                                const ApplyOptions& options) {
  return backward_impl(cell, x, forward, grad_H, config, options, nullptr);
}

NewtonGradients newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                     const TensorView& grad_H, const TensorView& grad_x,
                                     const NewtonConfig& config, const ApplyOptions& options) {
  return backward_impl(cell, x, forward, grad_H, config, options, &grad_x);
}

void validate_apply_inputs(const Cell& cell, const TensorView& x, const ApplyOptions& options) {
  (void)plan_solve(cell, x, nullptr, ScanBackend::auto_select, options, "validate_apply_inputs");
}

double max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                    const ApplyOptions& options) {
  Plan plan = plan_on(cell, x, nullptr, Backend::cpu, options, "max_residual");
  const Shape expected = cell.trajectory_shape(plan.layout.batch, plan.layout.time);
  if (H.shape() != expected)
    throw ContractViolation("H", "must have shape " + shape_string(expected), shape_string(H.shape()));
  plan.row.require(Capability::max_residual, "max_residual");
  return plan.row.max_residual(cell, x, H, options, std::move(plan.layout));
}

}  // namespace pararnn
