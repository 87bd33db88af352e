// launch_newton_step (the fused Newton iteration) against its slow twin on the host: F and J of
// the iterate from the same cell math, sequential substitution δ_t = J_t δ_{t−1} + F_t with
// restarts at heads, H_out = H_in + ω δ; max|F| equal to the host's within τ and NaN when any F
// is NaN; H_in untouched; from the App. A guess (H_in not read) equal to the host's guess pass
// followed by the same step; max|F| of the result (all steps but the chunk starts) completed by
// the residual kernel at the chunk stride equal to the host's residual of H_out; and the argument
// checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/kernels/cell_residual.hpp"
#include "pararnn/kernels/newton_step.hpp"

namespace pararnn::kernels::test {
namespace {

template <class Case>
class NewtonStepKernel : public ::testing::Test {};
TYPED_TEST_SUITE(NewtonStepKernel, CellCases, CellCaseName);

// An iterate inside the cell's state domain (sLSTM's normalizer n, slot 1, is never negative).
template <class CellMath, class T>
std::vector<T> random_iterate(std::size_t n, std::int64_t channels, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<T> H(n);
  for (std::size_t i = 0; i < n; ++i) {
    H[i] = static_cast<T>(rng.uniform(-1.0, 1.0));
    if (CellMath::kSlots == 4 && (static_cast<std::int64_t>(i) / channels) % 4 == 1) H[i] = std::fabs(H[i]);
  }
  return H;
}

// The slow twin: H + ω δ and max|F|.
template <class CellMath, class T>
std::vector<T> host_newton_step(const CellProblem<CellMath, T>& p, const std::vector<T>& H, double omega,
                                T& max_abs) {
  constexpr int S = CellMath::kSlots;
  const std::int64_t D = p.channels;
  std::vector<T> out(H.size());
  max_abs = T(0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t c = 0; c < D; ++c) {
      T delta[S] = {};
      for (std::int64_t t = 0; t < p.time; ++t) {
        const std::int64_t bt = b * p.time + t;
        T h_prev[S], h_new[S], jac[S * S];
        for (int s = 0; s < S; ++s)
          h_prev[s] = p.is_head(t) ? p.head_state(b, t, s, c) : H[static_cast<std::size_t>(((bt - 1) * S + s) * D + c)];
        p.step(b, t, c, h_prev, h_new, jac);
        T next[S];
        for (int o = 0; o < S; ++o) {
          const T f = h_new[o] - H[static_cast<std::size_t>((bt * S + o) * D + c)];
          max_abs = std::isnan(f) || std::isnan(max_abs) ? std::numeric_limits<T>::quiet_NaN()
                                                          : std::max(max_abs, std::fabs(f));
          T carried = T(0);
          if (!p.is_head(t))
            for (int i = 0; i < S; ++i) carried += jac[o * S + i] * delta[i];
          next[o] = carried + f;
        }
        for (int s = 0; s < S; ++s) {
          delta[s] = next[s];
          const std::size_t i = static_cast<std::size_t>((bt * S + s) * D + c);
          out[i] = H[i] + static_cast<T>(omega) * delta[s];
        }
      }
    }
  return out;
}

template <class CellMath, class T>
struct StepRun {
  std::vector<T> H_out, H_in_after;
  T max_abs = T(0);
  T result = T(0);  // with_result: max|F(H_out)| but at the chunk starts, and with them (the full one)
  T result_with_starts = T(0);
};

// The App. A guess on the host: H_t = f(h̃_t, x_t), h̃ = the head state at heads, else 0.
template <class CellMath, class T>
std::vector<T> host_guess(const CellProblem<CellMath, T>& p) {
  constexpr int S = CellMath::kSlots;
  const std::int64_t D = p.channels;
  std::vector<T> H(static_cast<std::size_t>(p.batch * p.time * S * D));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t t = 0; t < p.time; ++t)
      for (std::int64_t c = 0; c < D; ++c) {
        T h_prev[S], h_new[S], jac[S * S];
        for (int s = 0; s < S; ++s) h_prev[s] = p.is_head(t) ? p.head_state(b, t, s, c) : T(0);
        p.step(b, t, c, h_prev, h_new, jac);
        for (int s = 0; s < S; ++s) H[static_cast<std::size_t>(((b * p.time + t) * S + s) * D + c)] = h_new[s];
      }
  return H;
}

// One launch; an empty H runs the step from the guess (from_guess, H_in null).
template <class CellMath, class T>
StepRun<CellMath, T> run_step(const CellProblem<CellMath, T>& p, const std::vector<T>& H, double omega,
                              bool with_result = false) {
  const bool from_guess = H.empty();
  const std::size_t n = static_cast<std::size_t>(p.batch * p.time * CellMath::kSlots * p.channels);
  StepRun<CellMath, T> out;
  DeviceCellInputs<CellMath, T> in(p);
  EXPECT_EQ(in.upload(p), cudaSuccess);
  DeviceBuffer<T> d_in(n), d_out(n), d_max(3);
  DeviceBuffer<unsigned char> d_ws(newton_step_workspace_bytes<CellMath, T>(p.batch, p.time, p.channels));
  for (cudaError_t e : {d_in.status(), d_out.status(), d_max.status(), d_ws.status()}) EXPECT_EQ(e, cudaSuccess);
  if (!from_guess) {
    EXPECT_EQ(d_in.upload(H), cudaSuccess);
  } else {
    EXPECT_EQ(cudaMemset(d_in.get(), 0, d_in.bytes()), cudaSuccess);  // downloaded below (initcheck)
  }
  EXPECT_EQ(cudaMemset(d_max.get(), 0, d_max.bytes()), cudaSuccess);  // slots 1, 2 are written only with_result
  EXPECT_EQ(cudaMemset(d_out.get(), 0xff, d_out.bytes()), cudaSuccess);  // poison: NaN until written
  const NewtonStepArgs<T> args{.wx = in.wx.get(),
                               .recurrent = in.recurrent.get(),
                               .h0 = p.h0.empty() ? nullptr : in.h0.get(),
                               .h0_row = p.h0_row.empty() ? nullptr : in.h0_row.get(),
                               .head = p.head.empty() ? nullptr : in.head.get(),
                               .H_in = from_guess ? nullptr : d_in.get(),
                               .H_out = d_out.get(),
                               .max_abs_residual = d_max.get(),
                               .max_abs_result = with_result ? d_max.get() + 1 : nullptr,
                               .from_guess = from_guess,
                               .batch = p.batch,
                               .time = p.time,
                               .channels = p.channels,
                               .omega = omega};
  EXPECT_EQ((launch_newton_step<CellMath, T>(args, d_ws.get(), d_ws.size(), cudaStream_t{})), cudaSuccess);
  if (with_result) {  // the chunk starts, as the Newton driver completes it
    DeviceBuffer<unsigned char> d_rws(cell_residual_workspace_bytes<T>());
    const CellResidualArgs<T> r{.wx = in.wx.get(),
                                .recurrent = in.recurrent.get(),
                                .h0 = p.h0.empty() ? nullptr : in.h0.get(),
                                .h0_row = p.h0_row.empty() ? nullptr : in.h0_row.get(),
                                .head = p.head.empty() ? nullptr : in.head.get(),
                                .H = d_out.get(),
                                .max_abs_residual = d_max.get() + 2,
                                .batch = p.batch,
                                .time = p.time,
                                .channels = p.channels,
                                .time_stride = newton_step_chunk<CellMath, T>()};
    EXPECT_EQ((launch_cell_residual<CellMath, T>(r, d_rws.get(), d_rws.size(), cudaStream_t{})), cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d_out.download(out.H_out), cudaSuccess);
  EXPECT_EQ(d_in.download(out.H_in_after), cudaSuccess);
  std::vector<T> m;
  EXPECT_EQ(d_max.download(m), cudaSuccess);
  out.max_abs = m.empty() ? T(0) : m[0];
  if (with_result && m.size() == 3) {
    out.result = m[1];
    out.result_with_starts = std::isnan(m[1]) || std::isnan(m[2]) ? std::numeric_limits<T>::quiet_NaN()
                                                                  : std::max(m[1], m[2]);
  }
  return out;
}

TYPED_TEST(NewtonStepKernel, EqualsResidualThenSubstitutionThenUpdateOnTheHost) {
  using CellMath = typename TypeParam::CellMath;
  using T = typename TypeParam::StorageT;  // the compute type: the iterate of a Newton solve
  std::uint64_t seed = test_seed(20261201);
  struct Variant {
    std::int64_t batch, time, channels;
    bool with_h0, packed;
    double omega;
  };
  // Channels not a multiple of 32 (a partial lane tile), T not a multiple of the chunk, packed
  // heads with h0 rows, a lone step, and a relaxed update.
  for (const Variant& v : {Variant{2, 129, 37, true, false, 1.0}, Variant{1, 1, 5, false, false, 1.0},
                           Variant{1, 1500, 33, true, true, 1.0}, Variant{3, 700, 64, false, false, 0.5}}) {
    const std::int64_t T_len = std::min(v.time, kComparableTime<CellMath>);
    SCOPED_TRACE("B=" + std::to_string(v.batch) + " T=" + std::to_string(T_len) + " D=" + std::to_string(v.channels) +
                 (v.packed ? " packed" : "") + (v.with_h0 ? " h0" : "") + " omega=" + std::to_string(v.omega));
    const auto p = make_cell_problem<CellMath, T>(v.batch, T_len, v.channels, v.with_h0, v.packed, ++seed);
    const auto H = random_iterate<CellMath, T>(static_cast<std::size_t>(v.batch * T_len * CellMath::kSlots * v.channels),
                                               v.channels, ++seed);
    const StepRun<CellMath, T> run = run_step(p, H, v.omega);
    if (::testing::Test::HasFailure()) return;
    T host_max = T(0);
    const std::vector<T> expected = host_newton_step(p, H, v.omega, host_max);
    expect_close(expected, run.H_out, kKernelVsHostTau<T>, "H_out");
    EXPECT_EQ(run.H_in_after, H) << "H_in was modified";
    EXPECT_NEAR(static_cast<double>(run.max_abs), static_cast<double>(host_max), kKernelVsHostTau<T>);
  }
}

TYPED_TEST(NewtonStepKernel, FromTheGuessEqualsTheGuessPassThenTheStep) {
  using CellMath = typename TypeParam::CellMath;
  using T = typename TypeParam::StorageT;
  std::uint64_t seed = test_seed(20261203);
  struct Variant {
    std::int64_t batch, time, channels;
    bool with_h0, packed;
  };
  // A partial lane tile, packed heads with h0 rows (the guess at t − 1 of a run's first step
  // crosses a head), a lone step.
  for (const Variant& v : {Variant{2, 129, 37, true, false}, Variant{1, 1500, 33, true, true},
                           Variant{1, 1, 5, false, false}, Variant{3, 700, 64, false, false}}) {
    const std::int64_t T_len = std::min(v.time, kComparableTime<CellMath>);
    SCOPED_TRACE("B=" + std::to_string(v.batch) + " T=" + std::to_string(T_len) + " D=" + std::to_string(v.channels) +
                 (v.packed ? " packed" : "") + (v.with_h0 ? " h0" : ""));
    const auto p = make_cell_problem<CellMath, T>(v.batch, T_len, v.channels, v.with_h0, v.packed, ++seed);
    const StepRun<CellMath, T> run = run_step(p, std::vector<T>{}, 1.0);
    if (::testing::Test::HasFailure()) return;
    T host_max = T(0);
    const std::vector<T> expected = host_newton_step(p, host_guess(p), 1.0, host_max);
    expect_close(expected, run.H_out, kKernelVsHostTau<T>, "H_out from the guess");
    EXPECT_NEAR(static_cast<double>(run.max_abs), static_cast<double>(host_max), kKernelVsHostTau<T>);
  }
}

// max|F| of the result (NewtonStepArgs::max_abs_result) with the chunk starts from the residual
// kernel at time_stride L is max|F(H_out)|, the host's residual of the step's output.
TYPED_TEST(NewtonStepKernel, ResultResidualWithTheChunkStartsIsTheResidualOfHOut) {
  using CellMath = typename TypeParam::CellMath;
  using T = typename TypeParam::StorageT;
  std::uint64_t seed = test_seed(20261206);
  struct Variant {
    std::int64_t batch, time, channels;
    bool with_h0, packed, from_guess;
  };
  // A partial lane tile, packed heads with h0 rows, a lone step, T past many chunks; from the
  // guess and from an iterate.
  for (const Variant& v : {Variant{2, 129, 37, true, false, true}, Variant{1, 1500, 33, true, true, false},
                           Variant{1, 1, 5, false, false, true}, Variant{3, 700, 64, false, false, false}}) {
    const std::int64_t T_len = std::min(v.time, kComparableTime<CellMath>);
    SCOPED_TRACE("B=" + std::to_string(v.batch) + " T=" + std::to_string(T_len) + " D=" + std::to_string(v.channels) +
                 (v.packed ? " packed" : "") + (v.with_h0 ? " h0" : "") + (v.from_guess ? " from the guess" : ""));
    const auto p = make_cell_problem<CellMath, T>(v.batch, T_len, v.channels, v.with_h0, v.packed, ++seed);
    const std::vector<T> H = v.from_guess ? std::vector<T>{} : host_guess(p);
    const StepRun<CellMath, T> run = run_step(p, H, 1.0, /*with_result=*/true);
    if (::testing::Test::HasFailure()) return;
    T host_result = T(0);
    (void)host_newton_step(p, run.H_out, 1.0, host_result);  // max|F(H_out)|
    EXPECT_NEAR(static_cast<double>(run.result_with_starts), static_cast<double>(host_result),
                kKernelVsHostTau<T> * (1.0 + static_cast<double>(host_result)));
    // The step's own part alone: max|F(H_out)| over every step but the chunk starts, on the host.
    constexpr int S = CellMath::kSlots;
    const std::int64_t L = newton_step_chunk<CellMath, T>(), D = v.channels;
    T host_part = T(0);
    for (std::int64_t b = 0; b < v.batch; ++b)
      for (std::int64_t t = 0; t < T_len; ++t) {
        if (t % L == 0) continue;
        const std::int64_t bt = b * T_len + t;
        for (std::int64_t c = 0; c < D; ++c) {
          T h_prev[S], h_new[S], jac[S * S];
          for (int s = 0; s < S; ++s)
            h_prev[s] = p.is_head(t) ? p.head_state(b, t, s, c)
                                     : run.H_out[static_cast<std::size_t>(((bt - 1) * S + s) * D + c)];
          p.step(b, t, c, h_prev, h_new, jac);
          for (int s = 0; s < S; ++s) {
            const T f = h_new[s] - run.H_out[static_cast<std::size_t>((bt * S + s) * D + c)];
            host_part = std::isnan(f) || std::isnan(host_part) ? std::numeric_limits<T>::quiet_NaN()
                                                                : std::max(host_part, std::fabs(f));
          }
        }
      }
    EXPECT_NEAR(static_cast<double>(run.result), static_cast<double>(host_part),
                kKernelVsHostTau<T> * (1.0 + static_cast<double>(host_part)))
        << "max|F(H_out)| without the chunk starts";
  }
}

TYPED_TEST(NewtonStepKernel, AnyNanResidualMakesTheMaximumNan) {
  using CellMath = typename TypeParam::CellMath;
  using T = typename TypeParam::StorageT;
  const std::uint64_t seed = test_seed(20261202);
  const auto p = make_cell_problem<CellMath, T>(2, 300, 70, false, false, seed);
  auto H = random_iterate<CellMath, T>(static_cast<std::size_t>(2 * 300 * CellMath::kSlots * 70), 70, seed + 1);
  H[H.size() - 3] = std::numeric_limits<T>::quiet_NaN();  // the last chunk's share
  const StepRun<CellMath, T> run = run_step(p, H, 1.0);
  EXPECT_TRUE(std::isnan(run.max_abs)) << "max|F| = " << hexfloat(run.max_abs);
}

TEST(NewtonStepKernelArguments, AliasedOrMissingBuffersAreRefused) {
  DeviceBuffer<float> d(64), m(1);
  DeviceBuffer<unsigned char> ws(newton_step_workspace_bytes<cells::GruDiagMath, float>(1, 8, 8));
  NewtonStepArgs<float> a{.wx = d.get(), .recurrent = d.get(), .H_in = d.get(), .H_out = d.get(),
                          .max_abs_residual = m.get(), .batch = 1, .time = 8, .channels = 8};
  EXPECT_EQ((launch_newton_step<cells::GruDiagMath, float>(a, ws.get(), ws.size(), cudaStream_t{})),
            cudaErrorInvalidValue);  // H_in and H_out alias
  a.H_out = nullptr;
  EXPECT_EQ((launch_newton_step<cells::GruDiagMath, float>(a, ws.get(), ws.size(), cudaStream_t{})),
            cudaErrorInvalidValue);
  a.H_out = m.get();
  a.from_guess = true;  // from the guess H_in must be null
  EXPECT_EQ((launch_newton_step<cells::GruDiagMath, float>(a, ws.get(), ws.size(), cudaStream_t{})),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pararnn::kernels::test
