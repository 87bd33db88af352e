// Claims about the implicit adjoint that need no oracle: it equals central finite differences
// of the true (sequential, f64) loss on tiny cases; recompute = true is bitwise recompute =
// false; ∇h0 exists exactly when h0 is given; packed gradients are per segment. Built per
// backend (backend.hpp): gradient_tests_host and, with CUDA, gradient_tests_cuda.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

Tensor normal(DType dtype, Shape shape, std::uint64_t seed, double scale = 1.0) {
  SplitMix64 rng(seed);
  Tensor t(dtype, shape);
  Tensor flat = t.reshaped({t.numel()});
  for (std::int64_t i = 0; i < t.numel(); ++i) flat.store({i}, rng.normal(0.0, scale));
  return t;
}

// The training configuration on the backend under test.
NewtonConfig on_backend(NewtonConfig config = {}) {
  config.scan_backend = testing::kTestBackend;
  return config;
}

double loss(const Tensor& H, const Tensor& g) {
  const auto h = H.to_f64_vector(), w = g.to_f64_vector();
  double sum = 0.0;
  for (std::size_t i = 0; i < h.size(); ++i) sum += h[i] * w[i];
  return sum;
}

// Parameter: a cell label of testing::kPerChannelCellLabels.
class EveryCell : public ::testing::TestWithParam<std::string> {
 protected:
  // `options` with the cell (and gate_mix) of the label under test.
  CellOptions labelled(CellOptions options) const {
    const CellOptions variant = testing::label_options(GetParam());
    options.cell = variant.cell;
    options.gate_mix = variant.gate_mix;
    return options;
  }
};

// Every element of x, h0 and every parameter: the adjoint equals the central finite difference
// of the f64 sequential loss Σ g ⊙ H (the gradcheck band of the contract table).
void expect_adjoint_equals_finite_differences(Cell& cell, Tensor& x, Tensor& h0, const Tensor& g) {
  const NewtonConfig config = on_backend();
  const ApplyOptions options{.h0 = h0.view()};
  const NewtonForward forward = newton_forward(cell, x, config, options);
  const NewtonGradients grads = newton_backward(cell, x, forward, g, config, options);
  const Tolerance tol = tolerance_for({.dtype = DType::f64, .metric = Metric::gradcheck});
  const double eps = 1e-6;
  auto check = [&](const std::string& what, Tensor& tensor, const Tensor& adjoint) {
    Tensor flat = tensor.reshaped({tensor.numel()});
    const Tensor adj = adjoint.reshaped({adjoint.numel()});
    for (std::int64_t i = 0; i < tensor.numel(); ++i) {
      const double v = flat.load({i});
      flat.store({i}, v + eps);
      const double up = loss(sequential_apply(cell, x, options), g);
      flat.store({i}, v - eps);
      const double down = loss(sequential_apply(cell, x, options), g);
      flat.store({i}, v);
      const double fd = (up - down) / (2 * eps);
      EXPECT_LE(std::abs(adj.load({i}) - fd), tol.atol + tol.rtol * std::abs(fd))
          << what << "[" << i << "]: adjoint " << adj.load({i}) << " vs finite difference " << fd;
    }
  };
  check("x", x, grads.x);
  ASSERT_TRUE(grads.h0.has_value());
  check("h0", h0, *grads.h0);
  // Every trainable tensor of the cell has a gradient (the affines and the recurrent ones).
  for (const ParameterSpec& p : cell.spec().parameters)
    EXPECT_TRUE(grads.parameters.contains(std::string(p.name))) << "no gradient for " << p.name;
  for (const auto& [name, grad] : grads.parameters) {
    Tensor param = Tensor::copy_of(cell.parameter(name));
    // Perturb through the cell: swap the parameter in, evaluate, restore.
    Tensor flat = param.reshaped({param.numel()});
    const Tensor adj = grad.reshaped({grad.numel()});
    for (std::int64_t i = 0; i < param.numel(); ++i) {
      const double v = flat.load({i});
      flat.store({i}, v + eps);
      cell.set_parameter(name, Tensor::copy_of(param));
      const double up = loss(sequential_apply(cell, x, options), g);
      flat.store({i}, v - eps);
      cell.set_parameter(name, Tensor::copy_of(param));
      const double down = loss(sequential_apply(cell, x, options), g);
      flat.store({i}, v);
      cell.set_parameter(name, Tensor::copy_of(param));
      const double fd = (up - down) / (2 * eps);
      EXPECT_LE(std::abs(adj.load({i}) - fd), tol.atol + tol.rtol * std::abs(fd))
          << name << "[" << i << "]: adjoint " << adj.load({i}) << " vs finite difference " << fd;
    }
  }
}

// Recompute (level 2) against the stored trajectory: H, ∇x and every parameter gradient bitwise.
void expect_recompute_is_bitwise(const Cell& cell, const Tensor& x, const Tensor& g) {
  SCOPED_TRACE(std::string(dtype_name(cell.dtype())));
  const NewtonForward kept = newton_forward(cell, x, on_backend({.recompute = false}));
  const NewtonForward dropped = newton_forward(cell, x, on_backend({.recompute = true}));
  EXPECT_GT(kept.saved_bytes(), 0u);
  EXPECT_EQ(dropped.saved_bytes(), 0u);
  ASSERT_EQ(kept.H.to_f64_vector(), dropped.H.to_f64_vector());
  const NewtonGradients a = newton_backward(cell, x, kept, g, on_backend({.recompute = false}));
  const NewtonGradients b = newton_backward(cell, x, dropped, g, on_backend({.recompute = true}));
  EXPECT_EQ(a.x.to_f64_vector(), b.x.to_f64_vector());
  for (const auto& [name, grad] : a.parameters)
    EXPECT_EQ(grad.to_f64_vector(), b.parameters.at(name).to_f64_vector()) << name;
}

// Two segments packed (cu_seqlens 0, 4, 9 of x (1, 9, d_in), h0 of two rows) against each
// segment solved alone from its h0 row: its ∇x and its ∇h0 row, within the f64 coupled-gradient
// tolerance. The first segment is the one an adjoint carried across the segment end corrupts
// (the reverse scan runs from the second into it).
void expect_packed_gradients_per_segment(const Cell& cell, const Tensor& x, const Tensor& g, const Tensor& h0) {
  const Tensor cu = Tensor::from_values(DType::i64, {3}, std::vector<double>{0, 4, 9});
  const ApplyOptions packed{.h0 = h0.view(), .cu_seqlens = cu.view()};
  const auto all = newton_backward(cell, x, newton_forward(cell, x, on_backend(), packed), g, on_backend(), packed);
  const Tolerance tol = tolerance_for({.dtype = DType::f64, .metric = Metric::gradient_coupled});
  const std::int64_t bounds[] = {0, 4, 9};
  for (std::int64_t s = 0; s < 2; ++s) {
    SCOPED_TRACE("segment " + std::to_string(s));
    const Tensor xs = Tensor::copy_of(x.view().slice(1, bounds[s], bounds[s + 1]));
    const Tensor gs = Tensor::copy_of(g.view().slice(1, bounds[s], bounds[s + 1]));
    const Tensor h0s = Tensor::copy_of(h0.view().slice(0, s, s + 1));
    const ApplyOptions alone{.h0 = h0s.view()};
    const auto one = newton_backward(cell, xs, newton_forward(cell, xs, on_backend(), alone), gs, on_backend(), alone);
    const auto a = Tensor::copy_of(all.x.view().slice(1, bounds[s], bounds[s + 1])).to_f64_vector();
    const auto b = one.x.to_f64_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol.atol + tol.rtol * std::abs(b[i]));
    const auto c = Tensor::copy_of(all.h0->view().slice(0, s, s + 1)).to_f64_vector();
    const auto d = one.h0->to_f64_vector();
    for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], d[i], tol.atol + tol.rtol * std::abs(d[i]));
  }
}

TEST_P(EveryCell, AdjointEqualsCentralFiniteDifferences) {
  // No clamp: the clamp's kink at |a| = cap is not differentiable.
  Cell cell = Cell::initialise(labelled({.d_in = 2, .d_h = 3,
                                         .max_recurrent_norm = std::nullopt, .weight_std = 0.6}),
                               DType::f64, 3);
  Tensor x = normal(DType::f64, {2, 6, 2}, 4);
  Tensor h0 = normal(DType::f64, {2, cell.slots(), 3}, 5, 0.5);
  const Tensor g = normal(DType::f64, cell.trajectory_shape(2, 6), 6);
  expect_adjoint_equals_finite_differences(cell, x, h0, g);
}

TEST_P(EveryCell, RecomputeIsBitwiseEqual) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Cell cell = Cell::initialise(labelled({.d_in = 3, .d_h = 70}), dtype, 7);
    const Tensor x = normal(dtype, {2, 300, 3}, 8);
    const Tensor g = normal(dtype, cell.trajectory_shape(2, 300), 9);
    expect_recompute_is_bitwise(cell, x, g);
  }
}

TEST_P(EveryCell, InitialStateGradientExistsExactlyWhenGiven) {
  const Cell cell = Cell::initialise(labelled({.d_in = 2, .d_h = 4}), DType::f32, 1);
  const Tensor x = normal(DType::f32, {1, 7, 2}, 2);
  const Tensor g = normal(DType::f32, cell.trajectory_shape(1, 7), 3);
  EXPECT_FALSE(newton_backward(cell, x, newton_forward(cell, x, on_backend()), g, on_backend()).h0.has_value());
  const Tensor h0 = normal(DType::f32, {1, cell.slots(), 4}, 4);
  const ApplyOptions with_h0{.h0 = h0.view()};
  const auto grads = newton_backward(cell, x, newton_forward(cell, x, on_backend(), with_h0), g, on_backend(), with_h0);
  ASSERT_TRUE(grads.h0.has_value());
  EXPECT_EQ(grads.h0->shape(), h0.shape());
}

TEST_P(EveryCell, PackedGradientsArePerSegment) {
  // Two segments packed ≡ each alone: their ∇x and ∇h0 rows.
  const Cell cell = Cell::initialise(labelled({.d_in = 2, .d_h = 4}), DType::f64, 1);
  const Tensor x = normal(DType::f64, {1, 9, 2}, 2);
  const Tensor g = normal(DType::f64, cell.trajectory_shape(1, 9), 3);
  const Tensor h0 = normal(DType::f64, {2, cell.slots(), 4}, 4, 0.5);
  expect_packed_gradients_per_segment(cell, x, g, h0);
}

INSTANTIATE_TEST_SUITE_P(Cells, EveryCell, ::testing::ValuesIn(testing::backend_cells(testing::kPerChannelCellLabels)),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), ':', '_');
                           return name;
                         });

// The dense-Jacobian cells (one adjoint mechanism: the reverse walk / reverse dense scan with
// dual VJPs, cpu/dense.cpp and cuda/dense.cpp), M2RNN (cpu/matrix_state.cpp's reverse walk with
// its closed-form VJP) and RWKV-7 (cpu/exact_linear.cpp's exact reverse walk, closed-form gate
// VJP), on the backend under test (the same mechanisms on the device: cuda/dense.cpp,
// cuda/matrix_state.cpp, cuda/exact_linear.cpp).
using testing::DenseVariant;

class EveryDenseCell : public ::testing::TestWithParam<DenseVariant> {
 protected:
  CellOptions options(std::int64_t d_in, std::optional<double> weight_std = std::nullopt,
                      std::optional<double> cap = 0.5) const {
    return testing::dense_variant_options(GetParam(), d_in, weight_std, cap);
  }
  // h0 of B rows: the trajectory shape of one step without its time axis.
  static Shape h0_shape(const Cell& cell, std::int64_t batch) {
    Shape s = cell.trajectory_shape(batch, 1);
    s.erase(s.begin() + 1);
    return s;
  }
};

TEST_P(EveryDenseCell, AdjointEqualsCentralFiniteDifferences) {
  // No clamp: the clamp's kink at |a| = cap is not differentiable.
  Cell cell = Cell::initialise(options(2, 0.6, std::nullopt), DType::f64, 3);
  Tensor x = normal(DType::f64, {2, 6, 2}, 4);
  Tensor h0 = normal(DType::f64, h0_shape(cell, 2), 5, 0.5);
  const Tensor g = normal(DType::f64, cell.trajectory_shape(2, 6), 6);
  expect_adjoint_equals_finite_differences(cell, x, h0, g);
}

TEST_P(EveryDenseCell, RecomputeIsBitwiseEqual) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Cell cell = Cell::initialise(options(3), dtype, 7);
    const Tensor x = normal(dtype, {2, 40, 3}, 8);
    const Tensor g = normal(dtype, cell.trajectory_shape(2, 40), 9);
    expect_recompute_is_bitwise(cell, x, g);
  }
}

// The variants that pack (M2RNN and RWKV-7 refuse cu_seqlens, as pararnn-torch does: their
// refusal is RefusedInputsAndPaths / RefusesPackingAndWindowsButTrains).
class EveryPackingDenseCell : public EveryDenseCell {};

TEST_P(EveryPackingDenseCell, PackedGradientsArePerSegment) {
  // Two segments packed ≡ each alone: their ∇x and ∇h0 rows.
  const Cell cell = Cell::initialise(options(2), DType::f64, 1);
  const std::int64_t d_h = GetParam().d_h;
  const Tensor x = normal(DType::f64, {1, 9, 2}, 2);
  const Tensor g = normal(DType::f64, cell.trajectory_shape(1, 9), 3);
  const Tensor h0 = normal(DType::f64, {2, cell.slots(), d_h}, 4, 0.5);
  expect_packed_gradients_per_segment(cell, x, g, h0);
}

std::vector<DenseVariant> packing_variants() {
  std::vector<DenseVariant> out;
  for (const DenseVariant& v : testing::kDenseVariants)
    if (v.packs) out.push_back(v);
  return out;
}

INSTANTIATE_TEST_SUITE_P(DenseCells, EveryDenseCell, ::testing::ValuesIn(testing::kDenseVariants),
                         [](const auto& info) { return std::string(info.param.name); });
INSTANTIATE_TEST_SUITE_P(DenseCells, EveryPackingDenseCell, ::testing::ValuesIn(packing_variants()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pararnn
