// Claims about ParaRWKV7 (the linear (G, U) cell) on the backend under test (backend.hpp:
// rwkv7_tests_host on the CPU, rwkv7_tests_cuda with the (G, U) scan on the GPU): its exact scan
// agrees with the independent oracle within τ for every dtype (a RapidCheck property over B, T up
// to 3000, heads and head width, with and without h0); the scan equals the factorized step loop
// (on the host) within the contract's `linear_scan` band; the stats of a solve without Newton;
// the refused paths (packing, windows; on cuda heads wider than d = 64 and the step loop), while
// newton_forward trains on both backends. Host only: the time-parallel, chunked form; the
// production G equals the oracle's AD Jacobian; the construction rules and the case-file names.
// On the GPU: GPU ≡ CPU within τ (the scan, the step loop and the gradients).
// Planted errors (a perturbed trajectory element, a shifted gate bias) are caught, so the checks
// can fail. Every case names its seed; tolerances come from the contract table.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/scan.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

using cells::Rwkv7Math;
using testing::kTestBackend;

// The stats' name of the (G, U) scan on the backend under test.
const SolveBackend kScanBackend = PARARNN_TEST_ON_CUDA ? SolveBackend::rwkv7_scan_cuda : SolveBackend::rwkv7_scan;
const std::string kScanBackendName(solve_backend_name(kScanBackend));

constexpr std::int64_t kCertifyBudget = 20'000;

struct Rwkv7Case {
  DType dtype = DType::f32;
  std::int64_t batch = 2, time = 50, d_in = 5, n_heads = 2, d_head = 4;
  bool with_h0 = false;
  std::uint64_t seed = 1;

  std::int64_t d_h() const { return n_heads * d_head; }
  Cell make_cell() const {
    return Cell::initialise({.cell = "rwkv7", .d_in = d_in, .d_h = d_h(), .n_heads = n_heads}, dtype, seed);
  }
  Tensor make_input() const { return generated_case_input(dtype, batch, time, d_in, seed); }
  std::optional<Tensor> make_h0() const {
    if (!with_h0) return std::nullopt;
    SplitMix64 rng(seed * 104729 + 3);
    Tensor h0(dtype, {batch, n_heads, d_head, d_head});
    Tensor flat = h0.reshaped({h0.numel()});
    for (std::int64_t i = 0; i < h0.numel(); ++i) flat.store({i}, rng.normal(0.0, 0.5));
    return h0;
  }
  testing::MadeProblem make() const { return {make_cell(), make_input(), make_h0()}; }

  std::string describe() const {
    return fmt::format("cell=rwkv7 dtype={} B={} T={} d_in={} n_heads={} d_head={} h0={} seed={}",
                       dtype_name(dtype), batch, time, d_in, n_heads, d_head, with_h0, seed);
  }
};

inline std::ostream& operator<<(std::ostream& os, const Rwkv7Case& c) { return os << c.describe(); }

// Shapes shrink toward B = 1, T = 1, one head of width 1; f64 cases (float128 oracle) are
// ten times shorter.
rc::Gen<Rwkv7Case> gen_rwkv7_case(std::int64_t max_time) {
  return rc::gen::apply(
      [](DType dtype, int batch, int time, int d_in, int heads, int d_head, bool with_h0, std::uint64_t seed) {
        return Rwkv7Case{.dtype = dtype, .batch = batch,
                         .time = dtype == DType::f64 ? std::max(1, time / 10) : time, .d_in = d_in,
                         .n_heads = heads, .d_head = d_head, .with_h0 = with_h0, .seed = seed};
      },
      rc::gen::elementOf(std::vector<DType>{DType::f64, DType::f32, DType::f16, DType::bf16}),
      rc::gen::inRange(1, 4), rc::gen::inRange<int>(1, static_cast<int>(max_time) + 1),
      rc::gen::inRange(1, 9), rc::gen::inRange(1, 4), rc::gen::inRange(1, 7), rc::gen::arbitrary<bool>(),
      rc::gen::inRange<std::uint64_t>(0, 1u << 30));
}

AgreementReport verify(const Rwkv7Case& c, NewtonConfig config = {.scan_backend = kTestBackend}) {
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input();
  const auto h0 = c.make_h0();
  VerifyOptions options{.config = config, .seed = c.seed, .certify_budget = kCertifyBudget};
  if (h0) options.h0 = h0->view();
  options.repro_command = "rwkv7_tests: " + c.describe();
  return verify_agreement(cell, x, options);
}

RC_GTEST_PROP(Rwkv7, ScanAgreesWithOracleWithinTau, ()) {
  QuietWarnings quiet;
  const Rwkv7Case c = *gen_rwkv7_case(3000);
  RC_TAG(std::string(dtype_name(c.dtype)));
  RC_CLASSIFY(c.time > 1000, "T > 1000");
  RC_CLASSIFY(c.n_heads > 1, "several heads");
  const AgreementReport r = verify(c);
  // An f32 case whose same-dtype sequential loop is itself outside τ of the oracle is beyond any
  // f32 implementation (found on the GPU: B 3, T 1811, three heads of width 1, the f32 loop
  // 6.3e-3 from the oracle). There the claim is the judge's ill-conditioned verdict, Inconclusive
  // with the scan within the quality bound of that floor; Disagree still fails, and so does an
  // Inconclusive for any other reason (docs/choices.md, the sequential-floor rule).
  const bool judged_against_the_floor = c.dtype == DType::f32 && r.verdict == Verdict::inconclusive &&
                                        r.ill_conditioned && r.sequential_max_abs > r.atol;
  RC_CLASSIFY(judged_against_the_floor, "ill-conditioned in f32: judged against the sequential floor");
  if (r.verdict != Verdict::agree && !judged_against_the_floor) RC_FAIL(r.failure_message());
  RC_ASSERT(r.backend == kScanBackendName);
  RC_ASSERT(r.newton_iters == 0);
}

std::vector<Rwkv7Case> scan_cases(DType dtype) {
  return {{.dtype = dtype, .batch = 3, .time = 3000, .d_in = 6, .n_heads = 2, .d_head = 4, .seed = 41},
          {.dtype = dtype, .batch = 1, .time = 1, .d_in = 3, .n_heads = 1, .d_head = 1, .with_h0 = true, .seed = 42},
          {.dtype = dtype, .batch = 2, .time = 777, .d_in = 8, .n_heads = 3, .d_head = 6, .with_h0 = true, .seed = 43},
          {.dtype = dtype, .batch = 1, .time = 2048, .d_in = 4, .n_heads = 1, .d_head = 16, .seed = 44}};
}

// newton_apply (the (G, U) scan, on the backend under test) against sequential_apply (the
// factorized step loop, on the host); f32 and f64 store the compute type, so both sides round
// alike and differ by arithmetic order only.
TEST(Rwkv7, ScanEqualsSequentialUnrollWithinTheLinearScanBand) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tolerance band = tolerance_for({.dtype = dtype, .metric = Metric::linear_scan, .cell = "rwkv7"});
    double worst = 0.0;
    for (const Rwkv7Case& c : scan_cases(dtype)) {
      SCOPED_TRACE(c.describe());
      const auto made = c.make();
      const auto& [cell, x, h0] = made;
      ApplyOptions apply = made.options();
      Tensor scanned = newton_apply(cell, x, {.scan_backend = kTestBackend}, apply);
      const Tensor stepped = sequential_apply(cell, x, apply);
      const ComparisonResult cmp = compare(scanned, stepped, band);
      EXPECT_EQ(cmp.mismatches, 0) << cmp.describe();
      worst = std::max(worst, cmp.max_abs);
      // The check can fail: one element moved by twice the band is found, at its index.
      const Shape index = {c.batch - 1, c.time / 2, c.n_heads - 1, 0, c.d_head - 1};
      scanned.view().store(index, scanned.view().load(index) + 2.0 * band.atol);
      const ComparisonResult planted = compare(scanned, stepped, band);
      EXPECT_EQ(planted.mismatches, 1) << planted.describe();
      EXPECT_EQ(planted.first_mismatches.front().index, index);
    }
    fmt::print("rwkv7 scan vs sequential, {}: max abs {:.3e} (band {:g})\n", dtype_name(dtype), worst, band.atol);
  }
}

// The time-parallel form S_t = S0·Gpref_t + Upref_t: the same (G, U) elements scanned in chunks
// (aggregates by compose, carries, re-runs) equal the step loop of the cell within the band.
PARARNN_HOST_ONLY_TEST(Rwkv7, ChunkedScanOfGUElementsEqualsTheStepLoop) {
  const Rwkv7Case c{.dtype = DType::f32, .batch = 1, .time = 1000, .d_in = 5, .n_heads = 1, .d_head = 5, .seed = 51};
  const Tolerance band = tolerance_for({.dtype = c.dtype, .metric = Metric::linear_scan, .cell = "rwkv7"});
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input();
  const Tensor stepped = sequential_apply(cell, x);
  const int d = static_cast<int>(c.d_head);
  const std::int64_t dd = c.d_head * c.d_head;
  // W_x x_t + b in f32, then the elements (J = Gᵀ, rows of U) of every step; S_0 at t = 0.
  const Tensor& w = cell.parameter("W_x.weight");
  const Tensor& bias = cell.parameter("W_x.bias");
  std::vector<float> J(static_cast<std::size_t>(c.time * dd)), S(static_cast<std::size_t>(c.time * dd));
  std::vector<float> raw(static_cast<std::size_t>(6 * d)), g(static_cast<std::size_t>(Rwkv7Math::gates_size(d)));
  const std::vector<float> zeros(static_cast<std::size_t>(dd), 0.0f);
  for (std::int64_t t = 0; t < c.time; ++t) {
    for (std::int64_t row = 0; row < 6 * d; ++row) {
      float acc = static_cast<float>(bias.load({row}));
      for (std::int64_t k = 0; k < c.d_in; ++k)
        acc += static_cast<float>(w.load({row, k})) * static_cast<float>(x.load({0, t, k}));
      raw[static_cast<std::size_t>(row)] = acc;
    }
    Rwkv7Math::gates(d, raw.data(), d, g.data());
    if (t == 0) {
      Rwkv7Math::step(d, g.data(), zeros.data(), S.data());
      continue;
    }
    Rwkv7Math::transition(d, g.data(), J.data() + t * dd);
    for (int i = 0; i < d; ++i) Rwkv7Math::drive_row(d, g.data(), i, S.data() + t * dd + i * d);
  }
  for (std::int64_t chunk : {std::int64_t{7}, std::int64_t{64}, std::int64_t{333}}) {
    std::vector<float> scanned = S;
    for (int i = 0; i < d; ++i)
      scan_dense<float>(J.data(), scanned.data() + i * d,
                        DenseScanShape{.time = c.time, .n = c.d_head, .chunk_len = chunk, .r_stride = dd});
    const Tensor chunked = Tensor::from_values(DType::f32, stepped.shape(),
                                               std::vector<double>(scanned.begin(), scanned.end()));
    const ComparisonResult cmp = compare(chunked, stepped, band);
    EXPECT_EQ(cmp.mismatches, 0) << "chunk_len " << chunk << ": " << cmp.describe();
  }
}

// The production G (Rwkv7Math::transition) against the oracle's Jacobian by automatic
// differentiation: ∂S′[i, j]/∂S[i′, l] = δ_ii′ G[l, j], per head, zero across heads.
PARARNN_HOST_ONLY_TEST(Rwkv7, TransitionEqualsOracleAutomaticDifferentiation) {
  const Rwkv7Case c{.dtype = DType::f32, .batch = 1, .time = 3, .d_in = 4, .n_heads = 2, .d_head = 3, .seed = 61};
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input();
  const Case problem = cell.make_case(x);
  const Tolerance tol = tolerance_for({.dtype = c.dtype, .metric = Metric::jacobian, .cell = "rwkv7"});
  const int d = static_cast<int>(c.d_head);
  const std::int64_t H = c.n_heads, dd = c.d_head * c.d_head, n = H * dd;
  SplitMix64 rng(c.seed);
  for (std::int64_t t = 0; t < c.time; ++t) {
    std::vector<double> S(static_cast<std::size_t>(n));
    for (double& v : S) v = rng.normal(0.0, 0.5);
    const reference::OracleStep oracle = reference::oracle_step_with_jacobian(problem, 0, t, S);
    std::vector<double> raw(static_cast<std::size_t>(6 * c.d_h()));
    for (std::int64_t row = 0; row < 6 * c.d_h(); ++row) {
      double acc = cell.parameter("W_x.bias").load({row});
      for (std::int64_t k = 0; k < c.d_in; ++k) acc += cell.parameter("W_x.weight").load({row, k}) * x.load({0, t, k});
      raw[static_cast<std::size_t>(row)] = acc;
    }
    for (std::int64_t hd = 0; hd < H; ++hd) {
      std::vector<double> g(static_cast<std::size_t>(Rwkv7Math::gates_size(d))), J(static_cast<std::size_t>(dd));
      std::vector<double> S_new(static_cast<std::size_t>(dd));
      Rwkv7Math::gates(d, raw.data() + hd * d, c.d_h(), g.data());
      Rwkv7Math::transition(d, g.data(), J.data());
      Rwkv7Math::step(d, g.data(), S.data() + hd * dd, S_new.data());
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) {
          const std::int64_t out = hd * dd + i * d + j;
          EXPECT_NEAR(S_new[static_cast<std::size_t>(i * d + j)], oracle.h_new[static_cast<std::size_t>(out)], tol.atol);
          for (std::int64_t in = 0; in < n; ++in) {
            const std::int64_t in_head = in / dd, in_row = (in % dd) / d, l = in % d;
            const double expected = oracle.jacobian[static_cast<std::size_t>(out * n + in)];
            const double ours = in_head == hd && in_row == i ? J[static_cast<std::size_t>(j * d + l)] : 0.0;
            EXPECT_NEAR(ours, expected, tol.atol) << "t=" << t << " out=" << out << " in=" << in;
          }
        }
    }
  }
}

// A wrong gate (κ's bias of one channel shifted) gives a trajectory the oracle rejects.
TEST(Rwkv7, OracleCatchesAShiftedGate) {
  QuietWarnings quiet;
  const Rwkv7Case c{.dtype = DType::f32, .batch = 2, .time = 200, .d_in = 5, .n_heads = 2, .d_head = 4, .seed = 71};
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input();
  Cell wrong = cell;
  Tensor bias = Tensor::copy_of(cell.parameter("W_x.bias"));
  const std::int64_t kappa_channel = 2 * c.d_h() + 1;
  bias.store({kappa_channel}, bias.load({kappa_channel}) + 0.05);
  wrong.set_parameter("W_x.bias", bias);
  const Tensor H = newton_apply(wrong, x, {.scan_backend = kTestBackend});
  const AgreementReport r = compare_trajectory(cell.make_case(x), H, {.certify_budget = kCertifyBudget});
  EXPECT_EQ(r.verdict, Verdict::disagree) << r.summary();
}

PARARNN_HOST_ONLY_TEST(Rwkv7, ConstructionRules) {
  const auto refused = [](const CellOptions& options, const std::string& argument) {
    try {
      (void)Cell::initialise(options, DType::f32, 1);
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      return;
    }
    ADD_FAILURE() << "not refused: " << argument;
  };
  refused({.cell = "rwkv7", .d_in = 3, .d_h = 10, .n_heads = 3}, "n_heads");  // 3 does not divide 10
  refused({.cell = "rwkv7", .d_in = 3, .d_h = 8, .n_heads = 0}, "n_heads");
  refused({.cell = "rwkv7", .mix = "head", .d_in = 3, .d_h = 8}, "mix");
  refused({.cell = "rwkv7", .d_in = 3, .d_h = 8, .beta = 1.0}, "beta");
  refused({.cell = "rwkv7", .d_in = 0, .d_h = 8}, "input_size");
  try {
    (void)Cell::initialise({.cell = "rwkv7", .d_in = 3, .d_h = 10, .n_heads = 4}, DType::f32, 1);
    ADD_FAILURE() << "n_heads=4, d_h=10 not refused";
  } catch (const ContractViolation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("divide hidden_size=10"), std::string::npos) << what;
    EXPECT_NE(what.find("4"), std::string::npos) << what;
  }
  // Kaiming uniform ±1/√d_in weight, zero bias, n_heads 1 by default; nothing else saved.
  const Cell cell = Cell::initialise({.cell = "rwkv7", .d_in = 9, .d_h = 6}, DType::f64, 3);
  EXPECT_EQ(cell.n_heads(), 1);
  EXPECT_EQ(cell.parameters().size(), 2u);
  const Tensor& w = cell.parameter("W_x.weight");
  ASSERT_EQ(w.shape(), (Shape{36, 9}));
  double largest = 0.0;
  for (double v : w.to_f64_vector()) largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, 1.0 / 3.0);
  EXPECT_GT(largest, 0.0);
  for (double v : cell.parameter("W_x.bias").to_f64_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(cell.trajectory_shape(2, 5), (Shape{2, 5, 1, 6, 6}));
  // A case whose W_x is not (6·d_h, d_in), or whose n_heads does not divide d_h, is refused.
  Case problem = Cell::initialise({.cell = "rwkv7", .d_in = 3, .d_h = 4, .n_heads = 2}, DType::f32, 1)
                     .make_case(Tensor(DType::f32, {1, 2, 3}));
  Case bad_width = problem;
  bad_width.parameters["W_x.weight"] = Tensor(DType::f32, {25, 3});
  EXPECT_THROW((void)Cell::from_case(bad_width), ContractViolation);
  EXPECT_THROW((void)reference::oracle_sequential(bad_width), CaseFileError);
  Case bad_bias = problem;
  bad_bias.parameters["W_x.bias"] = Tensor(DType::f32, {23});
  EXPECT_THROW((void)Cell::from_case(bad_bias), ContractViolation);
  Case bad_heads = problem;
  bad_heads.metadata["n_heads"] = "3";
  EXPECT_THROW((void)Cell::from_case(bad_heads), ContractViolation);
  EXPECT_THROW((void)reference::oracle_sequential(bad_heads), ContractViolation);
  // h0 must be the matrix state (B, n_heads, d, d), not (B, d_h).
  const Cell two_heads = Cell::from_case(problem);
  const Tensor x(DType::f32, {1, 2, 3});
  const Tensor flat_h0(DType::f32, {1, 4});
  EXPECT_THROW((void)newton_apply(two_heads, x, {}, {.h0 = flat_h0.view()}), ContractViolation);
  Case flat_h0_case = problem;
  flat_h0_case.h0 = flat_h0;
  EXPECT_THROW((void)reference::oracle_sequential(flat_h0_case), ContractViolation);
}

PARARNN_HOST_ONLY_TEST(Rwkv7, CaseFileRoundTripKeepsThePythonNames) {
  const Rwkv7Case c{.dtype = DType::bf16, .batch = 2, .time = 9, .d_in = 3, .n_heads = 2, .d_head = 3,
                    .with_h0 = true, .seed = 81};
  const Cell cell = c.make_cell();
  const Case problem = cell.make_case(c.make_input(), c.make_h0());
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / fmt::format("rwkv7-roundtrip-{}.safetensors", ::getpid());
  write_case(path, problem);
  const Case back = read_case(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.cell, "rwkv7");
  EXPECT_EQ(back.metadata.at("mix"), "rwkv7");
  EXPECT_EQ(back.metadata.at("n_heads"), "2");
  EXPECT_EQ(back.metadata.at("python_class"), "ParaRWKV7");
  EXPECT_EQ(back.metadata.at("hidden_size"), "6");
  EXPECT_FALSE(back.metadata.contains("max_recurrent_norm"));  // no recurrent parameter
  ASSERT_EQ(back.parameters.size(), 2u);
  EXPECT_EQ(back.parameter("W_x.weight").shape(), (Shape{36, 3}));
  EXPECT_EQ(back.parameter("W_x.bias").shape(), (Shape{36}));
  const Cell restored = Cell::from_case(back);
  EXPECT_EQ(restored.kind(), CellKind::rwkv7);
  EXPECT_EQ(restored.n_heads(), 2);
  EXPECT_EQ(restored.head_dim(), 3);
  for (const char* name : {"W_x.weight", "W_x.bias"})
    EXPECT_EQ(std::memcmp(restored.parameter(name).data(), cell.parameter(name).data(),
                          cell.parameter(name).nbytes()), 0) << name;
  const Tensor a = newton_apply(cell, problem.x, {}, {.h0 = problem.h0->view()});
  const Tensor b = newton_apply(restored, back.x, {}, {.h0 = back.h0->view()});
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

TEST(Rwkv7, StatsOfASolveWithoutNewton) {
  const Rwkv7Case c{.dtype = DType::f32, .batch = 2, .time = 64, .d_in = 4, .n_heads = 2, .d_head = 3, .seed = 91};
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input();
  NewtonStats stats;
  const Tensor scanned = newton_apply(cell, x, {.scan_backend = kTestBackend}, {}, &stats);
  EXPECT_EQ(stats.iters, 0);
  EXPECT_EQ(stats.updates, 0);
  EXPECT_EQ(stats.max_residual, 0.0);
  EXPECT_EQ(stats.scan_backend, kScanBackend);
  EXPECT_EQ(stats.k.k, 0);
  EXPECT_TRUE(stats.residual_history.empty());
  NewtonStats eager;
  const Tensor stepped = newton_apply(cell, x, {.scan_backend = ScanBackend::eager}, {}, &eager);
  EXPECT_EQ(eager.scan_backend, SolveBackend::rwkv7_sequential);
  EXPECT_EQ(eager.iters, 0);
  const Tensor loop = sequential_apply(cell, x);
  EXPECT_EQ(std::memcmp(stepped.data(), loop.data(), loop.nbytes()), 0);  // eager = the step loop
  // max_iters and newton_iters_by_t do not apply: K resolves to 0 for every dtype and T.
  const Tensor fixed = newton_apply(cell, x, {.max_iters = 5, .scan_backend = kTestBackend});
  EXPECT_EQ(std::memcmp(fixed.data(), scanned.data(), scanned.nbytes()), 0);
  const CellSpec& spec = cell_spec("rwkv7");
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f64, 1 << 17).k, 0);
  EXPECT_EQ(resolve_newton_iters({.newton_iters_by_t = {{1, 4}}}, spec, DType::f32, 100).k, 0);
  // The residual of the scan's trajectory is rounding; a planted error shows in it.
  const Tolerance band = tolerance_for({.dtype = c.dtype, .metric = Metric::linear_scan, .cell = "rwkv7"});
  EXPECT_LE(max_residual(cell, x, scanned), band.atol);
  Tensor planted = Tensor::copy_of(scanned);
  planted.view().store({1, 10, 1, 2, 0}, planted.view().load({1, 10, 1, 2, 0}) + 10.0 * band.atol);
  EXPECT_GT(max_residual(cell, x, planted), band.atol);
}

TEST(Rwkv7, RefusesPackingAndWindowsButTrains) {
  QuietWarnings quiet;
  const Cell cell = Cell::initialise({.cell = "rwkv7", .d_in = 3, .d_h = 4, .n_heads = 2}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 6, 3});
  Tensor cu(DType::i64, {3});
  cu.store({0}, 0.0);
  cu.store({1}, 2.0);
  cu.store({2}, 6.0);
  EXPECT_THROW((void)newton_apply(cell, x, {.scan_backend = kTestBackend}, {.cu_seqlens = cu.view()}),
               ContractViolation);
  EXPECT_THROW((void)sequential_apply(cell, x, {.cu_seqlens = cu.view()}), ContractViolation);
  EXPECT_THROW((void)newton_apply(cell, x, {.scan_backend = kTestBackend, .window_len = 2}), ContractViolation);
  EXPECT_THROW((void)newton_apply(cell, x, {.scan_backend = kTestBackend, .picard_iters = 1}), ContractViolation);
  // Gradients exist on both backends (the forward and its stats here; the values in
  // gradient_tests and, on cuda, GpuGradientsEqualCpuWithinTau).
  const NewtonForward forward = newton_forward(cell, x, {.scan_backend = kTestBackend});
  EXPECT_EQ(forward.stats.scan_backend, kScanBackend);
  EXPECT_GT(forward.saved_bytes(), 0u);
  EXPECT_THROW((void)dispatch_cell(cell.kind(), []<class CellMath>() { return 0; }), UnsupportedPath);
  EXPECT_EQ(reference::oracle_gradients(cell.make_case(x)).tensors.count("W_x.weight"), 1u);
  Case packed = cell.make_case(x);
  packed.cu_seqlens = cu;
  EXPECT_THROW((void)reference::oracle_sequential(packed), ContractViolation);
  try {
    (void)newton_apply(cell, x, {.window_len = 2});
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "window_len");
    EXPECT_NE(std::string(e.what()).find("ParaRWKV7"), std::string::npos) << e.what();
  }
}

#if PARARNN_TEST_ON_CUDA
// The (G, U) scan and the step loop on the GPU against the CPU's, within the cuda trajectory τ
// (exact scans that associate differently; loops with different libm), for every dtype and a
// head as wide as the dense scan takes.
TEST(Rwkv7, GpuScanAndStepLoopEqualTheCpusWithinTau) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    std::vector<Rwkv7Case> cases = scan_cases(dtype);
    cases.push_back({.dtype = dtype, .batch = 1, .time = 200, .d_in = 4, .n_heads = 1, .d_head = 64,
                     .with_h0 = true, .seed = 45});
    for (const Rwkv7Case& c : cases) {
      SCOPED_TRACE(c.describe());
      const auto made = c.make();
      const auto& [cell, x, h0] = made;
      ApplyOptions apply = made.options();
      const Tolerance tau = tolerance_for({.dtype = dtype, .metric = Metric::trajectory, .cell = "rwkv7",
                                           .backend = "cuda"});
      const Tensor cpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cpu}, apply);
      const Tensor gpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cuda}, apply);
      const ComparisonResult cmp = compare(gpu, cpu, tau);
      EXPECT_TRUE(cmp.ok()) << "scan: " << cmp.describe();
      // The step loop (every row rounded to storage every step) on both backends.
      const ComparisonResult loop = compare(sequential_apply(cell, x, ScanBackend::cuda, apply),
                                            sequential_apply(cell, x, ScanBackend::cpu, apply), tau);
      EXPECT_TRUE(loop.ok()) << "step loop: " << loop.describe();
    }
  }
}

// The gradients on the GPU (cuda/exact_linear.cpp's adjoint) against the CPU's exact adjoint,
// every gradient tensor within the cuda coupled-gradient τ, for every dtype of the scan cases
// and a head of d = 64, with and without h0.
TEST(Rwkv7, GpuGradientsEqualCpuWithinTau) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    std::vector<Rwkv7Case> cases = scan_cases(dtype);
    cases.push_back({.dtype = dtype, .batch = 1, .time = 200, .d_in = 4, .n_heads = 1, .d_head = 64,
                     .with_h0 = true, .seed = 46});
    for (const Rwkv7Case& c : cases) {
      SCOPED_TRACE(c.describe());
      const auto made = c.make();
      const auto& [cell, x, h0] = made;
      ApplyOptions apply = made.options();
      testing::expect_gradients_agree_across_backends(
          cell, x, apply, c.seed,
          tolerance_for({.dtype = dtype, .metric = Metric::gradient_coupled, .cell = "rwkv7", .backend = "cuda"}));
    }
  }
}

// On cuda: heads wider than the dense scan's d = 64 are refused naming d and the limit, by the
// scan and by the step loop.
TEST(Rwkv7, CudaRefusesWideHeads) {
  QuietWarnings quiet;
  const Cell wide = Cell::initialise({.cell = "rwkv7", .d_in = 3, .d_h = 130, .n_heads = 2}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 3, 3});
  try {
    (void)newton_apply(wide, x, {.scan_backend = ScanBackend::cuda});
    ADD_FAILURE() << "a head of d = 65 was accepted on cuda";
  } catch (const UnsupportedPath& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("d = 65"), std::string::npos) << what;
    EXPECT_NE(what.find("d <= 64"), std::string::npos) << what;
  }
  EXPECT_THROW((void)sequential_apply(wide, x, ScanBackend::cuda), UnsupportedPath);
}
#endif

}  // namespace
}  // namespace pararnn
