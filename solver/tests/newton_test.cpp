// Claims about newton_apply / sequential_apply that need no oracle: exact identities (T = 1 is
// one cell step, K = 0 is the App. A guess, packing restarts the state), the residual gate and
// its warning band, and refused inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "pararnn/cells/registry.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

Tensor random_input(DType dtype, std::int64_t batch, std::int64_t time, std::int64_t d_in,
                    std::uint64_t seed, double scale = 1.0) {
  SplitMix64 rng(seed);
  Tensor x(dtype, {batch, time, d_in});
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal(0.0, scale));
  return x;
}

Cell make_cell(const std::string& name, DType dtype, std::int64_t d_in = 3, std::int64_t d_h = 5,
               std::uint64_t seed = 1) {
  return Cell::initialise({.cell = name, .d_in = d_in, .d_h = d_h}, dtype, seed);
}

// The cell of a registry spec (its mix and ParaCfC gate_mix).
Cell make_cell(CellKind kind, DType dtype, std::int64_t d_in = 3, std::int64_t d_h = 5, std::uint64_t seed = 1) {
  const CellSpec& spec = cell_spec(kind);
  CellOptions options{.cell = std::string(spec.name), .mix = std::string(spec.mix), .d_in = d_in, .d_h = d_h};
  if (!spec.gate_mix.empty()) options.gate_mix = spec.gate_mix;
  return Cell::initialise(options, dtype, seed);
}

// The kinds of the registry's specs (cells/registry.hpp, the one list of cells) that `keep`
// selects: a subset by a property of the spec, never by names.
template <class Keep>
std::vector<CellKind> kinds_where(Keep keep) {
  std::vector<CellKind> out;
  for (const CellSpec& spec : cell_specs())
    if (keep(spec)) out.push_back(spec.kind);
  return out;
}

// A test name of a kind: its label, ':' written '_' ("cfc_diag_h").
std::string label_name(CellKind kind) {
  std::string name = cell_label(cell_spec(kind));
  std::replace(name.begin(), name.end(), ':', '_');
  return name;
}

// The per-channel cells of the registry are the cells of the one per-channel list
// (cells/cell_list.hpp), in its order and under its labels.
TEST(CellList, ThePerChannelSpecsAreTheCellListUnderItsLabels) {
  std::vector<std::string> listed;
#define PARARNN_LISTED_LABEL(kind, Math, label, min_chains) listed.push_back(label);
  PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_LISTED_LABEL)
#undef PARARNN_LISTED_LABEL
  std::vector<std::string> registered;
  for (const CellKind kind : kinds_where([](const CellSpec& s) { return s.jacobian == JacobianClass::per_channel; }))
    registered.push_back(cell_label(cell_spec(kind)));
  EXPECT_EQ(registered, listed);
}

// Every spec has its own label, and the label of a cell's first spec is the cell's name.
TEST(CellList, EverySpecHasItsOwnLabel) {
  std::vector<std::string> labels;
  for (const CellSpec& spec : cell_specs()) {
    labels.push_back(cell_label(spec));
    if (&cell_spec(spec.name) == &spec) EXPECT_EQ(labels.back(), spec.name);
  }
  std::vector<std::string> unique = labels;
  std::sort(unique.begin(), unique.end());
  EXPECT_EQ(std::unique(unique.begin(), unique.end()), unique.end());
}

// Every per-channel cell (the claims below hold for a per-channel Newton solve).
class EveryCell : public ::testing::TestWithParam<CellKind> {};

TEST_P(EveryCell, TimeOneEqualsOneCellStepExactly) {
  const Cell cell = make_cell(GetParam(), DType::f32);
  const Tensor x = random_input(DType::f32, 2, 1, cell.d_in(), 3);
  const Tensor H = newton_apply(cell, x);
  const Tensor H_seq = sequential_apply(cell, x);
  EXPECT_EQ(H.to_f64_vector(), H_seq.to_f64_vector());
}

TEST_P(EveryCell, ZeroIterationsEqualsTheInitialGuess) {
  const Cell cell = make_cell(GetParam(), DType::f64);
  const Tensor x = random_input(DType::f64, 2, 6, cell.d_in(), 4);
  if (cell.spec().picard) {
    // sLSTM with P = 0: the zero-hidden guess is the sequential loop of the cell with R = 0.
    Cell no_recurrence = cell;
    no_recurrence.set_parameter("R", Tensor(DType::f64, {4, cell.d_h()}));
    const Tensor H = newton_apply(cell, x, {.max_iters = 0, .residual_fail = std::nullopt, .picard_iters = 0});
    EXPECT_EQ(H.to_f64_vector(), sequential_apply(no_recurrence, x).to_f64_vector());
    return;
  }
  // App. A: H_t = f(0, x_t) for t > 0 (h0 at t = 0): a sequential run of length 1 per step.
  const Tensor H = newton_apply(cell, x, {.max_iters = 0, .residual_fail = std::nullopt});
  for (std::int64_t t = 0; t < 6; ++t) {
    const Tensor step = sequential_apply(cell, Tensor::copy_of(x.view().slice(1, t, t + 1)));
    const Tensor got = Tensor::copy_of(H.view().slice(1, t, t + 1));
    EXPECT_EQ(got.to_f64_vector(), step.to_f64_vector()) << "t=" << t;
  }
}

TEST_P(EveryCell, PackedSegmentsRestartFromTheirInitialState) {
  const Cell cell = make_cell(GetParam(), DType::f64);
  const Tensor x = random_input(DType::f64, 1, 9, cell.d_in(), 5);
  Tensor cu = Tensor::from_values(DType::i32, {3}, std::vector<double>{0, 4, 9});
  const Tensor packed = sequential_apply(cell, x, {.cu_seqlens = cu.view()});
  const Tensor second = sequential_apply(cell, Tensor::copy_of(x.view().slice(1, 4, 9)));
  EXPECT_EQ(Tensor::copy_of(packed.view().slice(1, 4, 9)).to_f64_vector(), second.to_f64_vector());
}

TEST_P(EveryCell, StridedInputEqualsContiguousCopyBitwise) {
  const Cell cell = make_cell(GetParam(), DType::f32);
  const Tensor base = random_input(DType::f32, 3, 40, cell.d_in(), 6);
  const TensorView every_other = base.view().slice(1, 0, 40, 2);
  const Tensor copy = Tensor::copy_of(every_other);
  EXPECT_EQ(newton_apply(cell, every_other).to_f64_vector(), newton_apply(cell, copy).to_f64_vector());
}

INSTANTIATE_TEST_SUITE_P(Cells, EveryCell,
                         ::testing::ValuesIn(kinds_where([](const CellSpec& s) {
                           return s.jacobian == JacobianClass::per_channel;
                         })),
                         [](const auto& info) { return label_name(info.param); });

TEST(ResidualGate, NanInputRaisesDivergenceWithDocumentedFields) {
  const Cell cell = make_cell("gru", DType::f32);
  Tensor x = random_input(DType::f32, 1, 8, cell.d_in(), 7);
  x.store({0, 3, 1}, std::nan(""));
  try {
    (void)newton_apply(cell, x);
    FAIL() << "NaN input must raise NewtonDivergenceError";
  } catch (const NewtonDivergenceError& e) {
    const std::string what = e.what();
    for (const char* field : {"max|F(H)|=", "iters=", "residual_fail=", "T=8", "cell=gru", "history="})
      EXPECT_NE(what.find(field), std::string::npos) << field << " missing from: " << what;
  }
}

TEST(ResidualGate, NanInputMessageNamesTheTensorAndIndex) {
  const Cell cell = make_cell("lstm", DType::f32);
  Tensor x = random_input(DType::f32, 2, 8, cell.d_in(), 8);
  x.store({1, 5, 2}, std::nan(""));
  try {
    (void)newton_apply(cell, x);
    FAIL() << "NaN input must raise NewtonDivergenceError";
  } catch (const NewtonDivergenceError& e) {
    EXPECT_NE(std::string(e.what()).find("x holds nan at index (1, 5, 2)"), std::string::npos) << e.what();
  }
}

// RWKV-7's exact scan has no Newton iteration, but its result passes the same finiteness gate:
// NaN in x or in W_x, and an overflow from finite input, raise instead of returning NaN or Inf.
TEST(ResidualGate, Rwkv7NonFiniteStateRaisesOnEveryPath) {
  const Cell base = Cell::initialise({.cell = "rwkv7", .d_in = 4, .d_h = 4, .n_heads = 1}, DType::f32, 1);
  const Tensor clean = random_input(DType::f32, 1, 8, 4, 9);
  for (ScanBackend backend : {ScanBackend::auto_select, ScanBackend::eager}) {
    Tensor nan_x = Tensor::copy_of(clean);
    nan_x.store({0, 3, 1}, std::nan(""));
    EXPECT_THROW((void)newton_apply(base, nan_x, {.scan_backend = backend}), NewtonDivergenceError);
    Cell nan_w = base;
    Tensor w = Tensor::copy_of(base.parameter("W_x.weight"));
    w.store({2, 1}, std::nan(""));
    nan_w.set_parameter("W_x.weight", w);
    try {
      (void)newton_apply(nan_w, clean, {.scan_backend = backend});
      ADD_FAILURE() << "NaN in W_x must raise";
    } catch (const NewtonDivergenceError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 'W_x.weight' holds nan"), std::string::npos) << e.what();
    }
    Tensor huge = Tensor::copy_of(clean);
    Tensor flat = huge.reshaped({huge.numel()});
    for (std::int64_t i = 0; i < huge.numel(); ++i) flat.store({i}, 3e38);
    EXPECT_THROW((void)newton_apply(base, huge, {.scan_backend = backend}), NewtonDivergenceError);
  }
}

TEST(ResidualGate, DivergentConfigurationRaises) {
  // Over-relaxed updates (omega = 4) on an LSTM with saturated gates leave the basin.
  Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4, .max_recurrent_norm = std::nullopt,
                                .weight_std = 3.0}, DType::f32, 2);
  const Tensor x = random_input(DType::f32, 2, 64, 3, 8, 3.0);
  EXPECT_THROW((void)newton_apply(cell, x, {.max_iters = 4, .omega = 4.0, .residual_atol = std::nullopt}),
               NewtonDivergenceError);
}

TEST(ResidualGate, WarningFiresInItsBandAndNotBelow) {
  const Cell cell = make_cell("gru", DType::f32, 3, 8);
  const Tensor x = random_input(DType::f32, 2, 50, 3, 9, 2.0);
  {
    WarningCapture capture;
    NewtonStats stats;
    (void)newton_apply(cell, x, {.max_iters = 0, .residual_atol = std::nullopt}, {}, &stats);
    ASSERT_GT(stats.max_residual, kResidualWarn) << "the App. A guess should be far from H*";
    ASSERT_LE(stats.max_residual, 1.0);
    EXPECT_TRUE(capture.contains("newton_residual_high"));
  }
  {
    WarningCapture capture;
    NewtonStats stats;
    (void)newton_apply(cell, x, {}, {}, &stats);
    EXPECT_LE(stats.max_residual, kResidualWarn);
    EXPECT_FALSE(capture.contains("newton_residual_high"));
  }
}

TEST(KSchedule, AdaptiveKIsAMinimumAndStopsOnTheResidual) {
  const Cell cell = make_cell("gru", DType::f32, 3, 8);
  const Tensor x = random_input(DType::f32, 2, 200, 3, 10);
  NewtonStats stats;
  (void)newton_apply(cell, x, {}, {}, &stats);
  EXPECT_EQ(stats.k.source, KSource::table);
  EXPECT_GE(stats.updates, stats.k.k);
  EXPECT_TRUE(stats.converged);
  EXPECT_LT(stats.residual_history.back(), default_residual_atol(DType::f32));
}

// The early stop as behaviour (issue 58 item 8; CONTRACT §4): on cases whose residual history is
// known (the CPU backend's max|F| at every evaluation of a run that never stops early), a solve with
// the dtype's default residual_atol stops at the first evaluation whose max|F| is below it and not
// before: the fixed-K loop there without an update (the seed's early stop), the adaptive loop at the
// first such evaluation at or after its minimum K, with one more update. Its history is the
// known one's prefix bit for bit. ω = 1/2 roughly halves max|F| per update near the fixed point, so
// every history passes within a factor of about 2 above the threshold before it crosses: a threshold
// looser by a few times or more stops earlier, and a stricter one later.
class EarlyStop : public ::testing::TestWithParam<DType> {};

TEST_P(EarlyStop, StopsAtTheFirstEvaluationBelowTheDefaultResidualAtolAndNotBefore) {
  const DType dtype = GetParam();
  const double atol = default_residual_atol(dtype);
  constexpr std::int64_t kCap = 64;   // evaluations of the known history: enough for f64's 1e-12 at ω = 1/2
  constexpr double kOmega = 0.5;
  int cases = 0, crossed_after_an_update = 0;
  // Every per-channel cell whose guess is App. A's (sLSTM's Picard guess has no such history).
  for (const CellKind kind : kinds_where([](const CellSpec& s) { return s.jacobian == JacobianClass::per_channel && !s.picard; })) {
    const std::string name = cell_label(cell_spec(kind));
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      const Cell cell = make_cell(kind, dtype, 3, 8, seed);
      const Tensor x = random_input(dtype, 2, 48, 3, 100 + seed);
      const std::string at = fmt::format("{} {} seed {} (default residual_atol {:g})", name, dtype_name(dtype), seed, atol);
      NewtonStats known, fixed, adaptive;
      (void)newton_apply(cell, x, {.max_iters = kCap, .omega = kOmega, .scan_backend = ScanBackend::cpu,
                                   .residual_atol = std::nullopt, .residual_fail = std::nullopt}, {}, &known);
      const std::vector<double>& h = known.residual_history;
      ASSERT_EQ(static_cast<std::int64_t>(h.size()), kCap) << at;
      const auto first_below = [&](std::size_t from) {
        std::size_t i = from;
        while (i < h.size() && !(h[i] < atol)) ++i;
        return i;
      };
      // Fixed K with the default threshold: the seed's early stop.
      (void)newton_apply(cell, x, {.max_iters = kCap, .omega = kOmega, .scan_backend = ScanBackend::cpu,
                                   .residual_fail = std::nullopt}, {}, &fixed);
      const std::size_t stop = first_below(0);
      ASSERT_LT(stop, h.size()) << at << ": the known history never goes below the threshold";
      EXPECT_EQ(fixed.residual_history, std::vector<double>(h.begin(), h.begin() + stop + 1)) << at;
      EXPECT_EQ(fixed.iters, static_cast<std::int64_t>(stop) + 1) << at;
      EXPECT_EQ(fixed.updates, static_cast<std::int64_t>(stop)) << at << ": no update at the stopping evaluation";
      EXPECT_TRUE(fixed.converged) << at;
      // Adaptive (max_iters unset, the default): the table's K is a minimum; one more update.
      (void)newton_apply(cell, x, {.omega = kOmega, .scan_backend = ScanBackend::cpu, .residual_fail = std::nullopt,
                                   .k_max = kCap}, {}, &adaptive);
      ASSERT_TRUE(adaptive.k.adaptive) << at;
      const std::size_t minimum = static_cast<std::size_t>(std::max<std::int64_t>(adaptive.k.k, 1)) - 1;
      const std::size_t adaptive_stop = first_below(minimum);
      ASSERT_LT(adaptive_stop, h.size()) << at;
      EXPECT_EQ(adaptive.residual_history, std::vector<double>(h.begin(), h.begin() + adaptive_stop + 1)) << at;
      EXPECT_EQ(adaptive.updates, static_cast<std::int64_t>(adaptive_stop) + 1) << at << ": one more update";
      EXPECT_TRUE(adaptive.converged) << at;
      EXPECT_EQ(adaptive.fallback_tiles, 0) << at;
      ++cases;
      if (stop > 0 && adaptive_stop > minimum) ++crossed_after_an_update;
    }
  }
  // The claim can fail only where the threshold is crossed after some evaluations above it.
  std::printf("EarlyStop %s: %d cases, %d cross the threshold after evaluations above it\n",
              std::string(dtype_name(dtype)).c_str(), cases, crossed_after_an_update);
  EXPECT_EQ(crossed_after_an_update, cases);
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, EarlyStop, ::testing::Values(DType::f64, DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

TEST(KSchedule, NewtonItersByTIsALeftStepTable) {
  const CellSpec& gru = cell_spec("gru");
  const NewtonConfig config{.newton_iters_by_t = {{64, 2}, {1024, 3}, {4096, 4}}};
  const std::pair<std::int64_t, std::int64_t> expected[] = {{1, 2}, {64, 2}, {512, 2}, {1024, 3}, {8000, 4}};
  for (auto [t, k] : expected) EXPECT_EQ(resolve_newton_iters(config, gru, DType::f32, t).k, k) << t;
  EXPECT_EQ(resolve_newton_iters({}, gru, DType::f64, 10).k, gru.library_newton_iters + 2);
}

TEST(RefusedInput, BadConfigurationsNameTheirField) {
  const Cell cell = make_cell("gru", DType::f32);
  const Tensor x = random_input(DType::f32, 1, 4, cell.d_in(), 11);
  auto refused_field = [&](const NewtonConfig& config) -> std::string {
    try {
      (void)newton_apply(cell, x, config);
    } catch (const ContractViolation& e) {
      return e.argument();
    }
    return "(accepted)";
  };
  EXPECT_EQ(refused_field({.max_iters = -1}), "max_iters");
  EXPECT_EQ(refused_field({.omega = 0.0}), "omega");
  EXPECT_EQ(refused_field({.residual_fail = -1.0}), "residual_fail");
  EXPECT_EQ(refused_field({.picard_iters = 2}), "picard_iters");  // GRU has no Picard passes
  EXPECT_EQ(refused_field({.max_iters = 3, .newton_iters_by_t = {{1, 2}}}), "newton_iters_by_t");
  EXPECT_EQ(refused_field({.newton_iters_by_t = {{0, 2}}}), "newton_iters_by_t");
}

TEST(RefusedInput, ShapesDtypesAndTimeAreChecked) {
  const Cell cell = make_cell("lstm", DType::f32);
  auto refused_argument = [&](const TensorView& x, ApplyOptions options = {}) -> std::string {
    try {
      (void)newton_apply(cell, x, {}, options);
    } catch (const ContractViolation& e) {
      return e.argument();
    }
    return "(accepted)";
  };
  EXPECT_EQ(refused_argument(random_input(DType::f32, 1, 0, cell.d_in(), 1)), "x");
  EXPECT_EQ(refused_argument(random_input(DType::f64, 1, 4, cell.d_in(), 1)), "x");
  EXPECT_EQ(refused_argument(random_input(DType::f32, 1, 4, cell.d_in() + 1, 1)), "x");
  const Tensor x = random_input(DType::f32, 2, 4, cell.d_in(), 1);
  const Tensor bad_h0(DType::f32, {2, cell.d_h()});  // LSTM needs (B, 2, d_h)
  EXPECT_EQ(refused_argument(x, {.h0 = bad_h0.view()}), "h0");
  const Tensor cu = Tensor::from_values(DType::i64, {2}, std::vector<double>{0, 4});
  EXPECT_EQ(refused_argument(x, {.cu_seqlens = cu.view()}), "x");  // batch must be 1
}

TEST(RefusedInput, CuSeqlensRulesAreNamed) {
  auto rule = [](DType dtype, Shape shape, std::vector<double> values, std::int64_t n) -> std::string {
    try {
      (void)validate_cu_seqlens(Tensor::from_values(dtype, shape, values), n);
    } catch (const ContractViolation& e) {
      return e.rule();
    }
    return "(accepted)";
  };
  EXPECT_EQ(rule(DType::i32, {3}, {0, 2, 5}, 5), "(accepted)");
  EXPECT_NE(rule(DType::i32, {3}, {1, 2, 5}, 5).find("start at 0"), std::string::npos);
  EXPECT_NE(rule(DType::i32, {3}, {0, 2, 4}, 5).find("end at"), std::string::npos);
  EXPECT_NE(rule(DType::i64, {3}, {0, 2, 2}, 2).find("strictly increasing"), std::string::npos);
  EXPECT_NE(rule(DType::f32, {3}, {0, 2, 5}, 5).find("int32 or int64"), std::string::npos);
  EXPECT_NE(rule(DType::i32, {1, 3}, {0, 2, 5}, 5).find("1-D"), std::string::npos);
  EXPECT_NE(rule(DType::i32, {1}, {0}, 5).find("at least 2"), std::string::npos);
}

// ApplyOptions::parameters are read by the CUDA per-channel family only: the CPU backend refuses
// them, naming its row, instead of solving with the Cell's values beside them.
TEST(RefusedInput, ParameterViewsAreRefusedWhereTheyAreNotRead) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 8, 3});
  const auto& [name, value] = *cell.parameters().begin();
  try {
    (void)newton_apply(cell, x, {.scan_backend = ScanBackend::cpu}, {.parameters = {{name, value.view()}}});
    ADD_FAILURE() << "the CPU backend accepted parameter views";
  } catch (const UnsupportedPath& e) {
    EXPECT_NE(std::string(e.what()).find("cpu per_channel"), std::string::npos) << e.what();
  }
}

// ApplyOptions::sync_free (no wait, no read back, the gate as NaN) is a mode of the CUDA
// per-channel family: every other row refuses it by name before any work, instead of solving
// with waits and a raising gate the caller asked not to have.
TEST(RefusedInput, SyncFreeIsRefusedWhereItIsNotHonoured) {
  const Cell gru = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 8, 3});
  const ApplyOptions sync_free{.sync_free = true};
  const auto refused = [&](auto call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " accepted sync_free";
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), "sync_free") << what << ": " << e.what();
    }
  };
  refused([&] { (void)newton_apply(gru, x, {.scan_backend = ScanBackend::cpu}, sync_free); }, "newton_apply on the CPU");
  refused([&] { (void)newton_apply(gru, x, {}, sync_free); }, "newton_apply of host x (auto: the CPU)");
  refused([&] { (void)newton_forward(gru, x, {.max_iters = 2}, sync_free); }, "newton_forward on the CPU");
}

TEST(RefusedInput, CuSeqlensAreReadAsExactIntegers) {
  // Regression (fuzz_cu_seqlens): entries were read through double, so int64 entries above 2^53
  // lost their low bits (a valid list refused, or an invalid one accepted) and an entry near 2^63
  // overflowed the conversion back to int64 (undefined behaviour, reported by UBSan).
  const std::int64_t big = (std::int64_t{1} << 53) + 1;
  Tensor cu(DType::i64, {3});
  cu.data_as<std::int64_t>()[0] = 0;
  cu.data_as<std::int64_t>()[1] = big - 1;
  cu.data_as<std::int64_t>()[2] = big;
  EXPECT_EQ(validate_cu_seqlens(cu.view(), big), (std::vector<std::int64_t>{0, big - 1}));
  cu.data_as<std::int64_t>()[2] = std::numeric_limits<std::int64_t>::max();
  try {
    (void)validate_cu_seqlens(cu.view(), 5);
    ADD_FAILURE() << "accepted cu_seqlens ending at INT64_MAX for N = 5";
  } catch (const ContractViolation& e) {
    EXPECT_NE(std::string(e.rule()).find("end at"), std::string::npos) << e.rule();
    EXPECT_NE(std::string(e.what()).find(std::to_string(std::numeric_limits<std::int64_t>::max())), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pararnn

namespace pararnn {
namespace {

TEST(SlstmPicard, ZeroPicardPassesOnAWideLongCellDivergesAndTheGateRaises) {
  // Without Picard passes the zero-hidden guess is far from H* on a wide cell at long T; three
  // fixed Newton steps leave the basin and the residual gate must raise, with the sLSTM hint.
  const Cell cell = Cell::initialise({.cell = "slstm", .d_in = 8, .d_h = 128},
                                     DType::f32, 3);
  const Tensor x = random_input(DType::f32, 2, 4096, 8, 4, 2.0);
  try {
    (void)newton_apply(cell, x, {.max_iters = 3, .picard_iters = 0});
    FAIL() << "P = 0 should diverge here";
  } catch (const NewtonDivergenceError& e) {
    EXPECT_NE(std::string(e.what()).find("picard_iters"), std::string::npos) << e.what();
  }
  NewtonStats stats;
  (void)newton_apply(cell, x, {.max_iters = 3}, {}, &stats);  // auto P = 5 at T = 4096
  EXPECT_EQ(stats.picard_iters, 5);
  EXPECT_LE(stats.max_residual, kResidualWarn);
}

}  // namespace
}  // namespace pararnn

namespace pararnn {
namespace {

TEST(SlstmPicard, AdaptRetriesWithMorePassesWhereThreeDiverge) {
  // The kstar seed that diverged with P = 3 at T = 2048 (docs/kstar.md): one fixed Newton step
  // from the P = 3 guess ends far above picard_retry_atol; adapt redoes the solve with P = 5.
  const std::uint64_t seed = 2048002;
  const Cell cell = Cell::initialise({.cell = "slstm", .d_in = 16, .d_h = 64}, DType::f32, seed);
  const Tensor x = generated_case_input(DType::f32, 1, 2048, 16, seed);
  const NewtonConfig fixed{.max_iters = 1, .residual_atol = std::nullopt, .residual_fail = std::nullopt};
  NewtonConfig off = fixed;
  off.picard_adapt = false;
  NewtonStats plain, adapted;
  (void)newton_apply(cell, x, off, {}, &plain);
  (void)newton_apply(cell, x, fixed, {}, &adapted);
  EXPECT_EQ(plain.picard_iters, 3);
  EXPECT_EQ(plain.picard_retries, 0);
  EXPECT_GT(plain.max_residual, *fixed.picard_retry_atol);
  EXPECT_EQ(adapted.picard_iters, 5);
  EXPECT_EQ(adapted.picard_retries, 1);
  EXPECT_LT(adapted.max_residual, plain.max_residual);
}

TEST(SlstmPicard, AdaptAndBacktrackOptionsAreRefusedWhereTheyDoNotApply) {
  const Cell gru = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 4}, DType::f32, 1);
  const Tensor x = generated_case_input(DType::f32, 1, 8, 2, 1);
  const auto refusal = [&](const NewtonConfig& config) -> std::string {
    try {
      (void)newton_apply(gru, x, config);
    } catch (const ContractViolation& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(refusal({.picard_adapt = true}).find("picard_adapt"), std::string::npos);
  EXPECT_NE(refusal({.picard_retry_atol = -1.0}).find("picard_retry_atol"), std::string::npos);
  EXPECT_NE(refusal({.newton_backtrack = true}).find("newton_backtrack"), std::string::npos);
  EXPECT_EQ(refusal({.picard_adapt = false}), "(accepted)");
}

}  // namespace
}  // namespace pararnn
