// The solver's public entry points: validate the configuration, resolve the backend (auto:
// cuda for device tensors, cpu for host tensors; eager = cpu; an explicit backend that cannot
// run raises UnsupportedPath), call the family implementation through the backend table
// (family_entry: per_channel -> cpu/per_channel.cpp or cuda/per_channel.cpp; dense ->
// cpu/dense.cpp or cuda/dense.cpp for chains of N <= 32; linear_gu (RWKV-7) -> cpu/exact_linear.cpp
// or cuda/exact_linear.cpp's exact scan for heads of d <= 64; matrix_map (M2RNN) ->
// cpu/matrix_state.cpp or cuda/matrix_state.cpp for states whose walk fits a block's shared
// memory), and run the residual gate.
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

// coords=log is built on the CPU backend (the CUDA kernels iterate in native coordinates).
void check_coords(const NewtonConfig& config, Resolved backend, const char* who) {
  if (config.coords == Coords::log && backend == Resolved::cuda)
    throw UnsupportedPath(fmt::format("{}: coords=log is built on the CPU backend only (the CUDA per-channel "
                                      "kernels iterate in native coordinates); use scan_backend=cpu with host "
                                      "tensors",
                                      who));
}

Device device_of(Resolved backend) { return backend == Resolved::cuda ? Device::cuda : Device::cpu; }

// The backend table: one row per (cell family, backend) naming that family implementation's
// entry points (cpu/*.cpp, cuda/*.cpp; the Newton algorithm itself is newton/driver.hpp). A
// null entry is a path the family does not have (training of the non-per-channel families).
struct FamilyEntry {
  Tensor (*newton)(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&, detail::Layout,
                   NewtonStats&);
  Tensor (*sequential)(const Cell&, const TensorView&, const ApplyOptions&, detail::Layout);
  NewtonForward (*forward)(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                           detail::Layout);
  NewtonGradients (*backward)(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                              const NewtonConfig&, const ApplyOptions&, detail::Layout);
  double (*max_residual)(const Cell&, const TensorView&, const TensorView&, const ApplyOptions&, detail::Layout);
  // The *_into forms, writing H / ∇x into a caller's view on the host or on the solve's device
  // (null: the path computes a host result that write_result copies into the view).
  void (*newton_into)(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                      detail::Layout, NewtonStats&);
  NewtonForward (*forward_into)(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                                const ApplyOptions&, detail::Layout);
  NewtonGradients (*backward_into)(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                   const TensorView&, const NewtonConfig&, const ApplyOptions&, detail::Layout);
};

// RWKV-7's exact linear family has no Newton: its "solve" is the exact (G, U) scan, or the step
// loop for scan_backend=eager.
Tensor rwkv7_cpu_solve(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                       const ApplyOptions& options, detail::Layout layout, NewtonStats& stats) {
  return detail::rwkv7_apply(cell, x, options, std::move(layout), config.scan_backend != ScanBackend::eager, stats);
}
Tensor rwkv7_cuda_solve(const Cell& cell, const TensorView& x, const NewtonConfig&, const ApplyOptions& options,
                        detail::Layout layout, NewtonStats& stats) {
  return detail::cuda_rwkv7_apply(cell, x, options, std::move(layout), stats);
}

const FamilyEntry& family_entry(JacobianClass family, Resolved backend) {
  static const FamilyEntry kCpu[] = {
      /* per_channel */ {detail::cpu_newton_apply, detail::cpu_sequential_apply, detail::cpu_newton_forward,
                         detail::cpu_newton_backward, detail::cpu_max_residual, nullptr, nullptr, nullptr},
      /* dense */ {detail::dense_newton_apply, detail::dense_sequential_apply, detail::dense_newton_forward,
                   detail::dense_newton_backward, detail::dense_max_residual, nullptr, nullptr, nullptr},
      /* linear_gu */ {rwkv7_cpu_solve, detail::rwkv7_sequential_apply, detail::rwkv7_newton_forward,
                       detail::rwkv7_newton_backward, detail::rwkv7_max_residual, nullptr, nullptr, nullptr},
      /* matrix_map */ {detail::m2rnn_newton_apply, detail::m2rnn_sequential_apply, detail::m2rnn_newton_forward,
                        detail::m2rnn_newton_backward, detail::m2rnn_max_residual, nullptr, nullptr, nullptr}};
  static const FamilyEntry kCuda[] = {
      /* per_channel */ {detail::cuda_newton_apply, detail::cuda_sequential_apply, detail::cuda_newton_forward,
                         detail::cuda_newton_backward, nullptr, detail::cuda_newton_apply_into,
                         detail::cuda_newton_forward_into, detail::cuda_newton_backward_into},
      /* dense */ {detail::cuda_dense_newton_apply, detail::cuda_dense_sequential_apply,
                   detail::cuda_dense_newton_forward, detail::cuda_dense_newton_backward, nullptr,
                   detail::cuda_dense_newton_apply_into, detail::cuda_dense_newton_forward_into,
                   detail::cuda_dense_newton_backward_into},
      /* linear_gu */ {rwkv7_cuda_solve, detail::cuda_rwkv7_sequential_apply, detail::cuda_rwkv7_newton_forward,
                       detail::cuda_rwkv7_newton_backward, nullptr, detail::cuda_rwkv7_apply_into,
                       detail::cuda_rwkv7_newton_forward_into, detail::cuda_rwkv7_newton_backward_into},
      /* matrix_map */ {detail::cuda_m2rnn_newton_apply, detail::cuda_m2rnn_sequential_apply,
                        detail::cuda_m2rnn_newton_forward, detail::cuda_m2rnn_newton_backward, nullptr,
                        detail::cuda_m2rnn_newton_apply_into, detail::cuda_m2rnn_newton_forward_into,
                        detail::cuda_m2rnn_newton_backward_into}};
  static_assert(static_cast<int>(JacobianClass::per_channel) == 0 && static_cast<int>(JacobianClass::dense) == 1 &&
                static_cast<int>(JacobianClass::linear_gu) == 2 && static_cast<int>(JacobianClass::matrix_map) == 3);
  return (backend == Resolved::cuda ? kCuda : kCpu)[static_cast<int>(family)];
}

bool is_dense(const Cell& cell) { return cell.spec().jacobian == JacobianClass::dense; }
bool is_linear_gu(const Cell& cell) { return cell.spec().jacobian == JacobianClass::linear_gu; }

// ParaRWKV7 (spec §1.10): no packing, no windows; its (G, U) scan is exact. On cuda: heads of
// d <= 64 (the dense scan's and the step-loop kernel's limit).
void check_linear_gu(const Cell& cell, Resolved backend, const ApplyOptions& options,
                     const NewtonConfig* config, const char* who) {
  if (!is_linear_gu(cell)) return;
  if (backend == Resolved::cuda && cell.head_dim() > detail::kCudaRwkv7MaxHeadDim)
    throw UnsupportedPath(fmt::format("{}: cell '{}' has heads of d = {} (d_h {} / n_heads {}); the CUDA "
                                      "dense scan takes d <= {}; use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.head_dim(), cell.d_h(), cell.n_heads(),
                                      detail::kCudaRwkv7MaxHeadDim));
  if (options.cu_seqlens)
    throw ContractViolation("cu_seqlens", fmt::format("is not supported by {} (cell '{}' refuses packed input)",
                                                      cell.spec().python_class, cell.name()),
                            shape_string(options.cu_seqlens->shape()));
  if (config && config->chunk_len)
    throw ContractViolation("chunk_len", fmt::format("is not supported by {} (its (G, U) scan is exact: "
                                                     "there is no Newton to window)", cell.spec().python_class),
                            std::to_string(*config->chunk_len));
}

bool is_matrix_map(const Cell& cell) { return cell.spec().jacobian == JacobianClass::matrix_map; }

// Dense-Jacobian cells run on cuda for chains of N <= 32 (the dense residual and sequential
// kernels' limit); M2RNN for states whose walk fits one block's shared memory.
void check_dense_backend(const Cell& cell, Resolved backend, const char* who) {
  if (is_dense(cell) && backend == Resolved::cuda && cell.chain_width() > detail::kCudaDenseMaxChainWidth)
    throw UnsupportedPath(fmt::format("{}: cell '{}' (mix '{}') has dense chains of N = {} values; the CUDA "
                                      "dense kernels take N <= {}; use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.spec().mix, cell.chain_width(),
                                      detail::kCudaDenseMaxChainWidth));
  if (is_matrix_map(cell) && backend == Resolved::cuda &&
      detail::cuda_m2rnn_shared_bytes(cell) > detail::kCudaM2rnnSharedBytes)
    throw UnsupportedPath(fmt::format("{}: cell '{}' has a {} x {} state; the CUDA M2RNN walk keeps W and two "
                                      "states, {} bytes, in one block's shared memory, which takes at most {}; "
                                      "use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.k_dim(), cell.v_dim(), detail::cuda_m2rnn_shared_bytes(cell),
                                      detail::kCudaM2rnnSharedBytes));
}

// newton_backtrack (M2RNN) runs on the CPU backend only.
void check_backtrack(const NewtonConfig& config, Resolved backend, const char* who) {
  if (config.newton_backtrack && backend == Resolved::cuda)
    throw UnsupportedPath(fmt::format("{}: newton_backtrack is built on the CPU backend only (the CUDA M2RNN walk "
                                      "has no per-row backtracking); use scan_backend=cpu with host tensors", who));
}

// Gradients exist where the backend's family entry has a forward and a backward.
void refuse_missing_gradients(const Cell& cell, Resolved backend, const char* who) {
  const FamilyEntry& entry = family_entry(cell.spec().jacobian, backend);
  if (entry.forward != nullptr && entry.backward != nullptr) return;
  throw UnsupportedPath(fmt::format("{}: gradients for cell '{}' are not built on this backend", who, cell.name()));
}

// ParaM2RNN takes rectangular batches only (pararnn-torch raises ValueError for cu_seqlens and
// chunk_len), and its frozen-W Picard warm start (picard_iters >= 1) is not built.
void check_matrix_map_inputs(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                             const char* who) {
  if (!is_matrix_map(cell)) return;
  const std::string_view python = cell.spec().python_class;
  if (options.cu_seqlens)
    throw ContractViolation("cu_seqlens",
                            fmt::format("is not accepted by {} ({}): rectangular batches only", python, who),
                            shape_string(options.cu_seqlens->shape()));
  if (config == nullptr) return;
  if (config->chunk_len)
    throw ContractViolation("chunk_len",
                            fmt::format("is not accepted by {} ({}): no windowed Newton", python, who),
                            std::to_string(*config->chunk_len));
  if (config->picard_iters && *config->picard_iters > 0)
    throw UnsupportedPath(fmt::format("{}: picard_iters={} (the frozen-W warm start of {}) is not built "
                                      "yet; leave it unset or 0 (App. A initial guess)",
                                      who, *config->picard_iters, python));
}

// One window's configuration: no chunking, and the K of the full length (a fixed K stays;
// the adaptive minimum is pinned with a one-entry newton_iters_by_t table).
NewtonConfig window_config(const NewtonConfig& config, const Cell& cell, std::int64_t full_time) {
  NewtonConfig w = config;
  w.chunk_len.reset();
  if (!config.max_iters)
    w.newton_iters_by_t = {{1, resolve_newton_iters(config, cell.spec(), cell.dtype(), full_time).k}};
  return w;
}

struct Window {
  std::int64_t begin, end;
};
std::vector<Window> windows_of(std::int64_t time, std::int64_t chunk_len) {
  std::vector<Window> out;
  for (std::int64_t t = 0; t < time; t += chunk_len) out.push_back({t, std::min(time, t + chunk_len)});
  return out;
}

void check_windowed(const NewtonConfig& config, const ApplyOptions& options) {
  if (config.chunk_len && options.cu_seqlens)
    throw ContractViolation("chunk_len", "cannot be combined with cu_seqlens",
                            std::to_string(*config.chunk_len));
}

// The state after the last step of a window, as the next window's h0 (storage dtype, the
// trajectory's slot layout).
Tensor last_state(const Tensor& H_window) {
  return Tensor::copy_of(H_window.view().select(1, H_window.size(1) - 1));
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
  if (total.strategy != window.strategy) total.strategy = "mixed";
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
  const std::vector<Window> wins = windows_of(layout.time, *config.chunk_len);
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
    ApplyOptions wo;
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

// A result computed on the host side of a path written into the caller's view.
void write_result(const TensorView& out, const Tensor& value, const char* argument) {
  if (out.device() == Device::cuda)
    detail::cuda_write_view(out, value, argument);
  else
    copy_into(out, value, argument);
}

const TensorView* optional_ptr(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

// Windowed Newton serially over windows, each a full solve (newton_apply) from the previous
// window's last state; the windows' stats merged (merge_stats).
Tensor window_loop(const Cell& cell, const TensorView& x, const NewtonConfig& config, const detail::Layout& layout,
                   const ApplyOptions& options, NewtonStats* stats) {
  const NewtonConfig w = window_config(config, cell, layout.time);
  Tensor H(cell.dtype(), cell.trajectory_shape(layout.batch, layout.time));
  std::optional<Tensor> h0;
  if (options.h0) h0 = Tensor::copy_of(*options.h0);
  NewtonStats total;
  bool first = true;
  for (const Window& win : windows_of(layout.time, *config.chunk_len)) {
    NewtonStats ws;
    ApplyOptions wo;
    if (h0) wo.h0 = h0->view();
    const Tensor Hw = newton_apply(cell, x.slice(1, win.begin, win.end), w, wo, &ws);
    merge_stats(total, ws, first);
    first = false;
    for (std::int64_t b = 0; b < layout.batch; ++b)
      for (std::int64_t t = win.begin; t < win.end; ++t) {
        const TensorView dst = H.view().select(0, b).select(0, t);
        const TensorView src = Hw.view().select(0, b).select(0, t - win.begin);
        std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * dtype_size(H.dtype()));
      }
    h0 = last_state(Hw);
  }
  if (stats) *stats = total;
  return H;
}

Tensor apply_impl(const Cell& cell, const TensorView& x, const NewtonConfig& config, const ApplyOptions& options,
                  NewtonStats* stats, const TensorView* out) {
  const char* who = out ? "newton_apply_into" : "newton_apply";
  validate(config, cell.spec());
  check_matrix_map_inputs(cell, &config, options, who);
  check_windowed(config, options);
  const Resolved backend = resolve_backend(config.scan_backend, x);
  check_dense_backend(cell, backend, who);
  check_coords(config, backend, who);
  check_backtrack(config, backend, who);
  check_linear_gu(cell, backend, options, &config, who);
  detail::Layout layout = detail::check_inputs(cell, x, options, who, device_of(backend));
  if (out)
    check_output(*out, "out", cell.trajectory_shape(layout.batch, layout.time), cell.dtype(),
                 {{"x", &x}, {"h0", optional_ptr(options.h0)}, {"cu_seqlens", optional_ptr(options.cu_seqlens)}});
  const bool windowed = !is_linear_gu(cell) && config.chunk_len && *config.chunk_len < layout.time;
  const FamilyEntry& entry = family_entry(cell.spec().jacobian, backend);
  if (out && !windowed && entry.newton_into) {
    NewtonStats local;
    NewtonStats& s = stats ? *stats : local;
    entry.newton_into(cell, x, *out, config, options, std::move(layout), s);
    detail::residual_gate(cell, config, s, x, options);
    return Tensor();
  }
  if (windowed && backend == Resolved::cuda && cell.spec().jacobian == JacobianClass::per_channel) {
    // Windowed Newton on CUDA: one fused launch where it applies and the window loop would not
    // have stopped early (backends.hpp), writing into `out` where one is given.
    NewtonStats fused;
    if (std::optional<Tensor> H = detail::cuda_windowed_newton_apply(cell, x, config, options, layout, out, fused)) {
      detail::residual_gate(cell, config, fused, x, options);
      if (stats) *stats = std::move(fused);
      return std::move(*H);  // empty where written into `out`
    }
  }
  if (out) {
    const Tensor H = windowed ? window_loop(cell, x, config, layout, options, stats)
                              : apply_impl(cell, x, config, options, stats, nullptr);
    write_result(*out, H, "out");
    return Tensor();
  }
  if (windowed) return window_loop(cell, x, config, layout, options, stats);
  NewtonStats local;
  NewtonStats& s = stats ? *stats : local;
  Tensor H = entry.newton(cell, x, config, options, std::move(layout), s);
  if (is_linear_gu(cell)) {
    // The exact scan has no iteration to leave its basin; what the gate can catch is a
    // non-finite state (NaN input, or an overflow from finite input): that raises.
    if (!all_finite(H)) s.max_residual = std::numeric_limits<double>::infinity();
  }
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
  const Resolved resolved = resolve_backend(backend, x);
  check_matrix_map_inputs(cell, nullptr, options, "sequential_apply");
  check_dense_backend(cell, resolved, "sequential_apply");
  check_linear_gu(cell, resolved, options, nullptr, "sequential_apply");
  detail::Layout layout = detail::check_inputs(cell, x, options, "sequential_apply", device_of(resolved));
  return family_entry(cell.spec().jacobian, resolved).sequential(cell, x, options, std::move(layout));
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

// The rules of a training call on `backend` after its configuration's (validate, check_windowed),
// the forward's and the backward's, in this order; then x's layout.
detail::Layout check_training(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                              const ApplyOptions& options, Resolved backend, const char* who) {
  refuse_missing_gradients(cell, backend, who);
  check_dense_backend(cell, backend, who);
  check_backtrack(config, backend, who);
  check_coords(config, backend, who);
  check_matrix_map_inputs(cell, &config, options, who);
  check_linear_gu(cell, backend, options, &config, who);
  return detail::check_inputs(cell, x, options, who, device_of(backend));
}

// newton_forward, with H written into *H_out when given (training.hpp's newton_forward_into).
NewtonForward forward_impl(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                           const ApplyOptions& options, const TensorView* H_out) {
  const char* who = H_out ? "newton_forward_into" : "newton_forward";
  validate(config, cell.spec());
  check_windowed(config, options);
  const Resolved backend = resolve_backend(config.scan_backend, x);
  detail::Layout layout = check_training(cell, x, config, options, backend, who);
  if (H_out)
    check_output(*H_out, "H_out", cell.trajectory_shape(layout.batch, layout.time), cell.dtype(),
                 {{"x", &x}, {"h0", optional_ptr(options.h0)}, {"cu_seqlens", optional_ptr(options.cu_seqlens)}});
  const bool windowed = config.chunk_len && *config.chunk_len < layout.time;
  NewtonForward forward;
  if (windowed) {
    // Windowed: the backward re-solves each window from the boundary states held in H.
    forward.H = newton_apply(cell, x, config, options, &forward.stats);
    if (H_out) write_result(*H_out, forward.H, "H_out");
    return forward;
  }
  const FamilyEntry& entry = family_entry(cell.spec().jacobian, backend);
  if (H_out && entry.forward_into) {
    forward = entry.forward_into(cell, x, *H_out, config, options, std::move(layout));
  } else {
    forward = entry.forward(cell, x, config, options, std::move(layout));
    if (H_out) {
      write_result(*H_out, forward.H, "H_out");
      forward.H = Tensor();
    }
  }
  detail::residual_gate(cell, config, forward.stats, x, options);
  return forward;
}

// newton_backward, with ∇x written into *grad_x when given (newton_backward_into).
NewtonGradients backward_impl(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                              const TensorView& grad_H, const NewtonConfig& config, const ApplyOptions& options,
                              const TensorView* grad_x) {
  const char* who = grad_x ? "newton_backward_into" : "newton_backward";
  validate(config, cell.spec());
  check_windowed(config, options);
  const Resolved backend = resolve_backend(config.scan_backend, x);
  detail::Layout layout = check_training(cell, x, config, options, backend, who);
  detail::check_cotangent(grad_H, cell.trajectory_shape(layout.batch, layout.time), "grad_H");
  if (grad_x)
    check_output(*grad_x, "grad_x", x.shape(), cell.dtype(),
                 {{"x", &x}, {"grad_H", &grad_H}, {"h0", optional_ptr(options.h0)},
                  {"cu_seqlens", optional_ptr(options.cu_seqlens)}});
  const bool windowed = config.chunk_len && *config.chunk_len < layout.time;
  const FamilyEntry& entry = family_entry(cell.spec().jacobian, backend);
  if (grad_x && !windowed && entry.backward_into)
    return entry.backward_into(cell, x, forward, grad_H, *grad_x, config, options, std::move(layout));
  NewtonGradients out = windowed ? windowed_backward(cell, x, forward, grad_H, config, options, layout)
                                 : entry.backward(cell, x, forward, grad_H, config, options, std::move(layout));
  if (grad_x) {
    write_result(*grad_x, out.x, "grad_x");
    out.x = Tensor();
  }
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
  const Resolved backend = resolve_backend(ScanBackend::auto_select, x);
  check_matrix_map_inputs(cell, nullptr, options, "validate_apply_inputs");
  check_linear_gu(cell, backend, options, nullptr, "validate_apply_inputs");
  (void)detail::check_inputs(cell, x, options, "validate_apply_inputs", device_of(backend));
}

double max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                    const ApplyOptions& options) {
  check_matrix_map_inputs(cell, nullptr, options, "max_residual");
  detail::Layout layout = detail::check_inputs(cell, x, options, "max_residual");
  const Shape expected = cell.trajectory_shape(layout.batch, layout.time);
  if (H.shape() != expected)
    throw ContractViolation("H", "must have shape " + shape_string(expected), shape_string(H.shape()));
  return family_entry(cell.spec().jacobian, Resolved::cpu).max_residual(cell, x, H, options, std::move(layout));
}

}  // namespace pararnn
