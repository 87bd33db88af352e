// The fused windowed Newton kernel (kernels/src/windowed_newton.cuh, through
// windowed_newton_entry.hpp) against the same algorithm on the host in double (the CPU's
// windowed solve with a fixed K and no early stop: per window, the App. A guess from the carried
// state, then K updates with δ by sequential substitution): H, and the residual maxima per window
// and evaluation (left untouched, zeros, when not asked for); every cell the launch takes
// (PARARNN_FOR_EACH_WINDOWED_TEST_CELL: GRU-diag, LSTM, NLRU, CfC and its diag_h mix, Titans) in
// f32 and f64, with and without h0, a partial last window and a partial channel group,
// the largest window a block holds and a shorter one, K = 0, 1 and 3, a damped update (ω = 0.7),
// three block shapes (4, 1 and 8 time lanes per warp), and the production launcher at a window
// of each of its shapes; its window bound. The bound is the compute type's trajectory τ from the
// table (kKernelVsHostTau): the two differ by the scan's association and the device's libm.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/windowed_newton.hpp"
#include "windowed_newton_entry.hpp"

namespace pararnn::kernels::test {
namespace {

// The windowed solve in double: H [b][t][s][c], and in `residual` [window][K + 1] max|F| over
// the batch and channels at each of a window's K evaluations and at its final iterate.
template <class CellMath, class T>
std::vector<double> host_windowed(const std::vector<T>& wx, const std::vector<T>& rec, const std::vector<T>* h0,
                                  std::int64_t B, std::int64_t Tn, std::int64_t D, std::int64_t window, int K,
                                  double omega, std::vector<double>& residual) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, RC = CellMath::kRecurrent + CellMath::kConstants;
  std::vector<double> H(static_cast<std::size_t>(B * Tn * S * D));
  const std::int64_t windows = (Tn + window - 1) / window;
  residual.assign(static_cast<std::size_t>(windows * (K + 1)), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t c = 0; c < D; ++c) {
      double r[RC], carry[S];
      for (int k = 0; k < RC; ++k) r[k] = static_cast<double>(rec[static_cast<std::size_t>(k * D + c)]);
      for (int s = 0; s < S; ++s) carry[s] = h0 ? static_cast<double>((*h0)[static_cast<std::size_t>((b * S + s) * D + c)]) : 0.0;
      for (std::int64_t w0 = 0; w0 < Tn; w0 += window) {
        const std::int64_t n = std::min(window, Tn - w0);
        std::vector<double> g(static_cast<std::size_t>(n * G)), h(static_cast<std::size_t>(n * S));
        for (std::int64_t i = 0; i < n; ++i)
          for (int q = 0; q < G; ++q)
            g[static_cast<std::size_t>(i * G + q)] =
                static_cast<double>(wx[static_cast<std::size_t>(((b * Tn + w0 + i) * G + q) * D + c)]);
        for (std::int64_t i = 0; i < n; ++i) {
          double from[S], hn[S];
          for (int s = 0; s < S; ++s) from[s] = i == 0 ? carry[s] : 0.0;
          CellMath::step(r, &g[static_cast<std::size_t>(i * G)], from, hn, static_cast<double*>(nullptr));
          for (int s = 0; s < S; ++s) h[static_cast<std::size_t>(i * S + s)] = hn[s];
        }
        for (int k = 0; k <= K; ++k) {
          std::vector<double> F(static_cast<std::size_t>(n * S)), J(static_cast<std::size_t>(n * S * S));
          double& worst = residual[static_cast<std::size_t>((w0 / window) * (K + 1) + k)];
          for (std::int64_t i = 0; i < n; ++i) {
            double hp[S], hn[S], jac[S * S];
            for (int s = 0; s < S; ++s) hp[s] = i == 0 ? carry[s] : h[static_cast<std::size_t>((i - 1) * S + s)];
            CellMath::step(r, &g[static_cast<std::size_t>(i * G)], hp, hn, jac);
            for (int s = 0; s < S; ++s) {
              F[static_cast<std::size_t>(i * S + s)] = hn[s] - h[static_cast<std::size_t>(i * S + s)];
              worst = std::max(worst, std::fabs(F[static_cast<std::size_t>(i * S + s)]));
            }
            for (int x = 0; x < S * S; ++x) J[static_cast<std::size_t>(i * S * S + x)] = i == 0 ? 0.0 : jac[x];
          }
          if (k == K) break;  // the final iterate's residual
          double d[S] = {};
          for (std::int64_t i = 0; i < n; ++i) {
            double out[S];
            for (int o = 0; o < S; ++o) {
              out[o] = F[static_cast<std::size_t>(i * S + o)];
              for (int x = 0; x < S; ++x) out[o] += J[static_cast<std::size_t>(i * S * S + o * S + x)] * d[x];
            }
            for (int s = 0; s < S; ++s) {
              d[s] = out[s];
              h[static_cast<std::size_t>(i * S + s)] += omega * out[s];
            }
          }
        }
        for (std::int64_t i = 0; i < n; ++i)
          for (int s = 0; s < S; ++s)
            H[static_cast<std::size_t>(((b * Tn + w0 + i) * S + s) * D + c)] = h[static_cast<std::size_t>(i * S + s)];
        for (int s = 0; s < S; ++s) carry[s] = h[static_cast<std::size_t>((n - 1) * S + s)];
      }
    }
  return H;
}

struct WindowedCase {
  int shape;  // windowed_newton_entry.hpp
  std::int64_t batch, time, channels, window;  // window 0: the shape's largest
  bool with_h0;
  int iterations;
  double omega;
  bool with_residual = true;  // pass residual_max (false: the kernel must leave it untouched)
};

template <class CellMath, class T>
void expect_windowed_equals_host(const WindowedCase& w, std::uint64_t seed) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, RC = CellMath::kRecurrent + CellMath::kConstants;
  const std::int64_t B = w.batch, Tn = w.time, D = w.channels;
  const std::int64_t window = w.window > 0 ? w.window : windowed_newton_window(w.shape);
  SCOPED_TRACE("shape " + std::to_string(w.shape) + ", window " + std::to_string(window) + ", K " +
               std::to_string(w.iterations) + ", omega " + std::to_string(w.omega) + (w.with_h0 ? ", h0" : ""));
  SplitMix64 rng(seed);
  std::vector<T> wx(static_cast<std::size_t>(B * Tn * G * D)), rec(static_cast<std::size_t>(RC * D)),
      h0(static_cast<std::size_t>(B * S * D));
  for (T& v : wx) v = static_cast<T>(rng.uniform(-2.0, 2.0));
  // CfC's Δt gate as the backends form it: max(x, kCfcDtFloor).
  if constexpr (std::is_same_v<CellMath, cells::CfcMath> || std::is_same_v<CellMath, cells::CfcDiagHMath>)
    for (std::int64_t bt = 0; bt < B * Tn; ++bt)
      for (std::int64_t c = 0; c < D; ++c) {
        T& v = wx[static_cast<std::size_t>((bt * G + 2) * D + c)];
        v = std::max(v, static_cast<T>(cells::kCfcDtFloor));
      }
  for (T& v : rec) v = static_cast<T>(rng.uniform(-0.5, 0.5));
  for (T& v : h0) v = static_cast<T>(rng.uniform(-0.5, 0.5));
  DeviceBuffer<T> d_wx(wx.size()), d_rec(rec.size()), d_h0(h0.size()), d_H(static_cast<std::size_t>(B * Tn * S * D));
  for (cudaError_t e : {d_wx.status(), d_rec.status(), d_h0.status(), d_H.status()}) PARARNN_CUDA_OK(e);
  PARARNN_CUDA_OK(d_wx.upload(wx));
  PARARNN_CUDA_OK(d_rec.upload(rec));
  PARARNN_CUDA_OK(d_h0.upload(h0));
  PARARNN_CUDA_OK(cudaMemset(d_H.get(), 0xff, d_H.bytes()));  // poison: NaN until written
  using Bits = typename WindowedNewtonArgs<T>::Bits;
  const std::int64_t windows = (Tn + window - 1) / window;
  DeviceBuffer<Bits> d_res(static_cast<std::size_t>(windows * (w.iterations + 1)));
  PARARNN_CUDA_OK(d_res.status());
  PARARNN_CUDA_OK(cudaMemset(d_res.get(), 0, d_res.bytes()));
  const WindowedNewtonArgs<T> a{.wx = d_wx.get(), .recurrent = d_rec.get(),
                                        .h0 = w.with_h0 ? d_h0.get() : nullptr, .H = d_H.get(),
                                        .residual_max = w.with_residual ? d_res.get() : nullptr, .batch = B,
                                        .time = Tn, .channels = D, .window = window, .iterations = w.iterations,
                                        .omega = static_cast<T>(w.omega)};
  PARARNN_CUDA_OK((run_windowed_newton_at<CellMath, T>(w.shape, a)));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<T> got;
  PARARNN_CUDA_OK(d_H.download(got));
  std::vector<double> want_residual;
  const std::vector<double> want = host_windowed<CellMath, T>(wx, rec, w.with_h0 ? &h0 : nullptr, B, Tn, D, window,
                                                              w.iterations, static_cast<double>(static_cast<T>(w.omega)),
                                                              want_residual);
  std::vector<T> want_t(want.size());
  for (std::size_t i = 0; i < want.size(); ++i) want_t[i] = static_cast<T>(want[i]);
  expect_close(want_t, got, kKernelVsHostTau<T>, "H");
  std::vector<Bits> bits;
  PARARNN_CUDA_OK(d_res.download(bits));
  // max|F| is computed in T from states of magnitude up to max|H|: F = f(h) − h, with f(h) and h
  // each rounded to T, resolves no finer than an ulp of that magnitude (Titans' unsquashed memory
  // reaches 2^14 in f32, where F steps by 2^-9), so each residual is held to the table's τ plus
  // kResidualRoundingUlps of T at max|H|. For the squashed cells (|H| <= 1) that term is below
  // 5e-7 in f32.
  double max_state = 0.0;
  for (double v : want) max_state = std::max(max_state, std::fabs(v));
  const double rounding = kResidualRoundingUlps * std::numeric_limits<T>::epsilon() * max_state;
  ASSERT_EQ(bits.size(), want_residual.size());
  std::int64_t beyond = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const double got_v = static_cast<double>(std::bit_cast<T>(bits[i]));
    const double want_v = w.with_residual ? static_cast<double>(static_cast<T>(want_residual[i])) : 0.0;  // untouched without the array
    const double allowed = kKernelVsHostTau<T> * (1.0 + std::fabs(want_v)) + (w.with_residual ? rounding : 0.0);
    if (!(std::fabs(got_v - want_v) <= allowed)) {
      if (beyond++ == 0)
        ADD_FAILURE() << "max|F| per window and evaluation at " << i << ": expected " << want_v << ", actual "
                      << got_v << " (band " << allowed << ", max|H| " << max_state << ")";
    }
  }
  EXPECT_EQ(beyond, 0) << "max|F| elements beyond the band";
}

template <class CellMath, class T>
void every_case(std::uint64_t seed) {
  // T = 300: a partial last window; D = 37: a partial channel group; window 45: partial time lanes.
  for (const bool with_h0 : {true, false}) {
    expect_windowed_equals_host<CellMath, T>({0, 3, 300, 37, 0, with_h0, 3, 1.0}, ++seed);
    expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 45, with_h0, 3, 1.0}, ++seed);
  }
  // K = 0 (the guess alone), K = 1, a damped update.
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 0, 1.0}, ++seed);
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 1, 1.0}, ++seed);
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 3, 0.7}, ++seed);
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 3, 1.0, false}, ++seed);
  // The production launcher at a window of each of its block shapes (up to 256, 512, 1024 steps),
  // where the cell fits.
  for (const std::int64_t window : {200, 500, 1000})
    if (window <= windowed_newton_max_window<CellMath, T>())
      expect_windowed_equals_host<CellMath, T>({kProductionLauncher, 2, 2100, 37, window, true, 3, 1.0}, ++seed);
  // 1024-thread blocks: one time lane per warp (32 channels; its shared memory does not hold
  // LSTM's 2 × 2 elements in f64), and eight (4 channels).
  if constexpr (CellMath::kSlots == 1 || sizeof(T) == 4)
    expect_windowed_equals_host<CellMath, T>({1, 2, 600, 37, 0, true, 3, 1.0}, ++seed);
  expect_windowed_equals_host<CellMath, T>({2, 2, 2500, 37, 0, true, 3, 1.0}, ++seed);
}

// One test per cell and compute type, seeded by the cell's name.
constexpr std::uint64_t name_seed(std::string_view name) {
  std::uint64_t h = 20261208;
  for (char ch : name) h = h * 131 + static_cast<unsigned char>(ch);
  return h;
}
#define PARARNN_WINDOWED_TESTS(Math)                                                            \
  TEST(WindowedNewton, EqualsTheHostWindowedSolve##Math##F32) {                                 \
    every_case<cells::Math, float>(test_seed(name_seed(#Math)));                                \
  }                                                                                             \
  TEST(WindowedNewton, EqualsTheHostWindowedSolve##Math##F64) {                                 \
    every_case<cells::Math, double>(test_seed(name_seed(#Math) + 1));                           \
  }
PARARNN_FOR_EACH_WINDOWED_TEST_CELL(PARARNN_WINDOWED_TESTS)
#undef PARARNN_WINDOWED_TESTS

TEST(WindowedNewton, RefusesAWindowTheBlockDoesNotHold) {
  const WindowedNewtonArgs<float> a{.wx = reinterpret_cast<const float*>(16),
                                            .recurrent = reinterpret_cast<const float*>(16),
                                            .H = reinterpret_cast<float*>(16), .batch = 1, .time = 100,
                                            .channels = 8, .window = windowed_newton_window(0) + 1,
                                            .iterations = 3};
  EXPECT_EQ((run_windowed_newton_at<cells::GruDiagMath, float>(0, a)), cudaErrorInvalidValue);
  // The production launcher: its largest windows, and one step more refused.
  EXPECT_EQ((windowed_newton_max_window<cells::GruDiagMath, float>()), 1024);
  // LSTM in f64: 16 × 32 × 4 does not hold its elements, so windows of up to 256 steps run at
  // 8 × 32 × 4 (the launcher case at window 200 above).
  EXPECT_EQ((windowed_newton_max_window<cells::LstmMath, double>()), 1024);
  EXPECT_EQ((windowed_newton_max_window<cells::SlstmDiagMath, float>()), 0);
  WindowedNewtonArgs<float> beyond = a;
  beyond.window = windowed_newton_max_window<cells::GruDiagMath, float>() + 1;
  EXPECT_EQ((launch_windowed_newton<cells::GruDiagMath, float>(beyond, cudaStream_t{})), cudaErrorInvalidValue);
  beyond.window = 1;
  beyond.iterations = -1;
  EXPECT_EQ((launch_windowed_newton<cells::GruDiagMath, float>(beyond, cudaStream_t{})), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pararnn::kernels::test
