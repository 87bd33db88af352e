// Properties tying the production cells to the oracle one step at a time: the analytic Jacobian
// of cells/ equals the oracle's automatic-differentiation Jacobian, and one production step
// equals one oracle step. Built once per backend (backend.hpp): on the host the step is the cell
// math called directly, on cuda it is the residual kernel (F and J of a one-step trajectory whose
// h0 is h_prev), the code the CUDA Newton loop runs.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"
#if PARARNN_TEST_ON_CUDA
#include <cuda_runtime_api.h>

#include "pararnn/kernels/cell_residual.hpp"
#endif

namespace pararnn {
namespace {

using testing::gen_problem;

#if PARARNN_TEST_ON_CUDA
// The cells the kernels are instantiated for.
template <class CellMath>
constexpr bool kHasKernels = kernels::kHasNewtonKernels<CellMath>;

// One step of every channel on the device: F and J of the one-step trajectory H = 0 whose
// initial state is h_prev, so F = f(h_prev, x) exactly. Arrays are [k][c], [g][c], [s][c].
template <class CellMath, class ComputeT>
void device_step(std::int64_t D, const std::vector<ComputeT>& rec, const std::vector<ComputeT>& wx,
                 const std::vector<ComputeT>& h_prev, std::vector<ComputeT>& h_new,
                 std::vector<ComputeT>& jac) {
  constexpr int S = CellMath::kSlots;
  auto ok = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) RC_FAIL(fmt::format("{}: {}", what, cudaGetErrorString(e)));
  };
  struct Buffers {
    std::vector<void*> owned;
    ~Buffers() {
      for (void* p : owned) cudaFree(p);
    }
  } buffers;
  auto device = [&](std::size_t bytes) {
    void* p = nullptr;
    ok(cudaMalloc(&p, bytes), "cudaMalloc");
    buffers.owned.push_back(p);
    return static_cast<ComputeT*>(p);
  };
  auto to_device = [&](const std::vector<ComputeT>& host) {
    ComputeT* p = device(host.size() * sizeof(ComputeT));
    ok(cudaMemcpy(p, host.data(), host.size() * sizeof(ComputeT), cudaMemcpyHostToDevice), "upload");
    return p;
  };
  const std::size_t n = static_cast<std::size_t>(S * D);
  ComputeT* d_H = device(n * sizeof(ComputeT));
  ok(cudaMemset(d_H, 0, n * sizeof(ComputeT)), "cudaMemset");
  ComputeT* d_F = device(n * sizeof(ComputeT));
  ComputeT* d_J = device(n * S * sizeof(ComputeT));
  kernels::CellResidualArgs<ComputeT> a{.wx = to_device(wx), .recurrent = to_device(rec),
                                        .h0 = to_device(h_prev), .H = d_H, .residual = d_F,
                                        .jac = d_J, .batch = 1, .time = 1, .channels = D};
  ok(kernels::launch_cell_residual<CellMath, ComputeT>(a, nullptr, 0, cudaStream_t{}),
     "launch_cell_residual");
  h_new.resize(n);
  jac.resize(n * S);
  ok(cudaMemcpy(h_new.data(), d_F, n * sizeof(ComputeT), cudaMemcpyDeviceToHost), "download F");
  ok(cudaMemcpy(jac.data(), d_J, n * S * sizeof(ComputeT), cudaMemcpyDeviceToHost), "download J");
}
#endif

// One production step at (b, t) from `h_prev` (slot-major), with its Jacobian, in ComputeT, on
// the backend under test.
template <class ComputeT>
void production_step(const Cell& cell, const Tensor& x, std::int64_t b, std::int64_t t,
                     const std::vector<double>& h_prev, std::vector<double>& h_new,
                     std::vector<double>& jacobian) {
  dispatch_cell(cell.kind(), [&]<class CellMath>() {
    constexpr int S = CellMath::kSlots, G = CellMath::kGates;
    [[maybe_unused]] constexpr int RC = CellMath::kRecurrent + CellMath::kConstants;  // values
    const std::int64_t D = cell.d_h();
    h_new.assign(static_cast<std::size_t>(S * D), 0.0);
    jacobian.assign(static_cast<std::size_t>(S * D * S * D), 0.0);
    const std::vector<double> values = cell.channel_values();  // [k][c], clamped
    // Per-channel inputs in the layouts of the kernels: rec [k][c], wx [g][c], h_prev [s][c].
    std::vector<ComputeT> rec(values.begin(), values.end()), wx(static_cast<std::size_t>(G * D)),
        hp(static_cast<std::size_t>(S * D)), hn, jac;
    for (std::int64_t c = 0; c < D; ++c) {
      // The gate inputs from the cell's input affines (and CfC's Δt), as the backends form them.
      for (const AffineBlock& block : cell.spec().affine)
        for (int g = 0; g < block.gates; ++g) {
          const std::int64_t row = g * D + c;
          ComputeT acc = static_cast<ComputeT>(cell.parameter(std::string(block.bias)).load({row}));
          for (std::int64_t i = 0; i < cell.affine_inputs(block); ++i)
            acc += static_cast<ComputeT>(cell.parameter(std::string(block.weight)).load({row, i})) *
                   static_cast<ComputeT>(x.load({b, t, i}));
          wx[static_cast<std::size_t>((block.first_gate + g) * D + c)] = acc;
        }
      if (cell.spec().dt_gate >= 0)
        wx[static_cast<std::size_t>(cell.spec().dt_gate * D + c)] =
            static_cast<ComputeT>(std::max(x.load({b, t, cell.d_in() - 1}), cells::kCfcDtFloor));
      for (int s = 0; s < S; ++s)
        hp[static_cast<std::size_t>(s * D + c)] = static_cast<ComputeT>(h_prev[static_cast<std::size_t>(s * D + c)]);
    }
#if PARARNN_TEST_ON_CUDA
    if constexpr (kHasKernels<CellMath>)
      device_step<CellMath, ComputeT>(D, rec, wx, hp, hn, jac);
    else
      RC_FAIL(fmt::format("no CUDA kernels for cell {}", cell.name()));
#else
    hn.resize(static_cast<std::size_t>(S * D));
    jac.resize(static_cast<std::size_t>(S * S * D));
    for (std::int64_t c = 0; c < D; ++c) {
      ComputeT r_c[RC], wx_c[G], hp_c[S], hn_c[S], jac_c[S * S];
      for (int k = 0; k < RC; ++k) r_c[k] = rec[static_cast<std::size_t>(k * D + c)];
      for (int g = 0; g < G; ++g) wx_c[g] = wx[static_cast<std::size_t>(g * D + c)];
      for (int s = 0; s < S; ++s) hp_c[s] = hp[static_cast<std::size_t>(s * D + c)];
      CellMath::step(r_c, wx_c, hp_c, hn_c, jac_c);
      for (int s = 0; s < S; ++s) hn[static_cast<std::size_t>(s * D + c)] = hn_c[s];
      for (int q = 0; q < S * S; ++q) jac[static_cast<std::size_t>(q * D + c)] = jac_c[q];
    }
#endif
    // Back to the oracle's dense layout: h_new [s·D + c], J [(o·D + c)·S·D + i·D + c].
    for (std::int64_t c = 0; c < D; ++c) {
      for (int s = 0; s < S; ++s)
        h_new[static_cast<std::size_t>(s * D + c)] = hn[static_cast<std::size_t>(s * D + c)];
      for (int o = 0; o < S; ++o)
        for (int i = 0; i < S; ++i)
          jacobian[static_cast<std::size_t>((o * D + c) * S * D + i * D + c)] =
              jac[static_cast<std::size_t>((o * S + i) * D + c)];
    }
  });
}

RC_GTEST_PROP(Jacobian, AnalyticJacobianEqualsOracleAutodiff, ()) {
  const auto p = *gen_problem(4, testing::backend_cells(testing::kPerChannelCellLabels), {DType::f32, DType::f64});
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const Case problem = cell.make_case(x);
  const std::int64_t b = *rc::gen::inRange<std::int64_t>(0, p.batch);
  const std::int64_t t = *rc::gen::inRange<std::int64_t>(0, p.time);
  std::vector<double> h_prev(static_cast<std::size_t>(cell.slots() * cell.d_h()));
  for (auto& v : h_prev) v = *rc::gen::inRange(-900, 901) / 1000.0;
  if (cell.kind() == CellKind::slstm)  // the normalizer slot n >= 0 (so that n' + eps > 0)
    for (std::int64_t c = 0; c < cell.d_h(); ++c) h_prev[static_cast<std::size_t>(cell.d_h() + c)] = std::abs(h_prev[static_cast<std::size_t>(cell.d_h() + c)]);
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
