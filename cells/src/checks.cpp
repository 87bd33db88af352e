// The checks of a cell's constructor arguments (cell.hpp): each refusal names the argument,
// the rule and the value, as the Python class would refuse it.
#include "pararnn/cells/cell.hpp"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

namespace pararnn {

CellOptions Cell::with_derived_d_h(const CellSpec& spec, CellOptions options) {
  if (spec.kind == CellKind::m2rnn && options.d_h == 0 && options.k_dim && options.v_dim &&
      *options.k_dim >= 1 && *options.v_dim >= 1) {
    std::int64_t product = 0;  // an overflowing product is refused by check_options
    if (!__builtin_mul_overflow(*options.k_dim, *options.v_dim, &product)) options.d_h = product;
  }
  return options;
}

void Cell::check_options(const CellSpec& spec, const CellOptions& options) {
  if (spec.kind == CellKind::m2rnn) {
    for (const auto& [name, value] : {std::pair{"k_dim", options.k_dim}, std::pair{"v_dim", options.v_dim}}) {
      if (!value) throw ContractViolation(name, "is required for ParaM2RNN (keyword-only)", "none");
      if (*value < 1) throw ContractViolation(name, "must be >= 1", std::to_string(*value));
    }
    std::int64_t product = 0;
    if (__builtin_mul_overflow(*options.k_dim, *options.v_dim, &product) || product > kMaxStateElements)
      throw ContractViolation("k_dim, v_dim",
                              fmt::format("k_dim·v_dim must be at most {} (the state of one batch row)",
                                          kMaxStateElements),
                              fmt::format("k_dim={} v_dim={}", *options.k_dim, *options.v_dim));
    if (options.d_h != product)
      throw ContractViolation("hidden_size",
                              fmt::format("is k_dim·v_dim = {} for ParaM2RNN (an alias; leave it unset)",
                                          *options.k_dim * *options.v_dim),
                              std::to_string(options.d_h));
  } else {
    if (options.k_dim) throw ContractViolation("k_dim", "is a ParaM2RNN argument", std::to_string(*options.k_dim));
    if (options.v_dim) throw ContractViolation("v_dim", "is a ParaM2RNN argument", std::to_string(*options.v_dim));
  }
  if (options.d_in < spec.min_d_in)
    throw ContractViolation("input_size", fmt::format("must be >= {} for {}", spec.min_d_in, spec.python_class),
                            std::to_string(options.d_in));
  if (options.d_h < 1)
    throw ContractViolation("hidden_size", "must be >= 1", std::to_string(options.d_h));
  if (options.mix != spec.mix && !(options.mix == "diag" && has_single_mix(spec.name)))
    throw ContractViolation("mix", fmt::format("must be '{}' for {}", spec.mix, spec.name), options.mix);
  const bool takes_heads = spec.mix == "head" || spec.kind == CellKind::rwkv7;
  if (options.n_heads && !takes_heads)
    throw ContractViolation("n_heads", "is allowed only with mix='head' or cell rwkv7",
                            std::to_string(*options.n_heads));
  if (spec.mix == "head" && !options.n_heads)
    throw ContractViolation("n_heads", "is required with mix='head'", "none");
  if (options.n_heads && (*options.n_heads < 1 || options.d_h % *options.n_heads != 0))
    throw ContractViolation("n_heads", fmt::format("must be >= 1 and divide hidden_size={}", options.d_h),
                            std::to_string(*options.n_heads));
  if (options.beta && spec.kind != CellKind::hopfield)
    throw ContractViolation("beta", "is a ParaHopfield argument", fmt::format("{}", *options.beta));
  if (options.beta && !(*options.beta > 0.0 && std::isfinite(*options.beta)))
    throw ContractViolation("beta", "must be finite and > 0", fmt::format("{}", *options.beta));
  if (options.weight_std && !(*options.weight_std >= 0.0))
    throw ContractViolation("weight_std", "must be >= 0", fmt::format("{}", *options.weight_std));
  if (spec.max_d_h > 0 && options.d_h > spec.max_d_h)
    throw ContractViolation("hidden_size",
                            fmt::format("must be <= {} for {} mix='{}' (a small test oracle; use "
                                        "mix='diag' or 'head')",
                                        spec.max_d_h, spec.python_class, spec.mix),
                            std::to_string(options.d_h));
  if (spec.name == "slstm" && !(options.eps > 0.0 && std::isfinite(options.eps)))
    throw ContractViolation("eps", "must be finite and > 0", fmt::format("{}", options.eps));
  if (spec.gate_mix.empty() && options.gate_mix != "input")
    throw ContractViolation("gate_mix", "is a ParaCfC argument", options.gate_mix);
}

}  // namespace pararnn
