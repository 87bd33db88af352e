// launch_tile_max_abs against the host: every unit's maximum (over its chunks) equals the host's
// max|F| over the unit exactly, for partial last tiles, more chunks than rows and both float
// types; one NaN makes its unit's maximum NaN and no other; bad arguments are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "pararnn/kernels/tile_max.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

template <class T>
class TileMaxKernel : public ::testing::Test {};
using TileMaxTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(TileMaxKernel, TileMaxTypes);

// The device's per-unit maxima, reduced over chunks on the host (NaN wins).
template <class T>
std::vector<double> device_unit_max(const std::vector<T>& F, std::int64_t batch, std::int64_t rows,
                                    std::int64_t channels, std::int64_t tile, std::int64_t chunks) {
  const std::int64_t tiles = (channels + tile - 1) / tile, units = batch * tiles;
  DeviceBuffer<T> d_F(F.size()), d_out(static_cast<std::size_t>(units * chunks));
  EXPECT_EQ(d_F.upload(F), cudaSuccess);
  const TileMaxArgs<T> a{.F = d_F.get(), .batch = batch, .rows = rows, .channels = channels, .tile = tile,
                         .chunks = chunks, .out = d_out.get()};
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaSuccess);
  std::vector<T> out;
  EXPECT_EQ(d_out.download(out), cudaSuccess);
  std::vector<double> unit_max(static_cast<std::size_t>(units), 0.0);
  for (std::int64_t u = 0; u < units; ++u)
    for (std::int64_t j = 0; j < chunks; ++j) {
      const double v = static_cast<double>(out[static_cast<std::size_t>(u * chunks + j)]);
      double& m = unit_max[static_cast<std::size_t>(u)];
      m = std::isnan(m) || std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, v);
    }
  return unit_max;
}

template <class T>
std::vector<double> host_unit_max(const std::vector<T>& F, std::int64_t batch, std::int64_t rows,
                                  std::int64_t channels, std::int64_t tile) {
  const std::int64_t tiles = (channels + tile - 1) / tile;
  std::vector<double> unit_max(static_cast<std::size_t>(batch * tiles), 0.0);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < channels; ++c) {
        const double v = std::fabs(static_cast<double>(F[static_cast<std::size_t>((b * rows + r) * channels + c)]));
        double& m = unit_max[static_cast<std::size_t>(b * tiles + c / tile)];
        m = std::isnan(m) || std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, v);
      }
  return unit_max;
}

TYPED_TEST(TileMaxKernel, UnitMaximaEqualTheHostsForEveryChunking) {
  using T = TypeParam;
  const std::int64_t batch = 3, rows = 37, channels = 100;
  SplitMix64 rng(test_seed(71));
  std::vector<T> F(static_cast<std::size_t>(batch * rows * channels));
  for (auto& v : F) v = static_cast<T>(rng.uniform(-2.0, 2.0));
  for (std::int64_t tile : {64, 1, 7, 256}) {
    const std::vector<double> want = host_unit_max(F, batch, rows, channels, tile);
    for (std::int64_t chunks : {1, 5, 37, 50}) {
      SCOPED_TRACE(::testing::Message() << "tile " << tile << " chunks " << chunks);
      EXPECT_EQ(device_unit_max(F, batch, rows, channels, tile, chunks), want);
    }
  }
}

TYPED_TEST(TileMaxKernel, OneNanMakesItsUnitNanAndNoOther) {
  using T = TypeParam;
  const std::int64_t batch = 2, rows = 20, channels = 130, tile = 64;  // tiles 64, 64, 2
  std::vector<T> F(static_cast<std::size_t>(batch * rows * channels), T(0.25));
  F[static_cast<std::size_t>((1 * rows + 13) * channels + 129)] = std::numeric_limits<T>::quiet_NaN();
  F[static_cast<std::size_t>((0 * rows + 3) * channels + 70)] = T(-3);
  const std::vector<double> got = device_unit_max(F, batch, rows, channels, tile, 4);
  ASSERT_EQ(got.size(), 6u);
  for (std::size_t u = 0; u < got.size(); ++u) {
    if (u == 5) {
      EXPECT_TRUE(std::isnan(got[u]));
    } else {
      EXPECT_EQ(got[u], u == 1 ? 3.0 : 0.25) << "unit " << u;
    }
  }
}

TEST(TileMaxKernelRules, BadArgumentsAreRefused) {
  DeviceBuffer<float> d(16);
  const TileMaxArgs<float> ok{.F = d.get(), .batch = 1, .rows = 4, .channels = 4, .tile = 4, .chunks = 1, .out = d.get()};
  TileMaxArgs<float> a = ok;
  a.tile = 0;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.tile = 257;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.chunks = 0;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.rows = -1;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.out = nullptr;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.F = nullptr;
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaErrorInvalidValue);
  a = ok;
  a.batch = 0;  // nothing to do
  EXPECT_EQ(launch_tile_max_abs(a, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace pararnn::kernels::test
