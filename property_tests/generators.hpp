// Our RapidCheck generators: problem shapes that shrink toward small B, T, d; conditioning
// classes as data (kConditioningClasses: easy, moderate, hard |J|≈1, saturating, dyadic,
// bf16-grid), shrinking toward easy; every storage dtype; values from the portable stream. A generated
// problem names its values so a failure prints a readable case, and classifies itself.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "pararnn/cells/cell.hpp"
#include "pararnn/cells/registry.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/core/tensor.hpp"
#include "pararnn/solver/training.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn::testing {

// The conditioning classes of a generated problem, as data: what its weights and inputs look
// like. The generator draws a class index, so a failing case shrinks toward "easy" (then its
// shape toward B = T = d = 1, its seed toward 0).
enum class ValueGrid {
  none,
  dyadic,  // every input and parameter a multiple of 1/16 below 8 in magnitude: exact in every dtype
  bf16,    // every input and parameter on bf16's grid: storage rounding loses nothing
};
struct ConditioningClass {
  std::string_view name;
  std::optional<double> weight_std = std::nullopt;  // nullopt: the library init 1/√d_h
  bool clamped = true;                              // App. C.1 clamp at 0.5, or none
  double input_scale = 1.0;                         // x = input_scale · N(0, 1)
  ValueGrid grid = ValueGrid::none;
  std::string_view not_for = {};                    // a cell the class does not apply to
  std::string_view why_not = {};
};
inline const ConditioningClass kConditioningClasses[] = {
    {.name = "easy"},
    {.name = "moderate", .weight_std = 0.5},
    {.name = "hard", .weight_std = 0.7, .clamped = false},  // |J| near 1, unclamped (CONTRACT §4)
    {.name = "saturating", .input_scale = 6.0, .not_for = "titans",  // gates at 0 or 1
     .why_not = "ParaTitans' memory is not squashed: large inputs make it grow without bound"},
    {.name = "dyadic", .weight_std = 0.5, .grid = ValueGrid::dyadic},
    {.name = "bf16_grid", .grid = ValueGrid::bf16},
};

inline const ConditioningClass& conditioning_class(std::string_view name) {
  for (const ConditioningClass& c : kConditioningClasses)
    if (c.name == name) return c;
  throw Error(fmt::format("no conditioning class '{}'", name));
}

// `v` on the class's grid.
inline double on_grid(double v, ValueGrid grid) {
  switch (grid) {
    case ValueGrid::none: return v;
    case ValueGrid::dyadic: return std::clamp(std::round(v * 16.0) / 16.0, -7.9375, 7.9375);
    case ValueGrid::bf16: return static_cast<double>(round_to_storage<Eigen::bfloat16>(v));
  }
  return v;
}

// The cell, input and h0 of a generated problem, with the ApplyOptions that pass that h0:
//   const auto made = p.make();
//   const auto& [cell, x, h0] = made;
//   ApplyOptions apply = made.options();
struct MadeProblem {
  Cell cell;
  Tensor x;
  std::optional<Tensor> h0;
  ApplyOptions options() const {
    ApplyOptions o;
    if (h0) o.h0 = h0->view();
    return o;
  }
};

struct GeneratedProblem {
  std::string cell;
  std::string gate_mix = "input";           // ParaCfC's gate_mix (label "cfc:diag_h")
  DType dtype = DType::f32;
  std::int64_t batch = 1, time = 1, d_in = 1, d_h = 1;
  std::optional<double> weight_std;         // nullopt: the library init 1/√d_h
  bool clamped = true;                      // App. C.1 clamp at 0.5, or none
  bool with_h0 = false;
  std::uint64_t seed = 0;
  std::optional<std::int64_t> k_dim, v_dim;  // ParaM2RNN (then d_h = k_dim·v_dim)
  std::string_view conditioning = {};       // the class gen_problem drew; empty: fields set by hand
  double input_scale = 1.0;
  ValueGrid grid = ValueGrid::none;

  // Takes the weights, input scale and grid of `c`.
  void condition(const ConditioningClass& c) {
    conditioning = c.name;
    weight_std = c.weight_std;
    clamped = c.clamped;
    input_scale = c.input_scale;
    grid = c.grid;
  }

  Cell make_cell() const {
    Cell made = Cell::initialise({.cell = cell, .d_in = d_in, .d_h = d_h,
                                  .max_recurrent_norm = clamped ? std::optional<double>(0.5) : std::nullopt,
                                  .weight_std = weight_std, .gate_mix = gate_mix, .k_dim = k_dim, .v_dim = v_dim},
                                 dtype, seed);
    if (grid != ValueGrid::none)
      for (const auto& [name, value] : made.parameters()) {
        Tensor gridded = Tensor::copy_of(value.view());
        Tensor flat = gridded.reshaped({gridded.numel()});
        for (std::int64_t i = 0; i < flat.numel(); ++i) flat.store({i}, on_grid(flat.load({i}), grid));
        made.set_parameter(name, gridded);
      }
    return made;
  }
  Tensor make_input() const {
    SplitMix64 rng(seed * 7919 + 1);
    Tensor x(dtype, {batch, time, d_in});
    Tensor flat = x.reshaped({x.numel()});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const bool dt = cell == "cfc" && i % d_in == d_in - 1;  // CfC's Δt channel keeps its scale
      flat.store({i}, on_grid((dt ? 1.0 : input_scale) * rng.normal(), grid));
    }
    return x;
  }
  std::optional<Tensor> make_h0(int slots) const {
    if (!with_h0) return std::nullopt;
    SplitMix64 rng(seed * 104729 + 3);
    Tensor h0(dtype, {batch, slots, d_h});
    Tensor flat = h0.reshaped({h0.numel()});
    for (std::int64_t i = 0; i < h0.numel(); ++i) flat.store({i}, rng.normal(0.0, 0.5));
    if (cell == "slstm")  // the normalizer n0 (slot 1) of an sLSTM state is >= 0
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t c = 0; c < d_h; ++c) h0.store({b, 1, c}, std::abs(h0.load({b, 1, c})));
    return h0;
  }
  using Made = MadeProblem;
  Made make() const {
    Cell c = make_cell();
    std::optional<Tensor> h = make_h0(c.slots());
    return {std::move(c), make_input(), std::move(h)};
  }
  std::string describe() const {
    return fmt::format("cell={}{} dtype={} B={} T={} d_in={} d_h={}{} class={} weight_std={} clamped={} h0={} seed={}",
                       cell, gate_mix == "input" ? "" : " gate_mix=" + gate_mix, dtype_name(dtype), batch, time, d_in, d_h,
                       k_dim ? fmt::format(" k_dim={} v_dim={}", *k_dim, v_dim.value_or(0)) : "",
                       conditioning.empty() ? "set" : conditioning,
                       weight_std ? fmt::format("{}", *weight_std) : "init", clamped, with_h0, seed);
  }
};

inline std::ostream& operator<<(std::ostream& os, const GeneratedProblem& p) {
  return os << p.describe();
}

// A failing agreement leaves evidence a user can replay: the case file, the solver's trajectory
// and the oracle's, under $PARARNN_TEST_ARTIFACTS (set by ctest; the system temp folder
// otherwise). Returns the text to append to the failure: the files and the verify command.
inline std::string save_failure_artifacts(const GeneratedProblem& p, const std::string& test,
                                          const NewtonConfig& config) {
  namespace fs = std::filesystem;
  try {
    const char* env = std::getenv("PARARNN_TEST_ARTIFACTS");
    const fs::path dir = env ? fs::path(env) : fs::temp_directory_path() / "pararnn-test-artifacts";
    fs::create_directories(dir);
    const std::string stem = fmt::format("{}-{}{}-{}-{}", test, p.cell,
                                         p.gate_mix == "input" ? "" : "-" + p.gate_mix,
                                         dtype_name(p.dtype), p.seed);
    const Cell cell = p.make_cell();
    Case problem = cell.make_case(p.make_input(), p.make_h0(cell.slots()));
    const fs::path case_path = dir / (stem + ".safetensors");
    write_case(case_path, problem);
    ApplyOptions apply;
    if (problem.h0) apply.h0 = problem.h0->view();
    NewtonConfig quiet = config;
    quiet.residual_fail.reset();  // keep the evidence even when the gate would raise
    write_safetensors(dir / (stem + ".solver.safetensors"), {{"H", newton_apply(cell, problem.x, quiet, apply)}});
    write_safetensors(dir / (stem + ".oracle.safetensors"),
                      {{"H", reference::oracle_sequential(problem, {.certify = false}).H}});
    return fmt::format("\nArtifacts: {} (+ .solver / .oracle trajectories)\nReplay: pararnn verify {}{}",
                       case_path.string(), case_path.string(),
                       config.max_iters ? fmt::format(" --max-iters {}", *config.max_iters) : "");
  } catch (const std::exception& e) {
    return std::string("\n(could not write failure artifacts: ") + e.what() + ")";
  }
}

// The floor a solver in the case's dtype can reach, when that floor is outside τ (the band
// r.atol, r.rtol) of the oracle; nullopt when it is inside (then nothing excuses a Disagree).
// - f32: the same-dtype sequential loop, outside when r.sequential_max_abs > r.atol (hard sLSTM at
//   long T: found on the GPU at T = 1319, the f32 loop 8.8e-4 from the oracle).
// - f16 / bf16: Newton computes in f32 and rounds once, so the f32 loop on the same inputs
//   (widened exactly) rounded once to the storage dtype; a bf16/f16 loop outside τ is no excuse
//   (it rounds every step). Found by RapidCheck: sLSTM f16, saturating, T 1955, |m| up to 307,
//   where the f32 loop's n was 0.041 from the oracle against 0.0395 allowed.
// Both loops run on config's backend.
inline std::optional<Tensor> floor_outside_tau(const GeneratedProblem& p, const AgreementReport& r,
                                               const NewtonConfig& config) {
  const QuietWarnings quiet;
  if (p.dtype == DType::f32) {
    if (!(r.sequential_max_abs > r.atol)) return std::nullopt;
    const GeneratedProblem::Made m = p.make();
    return sequential_apply(m.cell, m.x, config.scan_backend, m.options());
  }
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return std::nullopt;
  const GeneratedProblem::Made m = p.make();
  GeneratedProblem wide = p;
  wide.dtype = DType::f32;
  Cell cell32 = wide.make_cell();
  for (const auto& [name, value] : m.cell.parameters()) cell32.set_parameter(name, Tensor::converted(value.view(), DType::f32));
  const Tensor x32 = Tensor::converted(m.x.view(), DType::f32);
  std::optional<Tensor> h0_32;
  ApplyOptions options;
  if (m.h0) {
    h0_32 = Tensor::converted(m.h0->view(), DType::f32);
    options.h0 = h0_32->view();
  }
  const Tensor rounded = Tensor::converted(sequential_apply(cell32, x32.view(), config.scan_backend, options).view(), p.dtype);
  const Tensor oracle = reference::oracle_sequential(m.cell.make_case(m.x, m.h0), {.certify = false}).H;
  if (compare(rounded.view(), oracle.view(), Tolerance{.atol = r.atol, .rtol = r.rtol}).ok()) return std::nullopt;
  return rounded;
}

// Newton's trajectory (under `config`) within the band (r.atol, r.rtol) of `floor`
// (floor_outside_tau): the claim where no implementation in the case's dtype can reach τ.
inline bool newton_reaches_the_floor(const GeneratedProblem& p, const AgreementReport& r, const NewtonConfig& config,
                                     const Tensor& floor) {
  const GeneratedProblem::Made m = p.make();
  const QuietWarnings quiet;
  const Tensor newton = newton_apply(m.cell, m.x, config, m.options());
  return compare(newton.view(), floor.view(), Tolerance{.atol = r.atol, .rtol = r.rtol}).ok();
}

// A cell label names a cell, or a cell and its ParaCfC gate_mix ("cfc:diag_h").
inline CellOptions label_options(const std::string& label) {
  const auto colon = label.find(':');
  CellOptions options{.cell = label.substr(0, colon)};
  if (colon != std::string::npos) options.gate_mix = label.substr(colon + 1);
  return options;
}

// The cells outside the per-channel family (dense Jacobian chains, M2RNN's matrix state,
// RWKV-7's exact linear scan), one small variant each, as the gradient suites run them.
struct DenseVariant {
  const char* name;
  const char* cell;
  const char* mix;
  std::optional<std::int64_t> n_heads;
  std::int64_t d_h;  // M2RNN: K·V
  std::optional<std::int64_t> k_dim = std::nullopt, v_dim = std::nullopt;
  bool packs = true;  // M2RNN refuses cu_seqlens
};
inline const DenseVariant kDenseVariants[] = {{"hopfield", "hopfield", "diag", std::nullopt, 3},
                                              {"gru_head", "gru", "head", 2, 4},
                                              {"slstm_head", "slstm", "head", 2, 4},
                                              {"slstm_dense", "slstm", "dense", std::nullopt, 3},
                                              {"m2rnn", "m2rnn", "diag", std::nullopt, 6, 2, 3, false},
                                              {"rwkv7", "rwkv7", "diag", 2, 4, std::nullopt, std::nullopt, false}};

// The gradients of one problem on `tested` against `reference` (the same cotangent, a normal
// draw from `seed`), every tensor within `tau`: ∇x, ∇h0 when h0 is given, and every parameter,
// each failure naming the tensor (GPU ≡ CPU of the training claim).
inline void expect_gradients_agree_across_backends(const Cell& cell, const Tensor& x, const ApplyOptions& apply,
                                                   std::uint64_t seed, const Tolerance& tau,
                                                   ScanBackend reference = ScanBackend::cpu,
                                                   ScanBackend tested = ScanBackend::cuda) {
  SplitMix64 rng(seed * 31 + 7);
  Tensor g(cell.dtype(), cell.trajectory_shape(x.size(0), x.size(1)));
  Tensor flat = g.reshaped({g.numel()});
  for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, rng.normal());
  const NewtonConfig a{.scan_backend = reference}, b{.scan_backend = tested};
  const NewtonGradients want = newton_backward(cell, x, newton_forward(cell, x, a, apply), g, a, apply);
  const NewtonGradients got = newton_backward(cell, x, newton_forward(cell, x, b, apply), g, b, apply);
  const ComparisonResult dx = compare(got.x.view(), want.x.view(), tau);
  EXPECT_TRUE(dx.ok()) << "∇x: " << dx.describe();
  ASSERT_EQ(got.h0.has_value(), want.h0.has_value());
  if (want.h0) {
    const ComparisonResult dh0 = compare(got.h0->view(), want.h0->view(), tau);
    EXPECT_TRUE(dh0.ok()) << "∇h0: " << dh0.describe();
  }
  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  for (const auto& [name, expected] : want.parameters) {
    ASSERT_TRUE(got.parameters.contains(name)) << name;
    const ComparisonResult dp = compare(got.parameters.at(name).view(), expected.view(), tau);
    EXPECT_TRUE(dp.ok()) << "∇" << name << ": " << dp.describe();
  }
}

// A variant's CellOptions: `weight_std` for the recurrent parameters (M2RNN: W off the identity)
// and the clamp `cap` where the cell has one (M2RNN and RWKV-7 have none).
inline CellOptions dense_variant_options(const DenseVariant& v, std::int64_t d_in,
                                         std::optional<double> weight_std = std::nullopt,
                                         std::optional<double> cap = 0.5) {
  if (v.k_dim)
    return {.cell = v.cell, .d_in = d_in, .max_recurrent_norm = std::nullopt, .weight_std = weight_std,
            .k_dim = v.k_dim, .v_dim = v.v_dim};
  if (std::string(v.cell) == "rwkv7")
    return {.cell = v.cell, .d_in = d_in, .d_h = v.d_h, .n_heads = v.n_heads, .max_recurrent_norm = std::nullopt};
  return {.cell = v.cell, .mix = v.mix, .d_in = d_in, .d_h = v.d_h, .n_heads = v.n_heads,
          .max_recurrent_norm = cap, .weight_std = weight_std};
}

// Every per-channel cell and variant the properties run over.
#define PARARNN_CELL_LABEL(kind, Math, label, min_chains) label,
inline const std::vector<std::string> kPerChannelCellLabels = {PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_CELL_LABEL)};
#undef PARARNN_CELL_LABEL

// The labels (cell_label) of the registry's specs that `keep` selects: a subset of the one list of
// cells (cells/registry.hpp) by a property of the spec, never by names.
template <class Keep>
std::vector<std::string> labels_where(Keep keep) {
  std::vector<std::string> out;
  for (const CellSpec& spec : cell_specs())
    if (keep(spec)) out.push_back(cell_label(spec));
  return out;
}

// Every cell and variant of the registry ("gru", "gru:head", ..., "cfc:diag_h", ...).
inline const std::vector<std::string> kEveryCellLabels = labels_where([](const CellSpec&) { return true; });

// `max_time` bounds T (the generator still shrinks toward T = 1).
inline rc::Gen<GeneratedProblem> gen_problem(std::int64_t max_time, std::vector<std::string> cells,
                                             std::vector<DType> dtypes) {
  return rc::gen::apply(
      [](std::string label, DType dtype, int batch, int time, int d_in, int d_h, std::size_t conditioning,
         bool with_h0, std::uint64_t seed) {
        GeneratedProblem p;
        const CellOptions variant = label_options(label);
        p.cell = variant.cell;
        p.gate_mix = variant.gate_mix;
        const std::string& cell = p.cell;
        p.dtype = dtype;
        p.batch = batch;
        // f64 cases run the oracle in float128 (about 80x slower than double): shorter T.
        p.time = dtype == DType::f64 ? std::max(1, time / 10) : time;
        // At least the cell's minimum input width (CfC's last input channel is Δt).
        p.d_in = std::max<std::int64_t>(d_in, cell_spec(cell).min_d_in);
        p.d_h = d_h;
        p.with_h0 = with_h0;
        p.seed = seed;
        const ConditioningClass& drawn = kConditioningClasses[conditioning];
        p.condition(drawn.not_for == cell ? kConditioningClasses[0] : drawn);
        return p;
      },
      rc::gen::elementOf(cells), rc::gen::elementOf(dtypes), rc::gen::inRange(1, 4),
      rc::gen::inRange<int>(1, static_cast<int>(max_time) + 1), rc::gen::inRange(1, 9),
      rc::gen::inRange(1, 17), rc::gen::inRange<std::size_t>(0, std::size(kConditioningClasses)),
      rc::gen::arbitrary<bool>(),
      rc::gen::inRange<std::uint64_t>(0, 1u << 30));
}

// Segment lengths of a packed batch (cu_seqlens), summing to N: shrinks toward few, short
// segments; includes length 1.
inline rc::Gen<std::vector<std::int64_t>> gen_segments() {
  return rc::gen::nonEmpty(rc::gen::container<std::vector<std::int64_t>>(
      rc::gen::oneOf(rc::gen::just<std::int64_t>(1), rc::gen::inRange<std::int64_t>(1, 60))));
}

// The cu_seqlens of segments of these lengths: 0 and the running sums, in an integer dtype.
inline Tensor cu_seqlens_of(const std::vector<std::int64_t>& lengths, DType dtype) {
  std::vector<double> values = {0.0};
  for (auto n : lengths) values.push_back(values.back() + static_cast<double>(n));
  return Tensor::from_values(dtype, {static_cast<std::int64_t>(values.size())}, values);
}

}  // namespace pararnn::testing
