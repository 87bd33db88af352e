// Properties tying the production cells to the oracle one step at a time: the analytic Jacobian
// of cells/ equals the oracle's automatic-differentiation Jacobian, and one production step
// equals one oracle step.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "generators.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;

// One production step at (b, t) from `h_prev` (slot-major), with its Jacobian, in ComputeT.
template <class ComputeT>
void production_step(const Cell& cell, const Tensor& x, std::int64_t b, std::int64_t t,
                     const std::vector<double>& h_prev, std::vector<double>& h_new,
                     std::vector<double>& jacobian) {
  dispatch_cell(cell.kind(), [&]<class CellMath>() {
    constexpr int S = CellMath::kSlots, G = CellMath::kGates, R = CellMath::kRecurrent;
    const std::int64_t D = cell.d_h();
    h_new.assign(static_cast<std::size_t>(S * D), 0.0);
    jacobian.assign(static_cast<std::size_t>(S * D * S * D), 0.0);
    const auto cap = cell.max_recurrent_norm();
    for (std::int64_t c = 0; c < D; ++c) {
      ComputeT rec[R], wx[G], hp[S], hn[S], jac[S * S];
      for (int k = 0; k < R; ++k) {
        double v = cell.parameter(std::string(cell.spec().recurrent[k])).load({c});
        if (cap) v = std::clamp(v, -*cap, *cap);
        rec[k] = static_cast<ComputeT>(v);
      }
      for (int g = 0; g < G; ++g) {
        ComputeT acc = static_cast<ComputeT>(cell.parameter("W_x.bias").load({g * D + c}));
        for (std::int64_t i = 0; i < cell.d_in(); ++i)
          acc += static_cast<ComputeT>(cell.parameter("W_x.weight").load({g * D + c, i})) *
                 static_cast<ComputeT>(x.load({b, t, i}));
        wx[g] = acc;
      }
      for (int s = 0; s < S; ++s) hp[s] = static_cast<ComputeT>(h_prev[static_cast<std::size_t>(s * D + c)]);
      CellMath::step(rec, wx, hp, hn, jac);
      for (int s = 0; s < S; ++s) h_new[static_cast<std::size_t>(s * D + c)] = hn[s];
      for (int o = 0; o < S; ++o)
        for (int i = 0; i < S; ++i)
          jacobian[static_cast<std::size_t>((o * D + c) * S * D + i * D + c)] = jac[o * S + i];
    }
  });
}

RC_GTEST_PROP(Jacobian, AnalyticJacobianEqualsOracleAutodiff, ()) {
  const auto p = *gen_problem(4, {"gru", "lstm", "nlru"}, {DType::f32, DType::f64});
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const Case problem = cell.make_case(x);
  const std::int64_t b = *rc::gen::inRange<std::int64_t>(0, p.batch);
  const std::int64_t t = *rc::gen::inRange<std::int64_t>(0, p.time);
  std::vector<double> h_prev(static_cast<std::size_t>(cell.slots() * cell.d_h()));
  for (auto& v : h_prev) v = *rc::gen::inRange(-900, 901) / 1000.0;
  std::vector<double> h_new, jac;
  if (p.dtype == DType::f64)
    production_step<double>(cell, x, b, t, h_prev, h_new, jac);
  else
    production_step<float>(cell, x, b, t, h_prev, h_new, jac);
  const reference::OracleStep expected = reference::oracle_step_with_jacobian(problem, b, t, h_prev);
  const Tolerance tol = tolerance_for({.dtype = p.dtype, .metric = Metric::jacobian, .cell = p.cell});
  RC_ASSERT(expected.jacobian.size() == jac.size());
  for (std::size_t i = 0; i < jac.size(); ++i) {
    if (!(std::abs(jac[i] - expected.jacobian[i]) <= tol.atol + tol.rtol * std::abs(expected.jacobian[i])))
      RC_FAIL(fmt::format("J[{}]: analytic {:.17g} vs autodiff {:.17g}", i, jac[i], expected.jacobian[i]));
  }
  for (std::size_t i = 0; i < h_new.size(); ++i)
    RC_ASSERT(std::abs(h_new[i] - expected.h_new[i]) <= tol.atol + tol.rtol * std::abs(expected.h_new[i]));
}

}  // namespace
}  // namespace pararnn
