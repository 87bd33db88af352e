// Internal to the oracle (not installed, not under include/): the validated, exactly lifted form
// of a Case that every translation unit of the oracle reads, the chain unroller that each
// working type instantiates in its own translation unit, and the entry points between units.
//
// Translation units (few, because a multiprecision + Eigen unit takes ~15 s to compile):
//   oracle_cell_list.cpp the oracle's cell list (oracle_cell_list.hpp): selection of a case's row
//   oracle_case.cpp      the reading of a Case (readers of x, parameters, packing, h0)
//   oracle.cpp           the public API, the double working type (unroll and AD)
//   oracle_float128.cpp  float128: unroll of f64 cases, AD, certifier runs of double primaries
//   oracle_certify.cpp   chain selection and certification; cpp_bin_float_50
// No Eigen or Boost here, so that this header stays cheap; the cell equations live in
// oracle_cell_math.hpp, the unroller in oracle_math.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <map>
#include <vector>

#include "oracle_cell_list.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference::detail {

// One independent sequential unroll: a batch row, or one packed segment (then b = 0).
struct RowChain {
  std::int64_t b = 0;
  std::int64_t t_begin = 0;
  std::int64_t t_end = 0;
  std::int64_t h0_row = -1;   // row of h0 that starts it; -1: zeros
  std::int64_t segment = -1;  // packed segment index; -1 when not packed
  std::int64_t length() const { return t_end - t_begin; }
};

// A recurrent parameter under its state_dict name: `rows` consecutive entries of
// PreparedCase::recurrent, starting at `first`, stored with `shape` ((d_h) or (rows, d_h)).
struct RecurrentParameter {
  std::string name;
  int first = 0;
  int rows = 1;
  Shape shape;
};

// An nn.Linear of the input affine under its state_dict names: its output is the gate blocks
// [first_gate, first_gate + gates) of the gate inputs, rows [first_gate·d_h, ...) of
// PreparedCase::w and ::bias.
struct AffineParameter {
  std::string weight;
  std::string bias;
  int first_gate = 0;
  int gates = 0;
};

// Everything the oracle reads from a Case, validated and lifted exactly into double (every
// storage dtype is a subset of double). x stays in its storage and is lifted block by block.
//
// The gate inputs of a step are `gates` blocks of d_h values: first the `affine_gates` blocks of
// the input affine W·feat_t + bias (feat_t = x_t's first `features` columns), then blocks that
// are functions of x_t alone (CfC: Δt = max(x_t[d_in - 1], kTimeFloor), block `time_gate`).
// Pack orders: gru (z_x, r_x, n_x); lstm (f_x, z_x, o_x); nlru (a_x, c_x);
// slstm (i, f, z, o); cfc (f_pre, c_x | b | Δt); titans (α_pre, θ_pre, k, v, n_pre).
struct PreparedCase {
  OracleCell kind = OracleCell::gru;
  std::string cell;
  DType dtype = DType::f32;
  int gates = 0;         // gate-input blocks the step reads
  int affine_gates = 0;  // of which the input affine computes the first ones
  int slots = 1;
  std::int64_t batch = 0, time = 0, d_in = 0, d_h = 0;
  std::int64_t features = 0;  // x columns the affine reads: d_in, or d_in - 1 (cfc)
  std::vector<double> w;     // the affine's weights, (affine_gates*d_h, features) row-major
  std::vector<double> bias;  // (affine_gates*d_h)
  std::vector<AffineParameter> affine_parameters;  // W_x (and cfc's W_b), in row order
  // Clamped recurrent vectors (each d_h), in order: gru a_z, a_r, a_n; lstm a_f, a_z, a_o, c_f,
  // c_o; nlru u; slstm the rows r_i, r_f, r_z, r_o of R; cfc u (gate_mix diag_h: u, v); titans u, r.
  std::vector<std::vector<double>> recurrent;
  std::vector<RecurrentParameter> recurrent_parameters;  // their state_dict tensors
  // Per recurrent entry, what the gradient of the raw parameter is multiplied by: 1 where
  // |raw| <= cap (the Python library's clamp mask, solvers/vjp.py::_clip_mask), 0 where
  // |raw| > cap or raw is NaN; all 1 without a cap.
  std::vector<std::vector<double>> recurrent_gradient_mask;
  double eps = 0.0;        // slstm: h' = o c' / (n' + eps), the metadata "eps" (default 1e-6)
  // gru_head: n_heads and the clamped (clamped only with a cap; the head mix's default is none)
  // A_z, A_r, A_n, [head][A_z, A_r, A_n][in][out]; the recurrent vectors above stay empty.
  // slstm_head: [head][R_i, R_f, R_z, R_o][in][out], from R_head (clamped) or, for mix 'dense'
  // (one head), R_dense.weight transposed per gate (not clamped).
  std::int64_t n_heads = 1;
  std::vector<double> head_matrices;
  // For gradients: the state_dict entry each head_matrices value came from (tensor, flat index
  // into it) and its clamp mask (1 where |raw| <= cap or no cap, else 0); the tensors' shapes.
  struct MatrixSource {
    std::string tensor;
    std::int64_t flat = 0;
    double mask = 1.0;
  };
  std::vector<MatrixSource> head_matrix_sources;
  std::map<std::string, Shape> matrix_parameter_shapes;  // also m2rnn's "W" 
  // hopfield: β (metadata "beta", default 1/√d_h). The affine's 2 d_h² rows are counted as
  // affine_gates = 2 d_h blocks of d_h rows: K = rows [0, d_h²), V = rows [d_h², 2 d_h²),
  // each row-major (K[i][j] = wx[i d_h + j]).
  double beta = 0.0;
  // rwkv7: d_h = n_heads·d (the affine's 6 d_h rows are the gate blocks w, a, κ, v, k, r, each
  // head-major), and the (n_heads, d, d) matrix state of a row is held as slots = d blocks of
  // d_h values, flat in the trajectory's (head, i, j) order: every unroll, copy and comparison
  // treats a row's state as one flat vector, and only the step reads its structure.
  // m2rnn: the state H (k_dim, v_dim) flattened row-major (d_h = k_dim·v_dim, one slot), W
  // (v_dim, v_dim) row-major, never clamped; the affine is one block of k_dim + v_dim + 1 rows
  // (k, v, f_logit), affine_gates = gates = 1.
  std::int64_t k_dim = 0, v_dim = 0;
  std::vector<double> value_matrix;
  int time_gate = -1;      // cfc: the gate block holding Δt; -1 for the other cells
  Tensor x;                 // (batch, time, d_in), contiguous, storage dtype
  std::vector<double> h0;   // (h0 rows, slots*d_h) slot-major; empty: zeros
  std::vector<RowChain> chains;
  // W·x products of two storage values are exact in double (f32, f16, bf16: significands of at
  // most 24 bits), so the wide types can sum them as exact double terms (oracle_math.hpp).
  bool products_exact_in_double = true;

  // CfC's floor on Δt (ParaCfC: clamp_min(x[..., -1:], 1e-4)), the double nearest 1e-4 for
  // every storage dtype. The Python library clamps the storage-dtype tensor, so a clamped Δt
  // there is 1e-4 rounded to the storage dtype: for f32 that is 2.5e-13 away, for bf16 and f16
  // within 1e-4 * 2^-8; the gate argument softplus·Δt moves by less than that times softplus,
  // far below those dtypes' tolerances. (Keeping one floor for all dtypes keeps an f32 case
  // and its exact f64 widening the same problem.)
  static constexpr double kTimeFloor = 1e-4;
  // Δt from the raw last channel of x (NaN stays NaN).
  static double time_step(double raw) { return raw < kTimeFloor ? kTimeFloor : raw; }
  // dΔt/draw: 1 where raw >= the floor, 0 where the floor clamps it (and for NaN), as the
  // Python library's packed VJP and clamp_min's backward.
  static double time_step_slope(double raw) { return raw >= kTimeFloor ? 1.0 : 0.0; }

  std::int64_t state_size() const { return slots * d_h; }
  std::int64_t affine_rows() const {
    return kind == OracleCell::m2rnn ? k_dim + v_dim + 1 : affine_gates * d_h;
  }
  // Gate inputs of one step for a runner carrying `width` channels.
  std::int64_t gate_inputs(std::int64_t width) const {
    return kind == OracleCell::m2rnn ? affine_rows() : gates * width;
  }
  // The oracle's trajectory shape: (B, T, d_h), (B, T, slots, d_h), rwkv7's (B, T, H, d, d) or
  // m2rnn's (B, T, K, V).
  Shape trajectory_shape() const {
    if (kind == OracleCell::rwkv7) return {batch, time, n_heads, d_h / n_heads, d_h / n_heads};
    if (kind == OracleCell::m2rnn) return {batch, time, k_dim, v_dim};
    if (slots == 1) return {batch, time, d_h};
    return {batch, time, slots, d_h};
  }
  // Offset of H[b, t, slot, channel] in the oracle's f64 trajectory.
  std::int64_t h_offset(std::int64_t b, std::int64_t t, std::int64_t slot,
                        std::int64_t channel) const {
    return ((b * time + t) * slots + slot) * d_h + channel;
  }
};

// Validates the case (ContractViolation for the problem's shape rules, CaseFileError for the
// parameters) and lifts it.
PreparedCase prepare_case(const Case& problem);
// Lifts x[b, t0 : t0 + count, :] exactly into `out` ((count, d_in) row-major).
void lift_x(const PreparedCase& problem, std::int64_t b, std::int64_t t0, std::int64_t count,
            double* out);

// Which slice of a row chain a runner unrolls: all channels, or one channel of a cell whose
// channels are independent (every cell the oracle implements is diagonal).
struct ChainSpec {
  std::int64_t chain = 0;     // index into PreparedCase::chains
  std::int64_t channel = -1;  // -1: every channel
};

// A sequential unroll of one chain in the working type Real, one step at a time. The double
// instance lives in oracle.cpp, float128 in oracle_float128.cpp, cpp_bin_float_50 in
// oracle_certify.cpp. For every type other than double the arithmetic of one channel is the same
// sequence of operations whether the runner carries every channel or that one alone, so a
// channel chain reproduces its row's bits.
template <class Real>
class ChainRunner {
 public:
  ChainRunner(const PreparedCase& problem, ChainSpec spec);
  ~ChainRunner();
  ChainRunner(const ChainRunner&) = delete;
  ChainRunner& operator=(const ChainRunner&) = delete;

  std::int64_t width() const;  // channels carried: d_h, or 1
  // Advances one step; false once the chain is done. After true, state() is H at time().
  bool advance();
  std::int64_t time() const;
  const Real* state() const;  // slots*width values, slot-major

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Unrolls every chain (rows in parallel) in float128 into H (f64, rounded). oracle_float128.cpp.
void unroll_float128(const PreparedCase& problem, double* H, const std::function<void()>& poll);
// One step with its Jacobian by AD, in float128 (oracle_float128.cpp).
OracleStep step_with_jacobian_float128(const PreparedCase& problem, std::int64_t b,
                                       std::int64_t t, std::span<const double> h_prev);
// Central finite differences of the same step in float128 (oracle_float128.cpp); for tests.
std::vector<double> finite_difference_jacobian_float128(const PreparedCase& problem,
                                                        std::int64_t b, std::int64_t t,
                                                        std::span<const double> h_prev);

// The per-channel blocks of d h_new / d h_prev of a cell whose channels never mix
// (channels_independent), [channel][out slot][in slot], by AD with one direction per slot that
// seeds every channel of it (exact: no other channel contributes); in the primary type
// (oracle_lyapunov.cpp). For tests: they equal the dense AD Jacobian's diagonal blocks.
std::vector<double> channel_jacobian_blocks(const PreparedCase& problem, std::int64_t b, std::int64_t t,
                                            std::span<const double> h_prev);

// What certification found (oracle_certify.cpp).
struct Certification {
  std::string certifier_type;
  int certifier_digits = 0;
  double self_check_delta = 0.0;
  bool all_chains = false;
  std::vector<std::string> chains;
  std::int64_t chain_steps = 0;
};
// Chooses the chains to certify (all, a seeded sample of chains, or a seeded sample of
// (chain, channel) pairs) within options.certify_budget.
std::vector<ChainSpec> select_certified_chains(const PreparedCase& problem,
                                               const OracleOptions& options, bool* all_chains);
// Reruns the selected chains in the certifier type and compares with the primary's working
// values: H itself for a double primary; a float128 rerun (bitwise the primary's) otherwise.
Certification certify(const PreparedCase& problem, const double* H, const OracleOptions& options);

// "b=3", "segment=2", "b=3,channel=17".
std::string describe_chain(const PreparedCase& problem, const ChainSpec& spec);

// ---- gradients (oracle_gradients*.cpp; the BPTT lives in oracle_gradient_math.hpp) ----

// A prepared case and the cotangent of its trajectory for L = Σ grad_H ⊙ H.
struct GradientCase {
  const PreparedCase& problem;
  std::vector<double> cotangent;  // grad_H lifted exactly, in the trajectory layout; empty: ones

  double cotangent_at(std::int64_t b, std::int64_t t, std::int64_t slot,
                      std::int64_t channel) const {
    return cotangent.empty()
               ? 1.0
               : cotangent[static_cast<std::size_t>(problem.h_offset(b, t, slot, channel))];
  }
};

// For tests: (L(plus) - L(minus)) / step, with L = Σ cotangent ⊙ H of each case's float128
// unroll (cotangent in the trajectory layout, empty: ones), summed and divided in float128 and
// rounded once (oracle_gradients_float128.cpp).
double central_difference_float128(const PreparedCase& plus, const PreparedCase& minus,
                                   std::span<const double> cotangent, double step);

}  // namespace pararnn::reference::detail
