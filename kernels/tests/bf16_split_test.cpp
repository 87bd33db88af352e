// launch_bf16_split: the terms add up to the source exactly (f32 in 3 terms over magnitudes
// 2^-90 … 2^90, every finite f16 in 2 terms), each term is the remainder rounded to nearest even
// in bf16 (Eigen's bfloat16(float), the host's rounding), non-finite values stay in term 0,
// planes apart by more than n leave the gap untouched, and bad arguments are refused.
#include <Eigen/Core>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pararnn/core/random.hpp"
#include "pararnn/kernels/bf16_split.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

float bf16_value(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float v = 0.0f;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}

std::uint16_t bf16_round(float v) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(v)); }

TEST(Bf16Split, ThreeTermsOfAnF32AddUpToItExactlyEachTheRoundedRemainder) {
  SplitMix64 rng(test_seed(57));
  std::vector<float> v;
  for (int i = 0; i < 200000; ++i)
    v.push_back(static_cast<float>(rng.uniform(-1.0, 1.0) * std::ldexp(1.0, static_cast<int>(rng.below(181)) - 90)));
  for (const float edge : {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-23f, 1.0f - 0x1p-24f, 0x1.ff8p0f, -0x1.01p-7f,
                           std::numeric_limits<float>::max() / 2, std::numeric_limits<float>::min()})
    v.push_back(edge);
  const auto n = static_cast<std::int64_t>(v.size()), plane = n + 5;
  DeviceBuffer<float> src(v.size());
  DeviceBuffer<std::uint16_t> dst(static_cast<std::size_t>(3 * plane));
  PARARNN_CUDA_OK(src.upload(v));
  PARARNN_CUDA_OK(dst.upload(std::vector<std::uint16_t>(dst.size(), 0x7fc1)));  // a NaN pattern in the gaps
  PARARNN_CUDA_OK(launch_bf16_split(
      {.src = src.get(), .src_type = Bf16SplitSource::f32, .dst = dst.get(), .n = n, .terms = 3, .plane = plane},
      nullptr));
  std::vector<std::uint16_t> t;
  PARARNN_CUDA_OK(dst.download(t));
  std::int64_t inexact = 0, misrounded = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float t0 = bf16_value(t[i]), t1 = bf16_value(t[plane + i]), t2 = bf16_value(t[2 * plane + i]);
    const float x = v[static_cast<std::size_t>(i)];
    inexact += static_cast<double>(t0) + static_cast<double>(t1) + static_cast<double>(t2) == static_cast<double>(x) ? 0 : 1;
    misrounded += t[i] == bf16_round(x) && t[plane + i] == bf16_round(x - t0) ? 0 : 1;
  }
  EXPECT_EQ(inexact, 0);
  EXPECT_EQ(misrounded, 0);
  for (int k = 0; k < 3; ++k)
    for (std::int64_t i = n; i < plane; ++i) EXPECT_EQ(t[k * plane + i], 0x7fc1) << "gap of term " << k;
}

TEST(Bf16Split, TwoTermsOfEveryFiniteF16AddUpToItExactly) {
  std::vector<Eigen::half> v;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(bits));
    if (Eigen::numext::isfinite(h)) v.push_back(h);
  }
  const auto n = static_cast<std::int64_t>(v.size());
  DeviceBuffer<Eigen::half> src(v.size());
  DeviceBuffer<std::uint16_t> dst(static_cast<std::size_t>(2 * n));
  PARARNN_CUDA_OK(src.upload(v));
  PARARNN_CUDA_OK(launch_bf16_split(
      {.src = src.get(), .src_type = Bf16SplitSource::f16, .dst = dst.get(), .n = n, .terms = 2, .plane = n}, nullptr));
  std::vector<std::uint16_t> t;
  PARARNN_CUDA_OK(dst.download(t));
  std::int64_t inexact = 0;
  for (std::int64_t i = 0; i < n; ++i)
    inexact += static_cast<double>(bf16_value(t[i])) + static_cast<double>(bf16_value(t[n + i])) ==
                       static_cast<double>(static_cast<float>(v[static_cast<std::size_t>(i)]))
                   ? 0
                   : 1;
  EXPECT_EQ(inexact, 0);
}

TEST(Bf16Split, NonFiniteValuesStayInTheFirstTerm) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v{inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  DeviceBuffer<float> src(v.size());
  DeviceBuffer<std::uint16_t> dst(3 * v.size());
  PARARNN_CUDA_OK(src.upload(v));
  PARARNN_CUDA_OK(launch_bf16_split({.src = src.get(), .src_type = Bf16SplitSource::f32, .dst = dst.get(),
                                     .n = 3, .terms = 3, .plane = 3},
                                    nullptr));
  std::vector<std::uint16_t> t;
  PARARNN_CUDA_OK(dst.download(t));
  EXPECT_EQ(bf16_value(t[0]), inf);
  EXPECT_EQ(bf16_value(t[1]), -inf);
  EXPECT_TRUE(std::isnan(bf16_value(t[2])));
  for (int i = 3; i < 9; ++i) EXPECT_EQ(bf16_value(t[i]), 0.0f) << i;
}

TEST(Bf16Split, RefusesBadArguments) {
  DeviceBuffer<float> src(4);
  DeviceBuffer<std::uint16_t> dst(12);
  const Bf16SplitArgs ok{.src = src.get(), .dst = dst.get(), .n = 4, .terms = 3, .plane = 4};
  PARARNN_CUDA_OK(launch_bf16_split(ok, nullptr));
  for (const int terms : {0, 4}) {
    Bf16SplitArgs a = ok;
    a.terms = terms;
    EXPECT_EQ(launch_bf16_split(a, nullptr), cudaErrorInvalidValue) << "terms " << terms;
  }
  Bf16SplitArgs a = ok;
  a.plane = 3;
  EXPECT_EQ(launch_bf16_split(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.n = -1;
  EXPECT_EQ(launch_bf16_split(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.src = nullptr;
  EXPECT_EQ(launch_bf16_split(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.dst = nullptr;
  EXPECT_EQ(launch_bf16_split(a, nullptr), cudaErrorInvalidValue);
  a.n = 0;
  a.plane = 0;
  EXPECT_EQ(launch_bf16_split(a, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace pararnn::kernels::test
