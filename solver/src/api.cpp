// The solver's public entry points: validate the configuration, resolve the backend (auto:
// cuda for device tensors, cpu for host tensors; eager = cpu; an explicit backend that cannot
// run raises UnsupportedPath), call it, and run the residual gate.
#include <fmt/format.h>

#include "backends.hpp"

namespace pararnn {
namespace {

enum class Resolved { cpu, cuda };

Resolved resolve_backend(ScanBackend requested, const TensorView& x) {
  switch (requested) {
    case ScanBackend::eager:
    case ScanBackend::cpu:
      if (x.device() != Device::cpu)
        throw UnsupportedPath(fmt::format("scan_backend={}: x is on the GPU; use auto or cuda",
                                          scan_backend_name(requested)));
      return Resolved::cpu;
    case ScanBackend::cuda: {
      std::string why;
      if (!detail::cuda_backend_available(&why))
        throw UnsupportedPath("scan_backend=cuda: " + why);
      return Resolved::cuda;
    }
    case ScanBackend::auto_select:
      return x.device() == Device::cuda ? Resolved::cuda : Resolved::cpu;
  }
  return Resolved::cpu;
}

Device device_of(Resolved backend) { return backend == Resolved::cuda ? Device::cuda : Device::cpu; }

}  // namespace

Tensor newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                    const ApplyOptions& options, NewtonStats* stats) {
  validate(config, cell.spec());
  const Resolved backend = resolve_backend(config.scan_backend, x);
  detail::Layout layout = detail::check_inputs(cell, x, options, "newton_apply", device_of(backend));
  const std::int64_t time = layout.time, batch = layout.batch;
  NewtonStats local;
  NewtonStats& s = stats ? *stats : local;
  Tensor H = backend == Resolved::cuda
                 ? detail::cuda_newton_apply(cell, x, config, options, std::move(layout), s)
                 : detail::cpu_newton_apply(cell, x, config, options, std::move(layout), s);
  detail::residual_gate(cell, config, s, time, batch);
  return H;
}

Tensor sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options) {
  const Resolved backend = resolve_backend(ScanBackend::auto_select, x);
  detail::Layout layout = detail::check_inputs(cell, x, options, "sequential_apply", device_of(backend));
  return backend == Resolved::cuda ? detail::cuda_sequential_apply(cell, x, options, std::move(layout))
                                   : detail::cpu_sequential_apply(cell, x, options, std::move(layout));
}

Tensor sequential_apply(const Cell& cell, const TensorView& x, ScanBackend backend,
                        const ApplyOptions& options) {
  const Resolved resolved = resolve_backend(backend, x);
  detail::Layout layout = detail::check_inputs(cell, x, options, "sequential_apply", device_of(resolved));
  return resolved == Resolved::cuda ? detail::cuda_sequential_apply(cell, x, options, std::move(layout))
                                    : detail::cpu_sequential_apply(cell, x, options, std::move(layout));
}

NewtonForward newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                             const ApplyOptions& options) {
  validate(config, cell.spec());
  if (resolve_backend(config.scan_backend, x) == Resolved::cuda)
    throw UnsupportedPath("newton_forward: training on the CUDA backend is not available yet; "
                          "use scan_backend=cpu");
  detail::Layout layout = detail::check_inputs(cell, x, options, "newton_forward");
  const std::int64_t time = layout.time, batch = layout.batch;
  NewtonForward forward = detail::cpu_newton_forward(cell, x, config, options, std::move(layout));
  detail::residual_gate(cell, config, forward.stats, time, batch);
  return forward;
}

NewtonGradients newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                const TensorView& grad_H, const NewtonConfig& config,
                                const ApplyOptions& options) {
  validate(config, cell.spec());
  detail::Layout layout = detail::check_inputs(cell, x, options, "newton_backward");
  return detail::cpu_newton_backward(cell, x, forward, grad_H, config, options, std::move(layout));
}

double max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                    const ApplyOptions& options) {
  detail::Layout layout = detail::check_inputs(cell, x, options, "max_residual");
  const Shape expected = cell.trajectory_shape(layout.batch, layout.time);
  if (H.shape() != expected)
    throw ContractViolation("H", "must have shape " + shape_string(expected), shape_string(H.shape()));
  return detail::cpu_max_residual(cell, x, H, options, std::move(layout));
}

}  // namespace pararnn
