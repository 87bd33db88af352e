// Claims about ParaM2RNN (matrix state H (K, V), Jacobian as a map) on the backend under test
// (backend.hpp: m2rnn_tests_host, and m2rnn_tests_cuda where claims that involve no backend skip):
//  - Newton agrees with the independent oracle within τ for f64, f32, f16 and bf16 (RapidCheck:
//    random B, T up to 3000, K, V, W = I or W = I + N(0, σ²) up to hard σ, with and without h0),
//    with the default adaptive K, and at the fixed scheduled K for W near the identity;
//  - the production Jacobian map, materialised column by column on unit vectors, equals the
//    oracle's AD Jacobian, and Jᵀ is its adjoint (its columns are the AD Jacobian's rows);
//  - T = 1 is one step and K = 0 is the App. A guess, bitwise;
//  - the K ramp is exactly min(2 + ⌈0.75·log2 T⌉, 12) (CONTRACT §4), +2 for f64;
//  - stats report the true iteration count (not pararnn-torch's `iters = max_iters` quirk);
//  - construction and case-file errors, refusals, and that the harness catches planted errors;
//  - on cuda: the GPU solve and sequential loop equal the CPU's within the cuda τ.
// Tolerances come from the contract table; every random case names its seed.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
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
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

using testing::GeneratedProblem;
using testing::kTestBackend;
using cells::M2rnnMath;

constexpr std::int64_t kCertifyBudget = 20'000;

GeneratedProblem m2rnn_problem(DType dtype, std::int64_t batch, std::int64_t time, std::int64_t d_in,
                               std::int64_t k_dim, std::int64_t v_dim, std::optional<double> w_std,
                               bool with_h0, std::uint64_t seed) {
  return GeneratedProblem{.cell = "m2rnn", .dtype = dtype, .batch = batch, .time = time, .d_in = d_in,
                          .d_h = k_dim * v_dim, .weight_std = w_std, .clamped = false,
                          .with_h0 = with_h0, .seed = seed, .k_dim = k_dim, .v_dim = v_dim};
}

// W classes: 0 the library's identity, 1 near identity (σ 0.1), 2 hard (σ 0.5).
rc::Gen<GeneratedProblem> gen_m2rnn(std::int64_t max_time) {
  return rc::gen::apply(
      [](DType dtype, int batch, int time, int d_in, int k_dim, int v_dim, int w_class, bool with_h0,
         std::uint64_t seed) {
        const std::optional<double> w_std =
            w_class == 0 ? std::nullopt : std::optional<double>(w_class == 1 ? 0.1 : 0.5);
        // f64 cases run the oracle in float128: shorter T.
        const int t = dtype == DType::f64 ? std::max(1, time / 10) : time;
        return m2rnn_problem(dtype, batch, t, d_in, k_dim, v_dim, w_std, with_h0, seed);
      },
      rc::gen::elementOf(std::vector<DType>{DType::f64, DType::f32, DType::f16, DType::bf16}),
      rc::gen::inRange(1, 4), rc::gen::inRange<int>(1, static_cast<int>(max_time) + 1),
      rc::gen::inRange(1, 9), rc::gen::inRange(1, 5), rc::gen::inRange(1, 6), rc::gen::inRange(0, 3),
      rc::gen::arbitrary<bool>(), rc::gen::inRange<std::uint64_t>(0, 1u << 30));
}

AgreementReport verify(const GeneratedProblem& p, NewtonConfig config) {
  config.scan_backend = kTestBackend;
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  VerifyOptions options{.config = config, .seed = p.seed, .certify_budget = kCertifyBudget};
  if (h0) options.h0 = h0->view();
  options.repro_command = "m2rnn property: " + p.describe();
  return verify_agreement(cell, x, options);
}

RC_GTEST_PROP(M2rnn, NewtonAgreesWithOracleWithinTau, ()) {
  const QuietWarnings quiet;  // hard W may reach k_max and fall back (a warning, not an error)
  const GeneratedProblem p = *gen_m2rnn(3000);
  RC_TAG(std::string(dtype_name(p.dtype)));
  RC_CLASSIFY(p.weight_std.has_value() && *p.weight_std > 0.2, "hard W");
  RC_CLASSIFY(p.time > 1000, "T > 1000");
  const AgreementReport r = verify(p, NewtonConfig{});
  RC_ASSERT(r.backend == std::string(testing::kTestBackendName));
  // Hard W (σ 0.5) can make the recurrence chaotic: then the f32 sequential loop itself lies
  // outside τ of the oracle (1.05e-4 at T = 485 on one found case) and no f32 solver in
  // that dtype can be held to τ; there the claim is agreement with the oracle or, failing that,
  // Newton reaching the sequential answer within τ. (A bf16 sequential loop outside τ because it
  // rounds every step is no excuse: Newton, rounded once, still has to agree.)
  const bool floor_outside_tau = r.sequential_max_abs > r.atol;
  RC_CLASSIFY(floor_outside_tau, "same-dtype sequential outside tau");
  const bool agrees = r.verdict == Verdict::agree;
  const bool at_the_floor = floor_outside_tau && p.dtype == DType::f32 && r.vs_sequential_max_abs <= r.atol;
  RC_CLASSIFY(!agrees && at_the_floor, "judged against the sequential floor");
  if (!agrees && !at_the_floor)
    RC_FAIL(r.failure_message() + testing::save_failure_artifacts(p, "m2rnn-agreement", NewtonConfig{}));
}

// The fixed K of the ramp (no early stop, no fallback) at the library's W = I: the schedule
// itself, not the adaptive loop behind it, reaches τ. (Off the identity it need not: with
// W = I + N(0, 0.1²) a fixed K = 8 leaves an error above τ at T = 168, and docs/kstar.md
// measures K* above the ramp for σ = 0.3; the default adaptive path covers those.)
RC_GTEST_PROP(M2rnn, FixedScheduledKAgreesAtLibraryInit, ()) {
  GeneratedProblem p = *gen_m2rnn(3000);
  p.weight_std.reset();
  const KResolution k = resolve_newton_iters({}, cell_spec("m2rnn"), p.dtype, p.time);
  const NewtonConfig fixed{.max_iters = k.k, .residual_atol = std::nullopt};
  const AgreementReport r = verify(p, fixed);
  if (r.verdict != Verdict::agree)
    RC_FAIL(r.failure_message() + testing::save_failure_artifacts(p, "m2rnn-fixed-k", fixed));
  RC_ASSERT(r.newton_iters == k.k);
}

// Gate inputs raw = W_x x_t + b in double from the stored parameters.
std::vector<double> gate_inputs(const Cell& cell, const Tensor& x, std::int64_t t) {
  const Tensor& w = cell.parameter("W_x.weight");
  const Tensor& bias = cell.parameter("W_x.bias");
  std::vector<double> raw(static_cast<std::size_t>(w.size(0)));
  for (std::int64_t i = 0; i < w.size(0); ++i) {
    double acc = bias.load({i});
    for (std::int64_t k = 0; k < w.size(1); ++k) acc += w.load({i, k}) * x.load({0, t, k});
    raw[static_cast<std::size_t>(i)] = acc;
  }
  return raw;
}

PARARNN_HOST_ONLY_TEST(M2rnn, JacobianMapEqualsOracleAutomaticDifferentiationAndTransposeIsItsAdjoint) {
  for (const GeneratedProblem& p : {m2rnn_problem(DType::f32, 1, 3, 5, 3, 4, 0.5, false, 41),
                                    m2rnn_problem(DType::f32, 1, 3, 2, 1, 5, std::nullopt, false, 42),
                                    m2rnn_problem(DType::f64, 1, 3, 4, 4, 2, 0.3, false, 43),
                                    m2rnn_problem(DType::bf16, 1, 3, 3, 2, 3, 0.5, false, 44)}) {
    SCOPED_TRACE(p.describe());
    const Cell cell = p.make_cell();
    const Tensor x = p.make_input();
    const Case problem = cell.make_case(x);
    const int K = static_cast<int>(*p.k_dim), V = static_cast<int>(*p.v_dim), n = K * V;
    const Tolerance tol = tolerance_for({.dtype = p.dtype, .metric = Metric::jacobian, .cell = "m2rnn"});
    const std::vector<double> W = cell.parameter("W").to_f64_vector();
    SplitMix64 rng(p.seed);
    for (std::int64_t t = 0; t < p.time; ++t) {
      std::vector<double> h(static_cast<std::size_t>(n)), h_new(h.size()), gain(h.size());
      for (double& v : h) v = rng.normal(0.0, 0.7);
      const reference::OracleStep oracle = reference::oracle_step_with_jacobian(problem, 0, t, h);
      const std::vector<double> raw = gate_inputs(cell, x, t);
      M2rnnMath::step(K, V, W.data(), raw.data(), h.data(), h_new.data(), gain.data());
      const double f = M2rnnMath::forget(K, V, raw.data());
      const auto near = [&](double actual, double expected) {
        return std::abs(actual - expected) <= tol.atol + tol.rtol * std::abs(expected);
      };
      for (int i = 0; i < n; ++i)
        EXPECT_TRUE(near(h_new[static_cast<std::size_t>(i)], oracle.h_new[static_cast<std::size_t>(i)])) << "h'[" << i << "]";
      std::vector<double> unit(static_cast<std::size_t>(n)), column(unit.size()), row(unit.size()),
          gain_mu(static_cast<std::size_t>(V));
      for (int k = 0; k < n; ++k) {
        std::fill(unit.begin(), unit.end(), 0.0);
        unit[static_cast<std::size_t>(k)] = 1.0;
        M2rnnMath::apply_jacobian(K, V, W.data(), f, gain.data(), unit.data(), column.data());
        M2rnnMath::apply_jacobian_transpose(K, V, W.data(), f, gain.data(), unit.data(), row.data(), gain_mu.data());
        for (int i = 0; i < n; ++i) {
          const double expected_ik = oracle.jacobian[static_cast<std::size_t>(i * n + k)];  // ∂h'_i/∂h_k
          const double expected_ki = oracle.jacobian[static_cast<std::size_t>(k * n + i)];
          EXPECT_TRUE(near(column[static_cast<std::size_t>(i)], expected_ik))
              << "t=" << t << " J[" << i << "][" << k << "]: map " << column[static_cast<std::size_t>(i)]
              << " vs AD " << expected_ik;
          EXPECT_TRUE(near(row[static_cast<std::size_t>(i)], expected_ki))
              << "t=" << t << " Jᵀ[" << i << "][" << k << "]: map " << row[static_cast<std::size_t>(i)]
              << " vs AD " << expected_ki;
        }
      }
    }
  }
}

TEST(M2rnn, OneStepIsExactlyTheSequentialStep) {
  for (const GeneratedProblem& p : {m2rnn_problem(DType::f32, 3, 1, 4, 3, 4, std::nullopt, true, 51),
                                    m2rnn_problem(DType::bf16, 2, 1, 3, 2, 5, 0.5, true, 52),
                                    m2rnn_problem(DType::f64, 2, 1, 3, 4, 2, 0.3, false, 53)}) {
    SCOPED_TRACE(p.describe());
    const auto made = p.make();
    const auto& [cell, x, h0] = made;
    ApplyOptions apply = made.options();
    const Tensor newton = newton_apply(cell, x, {.scan_backend = kTestBackend}, apply);
    const Tensor sequential = sequential_apply(cell, x, kTestBackend, apply);
    ASSERT_EQ(newton.shape(), (Shape{p.batch, 1, *p.k_dim, *p.v_dim}));
    ASSERT_EQ(newton.shape(), sequential.shape());
    EXPECT_EQ(std::memcmp(newton.data(), sequential.data(), newton.nbytes()), 0);
  }
}

// A tensor of the same shape whose values are multiples of 1/16 (x: integers in [−2, 2]), so
// that W_x x + b is exact in f32 in any summation order: the GEMM of a T-step solve and of a
// one-step solve then give the same bits.
Tensor dyadic(const Tensor& t, double scale, double limit) {
  Tensor out = Tensor::copy_of(t.view());
  Tensor flat = out.reshaped({out.numel()});
  for (std::int64_t i = 0; i < out.numel(); ++i)
    flat.store({i}, std::clamp(std::round(flat.load({i}) * scale), -limit, limit) / scale);
  return out;
}

// K = 0 returns the App. A guess: step t from zeros (h0 at t = 0), i.e. T independent one-step
// solves, bitwise (exact input affine, see `dyadic`).
TEST(M2rnn, ZeroIterationsIsTheInitialGuess) {
  for (const GeneratedProblem& p : {m2rnn_problem(DType::f32, 2, 17, 4, 3, 2, 0.5, true, 61),
                                    m2rnn_problem(DType::f16, 1, 30, 3, 2, 3, std::nullopt, false, 62)}) {
    SCOPED_TRACE(p.describe());
    Cell cell = p.make_cell();
    cell.set_parameter("W_x.weight", dyadic(cell.parameter("W_x.weight"), 16.0, 16.0));
    const Tensor x = dyadic(p.make_input(), 1.0, 2.0);
    const auto h0 = p.make_h0(cell.slots());
    ApplyOptions apply;
    if (h0) apply.h0 = h0->view();
    NewtonStats stats;
    const QuietWarnings quiet;  // the guess's residual is high on purpose
    const Tensor guess = newton_apply(
        cell, x, {.max_iters = 0, .scan_backend = kTestBackend, .residual_fail = std::nullopt}, apply, &stats);
    EXPECT_EQ(stats.iters, 0);
    for (std::int64_t t = 0; t < p.time; ++t) {
      const Tensor x_t = Tensor::copy_of(x.view().slice(1, t, t + 1));
      const Tensor step = newton_apply(cell, x_t, {.scan_backend = kTestBackend}, t == 0 ? apply : ApplyOptions{});
      const Tensor guess_t = Tensor::copy_of(guess.view().slice(1, t, t + 1));
      EXPECT_EQ(std::memcmp(guess_t.data(), step.data(), step.nbytes()), 0) << "t=" << t;
    }
  }
}

PARARNN_HOST_ONLY_TEST(M2rnn, KRampIsTheContractFormula) {
  const CellSpec& spec = cell_spec("m2rnn");
  const auto formula = [](std::int64_t time) {
    const auto ramp = 2 + static_cast<std::int64_t>(std::ceil(0.75 * std::log2(static_cast<long double>(time))));
    return std::min<std::int64_t>(ramp, 12);
  };
  for (std::int64_t time = 1; time <= 20'000; ++time)
    ASSERT_EQ(resolve_newton_iters({}, spec, DType::f32, time).k, formula(time)) << "T=" << time;
  for (int e = 0; e <= 24; ++e) {
    const std::int64_t time = std::int64_t{1} << e;
    for (const std::int64_t t : {time - 1, time, time + 1})
      if (t >= 1) EXPECT_EQ(resolve_newton_iters({}, spec, DType::bf16, t).k, formula(t)) << "T=" << t;
  }
  // The spec's computed values (§2.6) and the cap.
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 1).k, 2);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 2).k, 3);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 16).k, 5);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 256).k, 8);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 1024).k, 10);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 4096).k, 11);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, 8192).k, 12);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f32, std::int64_t{1} << 20).k, 12);
  EXPECT_EQ(resolve_newton_iters({}, spec, DType::f64, 1).k, 4);  // f64: the table plus 2
  EXPECT_TRUE(resolve_newton_iters({}, spec, DType::f32, 100).adaptive);
  EXPECT_EQ(resolve_newton_iters({.max_iters = 5}, spec, DType::f32, 1 << 20).k, 5);
  EXPECT_EQ(resolve_newton_iters({.newton_iters_by_t = {{1, 4}}}, spec, DType::f32, 1 << 20).k, 4);
}

// NewtonStats::iters counts residual evaluations, also on an early stop (pararnn-torch's M2RNN
// path reports iters = max_iters there; we report what ran).
TEST(M2rnn, StatsReportTheTrueIterationCount) {
  const GeneratedProblem p = m2rnn_problem(DType::f32, 2, 64, 4, 2, 3, std::nullopt, false, 71);
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  NewtonStats stats;
  (void)newton_apply(cell, x, {.max_iters = 12, .scan_backend = kTestBackend}, {}, &stats);  // seed's fixed K, early stop
  EXPECT_TRUE(stats.converged);
  EXPECT_LT(stats.iters, 12);
  EXPECT_EQ(stats.updates, stats.iters - 1);
  EXPECT_EQ(static_cast<std::int64_t>(stats.residual_history.size()), stats.iters);
  (void)newton_apply(cell, x, {.scan_backend = kTestBackend}, {}, &stats);  // adaptive: at least the ramp's K
  EXPECT_GE(stats.iters, resolve_newton_iters({}, cell.spec(), DType::f32, 64).k);
  EXPECT_EQ(stats.fallback_tiles, 0);
  EXPECT_EQ(solve_backend_name(stats.scan_backend), testing::kTestBackendName);
}

PARARNN_HOST_ONLY_TEST(M2rnn, ConstructionAndCaseFileRules) {
  const auto init = [](CellOptions o) { return Cell::initialise(o, DType::f32, 1); };
  EXPECT_THROW((void)init({.cell = "m2rnn", .d_in = 3, .v_dim = 2}), ContractViolation);               // k_dim missing
  EXPECT_THROW((void)init({.cell = "m2rnn", .d_in = 3, .k_dim = 0, .v_dim = 2}), ContractViolation);   // k_dim < 1
  EXPECT_THROW((void)init({.cell = "m2rnn", .d_in = 3, .k_dim = 2, .v_dim = -1}), ContractViolation);  // v_dim < 1
  EXPECT_THROW((void)init({.cell = "m2rnn", .d_in = 3, .d_h = 5, .k_dim = 2, .v_dim = 2}), ContractViolation);
  EXPECT_THROW((void)init({.cell = "gru", .d_in = 3, .d_h = 4, .k_dim = 2}), ContractViolation);
  EXPECT_THROW((void)init({.cell = "m2rnn", .d_in = 0, .k_dim = 2, .v_dim = 2}), ContractViolation);
  try {
    (void)init({.cell = "m2rnn", .d_in = 3, .k_dim = 0, .v_dim = 2});
  } catch (const ContractViolation& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("k_dim"), std::string::npos) << what;
    EXPECT_NE(what.find(">= 1"), std::string::npos) << what;
    EXPECT_NE(what.find("0"), std::string::npos) << what;
  }

  // Initialisation: W = I, W_x.weight xavier_uniform (K+V+1, d_in), bias zeros; d_h = K·V.
  const Cell cell = Cell::initialise({.cell = "m2rnn", .d_in = 6, .k_dim = 3, .v_dim = 4}, DType::f64, 9);
  EXPECT_EQ(cell.d_h(), 12);
  EXPECT_FALSE(cell.max_recurrent_norm().has_value());
  const Tensor& W = cell.parameter("W");
  ASSERT_EQ(W.shape(), (Shape{4, 4}));
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(W.load({i, j}), i == j ? 1.0 : 0.0);
  const Tensor& w = cell.parameter("W_x.weight");
  ASSERT_EQ(w.shape(), (Shape{8, 6}));
  const double bound = std::sqrt(6.0 / (6 + 8));
  double largest = 0.0;
  for (double v : w.to_f64_vector()) largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, bound / 2);  // uniform over the whole range, not kaiming's ±1/√d_in
  for (double v : cell.parameter("W_x.bias").to_f64_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(cell.trajectory_shape(2, 5), (Shape{2, 5, 3, 4}));

  // Case metadata: the Python names, no mix, no cap, no hidden_size; round trip.
  const Case problem = cell.make_case(Tensor(DType::f64, {1, 2, 6}));
  EXPECT_EQ(problem.metadata.at("cell"), "m2rnn");
  EXPECT_EQ(problem.metadata.at("python_class"), "ParaM2RNN");
  EXPECT_EQ(problem.metadata.at("k_dim"), "3");
  EXPECT_EQ(problem.metadata.at("v_dim"), "4");
  EXPECT_FALSE(problem.metadata.contains("max_recurrent_norm"));
  EXPECT_FALSE(problem.metadata.contains("mix"));
  const Cell back = Cell::from_case(problem);
  EXPECT_EQ(back.kind(), CellKind::m2rnn);
  EXPECT_EQ(back.k_dim(), 3);
  EXPECT_EQ(back.v_dim(), 4);

  // Broken case files: clear errors from the cell and from the oracle, never a crash.
  Case no_k = problem;
  no_k.metadata.erase("k_dim");
  EXPECT_THROW((void)Cell::from_case(no_k), ContractViolation);
  EXPECT_THROW((void)reference::oracle_sequential(no_k), ContractViolation);
  Case bad_w = problem;
  bad_w.parameters["W"] = Tensor(DType::f64, {3, 3});
  EXPECT_THROW((void)Cell::from_case(bad_w), ContractViolation);
  EXPECT_THROW((void)reference::oracle_sequential(bad_w), CaseFileError);
  Case bad_rows = problem;
  bad_rows.metadata["v_dim"] = "5";  // W_x.weight has K + 4 + 1 rows, W is (4, 4)
  EXPECT_THROW((void)Cell::from_case(bad_rows), ContractViolation);
  EXPECT_THROW((void)reference::oracle_sequential(bad_rows), CaseFileError);
  Case extra = problem;
  extra.parameters["a_z"] = Tensor(DType::f64, {12});
  EXPECT_THROW((void)Cell::from_case(extra), ContractViolation);
  Case missing = problem;
  missing.parameters.erase("W");
  EXPECT_THROW((void)Cell::from_case(missing), CaseFileError);
  EXPECT_THROW((void)reference::oracle_sequential(missing), CaseFileError);
}

TEST(M2rnn, RefusedInputsAndPaths) {
  const QuietWarnings quiet;
  const GeneratedProblem p = m2rnn_problem(DType::f32, 1, 10, 3, 2, 2, std::nullopt, false, 81);
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  Tensor cu(DType::i64, {3});
  cu.store({1}, 4.0);
  cu.store({2}, 10.0);
  EXPECT_THROW((void)newton_apply(cell, x, {}, {.cu_seqlens = cu.view()}), ContractViolation);
  EXPECT_THROW((void)sequential_apply(cell, x, {.cu_seqlens = cu.view()}), ContractViolation);
  EXPECT_THROW((void)newton_apply(cell, x, {.window_len = 4}), ContractViolation);
  EXPECT_THROW((void)newton_apply(cell, x, {.picard_iters = 1}), UnsupportedPath);
  EXPECT_NO_THROW((void)newton_apply(cell, x, {.picard_iters = 0}));
  // The CUDA walk keeps W and two states in one block's shared memory: a 256 x 256 state does not
  // fit and is refused naming the sizes (without a GPU the backend itself is refused).
  const Cell wide = Cell::initialise({.cell = "m2rnn", .d_in = 3, .k_dim = 256, .v_dim = 256}, DType::f32, 82);
  const Tensor x_wide(DType::f32, {1, 2, 3});
  try {
    (void)newton_apply(wide, x_wide, {.scan_backend = ScanBackend::cuda});
    ADD_FAILURE() << "a 256 x 256 M2RNN state was not refused on cuda";
  } catch (const UnsupportedPath& e) {
    if (PARARNN_TEST_ON_CUDA) EXPECT_NE(std::string(e.what()).find("256 x 256"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)newton_forward(cell, x));  // gradients on both backends (GpuGradientsEqualCpuWithinTau)
  EXPECT_EQ(reference::oracle_gradients(cell.make_case(x)).tensors.count("W"), 1u);
  EXPECT_THROW((void)dispatch_cell(cell.kind(), []<class CellMath>() { return 0; }), UnsupportedPath);
  EXPECT_THROW((void)dispatch_dense_cell(cell.kind(), []<class DenseMath>() { return 0; }), UnsupportedPath);
  // h0 as (B, K, V), (B, K·V) or (B, 1, K·V); anything else is refused.
  const Tensor h0_matrix(DType::f32, {1, 2, 2});
  EXPECT_NO_THROW((void)newton_apply(cell, x, {}, {.h0 = h0_matrix.view()}));
  const Tensor h0_wrong(DType::f32, {1, 2, 3});
  EXPECT_THROW((void)newton_apply(cell, x, {}, {.h0 = h0_wrong.view()}), ContractViolation);
}

// The harness can fail: a planted error in a trajectory is reported at its index, and a solver
// stopped too early (fixed K = 1 at long T on hard W) is reported as Disagree.
TEST(M2rnn, PlantedErrorsAreCaught) {
  const QuietWarnings quiet;
  const GeneratedProblem p = m2rnn_problem(DType::f32, 2, 300, 4, 3, 4, 0.5, true, 91);
  const Cell cell = p.make_cell();
  const Case problem = cell.make_case(p.make_input(), p.make_h0(cell.slots()));
  const auto oracle = reference::oracle_sequential(problem, {.certify_budget = kCertifyBudget});
  Tensor theirs = Tensor::converted(oracle.H, DType::f32);
  const Tolerance tau = tolerance_for({.dtype = DType::f32, .cell = "m2rnn"});
  const Shape index = {1, 123, 2, 3};
  theirs.view().store(index, theirs.view().load(index) + 10.0 * tau.atol);
  const AgreementReport planted = compare_trajectory(problem, theirs, {.certify_budget = kCertifyBudget});
  EXPECT_EQ(planted.verdict, Verdict::disagree);
  EXPECT_EQ(planted.worst_index, index);
  EXPECT_EQ(planted.mismatches, 1);

  const AgreementReport early = verify(p, NewtonConfig{.max_iters = 1, .residual_fail = std::nullopt});
  EXPECT_EQ(early.verdict, Verdict::disagree) << early.summary();
  const AgreementReport adaptive = verify(p, NewtonConfig{});
  EXPECT_EQ(adaptive.verdict, Verdict::agree) << adaptive.failure_message();
}

#if PARARNN_TEST_ON_CUDA
// The GPU solve and sequential loop against the CPU backend's, within the cuda trajectory τ (the
// same algorithm; the input GEMM is cuBLAS's and the device libm differs), for states below, at
// and above one block's 256 threads, with and without h0. W stays near the identity (library
// init, or a small σ for a small V): with W = I + N(0, 0.1²) at V = 40 (‖N‖ ≈ 1.3) the f32
// recurrence is expanding and two f32 loops drift 2e-4 apart by T = 200 (measured on the H200).
TEST(M2rnn, GpuEqualsCpuWithinTau) {
  const QuietWarnings quiet;
  for (const GeneratedProblem& p : {m2rnn_problem(DType::f32, 3, 700, 4, 3, 4, 0.1, true, 101),
                                    m2rnn_problem(DType::f64, 2, 300, 3, 4, 2, std::nullopt, false, 102),
                                    m2rnn_problem(DType::bf16, 2, 500, 5, 16, 16, std::nullopt, true, 103),
                                    m2rnn_problem(DType::f32, 1, 200, 6, 8, 40, std::nullopt, false, 104)}) {
    SCOPED_TRACE(p.describe());
    const auto made = p.make();
    const auto& [cell, x, h0] = made;
    ApplyOptions apply = made.options();
    const Tolerance tau = tolerance_for({.dtype = p.dtype, .metric = Metric::trajectory, .cell = "m2rnn",
                                         .backend = "cuda"});
    NewtonStats cpu_stats, gpu_stats;
    const Tensor cpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cpu}, apply, &cpu_stats);
    const Tensor gpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cuda}, apply, &gpu_stats);
    EXPECT_EQ(gpu_stats.scan_backend, SolveBackend::cuda);
    EXPECT_EQ(gpu_stats.k.k, cpu_stats.k.k);
    const ComparisonResult newton = compare(gpu.view(), cpu.view(), tau);
    EXPECT_TRUE(newton.ok()) << "Newton, GPU vs CPU: " << newton.describe();
    const ComparisonResult sequential = compare(sequential_apply(cell, x, ScanBackend::cuda, apply).view(),
                                                sequential_apply(cell, x, ScanBackend::cpu, apply).view(), tau);
    EXPECT_TRUE(sequential.ok()) << "sequential, GPU vs CPU: " << sequential.describe();
  }
}

// The gradients on the GPU (cuda/matrix_state.cpp's adjoint) against the CPU's, every gradient
// tensor within the cuda coupled-gradient τ, for the problems above (states below, at and above
// one block's 256 threads, with and without h0).
TEST(M2rnn, GpuGradientsEqualCpuWithinTau) {
  const QuietWarnings quiet;
  for (const GeneratedProblem& p : {m2rnn_problem(DType::f32, 3, 300, 4, 3, 4, 0.1, true, 111),
                                    m2rnn_problem(DType::f64, 2, 200, 3, 4, 2, std::nullopt, false, 112),
                                    m2rnn_problem(DType::bf16, 2, 200, 5, 16, 16, std::nullopt, true, 113),
                                    m2rnn_problem(DType::f32, 1, 100, 6, 8, 40, std::nullopt, false, 114)}) {
    SCOPED_TRACE(p.describe());
    const auto made = p.make();
    const auto& [cell, x, h0] = made;
    ApplyOptions apply = made.options();
    testing::expect_gradients_agree_across_backends(
        cell, x, apply, p.seed,
        tolerance_for({.dtype = p.dtype, .metric = Metric::gradient_coupled, .cell = "m2rnn", .backend = "cuda"}));
  }
}

// Training on cuda keeps the adjoint walk's state in double: a 100 x 100 f32 state solves on the
// GPU (its f32 walk fits a block) but its training is refused naming the sizes and the limit;
// newton_backtrack is refused on cuda for training as for the solve.
TEST(M2rnn, CudaTrainingRefusesWhatItCannotRun) {
  const QuietWarnings quiet;
  const Cell big = Cell::initialise({.cell = "m2rnn", .d_in = 3, .k_dim = 100, .v_dim = 100}, DType::f32, 121);
  const Tensor x(DType::f32, {1, 2, 3});
  EXPECT_NO_THROW((void)newton_apply(big, x, {.scan_backend = ScanBackend::cuda}));
  try {
    (void)newton_forward(big, x, {.scan_backend = ScanBackend::cuda});
    ADD_FAILURE() << "a 100 x 100 state was trained on cuda";
  } catch (const UnsupportedPath& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("100 x 100"), std::string::npos) << what;
    EXPECT_NE(what.find("in double"), std::string::npos) << what;
  }
  const GeneratedProblem p = m2rnn_problem(DType::f32, 1, 10, 3, 2, 2, std::nullopt, false, 122);
  const Cell cell = p.make_cell();
  const NewtonConfig backtrack{.scan_backend = ScanBackend::cuda, .newton_backtrack = true};
  EXPECT_THROW((void)newton_forward(cell, p.make_input(), backtrack), UnsupportedPath);
}
#endif

}  // namespace
}  // namespace pararnn
