// launch_cell_residual against a host evaluation with the same cell math: F and J everywhere
// (heads and h0 rows included), max|F| equal to the maximum of the F it wrote, NaN propagation,
// the residual of the sequential kernel's own trajectory, and the optional outputs. The
// adjoint's Jacobian kernel (cell_vjp.hpp), reading the compute type, against
// launch_cell_residual in double on the widened inputs: the same J within the f64 kernel τ, and
// the seed μ the widened grad_H bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/kernels/cell_residual.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/sequential.hpp"

namespace pararnn::kernels::test {
namespace {

template <class Case>
class CellResidualKernel : public ::testing::Test {};
TYPED_TEST_SUITE(CellResidualKernel, CellCases, CellCaseName);

// A trajectory to evaluate: uniform in [−1, 1], rounded to storage.
template <class StorageT>
std::vector<StorageT> random_trajectory(std::size_t n, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<StorageT> H(n);
  for (auto& v : H) v = static_cast<StorageT>(rng.uniform(-1.0, 1.0));
  return H;
}

// A random trajectory inside the cell's state domain (channels D): sLSTM's normalizer n (slot 1)
// is never negative in a true trajectory, and a negative n puts n + eps near 0, where h = o c /
// (n + eps) is ill-conditioned and host and device libm disagree far beyond τ.
template <class CellMath, class StorageT>
std::vector<StorageT> random_state_trajectory(std::size_t n, std::int64_t channels, std::uint64_t seed) {
  std::vector<StorageT> H = random_trajectory<StorageT>(n, seed);
  if constexpr (std::is_same_v<CellMath, cells::SlstmDiagMath>)
    for (std::size_t i = 0; i < n; ++i)
      if ((static_cast<std::int64_t>(i) / channels) % CellMath::kSlots == 1) H[i] = static_cast<StorageT>(std::fabs(static_cast<double>(H[i])));
  return H;
}

template <class CellMath, class StorageT>
struct ResidualRun {
  using ComputeT = ComputeOf<StorageT>;
  std::vector<ComputeT> F, J;
  ComputeT max_abs = ComputeT(0);
};

template <class CellMath, class StorageT>
void run_residual(const CellProblem<CellMath, StorageT>& p, const std::vector<StorageT>& H,
                  ResidualRun<CellMath, StorageT>& out, bool want_jac = true,
                  bool want_max = true) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  DeviceCellInputs<CellMath, StorageT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<StorageT> d_H(H.size());
  DeviceBuffer<ComputeT> d_F(H.size());
  DeviceBuffer<ComputeT> d_J(want_jac ? H.size() * S : 0);
  DeviceBuffer<ComputeT> d_max(1);
  DeviceBuffer<unsigned char> d_ws(want_max ? cell_residual_workspace_bytes<StorageT>() : 0);
  for (cudaError_t e : {d_H.status(), d_F.status(), d_J.status(), d_max.status(), d_ws.status()})
    PARARNN_CUDA_OK(e);
  PARARNN_CUDA_OK(d_H.upload(H));
  PARARNN_CUDA_OK(cudaMemset(d_F.get(), 0xff, d_F.bytes()));  // poison: NaN until written
  if (want_jac) PARARNN_CUDA_OK(cudaMemset(d_J.get(), 0xff, d_J.bytes()));
  CellResidualArgs<StorageT> args{.wx = in.wx.get(),
                                  .recurrent = in.recurrent.get(),
                                  .h0 = p.h0.empty() ? nullptr : in.h0.get(),
                                  .h0_row = p.h0_row.empty() ? nullptr : in.h0_row.get(),
                                  .head = p.head.empty() ? nullptr : in.head.get(),
                                  .H = d_H.get(),
                                  .residual = d_F.get(),
                                  .jac = want_jac ? d_J.get() : nullptr,
                                  .max_abs_residual = want_max ? d_max.get() : nullptr,
                                  .batch = p.batch,
                                  .time = p.time,
                                  .channels = p.channels};
  PARARNN_CUDA_OK((launch_cell_residual<CellMath, StorageT>(args, d_ws.get(), d_ws.size(),
                                                            cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  PARARNN_CUDA_OK(d_F.download(out.F));
  if (want_jac) PARARNN_CUDA_OK(d_J.download(out.J));
  if (want_max) {
    std::vector<ComputeT> m;
    PARARNN_CUDA_OK(d_max.download(m));
    out.max_abs = m[0];
  }
}

// Host evaluation of F and J.
template <class CellMath, class StorageT>
void host_residual(const CellProblem<CellMath, StorageT>& p, const std::vector<StorageT>& H,
                   std::vector<ComputeOf<StorageT>>& F, std::vector<ComputeOf<StorageT>>& J) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  const std::int64_t D = p.channels;
  F.assign(H.size(), ComputeT(0));
  J.assign(H.size() * S, ComputeT(0));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t t = 0; t < p.time; ++t)
      for (std::int64_t c = 0; c < D; ++c) {
        const std::int64_t bt = b * p.time + t;
        ComputeT h_prev[S], h_new[S], jac[S * S];
        for (int s = 0; s < S; ++s)
          h_prev[s] = p.is_head(t)
                          ? p.head_state(b, t, s, c)
                          : static_cast<ComputeT>(H[static_cast<std::size_t>(((bt - 1) * S + s) * D + c)]);
        p.step(b, t, c, h_prev, h_new, jac);
        for (int s = 0; s < S; ++s) {
          const std::size_t i = static_cast<std::size_t>((bt * S + s) * D + c);
          F[i] = h_new[s] - static_cast<ComputeT>(H[i]);
        }
        for (int q = 0; q < S * S; ++q) J[static_cast<std::size_t>((bt * S * S + q) * D + c)] = jac[q];
      }
}

TYPED_TEST(CellResidualKernel, MatchesHostEvaluationAndReportsTheMaximumOfWhatItWrote) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  using ComputeT = ComputeOf<StorageT>;
  std::uint64_t seed = test_seed(20260301);
  struct Variant {
    std::int64_t batch, time, channels;
    bool with_h0, packed;
  };
  // 2·700·300 = 420 000 entries: more than the 1024 · 256 threads of the grid, so the grid-stride
  // loop and every partial are exercised.
  for (const Variant& v : {Variant{2, 129, 37, true, false}, Variant{1, 1, 5, false, false},
                           Variant{1, 2000, 33, true, true}, Variant{2, 700, 300, false, false}}) {
    const std::string what = "B=" + std::to_string(v.batch) + " T=" + std::to_string(v.time) +
                             " D=" + std::to_string(v.channels) + (v.packed ? " packed" : "") +
                             (v.with_h0 ? " h0" : "");
    SCOPED_TRACE(what);
    const auto p = make_cell_problem<CellMath, StorageT>(v.batch, v.time, v.channels, v.with_h0,
                                                         v.packed, ++seed);
    const auto H = random_state_trajectory<CellMath, StorageT>(
        static_cast<std::size_t>(v.batch * v.time * CellMath::kSlots * v.channels), v.channels, ++seed);
    ResidualRun<CellMath, StorageT> run;
    run_residual(p, H, run);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<ComputeT> F, J;
    host_residual(p, H, F, J);
    expect_close(F, run.F, kKernelVsHostTau<ComputeT>, "F");
    expect_close(J, run.J, kKernelVsHostTau<ComputeT>, "J");
    const ComputeT expected_max = host_nan_max_abs(run.F);
    EXPECT_TRUE(same_bits(run.max_abs, expected_max))
        << "max|F| " << hexfloat(run.max_abs) << " is not the maximum of the F written, "
        << hexfloat(expected_max);
  }
}

TYPED_TEST(CellResidualKernel, AnyNanResidualMakesTheMaximumNan) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  const std::uint64_t seed = test_seed(20260302);
  auto p = make_cell_problem<CellMath, StorageT>(2, 700, 300, true, false, seed);
  const auto H = random_trajectory<StorageT>(
      static_cast<std::size_t>(2 * 700 * CellMath::kSlots * 300), seed + 1);
  // One NaN gate pre-activation near the end (the last block's share of the grid).
  p.wx[p.wx.size() - 5] = std::numeric_limits<ComputeOf<StorageT>>::quiet_NaN();
  ResidualRun<CellMath, StorageT> run;
  run_residual(p, H, run);
  EXPECT_TRUE(std::isnan(run.max_abs)) << "max|F| = " << hexfloat(run.max_abs);
}

TYPED_TEST(CellResidualKernel, ResidualOfTheSequentialKernelsTrajectoryIsNearZero) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  using ComputeT = ComputeOf<StorageT>;
  const std::uint64_t seed = test_seed(20260303);
  const auto p = make_cell_problem<CellMath, StorageT>(1, 2000, 33, true, true, seed);
  DeviceCellInputs<CellMath, StorageT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<StorageT> d_H(static_cast<std::size_t>(p.time * CellMath::kSlots * p.channels));
  PARARNN_CUDA_OK(d_H.status());
  SequentialArgs<StorageT> args{.wx = in.wx.get(),
                                .recurrent = in.recurrent.get(),
                                .h0 = in.h0.get(),
                                .h0_row = in.h0_row.get(),
                                .head = in.head.get(),
                                .H = d_H.get(),
                                .batch = p.batch,
                                .time = p.time,
                                .channels = p.channels};
  PARARNN_CUDA_OK((launch_sequential_apply<CellMath, StorageT>(args, cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<StorageT> H;
  PARARNN_CUDA_OK(d_H.download(H));
  ResidualRun<CellMath, StorageT> run;
  run_residual(p, H, run);
  EXPECT_LE(static_cast<double>(run.max_abs), kKernelVsHostTau<ComputeT>)
      << "max|F| of the sequential trajectory " << hexfloat(run.max_abs);
}

TYPED_TEST(CellResidualKernel, JacobianAndMaximumAreOptional) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  using ComputeT = ComputeOf<StorageT>;
  const std::uint64_t seed = test_seed(20260304);
  const auto p = make_cell_problem<CellMath, StorageT>(2, 65, 17, true, false, seed);
  const auto H = random_state_trajectory<CellMath, StorageT>(
      static_cast<std::size_t>(2 * 65 * CellMath::kSlots * 17), 17, seed + 1);
  ResidualRun<CellMath, StorageT> run;
  run_residual(p, H, run, /*want_jac=*/false, /*want_max=*/false);
  std::vector<ComputeT> F, J;
  host_residual(p, H, F, J);
  expect_close(F, run.F, kKernelVsHostTau<ComputeT>, "F without J and max");
}

TYPED_TEST(CellResidualKernel, AdjointJacobianIsTheF64ResidualsJacobianAndSeedsTheWidenedCotangent) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  using ComputeT = ComputeOf<StorageT>;
  static_assert(std::is_same_v<StorageT, ComputeT>);
  constexpr int S = CellMath::kSlots;
  std::uint64_t seed = test_seed(20261203);
  struct Variant {
    bool packed, with_h0;
    std::int64_t T;
  };
  // T 4500: 9000 rows of 37 channels, more than the launch's blocks cover at once (2048 blocks of
  // 4 rows), so the blocks stride over rows and their (b, t) steps wrap across batch rows.
  for (const Variant v : {Variant{false, true, 333}, Variant{true, true, 1500}, Variant{false, false, 333},
                          Variant{false, true, 4500}}) {
    const bool packed = v.packed;
    SCOPED_TRACE(std::string(packed ? "packed, h0 rows" : "one sequence per row") + (v.with_h0 ? ", h0" : ", no h0") +
                 ", T " + std::to_string(v.T));
    const std::int64_t B = 2, T = v.T, D = 37;
    const auto p = make_cell_problem<CellMath, StorageT>(B, T, D, v.with_h0, packed, ++seed);
    const std::size_t n = static_cast<std::size_t>(B * T * S * D);
    // H* and grad_H in the compute type (the backward reads H* in its compute type).
    std::vector<ComputeT> H(n), g(n);
    {
      const auto h = random_state_trajectory<CellMath, StorageT>(n, D, ++seed);
      for (std::size_t i = 0; i < n; ++i) H[i] = static_cast<ComputeT>(as_double(h[i]));
      SplitMix64 rng(++seed);
      for (auto& v : g) v = static_cast<ComputeT>(rng.uniform(-3.0, 3.0));
    }
    // The reference: launch_cell_residual<CellMath, double> on every input widened on the host.
    auto widen = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
    CellProblem<CellMath, double> p64;
    p64.batch = B;
    p64.time = T;
    p64.channels = D;
    p64.wx = widen(p.wx);
    p64.recurrent = widen(p.recurrent);
    p64.h0 = widen(p.h0);
    p64.h0_row = p.h0_row;
    p64.head = p.head;
    ResidualRun<CellMath, double> reference;
    run_residual(p64, widen(H), reference, /*want_jac=*/true, /*want_max=*/false);
    if (::testing::Test::HasFatalFailure()) return;

    DeviceCellInputs<CellMath, StorageT> in(p);  // StorageT is the compute type in these cases
    PARARNN_CUDA_OK(in.upload(p));
    DeviceBuffer<ComputeT> d_H(n), d_g(n);
    DeviceBuffer<double> d_J(n * S), d_mu(n);
    for (cudaError_t e : {d_H.status(), d_g.status(), d_J.status(), d_mu.status()}) PARARNN_CUDA_OK(e);
    PARARNN_CUDA_OK(d_H.upload(H));
    PARARNN_CUDA_OK(d_g.upload(g));
    PARARNN_CUDA_OK(cudaMemset(d_J.get(), 0xff, d_J.bytes()));  // poison: NaN until written
    PARARNN_CUDA_OK(cudaMemset(d_mu.get(), 0xff, d_mu.bytes()));
    const CellAdjointJacobianArgs<ComputeT> args{.wx = in.wx.get(), .recurrent = in.recurrent.get(),
                                                 .h0 = v.with_h0 ? in.h0.get() : nullptr,
                                                 .h0_row = packed && v.with_h0 ? in.h0_row.get() : nullptr,
                                                 .head = packed ? in.head.get() : nullptr, .H = d_H.get(),
                                                 .grad_H = d_g.get(), .jac = d_J.get(), .mu = d_mu.get(),
                                                 .batch = B, .time = T, .channels = D};
    PARARNN_CUDA_OK((launch_cell_adjoint_jacobian<CellMath, ComputeT>(args, cudaStream_t{})));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> J, mu;
    PARARNN_CUDA_OK(d_J.download(J));
    PARARNN_CUDA_OK(d_mu.download(mu));
    // The same double arithmetic; without F the compiler may contract the step's products
    // differently (measured on the H200: Titans' J 1 ulp apart, the other cells' bit for bit).
    expect_close(reference.J, J, kKernelVsHostTau<double>, "J");
    for (std::size_t i = 0; i < n; ++i)
      if (!same_bits(mu[i], static_cast<double>(g[i]))) {
        ADD_FAILURE() << "mu[" << i << "] = " << hexfloat(mu[i]) << ", grad_H " << hexfloat(g[i]);
        break;
      }
  }
}

TEST(CellAdjointJacobianLauncher, RefusesMissingArraysAndNegativeSizesAndLaunchesNothingForNothing) {
  DeviceBuffer<float> d_dummy(64);
  DeviceBuffer<double> d_out(64);
  PARARNN_CUDA_OK(d_dummy.status());
  PARARNN_CUDA_OK(d_out.status());
  CellAdjointJacobianArgs<float> args{.wx = d_dummy.get(), .recurrent = d_dummy.get(), .H = d_dummy.get(),
                                      .grad_H = d_dummy.get(), .jac = d_out.get(), .mu = d_out.get(),
                                      .batch = 1, .time = 4, .channels = 4};
  PARARNN_CUDA_OK((launch_cell_adjoint_jacobian<cells::NlruMath, float>(args, cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  for (auto broken : {&CellAdjointJacobianArgs<float>::wx, &CellAdjointJacobianArgs<float>::recurrent,
                      &CellAdjointJacobianArgs<float>::grad_H, &CellAdjointJacobianArgs<float>::H}) {
    CellAdjointJacobianArgs<float> a = args;
    a.*broken = nullptr;
    EXPECT_EQ((launch_cell_adjoint_jacobian<cells::NlruMath, float>(a, cudaStream_t{})), cudaErrorInvalidValue);
  }
  for (auto broken : {&CellAdjointJacobianArgs<float>::jac, &CellAdjointJacobianArgs<float>::mu}) {
    CellAdjointJacobianArgs<float> a = args;
    a.*broken = nullptr;
    EXPECT_EQ((launch_cell_adjoint_jacobian<cells::NlruMath, float>(a, cudaStream_t{})), cudaErrorInvalidValue);
  }
  CellAdjointJacobianArgs<float> negative = args;
  negative.time = -1;
  EXPECT_EQ((launch_cell_adjoint_jacobian<cells::NlruMath, float>(negative, cudaStream_t{})), cudaErrorInvalidValue);
  CellAdjointJacobianArgs<float> empty{.batch = 3, .time = 0, .channels = 4};  // null arrays, nothing to do
  PARARNN_CUDA_OK((launch_cell_adjoint_jacobian<cells::NlruMath, float>(empty, cudaStream_t{})));
}

TEST(CellResidualLauncher, RefusesAMissingWorkspaceAndZeroesTheMaximumOfNothing) {
  DeviceBuffer<float> d_max(1), d_dummy(64);
  PARARNN_CUDA_OK(d_max.status());
  PARARNN_CUDA_OK(d_dummy.status());
  CellResidualArgs<float> args{.wx = d_dummy.get(), .recurrent = d_dummy.get(),
                               .H = d_dummy.get(), .residual = d_dummy.get(),
                               .max_abs_residual = d_max.get(), .batch = 1, .time = 4,
                               .channels = 4};
  EXPECT_EQ((launch_cell_residual<cells::NlruMath, float>(args, nullptr, 0, cudaStream_t{})),
            cudaErrorInvalidValue);
  PARARNN_CUDA_OK(cudaMemset(d_max.get(), 0xff, sizeof(float)));
  args.time = 0;
  PARARNN_CUDA_OK((launch_cell_residual<cells::NlruMath, float>(args, nullptr, 0, cudaStream_t{})));
  std::vector<float> m;
  PARARNN_CUDA_OK(d_max.download(m));
  EXPECT_EQ(m[0], 0.0f);
}

}  // namespace
}  // namespace pararnn::kernels::test
