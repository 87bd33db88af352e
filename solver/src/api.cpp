// The solver's public entry points. Each resolves its solve once (plan_solve: the configuration's
// rules, the backend: auto = cuda for device tensors and cpu for host tensors, eager = cpu, an
// explicit backend that cannot run raises UnsupportedPath; then the family row of that backend,
// backends.hpp's FamilyBackend, and its refusals; then x's layout), calls the row and runs the
// residual gate. A row is called only for what it serves (FamilyBackend::require, the one refusal
// of a call it cannot serve). Windows (window_len) run over the row: its fused launch where it
// serves one and it applies, else the window loop (newton/windows.hpp, the windows' one home).
#include <fmt/format.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "newton/windows.hpp"

namespace pararnn {
namespace {

using detail::Backend;
using detail::Capability;
using detail::FamilyBackend;
using detail::Plan;

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

// The row of (the cell's family, backend), after its refusals, and x's layout.
Plan plan_on(const Cell& cell, const TensorView& x, const NewtonConfig* config, Backend backend,
             const ApplyOptions& options, const char* who) {
  const FamilyBackend& row = detail::family_backend(cell.spec().jacobian, backend);
  if (row.supports) row.supports(cell, config, options, who);
  detail::check_parameter_views(cell, options,
                                backend == Backend::cuda && cell.spec().jacobian == JacobianClass::per_channel,
                                row.name, who);
  if (options.sync_free && !(backend == Backend::cuda && cell.spec().jacobian == JacobianClass::per_channel))
    throw ContractViolation("sync_free", fmt::format("is a mode of the CUDA per-channel family (no wait, no read "
                                                     "back); {} runs on the {} row", who, row.name),
                            "true");
  return {backend, row, detail::check_inputs(cell, x, options, who, device_of(backend))};
}

}  // namespace

namespace detail {
Plan plan_solve(const Cell& cell, const TensorView& x, const NewtonConfig* config, ScanBackend requested,
                const ApplyOptions& options, const char* who) {
  if (config) {
    validate(*config, cell.spec());
    check_windowed(*config, options);
  }
  return plan_on(cell, x, config, resolve_backend(requested, x), options, who);
}
}  // namespace detail

namespace {

using detail::plan_solve;

// The checks of a caller's output view (the *_into entry points), before any work: the shape and
// dtype of the result, no two elements at one address, no byte shared with an input.
void check_output(const TensorView& out, const char* argument, const Shape& shape, DType dtype,
                  const std::vector<std::pair<const char*, const TensorView*>>& inputs) {
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
    return detail::window_loop(cell, x, config, plan.row, device_of(plan.backend), plan.layout, options, out, s,
                               who);
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
    if (H_out) (void)detail::deliver(forward.H, H_out, "H_out", options.cuda_stream);
    return forward;
  }
  plan.row.require(Capability::training, who);
  forward = plan.row.forward(cell, x, H_out, config, options, std::move(plan.layout));
  detail::residual_gate(cell, config, forward.stats, x, options);
  return forward;
}

// ApplyOptions::parameter_gradients (solver.hpp): each target a parameter's shape and the cell's
// dtype, contiguous, sharing no byte with another target or an input, before any work.
void check_gradient_targets(const Cell& cell, const TensorView& x, const TensorView& grad_H, const TensorView* grad_x,
                            const ApplyOptions& options, Backend backend) {
  const auto& targets = options.parameter_gradients;
  std::optional<int> solve_device;  // a CUDA solve's, for its CUDA targets
  for (auto it = targets.begin(); it != targets.end(); ++it) {
    const auto& [name, target] = *it;
    const std::string argument = fmt::format("parameter_gradients['{}']", name);
    const auto parameter = cell.parameters().find(name);
    if (parameter == cell.parameters().end())
      throw ContractViolation(argument, fmt::format("must name a parameter of the {} cell", cell.name()), name);
    std::vector<std::pair<const char*, const TensorView*>> inputs{
        {"x", &x}, {"grad_H", &grad_H}, {"grad_x", grad_x}, {"h0", optional_ptr(options.h0)},
        {"cu_seqlens", optional_ptr(options.cu_seqlens)}};
    std::vector<std::string> names;  // kept alive for the pointers below
    names.reserve(targets.size() + options.parameters.size());
    for (const auto& [other, view] : options.parameters) {
      names.push_back(fmt::format("parameters['{}']", other));
      inputs.emplace_back(names.back().c_str(), &view);
    }
    for (auto o = targets.begin(); o != it; ++o) {
      names.push_back(fmt::format("parameter_gradients['{}']", o->first));
      inputs.emplace_back(names.back().c_str(), &o->second);
    }
    check_output(target, argument.c_str(), parameter->second.shape(), cell.dtype(), inputs);
    if (!target.is_contiguous())
      throw ContractViolation(argument, "must be contiguous", "strides " + shape_string(target.strides()));
#ifdef PARARNN_SOLVER_CUDA
    if (backend == Backend::cuda && target.device() == Device::cuda) {
      if (!solve_device) solve_device = detail::cuda_solve_device(x, options);
      if (target.device_id() != *solve_device)
        throw ContractViolation(argument, fmt::format("must be on the solve's CUDA device {}", *solve_device),
                                fmt::format("device {}", target.device_id()));
    }
#else
    (void)backend;
#endif
  }
}

// The gradients a row returned on the host for targets it did not write in place go into them;
// a target no gradient reached is an error, never left holding what it held.
void deliver_gradient_targets(NewtonGradients& out, const ApplyOptions& options) {
  for (const auto& [name, target] : options.parameter_gradients) {
    const std::string argument = fmt::format("parameter_gradients['{}']", name);
    if (const auto it = out.parameters.find(name); it != out.parameters.end()) {
      (void)detail::deliver(std::move(it->second), &target, argument.c_str(), options.cuda_stream);
      out.parameters.erase(it);
      out.written.insert(name);
    }
    if (!out.written.count(name))
      throw Error(fmt::format("newton_backward: no gradient was computed for {}", argument));
  }
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
  check_gradient_targets(cell, x, grad_H, grad_x, options, plan.backend);
  NewtonGradients out;
  if (config.window_len && *config.window_len < plan.layout.time) {
    out = detail::windowed_backward(cell, x, forward, grad_H, config, options, plan.layout);
    out.x = detail::deliver(std::move(out.x), grad_x, "grad_x", options.cuda_stream);
  } else {
    plan.row.require(Capability::training, who);
    out = plan.row.backward(cell, x, forward, grad_H, grad_x, config, options, std::move(plan.layout));
  }
  deliver_gradient_targets(out, options);
  return out;
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

double max_residual(const Cell& cell, const TensorView& x, const TensorView& H, const ApplyOptions& options,
                    ScanBackend backend) {
  Plan plan = plan_solve(cell, x, nullptr, backend, options, "max_residual");
  plan.row.require(Capability::max_residual, "max_residual");
  const Shape expected = cell.trajectory_shape(plan.layout.batch, plan.layout.time);
  if (H.shape() != expected)
    throw ContractViolation("H", "must have shape " + shape_string(expected), shape_string(H.shape()));
  if (!is_floating(H.dtype()))
    throw ContractViolation("H", "must be a floating tensor (f64, f32, f16, bf16)", dtype_name(H.dtype()));
  const auto where = [](Device d) { return d == Device::cuda ? "a CUDA tensor" : "a host tensor"; };
  if (H.device() != x.device())
    throw ContractViolation("H", fmt::format("must be on x's device ({})", where(x.device())), where(H.device()));
  if (H.device() == Device::cuda && H.device_id() != x.device_id())
    throw ContractViolation("H", fmt::format("must be on x's device (cuda:{})", x.device_id()),
                            fmt::format("cuda:{}", H.device_id()));
  return plan.row.max_residual(cell, x, H, options, std::move(plan.layout));
}

}  // namespace pararnn
