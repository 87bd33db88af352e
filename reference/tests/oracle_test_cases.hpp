// Cases for the oracle's tests: a seeded generator of cases of the six cells the oracle
// implements, with values like the Python library's init, and small helpers. Every case replays
// from its CaseSpec (describe() prints it).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "pararnn/core/case_file.hpp"

namespace pararnn::reference::test_cases {

inline const std::vector<std::string> kCells = {"gru", "lstm", "nlru", "slstm", "cfc", "titans"};

// The recurrent parameters of a cell under their state_dict names: (d_h) vectors, except
// sLSTM's R, (4, d_h) with rows (i, f, z, o).
inline std::vector<std::string> recurrent_names(const std::string& cell) {
  if (cell == "gru") return {"a_z", "a_r", "a_n"};
  if (cell == "lstm") return {"a_f", "a_z", "a_o", "c_f", "c_o"};
  if (cell == "slstm") return {"R"};
  if (cell == "titans") return {"u", "r"};
  return {"u"};  // nlru, cfc
}
inline std::int64_t recurrent_rows(const std::string& cell) { return cell == "slstm" ? 4 : 1; }
// Gate blocks of W_x (d_h rows each).
inline int gates_of(const std::string& cell) {
  if (cell == "nlru" || cell == "cfc") return 2;
  if (cell == "slstm") return 4;
  if (cell == "titans") return 5;
  return 3;
}
inline int slots_of(const std::string& cell) {
  if (cell == "lstm") return 2;
  if (cell == "slstm") return 4;
  return 1;
}
// The columns of x that W_x reads: all, or all but CfC's last (Δt).
inline std::int64_t features_of(const std::string& cell, std::int64_t d_in) {
  return cell == "cfc" ? d_in - 1 : d_in;
}
// sLSTM's state slots (c, n, m, h).
inline constexpr int kSlstmNormalizer = 1;
// CfC's Δt channel: U(kTimeLow, kTimeHigh), so that about a fifth of the steps is below the
// floor 1e-4 (clamped) and the rest spans short to long steps.
inline constexpr double kTimeLow = -0.5;
inline constexpr double kTimeHigh = 2.0;
// sLSTM's normalizer n of a random state: U(0.5, 1.5). The cell's own n is positive (n' = f n + i
// from n = 0); a normalizer near -eps would make h' = o c' / (n' + eps) arbitrarily large.
inline constexpr double kNormalizerLow = 0.5;
inline constexpr double kNormalizerHigh = 1.5;

struct CaseSpec {
  std::string cell = "gru";
  std::int64_t batch = 2;
  std::int64_t time = 16;
  std::int64_t d_in = 3;
  std::int64_t d_h = 4;
  DType dtype = DType::f32;
  std::uint64_t seed = 1;
  bool with_h0 = false;
  std::vector<std::int64_t> cu_seqlens;  // empty: not packed
};

// Values like the Python library's init: W_x.weight (and here the bias too, to exercise it)
// U(-1/sqrt(d_in), 1/sqrt(d_in)); recurrent vectors N(0, 1/d_h); x N(0, 1); h0 U(-1, 1).
class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  }
  double normal(double stddev) {
    const double u1 = uniform(0x1.0p-53, 1.0);
    const double u2 = uniform(0.0, 1.0);
    return stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
  Tensor uniform_tensor(DType dtype, Shape shape, double bound) {
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& e : v) e = uniform(-bound, bound);
    return Tensor::from_values(dtype, std::move(shape), v);
  }
  Tensor normal_tensor(DType dtype, Shape shape, double stddev) {
    std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
    for (double& e : v) e = normal(stddev);
    return Tensor::from_values(dtype, std::move(shape), v);
  }

 private:
  std::mt19937_64 rng_;
};

// A random state of the cell (slots*d_h values, slot-major): U(-1, 1), except sLSTM's normalizer.
inline std::vector<double> random_state(Generator& gen, const std::string& cell, std::int64_t d_h) {
  std::vector<double> v(static_cast<std::size_t>(slots_of(cell) * d_h));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const bool normalizer =
        cell == "slstm" && static_cast<std::int64_t>(i) / d_h == kSlstmNormalizer;
    v[i] = normalizer ? gen.uniform(kNormalizerLow, kNormalizerHigh) : gen.uniform(-1.0, 1.0);
  }
  return v;
}

inline Case make_case(const CaseSpec& spec) {
  Generator gen(spec.seed);
  Case c;
  c.cell = spec.cell;
  c.metadata = {{"cell", spec.cell}};
  const std::int64_t features = features_of(spec.cell, spec.d_in);
  const double bound = 1.0 / std::sqrt(static_cast<double>(features));
  const std::int64_t rows = gates_of(spec.cell) * spec.d_h;
  const std::int64_t recurrent = recurrent_rows(spec.cell);
  for (const auto& name : recurrent_names(spec.cell)) {
    const double stddev = 1.0 / std::sqrt(static_cast<double>(recurrent * spec.d_h));
    c.parameters[name] = recurrent == 1
                             ? gen.normal_tensor(spec.dtype, {spec.d_h}, stddev)
                             : gen.normal_tensor(spec.dtype, {recurrent, spec.d_h}, stddev);
  }
  c.parameters["W_x.weight"] = gen.uniform_tensor(spec.dtype, {rows, features}, bound);
  c.parameters["W_x.bias"] = gen.uniform_tensor(spec.dtype, {rows}, bound);
  c.x = gen.normal_tensor(spec.dtype, {spec.batch, spec.time, spec.d_in}, 1.0);
  if (spec.cell == "cfc") {
    // W_b random (the library inits zeros and -3) so that its gradients are exercised.
    c.parameters["W_b.weight"] = gen.uniform_tensor(spec.dtype, {spec.d_h, features}, bound);
    c.parameters["W_b.bias"] = gen.uniform_tensor(spec.dtype, {spec.d_h}, 1.0);
    for (std::int64_t b = 0; b < spec.batch; ++b) {
      for (std::int64_t t = 0; t < spec.time; ++t) {
        c.x.store({b, t, spec.d_in - 1}, gen.uniform(kTimeLow, kTimeHigh));
      }
    }
  }
  const std::int64_t h0_rows =
      spec.cu_seqlens.empty() ? spec.batch : static_cast<std::int64_t>(spec.cu_seqlens.size()) - 1;
  if (spec.with_h0) {
    const int slots = slots_of(spec.cell);
    if (spec.cell == "slstm") {
      std::vector<double> v;
      for (std::int64_t r = 0; r < h0_rows; ++r) {
        const std::vector<double> row = random_state(gen, spec.cell, spec.d_h);
        v.insert(v.end(), row.begin(), row.end());
      }
      c.h0 = Tensor::from_values(spec.dtype, {h0_rows, slots, spec.d_h}, v);
    } else {
      c.h0 = slots == 1 ? gen.uniform_tensor(spec.dtype, {h0_rows, spec.d_h}, 1.0)
                        : gen.uniform_tensor(spec.dtype, {h0_rows, slots, spec.d_h}, 1.0);
    }
  }
  if (!spec.cu_seqlens.empty()) {
    std::vector<double> offsets(spec.cu_seqlens.begin(), spec.cu_seqlens.end());
    c.cu_seqlens = Tensor::from_values(DType::i64, {static_cast<std::int64_t>(offsets.size())},
                                       offsets);
  }
  return c;
}

// The gate of a cell that goes through softplus (cfc's f_pre, titans' θ_pre), -1 for none, and
// a bias that puts its pre-activation above PyTorch's threshold 20 (W·x adds at most ~3 here),
// where softplus is the identity: log1p(exp(22)) - 22 = 2.8e-10 tells the two apart.
inline int softplus_gate(const std::string& cell) {
  if (cell == "cfc") return 0;
  if (cell == "titans") return 1;
  return -1;
}
inline constexpr double kAboveSoftplusThreshold = 25.0;

// The same case with channel 0's softplus gate above the threshold in every step (no-op for
// cells without softplus).
inline Case with_softplus_above_threshold(Case c) {
  const int gate = softplus_gate(c.cell);
  if (gate < 0) return c;
  const std::int64_t d_h = c.parameters.at("W_x.bias").size(0) / gates_of(c.cell);
  c.parameters.at("W_x.bias").store({gate * d_h}, kAboveSoftplusThreshold);
  return c;
}

// The tie of the sLSTM max, built from dyadic values so that z_f + m == z_i holds exactly in
// every working type, at channel kTieChannel of every row: W_x's i and f rows zero there, gate
// biases kTieBias, R[i] = kTieRecurrentI, R[f] = kTieRecurrentF, previous h = kTieHidden and
// m = kTieStabilizer: z_i = 0.25 + 0.25·0.5 = 0.375 = z_f + m = 0.25 + 0.125·0.5 + 0.0625.
inline constexpr std::int64_t kTieChannel = 1;
inline constexpr double kTieBias = 0.25;
inline constexpr double kTieRecurrentI = 0.25;
inline constexpr double kTieRecurrentF = 0.125;
inline constexpr double kTieHidden = 0.5;
inline constexpr double kTieStabilizer = 0.0625;
inline constexpr int kSlstmStabilizer = 2;
inline constexpr int kSlstmHidden = 3;

// An sLSTM case (T = 1, with h0) whose step 0 is at the tie in channel kTieChannel.
inline Case slstm_tie_case(const CaseSpec& spec) {
  Case c = make_case(spec);
  const std::int64_t j = kTieChannel;
  Tensor& w = c.parameters.at("W_x.weight");
  for (const int gate : {0, 1}) {  // i, f
    for (std::int64_t k = 0; k < spec.d_in; ++k) w.store({gate * spec.d_h + j, k}, 0.0);
    c.parameters.at("W_x.bias").store({gate * spec.d_h + j}, kTieBias);
  }
  c.parameters.at("R").store({0, j}, kTieRecurrentI);
  c.parameters.at("R").store({1, j}, kTieRecurrentF);
  for (std::int64_t b = 0; b < c.h0->size(0); ++b) {
    c.h0->store({b, kSlstmHidden, j}, kTieHidden);
    c.h0->store({b, kSlstmStabilizer, j}, kTieStabilizer);
  }
  return c;
}

inline std::string describe(const CaseSpec& spec) {
  return "cell=" + spec.cell + " dtype=" + std::string(dtype_name(spec.dtype)) +
         " seed=" + std::to_string(spec.seed) + " B=" + std::to_string(spec.batch) +
         " T=" + std::to_string(spec.time) + " d_h=" + std::to_string(spec.d_h);
}

// The same case with every tensor widened (exactly) to f64.
inline Case widened_to_f64(const Case& c) {
  Case out = c;
  for (auto& [name, t] : out.parameters) t = Tensor::converted(t, DType::f64);
  out.x = Tensor::converted(c.x, DType::f64);
  if (c.h0) out.h0 = Tensor::converted(*c.h0, DType::f64);
  return out;
}

inline double max_abs_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_f64_vector();
  const std::vector<double> vb = b.to_f64_vector();
  double worst = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double d = std::abs(va[i] - vb[i]);
    if (!(d <= worst)) worst = d;  // NaN wins
  }
  return worst;
}

}  // namespace pararnn::reference::test_cases
