// The oracle's reading of a Case: the readers that validate and lift x, the parameters, the
// packing and h0 into a PreparedCase. prepare_case selects the case's row of the oracle's cell
// list (oracle_cell_list.cpp) and composes the readers in that order, so that a case with several
// faults is refused for the first: the cell and its arguments, x, the parameters, the packing, h0.
// No Eigen or Boost here (a cheap translation unit).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oracle_internal.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn::reference::detail {

namespace {

std::string parameter_list(const OracleCellEntry& cell) {
  std::string names = cell.kind == OracleCell::m2rnn ? "W, " : "";
  for (const auto& r : cell.recurrent) names += r.name + ", ";
  for (std::size_t i = 0; i < cell.affines.size(); ++i) {
    names += (i ? ", " : "") + cell.affines[i].weight + ", " + cell.affines[i].bias;
  }
  return names;
}

// A parameter of the cell, present, floating, in the case's dtype, of the expected shape.
const Tensor& checked_parameter(const Case& problem, const OracleCellEntry& cell,
                                const std::string& name, const Shape& expected,
                                const std::string& why) {
  const auto it = problem.parameters.find(name);
  if (it == problem.parameters.end()) {
    throw CaseFileError(fmt::format("case (cell {}): parameter '{}' is missing; cell {} needs {}",
                                    problem.cell, name, problem.cell, parameter_list(cell)));
  }
  const Tensor& t = it->second;
  if (!t.defined() || t.dtype() != problem.dtype()) {
    throw CaseFileError(fmt::format(
        "case (cell {}): parameter '{}' has dtype {}, expected {} (the dtype of x)", problem.cell,
        name, t.defined() ? dtype_name(t.dtype()) : "<undefined>", dtype_name(problem.dtype())));
  }
  if (!expected.empty() && t.shape() != expected) {
    throw CaseFileError(fmt::format("case (cell {}): parameter '{}' has shape {}, expected {}{}",
                                    problem.cell, name, shape_string(t.shape()),
                                    shape_string(expected), why));
  }
  return t;
}

std::vector<double> lift_vector(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) out[static_cast<std::size_t>(i)] = t.load({i});
  return out;
}

// The cap as the storage dtype holds it (the Python library clamps a storage-dtype tensor).
double in_storage(double cap, DType dtype) {
  Tensor holder(dtype, {1});
  holder.store({0}, cap);
  return holder.load({0});
}

// A clamp bound read from max_recurrent_norm (default `fallback`): refused unless >= 0 or none.
// Returns it as the storage dtype holds it; nullopt: no clamp.
std::optional<double> read_cap(const Case& problem, std::optional<double> fallback, DType dtype) {
  const std::optional<double> cap = problem.meta_cap(fallback);
  if (cap && !(*cap >= 0.0)) {
    throw ContractViolation("max_recurrent_norm", "must be a non-negative number or none",
                            fmt::format("{}", *cap));
  }
  if (!cap) return std::nullopt;
  return in_storage(*cap, dtype);
}

// clamp(raw, -cap, cap) (NaN stays NaN), and the gradient mask of raw: 1 where |raw| <= cap (or
// no cap), else 0.
double clamped(double raw, const std::optional<double>& cap) {
  return cap ? std::min(std::max(raw, -*cap), *cap) : raw;
}
double clamp_mask(double raw, const std::optional<double>& cap) {
  return !cap || std::abs(raw) <= *cap ? 1.0 : 0.0;
}

// ---- x ----

// Checks x: given, floating, 3-D (B, T, d_in) with every extent >= 1, and d_in >= 2 for a cell
// whose last channel is Δt. Guarantees the PreparedCase's cell layout (kind, gates, slots), its
// dtype, B, T, d_in, the feature count and x itself; d_h and the rest are the parameters'.
PreparedCase read_x(const Case& problem, const OracleCellEntry& cell) {
  PreparedCase out;
  out.kind = cell.kind;
  out.cell = problem.cell;
  out.gates = cell.gates;
  out.slots = cell.slots;

  const Tensor& x = problem.x;
  if (!x.defined()) throw ContractViolation("x", "must be given", "<undefined>");
  if (!is_floating(x.dtype())) {
    throw ContractViolation("x", "must be f64, f32, f16 or bf16", std::string(dtype_name(x.dtype())));
  }
  if (x.dim() != 3) throw ContractViolation("x", "must be 3-D (B, T, d_in)", shape_string(x.shape()));
  if (x.size(0) < 1 || x.size(1) < 1 || x.size(2) < 1) {
    throw ContractViolation("x", "must have B >= 1, T >= 1 and d_in >= 1", shape_string(x.shape()));
  }
  if (cell.time_channel && x.size(2) < 2) {
    throw ContractViolation(
        "x", fmt::format("must have d_in >= 2 for cell {} (F >= 1 features, then the Δt channel)",
                         problem.cell),
        shape_string(x.shape()));
  }
  out.dtype = x.dtype();
  out.batch = x.size(0);
  out.time = x.size(1);
  out.d_in = x.size(2);
  out.features = cell.time_channel ? out.d_in - 1 : out.d_in;
  out.x = x;
  out.products_exact_in_double = out.dtype != DType::f64;
  return out;
}

// ---- parameters ----

// m2rnn's k_dim and v_dim (required, >= 1, their product a state of at most 2^31 values) and its
// W (v_dim, v_dim). Sets d_h = k_dim·v_dim.
void read_m2rnn_dims(const Case& problem, const OracleCellEntry& cell, PreparedCase& out) {
  for (const char* key : {"k_dim", "v_dim"}) {
    if (!problem.meta(key)) {
      throw ContractViolation(key, "is required in the metadata of a cell m2rnn case", "<absent>");
    }
    if (problem.meta_int(key, 0) < 1) {
      throw ContractViolation(key, "must be >= 1", std::to_string(problem.meta_int(key, 0)));
    }
  }
  out.k_dim = problem.meta_int("k_dim", 0);
  out.v_dim = problem.meta_int("v_dim", 0);
  // A batch row's state holds at most 2^31 values (ParaM2RNN's bound in the library reading
  // too): beyond it, or where k_dim·v_dim overflows, the case is refused by name.
  constexpr std::int64_t kMaxStateElements = std::int64_t{1} << 31;
  if (__builtin_mul_overflow(out.k_dim, out.v_dim, &out.d_h) || out.d_h > kMaxStateElements) {
    throw ContractViolation("k_dim, v_dim",
                            fmt::format("k_dim·v_dim must be at most {} (the state of one batch row)",
                                        kMaxStateElements),
                            fmt::format("k_dim={} v_dim={}", out.k_dim, out.v_dim));
  }
  out.matrix_parameter_shapes["W"] = {out.v_dim, out.v_dim};
  out.value_matrix = lift_vector(
      checked_parameter(problem, cell, "W", {out.v_dim, out.v_dim},
                        fmt::format(" (v_dim = {}; W multiplies the state on the right)", out.v_dim))
          .reshaped({out.v_dim * out.v_dim}));
}

// The input affines: d_h from the first weight's rows over its gates (m2rnn: from k_dim, v_dim;
// hopfield: 2 d_h² rows), x's feature columns equal to the weight's columns, then every affine
// of the row present with its shape. Guarantees d_h, w, bias, affine_parameters, affine_gates,
// the gate count and cfc's time_gate. Returns the reason that a shape refusal of a later
// parameter appends (where d_h came from).
std::string read_affines(const Case& problem, const OracleCellEntry& cell, PreparedCase& out) {
  const AffineSpec& first = cell.affines.front();
  const Tensor& weight = checked_parameter(problem, cell, first.weight, {}, "");
  if (weight.dim() != 2 || weight.size(0) < first.gates || weight.size(0) % first.gates != 0) {
    throw CaseFileError(fmt::format(
        "case (cell {}): parameter '{}' has shape {}, expected ({} d_h, {}) with d_h >= 1",
        problem.cell, first.weight, shape_string(weight.shape()), first.gates,
        cell.time_channel ? "F" : "d_in"));
  }
  out.d_h = weight.size(0) / first.gates;
  if (cell.kind == OracleCell::m2rnn) read_m2rnn_dims(problem, cell, out);
  if (cell.kind == OracleCell::hopfield) {  // 2 d_h² rows: K and V, each (d_h, d_h)
    std::int64_t d = 1;
    while ((d + 1) * (d + 1) <= out.d_h) ++d;
    if (d * d != out.d_h) {
      throw CaseFileError(fmt::format(
          "case (cell hopfield): parameter '{}' has shape {}, expected (2 d_h², d_in) with d_h >= 1",
          first.weight, shape_string(weight.shape())));
    }
    out.d_h = d;
  }
  if (weight.size(1) != out.features) {
    const std::string rule =
        cell.time_channel
            ? fmt::format("last dimension must equal F + 1 = {} (the columns of {}, then Δt)",
                          weight.size(1) + 1, first.weight)
            : fmt::format("last dimension must equal d_in = {} (the columns of {})",
                          weight.size(1), first.weight);
    throw ContractViolation("x", rule, shape_string(problem.x.shape()));
  }
  const std::string why =
      cell.kind == OracleCell::m2rnn
          ? fmt::format(" (k_dim + v_dim + 1 = {} rows: k, v, f_logit)", out.k_dim + out.v_dim + 1)
          : fmt::format(" (d_h = {} from {} rows {} / {} gates)", out.d_h, first.weight,
                        weight.size(0), first.gates);
  // Hopfield's affine is 2 d_h blocks of d_h rows (K's rows, then V's).
  const int block_scale = cell.kind == OracleCell::hopfield ? static_cast<int>(out.d_h) : 1;
  out.gates = cell.gates * block_scale;
  int gate = 0;
  for (AffineSpec affine : cell.affines) {
    affine.gates *= block_scale;
    const std::int64_t rows =
        cell.kind == OracleCell::m2rnn ? out.k_dim + out.v_dim + 1 : affine.gates * out.d_h;
    const std::vector<double> w = lift_vector(
        checked_parameter(problem, cell, affine.weight, {rows, out.features}, why)
            .reshaped({rows * out.features}));
    const std::vector<double> b =
        lift_vector(checked_parameter(problem, cell, affine.bias, {rows}, why));
    out.w.insert(out.w.end(), w.begin(), w.end());
    out.bias.insert(out.bias.end(), b.begin(), b.end());
    out.affine_parameters.push_back({affine.weight, affine.bias, gate, affine.gates});
    gate += affine.gates;
  }
  out.affine_gates = gate;
  if (cell.time_channel) out.time_gate = gate;
  return why;
}

// n_heads for a cell of `heads` heads over d_h: >= 1 and a divisor of d_h.
void check_heads(std::int64_t heads, std::int64_t d_h, std::string_view cell_note) {
  if (heads < 1 || d_h % heads != 0) {
    throw ContractViolation("n_heads", fmt::format("must be >= 1 and divide d_h = {}{}", d_h, cell_note),
                            std::to_string(heads));
  }
}

// gru_head: n_heads (dividing d_h) and A_z, A_r, A_n (n_heads, m, m), clamped only where
// max_recurrent_norm names a cap (ParaGRU head's default is none). Guarantees n_heads,
// head_matrices [head][gate][in][out], their sources and matrix_parameter_shapes.
void read_gru_head(const Case& problem, const OracleCellEntry& cell, PreparedCase& out) {
  const std::int64_t heads = problem.meta_int("n_heads", 0);
  check_heads(heads, out.d_h, "");
  out.n_heads = heads;
  const std::int64_t m = out.d_h / heads;
  const std::optional<double> head_cap = read_cap(problem, std::nullopt, out.dtype);
  const char* names[] = {"A_z", "A_r", "A_n"};
  std::vector<std::vector<double>> lifted;
  for (const char* name : names) {
    lifted.push_back(lift_vector(
        checked_parameter(problem, cell, name, {heads, m, m},
                          fmt::format(" (n_heads = {}, d_head = {}; stored (in, out))", heads, m))
            .reshaped({heads * m * m})));
  }
  for (const char* name : names) out.matrix_parameter_shapes[name] = {heads, m, m};
  for (std::int64_t hd = 0; hd < heads; ++hd) {
    for (std::size_t gate = 0; gate < lifted.size(); ++gate) {
      for (std::int64_t i = 0; i < m * m; ++i) {
        const double raw = lifted[gate][static_cast<std::size_t>(hd * m * m + i)];
        out.head_matrices.push_back(clamped(raw, head_cap));
        out.head_matrix_sources.push_back({names[gate], hd * m * m + i, clamp_mask(raw, head_cap)});
      }
    }
  }
}

// slstm_head: mix 'head' reads n_heads and R_head (4, H, m, m) [gate][head][in][out], clamped by
// `cap`; mix 'dense' is one head of R_dense.weight (4 d_h, d_h) (nn.Linear: [gate·d_h + out][in]),
// not clamped. Guarantees n_heads, head_matrices [head][gate][in][out], their sources and
// matrix_parameter_shapes.
void read_slstm_head(const Case& problem, const OracleCellEntry& cell,
                     const std::optional<double>& cap, PreparedCase& out) {
  const bool dense = problem.meta("mix").value_or("") == "dense";
  const std::int64_t heads = dense ? 1 : problem.meta_int("n_heads", 0);
  check_heads(heads, out.d_h, "");
  out.n_heads = heads;
  const std::int64_t m = out.d_h / heads;
  if (dense) {
    const std::vector<double> r = lift_vector(
        checked_parameter(problem, cell, "R_dense.weight", {4 * m, m}, " (Linear(d_h, 4 d_h))")
            .reshaped({4 * m * m}));
    out.matrix_parameter_shapes["R_dense.weight"] = {4 * m, m};
    for (std::int64_t g = 0; g < 4; ++g) {
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < m; ++j) {
          out.head_matrices.push_back(r[static_cast<std::size_t>((g * m + j) * m + i)]);
          out.head_matrix_sources.push_back({"R_dense.weight", (g * m + j) * m + i, 1.0});
        }
      }
    }
    return;
  }
  const std::vector<double> r = lift_vector(
      checked_parameter(problem, cell, "R_head", {4, heads, m, m},
                        fmt::format(" (n_heads = {}, d_head = {}; [gate, head, in, out])", heads, m))
          .reshaped({4 * heads * m * m}));
  out.matrix_parameter_shapes["R_head"] = {4, heads, m, m};
  for (std::int64_t hd = 0; hd < heads; ++hd) {
    for (std::int64_t g = 0; g < 4; ++g) {
      for (std::int64_t i = 0; i < m * m; ++i) {
        const std::int64_t flat = (g * heads + hd) * m * m + i;
        const double raw = r[static_cast<std::size_t>(flat)];
        out.head_matrices.push_back(clamped(raw, cap));
        out.head_matrix_sources.push_back({"R_head", flat, clamp_mask(raw, cap)});
      }
    }
  }
}

// rwkv7: n_heads, required (every head count gives W_x the same shape: the heads are stated,
// never guessed) and dividing d_h. Guarantees n_heads and slots = d (the (H, d, d) state as d
// slots of d_h = H·d values).
void read_rwkv7_heads(const Case& problem, PreparedCase& out) {
  if (!problem.meta("n_heads")) {
    throw ContractViolation("n_heads", "is required in the metadata of a cell rwkv7 case (the "
                            "state_dict does not determine it)", "<absent>");
  }
  const std::int64_t heads = problem.meta_int("n_heads", 1);
  check_heads(heads, out.d_h, " (cell rwkv7)");
  out.n_heads = heads;
  out.slots = static_cast<int>(out.d_h / heads);
}

// The row's recurrent vectors ((d_h) or (rows, d_h) tensors), each row clamped by `cap` with its
// gradient mask. Guarantees recurrent, recurrent_gradient_mask and recurrent_parameters.
void read_recurrent(const Case& problem, const OracleCellEntry& cell,
                    const std::optional<double>& cap, const std::string& why, PreparedCase& out) {
  for (const RecurrentSpec& r : cell.recurrent) {
    const int rows = std::max(r.rows, 1);
    const Shape shape = r.rows == 0 ? Shape{out.d_h} : Shape{r.rows, out.d_h};
    const std::vector<double> all =
        lift_vector(checked_parameter(problem, cell, r.name, shape, why).reshaped({rows * out.d_h}));
    out.recurrent_parameters.push_back(
        {r.name, static_cast<int>(out.recurrent.size()), rows, shape});
    for (int row = 0; row < rows; ++row) {
      std::vector<double> v(all.begin() + row * out.d_h, all.begin() + (row + 1) * out.d_h);
      std::vector<double> mask(v.size(), 1.0);
      if (cap) {
        for (std::size_t j = 0; j < v.size(); ++j) {
          mask[j] = clamp_mask(v[j], cap);
          v[j] = clamped(v[j], cap);
        }
      }
      out.recurrent.push_back(std::move(v));
      out.recurrent_gradient_mask.push_back(std::move(mask));
    }
  }
}

// A tensor the cell does not have is refused: a case is exactly its cell's state_dict (the
// affines, the recurrent vectors and the matrices read so far).
void refuse_unknown_tensors(const Case& problem, const OracleCellEntry& cell,
                            const PreparedCase& out) {
  std::vector<std::string> known;
  for (const AffineSpec& affine : cell.affines) known.insert(known.end(), {affine.weight, affine.bias});
  for (const RecurrentSpec& r : cell.recurrent) known.push_back(r.name);
  for (const auto& [name, shape] : out.matrix_parameter_shapes) known.push_back(name);
  for (const auto& [name, tensor] : problem.parameters) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw CaseFileError(fmt::format("case (cell {}): tensor '{}' {} is not a parameter of the cell; "
                                      "cell {} has {}", problem.cell, name, shape_string(tensor.shape()),
                                      problem.cell, parameter_list(cell)));
    }
  }
}

// Every parameter of the row: the affines (d_h), the cell's constants (cfc's time_bias_init a
// number; slstm's eps finite > 0; hopfield's beta finite > 0, default 1/√d_h), the clamp
// max_recurrent_norm (>= 0 or none, default 0.5), the head matrices, rwkv7's heads and the
// recurrent vectors, each present, in x's dtype and of its shape (CaseFileError naming it), and
// no other tensor. Guarantees every parameter field of the PreparedCase.
void read_parameters(const Case& problem, const OracleCellEntry& cell, PreparedCase& out) {
  const std::string why = read_affines(problem, cell, out);
  // ParaCfC's time_bias_init only initialises W_b.bias (the case holds its value); it must still
  // be a number when given.
  if (cell.time_channel) (void)problem.meta_double("time_bias_init", -3.0);
  if (cell.kind == OracleCell::slstm || cell.kind == OracleCell::slstm_head) {
    out.eps = problem.meta_double("eps", 1e-6);
    if (!(std::isfinite(out.eps) && out.eps > 0.0)) {
      throw ContractViolation("eps", "must be a finite number > 0 (h = o c / (n + eps))",
                              fmt::format("{}", out.eps));
    }
  }
  const std::optional<double> cap = read_cap(problem, 0.5, out.dtype);
  if (cell.kind == OracleCell::gru_head) read_gru_head(problem, cell, out);
  if (cell.kind == OracleCell::slstm_head) read_slstm_head(problem, cell, cap, out);
  if (cell.kind == OracleCell::rwkv7) read_rwkv7_heads(problem, out);
  if (cell.kind == OracleCell::hopfield) {
    out.beta = problem.meta_double("beta", 1.0 / std::sqrt(static_cast<double>(out.d_h)));
    if (!(out.beta > 0.0 && std::isfinite(out.beta))) {
      throw ContractViolation("beta", "must be finite and > 0", fmt::format("{}", out.beta));
    }
  }
  read_recurrent(problem, cell, cap, why, out);
  refuse_unknown_tensors(problem, cell, out);
}

// ---- packing ----

std::vector<std::int64_t> checked_cu_seqlens(const Tensor& cu, std::int64_t batch,
                                             std::int64_t time) {
  if (cu.dtype() != DType::i32 && cu.dtype() != DType::i64) {
    throw ContractViolation("cu_seqlens", "must be int32 or int64",
                            std::string(dtype_name(cu.dtype())));
  }
  if (cu.dim() != 1 || cu.numel() < 2) {
    throw ContractViolation("cu_seqlens", "must be (S+1,) with S >= 1", shape_string(cu.shape()));
  }
  if (batch != 1) {
    throw ContractViolation("x", "batch must be 1 with cu_seqlens (packed input)",
                            std::to_string(batch));
  }
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(cu.numel()));
  for (std::int64_t i = 0; i < cu.numel(); ++i) {
    offsets[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(cu.load({i}));
  }
  if (offsets.front() != 0) {
    throw ContractViolation("cu_seqlens", "must start at 0", std::to_string(offsets.front()));
  }
  if (offsets.back() != time) {
    throw ContractViolation("cu_seqlens", fmt::format("must end at the packed length T = {}", time),
                            std::to_string(offsets.back()));
  }
  for (std::size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] <= offsets[i - 1]) {
      throw ContractViolation(
          "cu_seqlens", "must be strictly increasing (no empty sequences)",
          fmt::format("cu_seqlens[{}] = {} after {}", i, offsets[i], offsets[i - 1]));
    }
  }
  return offsets;
}

// cu_seqlens: refused for rwkv7 and m2rnn; else int32 or int64, (S+1,) with S >= 1, B = 1, from
// 0 to T strictly increasing. Guarantees the chains (one per batch row, or one per segment), each
// started from its h0 row when h0 is given. Returns the rows h0 must have (B or S).
std::int64_t read_packing(const Case& problem, const OracleCellEntry& cell, PreparedCase& out) {
  if (problem.cu_seqlens && (cell.kind == OracleCell::rwkv7 || cell.kind == OracleCell::m2rnn)) {
    throw ContractViolation("cu_seqlens",
                            fmt::format("is not supported by cell {} (ParaRWKV7 and ParaM2RNN refuse packed input)",
                                        problem.cell),
                            shape_string(problem.cu_seqlens->shape()));
  }
  if (!problem.cu_seqlens) {
    for (std::int64_t b = 0; b < out.batch; ++b) {
      out.chains.push_back(RowChain{b, 0, out.time, problem.h0 ? b : -1, -1});
    }
    return out.batch;
  }
  const std::vector<std::int64_t> cu = checked_cu_seqlens(*problem.cu_seqlens, out.batch, out.time);
  const auto segments = static_cast<std::int64_t>(cu.size()) - 1;
  for (std::int64_t s = 0; s < segments; ++s) {
    const auto i = static_cast<std::size_t>(s);
    out.chains.push_back(RowChain{0, cu[i], cu[i + 1], problem.h0 ? s : -1, s});
  }
  return segments;
}

// ---- h0 ----

// h0 (rows, slots, d_h), or (rows, d_h) for one-slot cells, lifted slot-major.
std::vector<double> checked_h0(const Tensor& h0, DType dtype, std::int64_t rows, int slots,
                               std::int64_t d_h, bool packed) {
  const Shape full{rows, slots, d_h};
  const Shape flat{rows, d_h};
  const std::string rows_name = packed ? "S (segments)" : "B";
  const std::string expected =
      slots == 1 ? fmt::format("{} or {} with {} = {}", shape_string(flat), shape_string(full),
                               rows_name, rows)
                 : fmt::format("{} with {} = {}", shape_string(full), rows_name, rows);
  if (h0.shape() != full && !(slots == 1 && h0.shape() == flat)) {
    throw ContractViolation("h0", "must have shape " + expected, shape_string(h0.shape()));
  }
  if (h0.dtype() != dtype) {
    throw ContractViolation("h0", fmt::format("must have the dtype of x ({})", dtype_name(dtype)),
                            std::string(dtype_name(h0.dtype())));
  }
  const Tensor contiguous = h0.reshaped({rows, slots, d_h});
  std::vector<double> out(static_cast<std::size_t>(rows * slots * d_h));
  std::size_t i = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t s = 0; s < slots; ++s) {
      for (std::int64_t j = 0; j < d_h; ++j) out[i++] = contiguous.load({r, s, j});
    }
  }
  return out;
}

// h0, when given: `rows` rows (B, or S when packed) of the state, (rows, slots, d_h), or
// (rows, d_h) for a one-slot cell; rwkv7's (rows, n_heads, d, d); m2rnn's (rows, k_dim, v_dim)
// too; in x's dtype. Guarantees h0 lifted slot-major (empty: zeros).
void read_h0(const Case& problem, const OracleCellEntry& cell, std::int64_t rows,
             PreparedCase& out) {
  if (!problem.h0) return;
  const bool packed = problem.cu_seqlens.has_value();
  if (cell.kind == OracleCell::rwkv7) {
    const std::int64_t d = out.d_h / out.n_heads;
    const Shape expected{rows, out.n_heads, d, d};
    if (problem.h0->shape() != expected) {
      throw ContractViolation("h0", fmt::format("must have shape {} (B, n_heads, d, d) for cell rwkv7",
                                                shape_string(expected)),
                              shape_string(problem.h0->shape()));
    }
    out.h0 = checked_h0(problem.h0->reshaped({rows, out.slots, out.d_h}), out.dtype, rows,
                        out.slots, out.d_h, packed);
    return;
  }
  // ParaM2RNN's h0 is (B, K, V); the same values as (B, K·V) row-major.
  const bool matrix_h0 =
      cell.kind == OracleCell::m2rnn && problem.h0->shape() == Shape{rows, out.k_dim, out.v_dim};
  out.h0 = checked_h0(matrix_h0 ? problem.h0->reshaped({rows, out.d_h}) : *problem.h0, out.dtype,
                      rows, out.slots, out.d_h, packed);
}

}  // namespace

PreparedCase prepare_case(const Case& problem) {
  const OracleCellEntry& cell = select_cell(problem);
  refuse_foreign_arguments(problem, cell);
  PreparedCase out = read_x(problem, cell);
  read_parameters(problem, cell, out);
  const std::int64_t h0_rows = read_packing(problem, cell, out);
  read_h0(problem, cell, h0_rows, out);
  return out;
}

}  // namespace pararnn::reference::detail
