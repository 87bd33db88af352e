// The static facts of one production cell (CellSpec): its kind, how a step's Jacobian is
// structured (hence which solver path it takes), its per-channel recurrent entries, its input
// affines, its state_dict entries in the Python library's registration order, its K table and
// whether it takes a cap. Data only; the table of every cell is the registry's (registry.hpp).
// Host only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

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
  bool has_cap = true;                          // false: no clamped recurrent parameter, no cap
  std::string_view construction_warning = {};   // emit_warning event at construction
  std::string_view construction_message = {};   // ... and its text
  std::int64_t max_d_h = 0;                     // > 0: the largest hidden_size allowed
  std::string_view gate_mix = {};               // ParaCfC's gate_mix of this spec; empty: none
};

}  // namespace pararnn
