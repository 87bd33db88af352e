// Input checks, the refusals more than one family row shares, and the residual gate.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backends.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/core/logging.hpp"

namespace pararnn {
namespace detail {
namespace {
std::string history_tail(const std::vector<double>& history) {
  std::string out = "[";
  const std::size_t first = history.size() > 8 ? history.size() - 8 : 0;
  for (std::size_t i = first; i < history.size(); ++i)
    out += fmt::format("{}{:.3e}", i == first ? "" : ", ", history[i]);
  return out + "]";
}

}  // namespace

void refuse_cpu_only_options(const NewtonConfig* config, const char* who) {
  if (config == nullptr) return;
  if (config->coords == Coords::log)
    throw UnsupportedPath(fmt::format("{}: coords=log is built on the CPU backend only (the CUDA per-channel "
                                      "kernels iterate in native coordinates); use scan_backend=cpu with host "
                                      "tensors",
                                      who));
  if (config->newton_backtrack)
    throw UnsupportedPath(fmt::format("{}: newton_backtrack is built on the CPU backend only (the CUDA M2RNN walk "
                                      "has no per-row backtracking); use scan_backend=cpu with host tensors", who));
}

// ParaRWKV7 (spec §1.10): no packing, no windows (its (G, U) scan is exact).
void check_exact_linear_inputs(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                               const char*) {
  if (options.cu_seqlens)
    throw ContractViolation("cu_seqlens", fmt::format("is not supported by {} (cell '{}' refuses packed input)",
                                                      cell.spec().python_class, cell.name()),
                            shape_string(options.cu_seqlens->shape()));
  if (config && config->window_len)
    throw ContractViolation("window_len", fmt::format("is not supported by {} (its (G, U) scan is exact: "
                                                     "there is no Newton to window)", cell.spec().python_class),
                            std::to_string(*config->window_len));
}

// ParaM2RNN takes rectangular batches only (pararnn-torch raises ValueError for cu_seqlens and
// window_len), and its frozen-W Picard warm start (picard_iters >= 1) is not built.
void check_matrix_state_inputs(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                               const char* who) {
  const std::string_view python = cell.spec().python_class;
  if (options.cu_seqlens)
    throw ContractViolation("cu_seqlens",
                            fmt::format("is not accepted by {} ({}): rectangular batches only", python, who),
                            shape_string(options.cu_seqlens->shape()));
  if (config == nullptr) return;
  if (config->window_len)
    throw ContractViolation("window_len",
                            fmt::format("is not accepted by {} ({}): no windowed Newton", python, who),
                            std::to_string(*config->window_len));
  if (config->picard_iters && *config->picard_iters > 0)
    throw UnsupportedPath(fmt::format("{}: picard_iters={} (the frozen-W warm start of {}) is not built "
                                      "yet; leave it unset or 0 (App. A initial guess)",
                                      who, *config->picard_iters, python));
}

Layout check_inputs(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                    const char* who, Device required) {
  Layout layout;
  if (required == Device::cpu && x.device() != Device::cpu)
    throw UnsupportedPath(fmt::format("{}: the cpu backend needs host tensors", who));
  if (x.dim() != 3)
    throw ContractViolation("x", "must be 3-D (B, T, d_in)", shape_string(x.shape()));
  layout.batch = x.size(0);
  layout.time = x.size(1);
  layout.d_in = x.size(2);
  layout.d_h = cell.d_h();
  if (layout.time < 1)
    throw ContractViolation("x", fmt::format("{} needs time >= 1", who), shape_string(x.shape()));
  if (layout.batch < 1)
    throw ContractViolation("x", "needs batch >= 1", shape_string(x.shape()));
  if (layout.d_in != cell.d_in())
    throw ContractViolation("x", fmt::format("last dimension must be input_size={}", cell.d_in()),
                            shape_string(x.shape()));
  if (x.dtype() != cell.dtype())
    throw ContractViolation("x", fmt::format("dtype must be the cell's, {}", dtype_name(cell.dtype())),
                            dtype_name(x.dtype()));
  layout.heads.assign(static_cast<std::size_t>(layout.time), 0);
  layout.state_index.assign(static_cast<std::size_t>(layout.time), -1);
  layout.heads[0] = 1;
  std::int64_t states = layout.batch;
  if (options.cu_seqlens) {
    if (layout.batch != 1)
      throw ContractViolation("x", "batch must be 1 with cu_seqlens", shape_string(x.shape()));
    const auto starts = validate_cu_seqlens(*options.cu_seqlens, layout.time);
    layout.packed = true;
    for (std::size_t s = 0; s < starts.size(); ++s) {
      const auto start = static_cast<std::size_t>(starts[s] - (s > 0 && PARARNN_FAULT_POINT("cu_seqlens_off_by_one") ? 1 : 0));
      layout.heads[start] = 1;
      layout.state_index[start] = static_cast<std::int64_t>(s);
    }
    states = static_cast<std::int64_t>(starts.size());
  }
  if (options.h0) {
    const TensorView& h0 = *options.h0;
    // The carry shape (B, *state_shape): (B, d_h), (B, slots, d_h), RWKV-7's (B, n_heads, d, d),
    // M2RNN's (B, K, V); every cell but RWKV-7 also takes (B, slots, d_h) and one-slot cells (B, d_h).
    Shape carry = {states};
    for (std::int64_t extent : cell.state_shape()) carry.push_back(extent);
    const Shape slotted = {states, cell.slots(), cell.d_h()};
    const Shape flat = {states, cell.d_h()};
    const bool flat_forms = cell.kind() != CellKind::rwkv7;
    const bool ok = h0.shape() == carry ||
                    (flat_forms && (h0.shape() == slotted || (cell.slots() == 1 && h0.shape() == flat)));
    std::string forms = shape_string(carry);
    if (flat_forms && slotted != carry) forms += " or " + shape_string(slotted);
    if (flat_forms && cell.slots() == 1 && flat != carry) forms += " or " + shape_string(flat);
    if (!ok)
      throw ContractViolation(
          "h0",
          fmt::format("must have shape {} ({} {})", forms, states, layout.packed ? "segments" : "batch rows"),
          shape_string(h0.shape()));
    if (h0.dtype() != cell.dtype())
      throw ContractViolation("h0", fmt::format("dtype must be the cell's, {}", dtype_name(cell.dtype())),
                              dtype_name(h0.dtype()));
    if (required == Device::cpu && h0.device() != Device::cpu)
      throw UnsupportedPath(fmt::format("{}: the cpu backend needs a host h0", who));
  }
  return layout;
}

void check_cotangent(const TensorView& grad_H, const Shape& trajectory, const char* argument) {
  if (grad_H.shape() != trajectory)
    throw ContractViolation(argument, "must have the trajectory's shape " + shape_string(trajectory),
                            shape_string(grad_H.shape()));
  if (!is_floating(grad_H.dtype()))
    throw ContractViolation(argument, "must be floating", dtype_name(grad_H.dtype()));
  if (const auto where = describe_first_non_finite(grad_H, argument))
    throw ContractViolation(argument, "must be finite (a non-finite cotangent makes every gradient non-finite)",
                            *where);
}

std::string non_finite_input_note(const Cell& cell, const TensorView& x, const ApplyOptions& options) {
  std::optional<std::string> where = describe_first_non_finite(x, "x");
  if (!where && options.h0) where = describe_first_non_finite(*options.h0, "h0");
  for (const auto& [name, tensor] : cell.parameters()) {
    if (where) break;
    where = describe_first_non_finite(parameter_of(cell, options, name), fmt::format("parameter '{}'", name));
  }
  return where ? fmt::format(" The input is not finite: {}.", *where) : std::string();
}

void residual_gate(const Cell& cell, const NewtonConfig& config, const NewtonStats& stats,
                   const TensorView& x, const ApplyOptions& options) {
  if (stats.outcome_on_device) return;  // applied on the device: H is all NaN where it fires
  const std::int64_t time = x.size(1), batch = x.size(0);
  const double res = stats.max_residual;
  nlohmann::json fields = {{"max_residual", res},
                           {"residual_fail", config.residual_fail ? nlohmann::json(*config.residual_fail) : nlohmann::json(nullptr)},
                           {"iters", stats.iters},
                           {"T", time},
                           {"batch", batch},
                           {"cell", std::string(cell.name())},
                           {"backend", std::string(solve_backend_name(stats.scan_backend))},
                           {"residual_history", std::vector<double>(
                               stats.residual_history.end() - std::min<std::ptrdiff_t>(8, static_cast<std::ptrdiff_t>(stats.residual_history.size())),
                               stats.residual_history.end())}};
  if (config.residual_fail && (!std::isfinite(res) || res > *config.residual_fail)) {
    emit_warning("newton_diverged", "residual gate fired", fields);
    throw NewtonDivergenceError(fmt::format(
        "Newton diverged: max|F(H)|={:.6e} after iters={} (residual_fail={}; T={}, batch={}, "
        "cell={}, backend={}, history={}). A residual >= residual_fail means the solver left its "
        "basin: do not step the optimizer on this batch.{}{}",
        res, stats.iters, *config.residual_fail, time, batch, cell.name(), solve_backend_name(stats.scan_backend),
        history_tail(stats.residual_history), non_finite_input_note(cell, x, options),
        cell.spec().picard ? " For ParaSLSTM raise picard_iters." : ""));
  }
  if (!(res <= kResidualWarn))
    emit_warning("newton_residual_high",
                 fmt::format("max|F(H)|={:.3e} above {:.0e} after {} iterations", res,
                             kResidualWarn, stats.iters),
                 fields);
}

Tensor gradient_tensor(const Cell& cell, const Shape& shape, std::span<const double> values) {
  const DType compute = compute_dtype(cell.dtype());
  const Tensor rounded = Tensor::from_values(compute, shape, values);
  return compute == cell.dtype() ? rounded : Tensor::converted(rounded, cell.dtype());
}

void check_parameter_views(const Cell& cell, const ApplyOptions& options, bool reads_views, const char* row,
                           const char* who) {
  if (options.parameters.empty()) return;
  if (!reads_views)
    throw UnsupportedPath(fmt::format("{}: ApplyOptions::parameters (views of the cell's parameters) are read by the "
                                      "CUDA per-channel family only, and this solve runs on the {} row",
                                      who, row));
  for (const auto& [name, view] : options.parameters) {
    const std::string argument = fmt::format("parameters['{}']", name);
    const auto it = cell.parameters().find(name);
    if (it == cell.parameters().end())
      throw ContractViolation(argument, fmt::format("must name a parameter of the {} cell", cell.name()), name);
    if (view.shape() != it->second.shape())
      throw ContractViolation(argument, fmt::format("must have the parameter's shape {}", shape_string(it->second.shape())),
                              shape_string(view.shape()));
    if (view.dtype() != cell.dtype())
      throw ContractViolation(argument, fmt::format("dtype must be the cell's, {}", dtype_name(cell.dtype())),
                              dtype_name(view.dtype()));
    if (!view.is_contiguous())
      throw ContractViolation(argument, "must be contiguous", "strides " + shape_string(view.strides()));
    if (view.device() != Device::cuda)
      throw ContractViolation(argument, "must be on the solve's CUDA device (a host value belongs in the Cell)",
                              "a host tensor");
  }
}

TensorView parameter_of(const Cell& cell, const ApplyOptions& options, const std::string& name) {
  const auto it = options.parameters.find(name);
  return it != options.parameters.end() ? it->second : cell.parameter(name).view();
}

std::map<std::string, Tensor> recurrent_gradients(const Cell& cell, std::span<const double> sums) {
  return recurrent_gradients(cell, sums, {});
}

std::map<std::string, Tensor> recurrent_gradients(const Cell& cell, std::span<const double> sums,
                                                  const std::map<std::string, Tensor>& raw_values) {
  const std::int64_t D = cell.d_h();
  const auto cap = cell.max_recurrent_norm();
  std::map<std::string, std::vector<double>> values;
  const auto& entries = cell.spec().recurrent;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const RecurrentEntry& e = entries[k];
    const std::string name(e.tensor);
    const auto given = raw_values.find(name);
    const Tensor& raw = given != raw_values.end() ? given->second : cell.parameter(name);
    std::vector<double>& v = values[name];
    v.resize(static_cast<std::size_t>(raw.numel()), 0.0);
    for (std::int64_t c = 0; c < D; ++c) {
      const double raw_value = e.row < 0 ? raw.load({c}) : raw.load({e.row, c});
      const bool clipped = cap && std::abs(raw_value) > *cap;
      const std::int64_t flat = e.row < 0 ? c : e.row * D + c;
      v[static_cast<std::size_t>(flat)] = clipped ? 0.0 : sums[k * static_cast<std::size_t>(D) + static_cast<std::size_t>(c)];
    }
  }
  std::map<std::string, Tensor> out;
  for (const auto& [name, v] : values) out.emplace(name, gradient_tensor(cell, cell.parameter(name).shape(), v));
  return out;
}

}  // namespace detail

std::vector<std::int64_t> validate_cu_seqlens(const TensorView& cu_seqlens,
                                              std::int64_t total_length) {
  if (cu_seqlens.dtype() != DType::i32 && cu_seqlens.dtype() != DType::i64)
    throw ContractViolation("cu_seqlens", "dtype must be int32 or int64",
                            dtype_name(cu_seqlens.dtype()));
  if (cu_seqlens.dim() != 1)
    throw ContractViolation("cu_seqlens", "must be 1-D (S+1,)", shape_string(cu_seqlens.shape()));
  if (cu_seqlens.size(0) < 2)
    throw ContractViolation("cu_seqlens", "needs at least 2 entries",
                            shape_string(cu_seqlens.shape()));
  if (cu_seqlens.device() != Device::cpu)
    throw UnsupportedPath("cu_seqlens: the cpu backend needs a host tensor");
  // Read as integers (exact, strides honoured): through double, int64 entries above 2^53 lost
  // their low bits and entries near 2^63 overflowed the conversion back (found by fuzzing).
  const Tensor exact = Tensor::converted(cu_seqlens, DType::i64);
  const std::int64_t* entries = exact.data_as<std::int64_t>();
  std::vector<std::int64_t> values(entries, entries + exact.numel());
  if (values.front() != 0)
    throw ContractViolation("cu_seqlens", "must start at 0 (cu_seqlens[0] == 0)",
                            std::to_string(values.front()));
  if (values.back() != total_length)
    throw ContractViolation("cu_seqlens",
                            fmt::format("must end at the packed length N={} (cu_seqlens[-1] == N)",
                                        total_length),
                            std::to_string(values.back()));
  for (std::size_t i = 1; i < values.size(); ++i)
    if (values[i] <= values[i - 1])
      throw ContractViolation(
          "cu_seqlens", "must be strictly increasing",
          fmt::format("cu_seqlens[{}]={} after cu_seqlens[{}]={}", i, values[i], i - 1, values[i - 1]));
  values.pop_back();
  return values;
}

}  // namespace pararnn
