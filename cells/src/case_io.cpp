// A cell from a case file, and a cell's case-file metadata (cell.hpp).
#include "pararnn/cells/cell.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

namespace pararnn {

Cell Cell::from_case(const Case& problem) {
  CellOptions options;
  options.cell = problem.cell;
  options.mix = problem.meta("mix").value_or("diag");
  options.gate_mix = problem.meta("gate_mix").value_or(options.gate_mix);
  (void)cell_spec(problem.cell, "case metadata 'cell'");
  const CellSpec& spec = cell_spec(problem.cell, options.mix, "case metadata 'cell'", options.gate_mix);
  if (problem.x.dim() != 3)
    throw ContractViolation("x", "must be 3-D (B, T, d_in)", shape_string(problem.x.shape()));
  options.d_in = problem.x.size(2);
  const AffineBlock& first = spec.affine.front();
  const Tensor& w = problem.parameter(std::string(first.weight));
  if (first.key_value) {  // ParaM2RNN: d_h = K·V from the constructor arguments
    for (const char* key : {"k_dim", "v_dim"})
      if (!problem.meta(key))
        throw ContractViolation(fmt::format("case metadata '{}'", key),
                                fmt::format("is required for {}", spec.python_class), "<absent>");
    options.k_dim = problem.meta_int("k_dim", 0);
    options.v_dim = problem.meta_int("v_dim", 0);
  } else if (w.dim() != 2 || w.size(0) % first.gates != 0 || w.size(0) == 0)
    throw ContractViolation(first.weight,
                            fmt::format("must be ({}·d_h, d_in) for {}", first.gates, spec.name),
                            shape_string(w.shape()));
  options.d_h = first.key_value ? 0 : w.size(0) / first.gates;
  if (first.square) {  // gates·d_h² rows
    const auto d = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(options.d_h))));
    if (d * d != options.d_h)
      throw ContractViolation(first.weight,
                              fmt::format("must be ({}·d_h², d_in) for {}", first.gates, spec.name),
                              shape_string(w.shape()));
    options.d_h = d;
  }
  options.max_recurrent_norm = problem.meta_cap(spec.default_cap);
  if (const auto beta = problem.meta("beta"); beta && !beta->empty() && *beta != "none")
    options.beta = problem.meta_double("beta", 0.0);
  // Constructor arguments of another cell are refused, as the Python class would (TypeError).
  for (const auto& [key, takes] : {std::pair{"eps", spec.name == "slstm"},
                                   std::pair{"gate_mix", !spec.gate_mix.empty()},
                                   std::pair{"time_bias_init", !spec.gate_mix.empty()},
                                   std::pair{"k_dim", spec.kind == CellKind::m2rnn},
                                   std::pair{"v_dim", spec.kind == CellKind::m2rnn}})
    if (!takes && problem.meta(key))
      throw ContractViolation(fmt::format("case metadata '{}'", key),
                              fmt::format("is not an argument of {}", spec.python_class), *problem.meta(key));
  options.eps = problem.meta_double("eps", options.eps);
  options.time_bias_init = problem.meta_double("time_bias_init", options.time_bias_init);
  if (problem.meta("n_heads")) options.n_heads = problem.meta_int("n_heads", 0);
  // W_x has the same shape for every head count of ParaRWKV7, and a state_dict cannot carry
  // n_heads: without the metadata the case is ambiguous (one head would solve another problem).
  if (spec.kind == CellKind::rwkv7 && !options.n_heads)
    throw ContractViolation("case metadata 'n_heads'",
                            "is required for ParaRWKV7 (W_x's shape is the same for every head "
                            "count, so the state_dict cannot tell it; write str(cell.n_heads))",
                            "<absent>");
  options = with_derived_d_h(spec, options);
  check_options(spec, options);
  Cell cell(spec, options.d_in, options.d_h, problem.dtype(), options.max_recurrent_norm, options);
  for (const ParameterSpec& p : spec.parameters) {
    const std::string name(p.name);
    const Tensor& t = problem.parameter(name);
    const Shape shape = cell.parameter_shape(p);
    if (t.shape() != shape)
      throw ContractViolation(name, "must have shape " + shape_string(shape), shape_string(t.shape()));
    if (t.dtype() != problem.dtype())
      throw ContractViolation(name, std::string("must have the dtype of x, ") +
                                        std::string(dtype_name(problem.dtype())),
                              dtype_name(t.dtype()));
    cell.parameters_.emplace(name, t);
  }
  for (const auto& [name, tensor] : problem.parameters)
    if (!cell.parameters_.contains(name))
      throw ContractViolation(name, fmt::format("is not a parameter of {}", spec.python_class),
                              shape_string(tensor.shape()));
  return cell;
}

std::map<std::string, std::string> Cell::metadata() const {
  std::map<std::string, std::string> m = {
      {"cell", std::string(spec_->name)},
      {"mix", std::string(spec_->mix)},
      {"max_recurrent_norm", cap_ ? fmt::format("{}", *cap_) : "none"},
      {"input_size", std::to_string(d_in_)},
      {"hidden_size", std::to_string(d_h_)},
      {"python_class", std::string(spec_->python_class)}};
  if (!spec_->has_cap) m.erase("max_recurrent_norm");  // no recurrent parameter, no cap argument
  if (spec_->mix == "head" || kind() == CellKind::rwkv7) m["n_heads"] = std::to_string(n_heads());
  if (kind() == CellKind::hopfield) m["beta"] = fmt::format("{}", beta());
  if (spec_->name == "slstm") m["eps"] = fmt::format("{}", options_.eps);
  if (kind() == CellKind::m2rnn) {  // ParaM2RNN(input_size, *, k_dim, v_dim): no mix, no hidden_size
    for (const char* key : {"mix", "hidden_size"}) m.erase(key);
    m["k_dim"] = std::to_string(k_dim());
    m["v_dim"] = std::to_string(v_dim());
  }
  if (!spec_->gate_mix.empty()) {
    m["gate_mix"] = options_.gate_mix;
    m["time_bias_init"] = fmt::format("{}", options_.time_bias_init);
  }
  return m;
}

Case Cell::make_case(Tensor x, std::optional<Tensor> h0) const {
  Case problem;
  problem.cell = std::string(spec_->name);
  problem.metadata = metadata();
  problem.parameters = parameters_;
  problem.x = std::move(x);
  problem.h0 = std::move(h0);
  return problem;
}

}  // namespace pararnn
