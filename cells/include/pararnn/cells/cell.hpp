// Host-side description of a production cell: which cell, its sizes, its parameters under the
// Python library's state_dict names, its constructor arguments, initialisation and case-file
// metadata. Host only (the per-channel math in gru_diag.hpp, lstm.hpp, nlru.hpp is what runs on
// both sides).
//
// Guarantees: `Cell::from_case` accepts exactly the parameter names and shapes of pararnn-torch
// (W_x.weight (G·d_h, d_in), W_x.bias (G·d_h,), recurrent vectors (d_h,)) in the case's dtype and
// refuses anything else with a ContractViolation naming the tensor; `Cell::initialise` follows
// the library's App. C.1 initialisation (W_x.weight U(±1/√d_in), bias 0, recurrent N(0, 1/d_h)
// or N(0, weight_std²)), seeded and reproducible. Example:
//   Cell cell = Cell::initialise({.cell = "gru", .d_in = 8, .d_h = 16}, DType::f32, /*seed=*/1);
//   Case problem = cell.make_case(x);
#pragma once

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

enum class CellKind { gru, lstm, nlru };

// Static facts of one cell kind.
struct CellSpec {
  CellKind kind;
  std::string_view name;          // case-file "cell"
  std::string_view python_class;  // pararnn-torch class
  int slots;
  int gates;                                    // W_x output width / d_h
  std::vector<std::string_view> recurrent;      // per-channel recurrent vectors, clamped
  std::vector<std::string_view> slot_names;     // e.g. {"c", "h"}
  int library_newton_iters;                     // K table value (CONTRACT §4)
};

inline const std::vector<CellSpec>& cell_specs() {
  static const std::vector<CellSpec> specs = {
      {CellKind::gru, "gru", "ParaGRU", 1, 3, {"a_z", "a_r", "a_n"}, {"h"}, 3},
      {CellKind::lstm, "lstm", "ParaLSTM", 2, 3, {"a_f", "a_z", "a_o", "c_f", "c_o"}, {"c", "h"}, 3},
      {CellKind::nlru, "nlru", "ParaNLRU", 1, 2, {"u"}, {"h"}, 3},
  };
  return specs;
}

inline const CellSpec& cell_spec(CellKind kind) {
  for (const auto& spec : cell_specs())
    if (spec.kind == kind) return spec;
  throw Error("unknown cell kind");
}

inline const CellSpec& cell_spec(std::string_view name, std::string_view argument = "cell") {
  for (const auto& spec : cell_specs())
    if (spec.name == name) return spec;
  std::string known;
  for (const auto& spec : cell_specs()) known += (known.empty() ? "" : ", ") + std::string(spec.name);
  throw ContractViolation(argument, "must be one of " + known, name);
}

// Calls `f.template operator()<CellMath>()` with the per-channel math struct of `kind`: the one
// cell dispatch of the project.
template <class F>
decltype(auto) dispatch_cell(CellKind kind, F&& f) {
  switch (kind) {
    case CellKind::gru: return f.template operator()<cells::GruDiagMath>();
    case CellKind::lstm: return f.template operator()<cells::LstmMath>();
    case CellKind::nlru: return f.template operator()<cells::NlruMath>();
  }
  throw Error("unknown cell kind");
}

// Constructor arguments (Python names in comments). Designated initialisers at call sites.
struct CellOptions {
  std::string cell = "gru";
  std::string mix = "diag";                          // mix
  std::int64_t d_in = 0;                             // input_size
  std::int64_t d_h = 0;                              // hidden_size
  std::optional<std::int64_t> n_heads;               // n_heads (head mixes)
  std::optional<double> max_recurrent_norm = 0.5;    // nullopt = "none" (no clamp)
  std::optional<double> weight_std;                  // recurrent std; default 1/√(numel)
};

class Cell {
 public:
  static Cell initialise(const CellOptions& options, DType dtype, std::uint64_t seed) {
    const CellSpec& spec = cell_spec(options.cell);
    check_options(spec, options);
    Cell cell(spec, options.d_in, options.d_h, dtype, options.max_recurrent_norm);
    std::mt19937_64 rng(seed);
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.d_in));
    std::uniform_real_distribution<double> uniform(-bound, bound);
    const double std_dev =
        options.weight_std.value_or(1.0 / std::sqrt(static_cast<double>(options.d_h)));
    std::normal_distribution<double> normal(0.0, std_dev);
    // state_dict order: recurrent vectors, then W_x.weight, W_x.bias (zeros).
    for (auto name : spec.recurrent) {
      Tensor t(dtype, {options.d_h});
      for (std::int64_t c = 0; c < options.d_h; ++c) t.store({c}, normal(rng));
      cell.parameters_.emplace(std::string(name), t);
    }
    Tensor w(dtype, {spec.gates * options.d_h, options.d_in});
    for (std::int64_t i = 0; i < w.size(0); ++i)
      for (std::int64_t j = 0; j < w.size(1); ++j) w.store({i, j}, uniform(rng));
    cell.parameters_.emplace("W_x.weight", w);
    cell.parameters_.emplace("W_x.bias", Tensor(dtype, {spec.gates * options.d_h}));
    return cell;
  }

  // Reads and validates the cell of a case (names, shapes, dtypes, metadata).
  static Cell from_case(const Case& problem) {
    const CellSpec& spec = cell_spec(problem.cell, "case metadata 'cell'");
    const std::string mix = problem.meta("mix").value_or("diag");
    if (mix != "diag")
      throw ContractViolation("case metadata 'mix'", fmt::format("must be 'diag' for {}", spec.name),
                              mix);
    if (problem.x.dim() != 3)
      throw ContractViolation("x", "must be 3-D (B, T, d_in)", shape_string(problem.x.shape()));
    const std::int64_t d_in = problem.x.size(2);
    const Tensor& w = problem.parameter("W_x.weight");
    if (w.dim() != 2 || w.size(1) != d_in || w.size(0) % spec.gates != 0 || w.size(0) == 0)
      throw ContractViolation(
          "W_x.weight", fmt::format("must be ({}·d_h, d_in={}) for {}", spec.gates, d_in, spec.name),
          shape_string(w.shape()));
    const std::int64_t d_h = w.size(0) / spec.gates;
    Cell cell(spec, d_in, d_h, problem.dtype(), problem.meta_cap(0.5));
    auto take = [&](const std::string& name, const Shape& shape) {
      const Tensor& t = problem.parameter(name);
      if (t.shape() != shape)
        throw ContractViolation(name, "must have shape " + shape_string(shape),
                                shape_string(t.shape()));
      if (t.dtype() != problem.dtype())
        throw ContractViolation(name, std::string("must have the dtype of x, ") +
                                          std::string(dtype_name(problem.dtype())),
                                dtype_name(t.dtype()));
      cell.parameters_.emplace(name, t);
    };
    for (auto name : spec.recurrent) take(std::string(name), {d_h});
    take("W_x.weight", {spec.gates * d_h, d_in});
    take("W_x.bias", {spec.gates * d_h});
    for (const auto& [name, tensor] : problem.parameters)
      if (!cell.parameters_.contains(name))
        throw ContractViolation(name, fmt::format("is not a parameter of {}", spec.python_class),
                                shape_string(tensor.shape()));
    return cell;
  }

  const CellSpec& spec() const { return *spec_; }
  CellKind kind() const { return spec_->kind; }
  std::string_view name() const { return spec_->name; }
  std::int64_t d_in() const { return d_in_; }
  std::int64_t d_h() const { return d_h_; }
  int slots() const { return spec_->slots; }
  DType dtype() const { return dtype_; }
  std::optional<double> max_recurrent_norm() const { return cap_; }
  const std::map<std::string, Tensor>& parameters() const { return parameters_; }
  const Tensor& parameter(const std::string& name) const {
    auto it = parameters_.find(name);
    if (it == parameters_.end()) throw ContractViolation("parameter", "unknown name", name);
    return it->second;
  }
  // Replace a parameter (same shape and dtype), e.g. to plant hard weights in a test.
  void set_parameter(const std::string& name, Tensor value) {
    const Tensor& old = parameter(name);
    if (value.shape() != old.shape() || value.dtype() != old.dtype())
      throw ContractViolation(name, "replacement must keep shape " + shape_string(old.shape()),
                              shape_string(value.shape()));
    parameters_[name] = std::move(value);
  }

  // Case-file metadata: cell, mix, max_recurrent_norm, and the Python constructor sizes.
  std::map<std::string, std::string> metadata() const {
    return {{"cell", std::string(spec_->name)},
            {"mix", "diag"},
            {"max_recurrent_norm", cap_ ? fmt::format("{}", *cap_) : "none"},
            {"input_size", std::to_string(d_in_)},
            {"hidden_size", std::to_string(d_h_)},
            {"python_class", std::string(spec_->python_class)}};
  }

  // A case holding this cell, the input and the optional initial state.
  Case make_case(Tensor x, std::optional<Tensor> h0 = std::nullopt) const {
    Case problem;
    problem.cell = std::string(spec_->name);
    problem.metadata = metadata();
    problem.parameters = parameters_;
    problem.x = std::move(x);
    problem.h0 = std::move(h0);
    return problem;
  }

  // Trajectory shape for (B, T): (B, T, d_h) or (B, T, slots, d_h).
  Shape trajectory_shape(std::int64_t batch, std::int64_t time) const {
    if (slots() == 1) return {batch, time, d_h_};
    return {batch, time, slots(), d_h_};
  }

 private:
  Cell(const CellSpec& spec, std::int64_t d_in, std::int64_t d_h, DType dtype,
       std::optional<double> cap)
      : spec_(&spec), d_in_(d_in), d_h_(d_h), dtype_(dtype), cap_(cap) {
    if (!is_floating(dtype))
      throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(dtype));
    if (cap && !(*cap >= 0.0))
      throw ContractViolation("max_recurrent_norm", "must be >= 0 or none", fmt::format("{}", *cap));
  }

  static void check_options(const CellSpec& spec, const CellOptions& options) {
    if (options.d_in < 1)
      throw ContractViolation("input_size", "must be >= 1", std::to_string(options.d_in));
    if (options.d_h < 1)
      throw ContractViolation("hidden_size", "must be >= 1", std::to_string(options.d_h));
    if (options.mix != "diag")
      throw ContractViolation("mix", fmt::format("must be 'diag' for {}", spec.name), options.mix);
    if (options.n_heads)
      throw ContractViolation("n_heads", "is allowed only with mix='head'",
                              std::to_string(*options.n_heads));
    if (options.weight_std && !(*options.weight_std >= 0.0))
      throw ContractViolation("weight_std", "must be >= 0", fmt::format("{}", *options.weight_std));
  }

  const CellSpec* spec_;
  std::int64_t d_in_;
  std::int64_t d_h_;
  DType dtype_;
  std::optional<double> cap_;
  std::map<std::string, Tensor> parameters_;
};

}  // namespace pararnn
