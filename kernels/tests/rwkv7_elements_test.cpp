// launch_rwkv7_elements against the host preparation of solver/src/cpu/exact_linear.cpp's scan()
// (the same cells/rwkv7.hpp math: J_t = G_tᵀ, drive rows, S_0 = step(S0)), and the full device
// path (elements, then launch_scan_dense with RWKV-7's addressing) against the factorized step
// loop on the host within the contract's RWKV-7 linear_scan band.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/cells/rwkv7.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/kernels/rwkv7_elements.hpp"
#include "pararnn/kernels/scan_dense.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

using cells::Rwkv7Math;

template <class T>
struct Rwkv7Problem {
  std::int64_t batch = 0, time = 0, heads = 0, d = 0;
  std::vector<T> wx, h0;  // [b][t][6 H d], empty or [b][head][d][d]
  std::int64_t dd() const { return d * d; }
  std::size_t s_index(std::int64_t b, std::int64_t t, std::int64_t head) const {
    return static_cast<std::size_t>(((b * time + t) * heads + head) * dd());
  }
  std::vector<T> gates(std::int64_t b, std::int64_t head, std::int64_t t) const {
    std::vector<T> g(static_cast<std::size_t>(Rwkv7Math::gates_size(static_cast<int>(d))));
    Rwkv7Math::gates(static_cast<int>(d), wx.data() + (b * time + t) * 6 * heads * d + head * d,
                     heads * d, g.data());
    return g;
  }
  std::vector<T> initial(std::int64_t b, std::int64_t head) const {
    if (h0.empty()) return std::vector<T>(static_cast<std::size_t>(dd()), T(0));
    const auto* p = h0.data() + (b * heads + head) * dd();
    return std::vector<T>(p, p + dd());
  }
  std::string describe() const {
    return "B=" + std::to_string(batch) + " T=" + std::to_string(time) + " H=" +
           std::to_string(heads) + " d=" + std::to_string(d) + (h0.empty() ? " no h0" : " h0");
  }
};

template <class T>
Rwkv7Problem<T> make_problem(std::int64_t batch, std::int64_t time, std::int64_t heads,
                             std::int64_t d, bool with_h0, std::uint64_t seed) {
  Rwkv7Problem<T> p{.batch = batch, .time = time, .heads = heads, .d = d};
  SplitMix64 rng(seed);
  p.wx.resize(static_cast<std::size_t>(batch * time * 6 * heads * d));
  for (auto& v : p.wx) v = static_cast<T>(rng.uniform(-1.0, 1.0));
  if (with_h0) {
    p.h0.resize(static_cast<std::size_t>(batch * heads * d * d));
    for (auto& v : p.h0) v = static_cast<T>(rng.uniform(-1.0, 1.0));
  }
  return p;
}

template <class T>
struct DeviceRwkv7 {
  DeviceBuffer<T> wx, h0, jac, S;
  explicit DeviceRwkv7(const Rwkv7Problem<T>& p)
      : wx(p.wx.size()), h0(p.h0.size()),
        jac(static_cast<std::size_t>(p.batch * p.heads * p.time * p.dd())),
        S(static_cast<std::size_t>(p.batch * p.time * p.heads * p.dd())) {}
  Rwkv7ElementArgs<T> args(const Rwkv7Problem<T>& p) const {
    return {.wx = wx.get(), .h0 = p.h0.empty() ? nullptr : h0.get(), .jac = jac.get(),
            .S = S.get(), .batch = p.batch, .time = p.time, .heads = p.heads, .d = p.d};
  }
};

template <class T>
class Rwkv7Elements : public ::testing::Test {};
struct DtypeName {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "f64";
  }
};
using Rwkv7Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Rwkv7Elements, Rwkv7Types, DtypeName);

TYPED_TEST(Rwkv7Elements, MatchTheHostPreparationOfTheScan) {
  using T = TypeParam;
  std::uint64_t seed = test_seed(20260401);
  for (std::int64_t d : {1, 4, 16, 64})
    for (bool with_h0 : {false, true}) {
      const auto p = make_problem<T>(2, 33, 3, d, with_h0, ++seed);
      SCOPED_TRACE(p.describe());
      std::vector<T> J(static_cast<std::size_t>(p.batch * p.heads * p.time * p.dd()));
      std::vector<T> S(J.size());
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t head = 0; head < p.heads; ++head)
          for (std::int64_t t = 0; t < p.time; ++t) {
            const std::vector<T> g = p.gates(b, head, t);
            T* S_t = S.data() + p.s_index(b, t, head);
            if (t == 0) {
              Rwkv7Math::step(static_cast<int>(d), g.data(), p.initial(b, head).data(), S_t);
              continue;
            }
            Rwkv7Math::transition(static_cast<int>(d), g.data(),
                                  J.data() + ((b * p.heads + head) * p.time + t) * p.dd());
            for (int i = 0; i < d; ++i)
              Rwkv7Math::drive_row(static_cast<int>(d), g.data(), i, S_t + i * d);
          }
      DeviceRwkv7<T> dev(p);
      PARARNN_CUDA_OK(dev.wx.upload(p.wx));
      PARARNN_CUDA_OK(dev.h0.upload(p.h0));
      PARARNN_CUDA_OK(cudaMemset(dev.jac.get(), 0, dev.jac.bytes()));  // J_0 is not written
      PARARNN_CUDA_OK(launch_rwkv7_elements<T>(dev.args(p), cudaStream_t{}));
      PARARNN_CUDA_OK(cudaDeviceSynchronize());
      std::vector<T> J_dev, S_dev;
      PARARNN_CUDA_OK(dev.jac.download(J_dev));
      PARARNN_CUDA_OK(dev.S.download(S_dev));
      expect_close(J, J_dev, kKernelVsHostTau<T>, "J");
      expect_close(S, S_dev, kKernelVsHostTau<T>, "S elements");
    }
}

TYPED_TEST(Rwkv7Elements, ScannedElementsAgreeWithTheStepLoop) {
  using T = TypeParam;
  const Tolerance band = tolerance_for({.dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64,
                                        .metric = Metric::linear_scan,
                                        .cell = "rwkv7"});
  std::uint64_t seed = test_seed(20260402);
  for (std::int64_t d : {4, 16})
    for (bool with_h0 : {false, true}) {
      const auto p = make_problem<T>(2, 1500, 2, d, with_h0, ++seed);
      SCOPED_TRACE(p.describe());
      std::vector<T> expected(static_cast<std::size_t>(p.batch * p.time * p.heads * p.dd()));
      for (std::int64_t b = 0; b < p.batch; ++b)
        for (std::int64_t head = 0; head < p.heads; ++head) {
          std::vector<T> prev = p.initial(b, head), next(prev.size());
          for (std::int64_t t = 0; t < p.time; ++t) {
            Rwkv7Math::step(static_cast<int>(d), p.gates(b, head, t).data(), prev.data(),
                            next.data());
            std::copy(next.begin(), next.end(), expected.begin() + static_cast<std::ptrdiff_t>(p.s_index(b, t, head)));
            prev.swap(next);
          }
        }
      DeviceRwkv7<T> dev(p);
      PARARNN_CUDA_OK(dev.wx.upload(p.wx));
      PARARNN_CUDA_OK(dev.h0.upload(p.h0));
      const Rwkv7ElementArgs<T> args = dev.args(p);
      const DenseScanArgs<T> scan = rwkv7_scan_args(args);
      DeviceBuffer<unsigned char> ws(scan_dense_workspace_bytes<T>(scan));
      PARARNN_CUDA_OK(ws.status());
      PARARNN_CUDA_OK(launch_rwkv7_elements<T>(args, cudaStream_t{}));
      PARARNN_CUDA_OK(launch_scan_dense<T>(scan, ws.get(), ws.size(), cudaStream_t{}));
      PARARNN_CUDA_OK(cudaDeviceSynchronize());
      std::vector<T> actual;
      PARARNN_CUDA_OK(dev.S.download(actual));
      expect_close(expected, actual, band.atol, "S (band: " + band.source + ")");
    }
}

TEST(Rwkv7ElementsLauncher, RefusesBadArgumentsAndAcceptsEmptyProblems) {
  DeviceBuffer<float> d_buf(6 * 16);
  Rwkv7ElementArgs<float> a{.wx = d_buf.get(), .jac = d_buf.get(), .S = d_buf.get(), .batch = 1,
                            .time = 1, .heads = 1, .d = 4};
  auto with = [&](auto edit) {
    Rwkv7ElementArgs<float> b = a;
    edit(b);
    return launch_rwkv7_elements<float>(b, cudaStream_t{});
  };
  EXPECT_EQ(with([](auto& b) { b.wx = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& b) { b.S = nullptr; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& b) { b.d = kDenseScanMaxN + 1; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& b) { b.time = -1; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](auto& b) { b.time = 0; }), cudaSuccess);
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pararnn::kernels::test
