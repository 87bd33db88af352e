// A cell's construction and the parameter views every backend feeds the math (cell.hpp).
#include "pararnn/cells/cell.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "pararnn/core/logging.hpp"

namespace pararnn {

std::vector<double> Cell::channel_values() const {
  const auto& entries = spec_->recurrent;
  const int constants = kind() == CellKind::slstm ? 1 : 0;
  std::vector<double> out(static_cast<std::size_t>((entries.size() + constants) * d_h_));
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const Tensor& t = parameter(std::string(entries[k].tensor));
    for (std::int64_t c = 0; c < d_h_; ++c) {
      double v = entries[k].row < 0 ? t.load({c}) : t.load({entries[k].row, c});
      if (cap_) v = std::clamp(v, -*cap_, *cap_);
      out[k * static_cast<std::size_t>(d_h_) + static_cast<std::size_t>(c)] = v;
    }
  }
  if (constants)
    for (std::int64_t c = 0; c < d_h_; ++c)
      out[entries.size() * static_cast<std::size_t>(d_h_) + static_cast<std::size_t>(c)] = options_.eps;
  return out;
}

std::vector<double> Cell::dense_chain_parameters() const {
  if (kind() == CellKind::hopfield) return {beta()};
  std::vector<double> out;
  const std::int64_t w = chain_slot_width();
  const auto clamped = [&](double v) { return cap_ ? std::clamp(v, -*cap_, *cap_) : v; };
  for (std::int64_t head = 0; head < chains_per_row(); ++head) {
    if (kind() == CellKind::gru_head) {
      for (const char* name : {"A_z", "A_r", "A_n"}) {
        const Tensor& a = parameter(name);
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j) out.push_back(clamped(a.load({head, i, j})));
      }
    } else if (kind() == CellKind::slstm_head) {
      const Tensor& r = parameter("R_head");
      for (std::int64_t g = 0; g < 4; ++g)
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j) out.push_back(clamped(r.load({g, head, i, j})));
      out.push_back(options_.eps);
    } else if (kind() == CellKind::slstm_dense) {
      const Tensor& r = parameter("R_dense.weight");
      for (std::int64_t g = 0; g < 4; ++g)
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j) out.push_back(r.load({g * d_h_ + j, i}));
      out.push_back(options_.eps);
    }
  }
  return out;
}

std::map<std::string, std::vector<double>> Cell::dense_chain_parameter_gradients(const std::vector<double>& sums,
                                                                                 std::int64_t params_per_chain) const {
  std::map<std::string, std::vector<double>> out;
  if (kind() == CellKind::hopfield) return out;
  const std::int64_t w = chain_slot_width();
  const auto masked = [&](double raw, double g) { return cap_ && std::abs(raw) > *cap_ ? 0.0 : g; };
  for (std::int64_t head = 0; head < chains_per_row(); ++head) {
    const double* chain = sums.data() + head * params_per_chain;
    std::int64_t k = 0;
    if (kind() == CellKind::gru_head) {
      for (const char* name : {"A_z", "A_r", "A_n"}) {
        const Tensor& a = parameter(name);
        auto& g = out[name];
        g.resize(static_cast<std::size_t>(a.numel()), 0.0);
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j, ++k)
            g[static_cast<std::size_t>((head * w + i) * w + j)] = masked(a.load({head, i, j}), chain[k]);
      }
    } else if (kind() == CellKind::slstm_head) {
      const Tensor& r = parameter("R_head");
      auto& g = out["R_head"];
      g.resize(static_cast<std::size_t>(r.numel()), 0.0);
      const std::int64_t heads = chains_per_row();
      for (std::int64_t gate = 0; gate < 4; ++gate)
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j, ++k)
            g[static_cast<std::size_t>(((gate * heads + head) * w + i) * w + j)] =
                masked(r.load({gate, head, i, j}), chain[k]);
    } else if (kind() == CellKind::slstm_dense) {  // not clamped (spec §1.4)
      const Tensor& r = parameter("R_dense.weight");
      auto& g = out["R_dense.weight"];
      g.resize(static_cast<std::size_t>(r.numel()), 0.0);
      for (std::int64_t gate = 0; gate < 4; ++gate)
        for (std::int64_t i = 0; i < w; ++i)
          for (std::int64_t j = 0; j < w; ++j, ++k)
            g[static_cast<std::size_t>((gate * d_h_ + j) * d_h_ + i)] = chain[k];
    }
  }
  return out;
}

Cell::Cell(const CellSpec& spec, std::int64_t d_in, std::int64_t d_h, DType dtype,
           std::optional<double> cap, CellOptions options)
    : spec_(&spec), d_in_(d_in), d_h_(d_h), dtype_(dtype),
      cap_(!spec.has_cap
               ? std::nullopt : cap),  // no clamped recurrent parameter
      options_(std::move(options)) {
  if (!is_floating(dtype))
    throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(dtype));
  if (cap && !(*cap >= 0.0))
    throw ContractViolation("max_recurrent_norm", "must be >= 0 or none", fmt::format("{}", *cap));
  if (!spec.construction_warning.empty())
    emit_warning(std::string(spec.construction_warning), std::string(spec.construction_message),
                 {{"cell", std::string(spec.name)}, {"mix", std::string(spec.mix)},
                  {"n_heads", options_.n_heads.value_or(1)}, {"d_h", d_h}});
  if (spec.kind == CellKind::hopfield && d_h > 32)
    emit_warning("hopfield_wide",
                 fmt::format("ParaHopfield d_h={} > 32: the dense Jacobian and its scan cost O(d_h³) "
                             "per step; prefer d_h <= 32", d_h),
                 {{"cell", std::string(spec.name)}, {"d_h", d_h}});
}

Shape Cell::parameter_shape(const ParameterSpec& p) const {
  const std::int64_t inputs = p.features_only ? d_in_ - 1 : d_in_;
  const std::int64_t block = p.square ? d_h_ * d_h_ : d_h_;
  switch (p.shape) {
    case ParameterShape::vector: return {d_h_};
    case ParameterShape::rows: return {p.rows, d_h_};
    case ParameterShape::affine_weight: return {p.rows * block, inputs};
    case ParameterShape::affine_bias: return {p.rows * block};
    case ParameterShape::head_matrices: {
      const std::int64_t heads = options_.n_heads.value_or(1);
      if (p.rows > 1) return {p.rows, heads, d_h_ / heads, d_h_ / heads};
      return {heads, d_h_ / heads, d_h_ / heads};
    }
    case ParameterShape::stacked_square: return {p.rows * d_h_, d_h_};
    case ParameterShape::value_matrix: return {v_dim(), v_dim()};
    case ParameterShape::key_value_weight: return {k_dim() + v_dim() + 1, inputs};
    case ParameterShape::key_value_bias: return {k_dim() + v_dim() + 1};
  }
  return {};
}

}  // namespace pararnn
