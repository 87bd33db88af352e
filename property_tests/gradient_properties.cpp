// The training claim: the production adjoint agrees with the oracle's BPTT (automatic
// differentiation through the high-precision sequential unroll) within the contract's gradient
// tolerances, for every cell and dtype, over shapes, seeds, weight scales and initial states, on
// the backend under test (backend.hpp), the cells outside the per-channel family included.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/core/random.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;

constexpr std::int64_t kCertifyBudget = 20'000;  // a property run makes hundreds of cases

// A true gradient beyond the storage dtype's range (f16 max 65504; Σ over T of an sLSTM's growing
// slots reaches it) cannot be represented by any implementation: the judge leaves such elements
// out (GradientCheck::unrepresentable) and the verdict is then Inconclusive at best, never Agree.
// The agreement claim is not tested on such a case, but that verdict is: anything other than
// Inconclusive fails.
void discard_if_unrepresentable(const AgreementReport& r, const std::string& what) {
  std::int64_t unrepresentable = 0;
  for (const auto& gc : r.gradients) unrepresentable += gc.unrepresentable;
  if (unrepresentable == 0) return;
  if (r.verdict != Verdict::inconclusive)
    RC_FAIL(fmt::format("{}\n{}\n({} gradient elements beyond the dtype's range: the verdict must be Inconclusive)",
                        what, r.failure_message(), unrepresentable));
  RC_DISCARD("gradient beyond the dtype's range");
}

RC_GTEST_PROP(Gradients, AdjointAgreesWithOracleBptt, ()) {
  const auto p = *gen_problem(400, testing::backend_cells(testing::kPerChannelCellLabels),
                              {DType::f64, DType::f32, DType::f16, DType::bf16});
  RC_TAG(std::string(dtype_name(p.dtype)));
  RC_TAG(std::string(p.conditioning));
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  VerifyOptions options{.seed = p.seed, .certify_budget = kCertifyBudget, .gradients = true};
  options.config.scan_backend = testing::kTestBackend;
  if (h0) options.h0 = h0->view();
  const AgreementReport r = verify_agreement(cell, x, options);
  discard_if_unrepresentable(r, p.describe());
  if (r.verdict != Verdict::agree)
    RC_FAIL(p.describe() + "\n" + r.failure_message() +
            testing::save_failure_artifacts(p, "gradients", NewtonConfig{}) + " --grad");
  RC_ASSERT(r.gradients.size() >= cell.parameters().size() + 1);
}

// The same claim for the cells outside the per-channel family, in the four dtypes.
RC_GTEST_PROP(Gradients, DenseAndMatrixCellAdjointsAgreeWithOracleBptt, ()) {
  const auto& variant = *rc::gen::elementOf(std::vector<testing::DenseVariant>(std::begin(testing::kDenseVariants),
                                                                                std::end(testing::kDenseVariants)));
  const DType dtype = *rc::gen::elementOf(std::vector<DType>{DType::f64, DType::f32, DType::f16, DType::bf16});
  const std::int64_t batch = *rc::gen::inRange(1, 4);
  // f64 runs the oracle in float128 (about 80x slower than double): shorter T.
  const std::int64_t time = *rc::gen::inRange(1, dtype == DType::f64 ? 41 : 201);
  const std::int64_t d_in = *rc::gen::inRange(1, 5);
  const bool scaled = *rc::gen::arbitrary<bool>(), with_h0 = *rc::gen::arbitrary<bool>();
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  RC_TAG(std::string(variant.name), std::string(dtype_name(dtype)));
  const Cell cell = Cell::initialise(testing::dense_variant_options(variant, d_in, scaled ? std::optional(0.5) : std::nullopt),
                                     dtype, seed);
  const Tensor x = testing::GeneratedProblem{.cell = variant.cell, .dtype = dtype, .batch = batch, .time = time,
                                             .d_in = d_in, .seed = seed}
                       .make_input();
  Shape h0_shape = cell.trajectory_shape(batch, 1);
  h0_shape.erase(h0_shape.begin() + 1);
  std::optional<Tensor> h0;
  if (with_h0) {
    std::vector<double> values(static_cast<std::size_t>(shape_numel(h0_shape)));
    SplitMix64 rng(seed + 11);
    for (double& v : values) v = rng.normal(0.0, 0.5);
    // sLSTM's normalizer slot (1) of a true state is never negative.
    if (std::string(variant.cell) == "slstm")
      for (std::size_t i = 0; i < values.size(); ++i)
        if ((static_cast<std::int64_t>(i) / variant.d_h) % 4 == 1) values[i] = std::abs(values[i]);
    h0 = Tensor::from_values(dtype, h0_shape, values);
  }
  VerifyOptions options{.seed = seed, .certify_budget = kCertifyBudget, .gradients = true};
  options.config.scan_backend = testing::kTestBackend;
  if (h0) options.h0 = h0->view();
  const AgreementReport r = verify_agreement(cell, x, options);
  discard_if_unrepresentable(r, fmt::format("{} dtype={} T={} seed={}", variant.name, dtype_name(dtype), time, seed));
  if (r.verdict != Verdict::agree)
    RC_FAIL(fmt::format("{} dtype={} B={} T={} d_in={} d_h={} std={} h0={} seed={}\n{}", variant.name,
                        dtype_name(dtype), batch, time, d_in, cell.d_h(), scaled ? "0.5" : "init", with_h0, seed,
                        r.failure_message()));
  RC_ASSERT(r.gradients.size() >= cell.parameters().size() + 1);
}

// sLSTM's stabiliser m' = max(z_f + m, z_i) at an exact tie (found by the property above: a bf16
// case whose W_x rows of the i and f gates round to the same value): the contract's derivative
// is 1/2 to each side, as the oracle's; the dense backward's forward-mode VJP must split the
// gradient in halves too, not hand it all to one gate.
// The packing claim on the backend under test: a packed batch (cu_seqlens, one h0 row per
// segment) equals each segment solved alone, its trajectory within τ and its ∇x and ∇h0 rows
// within the gradient tolerance, for every segment: the forward's carry stops at a segment's
// start and the adjoint's at its end (the reverse scan runs from the last segment into the
// earlier ones, so the earlier segments are the ones a missing cut corrupts).
void expect_within(const Tensor& actual, const Tensor& expected, const Tolerance& tol, const std::string& what) {
  const ComparisonResult c = compare(actual, expected, tol);
  if (!c.ok()) RC_FAIL(what + ": " + c.describe());
}

RC_GTEST_PROP(Packing, PackedEqualsEachSequenceSolvedAlone, ()) {
  const CellOptions variant =
      testing::label_options(*rc::gen::elementOf(testing::backend_cells(testing::kPerChannelCellLabels)));
  const DType dtype = *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f64});
  const auto lengths = *testing::gen_segments();
  const bool with_h0 = *rc::gen::arbitrary<bool>();
  const std::uint64_t seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  RC_CLASSIFY(lengths.size() == 1, "one segment spans all");
  RC_CLASSIFY(std::find(lengths.begin(), lengths.end(), 1) != lengths.end(), "has length-1 segment");
  std::int64_t total = 0;
  for (auto n : lengths) total += n;
  testing::GeneratedProblem p{.cell = variant.cell, .gate_mix = variant.gate_mix, .dtype = dtype, .batch = 1, .time = total, .d_in = 3,
                     .d_h = 5, .seed = seed};
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto segments = static_cast<std::int64_t>(lengths.size());
  testing::GeneratedProblem h0_gen = p;
  h0_gen.batch = segments;
  h0_gen.with_h0 = with_h0;
  const auto h0 = h0_gen.make_h0(cell.slots());
  const Tensor cu = testing::cu_seqlens_of(lengths, *rc::gen::elementOf(std::vector<DType>{DType::i32, DType::i64}));
  ApplyOptions packed{.cu_seqlens = cu.view()};
  if (h0) packed.h0 = h0->view();
  const Tensor g = testing::GeneratedProblem{.cell = variant.cell, .dtype = dtype, .batch = 1, .time = total,
                                    .d_in = cell.slots() * 5, .seed = seed + 1}
                       .make_input()
                       .reshaped(cell.trajectory_shape(1, total));
  const NewtonConfig config{.scan_backend = testing::kTestBackend};
  const NewtonForward fwd = newton_forward(cell, x, config, packed);
  const NewtonGradients grads = newton_backward(cell, x, fwd, g, config, packed);
  const Tolerance tau = tolerance_for({.dtype = dtype, .cell = variant.cell});
  const Tolerance grad_tol = tolerance_for(
      {.dtype = dtype, .metric = gradient_metric(cell), .cell = variant.cell});
  std::int64_t start = 0;
  for (std::int64_t s = 0; s < segments; ++s) {
    const std::int64_t end = start + lengths[static_cast<std::size_t>(s)];
    const Tensor xs = Tensor::copy_of(x.view().slice(1, start, end));
    const Tensor gs = Tensor::copy_of(g.view().slice(1, start, end));
    std::optional<Tensor> h0s;
    if (h0) h0s = Tensor::copy_of(h0->view().slice(0, s, s + 1));
    ApplyOptions alone;
    if (h0s) alone.h0 = h0s->view();
    const NewtonForward f = newton_forward(cell, xs, config, alone);
    const NewtonGradients gr = newton_backward(cell, xs, f, gs, config, alone);
    expect_within(Tensor::copy_of(fwd.H.view().slice(1, start, end)), f.H, tau,
                  fmt::format("H of segment {} ({})", s, p.describe()));
    expect_within(Tensor::copy_of(grads.x.view().slice(1, start, end)), gr.x, grad_tol,
                  fmt::format("grad x of segment {} ({})", s, p.describe()));
    if (h0)
      expect_within(Tensor::copy_of(grads.h0->view().slice(0, s, s + 1)), *gr.h0, grad_tol,
                    fmt::format("grad h0 of segment {} ({})", s, p.describe()));
    start = end;
  }
}

TEST(Gradients, SlstmStabiliserTieSplitsTheGradientInHalves) {
  for (const char* mix : {"head", "dense"}) {
    Cell cell = Cell::initialise({.cell = "slstm", .mix = mix, .d_in = 2, .d_h = 4,
                                  .n_heads = std::string(mix) == "head" ? std::optional<std::int64_t>(2) : std::nullopt},
                                 DType::f64, 5);
    // Rows (i, f, z, o) x d_h: the f rows equal the i rows, so z_f + m0 = z_i at every t = 0.
    Tensor w = Tensor::copy_of(cell.parameter("W_x.weight").view());
    for (std::int64_t c = 0; c < 4; ++c)
      for (std::int64_t k = 0; k < 2; ++k) w.store({4 + c, k}, w.load({c, k}));
    cell.set_parameter("W_x.weight", w);
    const Tensor x = testing::GeneratedProblem{.cell = "slstm", .dtype = DType::f64, .batch = 2, .time = 1, .d_in = 2,
                                               .seed = 5}
                         .make_input();
    VerifyOptions options{.seed = 5, .gradients = true};
    options.config.scan_backend = testing::kTestBackend;
    const AgreementReport r = verify_agreement(cell, x, options);
    EXPECT_EQ(r.verdict, Verdict::agree) << mix << "\n" << r.failure_message();
  }
}

TEST(Gradients, CustomCotangentIsHonoured) {
  // A cotangent on one element only: the oracle and the adjoint must agree on that loss too.
  const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4}, DType::f32, 2);
  testing::GeneratedProblem p{.cell = "lstm", .dtype = DType::f32, .batch = 2, .time = 30, .d_in = 3, .d_h = 4, .seed = 9};
  const Tensor x = p.make_input();
  Tensor g(DType::f32, cell.trajectory_shape(2, 30));
  g.store({1, 17, 1, 2}, 1.0);
  VerifyOptions options{.gradients = true, .grad_H = g.view()};
  options.config.scan_backend = testing::kTestBackend;
  const AgreementReport r = verify_agreement(cell, x, options);
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
}

}  // namespace
}  // namespace pararnn
