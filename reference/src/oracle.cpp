// The oracle's public API, the validation of cases, and the double working type (the primary of
// f32, f16 and bf16 cases). float128 lives in oracle_float128.cpp, certification in
// oracle_certify.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "oracle_math.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace detail {

template class ChainRunner<double>;

namespace {

// The working type of the oracle for a storage dtype: at least twice the significand bits of
// the solver's compute type (CONTRACT §2).
template <class StorageT>
using PrimaryOf = std::conditional_t<std::is_same_v<ComputeOf<StorageT>, double>, Float128, double>;

template <class Real>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<Real, double>) {
    return "double";
  } else {
    return "float128";
  }
}

struct RecurrentSpec {
  std::string name;
  int rows = 0;  // 0: a (d_h) vector; else a (rows, d_h) tensor of that many vectors
};

struct AffineSpec {
  std::string weight;
  std::string bias;
  int gates = 0;
};

struct CellSpec {
  CellKind kind;
  int gates;  // gate-input blocks; the affines' gates, plus cfc's Δt
  int slots;
  std::vector<AffineSpec> affine;        // in row order; the first gives d_h
  std::vector<RecurrentSpec> recurrent;  // state_dict names, in order
  bool time_channel = false;             // cfc: x's last channel is Δt, not a feature
};

CellSpec cell_spec(const Case& problem) {
  const std::string& cell = problem.cell;
  const std::optional<std::string> mix = problem.meta("mix");
  const auto refuse_mix = [&](std::string_view rule) {
    throw ContractViolation("mix", rule, *mix);
  };
  const auto refuse_heads = [&](std::string_view rule) {
    if (const auto heads = problem.meta("n_heads"); heads && !heads->empty() && *heads != "none") {
      throw ContractViolation("n_heads", rule, *heads);
    }
  };
  const AffineSpec w_x{"W_x.weight", "W_x.bias", 0};
  const auto with_gates = [](AffineSpec a, int gates) {
    a.gates = gates;
    return a;
  };
  if (cell == "gru" && mix && *mix == "head") {
    const auto heads = problem.meta("n_heads");
    if (!heads || heads->empty() || *heads == "none") {
      throw ContractViolation("n_heads", "is required with cell gru, mix 'head'",
                              heads ? *heads : std::string("<absent>"));
    }
    return {CellKind::gru_head, 3, 1, {with_gates(w_x, 3)}, {}};
  }
  if (cell == "hopfield") {
    if (mix && *mix != "dense" && *mix != "diag") {
      refuse_mix("cell hopfield has the dense mix only ('dense' or absent)");
    }
    refuse_heads("is not an argument of cell hopfield");
    return {CellKind::hopfield, 2, 1, {with_gates(w_x, 2)}, {}};
  }
  if (cell == "rwkv7") {
    if (mix && *mix != "rwkv7" && *mix != "diag") {
      refuse_mix("cell rwkv7 has the rwkv7 mix only ('rwkv7' or absent)");
    }
    return {CellKind::rwkv7, 6, 1, {with_gates(w_x, 6)}, {}};
  }
  if (cell == "m2rnn") {
    if (mix && *mix != "matrix" && *mix != "diag") {
      refuse_mix("cell m2rnn has no mix argument (absent, or 'matrix')");
    }
    refuse_heads("is not an argument of cell m2rnn");
    return {CellKind::m2rnn, 1, 1, {with_gates(w_x, 1)}, {}};
  }
  if (cell == "gru") {
    if (mix && *mix != "diag") {
      refuse_mix("the oracle implements cell gru with mix 'diag' or 'head' only");
    }
    refuse_heads("is only valid with mix 'head' (cell gru, mix diag)");
    return {CellKind::gru, 3, 1, {with_gates(w_x, 3)}, {{"a_z"}, {"a_r"}, {"a_n"}}};
  }
  if (cell == "lstm") {
    if (mix && *mix != "diag") refuse_mix("cell lstm is diagonal (mix 'diag' or absent)");
    return {CellKind::lstm, 3, 2, {with_gates(w_x, 3)},
            {{"a_f"}, {"a_z"}, {"a_o"}, {"c_f"}, {"c_o"}}};
  }
  if (cell == "nlru") {
    if (mix && *mix != "diag") refuse_mix("cell nlru is diagonal (mix 'diag' or absent)");
    return {CellKind::nlru, 2, 1, {with_gates(w_x, 2)}, {{"u"}}};
  }
  if (cell == "slstm" && mix && (*mix == "head" || *mix == "dense")) {
    if (*mix == "dense") refuse_heads("is only valid with mix 'head' (cell slstm, mix dense)");
    return {CellKind::slstm_head, 4, 4, {with_gates(w_x, 4)}, {}};
  }
  if (cell == "slstm") {
    if (mix && *mix != "diag") {
      refuse_mix("the oracle implements cell slstm with mix 'diag', 'head' or 'dense'");
    }
    refuse_heads("is only valid with mix 'head' (cell slstm, mix diag)");
    return {CellKind::slstm, 4, 4, {with_gates(w_x, 4)}, {{"R", 4}}};
  }
  if (cell == "cfc") {
    if (mix && *mix != "diag") refuse_mix("cell cfc is diagonal (mix 'diag' or absent)");
    const std::string gate_mix = problem.meta("gate_mix").value_or("input");
    if (gate_mix == "diag_h") {  // the time-constant gate also reads v ⊙ h
      return {CellKind::cfc_diag_h, 4, 1, {with_gates(w_x, 2), {"W_b.weight", "W_b.bias", 1}},
              {{"u"}, {"v"}}, true};
    }
    if (gate_mix != "input") {
      throw ContractViolation("gate_mix", "must be 'input' or 'diag_h' for cell cfc", gate_mix);
    }
    return {CellKind::cfc, 4, 1, {with_gates(w_x, 2), {"W_b.weight", "W_b.bias", 1}}, {{"u"}},
            true};
  }
  if (cell == "titans") {
    if (mix && *mix != "diag") refuse_mix("cell titans is diagonal (mix 'diag' or absent)");
    return {CellKind::titans, 5, 1, {with_gates(w_x, 5)}, {{"u"}, {"r"}}};
  }
  throw ContractViolation(
      "cell",
      "must be a cell the oracle implements: gru (mix diag or head), lstm, nlru, slstm (mix diag, "
      "head or dense), "
      "cfc (gate_mix input or diag_h), titans, hopfield, rwkv7, m2rnn",
      cell.empty() ? std::string("<empty>") : cell);
}

std::string parameter_list(const CellSpec& spec) {
  std::string names = spec.kind == CellKind::m2rnn ? "W, " : "";
  for (const auto& r : spec.recurrent) names += r.name + ", ";
  for (std::size_t i = 0; i < spec.affine.size(); ++i) {
    names += (i ? ", " : "") + spec.affine[i].weight + ", " + spec.affine[i].bias;
  }
  return names;
}

// A parameter of the cell, present, floating, in the case's dtype, of the expected shape.
const Tensor& checked_parameter(const Case& problem, const CellSpec& spec,
                                const std::string& name, const Shape& expected,
                                const std::string& why) {
  const auto it = problem.parameters.find(name);
  if (it == problem.parameters.end()) {
    throw CaseFileError(fmt::format("case (cell {}): parameter '{}' is missing; cell {} needs {}",
                                    problem.cell, name, problem.cell, parameter_list(spec)));
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

template <class StorageT>
double exact_double(StorageT v) {
  if constexpr (std::is_same_v<StorageT, double> || std::is_same_v<StorageT, float>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));  // half and bfloat16 widen exactly
  }
}

bool all_finite(const Tensor& t) {
  const double* p = t.data_as<double>();
  return std::all_of(p, p + t.numel(), [](double v) { return std::isfinite(v); });
}

}  // namespace

// A constructor argument of another cell is refused (the Python class would raise TypeError);
// "None" or "" count as absent (Case::meta).
void refuse_foreign_arguments(const Case& problem, CellKind kind) {
  const bool slstm = kind == CellKind::slstm || kind == CellKind::slstm_head;
  const bool cfc = kind == CellKind::cfc || kind == CellKind::cfc_diag_h;
  const bool heads = kind == CellKind::gru_head || kind == CellKind::rwkv7 ||
                     (kind == CellKind::slstm_head && problem.meta("mix").value_or("") == "head");
  const std::pair<const char*, bool> arguments[] = {
      {"n_heads", heads}, {"eps", slstm}, {"beta", kind == CellKind::hopfield}, {"gate_mix", cfc},
      {"time_bias_init", cfc}, {"k_dim", kind == CellKind::m2rnn}, {"v_dim", kind == CellKind::m2rnn}};
  for (const auto& [key, takes] : arguments) {
    if (!takes && problem.meta(key)) {
      throw ContractViolation(key, fmt::format("is not an argument of cell {} (mix {})", problem.cell,
                                               problem.meta("mix").value_or("absent")),
                              *problem.meta(key));
    }
  }
}

PreparedCase prepare_case(const Case& problem) {
  const CellSpec spec = cell_spec(problem);
  refuse_foreign_arguments(problem, spec.kind);
  PreparedCase out;
  out.kind = spec.kind;
  out.cell = problem.cell;
  out.gates = spec.gates;
  out.slots = spec.slots;

  const Tensor& x = problem.x;
  if (!x.defined()) throw ContractViolation("x", "must be given", "<undefined>");
  if (!is_floating(x.dtype())) {
    throw ContractViolation("x", "must be f64, f32, f16 or bf16", std::string(dtype_name(x.dtype())));
  }
  if (x.dim() != 3) throw ContractViolation("x", "must be 3-D (B, T, d_in)", shape_string(x.shape()));
  if (x.size(0) < 1 || x.size(1) < 1 || x.size(2) < 1) {
    throw ContractViolation("x", "must have B >= 1, T >= 1 and d_in >= 1", shape_string(x.shape()));
  }
  if (spec.time_channel && x.size(2) < 2) {
    throw ContractViolation(
        "x", fmt::format("must have d_in >= 2 for cell {} (F >= 1 features, then the Δt channel)",
                         problem.cell),
        shape_string(x.shape()));
  }
  out.dtype = x.dtype();
  out.batch = x.size(0);
  out.time = x.size(1);
  out.d_in = x.size(2);
  out.features = spec.time_channel ? out.d_in - 1 : out.d_in;
  out.x = x;
  out.products_exact_in_double = out.dtype != DType::f64;

  // d_h from the first affine's weight rows / its gates; every other shape follows.
  const AffineSpec& first = spec.affine.front();
  const Tensor& weight = checked_parameter(problem, spec, first.weight, {}, "");
  if (weight.dim() != 2 || weight.size(0) < first.gates || weight.size(0) % first.gates != 0) {
    throw CaseFileError(fmt::format(
        "case (cell {}): parameter '{}' has shape {}, expected ({} d_h, {}) with d_h >= 1",
        problem.cell, first.weight, shape_string(weight.shape()), first.gates,
        spec.time_channel ? "F" : "d_in"));
  }
  out.d_h = weight.size(0) / first.gates;
  if (spec.kind == CellKind::m2rnn) {  // d_h = K·V from the constructor arguments k_dim, v_dim
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
        checked_parameter(problem, spec, "W", {out.v_dim, out.v_dim},
                          fmt::format(" (v_dim = {}; W multiplies the state on the right)", out.v_dim))
            .reshaped({out.v_dim * out.v_dim}));
  }
  if (spec.kind == CellKind::hopfield) {  // 2 d_h² rows: K and V, each (d_h, d_h)
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
        spec.time_channel
            ? fmt::format("last dimension must equal F + 1 = {} (the columns of {}, then Δt)",
                          weight.size(1) + 1, first.weight)
            : fmt::format("last dimension must equal d_in = {} (the columns of {})",
                          weight.size(1), first.weight);
    throw ContractViolation("x", rule, shape_string(x.shape()));
  }
  const std::string why =
      spec.kind == CellKind::m2rnn
          ? fmt::format(" (k_dim + v_dim + 1 = {} rows: k, v, f_logit)", out.k_dim + out.v_dim + 1)
          : fmt::format(" (d_h = {} from {} rows {} / {} gates)", out.d_h, first.weight,
                        weight.size(0), first.gates);
  // Hopfield's affine is 2 d_h blocks of d_h rows (K's rows, then V's).
  const int block_scale = spec.kind == CellKind::hopfield ? static_cast<int>(out.d_h) : 1;
  out.gates = spec.gates * block_scale;
  int gate = 0;
  for (AffineSpec affine : spec.affine) {
    affine.gates *= block_scale;
    const std::int64_t rows =
        spec.kind == CellKind::m2rnn ? out.k_dim + out.v_dim + 1 : affine.gates * out.d_h;
    const std::vector<double> w = lift_vector(
        checked_parameter(problem, spec, affine.weight, {rows, out.features}, why)
            .reshaped({rows * out.features}));
    const std::vector<double> b =
        lift_vector(checked_parameter(problem, spec, affine.bias, {rows}, why));
    out.w.insert(out.w.end(), w.begin(), w.end());
    out.bias.insert(out.bias.end(), b.begin(), b.end());
    out.affine_parameters.push_back({affine.weight, affine.bias, gate, affine.gates});
    gate += affine.gates;
  }
  out.affine_gates = gate;
  if (spec.time_channel) out.time_gate = gate;
  // ParaCfC's time_bias_init only initialises W_b.bias (the case holds its value); it must still
  // be a number when given.
  if (spec.time_channel) (void)problem.meta_double("time_bias_init", -3.0);

  if (spec.kind == CellKind::slstm || spec.kind == CellKind::slstm_head) {
    out.eps = problem.meta_double("eps", 1e-6);
    if (!(std::isfinite(out.eps) && out.eps > 0.0)) {
      throw ContractViolation("eps", "must be a finite number > 0 (h = o c / (n + eps))",
                              fmt::format("{}", out.eps));
    }
  }

  const std::optional<double> cap = problem.meta_cap(0.5);
  if (cap && !(*cap >= 0.0)) {
    throw ContractViolation("max_recurrent_norm", "must be a non-negative number or none",
                            fmt::format("{}", *cap));
  }
  const double cap_s = cap ? in_storage(*cap, out.dtype) : 0.0;
  if (spec.kind == CellKind::gru_head) {
    const std::int64_t heads = problem.meta_int("n_heads", 0);
    if (heads < 1 || out.d_h % heads != 0) {
      throw ContractViolation("n_heads", fmt::format("must be >= 1 and divide d_h = {}", out.d_h),
                              std::to_string(heads));
    }
    out.n_heads = heads;
    const std::int64_t m = out.d_h / heads;
    // ParaGRU head: no clamp unless max_recurrent_norm names one (its default is None).
    const std::optional<double> head_cap = problem.meta_cap(std::nullopt);
    if (head_cap && !(*head_cap >= 0.0)) {
      throw ContractViolation("max_recurrent_norm", "must be a non-negative number or none",
                              fmt::format("{}", *head_cap));
    }
    const double head_cap_s = head_cap ? in_storage(*head_cap, out.dtype) : 0.0;
    std::vector<std::vector<double>> lifted;
    for (const char* name : {"A_z", "A_r", "A_n"}) {
      lifted.push_back(lift_vector(
          checked_parameter(problem, spec, name, {heads, m, m},
                            fmt::format(" (n_heads = {}, d_head = {}; stored (in, out))", heads, m))
              .reshaped({heads * m * m})));
    }
    const char* names[] = {"A_z", "A_r", "A_n"};
    for (const char* name : names) out.matrix_parameter_shapes[name] = {heads, m, m};
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      for (std::size_t gate = 0; gate < lifted.size(); ++gate) {
        const auto& a = lifted[gate];
        for (std::int64_t i = 0; i < m * m; ++i) {
          const double raw = a[static_cast<std::size_t>(hd * m * m + i)];
          double v = raw;
          if (head_cap) v = std::min(std::max(v, -head_cap_s), head_cap_s);
          out.head_matrices.push_back(v);
          out.head_matrix_sources.push_back(
              {names[gate], hd * m * m + i, !head_cap || std::abs(raw) <= head_cap_s ? 1.0 : 0.0});
        }
      }
    }
  }
  if (spec.kind == CellKind::slstm_head) {
    const bool dense = problem.meta("mix").value_or("") == "dense";
    const std::int64_t heads = dense ? 1 : problem.meta_int("n_heads", 0);
    if (heads < 1 || out.d_h % heads != 0) {
      throw ContractViolation("n_heads", fmt::format("must be >= 1 and divide d_h = {}", out.d_h),
                              std::to_string(heads));
    }
    out.n_heads = heads;
    const std::int64_t m = out.d_h / heads;
    if (dense) {  // R_dense.weight (4 d_h, d_h) [g·d_h + out][in]: not clamped
      const std::vector<double> r = lift_vector(
          checked_parameter(problem, spec, "R_dense.weight", {4 * m, m}, " (Linear(d_h, 4 d_h))")
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
    } else {  // R_head (4, H, m, m) [g][head][in][out]: clamped
      const std::vector<double> r = lift_vector(
          checked_parameter(problem, spec, "R_head", {4, heads, m, m},
                            fmt::format(" (n_heads = {}, d_head = {}; [gate, head, in, out])", heads, m))
              .reshaped({4 * heads * m * m}));
      out.matrix_parameter_shapes["R_head"] = {4, heads, m, m};
      for (std::int64_t hd = 0; hd < heads; ++hd) {
        for (std::int64_t g = 0; g < 4; ++g) {
          for (std::int64_t i = 0; i < m * m; ++i) {
            const std::int64_t flat = (g * heads + hd) * m * m + i;
            const double raw = r[static_cast<std::size_t>(flat)];
            double v = raw;
            if (cap) v = std::min(std::max(v, -cap_s), cap_s);
            out.head_matrices.push_back(v);
            out.head_matrix_sources.push_back({"R_head", flat, !cap || std::abs(raw) <= cap_s ? 1.0 : 0.0});
          }
        }
      }
    }
  }
  if (spec.kind == CellKind::rwkv7) {  // (H, d, d) state as d slots of d_h = H·d values
    // Every head count gives W_x the same shape: the heads must be stated, never guessed.
    if (!problem.meta("n_heads")) {
      throw ContractViolation("n_heads", "is required in the metadata of a cell rwkv7 case (the "
                              "state_dict does not determine it)", "<absent>");
    }
    const std::int64_t heads = problem.meta_int("n_heads", 1);
    if (heads < 1 || out.d_h % heads != 0) {
      throw ContractViolation("n_heads", fmt::format("must be >= 1 and divide d_h = {} (cell rwkv7)", out.d_h),
                              std::to_string(heads));
    }
    out.n_heads = heads;
    out.slots = static_cast<int>(out.d_h / heads);
  }
  if (spec.kind == CellKind::hopfield) {
    out.beta = problem.meta_double("beta", 1.0 / std::sqrt(static_cast<double>(out.d_h)));
    if (!(out.beta > 0.0 && std::isfinite(out.beta))) {
      throw ContractViolation("beta", "must be finite and > 0", fmt::format("{}", out.beta));
    }
  }
  for (const RecurrentSpec& r : spec.recurrent) {
    const int rows = std::max(r.rows, 1);
    const Shape shape = r.rows == 0 ? Shape{out.d_h} : Shape{r.rows, out.d_h};
    const std::vector<double> all =
        lift_vector(checked_parameter(problem, spec, r.name, shape, why).reshaped({rows * out.d_h}));
    out.recurrent_parameters.push_back(
        {r.name, static_cast<int>(out.recurrent.size()), rows, shape});
    for (int row = 0; row < rows; ++row) {
      std::vector<double> v(all.begin() + row * out.d_h, all.begin() + (row + 1) * out.d_h);
      std::vector<double> mask(v.size(), 1.0);
      if (cap) {
        for (std::size_t j = 0; j < v.size(); ++j) {
          mask[j] = std::abs(v[j]) <= cap_s ? 1.0 : 0.0;
          v[j] = std::min(std::max(v[j], -cap_s), cap_s);  // NaN stays NaN
        }
      }
      out.recurrent.push_back(std::move(v));
      out.recurrent_gradient_mask.push_back(std::move(mask));
    }
  }

  // A tensor the cell does not have is refused: a case is exactly its cell's state_dict.
  std::vector<std::string> known;
  for (const AffineSpec& affine : spec.affine) known.insert(known.end(), {affine.weight, affine.bias});
  for (const RecurrentSpec& r : spec.recurrent) known.push_back(r.name);
  if (spec.kind == CellKind::m2rnn) known.push_back("W");
  if (spec.kind == CellKind::gru_head) known.insert(known.end(), {"A_z", "A_r", "A_n"});
  if (spec.kind == CellKind::slstm_head)
    known.push_back(problem.meta("mix").value_or("") == "dense" ? "R_dense.weight" : "R_head");
  for (const auto& [name, tensor] : problem.parameters) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw CaseFileError(fmt::format("case (cell {}): tensor '{}' {} is not a parameter of the cell; "
                                      "cell {} has {}", problem.cell, name, shape_string(tensor.shape()),
                                      problem.cell, parameter_list(spec)));
    }
  }

  std::int64_t h0_rows = out.batch;
  if (problem.cu_seqlens && (spec.kind == CellKind::rwkv7 || spec.kind == CellKind::m2rnn)) {
    throw ContractViolation("cu_seqlens",
                            fmt::format("is not supported by cell {} (ParaRWKV7 and ParaM2RNN refuse packed input)",
                                        problem.cell),
                            shape_string(problem.cu_seqlens->shape()));
  }
  if (problem.cu_seqlens) {
    const std::vector<std::int64_t> cu = checked_cu_seqlens(*problem.cu_seqlens, out.batch, out.time);
    h0_rows = static_cast<std::int64_t>(cu.size()) - 1;
    for (std::int64_t s = 0; s < h0_rows; ++s) {
      const auto i = static_cast<std::size_t>(s);
      out.chains.push_back(RowChain{0, cu[i], cu[i + 1], problem.h0 ? s : -1, s});
    }
  } else {
    for (std::int64_t b = 0; b < out.batch; ++b) {
      out.chains.push_back(RowChain{b, 0, out.time, problem.h0 ? b : -1, -1});
    }
  }
  if (problem.h0 && spec.kind == CellKind::rwkv7) {
    const std::int64_t d = out.d_h / out.n_heads;
    const Shape expected{h0_rows, out.n_heads, d, d};
    if (problem.h0->shape() != expected) {
      throw ContractViolation("h0", fmt::format("must have shape {} (B, n_heads, d, d) for cell rwkv7",
                                                shape_string(expected)),
                              shape_string(problem.h0->shape()));
    }
    out.h0 = checked_h0(problem.h0->reshaped({h0_rows, out.slots, out.d_h}), out.dtype, h0_rows,
                        out.slots, out.d_h, problem.cu_seqlens.has_value());
  } else if (problem.h0) {
    // ParaM2RNN's h0 is (B, K, V); the same values as (B, K·V) row-major.
    const bool matrix_h0 =
        spec.kind == CellKind::m2rnn && problem.h0->shape() == Shape{h0_rows, out.k_dim, out.v_dim};
    out.h0 = checked_h0(matrix_h0 ? problem.h0->reshaped({h0_rows, out.d_h}) : *problem.h0, out.dtype, h0_rows, out.slots, out.d_h,
                        problem.cu_seqlens.has_value());
  }
  return out;
}

void lift_x(const PreparedCase& problem, std::int64_t b, std::int64_t t0, std::int64_t count,
            double* out) {
  // x is a contiguous Tensor (B, T, d_in); its storage values widen exactly to double.
  const std::int64_t begin = (b * problem.time + t0) * problem.d_in;
  const std::int64_t n = count * problem.d_in;
  dispatch_float_dtype(problem.x.dtype(), [&]<class StorageT>() {
    const StorageT* p = problem.x.data_as<StorageT>() + begin;
    for (std::int64_t i = 0; i < n; ++i) out[i] = exact_double(p[i]);
  });
}

std::string describe_chain(const PreparedCase& problem, const ChainSpec& spec) {
  const RowChain& chain = problem.chains.at(static_cast<std::size_t>(spec.chain));
  std::string out = chain.segment >= 0 ? fmt::format("segment={}", chain.segment)
                                       : fmt::format("b={}", chain.b);
  if (spec.channel >= 0) out += fmt::format(",channel={}", spec.channel);
  return out;
}

}  // namespace detail

OracleStateShape oracle_state_shape(const Case& problem) {
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  return OracleStateShape{prepared.slots, prepared.d_h};
}

OracleResult oracle_sequential(const Case& problem, const OracleOptions& options) {
  if (options.certify_budget < 0) {
    throw ContractViolation("certify_budget", "must be >= 0",
                            std::to_string(options.certify_budget));
  }
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  OracleResult result;
  result.H = Tensor(DType::f64, prepared.trajectory_shape());
  double* H = result.H.data_as<double>();
  dispatch_float_dtype(prepared.dtype, [&]<class StorageT>() {
    using Primary = detail::PrimaryOf<StorageT>;
    static_assert(std::numeric_limits<Primary>::digits >=
                      2 * std::numeric_limits<ComputeOf<StorageT>>::digits,
                  "the oracle needs twice the significand bits of the solver's compute type");
    if constexpr (std::is_same_v<Primary, double>) {
      detail::unroll_rows<double>(prepared, H, options.poll);
    } else {
      detail::unroll_float128(prepared, H, options.poll);
    }
    result.type = detail::type_name<Primary>();
    result.digits = std::numeric_limits<Primary>::digits;
  });
  result.finite = detail::all_finite(result.H);
  if (options.certify) {
    detail::Certification c = detail::certify(prepared, H, options);
    result.certifier_type = std::move(c.certifier_type);
    result.certifier_digits = c.certifier_digits;
    result.self_check_delta = c.self_check_delta;
    result.certified_all_chains = c.all_chains;
    result.certified_chains = std::move(c.chains);
    result.certified_chain_steps = c.chain_steps;
  }
  return result;
}

OracleStep oracle_step_with_jacobian(const Case& problem, std::int64_t b, std::int64_t t,
                                     std::span<const double> h_prev) {
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  if (b < 0 || b >= prepared.batch) {
    throw ContractViolation("b", fmt::format("must be in [0, {})", prepared.batch),
                            std::to_string(b));
  }
  if (t < 0 || t >= prepared.time) {
    throw ContractViolation("t", fmt::format("must be in [0, {})", prepared.time),
                            std::to_string(t));
  }
  if (static_cast<std::int64_t>(h_prev.size()) != prepared.state_size()) {
    throw ContractViolation(
        "h_prev", fmt::format("must hold slots*d_h = {} values", prepared.state_size()),
        std::to_string(h_prev.size()));
  }
  if (prepared.dtype == DType::f64) {
    return detail::step_with_jacobian_float128(prepared, b, t, h_prev);
  }
  return detail::step_with_jacobian<double>(prepared, b, t, h_prev);
}

}  // namespace pararnn::reference
