// Claims about the dense-Jacobian cells (ParaHopfield; ParaGRU and ParaSLSTM mix='head';
// ParaSLSTM mix='dense') on the backend under test (backend.hpp: dense_cell_tests_host on the CPU
// dense backend, dense_cell_tests_cuda on the GPU): Newton agrees with the independent oracle
// within τ (f32, f64, bf16; with and without h0; hard, unclamped head weights too); T = 1 is one
// step exactly; packing equals solving each sequence alone; sLSTM's Picard guess. Host only: the
// analytic dense Jacobian equals the oracle's AD Jacobian; the step's reverse-pass VJP equals
// its dual-number VJP; the construction rules and warnings;
// the K table; gradients (cpu) exist. On the GPU only: GPU ≡ CPU within the cuda τ (Newton, the
// sequential loop, and the gradients with h0 and packing), a device x under `auto`, and chains
// wider than N = 32 refused naming the limit (training too). Every case names its seed;
// tolerances come from the contract table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/cells/cell.hpp"
#include "pararnn/cells/dual.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

#if PARARNN_TEST_ON_CUDA
#include <cuda_runtime_api.h>
#endif

namespace pararnn {
namespace {

using testing::kTestBackend;

struct DenseCase {
  std::string cell;  // "hopfield", "gru" (mix head) or "slstm" (mix head, or dense)
  std::string mix = "head";  // slstm: "head" or "dense"
  DType dtype = DType::f32;
  std::int64_t batch = 2, time = 40, d_in = 5, d_h = 8;
  std::int64_t n_heads = 2;
  std::optional<double> weight_std;  // GRU head: iid N(0, std²) instead of orthogonal(0.25)
  bool with_h0 = false;
  std::uint64_t seed = 1;

  Cell make_cell() const {
    CellOptions o{.cell = cell, .d_in = d_in, .d_h = d_h, .max_recurrent_norm = std::nullopt,
                  .weight_std = weight_std};
    if (cell == "gru" || (cell == "slstm" && mix == "head")) {
      o.mix = "head";
      o.n_heads = n_heads;
    }
    if (cell == "slstm") {
      o.mix = mix;
      if (!weight_std) o.max_recurrent_norm = 0.5;  // the library default; hard cases unclamped
    }
    return Cell::initialise(o, dtype, seed);
  }
  Tensor make_input(std::int64_t b, std::int64_t t) const {
    SplitMix64 rng(seed * 7919 + 1);
    Tensor x(dtype, {b, t, d_in});
    Tensor flat = x.reshaped({x.numel()});
    for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal());
    return x;
  }
  std::int64_t slots() const { return cell == "slstm" ? 4 : 1; }
  Tensor make_h0(std::int64_t rows) const {
    SplitMix64 rng(seed * 104729 + 3);
    Tensor h0(dtype, slots() == 1 ? Shape{rows, d_h} : Shape{rows, slots(), d_h});
    Tensor flat = h0.reshaped({h0.numel()});
    for (std::int64_t i = 0; i < h0.numel(); ++i) {
      const double v = rng.normal(0.0, 0.5);
      const bool normalizer = slots() == 4 && (i / d_h) % 4 == 1;  // sLSTM n0 >= 0
      flat.store({i}, normalizer ? std::abs(v) : v);
    }
    return h0;
  }
  std::string describe() const {
    const bool heads = cell == "gru" || (cell == "slstm" && mix == "head");
    return fmt::format("cell={}{} dtype={} B={} T={} d_in={} d_h={} weight_std={} h0={} seed={}", cell,
                       heads ? fmt::format(" mix=head n_heads={}", n_heads)
                             : (cell == "slstm" ? " mix=dense" : ""),
                       dtype_name(dtype), batch, time, d_in, d_h,
                       weight_std ? fmt::format("{}", *weight_std) : "init", with_h0, seed);
  }
};

std::vector<DenseCase> agreement_cases() {
  std::vector<DenseCase> out;
  std::uint64_t seed = 11;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (std::int64_t time : {1, 37, 300}) {
      const std::int64_t t = dtype == DType::f64 ? std::min<std::int64_t>(time, 120) : time;
      out.push_back({.cell = "hopfield", .dtype = dtype, .time = t, .d_h = 8, .with_h0 = time == 37, .seed = seed++});
      out.push_back({.cell = "hopfield", .dtype = dtype, .batch = 1, .time = t, .d_h = 16, .seed = seed++});
      out.push_back({.cell = "gru", .dtype = dtype, .time = t, .d_h = 16, .n_heads = 4, .with_h0 = true, .seed = seed++});
      out.push_back({.cell = "gru", .dtype = dtype, .time = t, .d_h = 12, .n_heads = 3, .seed = seed++});
      out.push_back({.cell = "gru", .dtype = dtype, .batch = 1, .time = t, .d_h = 8, .n_heads = 1,
                     .weight_std = 0.7, .seed = seed++});  // hard: unclamped dense head
      out.push_back({.cell = "slstm", .dtype = dtype, .time = t, .d_h = 8, .n_heads = 2, .with_h0 = true,
                     .seed = seed++});
      out.push_back({.cell = "slstm", .dtype = dtype, .batch = 1, .time = t, .d_h = 12, .n_heads = 3,
                     .weight_std = 0.5, .seed = seed++});  // unclamped iid head matrices
      out.push_back({.cell = "slstm", .mix = "dense", .dtype = dtype, .time = t, .d_h = 6,
                     .with_h0 = time == 300, .seed = seed++});
    }
  return out;
}

TEST(DenseCells, NewtonAgreesWithOracleWithinTau) {
  QuietWarnings quiet;
  for (const DenseCase& c : agreement_cases()) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(c.batch, c.time);
    VerifyOptions options{.seed = c.seed, .certify_budget = 20'000};
    options.config.scan_backend = kTestBackend;
    std::optional<Tensor> h0;
    if (c.with_h0) {
      h0 = c.make_h0(c.batch);
      options.h0 = h0->view();
    }
    options.repro_command = "dense_cell_tests: " + c.describe();
    const AgreementReport r = verify_agreement(cell, x, options);
    EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
    EXPECT_EQ(r.backend, std::string(testing::kTestBackendName));
  }
}

TEST(DenseCells, OneStepIsExactlyTheSequentialStep) {
  QuietWarnings quiet;
  for (const DenseCase c : {DenseCase{.cell = "hopfield", .d_h = 8, .with_h0 = true, .seed = 3},
                            DenseCase{.cell = "gru", .dtype = DType::bf16, .d_h = 12, .n_heads = 3,
                                      .with_h0 = true, .seed = 4},
                            DenseCase{.cell = "gru", .dtype = DType::f64, .d_h = 6, .n_heads = 2, .seed = 5},
                            DenseCase{.cell = "slstm", .dtype = DType::f32, .d_h = 8, .n_heads = 2,
                                      .with_h0 = true, .seed = 6},
                            DenseCase{.cell = "slstm", .mix = "dense", .dtype = DType::bf16, .d_h = 4, .seed = 7}}) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(3, 1);
    ApplyOptions apply;
    const Tensor h0 = c.make_h0(3);
    if (c.with_h0) apply.h0 = h0.view();
    const Tensor newton = newton_apply(cell, x, {.scan_backend = kTestBackend}, apply);
    const Tensor sequential = sequential_apply(cell, x, kTestBackend, apply);
    ASSERT_EQ(newton.shape(), sequential.shape());
    EXPECT_EQ(std::memcmp(newton.data(), sequential.data(), newton.nbytes()), 0);
  }
}

// The production dense-chain math (in f64) at the gate inputs W_x x_t + b against the oracle's
// Jacobian by automatic differentiation, over the full state (GRU-head: zero off its heads).
PARARNN_HOST_ONLY_TEST(DenseCells, AnalyticJacobianEqualsOracleAutomaticDifferentiation) {
  QuietWarnings quiet;
  for (const DenseCase c : {DenseCase{.cell = "hopfield", .d_h = 8, .seed = 21},
                            DenseCase{.cell = "hopfield", .d_h = 5, .seed = 22},
                            DenseCase{.cell = "gru", .d_h = 12, .n_heads = 3, .seed = 23},
                            DenseCase{.cell = "gru", .d_h = 8, .n_heads = 1, .weight_std = 0.7, .seed = 24},
                            DenseCase{.cell = "slstm", .d_h = 8, .n_heads = 2, .seed = 25},
                            DenseCase{.cell = "slstm", .d_h = 6, .n_heads = 1, .weight_std = 0.5, .seed = 26},
                            DenseCase{.cell = "slstm", .mix = "dense", .d_h = 5, .seed = 27}}) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(1, 3);
    const Case problem = cell.make_case(x);
    const std::int64_t D = cell.slots() * cell.d_h(), n = cell.chain_width();
    const Tolerance tol = tolerance_for({.dtype = c.dtype, .metric = Metric::jacobian, .cell = c.cell});
    SplitMix64 rng(c.seed);
    for (std::int64_t t = 0; t < 3; ++t) {
      std::vector<double> h(static_cast<std::size_t>(D));
      for (double& v : h) v = rng.normal(0.0, 0.5);
      if (cell.slots() == 4)  // sLSTM's normalizer slot n >= 0
        for (std::int64_t i = cell.d_h(); i < 2 * cell.d_h(); ++i) h[static_cast<std::size_t>(i)] = std::abs(h[static_cast<std::size_t>(i)]);
      const reference::OracleStep oracle = reference::oracle_step_with_jacobian(problem, 0, t, h);
      // Gate inputs in double from the stored parameters.
      const AffineBlock& block = cell.spec().affine.front();
      const std::int64_t rows = cell.affine_rows(block);
      const Tensor& w = cell.parameter("W_x.weight");
      const Tensor& bias = cell.parameter("W_x.bias");
      std::vector<double> wx(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) {
        double acc = bias.load({i});
        for (std::int64_t k = 0; k < c.d_in; ++k) acc += w.load({i, k}) * x.load({0, t, k});
        wx[static_cast<std::size_t>(i)] = acc;
      }
      const std::vector<double> params = cell.dense_chain_parameters();
      std::vector<double> J(static_cast<std::size_t>(D * D), 0.0), h_new(static_cast<std::size_t>(D));
      dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
        std::vector<double> work(static_cast<std::size_t>(DenseMath::work_size(static_cast<int>(n))));
        std::vector<double> block_J(static_cast<std::size_t>(n * n)), hp(static_cast<std::size_t>(n)),
            hn(static_cast<std::size_t>(n));
        for (std::int64_t q = 0; q < cell.chains_per_row(); ++q) {
          const auto at = [&](std::int64_t i) { return static_cast<std::size_t>(cell.chain_element_offset(q, i)); };
          for (std::int64_t i = 0; i < n; ++i) hp[static_cast<std::size_t>(i)] = h[at(i)];
          const bool square = DenseMath::kSquareGates;
          DenseMath::step(static_cast<int>(n), params.data() + q * DenseMath::params_size(static_cast<int>(n)),
                          wx.data() + (square ? 0 : q * cell.chain_slot_width()), square ? n * n : cell.d_h(),
                          hp.data(), hn.data(), block_J.data(), work.data());
          for (std::int64_t i = 0; i < n; ++i) {
            h_new[at(i)] = hn[static_cast<std::size_t>(i)];
            for (std::int64_t k = 0; k < n; ++k)
              J[at(i) * static_cast<std::size_t>(D) + at(k)] = block_J[static_cast<std::size_t>(i * n + k)];
          }
        }
      });
      for (std::int64_t i = 0; i < D * D; ++i) {
        const double expected = oracle.jacobian[static_cast<std::size_t>(i)];
        EXPECT_LE(std::abs(J[static_cast<std::size_t>(i)] - expected), tol.atol + tol.rtol * std::abs(expected))
            << "t=" << t << " J[" << i / D << "][" << i % D << "]";
      }
      for (std::int64_t i = 0; i < D; ++i) {
        const double expected = oracle.h_new[static_cast<std::size_t>(i)];
        EXPECT_LE(std::abs(h_new[static_cast<std::size_t>(i)] - expected), tol.atol + tol.rtol * std::abs(expected));
      }
    }
  }
}

// The backward's per-step VJP (DenseMath::vjp, the step's reverse pass) equals μᵀ ∂h'/∂u formed
// input by input by forward-mode duals through the step itself (cells/dual.hpp), for every gate
// input, dense-chain parameter and h_prev element, on random states, gates and cotangents.
PARARNN_HOST_ONLY_TEST(DenseCells, StepVjpEqualsTheDualVjpOfTheStep) {
  QuietWarnings quiet;
  using Dual = cells::Dual<double>;
  for (const DenseCase c : {DenseCase{.cell = "hopfield", .d_h = 6, .seed = 41},
                            DenseCase{.cell = "gru", .d_h = 10, .n_heads = 2, .weight_std = 0.7, .seed = 42},
                            DenseCase{.cell = "slstm", .d_h = 8, .n_heads = 2, .weight_std = 0.5, .seed = 43},
                            DenseCase{.cell = "slstm", .mix = "dense", .d_h = 5, .seed = 44}}) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const std::int64_t n = cell.chain_width();
    const Tolerance tol = tolerance_for({.dtype = DType::f64, .metric = Metric::jacobian, .cell = c.cell});
    const std::vector<double> all_params = cell.dense_chain_parameters();
    SplitMix64 rng(c.seed);
    dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
      const int ni = static_cast<int>(n);
      const std::int64_t P = DenseMath::params_size(ni);
      const std::int64_t stride = DenseMath::kSquareGates ? n * n : cell.chain_slot_width();
      const std::int64_t gate_count = DenseMath::kGates * stride;
      for (std::int64_t q = 0; q < cell.chains_per_row(); ++q) {
        const double* params = all_params.data() + q * P;
        std::vector<double> gates(static_cast<std::size_t>(gate_count)), h(static_cast<std::size_t>(n)),
            mu(h.size());
        for (double& v : gates) v = rng.normal(0.0, 0.7);
        for (double& v : h) v = rng.normal(0.0, 0.5);
        for (double& v : mu) v = rng.normal(0.0, 1.0);
        if (cell.slots() == 4)  // sLSTM's normalizer slot n >= 0
          for (std::int64_t i = n / 4; i < n / 2; ++i) h[static_cast<std::size_t>(i)] = std::abs(h[static_cast<std::size_t>(i)]);
        std::vector<double> d_params(static_cast<std::size_t>(P), 0.0), d_gates(gates.size()), d_h(h.size()),
            work(static_cast<std::size_t>(DenseMath::vjp_work_size(ni)));
        DenseMath::vjp(ni, params, gates.data(), stride, h.data(), mu.data(), d_params.data(), d_gates.data(),
                       d_h.data(), work.data());
        std::vector<Dual> pd(params, params + P), gd(gates.begin(), gates.end()), hd(h.begin(), h.end()), hn(h.size()),
            workd(static_cast<std::size_t>(DenseMath::work_size(ni)));
        const auto dual_vjp = [&](Dual& input) {
          input.d = 1.0;
          DenseMath::step(ni, pd.data(), gd.data(), stride, hd.data(), hn.data(), static_cast<Dual*>(nullptr),
                          workd.data());
          input.d = 0.0;
          double sum = 0.0;
          for (std::int64_t i = 0; i < n; ++i) sum += mu[static_cast<std::size_t>(i)] * hn[static_cast<std::size_t>(i)].d;
          return sum;
        };
        const auto expect_close = [&](double reverse, double forward, const char* what, std::int64_t k) {
          EXPECT_LE(std::abs(reverse - forward), tol.atol + tol.rtol * std::abs(forward))
              << what << "[" << k << "] of chain " << q << ": reverse " << reverse << ", duals " << forward;
        };
        for (std::int64_t k = 0; k < gate_count; ++k)
          expect_close(d_gates[static_cast<std::size_t>(k)], dual_vjp(gd[static_cast<std::size_t>(k)]), "d_gates", k);
        for (std::int64_t k = 0; k < P; ++k)
          expect_close(d_params[static_cast<std::size_t>(k)], dual_vjp(pd[static_cast<std::size_t>(k)]), "d_params", k);
        for (std::int64_t k = 0; k < n; ++k)
          expect_close(d_h[static_cast<std::size_t>(k)], dual_vjp(hd[static_cast<std::size_t>(k)]), "d_h_prev", k);
      }
    });
  }
}

TEST(DenseCells, PackedEqualsPerSequence) {
  QuietWarnings quiet;
  for (const DenseCase c : {DenseCase{.cell = "hopfield", .d_h = 8, .seed = 31},
                            DenseCase{.cell = "gru", .d_h = 12, .n_heads = 3, .seed = 32},
                            DenseCase{.cell = "slstm", .d_h = 8, .n_heads = 2, .seed = 33},
                            DenseCase{.cell = "slstm", .mix = "dense", .d_h = 4, .seed = 34}}) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const std::vector<std::int64_t> cu = {0, 7, 8, 30, 55};
    const std::int64_t total = cu.back(), segments = static_cast<std::int64_t>(cu.size()) - 1;
    const Tensor x = c.make_input(1, total);
    const Tensor h0 = c.make_h0(segments);
    Tensor cu_t(DType::i64, {static_cast<std::int64_t>(cu.size())});
    for (std::size_t i = 0; i < cu.size(); ++i) cu_t.store({static_cast<std::int64_t>(i)}, static_cast<double>(cu[i]));
    const Tensor packed = newton_apply(cell, x, {.scan_backend = kTestBackend},
                                       {.h0 = h0.view(), .cu_seqlens = cu_t.view()});
    const Tolerance tau = tolerance_for({.dtype = c.dtype, .cell = c.cell});
    for (std::int64_t s = 0; s < segments; ++s) {
      const Tensor xs = Tensor::copy_of(x.view().slice(1, cu[s], cu[s + 1]));
      const Tensor h0s = Tensor::copy_of(h0.view().slice(0, s, s + 1));
      const Tensor alone = newton_apply(cell, xs, {.scan_backend = kTestBackend}, {.h0 = h0s.view()});
      const Tensor packed_s = Tensor::copy_of(packed.view().slice(1, cu[s], cu[s + 1]));
      const ComparisonResult cmp = compare(packed_s.view(), alone.view(), tau);
      EXPECT_EQ(cmp.mismatches, 0) << "segment " << s << ": " << cmp.describe();
    }
  }
}

PARARNN_HOST_ONLY_TEST(DenseCells, ConstructionRulesAndWarnings) {
  {
    WarningCapture capture;
    (void)Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 48}, DType::f32, 1);
    EXPECT_TRUE(capture.contains("hopfield_wide"));
  }
  {
    WarningCapture capture;
    (void)Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 32}, DType::f32, 1);
    EXPECT_FALSE(capture.contains("hopfield_wide"));
  }
  {
    WarningCapture capture;
    (void)Cell::initialise({.cell = "gru", .mix = "head", .d_in = 3, .d_h = 8, .n_heads = 2}, DType::f32, 1);
    EXPECT_TRUE(capture.contains("gru_head_block_diagonal"));
  }
  {
    WarningCapture capture;
    (void)Cell::initialise({.cell = "slstm", .mix = "head", .d_in = 3, .d_h = 8, .n_heads = 2}, DType::f32, 1);
    EXPECT_TRUE(capture.contains("slstm_head_dense_r"));
  }
  QuietWarnings quiet;
  // sLSTM: dense is a test oracle up to d_h = 8; head needs n_heads dividing d_h.
  EXPECT_NO_THROW((void)Cell::initialise({.cell = "slstm", .mix = "dense", .d_in = 3, .d_h = 8}, DType::f32, 1));
  try {
    (void)Cell::initialise({.cell = "slstm", .mix = "dense", .d_in = 3, .d_h = 9}, DType::f32, 1);
    ADD_FAILURE() << "sLSTM dense with d_h = 9 was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), std::string("hidden_size"));
  }
  try {
    (void)Cell::initialise({.cell = "slstm", .mix = "head", .d_in = 3, .d_h = 8, .n_heads = 3}, DType::f32, 1);
    ADD_FAILURE() << "sLSTM head with n_heads = 3, d_h = 8 was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), std::string("n_heads"));
  }
  EXPECT_THROW((void)Cell::initialise({.cell = "slstm", .mix = "dense", .d_in = 3, .d_h = 4, .n_heads = 2},
                                      DType::f32, 1),
               ContractViolation);
  // sLSTM head/dense case files: R_head (4, H, d_head, d_head) / R_dense.weight (4 d_h, d_h) under
  // the Python names and state_dict order, and back.
  const Cell slstm_head = Cell::initialise({.cell = "slstm", .mix = "head", .d_in = 3, .d_h = 8, .n_heads = 2}, DType::f32, 2);
  EXPECT_EQ(slstm_head.parameter("R_head").shape(), (Shape{4, 2, 4, 4}));
  const Cell slstm_head_back = Cell::from_case(slstm_head.make_case(Tensor(DType::f32, {1, 2, 3})));
  EXPECT_EQ(slstm_head_back.kind(), CellKind::slstm_head);
  EXPECT_EQ(slstm_head_back.n_heads(), 2);
  const Cell slstm_dense = Cell::initialise({.cell = "slstm", .mix = "dense", .d_in = 3, .d_h = 4}, DType::f64, 3);
  const Tensor& r_dense = slstm_dense.parameter("R_dense.weight");
  ASSERT_EQ(r_dense.shape(), (Shape{16, 4}));
  for (std::int64_t i = 0; i < 4; ++i)  // orthogonal(gain 0.25) columns of the whole (16, 4) matrix
    for (std::int64_t j = 0; j < 4; ++j) {
      double dot = 0.0;
      for (std::int64_t k = 0; k < 16; ++k) dot += r_dense.load({k, i}) * r_dense.load({k, j});
      EXPECT_NEAR(dot, i == j ? 0.0625 : 0.0, tolerance_for({.dtype = DType::f64}).atol);
    }
  EXPECT_EQ(Cell::from_case(slstm_dense.make_case(Tensor(DType::f64, {1, 2, 3}))).kind(), CellKind::slstm_dense);
  EXPECT_THROW((void)Cell::initialise({.cell = "gru", .mix = "head", .d_in = 3, .d_h = 10, .n_heads = 3},
                                      DType::f32, 1),
               ContractViolation);
  EXPECT_THROW((void)Cell::initialise({.cell = "gru", .mix = "head", .d_in = 3, .d_h = 8}, DType::f32, 1),
               ContractViolation);
  EXPECT_THROW((void)Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 8, .n_heads = 2}, DType::f32, 1),
               ContractViolation);
  EXPECT_THROW((void)Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 8, .beta = 0.0}, DType::f32, 1),
               ContractViolation);
  EXPECT_THROW((void)Cell::initialise({.cell = "gru", .mix = "dense", .d_in = 3, .d_h = 8}, DType::f32, 1),
               ContractViolation);
  // The head matrices: (n_heads, d_head, d_head), orthogonal with gain 0.25 per head.
  const Cell head = Cell::initialise({.cell = "gru", .mix = "head", .d_in = 3, .d_h = 8, .n_heads = 2}, DType::f64, 7);
  const Tensor& a = head.parameter("A_r");
  ASSERT_EQ(a.shape(), (Shape{2, 4, 4}));
  for (std::int64_t hd = 0; hd < 2; ++hd)
    for (std::int64_t i = 0; i < 4; ++i)
      for (std::int64_t j = 0; j < 4; ++j) {
        double dot = 0.0;
        for (std::int64_t k = 0; k < 4; ++k) dot += a.load({hd, k, i}) * a.load({hd, k, j});
        EXPECT_NEAR(dot, i == j ? 0.0625 : 0.0, tolerance_for({.dtype = DType::f64}).atol);
      }
  // The case file round-trip keeps mix, n_heads and beta under the Python names.
  const Case problem = head.make_case(Tensor(DType::f64, {1, 2, 3}));
  EXPECT_EQ(problem.metadata.at("mix"), "head");
  EXPECT_EQ(problem.metadata.at("n_heads"), "2");
  EXPECT_EQ(problem.metadata.at("max_recurrent_norm"), "0.5");  // CellOptions' default, explicit
  const Cell back = Cell::from_case(problem);
  EXPECT_EQ(back.kind(), CellKind::gru_head);
  EXPECT_EQ(back.n_heads(), 2);
  const Cell hop = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 4, .beta = 0.75}, DType::f32, 1);
  const Cell hop_back = Cell::from_case(hop.make_case(Tensor(DType::f32, {1, 2, 3})));
  EXPECT_EQ(hop_back.kind(), CellKind::hopfield);
  EXPECT_EQ(hop_back.d_h(), 4);
  EXPECT_EQ(hop_back.beta(), 0.75);
  EXPECT_EQ(hop_back.parameter("W_x.weight").shape(), (Shape{32, 3}));
}

// sLSTM head's initial guess is the zero-hidden pass plus Picard passes: with R = 0 the frozen
// gates are the true gates, so the guess (K = 0) is the sequential answer; auto P follows T.
TEST(DenseCells, SlstmHeadGuessIsTheZeroHiddenPassThenPicard) {
  QuietWarnings quiet;
  const DenseCase c{.cell = "slstm", .dtype = DType::f64, .time = 100, .d_h = 8, .n_heads = 2,
                    .with_h0 = true, .seed = 41};
  Cell cell = c.make_cell();
  cell.set_parameter("R_head", Tensor(DType::f64, {4, 2, 4, 4}));
  const Tensor x = c.make_input(c.batch, c.time);
  const Tensor h0 = c.make_h0(c.batch);
  const ApplyOptions apply{.h0 = h0.view()};
  NewtonStats stats;
  const Tensor guess = newton_apply(cell, x, {.max_iters = 0, .scan_backend = kTestBackend, .picard_iters = 0},
                                    apply, &stats);
  EXPECT_EQ(stats.picard_iters, 0);
  const ComparisonResult cmp = compare(guess.view(), sequential_apply(cell, x, kTestBackend, apply).view(),
                                      tolerance_for({.dtype = DType::f64, .cell = "slstm"}));
  EXPECT_TRUE(cmp.ok()) << cmp.describe();
  const Cell hard = c.make_cell();
  (void)newton_apply(hard, x, {.scan_backend = kTestBackend}, apply, &stats);
  EXPECT_EQ(stats.picard_iters, 3);  // auto P: 64 < T <= 2048
  (void)newton_apply(hard, Tensor::copy_of(x.view().slice(1, 0, 64)), {.scan_backend = kTestBackend},
                     {.h0 = h0.view()}, &stats);
  EXPECT_EQ(stats.picard_iters, 1);
}

PARARNN_HOST_ONLY_TEST(DenseCells, KTableAndRefusals) {
  QuietWarnings quiet;
  const CellSpec& hop = cell_spec("hopfield");
  EXPECT_EQ(resolve_newton_iters({}, hop, DType::f32, 63).k, 2);
  EXPECT_EQ(resolve_newton_iters({}, hop, DType::f32, 64).k, 3);
  EXPECT_EQ(resolve_newton_iters({}, hop, DType::f64, 1).k, 4);
  const Cell cell = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 5, 3});
  // Gradients exist on the cpu since issue 16 (checked in gradient_tests_host and verify --grad).
  EXPECT_NO_THROW((void)newton_forward(cell, x));
  EXPECT_THROW((void)dispatch_cell(cell.kind(), []<class CellMath>() { return 0; }), UnsupportedPath);
  EXPECT_EQ(reference::oracle_gradients(cell.make_case(x)).tensors.count("W_x.weight"), 1u);
}

#if PARARNN_TEST_ON_CUDA
// Every dense cell on the GPU against the CPU dense backend, Newton and the sequential loop, within
// the cuda trajectory τ (the same algorithm; the scan associates differently and the input GEMM
// is cuBLAS's).
TEST(DenseCells, GpuEqualsCpuWithinTau) {
  QuietWarnings quiet;
  for (const DenseCase& c : agreement_cases()) {
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(c.batch, c.time);
    ApplyOptions apply;
    const Tensor h0 = c.make_h0(c.batch);
    if (c.with_h0) apply.h0 = h0.view();
    const Tolerance tau = tolerance_for({.dtype = c.dtype, .metric = Metric::trajectory, .cell = c.cell,
                                         .backend = "cuda"});
    NewtonStats cpu_stats, gpu_stats;
    const Tensor cpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cpu}, apply, &cpu_stats);
    const Tensor gpu = newton_apply(cell, x, {.scan_backend = ScanBackend::cuda}, apply, &gpu_stats);
    EXPECT_EQ(gpu_stats.scan_backend, SolveBackend::cuda);
    EXPECT_EQ(gpu_stats.k.k, cpu_stats.k.k);
    EXPECT_EQ(gpu_stats.picard_iters, cpu_stats.picard_iters);
    const ComparisonResult newton = compare(gpu.view(), cpu.view(), tau);
    EXPECT_TRUE(newton.ok()) << "Newton, GPU vs CPU: " << newton.describe();
    const Tensor cpu_seq = sequential_apply(cell, x, ScanBackend::cpu, apply);
    const Tensor gpu_seq = sequential_apply(cell, x, ScanBackend::cuda, apply);
    const ComparisonResult sequential = compare(gpu_seq.view(), cpu_seq.view(), tau);
    EXPECT_TRUE(sequential.ok()) << "sequential, GPU vs CPU: " << sequential.describe();
  }
}

// The gradients on the GPU (cuda/dense.cpp's adjoint) against the CPU dense backward, every
// gradient tensor within the cuda coupled-gradient τ: the agreement cases up to T = 37 (with h0
// where the case has one) and two packed batches (segments restart the adjoint scan and each
// head's ∇h0 row is its own).
TEST(DenseCells, GpuGradientsEqualCpuWithinTau) {
  QuietWarnings quiet;
  const auto check = [](const DenseCase& c, const Cell& cell, const Tensor& x, const ApplyOptions& apply) {
    testing::expect_gradients_agree_across_backends(
        cell, x, apply, c.seed,
        tolerance_for({.dtype = c.dtype, .metric = Metric::gradient_coupled, .cell = c.cell, .backend = "cuda"}));
  };
  for (const DenseCase& c : agreement_cases()) {
    if (c.time > 37) continue;
    SCOPED_TRACE(c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(c.batch, c.time);
    const Tensor h0 = c.make_h0(c.batch);
    ApplyOptions apply;
    if (c.with_h0) apply.h0 = h0.view();
    check(c, cell, x, apply);
  }
  for (const DenseCase& c : {DenseCase{.cell = "gru", .dtype = DType::f32, .d_h = 8, .n_heads = 2, .seed = 61},
                             DenseCase{.cell = "slstm", .mix = "dense", .dtype = DType::f64, .d_h = 4, .seed = 62}}) {
    SCOPED_TRACE("packed cu_seqlens 0, 4, 9: " + c.describe());
    const Cell cell = c.make_cell();
    const Tensor x = c.make_input(1, 9);
    const Tensor h0 = c.make_h0(2);
    const Tensor cu = Tensor::from_values(DType::i64, {3}, std::vector<double>{0, 4, 9});
    check(c, cell, x, {.h0 = h0.view(), .cu_seqlens = cu.view()});
  }
}

// `auto` with x on the device runs the GPU solve: the same bits as scan_backend=cuda with host x.
TEST(DenseCells, DeviceInputUnderAutoIsTheCudaSolve) {
  QuietWarnings quiet;
  const DenseCase c{.cell = "gru", .dtype = DType::f32, .time = 70, .d_h = 12, .n_heads = 3, .seed = 51};
  const Cell cell = c.make_cell();
  const Tensor x = c.make_input(c.batch, c.time);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, x.nbytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, x.data(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  const TensorView x_device(device, x.dtype(), x.shape(), {}, Device::cuda, 0);
  NewtonStats stats;
  const Tensor from_device = newton_apply(cell, x_device, {}, {}, &stats);
  const Tensor from_host = newton_apply(cell, x, {.scan_backend = ScanBackend::cuda});
  const Tensor sequential_device = sequential_apply(cell, x_device);
  const Tensor sequential_host = sequential_apply(cell, x, ScanBackend::cuda);
  cudaFree(device);
  EXPECT_EQ(stats.scan_backend, SolveBackend::cuda);
  ASSERT_EQ(from_device.nbytes(), from_host.nbytes());
  EXPECT_EQ(std::memcmp(from_device.data(), from_host.data(), from_host.nbytes()), 0);
  EXPECT_EQ(std::memcmp(sequential_device.data(), sequential_host.data(), sequential_host.nbytes()), 0);
}

// Chains wider than the dense kernels' N = 32 are refused on cuda, naming N and the limit, for
// the solve and for training; N = 32 runs both.
TEST(DenseCells, CudaRefusesChainsWiderThanTheKernelLimit) {
  QuietWarnings quiet;
  const Cell wide = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 33}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 4, 3});
  for (int entry = 0; entry < 3; ++entry) {
    try {
      if (entry == 0)
        (void)newton_apply(wide, x, {.scan_backend = ScanBackend::cuda});
      else if (entry == 1)
        (void)sequential_apply(wide, x, ScanBackend::cuda);
      else
        (void)newton_forward(wide, x, {.scan_backend = ScanBackend::cuda});
      ADD_FAILURE() << "a chain of N = 33 was accepted on cuda";
    } catch (const UnsupportedPath& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("N = 33"), std::string::npos) << what;
      EXPECT_NE(what.find("N <= 32"), std::string::npos) << what;
    }
  }
  const Cell edge = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 32}, DType::f32, 1);
  EXPECT_NO_THROW((void)newton_apply(edge, x, {.scan_backend = ScanBackend::cuda}));
  const NewtonForward forward = newton_forward(edge, x, {.scan_backend = ScanBackend::cuda});
  const Tensor g(DType::f32, edge.trajectory_shape(1, 4));
  EXPECT_NO_THROW((void)newton_backward(edge, x, forward, g, {.scan_backend = ScanBackend::cuda}));
}
#endif

}  // namespace
}  // namespace pararnn
