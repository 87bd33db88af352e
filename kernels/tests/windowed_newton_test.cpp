// The fused windowed Newton kernel (kernels/src/windowed_newton.cuh, through
// windowed_newton_entry.hpp) against the same algorithm on the host in double (the CPU's
// windowed solve with a fixed K and no early stop: per window, the App. A guess from the carried
// state, then K updates with δ by sequential substitution): H, and the residual maxima per window
// and evaluation (left untouched, zeros, when not asked for); every cell the launch takes
// (PARARNN_FOR_EACH_WINDOWED_TEST_CELL: GRU-diag, LSTM, NLRU, CfC and its diag_h mix, Titans) in
// f32 and f64, with and without h0, a partial last window and a partial channel group,
// the largest window a block holds and a shorter one, K = 0, 1 and 3, a damped update (ω = 0.7),
// three block shapes (4, 1 and 8 time lanes per warp), and the production launcher at a window
// of each of its shapes; its window bound. The adaptive rule decided per chain (the solver's
// default): against the host's rule with the same threshold, chosen per case so that no chain's
// residual at a decision lies within a factor 2 of it (the two sides then decide alike) and the
// chains stop after different numbers of evaluations; a threshold of 0 (every chain to the cap)
// and one above every residual (every chain at the minimum K) are the fixed solves. The bound is the compute type's trajectory τ from the
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

// The adaptive rule of kernels/windowed_newton.hpp: the minimum K and the threshold; the host's
// record of it, per chain (b·D + c): its max|F| at each evaluation where it could stop (k + 1 >=
// the minimum; finite ones), and the evaluations it ran in each window.
struct AdaptiveRule {
  int min_iterations = 0;
  double stop_atol = 0.0;
};
struct AdaptiveRecord {
  std::vector<std::vector<double>> decisions;
  std::vector<std::vector<int>> evaluations;
};

// The windowed solve in double: H [b][t][s][c], and in `residual` [window][K + 1] max|F| over
// the batch and channels at each of a window's K evaluations and at its final iterate. With
// `rule`, the adaptive solve (K the cap): residual[w][k] over the chains that ran evaluation k.
template <class CellMath, class T>
std::vector<double> host_windowed(const std::vector<T>& wx, const std::vector<T>& rec, const std::vector<T>* h0,
                                  std::int64_t B, std::int64_t Tn, std::int64_t D, std::int64_t window, int K,
                                  double omega, std::vector<double>& residual, const AdaptiveRule* rule = nullptr,
                                  AdaptiveRecord* record = nullptr) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, RC = CellMath::kRecurrent + CellMath::kConstants;
  std::vector<double> H(static_cast<std::size_t>(B * Tn * S * D));
  const std::int64_t windows = (Tn + window - 1) / window;
  residual.assign(static_cast<std::size_t>(windows * (K + 1)), 0.0);
  if (record) {
    record->decisions.assign(static_cast<std::size_t>(B * D), {});
    record->evaluations.assign(static_cast<std::size_t>(B * D), {});
  }
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
        bool stopped = false;  // adaptive: the chain stopped; its next evaluation is the final one
        for (int k = 0; k <= K; ++k) {
          const bool final_evaluation = k == K || stopped;
          std::vector<double> F(static_cast<std::size_t>(n * S)), J(static_cast<std::size_t>(n * S * S));
          double& worst = residual[static_cast<std::size_t>((w0 / window) * (K + 1) + (final_evaluation ? K : k))];
          double chain = 0.0;  // this chain's max|F| over the window (a NaN stays)
          for (std::int64_t i = 0; i < n; ++i) {
            double hp[S], hn[S], jac[S * S];
            for (int s = 0; s < S; ++s) hp[s] = i == 0 ? carry[s] : h[static_cast<std::size_t>((i - 1) * S + s)];
            CellMath::step(r, &g[static_cast<std::size_t>(i * G)], hp, hn, jac);
            for (int s = 0; s < S; ++s) {
              F[static_cast<std::size_t>(i * S + s)] = hn[s] - h[static_cast<std::size_t>(i * S + s)];
              const double f = std::fabs(F[static_cast<std::size_t>(i * S + s)]);
              worst = std::max(worst, f);
              chain = std::isnan(f) || std::isnan(chain) ? f + chain : std::max(chain, f);
            }
            for (int x = 0; x < S * S; ++x) J[static_cast<std::size_t>(i * S * S + x)] = i == 0 ? 0.0 : jac[x];
          }
          if (final_evaluation) break;  // the final iterate's residual
          bool update = true;
          if (rule) {
            const auto unit = static_cast<std::size_t>(b * D + c);
            const bool may_stop = k + 1 >= rule->min_iterations;
            if (may_stop && std::isfinite(chain)) record->decisions[unit].push_back(chain);
            update = std::isfinite(chain);
            stopped = !update || (may_stop && chain < rule->stop_atol);
            if (stopped || k + 1 == K) record->evaluations[unit].push_back(k + 1);
            if (!update) continue;  // no update; the final evaluation sees the same iterate
          }
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
  // The adaptive rule (iterations the cap); stop_atol kChooseThreshold: chosen from the data.
  bool adaptive = false;
  int min_iterations = 0;
  double stop_atol = 0.0;
};
inline constexpr double kChooseThreshold = -1.0;

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
  const double omega = static_cast<double>(static_cast<T>(w.omega));
  std::vector<double> want_residual;
  // The host's solve; adaptive, with the rule and its record.
  AdaptiveRule rule{.min_iterations = w.min_iterations, .stop_atol = w.stop_atol};
  AdaptiveRecord record;
  const auto host = [&] {
    record = AdaptiveRecord{};
    return host_windowed<CellMath, T>(wx, rec, w.with_h0 ? &h0 : nullptr, B, Tn, D, window, w.iterations, omega,
                                      want_residual, w.adaptive ? &rule : nullptr, w.adaptive ? &record : nullptr);
  };
  std::vector<double> want;
  // A chain is ambiguous at a threshold where one of its residuals at a decision lies within the
  // contract table's stop_decision band of it (a fraction of it, or ulps of T at the states'
  // size): there the device, rounding in T, may decide otherwise. Such a chain's H and counts are
  // not compared (chains are independent).
  std::vector<bool> ambiguous(static_cast<std::size_t>(B * D), false);
  const auto mark_ambiguous = [&](double atol) {
    double max_state = 0.0;
    for (double v : want) max_state = std::max(max_state, std::fabs(v));
    const double rounding = kStopDecisionBand.ulps * std::numeric_limits<T>::epsilon() * max_state;
    std::int64_t count = 0;
    for (std::size_t u = 0; u < ambiguous.size(); ++u) {
      ambiguous[u] = std::any_of(record.decisions[u].begin(), record.decisions[u].end(), [&](double m) {
        return std::fabs(m - atol) <= std::max(kStopDecisionBand.relative * atol, rounding);
      });
      count += ambiguous[u] ? 1 : 0;
    }
    return count;
  };
  // Whether the unambiguous chains of some window stopped after different numbers of evaluations.
  const auto chains_differ = [&] {
    for (std::int64_t win = 0; win < windows; ++win) {
      int fewest = std::numeric_limits<int>::max(), most = 0;
      for (std::size_t u = 0; u < ambiguous.size(); ++u) {
        if (ambiguous[u]) continue;
        const int n = record.evaluations[u][static_cast<std::size_t>(win)];
        fewest = std::min(fewest, n);
        most = std::max(most, n);
      }
      if (fewest < most) return true;
    }
    return false;
  };
  if (w.adaptive && w.stop_atol == kChooseThreshold) {
    // Of 60 thresholds spread over the residuals at decisions (those of the run to the cap), the
    // one with the fewest ambiguous chains at which the others stop after different numbers of
    // evaluations; at most half the chains ambiguous (Titans' large f32 states widen the rounding).
    rule.stop_atol = 0.0;
    (void)host();
    std::vector<double> all;
    for (const auto& chain : record.decisions)
      for (double m : chain)
        if (m > 0) all.push_back(std::log(m));
    ASSERT_FALSE(all.empty());
    std::sort(all.begin(), all.end());
    double best = 0.0;
    std::int64_t fewest_ambiguous = std::numeric_limits<std::int64_t>::max();
    for (int i = 1; i < 60; ++i) {
      rule.stop_atol = std::exp(all[all.size() * static_cast<std::size_t>(i) / 60]);
      want = host();
      const std::int64_t n = mark_ambiguous(rule.stop_atol);
      if (n < fewest_ambiguous && chains_differ()) {
        fewest_ambiguous = n;
        best = rule.stop_atol;
      }
    }
    ASSERT_LE(fewest_ambiguous, B * D / 2) << "no threshold leaves half the chains unambiguous";
    rule.stop_atol = best;
    want = host();
    (void)mark_ambiguous(best);
  } else {
    want = host();
  }
  const std::int64_t excluded = std::count(ambiguous.begin(), ambiguous.end(), true);
  SCOPED_TRACE(w.adaptive ? "adaptive, minimum " + std::to_string(w.min_iterations) + ", threshold " +
                                std::to_string(rule.stop_atol) + ", " + std::to_string(excluded) +
                                " ambiguous chains not compared"
                          : "fixed");
  DeviceBuffer<Bits> d_res(static_cast<std::size_t>(windows * (w.iterations + 1)));
  DeviceBuffer<unsigned int> d_ran(static_cast<std::size_t>(windows));
  PARARNN_CUDA_OK(d_res.status());
  PARARNN_CUDA_OK(d_ran.status());
  PARARNN_CUDA_OK(cudaMemset(d_res.get(), 0, d_res.bytes()));
  PARARNN_CUDA_OK(cudaMemset(d_ran.get(), 0, d_ran.bytes()));
  const WindowedNewtonArgs<T> a{.wx = d_wx.get(), .recurrent = d_rec.get(),
                                        .h0 = w.with_h0 ? d_h0.get() : nullptr, .H = d_H.get(),
                                        .residual_max = w.with_residual ? d_res.get() : nullptr,
                                        .evaluations = w.adaptive ? d_ran.get() : nullptr, .batch = B,
                                        .time = Tn, .channels = D, .window = window, .iterations = w.iterations,
                                        .omega = static_cast<T>(w.omega), .adaptive = w.adaptive,
                                        .min_iterations = w.min_iterations, .stop_atol = rule.stop_atol};
  PARARNN_CUDA_OK((run_windowed_newton_at<CellMath, T>(w.shape, a)));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<T> got;
  PARARNN_CUDA_OK(d_H.download(got));
  if (w.adaptive) {
    // Each window's most evaluations: the host's over its chains where none is ambiguous; else at
    // least the unambiguous chains' most and at most one beyond every chain's.
    std::vector<unsigned int> ran;
    PARARNN_CUDA_OK(d_ran.download(ran));
    ASSERT_EQ(ran.size(), static_cast<std::size_t>(windows));
    for (std::int64_t win = 0; win < windows; ++win) {
      int sure = 0, any = 0;
      for (std::size_t u = 0; u < ambiguous.size(); ++u) {
        const int n = record.evaluations[u][static_cast<std::size_t>(win)];
        any = std::max(any, n);
        if (!ambiguous[u]) sure = std::max(sure, n);
      }
      const int got_n = static_cast<int>(ran[static_cast<std::size_t>(win)]);
      if (excluded == 0) {
        EXPECT_EQ(got_n, any) << "window " << win << "'s most evaluations";
      } else {
        EXPECT_GE(got_n, sure) << "window " << win;
        EXPECT_LE(got_n, any + 1) << "window " << win;
      }
    }
  }
  std::vector<T> want_t, got_t;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto unit = static_cast<std::size_t>((static_cast<std::int64_t>(i) / (Tn * S * D)) * D +
                                               static_cast<std::int64_t>(i) % D);
    if (ambiguous[unit]) continue;
    want_t.push_back(static_cast<T>(want[i]));
    got_t.push_back(got[i]);
  }
  expect_close(want_t, got_t, kKernelVsHostTau<T>, "H");
  if (excluded > 0) return;  // the residual maxima mix the ambiguous chains' evaluations
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
  // Adaptive (cap 8): a threshold the data separates, at a small window and at the production
  // launcher; threshold 0 (every chain runs to the cap: the fixed K = 8) and one above every
  // residual (every chain stops at the minimum, 2).
  expect_windowed_equals_host<CellMath, T>({0, 3, 300, 37, 0, true, 8, 1.0, true, true, 1, kChooseThreshold}, ++seed);
  expect_windowed_equals_host<CellMath, T>(
      {kProductionLauncher, 2, 1100, 37, 200, true, 8, 1.0, true, true, 2, kChooseThreshold}, ++seed);
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 8, 1.0, true, true, 2, 0.0}, ++seed);
  expect_windowed_equals_host<CellMath, T>({0, 2, 300, 37, 0, true, 8, 1.0, true, true, 2, 1e300}, ++seed);
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
  // Adaptive: the residual maxima and the evaluations are required, the minimum within the cap.
  WindowedNewtonArgs<float> adaptive = a;
  adaptive.window = 1;
  adaptive.adaptive = true;
  adaptive.residual_max = reinterpret_cast<unsigned int*>(16);
  EXPECT_EQ((launch_windowed_newton<cells::GruDiagMath, float>(adaptive, cudaStream_t{})), cudaErrorInvalidValue);
  adaptive.evaluations = reinterpret_cast<unsigned int*>(16);
  adaptive.min_iterations = adaptive.iterations + 1;
  EXPECT_EQ((launch_windowed_newton<cells::GruDiagMath, float>(adaptive, cudaStream_t{})), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pararnn::kernels::test
