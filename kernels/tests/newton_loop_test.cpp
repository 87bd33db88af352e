// The fixed-K loop's small kernels (kernels/newton_loop.hpp) against the host rule they encode,
// state by state: the decision (record, stop on a non-finite or a below-threshold residual,
// commit), nothing once stopped; the final kernel's residual and kGuessSkip; the delivery of an
// unread loop (the iterate of parity c copied, the deferred guess left to the caller's launches,
// nothing when the iterate is the output, every element NaN when the gate fires); the guess's
// zero iterate under kGuessSkip. And launch_write_argument_bytes (kernels/strided_copy.hpp): every
// byte arrives, across chunk boundaries, and the host source may change right after the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "pararnn/kernels/newton_loop.hpp"
#include "pararnn/kernels/strided_copy.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A loop state on the device, zeroed as the caller zeroes it, with room for `steps` residuals.
struct State {
  explicit State(int steps) : d(static_cast<std::size_t>(kLoopHeader + steps)) {
    EXPECT_EQ(cudaMemset(d.get(), 0, d.bytes()), cudaSuccess);
  }
  std::vector<double> host() const {
    std::vector<double> out;
    EXPECT_EQ(d.download(out), cudaSuccess);
    return out;
  }
  DeviceBuffer<double> d;
};

// Runs decisions over the residuals [r_0, r_1, ...] (the step's max|F| and, with a result, the
// max|F| of its result) and returns the state.
std::vector<double> decide(const std::vector<double>& residuals, bool stop, double atol, bool with_result) {
  State s(static_cast<int>(residuals.size()));
  DeviceBuffer<double> max_abs(2);
  for (std::size_t i = 0; i < residuals.size(); ++i) {
    EXPECT_EQ(max_abs.upload({residuals[i], 10.0 + static_cast<double>(i)}), cudaSuccess);
    EXPECT_EQ(launch_newton_loop_decision<double>({.max_abs = max_abs.get(), .state = s.d.get(),
                                                  .step = static_cast<std::int64_t>(i), .stop = stop,
                                                  .stop_atol = atol, .with_result = with_result},
                                                 cudaStream_t{}),
              cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s.host();
}

TEST(NewtonLoop, TheDecisionIsTheHostsFixedKRule) {
  // Every step commits: committed K, the history, the last result partial.
  std::vector<double> s = decide({3.0, 2.0, 1.0}, true, 0.5, true);
  EXPECT_EQ(s[kStopped], 0.0);
  EXPECT_EQ(s[kCommitted], 3.0);
  EXPECT_EQ(s[kResultPartial], 12.0);
  EXPECT_EQ(s[kLoopHeader + 2], 1.0);
  // Below the threshold at step 2: stopped, converged, 2 commits, final = that residual, and the
  // step after it is not recorded.
  s = decide({3.0, 2.0, 0.25, 0.125}, true, 0.5, false);
  EXPECT_EQ(s[kStopped], 1.0);
  EXPECT_EQ(s[kConverged], 1.0);
  EXPECT_EQ(s[kCommitted], 2.0);
  EXPECT_EQ(s[kFinal], 0.25);
  EXPECT_EQ(s[kLoopHeader + 3], 0.0);
  // Without a threshold nothing stops below it.
  s = decide({3.0, 0.25}, false, 0.5, false);
  EXPECT_EQ(s[kStopped], 0.0);
  EXPECT_EQ(s[kCommitted], 2.0);
  // A NaN at step 1: stopped, not converged, 1 commit, final NaN; an infinity alike.
  s = decide({3.0, kNaN, 1.0}, true, 0.5, false);
  EXPECT_EQ(s[kStopped], 1.0);
  EXPECT_EQ(s[kConverged], 0.0);
  EXPECT_EQ(s[kCommitted], 1.0);
  EXPECT_TRUE(std::isnan(s[kFinal]));
  s = decide({std::numeric_limits<double>::infinity()}, true, 0.5, false);
  EXPECT_EQ(s[kCommitted], 0.0);
  EXPECT_EQ(s[kFinal], std::numeric_limits<double>::infinity());
}

// The final kernel after `committed` commits (stopped or not), with `guess_pending`.
std::vector<double> finish(double committed, bool stopped, double residual, bool partial, double result_partial,
                           bool guess_pending) {
  State s(0);
  std::vector<double> header(kLoopHeader, 0.0);
  header[kCommitted] = committed;
  header[kStopped] = stopped ? 1.0 : 0.0;
  header[kFinal] = stopped ? 7.0 : 0.0;
  header[kResultPartial] = result_partial;
  EXPECT_EQ(s.d.upload(header), cudaSuccess);
  DeviceBuffer<float> r(1);
  EXPECT_EQ(r.upload({static_cast<float>(residual)}), cudaSuccess);
  EXPECT_EQ(launch_newton_loop_final<float>({.residual = r.get(), .state = s.d.get(), .partial = partial,
                                             .guess_pending = guess_pending},
                                            cudaStream_t{}),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return s.host();
}

TEST(NewtonLoop, TheFinalKernelSetsTheResidualAndWhetherTheGuessIsPending) {
  EXPECT_EQ(finish(3, false, 0.5, false, 0.0, true)[kFinal], 0.5);
  EXPECT_EQ(finish(3, false, 0.5, true, 2.0, true)[kFinal], 2.0);  // max(result partial, chunk starts)
  EXPECT_TRUE(std::isnan(finish(3, false, kNaN, true, 2.0, true)[kFinal]));
  EXPECT_EQ(finish(0, true, 0.5, false, 0.0, true)[kFinal], 7.0);  // stopped: the decision's
  EXPECT_EQ(finish(0, true, 0.5, false, 0.0, true)[kGuessSkip], 0.0);
  EXPECT_EQ(finish(0, true, 0.5, false, 0.0, false)[kGuessSkip], 1.0);
  EXPECT_EQ(finish(1, true, 0.5, false, 0.0, true)[kGuessSkip], 1.0);
}

// deliver on a state of `committed` commits, kGuessSkip `guess_skip`, final `final_residual`;
// buffers 0 and 1 hold 1s and 2s, out holds 9s (or is buffer `out_is` when >= 0).
std::vector<float> deliver(double committed, double guess_skip, double final_residual, bool gate, int out_is = -1) {
  constexpr std::int64_t n = 1000;
  State s(0);
  std::vector<double> header(kLoopHeader, 0.0);
  header[kCommitted] = committed;
  header[kGuessSkip] = guess_skip;
  header[kFinal] = final_residual;
  EXPECT_EQ(s.d.upload(header), cudaSuccess);
  DeviceBuffer<float> b0(n), b1(n), own(n);
  EXPECT_EQ(b0.upload(std::vector<float>(n, 1.0f)), cudaSuccess);
  EXPECT_EQ(b1.upload(std::vector<float>(n, 2.0f)), cudaSuccess);
  EXPECT_EQ(own.upload(std::vector<float>(n, 9.0f)), cudaSuccess);
  float* out = out_is == 0 ? b0.get() : out_is == 1 ? b1.get() : own.get();
  EXPECT_EQ(launch_newton_loop_deliver<float>({.state = s.d.get(), .buffers = {b0.get(), b1.get()}, .out = out,
                                               .n = n, .gate = gate, .residual_fail = 1.0},
                                              cudaStream_t{}),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> result;
  EXPECT_EQ((out_is == 0 ? b0 : out_is == 1 ? b1 : own).download(result), cudaSuccess);
  return result;
}

TEST(NewtonLoop, DeliveryCopiesTheIterateOfTheCommitsParityAndAppliesTheGate) {
  const auto all = [](const std::vector<float>& v, float x) {
    for (const float e : v)
      if (!(e == x)) return false;
    return true;
  };
  EXPECT_TRUE(all(deliver(2, 1, 0.5, true), 1.0f));   // c even: buffer 0
  EXPECT_TRUE(all(deliver(3, 1, 0.5, true), 2.0f));   // c odd: buffer 1
  EXPECT_TRUE(all(deliver(0, 0, 0.5, true), 9.0f));   // the deferred guess: the caller writes out
  EXPECT_TRUE(all(deliver(1, 1, 0.5, true, 1), 2.0f));  // the iterate is the output: untouched
  EXPECT_TRUE(all(deliver(3, 1, 1.0, true), 2.0f));   // at residual_fail: no gate (the host's >)
  EXPECT_TRUE(all(deliver(3, 1, 1.5, false), 2.0f));  // no gate asked
  for (const double bad : {1.5, kNaN, std::numeric_limits<double>::infinity()}) {
    for (const int out_is : {-1, 0}) {
      const std::vector<float> v = deliver(3, 1, bad, true, out_is);
      for (const float e : v) ASSERT_TRUE(std::isnan(e)) << bad << " " << out_is;
    }
  }
  EXPECT_EQ(launch_newton_loop_deliver<float>({.state = nullptr, .out = nullptr, .n = 1}, cudaStream_t{}),
            cudaErrorInvalidValue);
}

TEST(NewtonLoop, TheGuessZeroIterateIsWrittenOnlyWhenTheGuessIsPending) {
  for (const double skip : {0.0, 1.0}) {
    State s(0);
    std::vector<double> header(kLoopHeader, 0.0);
    header[kGuessSkip] = skip;
    PARARNN_CUDA_OK(s.d.upload(header));
    DeviceBuffer<double> b(300000);
    PARARNN_CUDA_OK(b.upload(std::vector<double>(300000, 5.0)));
    PARARNN_CUDA_OK(launch_newton_loop_guess_zero<double>(s.d.get(), b.get(), 300000, cudaStream_t{}));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> v;
    PARARNN_CUDA_OK(b.download(v));
    EXPECT_EQ(v, std::vector<double>(300000, skip == 0.0 ? 0.0 : 5.0)) << "kGuessSkip " << skip;
  }
}

TEST(WriteArgumentBytes, EveryByteArrivesAndTheSourceMayChangeAtOnce) {
  for (const std::size_t bytes : {std::size_t{1}, kArgumentChunkBytes - 1, kArgumentChunkBytes,
                                  2 * kArgumentChunkBytes + 37}) {
    SplitMix64 rng(bytes);
    std::vector<unsigned char> source(bytes);
    for (auto& b : source) b = static_cast<unsigned char>(rng.next());
    const std::vector<unsigned char> expected = source;
    DeviceBuffer<unsigned char> d(bytes + 2);
    PARARNN_CUDA_OK(d.upload(std::vector<unsigned char>(bytes + 2, 0xAB)));
    PARARNN_CUDA_OK(launch_write_argument_bytes(d.get() + 1, source.data(), bytes, cudaStream_t{}));
    std::fill(source.begin(), source.end(), 0);  // before the copy ran: the launches hold the bytes
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<unsigned char> got;
    PARARNN_CUDA_OK(d.download(got));
    EXPECT_EQ(got.front(), 0xAB);
    EXPECT_EQ(got.back(), 0xAB);
    EXPECT_EQ(std::vector<unsigned char>(got.begin() + 1, got.end() - 1), expected) << bytes << " bytes";
  }
  EXPECT_EQ(launch_write_argument_bytes(nullptr, nullptr, 0, cudaStream_t{}), cudaSuccess);
  EXPECT_EQ(launch_write_argument_bytes(nullptr, "x", 1, cudaStream_t{}), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pararnn::kernels::test
