// launch_row_sum against the host loop it replaces: every element bit for bit equal to
// ((0.0 + rows[0][i]) + rows[1][i]) + … in double, for float and double rows, a single row, rows
// of mixed magnitudes (where another order would round differently), count 0 (zeros) and more
// elements than one grid-stride pass; bad arguments are refused.
#include <gtest/gtest.h>

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
           {0, 5}, {1, 7}, {8, 1000}, {3, 256 * 65536 + 3},
           {32, 77}, {4096 + 37, 769}}) {  // whole batches of loads, and batches then a remainder
    SCOPED_TRACE("count " + std::to_string(count) + " n " + std::to_string(n));
    std::vector<T> rows(static_cast<std::size_t>(count * n));
    // Magnitudes from 2^-30 to 2^30: the sum's order decides its rounding.
    for (T& v : rows) v = static_cast<T>(rng.uniform(-1.0, 1.0) * std::ldexp(1.0, static_cast<int>(rng.below(61)) - 30));
    std::vector<double> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      double sum = 0.0;
      for (std::int64_t j = 0; j < count; ++j) sum += static_cast<double>(rows[static_cast<std::size_t>(j * n + i)]);
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
