// The table of every production cell and its lookups (registry.hpp).
#include "pararnn/cells/registry.hpp"

#include <string>

#include "pararnn/cells/rwkv7.hpp"

namespace pararnn {

const std::vector<CellSpec>& cell_specs() {
  using PS = ParameterShape;
  using PI = ParameterInit;
  auto vec = [](std::string_view n) { return ParameterSpec{n, PS::vector, 1, PI::xavier_vec}; };
  auto weight = [](int gates, bool features = false) {
    return ParameterSpec{"W_x.weight", PS::affine_weight, gates, PI::kaiming, features};
  };
  auto bias = [](int gates) { return ParameterSpec{"W_x.bias", PS::affine_bias, gates, PI::zeros}; };
  static const std::vector<CellSpec> specs = {
      {.kind = CellKind::gru, .name = "gru", .python_class = "ParaGRU", .slots = 1, .gates = 3,
       .recurrent = {{"a_z"}, {"a_r"}, {"a_n"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 3}},
       .parameters = {vec("a_z"), vec("a_r"), vec("a_n"), weight(3), bias(3)},
       .slot_names = {"h"}, .library_newton_iters = 3},
      {.kind = CellKind::lstm, .name = "lstm", .python_class = "ParaLSTM", .slots = 2, .gates = 3,
       .recurrent = {{"a_f"}, {"a_z"}, {"a_o"}, {"c_f"}, {"c_o"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 3}},
       .parameters = {vec("a_f"), vec("a_z"), vec("a_o"), vec("c_f"), vec("c_o"), weight(3), bias(3)},
       .slot_names = {"c", "h"}, .library_newton_iters = 3},
      {.kind = CellKind::nlru, .name = "nlru", .python_class = "ParaNLRU", .slots = 1, .gates = 2,
       .recurrent = {{"u"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 2}},
       .parameters = {vec("u"), weight(2), bias(2)},
       .slot_names = {"h"}, .library_newton_iters = 3},
      {.kind = CellKind::slstm, .name = "slstm", .python_class = "ParaSLSTM", .slots = 4, .gates = 4,
       .recurrent = {{"R", 0}, {"R", 1}, {"R", 2}, {"R", 3}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 4}},
       .parameters = {ParameterSpec{"R", PS::rows, 4, PI::xavier_vec}, weight(4), bias(4)},
       .slot_names = {"c", "n", "m", "h"}, .library_newton_iters = 3, .picard = true},
      {.kind = CellKind::cfc, .name = "cfc", .python_class = "ParaCfC", .slots = 1, .gates = 4,
       .recurrent = {{"u"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 2, true}, {"W_b.weight", "W_b.bias", 3, 1, true}},
       .dt_gate = 2,
       .parameters = {vec("u"), weight(2, true), bias(2),
                      ParameterSpec{"W_b.weight", PS::affine_weight, 1, PI::zeros, true},
                      ParameterSpec{"W_b.bias", PS::affine_bias, 1, PI::constant}},
       .slot_names = {"h"}, .library_newton_iters = 3, .min_d_in = 2, .gate_mix = "input"},
      // gate_mix='diag_h': v (registered after u) feeds ṽ ⊙ h into the time-constant gate.
      {.kind = CellKind::cfc_diag_h, .name = "cfc", .python_class = "ParaCfC", .slots = 1, .gates = 4,
       .recurrent = {{"u"}, {"v"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 2, true}, {"W_b.weight", "W_b.bias", 3, 1, true}},
       .dt_gate = 2,
       .parameters = {vec("u"), vec("v"), weight(2, true), bias(2),
                      ParameterSpec{"W_b.weight", PS::affine_weight, 1, PI::zeros, true},
                      ParameterSpec{"W_b.bias", PS::affine_bias, 1, PI::constant}},
       .slot_names = {"h"}, .library_newton_iters = 3, .min_d_in = 2, .gate_mix = "diag_h"},
      {.kind = CellKind::titans, .name = "titans", .python_class = "ParaTitans", .slots = 1, .gates = 5,
       .recurrent = {{"u"}, {"r"}},
       .affine = {{"W_x.weight", "W_x.bias", 0, 5}},
       .parameters = {vec("u"), vec("r"), weight(5), bias(5)},
       .slot_names = {"h"}, .library_newton_iters = 3},
      {.kind = CellKind::gru_head, .name = "gru", .python_class = "ParaGRU", .slots = 1, .gates = 3,
       .affine = {{"W_x.weight", "W_x.bias", 0, 3}},
       .parameters = {ParameterSpec{"A_z", PS::head_matrices, 1, PI::orthogonal},
                      ParameterSpec{"A_r", PS::head_matrices, 1, PI::orthogonal},
                      ParameterSpec{"A_n", PS::head_matrices, 1, PI::orthogonal}, weight(3), bias(3)},
       .slot_names = {"h"}, .library_newton_iters = 3, .mix = "head",
       .jacobian = JacobianClass::dense, .default_cap = std::nullopt,
       .construction_warning = "gru_head_block_diagonal",
       .construction_message = "mix='head' is block-diagonal ParaGRU (Dreamer-style): the recurrence "
                               "mixes channels within each head only"},
      // ParaSLSTM mix='head': R_head [gate, head, in, out], clamped; the guess is sLSTM's.
      {.kind = CellKind::slstm_head, .name = "slstm", .python_class = "ParaSLSTM", .slots = 4, .gates = 4,
       .affine = {{"W_x.weight", "W_x.bias", 0, 4}},
       .parameters = {ParameterSpec{"R_head", PS::head_matrices, 4, PI::orthogonal}, weight(4), bias(4)},
       .slot_names = {"c", "n", "m", "h"}, .library_newton_iters = 3, .picard = true, .mix = "head",
       .jacobian = JacobianClass::dense,
       .construction_warning = "slstm_head_dense_r",
       .construction_message = "mix='head' is Beck-style dense R inside each head: the Jacobian is a "
                               "dense (4 d_head)² block per head, solved by a dense scan"},
      // ParaSLSTM mix='dense': R_dense = Linear(d_h, 4 d_h, bias=False), not clamped; a test
      // oracle for small d_h.
      {.kind = CellKind::slstm_dense, .name = "slstm", .python_class = "ParaSLSTM", .slots = 4, .gates = 4,
       .affine = {{"W_x.weight", "W_x.bias", 0, 4}},
       .parameters = {weight(4), bias(4), ParameterSpec{"R_dense.weight", PS::stacked_square, 4, PI::orthogonal}},
       .slot_names = {"c", "n", "m", "h"}, .library_newton_iters = 3, .picard = true, .mix = "dense",
       .jacobian = JacobianClass::dense, .max_d_h = 8},
      {.kind = CellKind::hopfield, .name = "hopfield", .python_class = "ParaHopfield", .slots = 1,
       .gates = 2, .affine = {{"W_x.weight", "W_x.bias", 0, 2, false, true}},
       .parameters = {ParameterSpec{"W_x.weight", PS::affine_weight, 2, PI::kaiming, false, true},
                      ParameterSpec{"W_x.bias", PS::affine_bias, 2, PI::zeros, false, true}},
       .slot_names = {"h"}, .library_newton_iters = 2, .mix = "dense",
       .jacobian = JacobianClass::dense, .library_newton_table = {{1, 2}, {64, 3}},
       .default_cap = std::nullopt, .has_cap = false},
      {.kind = CellKind::rwkv7, .name = "rwkv7", .python_class = "ParaRWKV7", .slots = 1,
       .gates = cells::Rwkv7Math::kGates, .affine = {{"W_x.weight", "W_x.bias", 0, cells::Rwkv7Math::kGates}},
       .parameters = {weight(cells::Rwkv7Math::kGates), bias(cells::Rwkv7Math::kGates)},
       .slot_names = {"S"}, .library_newton_iters = 0, .mix = "rwkv7",
       .jacobian = JacobianClass::linear_gu, .default_cap = std::nullopt, .has_cap = false},
      // K(T) = min(2 + ⌈0.75·log2 T⌉, 12) (CONTRACT §4) as a left-step table: K reaches k at the
      // first integer T > 2^((k − 3)/0.75) (m2rnn_tests checks it against the formula).
      {.kind = CellKind::m2rnn, .name = "m2rnn", .python_class = "ParaM2RNN", .slots = 1, .gates = 1,
       .affine = {{"W_x.weight", "W_x.bias", 0, 1, false, false, true}},
       .parameters = {ParameterSpec{"W", PS::value_matrix, 1, PI::identity},
                      ParameterSpec{"W_x.weight", PS::key_value_weight, 1, PI::xavier_uniform},
                      ParameterSpec{"W_x.bias", PS::key_value_bias, 1, PI::zeros}},
       .slot_names = {"h"}, .library_newton_iters = 2, .mix = "matrix",
       .jacobian = JacobianClass::matrix_map,
       .library_newton_table = {{1, 2}, {2, 3}, {3, 4}, {7, 5}, {17, 6}, {41, 7}, {102, 8},
                                {257, 9}, {646, 10}, {1626, 11}, {4097, 12}},
       .default_cap = std::nullopt, .has_cap = false},
  };
  return specs;
}

const CellSpec& cell_spec(CellKind kind) {
  for (const auto& spec : cell_specs())
    if (spec.kind == kind) return spec;
  throw Error("unknown cell kind");
}

const CellSpec& cell_spec(std::string_view name, std::string_view argument) {
  for (const auto& spec : cell_specs())
    if (spec.name == name) return spec;
  std::string known;
  for (const auto& spec : cell_specs())
    if (known.find(std::string(spec.name)) == std::string::npos)
      known += fmt::format("{}{}", known.empty() ? "" : ", ", spec.name);
  throw ContractViolation(argument, "must be one of " + known, name);
}

const CellSpec& cell_spec(std::string_view name, std::string_view mix, std::string_view argument,
                          std::string_view gate_mix) {
  (void)cell_spec(name, argument);  // an unknown cell is refused by name first
  const bool single_mix = has_single_mix(name);
  std::string mixes, gate_mixes;
  for (const auto& spec : cell_specs())
    if (spec.name == name && mixes.find(fmt::format("'{}'", spec.mix)) == std::string::npos)
      mixes += fmt::format("{}'{}'", mixes.empty() ? "" : ", ", spec.mix);
  bool mix_found = false;
  for (const auto& spec : cell_specs()) {
    if (spec.name != name || !(spec.mix == mix || (single_mix && mix == "diag"))) continue;
    if (spec.gate_mix.empty() || spec.gate_mix == gate_mix) return spec;
    mix_found = true;
    gate_mixes += fmt::format("{}'{}'", gate_mixes.empty() ? "" : " or ", spec.gate_mix);
  }
  if (mix_found)
    throw ContractViolation("gate_mix", fmt::format("must be {} for {}", gate_mixes, name), gate_mix);
  throw ContractViolation("mix", fmt::format("must be {} for {}", mixes, name), mix);
}

std::string cell_label(const CellSpec& spec) {
  const CellSpec& first = cell_spec(spec.name);
  if (spec.mix != first.mix) return fmt::format("{}:{}", spec.name, spec.mix);
  if (spec.gate_mix != first.gate_mix) return fmt::format("{}:{}", spec.name, spec.gate_mix);
  return std::string(spec.name);
}

bool has_single_mix(std::string_view name) {
  const CellSpec* first = nullptr;
  for (const auto& spec : cell_specs()) {
    if (spec.name != name) continue;
    if (first != nullptr && spec.mix != first->mix) return false;
    if (first == nullptr) first = &spec;
  }
  return true;
}

}  // namespace pararnn
