// Cases for the oracle's tests: a seeded generator of cases of the three cells the oracle
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

inline const std::vector<std::string> kCells = {"gru", "lstm", "nlru"};

inline std::vector<std::string> recurrent_names(const std::string& cell) {
  if (cell == "gru") return {"a_z", "a_r", "a_n"};
  if (cell == "lstm") return {"a_f", "a_z", "a_o", "c_f", "c_o"};
  return {"u"};
}
inline int gates_of(const std::string& cell) { return cell == "nlru" ? 2 : 3; }
inline int slots_of(const std::string& cell) { return cell == "lstm" ? 2 : 1; }

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

inline Case make_case(const CaseSpec& spec) {
  Generator gen(spec.seed);
  Case c;
  c.cell = spec.cell;
  c.metadata = {{"cell", spec.cell}};
  const double bound = 1.0 / std::sqrt(static_cast<double>(spec.d_in));
  const std::int64_t rows = gates_of(spec.cell) * spec.d_h;
  for (const auto& name : recurrent_names(spec.cell)) {
    c.parameters[name] =
        gen.normal_tensor(spec.dtype, {spec.d_h}, 1.0 / std::sqrt(static_cast<double>(spec.d_h)));
  }
  c.parameters["W_x.weight"] = gen.uniform_tensor(spec.dtype, {rows, spec.d_in}, bound);
  c.parameters["W_x.bias"] = gen.uniform_tensor(spec.dtype, {rows}, bound);
  c.x = gen.normal_tensor(spec.dtype, {spec.batch, spec.time, spec.d_in}, 1.0);
  const std::int64_t h0_rows =
      spec.cu_seqlens.empty() ? spec.batch : static_cast<std::int64_t>(spec.cu_seqlens.size()) - 1;
  if (spec.with_h0) {
    c.h0 = slots_of(spec.cell) == 1
               ? gen.uniform_tensor(spec.dtype, {h0_rows, spec.d_h}, 1.0)
               : gen.uniform_tensor(spec.dtype, {h0_rows, slots_of(spec.cell), spec.d_h}, 1.0);
  }
  if (!spec.cu_seqlens.empty()) {
    std::vector<double> offsets(spec.cu_seqlens.begin(), spec.cu_seqlens.end());
    c.cu_seqlens = Tensor::from_values(DType::i64, {static_cast<std::int64_t>(offsets.size())},
                                       offsets);
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
