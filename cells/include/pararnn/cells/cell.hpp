// A production cell on the host: its spec (spec.hpp, from the registry), its sizes, its
// parameters under the Python library's state_dict names and its constructor arguments, with
// the parameter views every backend feeds the math (channel_values, dense_chain_parameters).
// The math itself (cell_list.hpp's per-channel cells, the dense chains hopfield.hpp,
// gru_head.hpp, slstm_head.hpp, the matrix state m2rnn.hpp, the linear rwkv7.hpp) is header-only
// host + device code in the INTERFACE target pararnn::cell_math; this header and its sources
// (cells/src: initialise, case I/O, checks, construction) are the STATIC host library
// pararnn::cells.
//
// Guarantees: `Cell::from_case` accepts exactly the parameter names and shapes of pararnn-torch
// (W_x.weight (G·d_h, d_in), W_x.bias (G·d_h,), recurrent vectors (d_h,)) in the case's dtype and
// refuses anything else with a ContractViolation naming the tensor; `Cell::initialise` follows
// the library's App. C.1 initialisation (W_x.weight U(±1/√d_in), bias 0, recurrent N(0, 1/d_h)
// or N(0, weight_std²)), seeded and reproducible with every standard library (core/random.hpp).
// Example:
//   Cell cell = Cell::initialise({.cell = "gru", .d_in = 8, .d_h = 16}, DType::f32, /*seed=*/1);
//   Case problem = cell.make_case(x);
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
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
#include "pararnn/cells/registry.hpp"
#include "pararnn/cells/rwkv7.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/cells/spec.hpp"
#include "pararnn/cells/titans.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

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
Tensor generated_case_input(DType dtype, std::int64_t batch, std::int64_t time, std::int64_t d_in,
                            std::uint64_t seed);

class Cell {
 public:
  // The library's initialisation (App. C.1) of a cell of these options, seeded and portable.
  static Cell initialise(const CellOptions& options, DType dtype, std::uint64_t seed);

  // Reads and validates the cell of a case (names, shapes, dtypes, metadata).
  static Cell from_case(const Case& problem);

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
  std::vector<double> channel_values() const;

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
  std::vector<double> dense_chain_parameters() const;

  // The inverse of dense_chain_parameters for gradients: `sums` holds, per chain of a row (head),
  // the cotangent of each of that chain's dense-chain parameters (params_size values, summed
  // over batch rows); returns the state_dict gradients, each entry zero where the clamp cut the
  // raw value (|raw| > cap: the clamped value does not move with it). Hopfield's β and sLSTM's
  // eps are constructor constants: no gradient.
  std::map<std::string, std::vector<double>> dense_chain_parameter_gradients(const std::vector<double>& sums,
                                                                             std::int64_t params_per_chain) const;

  // Case-file metadata: cell, mix, max_recurrent_norm, the Python constructor arguments.
  std::map<std::string, std::string> metadata() const;

  // A case holding this cell, the input and the optional initial state.
  Case make_case(Tensor x, std::optional<Tensor> h0 = std::nullopt) const;

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
       std::optional<double> cap, CellOptions options);

  Shape parameter_shape(const ParameterSpec& p) const;

  // ParaM2RNN has no hidden_size: d_h = k_dim·v_dim (an alias), filled in when left at 0.
  static CellOptions with_derived_d_h(const CellSpec& spec, CellOptions options);

  static void check_options(const CellSpec& spec, const CellOptions& options);

  const CellSpec* spec_;
  std::int64_t d_in_;
  std::int64_t d_h_;
  DType dtype_;
  std::optional<double> cap_;
  CellOptions options_;
  std::map<std::string, Tensor> parameters_;
};

}  // namespace pararnn
