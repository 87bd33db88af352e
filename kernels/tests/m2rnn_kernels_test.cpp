// The ParaM2RNN kernels (kernels/m2rnn.hpp) against the host running the same entries of
// cells/m2rnn.hpp: the residual with gains and max|F|, the factorized walk, and the sequential
// loop in the four storage types, for states below, at and above one block's 256 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/cells/m2rnn.hpp"
#include "pararnn/kernels/m2rnn.hpp"

namespace pararnn::kernels::test {
namespace {

using cells::M2rnnMath;

template <class T>
struct M2rnnProblem {
  std::int64_t batch = 0, time = 0;
  int k = 0, v = 0;
  std::vector<T> wx, W, h0;
  std::int64_t kv() const { return static_cast<std::int64_t>(k) * v; }
  const T* raw(std::int64_t b, std::int64_t t) const { return wx.data() + (b * time + t) * (k + v + 1); }
};

// W = I + N-like(0, 0.3²) noise (the cell's hard regime, still contracting on these lengths).
template <class T>
M2rnnProblem<T> make_problem(std::int64_t batch, std::int64_t time, int k, int v, std::uint64_t seed) {
  M2rnnProblem<T> p{.batch = batch, .time = time, .k = k, .v = v};
  SplitMix64 rng(seed);
  p.wx.resize(static_cast<std::size_t>(batch * time * (k + v + 1)));
  for (auto& x : p.wx) x = static_cast<T>(rng.uniform(-1.5, 1.5));
  p.W.resize(static_cast<std::size_t>(v * v));
  for (int j = 0; j < v; ++j)
    for (int e = 0; e < v; ++e) p.W[j * v + e] = static_cast<T>((j == e ? 1.0 : 0.0) + rng.uniform(-0.5, 0.5) / v);
  p.h0.resize(static_cast<std::size_t>(batch * p.kv()));
  for (auto& x : p.h0) x = static_cast<T>(rng.uniform(-0.5, 0.5));
  return p;
}

template <class T>
struct DeviceProblem {
  DeviceBuffer<T> wx, W, h0;
  explicit DeviceProblem(const M2rnnProblem<T>& p) : wx(p.wx.size()), W(p.W.size()), h0(p.h0.size()) {
    EXPECT_EQ(wx.upload(p.wx), cudaSuccess);
    EXPECT_EQ(W.upload(p.W), cudaSuccess);
    EXPECT_EQ(h0.upload(p.h0), cudaSuccess);
  }
  M2rnnInputs<T> inputs(const M2rnnProblem<T>& p) const {
    return {.wx = wx.get(), .W = W.get(), .h0 = h0.get(), .batch = p.batch, .time = p.time, .k = p.k, .v = p.v};
  }
};

// The host sequential loop, the state rounded to StorageT every step.
template <class StorageT, class T>
std::vector<StorageT> host_sequential(const M2rnnProblem<T>& p) {
  const std::int64_t KV = p.kv();
  std::vector<StorageT> H(static_cast<std::size_t>(p.batch * p.time * KV));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::vector<T> prev(p.h0.begin() + b * KV, p.h0.begin() + (b + 1) * KV), next(static_cast<std::size_t>(KV));
    for (std::int64_t t = 0; t < p.time; ++t) {
      M2rnnMath::step(p.k, p.v, p.W.data(), p.raw(b, t), prev.data(), next.data(), static_cast<T*>(nullptr));
      for (std::int64_t i = 0; i < KV; ++i) {
        const StorageT stored = static_cast<StorageT>(next[static_cast<std::size_t>(i)]);
        H[static_cast<std::size_t>((b * p.time + t) * KV + i)] = stored;
        prev[static_cast<std::size_t>(i)] = static_cast<T>(stored);
      }
    }
  }
  return H;
}

struct Shape {
  std::int64_t batch, time;
  int k, v;
};
const std::vector<Shape> kShapes = {{3, 1, 2, 3}, {2, 300, 3, 5}, {2, 120, 16, 16}, {1, 90, 8, 40}};

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.time) + " K=" + std::to_string(s.k) +
         " V=" + std::to_string(s.v);
}

template <class T>
class M2rnnKernels : public ::testing::Test {};
using ComputeTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(M2rnnKernels, ComputeTypes);

TYPED_TEST(M2rnnKernels, ResidualWithGainsAndWalkMatchTheHost) {
  using T = TypeParam;
  std::uint64_t seed = test_seed(20261101);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const auto p = make_problem<T>(s.batch, s.time, s.k, s.v, ++seed);
    const std::int64_t KV = p.kv(), n = p.batch * p.time * KV;
    // A trajectory near the true one (the sequential answer plus noise), as in a Newton solve.
    std::vector<T> H = host_sequential<T>(p);
    SplitMix64 rng(++seed);
    for (auto& h : H) h += static_cast<T>(rng.uniform(-0.05, 0.05));
    DeviceProblem<T> d(p);
    DeviceBuffer<T> d_H(H.size()), d_F(H.size()), d_G(H.size()), d_max(1);
    DeviceBuffer<unsigned char> d_ws(m2rnn_residual_workspace_bytes<T>());
    PARARNN_CUDA_OK(d_H.upload(H));
    PARARNN_CUDA_OK((launch_m2rnn_residual<T>({.in = d.inputs(p), .H = d_H.get(), .residual = d_F.get(),
                                                .gain = d_G.get(), .max_abs_residual = d_max.get()},
                                               d_ws.get(), d_ws.size(), cudaStream_t{})));
    std::vector<T> F_dev, G_dev, max_dev;
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    PARARNN_CUDA_OK(d_F.download(F_dev));
    PARARNN_CUDA_OK(d_G.download(G_dev));
    PARARNN_CUDA_OK(d_max.download(max_dev));
    std::vector<T> F(static_cast<std::size_t>(n)), G(F.size()), h_new(static_cast<std::size_t>(KV));
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t t = 0; t < p.time; ++t) {
        const T* prev = t == 0 ? p.h0.data() + b * KV : H.data() + (b * p.time + t - 1) * KV;
        const std::int64_t at = (b * p.time + t) * KV;
        M2rnnMath::step(p.k, p.v, p.W.data(), p.raw(b, t), prev, h_new.data(), G.data() + at);
        for (std::int64_t i = 0; i < KV; ++i) F[at + i] = h_new[static_cast<std::size_t>(i)] - H[at + i];
      }
    expect_close(F, F_dev, kKernelVsHostTau<T>, "F");
    expect_close(G, G_dev, kKernelVsHostTau<T>, "gain");
    const T host_max = host_nan_max_abs(F_dev);
    EXPECT_TRUE(same_bits(max_dev[0], host_max)) << hexfloat(max_dev[0]) << " vs " << hexfloat(host_max);

    // The walk on the device's own F and G, against the host walk on the same values.
    PARARNN_CUDA_OK((launch_m2rnn_walk<T>(d.inputs(p), d_G.get(), d_F.get(), cudaStream_t{})));
    std::vector<T> delta_dev;
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    PARARNN_CUDA_OK(d_F.download(delta_dev));
    std::vector<T> delta = F_dev, carried(static_cast<std::size_t>(KV));
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t t = 1; t < p.time; ++t) {
        const std::int64_t at = (b * p.time + t) * KV;
        M2rnnMath::apply_jacobian(p.k, p.v, p.W.data(), M2rnnMath::forget(p.k, p.v, p.raw(b, t)),
                                  G_dev.data() + at, delta.data() + at - KV, carried.data());
        for (std::int64_t i = 0; i < KV; ++i) delta[at + i] += carried[static_cast<std::size_t>(i)];
      }
    expect_close(delta, delta_dev, kKernelVsHostTau<T>, "walk");
  }
}

template <class StorageT>
class M2rnnSequential : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, double, __half, __nv_bfloat16>;
TYPED_TEST_SUITE(M2rnnSequential, StorageTypes);

TYPED_TEST(M2rnnSequential, MatchesTheHostLoopRoundingEveryStep) {
  using StorageT = TypeParam;
  using T = ComputeOf<StorageT>;
  std::uint64_t seed = test_seed(20261102);
  // Half storage: the host and device loops may round a step to neighbouring values and carry
  // that on; the storage dtype's trajectory τ bounds the difference.
  const double tau = std::is_same_v<StorageT, __half>          ? tolerance_for({.dtype = DType::f16}).atol
                     : std::is_same_v<StorageT, __nv_bfloat16> ? tolerance_for({.dtype = DType::bf16}).atol
                                                               : kKernelVsHostTau<T>;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const auto p = make_problem<T>(s.batch, s.time, s.k, s.v, ++seed);
    DeviceProblem<T> d(p);
    DeviceBuffer<StorageT> d_H(static_cast<std::size_t>(p.batch * p.time * p.kv()));
    PARARNN_CUDA_OK((launch_m2rnn_sequential<StorageT>(d.inputs(p), d_H.get(), cudaStream_t{})));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<StorageT> actual;
    PARARNN_CUDA_OK(d_H.download(actual));
    const std::vector<StorageT> expected = host_sequential<StorageT>(p);
    std::vector<double> a(actual.size()), e(expected.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<double>(static_cast<float>(actual[i]));
      e[i] = static_cast<double>(static_cast<float>(expected[i]));
    }
    expect_close(e, a, tau, "H");
  }
}

TEST(M2rnnLaunchers, RefuseBadArgumentsAndStatesThatDoNotFit) {
  DeviceBuffer<float> buf(64);
  const M2rnnInputs<float> ok{.wx = buf.get(), .W = buf.get(), .h0 = buf.get(), .batch = 1, .time = 2, .k = 2, .v = 2};
  M2rnnInputs<float> no_h0 = ok;
  no_h0.h0 = nullptr;
  EXPECT_EQ(launch_m2rnn_walk<float>(no_h0, buf.get(), buf.get(), cudaStream_t{}), cudaErrorInvalidValue);
  M2rnnInputs<float> zero_k = ok;
  zero_k.k = 0;
  EXPECT_EQ(launch_m2rnn_sequential<float>(zero_k, buf.get(), cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_FALSE(m2rnn_fits_on_gpu(256, 256, sizeof(float)));
  EXPECT_TRUE(m2rnn_fits_on_gpu(64, 64, sizeof(double)));
  M2rnnInputs<float> huge = ok;
  huge.k = huge.v = 256;
  EXPECT_EQ(launch_m2rnn_walk<float>(huge, buf.get(), buf.get(), cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_EQ((launch_m2rnn_residual<float>({.in = ok, .H = buf.get(), .residual = buf.get(),
                                           .max_abs_residual = buf.get()}, nullptr, 0, cudaStream_t{})),
            cudaErrorInvalidValue)
      << "max|F| without a workspace";
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pararnn::kernels::test
