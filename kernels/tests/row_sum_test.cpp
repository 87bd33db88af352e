// launch_row_sum against its order written as a host loop: every element bit for bit equal to the
// in-order sums of kRowSumRanges row ranges added in order (row_sum.hpp), in double, for float and
// double rows, a single row, rows of mixed magnitudes (where another order would round
// differently), count 0 (zeros), counts that fill the ranges unevenly, and more elements than one
// grid-stride pass; at most kRowSumRanges rows the plain row order; bad arguments are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pararnn/core/random.hpp"
#include "pararnn/kernels/row_sum.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

template <class T>
class RowSumKernel : public ::testing::Test {};
using RowSumTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RowSumKernel, RowSumTypes);

TYPED_TEST(RowSumKernel, EqualsTheHostLoopBitForBit) {
  using T = TypeParam;
  SplitMix64 rng(test_seed(41));
  for (const auto& [count, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 5}, {1, 7}, {8, 1000}, {3, 256 * 65536 + 3}, {32, 77}, {33, 40},
           {4096 + 37, 769}, {4096, 768}}) {  // uneven and even ranges; batches of loads and a remainder
    SCOPED_TRACE("count " + std::to_string(count) + " n " + std::to_string(n));
    std::vector<T> rows(static_cast<std::size_t>(count * n));
    // Magnitudes from 2^-30 to 2^30: the sum's order decides its rounding.
    for (T& v : rows) v = static_cast<T>(rng.uniform(-1.0, 1.0) * std::ldexp(1.0, static_cast<int>(rng.below(61)) - 30));
    std::vector<double> want(static_cast<std::size_t>(n));
    const std::int64_t q = (count + kRowSumRanges - 1) / kRowSumRanges;
    for (std::int64_t i = 0; i < n; ++i) {
      double sum = 0.0, plain = 0.0;
      for (std::int64_t r = 0; r < kRowSumRanges; ++r) {
        double range = 0.0;
        for (std::int64_t j = r * q; j < std::min((r + 1) * q, count); ++j)
          range += static_cast<double>(rows[static_cast<std::size_t>(j * n + i)]);
        sum += range;
      }
      for (std::int64_t j = 0; j < count; ++j) plain += static_cast<double>(rows[static_cast<std::size_t>(j * n + i)]);
      if (count <= kRowSumRanges) EXPECT_TRUE(same_bits(sum, plain)) << "column " << i;
      want[static_cast<std::size_t>(i)] = sum;
    }
    DeviceBuffer<T> d_rows(rows.size());
    DeviceBuffer<double> d_out(static_cast<std::size_t>(n));
    PARARNN_CUDA_OK(d_rows.upload(rows));
    PARARNN_CUDA_OK(launch_row_sum<T>({.rows = d_rows.get(), .out = d_out.get(), .count = count, .n = n}, nullptr));
    std::vector<double> got;
    PARARNN_CUDA_OK(d_out.download(got));
    std::int64_t differing = 0;
    for (std::int64_t i = 0; i < n; ++i)
      differing += same_bits(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)]) ? 0 : 1;
    EXPECT_EQ(differing, 0);
  }
}

TYPED_TEST(RowSumKernel, RefusesBadArguments) {
  using T = TypeParam;
  DeviceBuffer<T> rows(4);
  DeviceBuffer<double> out(2);
  EXPECT_EQ(launch_row_sum<T>({.rows = rows.get(), .out = out.get(), .count = -1, .n = 2}, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_row_sum<T>({.rows = rows.get(), .out = out.get(), .count = 2, .n = -2}, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_row_sum<T>({.rows = nullptr, .out = out.get(), .count = 2, .n = 2}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_row_sum<T>({.rows = rows.get(), .out = nullptr, .count = 2, .n = 2}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_row_sum<T>({.rows = nullptr, .out = out.get(), .count = 0, .n = 2}, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace pararnn::kernels::test
