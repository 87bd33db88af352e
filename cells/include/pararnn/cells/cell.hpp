// Host-side description of a production cell: which cell, its sizes, its parameters under the
// Python library's state_dict names, its constructor arguments, initialisation and case-file
// metadata. Host only (the per-channel math in gru_diag.hpp, lstm.hpp, nlru.hpp, the
// dense-chain math in hopfield.hpp, gru_head.hpp and the matrix-state math in m2rnn.hpp is what
// runs on both sides).
// A spec's `jacobian` says which solver path it takes: per_channel cells go through
// `dispatch_cell` (S x S blocks per channel), dense cells through `dispatch_dense_cell` (one
// dense N x N block per chain: ParaHopfield, a batch row, N = d_h; ParaGRU mix='head', a
// (batch row, head), N = d_head). ParaRWKV7 (JacobianClass::linear_gu) is linear: no Newton, an
// exact scan of its (G, U) elements (rwkv7.hpp); its state is a (n_heads, d, d) matrix per row.
// matrix_map cells (ParaM2RNN) keep a K x V state whose Jacobian
// is a map, solved by a sequential walk per batch row (m2rnn.hpp).
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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/cells/cfc.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/m2rnn.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/cells/rwkv7.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/cells/titans.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

enum class CellKind {
  gru, lstm, nlru, slstm, cfc, cfc_diag_h, titans, gru_head, hopfield, slstm_head, slstm_dense, rwkv7,
  m2rnn
};

// How the Jacobian of a step is structured, and hence which solver path a cell takes.
// linear_gu: the step is linear in the state, S′ = S G + U (ParaRWKV7): an exact scan, K = 0.
// matrix_map: a K x V matrix state whose Jacobian is a map J[Δ], never materialised (M2RNN).
enum class JacobianClass { per_channel, dense, linear_gu, matrix_map };

// A per-channel recurrent value: a (d_h,) vector, or one row of a (rows, d_h) tensor.
struct RecurrentEntry {
  std::string_view tensor;
  int row = -1;  // -1: the tensor is the (d_h,) vector itself
};

// One input affine y = W in + b feeding `gates` consecutive gate blocks of d_h values; `in` is
// x, or its features x[..., :-1] (CfC, whose last input channel is Δt).
struct AffineBlock {
  std::string_view weight, bias;
  int first_gate = 0, gates = 0;
  bool features_only = false;
  bool square = false;  // the blocks are d_h x d_h (Hopfield's K, V): gates·d_h² outputs
  bool key_value = false;  // M2RNN: one block of K + V + 1 outputs (k, v, f_logit)
};

// identity: a square matrix's identity (M2RNN's W); xavier_uniform: U(±√(6/(fan_in + fan_out))).
enum class ParameterInit { xavier_vec, kaiming, zeros, constant, orthogonal, identity, xavier_uniform };
// head_matrices: (n_heads, d_head, d_head), or (rows, n_heads, d_head, d_head) when rows > 1,
// (in, out) per head; stacked_square: (rows·d_h, d_h), a Linear(d_h, rows·d_h) weight. M2RNN:
// value_matrix (V, V), key_value_weight (K + V + 1, d_in), key_value_bias (K + V + 1).
enum class ParameterShape { vector, rows, affine_weight, affine_bias, head_matrices, stacked_square,
                            value_matrix, key_value_weight, key_value_bias };

// One state_dict entry, in the Python library's registration order.
struct ParameterSpec {
  std::string_view name;
  ParameterShape shape;
  int rows = 1;  // `rows`: leading dimension; affine: gate blocks (output = rows·d_h)
  ParameterInit init = ParameterInit::zeros;
  bool features_only = false;  // affine weight over x[..., :-1]
  bool square = false;         // affine: rows·d_h² outputs (Hopfield)
};

// Static facts of one cell kind.
struct CellSpec {
  CellKind kind;
  std::string_view name;          // case-file "cell"
  std::string_view python_class;  // pararnn-torch class
  int slots;
  int gates;                                    // gate-input blocks per channel
  std::vector<RecurrentEntry> recurrent;        // clamped, per channel, in CellMath order
  std::vector<AffineBlock> affine;              // input affines filling the gate blocks
  int dt_gate = -1;                             // gate fed by max(x[..., -1], 1e-4) (CfC)
  std::vector<ParameterSpec> parameters;        // state_dict order
  std::vector<std::string_view> slot_names;     // e.g. {"c", "h"}
  int library_newton_iters;                     // K table value (CONTRACT §4)
  bool picard = false;                          // zero-hidden guess + Picard passes (sLSTM)
  int min_d_in = 1;
  std::string_view mix = "diag";                // case-file "mix" of this spec
  JacobianClass jacobian = JacobianClass::per_channel;
  // Left-step K(T) table (value at the largest key <= T); empty: library_newton_iters at every T.
  std::vector<std::pair<std::int64_t, std::int64_t>> library_newton_table = {};
  std::optional<double> default_cap = 0.5;      // max_recurrent_norm when a case names none
  std::string_view construction_warning = {};   // emit_warning event at construction
  std::string_view construction_message = {};   // ... and its text
  std::int64_t max_d_h = 0;                     // > 0: the largest hidden_size allowed
  std::string_view gate_mix = {};               // ParaCfC's gate_mix of this spec; empty: none
};

inline const std::vector<CellSpec>& cell_specs() {
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
       .default_cap = std::nullopt},
      {.kind = CellKind::rwkv7, .name = "rwkv7", .python_class = "ParaRWKV7", .slots = 1,
       .gates = cells::Rwkv7Math::kGates, .affine = {{"W_x.weight", "W_x.bias", 0, cells::Rwkv7Math::kGates}},
       .parameters = {weight(cells::Rwkv7Math::kGates), bias(cells::Rwkv7Math::kGates)},
       .slot_names = {"S"}, .library_newton_iters = 0, .mix = "rwkv7",
       .jacobian = JacobianClass::linear_gu, .default_cap = std::nullopt},
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
       .default_cap = std::nullopt},
  };
  return specs;
}

inline const CellSpec& cell_spec(CellKind kind) {
  for (const auto& spec : cell_specs())
    if (spec.kind == kind) return spec;
  throw Error("unknown cell kind");
}

// The first spec of that name (for "gru": mix 'diag').
inline const CellSpec& cell_spec(std::string_view name, std::string_view argument = "cell") {
  for (const auto& spec : cell_specs())
    if (spec.name == name) return spec;
  std::string known;
  for (const auto& spec : cell_specs())
    if (known.find(std::string(spec.name)) == std::string::npos)
      known += (known.empty() ? "" : ", ") + std::string(spec.name);
  throw ContractViolation(argument, "must be one of " + known, name);
}

// The spec of (cell, mix, gate_mix). A cell with a single mix also accepts "diag" (the default
// when a case names no mix) for it; gate_mix selects among ParaCfC's specs and is ignored by
// cells that have none (Cell refuses a gate_mix other than "input" for them).
inline const CellSpec& cell_spec(std::string_view name, std::string_view mix,
                                 std::string_view argument, std::string_view gate_mix = "input") {
  const CellSpec& first = cell_spec(name, argument);
  bool single_mix = true;
  std::string mixes, gate_mixes;
  for (const auto& spec : cell_specs())
    if (spec.name == name) {
      single_mix = single_mix && spec.mix == first.mix;
      if (mixes.find("'" + std::string(spec.mix) + "'") == std::string::npos)
        mixes += (mixes.empty() ? "'" : ", '") + std::string(spec.mix) + "'";
    }
  bool mix_found = false;
  for (const auto& spec : cell_specs()) {
    if (spec.name != name || !(spec.mix == mix || (single_mix && mix == "diag"))) continue;
    if (spec.gate_mix.empty() || spec.gate_mix == gate_mix) return spec;
    mix_found = true;
    gate_mixes += (gate_mixes.empty() ? "'" : " or '") + std::string(spec.gate_mix) + "'";
  }
  if (mix_found)
    throw ContractViolation("gate_mix", fmt::format("must be {} for {}", gate_mixes, name), gate_mix);
  throw ContractViolation("mix", fmt::format("must be {} for {}", mixes, name), mix);
}

// Calls `f.template operator()<CellMath>()` with the per-channel math struct of `kind`: the one
// cell dispatch of the project.
template <class F>
decltype(auto) dispatch_cell(CellKind kind, F&& f) {
  switch (kind) {
#define PARARNN_DISPATCH_CELL(kind_name, Math, label) \
  case CellKind::kind_name: return f.template operator()<cells::Math>();
    PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_DISPATCH_CELL)
#undef PARARNN_DISPATCH_CELL
    default: break;
  }
  throw UnsupportedPath(fmt::format("cell '{}' (mix '{}') has a {} Jacobian: it has no per-channel math",
                                    cell_spec(kind).name, cell_spec(kind).mix,
                                    cell_spec(kind).jacobian == JacobianClass::dense ? "dense" : "matrix-map"));
}

// Calls `f.template operator()<DenseMath>()` with the dense-chain math struct of `kind`
// (JacobianClass::dense cells).
template <class F>
decltype(auto) dispatch_dense_cell(CellKind kind, F&& f) {
  switch (kind) {
    case CellKind::gru_head: return f.template operator()<cells::GruHeadMath>();
    case CellKind::hopfield: return f.template operator()<cells::HopfieldMath>();
    case CellKind::slstm_head:
    case CellKind::slstm_dense: return f.template operator()<cells::SlstmHeadMath>();
    default: break;
  }
  throw UnsupportedPath(fmt::format("cell '{}' has a per-channel Jacobian: it has no dense-chain math",
                                    cell_spec(kind).name));
}

// Constructor arguments (Python names in comments). Designated initialisers at call sites.
struct CellOptions {
  std::string cell = "gru";
  std::string mix = "diag";                          // mix
  std::int64_t d_in = 0;                             // input_size
  std::int64_t d_h = 0;                              // hidden_size
  std::optional<std::int64_t> n_heads;               // n_heads (head mixes; rwkv7, default 1)
  std::optional<double> max_recurrent_norm = 0.5;    // nullopt = "none" (no clamp)
  std::optional<double> weight_std;                  // recurrent std; default 1/√(numel)
  double eps = 1e-6;                                 // eps (ParaSLSTM)
  std::string gate_mix = "input";                    // gate_mix (ParaCfC)
  double time_bias_init = -3.0;                      // time_bias_init (ParaCfC)
  std::optional<double> beta;                        // beta (ParaHopfield); default 1/√d_h
  std::optional<std::int64_t> k_dim;                 // k_dim (ParaM2RNN, required; rows of H)
  std::optional<std::int64_t> v_dim;                 // v_dim (ParaM2RNN, required; columns of H)
};

// The input of a generated case: x (batch, time, d_in) of N(0, 1) draws from a stream seeded by
// `seed` but separate from the parameters' stream, so a seed's parameters do not depend on the
// input size. `pararnn make-case` and `pararnn kstar` both use it.
inline Tensor generated_case_input(DType dtype, std::int64_t batch, std::int64_t time,
                                   std::int64_t d_in, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  std::normal_distribution<double> normal(0.0, 1.0);
  Tensor x(dtype, {batch, time, d_in});
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, normal(rng));
  return x;
}

class Cell {
 public:
  static Cell initialise(const CellOptions& options, DType dtype, std::uint64_t seed) {
    const CellSpec& spec = cell_spec(options.cell, options.mix, "cell", options.gate_mix);
    const CellOptions resolved = with_derived_d_h(spec, options);
    check_options(spec, resolved);
    Cell cell(spec, resolved.d_in, resolved.d_h, dtype, resolved.max_recurrent_norm, resolved);
    std::mt19937_64 rng(seed);
    for (const ParameterSpec& p : spec.parameters) {
      Tensor t(dtype, cell.parameter_shape(p));
      const std::int64_t n = t.numel();
      Tensor flat = t.reshaped({n});
      switch (p.init) {
        case ParameterInit::xavier_vec: {  // N(0, 1/numel), or the caller's recurrent std
          std::normal_distribution<double> normal(
              0.0, options.weight_std.value_or(1.0 / std::sqrt(static_cast<double>(n))));
          for (std::int64_t i = 0; i < n; ++i) flat.store({i}, normal(rng));
          break;
        }
        case ParameterInit::kaiming: {  // U(±1/√fan_in), PyTorch's default Linear init
          const double bound = 1.0 / std::sqrt(static_cast<double>(t.size(1)));
          std::uniform_real_distribution<double> uniform(-bound, bound);
          for (std::int64_t i = 0; i < n; ++i) flat.store({i}, uniform(rng));
          break;
        }
        case ParameterInit::constant:  // CfC's W_b.bias = time_bias_init
          for (std::int64_t i = 0; i < n; ++i) flat.store({i}, options.time_bias_init);
          break;
        case ParameterInit::orthogonal: {
          // Per (in, out) slice of a head-matrix tensor, or the whole (rows·d_h, d_h) matrix:
          // orthogonal(gain 0.25), or N(0, weight_std²).
          const std::int64_t cols = t.size(t.dim() - 1);
          const std::int64_t rows = p.shape == ParameterShape::stacked_square ? t.size(0) : cols;
          std::normal_distribution<double> normal(0.0, 1.0);
          for (std::int64_t slice = 0; slice < n / (rows * cols); ++slice) {
            std::vector<double> q(static_cast<std::size_t>(rows * cols));
            for (double& v : q) v = normal(rng);
            if (options.weight_std) {
              for (double& v : q) v *= *options.weight_std;
            } else {
              orthonormalise_columns(q, rows, cols);
              for (double& v : q) v *= 0.25;
            }
            for (std::int64_t i = 0; i < rows * cols; ++i)
              flat.store({slice * rows * cols + i}, q[static_cast<std::size_t>(i)]);
          }
          break;
        }
        case ParameterInit::identity: {  // M2RNN's W; + N(0, weight_std²) noise for hard cases
          const bool noisy = options.weight_std && *options.weight_std > 0.0;
          std::normal_distribution<double> normal(0.0, noisy ? *options.weight_std : 1.0);
          for (std::int64_t i = 0; i < t.size(0); ++i)
            for (std::int64_t j = 0; j < t.size(1); ++j)
              t.store({i, j}, (i == j ? 1.0 : 0.0) + (noisy ? normal(rng) : 0.0));
          break;
        }
        case ParameterInit::xavier_uniform: {  // torch.nn.init.xavier_uniform_ (gain 1)
          const double bound = std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1)));
          std::uniform_real_distribution<double> uniform(-bound, bound);
          for (std::int64_t i = 0; i < n; ++i) flat.store({i}, uniform(rng));
          break;
        }
        case ParameterInit::zeros:
          break;
      }
      cell.parameters_.emplace(std::string(p.name), t);
    }
    if (spec.kind == CellKind::titans) {  // the θ slice of the bias starts at −1 (softplus ≈ 0.31)
      Tensor& b = cell.parameters_.at("W_x.bias");
      for (std::int64_t c = options.d_h; c < 2 * options.d_h; ++c) b.store({c}, -1.0);
    }
    return cell;
  }

  // Reads and validates the cell of a case (names, shapes, dtypes, metadata).
  static Cell from_case(const Case& problem) {
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

  const CellSpec& spec() const { return *spec_; }
  CellKind kind() const { return spec_->kind; }
  std::string_view name() const { return spec_->name; }
  std::int64_t d_in() const { return d_in_; }
  std::int64_t d_h() const { return d_h_; }
  int slots() const { return spec_->slots; }
  DType dtype() const { return dtype_; }
  std::optional<double> max_recurrent_norm() const { return cap_; }
  const CellOptions& options() const { return options_; }
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

  // The per-channel values every backend feeds CellMath: the recurrent entries clamped to
  // [−cap, cap] (App. C.1), then the cell's constants (sLSTM eps), as [k][c] doubles.
  std::vector<double> channel_values() const {
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

  // Dense-Jacobian cells: one chain is a batch row (Hopfield, sLSTM dense) or a (batch row,
  // head) (head mixes), chains_per_row() chains per row. Its state is N = chain_width() values:
  // w = d_h / chains_per_row() channels of each slot, slot-major; element i of chain q is entry
  // chain_element_offset(q, i) of a time step's state row [slot][d_h].
  std::int64_t n_heads() const { return options_.n_heads.value_or(1); }
  std::int64_t chains_per_row() const { return spec_->mix == "head" ? n_heads() : 1; }
  std::int64_t chain_slot_width() const { return d_h_ / chains_per_row(); }
  std::int64_t chain_width() const { return slots() * chain_slot_width(); }
  std::int64_t chain_element_offset(std::int64_t q, std::int64_t i) const {
    const std::int64_t w = chain_slot_width();
    return (i / w) * d_h_ + q * w + i % w;
  }
  double beta() const { return options_.beta.value_or(1.0 / std::sqrt(static_cast<double>(d_h_))); }
  // ParaRWKV7: the width d of a head's (d, d) state (d_h = n_heads · d).
  std::int64_t head_dim() const { return d_h_ / n_heads(); }

  // The state of one batch row: (d_h), (slots, d_h), ParaRWKV7's (n_heads, d, d) or ParaM2RNN's
  // (K, V).
  Shape state_shape() const {
    if (kind() == CellKind::rwkv7) return {n_heads(), head_dim(), head_dim()};
    if (kind() == CellKind::m2rnn) return {k_dim(), v_dim()};
    if (slots() == 1) return {d_h_};
    return {slots(), d_h_};
  }

  // The per-chain parameters every backend feeds a dense-chain math struct, as doubles,
  // [chain within a row][DenseMath::params_size(N)]: GRU-head A_z, A_r, A_n of the head (clamped
  // to [−cap, cap] when a cap is set); sLSTM head R_i, R_f, R_z, R_o of the head (in, out),
  // clamped, then eps; sLSTM dense the same from R_dense.weight ([g·d_h + out][in], not clamped);
  // Hopfield {β}.
  std::vector<double> dense_chain_parameters() const {
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

  // The inverse of dense_chain_parameters for gradients: `sums` holds, per chain of a row (head),
  // the cotangent of each of that chain's dense-chain parameters (params_size values, summed
  // over batch rows); returns the state_dict gradients, each entry zero where the clamp cut the
  // raw value (|raw| > cap: the clamped value does not move with it). Hopfield's β and sLSTM's
  // eps are constructor constants: no gradient.
  std::map<std::string, std::vector<double>> dense_chain_parameter_gradients(const std::vector<double>& sums,
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

  // Case-file metadata: cell, mix, max_recurrent_norm, the Python constructor arguments.
  std::map<std::string, std::string> metadata() const {
    std::map<std::string, std::string> m = {
        {"cell", std::string(spec_->name)},
        {"mix", std::string(spec_->mix)},
        {"max_recurrent_norm", cap_ ? fmt::format("{}", *cap_) : "none"},
        {"input_size", std::to_string(d_in_)},
        {"hidden_size", std::to_string(d_h_)},
        {"python_class", std::string(spec_->python_class)}};
    if (spec_->mix == "head") m["n_heads"] = std::to_string(n_heads());
    if (kind() == CellKind::hopfield) {
      m.erase("max_recurrent_norm");  // ParaHopfield has no recurrent parameter and no cap
      m["beta"] = fmt::format("{}", beta());
    }
    if (kind() == CellKind::rwkv7) {
      m.erase("max_recurrent_norm");  // ParaRWKV7 has no recurrent parameter and no cap
      m["n_heads"] = std::to_string(n_heads());
    }
    if (spec_->name == "slstm") m["eps"] = fmt::format("{}", options_.eps);
    if (kind() == CellKind::m2rnn) {  // ParaM2RNN(input_size, *, k_dim, v_dim): no mix, no cap
      for (const char* key : {"mix", "max_recurrent_norm", "hidden_size"}) m.erase(key);
      m["k_dim"] = std::to_string(k_dim());
      m["v_dim"] = std::to_string(v_dim());
    }
    if (!spec_->gate_mix.empty()) {
      m["gate_mix"] = options_.gate_mix;
      m["time_bias_init"] = fmt::format("{}", options_.time_bias_init);
    }
    return m;
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

  // ParaM2RNN's state H (K, V): rows K, columns V, d_h = K·V (row-major).
  std::int64_t k_dim() const { return options_.k_dim.value_or(0); }
  std::int64_t v_dim() const { return options_.v_dim.value_or(0); }

  // Trajectory shape for (B, T): (B, T, d_h), (B, T, slots, d_h), (B, T, n_heads, d, d) for
  // RWKV-7 or (B, T, K, V) for M2RNN.
  Shape trajectory_shape(std::int64_t batch, std::int64_t time) const {
    Shape shape = {batch, time};
    for (std::int64_t extent : state_shape()) shape.push_back(extent);
    return shape;
  }

  // Columns of x an affine block reads (features only: all but the last, Δt).
  std::int64_t affine_inputs(const AffineBlock& block) const {
    return block.features_only ? d_in_ - 1 : d_in_;
  }
  // Outputs of an affine block: gates·d_h, or gates·d_h² for square blocks.
  std::int64_t affine_rows(const AffineBlock& block) const {
    if (block.key_value) return k_dim() + v_dim() + 1;
    return block.gates * d_h_ * (block.square ? d_h_ : 1);
  }

 private:
  // The most values one batch row's state may hold (ParaM2RNN's k_dim·v_dim): beyond it the
  // product is refused by name instead of overflowing.
  static constexpr std::int64_t kMaxStateElements = std::int64_t{1} << 31;

  Cell(const CellSpec& spec, std::int64_t d_in, std::int64_t d_h, DType dtype,
       std::optional<double> cap, CellOptions options)
      : spec_(&spec), d_in_(d_in), d_h_(d_h), dtype_(dtype),
        cap_(spec.kind == CellKind::hopfield || spec.kind == CellKind::rwkv7 || spec.kind == CellKind::m2rnn
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

  // Gram-Schmidt (twice) on the columns of the rows x cols (rows >= cols) row-major Gaussian
  // matrix q: the Q of q = Q R with a positive diagonal of R, as torch.nn.init.orthogonal_
  // returns.
  static void orthonormalise_columns(std::vector<double>& q, std::int64_t rows, std::int64_t cols) {
    const auto at = [&](std::int64_t i, std::int64_t j) -> double& {
      return q[static_cast<std::size_t>(i * cols + j)];
    };
    for (std::int64_t j = 0; j < cols; ++j) {
      for (int pass = 0; pass < 2; ++pass)
        for (std::int64_t k = 0; k < j; ++k) {
          double dot = 0.0;
          for (std::int64_t i = 0; i < rows; ++i) dot += at(i, k) * at(i, j);
          for (std::int64_t i = 0; i < rows; ++i) at(i, j) -= dot * at(i, k);
        }
      double norm = 0.0;
      for (std::int64_t i = 0; i < rows; ++i) norm += at(i, j) * at(i, j);
      norm = std::sqrt(norm);
      for (std::int64_t i = 0; i < rows; ++i) at(i, j) = norm > 0.0 ? at(i, j) / norm : (i == j ? 1.0 : 0.0);
    }
  }

  Shape parameter_shape(const ParameterSpec& p) const {
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

  // ParaM2RNN has no hidden_size: d_h = k_dim·v_dim (an alias), filled in when left at 0.
  static CellOptions with_derived_d_h(const CellSpec& spec, CellOptions options) {
    if (spec.kind == CellKind::m2rnn && options.d_h == 0 && options.k_dim && options.v_dim &&
        *options.k_dim >= 1 && *options.v_dim >= 1) {
      std::int64_t product = 0;  // an overflowing product is refused by check_options
      if (!__builtin_mul_overflow(*options.k_dim, *options.v_dim, &product)) options.d_h = product;
    }
    return options;
  }

  static void check_options(const CellSpec& spec, const CellOptions& options) {
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
    const bool single_mix = spec.kind == CellKind::hopfield || spec.kind == CellKind::rwkv7 ||
                            spec.kind == CellKind::m2rnn;
    if (options.mix != spec.mix && !(options.mix == "diag" && single_mix))
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

  const CellSpec* spec_;
  std::int64_t d_in_;
  std::int64_t d_h_;
  DType dtype_;
  std::optional<double> cap_;
  CellOptions options_;
  std::map<std::string, Tensor> parameters_;
};

}  // namespace pararnn
