// The layout contract (packed ≡ each sequence alone, forward and gradients, is a claim of every
// backend: Packing.PackedEqualsEachSequenceSolvedAlone in gradient_properties.cpp): strided and
// permuted views ≡ the contiguous copy bitwise; every malformed
// cu_seqlens is refused with its rule named; windowed Newton (window_len) is reported honestly;
// the *_into entry points write into strided caller views exactly the bits the returning ones
// return, and refuse an output of the wrong shape or dtype, with repeated addresses, or sharing
// memory with an input, before any work.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>

#include "generators.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;
using testing::GeneratedProblem;
using testing::gen_segments;

const std::vector<std::string>& kCells = testing::kPerChannelCellLabels;

RC_GTEST_PROP(Packing, MalformedCuSeqlensNameTheirRule, ()) {
  const auto lengths = *gen_segments();
  std::vector<double> values = {0.0};
  for (auto n : lengths) values.push_back(values.back() + static_cast<double>(n));
  const auto total = static_cast<std::int64_t>(values.back());
  DType dtype = DType::i64;
  Shape shape = {static_cast<std::int64_t>(values.size())};
  const int defect = *rc::gen::inRange(0, 7);
  std::string rule;
  switch (defect) {
    case 0: values = {}; shape = {0}; rule = "at least 2"; break;
    case 1: values[0] = *rc::gen::inRange(1, 5); rule = "start at 0"; break;
    case 2: values.back() += *rc::gen::inRange(1, 5); rule = "end at"; break;
    case 3: {
      if (values.size() < 3) values.insert(values.begin() + 1, 0.0);
      else values[1] = values[2];
      shape = {static_cast<std::int64_t>(values.size())};
      rule = "strictly increasing";
      break;
    }
    case 4: dtype = *rc::gen::elementOf(std::vector<DType>{DType::f32, DType::f64}); rule = "int32 or int64"; break;
    case 5: shape = {1, static_cast<std::int64_t>(values.size())}; rule = "1-D"; break;
    default: values = {0.0}; shape = {1}; rule = "at least 2"; break;
  }
  RC_TAG(rule);
  const Tensor cu = Tensor::from_values(dtype, shape, values);
  try {
    (void)validate_cu_seqlens(cu, total);
    RC_FAIL("accepted a malformed cu_seqlens: " + rule);
  } catch (const ContractViolation& e) {
    RC_ASSERT(e.argument() == std::string("cu_seqlens"));
    if (e.rule().find(rule) == std::string::npos) RC_FAIL("rule '" + e.rule() + "' does not name " + rule);
  }
}

RC_GTEST_PROP(Packing, BatchAndInitialStateCountsAreChecked, ()) {
  CellOptions options = testing::label_options(*rc::gen::elementOf(kCells));
  options.d_in = 2;
  options.d_h = 3;
  const Cell cell = Cell::initialise(options, DType::f32, 1);
  const Tensor cu = Tensor::from_values(DType::i32, {3}, std::vector<double>{0, 2, 5});
  const std::int64_t batch = *rc::gen::inRange(2, 5);
  const Tensor x_batched(DType::f32, {batch, 5, 2});
  RC_ASSERT_THROWS_AS((void)sequential_apply(cell, x_batched, {.cu_seqlens = cu.view()}), ContractViolation);
  const std::int64_t wrong = *rc::gen::suchThat(rc::gen::inRange(1, 6), [](int n) { return n != 2; });
  const Tensor x(DType::f32, {1, 5, 2});
  const Tensor h0(DType::f32, {wrong, cell.slots(), 3});
  try {
    (void)sequential_apply(cell, x, {.h0 = h0.view(), .cu_seqlens = cu.view()});
    RC_FAIL("accepted h0 with the wrong segment count");
  } catch (const ContractViolation& e) {
    RC_ASSERT(e.argument() == std::string("h0"));
  }
}

RC_GTEST_PROP(Strides, StridedAndPermutedViewsEqualContiguousCopyBitwise, ()) {
  const auto p = *gen_problem(200, kCells, {DType::f32, DType::bf16, DType::f64});
  const Cell cell = p.make_cell();
  // A (2T, B, 2 d_in) buffer viewed as (B, T, d_in) with a time skip, a feature skip and
  // batch/time permuted.
  GeneratedProblem big = p;
  big.batch = 2 * p.time;
  big.time = p.batch;
  big.d_in = 2 * p.d_in;
  const Tensor buffer = big.make_input();
  const std::int64_t t_step = 2, f_step = 2;
  const TensorView view =
      buffer.view().permute({1, 0, 2}).slice(1, 0, 2 * p.time, t_step).slice(2, 0, 2 * p.d_in, f_step);
  RC_CLASSIFY(!view.is_contiguous(), "non-contiguous view");
  const Tensor copy = Tensor::copy_of(view);
  // Bit for bit (CONTRACT §5; a NaN of a diverging case included).
  RC_ASSERT(same_bits(newton_apply(cell, view), newton_apply(cell, copy)));
  RC_ASSERT(same_bits(sequential_apply(cell, view), sequential_apply(cell, copy)));
}

TEST(Windowed, AWindowOfTEqualsTheUnwindowedSolveBitwise) {
  for (const auto& name : kCells) {
    const CellOptions variant = testing::label_options(name);
    const GeneratedProblem p{.cell = variant.cell, .gate_mix = variant.gate_mix, .dtype = DType::f32,
                             .batch = 2, .time = 100, .d_in = 3, .d_h = 6, .seed = 3};
    const Cell cell = p.make_cell();
    const Tensor x = p.make_input();
    EXPECT_EQ(newton_apply(cell, x, {.window_len = 100}).to_f64_vector(), newton_apply(cell, x).to_f64_vector());
    EXPECT_EQ(newton_apply(cell, x, {.window_len = 1000}).to_f64_vector(), newton_apply(cell, x).to_f64_vector());
  }
}

TEST(Windowed, SmallWindowsAreJudgedNotAssumed) {
  // Adaptive windows converge to the chained sequential answer (Agree); one fixed iteration per
  // 64-step window is a different fixed point, and the harness says so.
  const GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 512, .d_in = 3,
                           .d_h = 8, .weight_std = 0.7, .clamped = false, .seed = 4};
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const AgreementReport adaptive = verify_agreement(cell, x, {.config = {.window_len = 64}});
  EXPECT_EQ(adaptive.verdict, Verdict::agree) << adaptive.failure_message();
  const AgreementReport one_step = verify_agreement(
      cell, x, {.config = {.max_iters = 1, .residual_fail = std::nullopt, .window_len = 64}});
  EXPECT_EQ(one_step.verdict, Verdict::disagree) << one_step.failure_message();
}

// A window whose residual is NaN (a NaN input in the last window, the gate disabled): the merged
// stats keep the NaN however the windows before ended, and the judge does not say Agree.
TEST(Windowed, ANonFiniteWindowKeepsItsResidualInTheMergedStats) {
  const GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 256, .d_in = 3, .d_h = 8,
                           .seed = 6};
  const Cell cell = p.make_cell();
  Tensor x = p.make_input();
  x.data_as<float>()[(0 * 256 + 200) * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  const NewtonConfig config{.max_iters = 3, .residual_atol = std::nullopt, .residual_fail = std::nullopt,
                            .window_len = 64};
  NewtonStats stats;
  (void)newton_apply(cell, x, config, {}, &stats);
  EXPECT_FALSE(std::isfinite(stats.max_residual)) << stats.max_residual;
  const AgreementReport report = verify_agreement(cell, x, {.config = config});
  EXPECT_NE(report.verdict, Verdict::agree);
}

TEST(Windowed, WindowedGradientsMatchTheGlobalSolve) {
  for (const auto& name : kCells) {
    const CellOptions variant = testing::label_options(name);
    const GeneratedProblem p{.cell = variant.cell, .gate_mix = variant.gate_mix, .dtype = DType::f64,
                             .batch = 2, .time = 90, .d_in = 3, .d_h = 4, .with_h0 = true, .seed = 5};
    const Cell cell = p.make_cell();
    const Tensor x = p.make_input();
    const auto h0 = p.make_h0(cell.slots());
    const ApplyOptions options{.h0 = h0->view()};
    const Tensor g = Tensor::converted(newton_apply(cell, x, {}, options), DType::f64);  // any cotangent
    const NewtonConfig windowed{.window_len = 16};
    const auto a = newton_backward(cell, x, newton_forward(cell, x, windowed, options), g, windowed, options);
    const auto b = newton_backward(cell, x, newton_forward(cell, x, {}, options), g, {}, options);
    const Tolerance tol = tolerance_for({.dtype = DType::f64, .metric = Metric::gradient_coupled});
    EXPECT_TRUE(compare(a.x, b.x, tol).ok()) << name << compare(a.x, b.x, tol).describe();
    EXPECT_TRUE(compare(*a.h0, *b.h0, tol).ok()) << name;
    for (const auto& [param, grad] : a.parameters)
      EXPECT_TRUE(compare(grad, b.parameters.at(param), tol).ok()) << name << " " << param;
  }
}

// A strided view of the trajectory's shape over a fresh buffer: batch rows every other row of a
// (2B, T, state...) buffer, then time and batch swapped back from a (T, 2B, ...) one: not
// contiguous, no repeated address.
struct StridedOutput {
  Tensor buffer;
  TensorView view;
  StridedOutput(DType dtype, const Shape& shape) {
    Shape swapped = shape;
    swapped[0] = shape[1];
    swapped[1] = 2 * shape[0];
    buffer = Tensor(dtype, swapped);
    std::vector<std::int64_t> order(shape.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
    std::swap(order[0], order[1]);
    view = buffer.view().permute(order).slice(0, 0, 2 * shape[0], 2);
  }
};

void expect_same_gradients(const NewtonGradients& a, const NewtonGradients& b, const TensorView* a_x = nullptr) {
  RC_ASSERT(same_bits(a_x ? Tensor::copy_of(*a_x) : a.x, b.x));
  RC_ASSERT(a.h0.has_value() == b.h0.has_value());
  if (a.h0) RC_ASSERT(same_bits(*a.h0, *b.h0));
  RC_ASSERT(a.parameters.size() == b.parameters.size());
  for (const auto& [name, grad] : b.parameters) RC_ASSERT(same_bits(a.parameters.at(name), grad));
}

RC_GTEST_PROP(Outputs, IntoAStridedHostViewEqualsTheReturnedResultBitwise, ()) {
  const auto p = *gen_problem(120, kCells, {DType::f32, DType::bf16, DType::f64});
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  ApplyOptions options;
  if (h0) options.h0 = h0->view();
  const Shape trajectory = cell.trajectory_shape(p.batch, p.time);

  NewtonStats returned_stats, into_stats;
  const Tensor H = newton_apply(cell, x, {}, options, &returned_stats);
  const StridedOutput out(cell.dtype(), trajectory);
  RC_CLASSIFY(!out.view.is_contiguous(), "non-contiguous out");
  newton_apply_into(cell, x, out.view, {}, options, &into_stats);
  RC_ASSERT(same_bits(Tensor::copy_of(out.view), H));
  RC_ASSERT(into_stats.iters == returned_stats.iters);
  RC_ASSERT(into_stats.max_residual == returned_stats.max_residual);

  // Training: the forward into a view, the backward from that forward, ∇x into a view.
  const NewtonForward forward = newton_forward(cell, x, {}, options);
  const StridedOutput H_out(cell.dtype(), trajectory);
  const NewtonForward forward_into = newton_forward_into(cell, x, H_out.view, {}, options);
  RC_ASSERT(!forward_into.H.defined());
  RC_ASSERT(same_bits(Tensor::copy_of(H_out.view), forward.H));
  const Tensor g = Tensor::converted(H, DType::f64);  // any cotangent
  const NewtonGradients grads = newton_backward(cell, x, forward, g, {}, options);
  expect_same_gradients(newton_backward(cell, x, forward_into, g, {}, options), grads);
  const StridedOutput grad_x(cell.dtype(), x.shape());
  const NewtonGradients into = newton_backward_into(cell, x, forward, g, grad_x.view, {}, options);
  RC_ASSERT(!into.x.defined());
  expect_same_gradients(into, grads, &grad_x.view);
}

// Windowed Newton is its windows solved in turn: each window a solve of x[:, begin:end) from the
// previous window's last state (the caller's h0 first) with the full length's K, bit for bit,
// whether returned, written into a strided view, or the training forward (into a view: forward.H
// still holds the boundary states its backward re-solves from).
RC_GTEST_PROP(Windowed, TheWindowLoopIsItsWindowsSolvedInTurnBitwise, ()) {
  const auto p = *gen_problem(120, kCells, {DType::f32, DType::bf16, DType::f64});
  RC_PRE(p.time >= 2);
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  ApplyOptions options;
  if (h0) options.h0 = h0->view();
  // The gate off: a small fixed K on hard weights leaves its basin, which is not this claim.
  NewtonConfig config{.residual_fail = std::nullopt};
  if (*rc::gen::arbitrary<bool>()) config.max_iters = *rc::gen::inRange<std::int64_t>(1, 6);
  const std::int64_t window = *rc::gen::inRange<std::int64_t>(1, p.time);
  NewtonConfig windowed = config;
  windowed.window_len = window;
  RC_TAG(config.max_iters ? "fixed K" : "adaptive");

  NewtonConfig each = config;  // one window's: the K of the full length
  if (!config.max_iters)
    each.newton_iters_by_t = {{1, resolve_newton_iters(config, cell.spec(), cell.dtype(), p.time).k}};
  const Shape trajectory = cell.trajectory_shape(p.batch, p.time);
  Tensor expected(cell.dtype(), trajectory);
  std::optional<Tensor> state = h0;
  std::int64_t most_iters = 0;
  for (std::int64_t begin = 0; begin < p.time; begin += window) {
    const std::int64_t end = std::min(p.time, begin + window);
    ApplyOptions wo;
    if (state) wo.h0 = state->view();
    NewtonStats ws;
    const Tensor Hw = newton_apply(cell, x.view().slice(1, begin, end), each, wo, &ws);
    copy_into(expected.view().slice(1, begin, end), Hw);
    state = Tensor::copy_of(Hw.view().select(1, end - begin - 1));
    most_iters = std::max(most_iters, ws.iters);
  }
  NewtonStats stats;
  RC_ASSERT(same_bits(newton_apply(cell, x, windowed, options, &stats), expected));
  RC_ASSERT(stats.iters == most_iters);
  const StridedOutput out(cell.dtype(), trajectory);
  newton_apply_into(cell, x, out.view, windowed, options);
  RC_ASSERT(same_bits(Tensor::copy_of(out.view), expected));
  const StridedOutput H_out(cell.dtype(), trajectory);
  const NewtonForward forward_into = newton_forward_into(cell, x, H_out.view, windowed, options);
  RC_ASSERT(same_bits(Tensor::copy_of(H_out.view), expected));
  RC_ASSERT(same_bits(forward_into.H, expected));
  const Tensor g = Tensor::converted(expected, DType::f64);  // any cotangent
  expect_same_gradients(newton_backward(cell, x, forward_into, g, windowed, options),
                        newton_backward(cell, x, newton_forward(cell, x, windowed, options), g, windowed, options));
}

TEST(Outputs, WrongShapeDtypeRepeatedAddressesOrAliasingAreRefusedByName) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 5, .d_in = 3, .d_h = 4, .seed = 9};
  const Tensor x = p.make_input();
  auto refused = [&](const auto& call, const std::string& argument, const std::string& rule_part) {
    try {
      call();
      ADD_FAILURE() << argument << ": accepted";
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(e.rule().find(rule_part), std::string::npos) << e.what();
    }
  };
  const Tensor wrong_shape(DType::f32, {2, 4, 4});
  refused([&] { newton_apply_into(cell, x, wrong_shape); }, "out", "shape (2, 5, 4)");
  const Tensor wrong_dtype(DType::f64, {2, 5, 4});
  refused([&] { newton_apply_into(cell, x, wrong_dtype); }, "out", "dtype f32");
  // A broadcast view (zero stride over batch) holds two elements at one address.
  const Tensor one_row(DType::f32, {1, 5, 4});
  const TensorView broadcast(one_row.data(), DType::f32, {2, 5, 4}, {0, 4, 1});
  refused([&] { newton_apply_into(cell, x, broadcast); }, "out", "non-overlapping strides");
  // Refused before any work: nothing was written.
  for (const Tensor* untouched : {&wrong_shape, &wrong_dtype, &one_row})
    for (double v : untouched->to_f64_vector()) EXPECT_EQ(v, 0.0);
  // x's own memory (the same bytes seen as the output's dtype and shape).
  const Tensor big(DType::f32, {2, 5, 4});
  const TensorView x_in_big(big.data(), DType::f32, {2, 5, 3}, {20, 4, 1});
  refused([&] { newton_apply_into(cell, x_in_big, big); }, "out", "must not share memory with x");
  refused([&] { (void)newton_forward_into(cell, x_in_big, big); }, "H_out", "must not share memory with x");
  const Tensor H = newton_apply(cell, x);
  const NewtonForward forward = newton_forward(cell, x);
  refused([&] { (void)newton_backward_into(cell, x, forward, H, Tensor(DType::f32, {2, 5, 4})); }, "grad_x",
          "shape (2, 5, 3)");
  // grad_x inside grad_H's buffer.
  const Tensor g(DType::f32, {2, 5, 4});
  const TensorView grad_x_in_g(g.data(), DType::f32, {2, 5, 3}, {20, 4, 1});
  refused([&] { (void)newton_backward_into(cell, x, forward, g, grad_x_in_g); }, "grad_x",
          "must not share memory with grad_H");
  // A CUDA output where no CUDA device can run: UnsupportedPath naming it, before any work.
  bool cuda_usable = true;
  try {
    (void)cuda_cached_memory(0);  // UnsupportedPath without a usable CUDA device
  } catch (const UnsupportedPath&) {
    cuda_usable = false;
  }
  if (!cuda_usable) {
    const TensorView on_device(big.data(), DType::f32, {2, 5, 4}, {}, Device::cuda, 0);
    try {
      newton_apply_into(cell, x, on_device);
      ADD_FAILURE() << "a CUDA out was accepted without a CUDA device";
    } catch (const UnsupportedPath& e) {
      EXPECT_NE(std::string(e.what()).find("out: is a CUDA tensor"), std::string::npos) << e.what();
    }
  }
}

// max_residual is the residual of the trajectory given: of a solve's returned f64 trajectory, the
// solve's own final max|F| bit for bit (one iteration: far above residual_atol; converged: at or
// below it); auto on host tensors is the CPU row; an H of another shape or an integer H is refused
// naming H; the CUDA backend without a usable device is UnsupportedPath.
TEST(MaxResidual, IsTheResidualOfTheTrajectoryGivenOnTheBackendAskedFor) {
  const GeneratedProblem p{.cell = "lstm", .dtype = DType::f64, .batch = 2, .time = 40, .d_in = 3, .d_h = 5,
                           .with_h0 = true, .seed = 19};
  const auto made = p.make();
  const ApplyOptions options = made.options();
  const double atol = default_residual_atol(DType::f64);
  NewtonStats one_stats, converged_stats;
  const Tensor one = newton_apply(made.cell, made.x,
                                  {.max_iters = 1, .scan_backend = ScanBackend::cpu, .residual_atol = std::nullopt,
                                   .residual_fail = std::nullopt},
                                  options, &one_stats);
  const Tensor converged = newton_apply(made.cell, made.x, {.scan_backend = ScanBackend::cpu}, options, &converged_stats);
  EXPECT_EQ(max_residual(made.cell, made.x, one, options, ScanBackend::cpu), one_stats.max_residual);
  EXPECT_GT(one_stats.max_residual, atol);
  EXPECT_EQ(max_residual(made.cell, made.x, converged, options), converged_stats.max_residual);
  EXPECT_LE(converged_stats.max_residual, atol);
  const auto refused = [&](const TensorView& H, const std::string& rule_part) {
    try {
      (void)max_residual(made.cell, made.x, H, options);
      ADD_FAILURE() << "accepted: " << rule_part;
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), "H") << e.what();
      EXPECT_NE(e.rule().find(rule_part), std::string::npos) << e.what();
    }
  };
  refused(Tensor::copy_of(one.view().slice(1, 0, 39)).view(), "must have shape (2, 40, 2, 5)");
  const Tensor integers(DType::i32, one.shape());
  refused(integers.view(), "floating");
  bool cuda_usable = true;
  try {
    (void)cuda_cached_memory(0);
  } catch (const UnsupportedPath&) {
    cuda_usable = false;
  }
  if (!cuda_usable)
    EXPECT_THROW((void)max_residual(made.cell, made.x, one, options, ScanBackend::cuda), UnsupportedPath);
}

TEST(Windowed, WindowsWithPackingAreRefused) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 5, 2});
  const Tensor cu = Tensor::from_values(DType::i32, {3}, std::vector<double>{0, 2, 5});
  EXPECT_THROW((void)newton_apply(cell, x, {.window_len = 2}, {.cu_seqlens = cu.view()}), ContractViolation);
}

// The window's old name, NewtonConfig::chunk_len, is refused by every entry point that
// validates a configuration, naming the new one; nothing is solved with it.
TEST(Windowed, TheOldNameChunkLenIsRefusedNamingWindowLen) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 2, .d_h = 3}, DType::f32, 1);
  const Tensor x(DType::f32, {1, 8, 2});
  NewtonConfig old;
  old.chunk_len = 4;
  const auto expect_refused = [&](auto&& call, const char* entry) {
    try {
      call();
      ADD_FAILURE() << entry << " accepted NewtonConfig::chunk_len";
    } catch (const ContractViolation& e) {
      EXPECT_EQ(e.argument(), "chunk_len") << entry;
      EXPECT_NE(std::string(e.what()).find("window_len"), std::string::npos) << entry << ": " << e.what();
    }
  };
  expect_refused([&] { (void)newton_apply(cell, x, old); }, "newton_apply");
  expect_refused([&] { (void)newton_forward(cell, x, old); }, "newton_forward");
}

}  // namespace
}  // namespace pararnn
