// launch_strided_copy against the host gather it replaces: permuted, time-skipped, broadcast
// (zero stride) and reversed (negative stride) views, every element size, bit for bit. And
// launch_strided_store against a host scatter: every conversion it performs (the host's
// __float2half_rn / __float2bfloat16_rn as the rounding reference), the refused ones, and that it
// writes nothing outside the view. And launch_clamp_abs against std::clamp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "pararnn/kernels/strided_copy.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

struct View {
  int rank;
  std::int64_t shape[kStridedCopyMaxRank];
  std::int64_t strides[kStridedCopyMaxRank];
  std::int64_t origin;  // element offset of index (0, ..., 0) in the source
};

template <class Bits>
void expect_gather_matches_host(const View& v, std::size_t source_elements, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<Bits> source(source_elements);
  for (auto& s : source) s = static_cast<Bits>(rng.next());
  std::int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  std::vector<Bits> expected(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, offset = v.origin;
    for (int d = v.rank - 1; d >= 0; --d) {
      offset += (rest % v.shape[d]) * v.strides[d];
      rest /= v.shape[d];
    }
    expected[static_cast<std::size_t>(i)] = source[static_cast<std::size_t>(offset)];
  }
  DeviceBuffer<Bits> d_source(source.size()), d_out(expected.size());
  PARARNN_CUDA_OK(d_source.upload(source));
  StridedCopyArgs args{.src = d_source.get() + v.origin, .dst = d_out.get(), .rank = v.rank,
                       .element_bytes = static_cast<int>(sizeof(Bits))};
  for (int d = 0; d < v.rank; ++d) {
    args.shape[d] = v.shape[d];
    args.strides[d] = v.strides[d];
  }
  PARARNN_CUDA_OK(launch_strided_copy(args, cudaStream_t{}));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<Bits> actual;
  PARARNN_CUDA_OK(d_out.download(actual));
  EXPECT_EQ(actual, expected);
}

TEST(StridedCopyKernel, GathersEveryViewBitForBitForEveryElementSize) {
  const std::uint64_t seed = test_seed(20260301);
  // Storage (2T, B, d) = (64, 3, 5): x is its permutation (B, 2T, d) with every other step.
  const View permuted_skip{3, {3, 32, 5}, {5, 2 * 3 * 5, 1}, 0};
  // (B, T, d) with the batch axis broadcast and time reversed.
  const View broadcast_reversed{3, {4, 17, 6}, {0, -6, 1}, 16 * 6};
  const View four_d{4, {2, 3, 4, 5}, {1, 2, 6, 24}, 0};  // fully transposed
  const View scalar{0, {}, {}, 7};
  for (const View& v : {permuted_skip, broadcast_reversed, four_d, scalar}) {
    expect_gather_matches_host<std::uint16_t>(v, 4096, seed);
    expect_gather_matches_host<std::uint32_t>(v, 4096, seed + 1);
    expect_gather_matches_host<std::uint64_t>(v, 4096, seed + 2);
  }
}

TEST(StridedCopyLauncher, RefusesBadArgumentsAndCopiesNothingForEmptyViews) {
  StridedCopyArgs too_deep{.rank = kStridedCopyMaxRank + 1};
  EXPECT_EQ(launch_strided_copy(too_deep, cudaStream_t{}), cudaErrorInvalidValue);
  StridedCopyArgs odd_size{.rank = 1, .element_bytes = 3};
  odd_size.shape[0] = 1;
  EXPECT_EQ(launch_strided_copy(odd_size, cudaStream_t{}), cudaErrorInvalidValue);
  StridedCopyArgs null_source{.rank = 1};
  null_source.shape[0] = 4;
  EXPECT_EQ(launch_strided_copy(null_source, cudaStream_t{}), cudaErrorInvalidValue);
  StridedCopyArgs empty{.rank = 2};
  empty.shape[0] = 3;  // shape[1] = 0
  EXPECT_EQ(launch_strided_copy(empty, cudaStream_t{}), cudaSuccess);
}

// The host reference of one stored element, as raw bits of the destination type.
template <class DstT>
DstT host_convert(float v) {
  if constexpr (std::is_same_v<DstT, double>) return static_cast<double>(v);
  else if constexpr (std::is_same_v<DstT, float>) return v;
  else if constexpr (std::is_same_v<DstT, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

template <class DstT>
void expect_store_matches_host(StoreType dst_type, const View& v, std::size_t dst_elements, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::int64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= v.shape[d];
  std::vector<float> source(static_cast<std::size_t>(n));
  // Values whose f16 / bf16 roundings differ from truncation, ties included (1 + 2^-11 rounds to
  // even in f16), and the extremes (f16 overflow to inf, subnormals).
  const float specials[] = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 70000.0f,
                            std::ldexp(1.0f, -20), -0.0f};
  for (std::size_t i = 0; i < source.size(); ++i)
    source[i] = i < std::size(specials) ? specials[i] : static_cast<float>(rng.normal() * 100.0);
  // The destination's storage filled with a marker: what the view does not cover stays it.
  DstT marker;
  std::memset(&marker, 0x5a, sizeof marker);
  std::vector<DstT> expected(dst_elements, marker);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, offset = v.origin;
    for (int d = v.rank - 1; d >= 0; --d) {
      offset += (rest % v.shape[d]) * v.strides[d];
      rest /= v.shape[d];
    }
    expected[static_cast<std::size_t>(offset)] = host_convert<DstT>(source[static_cast<std::size_t>(i)]);
  }
  DeviceBuffer<float> d_source(source.size());
  DeviceBuffer<DstT> d_dst(dst_elements);
  PARARNN_CUDA_OK(d_source.upload(source));
  PARARNN_CUDA_OK(d_dst.upload(std::vector<DstT>(dst_elements, marker)));
  StridedStoreArgs args{.src = d_source.get(), .src_type = StoreType::f32, .dst = d_dst.get() + v.origin,
                        .dst_type = dst_type, .rank = v.rank};
  for (int d = 0; d < v.rank; ++d) {
    args.shape[d] = v.shape[d];
    args.strides[d] = v.strides[d];
  }
  PARARNN_CUDA_OK(launch_strided_store(args, cudaStream_t{}));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<DstT> actual;
  PARARNN_CUDA_OK(d_dst.download(actual));
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    ASSERT_TRUE(std::memcmp(&actual[i], &expected[i], sizeof(DstT)) == 0) << "element " << i;
}

TEST(StridedStoreKernel, ScattersIntoEveryViewRoundingAsTheHost) {
  const std::uint64_t seed = test_seed(20261203);
  // Destination storage (2T, B, d) = (64, 3, 5); the view is (B, 2T, d) with every other step.
  const View permuted_skip{3, {3, 32, 5}, {5, 2 * 3 * 5, 1}, 0};
  // (B, T, d) with time reversed.
  const View reversed{3, {4, 17, 6}, {17 * 6, -6, 1}, 16 * 6};
  const View four_d{4, {2, 3, 4, 5}, {1, 2, 6, 24}, 0};  // fully transposed
  for (const View& v : {permuted_skip, reversed, four_d}) {
    expect_store_matches_host<float>(StoreType::f32, v, 4096, seed);
    expect_store_matches_host<double>(StoreType::f64, v, 4096, seed + 1);
    expect_store_matches_host<__half>(StoreType::f16, v, 4096, seed + 2);
    expect_store_matches_host<__nv_bfloat16>(StoreType::bf16, v, 4096, seed + 3);
  }
}

// A row-major contiguous destination (the launcher's path without index arithmetic): the same
// bits as the host scatter, at sizes that end inside a tile and over many tiles,
// with unit dimensions of any stride (they do not make a view strided).
TEST(StridedStoreKernel, ContiguousDestinationsRoundAsTheHost) {
  const std::uint64_t seed = test_seed(20261206);
  const View one{1, {1}, {1}, 0};
  const View partial_tile{3, {2, 7, 73}, {7 * 73, 73, 1}, 3};
  const View unit_dims{4, {3, 1, 1000, 1}, {1000, 5, 1, 9}, 0};
  const View many_tiles{2, {9, 4099}, {4099, 1}, 0};
  for (const View& v : {one, partial_tile, unit_dims, many_tiles}) {
    const std::size_t elements = static_cast<std::size_t>(v.origin + v.shape[0] * v.strides[0]) + 8;
    expect_store_matches_host<float>(StoreType::f32, v, elements, seed);
    expect_store_matches_host<double>(StoreType::f64, v, elements, seed + 1);
    expect_store_matches_host<__half>(StoreType::f16, v, elements, seed + 2);
    expect_store_matches_host<__nv_bfloat16>(StoreType::bf16, v, elements, seed + 3);
  }
}

TEST(StridedStoreLauncher, RefusesDoubleRoundingAndBadArguments) {
  float src = 1.0f;
  double dst64 = 0.0;
  __half dst16;
  StridedStoreArgs twice{.src = &dst64, .src_type = StoreType::f64, .dst = &dst16, .dst_type = StoreType::f16, .rank = 0};
  EXPECT_EQ(launch_strided_store(twice, cudaStream_t{}), cudaErrorInvalidValue);
  twice.dst_type = StoreType::bf16;
  EXPECT_EQ(launch_strided_store(twice, cudaStream_t{}), cudaErrorInvalidValue);
  StridedStoreArgs too_deep{.src = &src, .dst = &dst64, .rank = kStridedCopyMaxRank + 1};
  EXPECT_EQ(launch_strided_store(too_deep, cudaStream_t{}), cudaErrorInvalidValue);
  StridedStoreArgs null_dst{.src = &src, .rank = 1};
  null_dst.shape[0] = 4;
  EXPECT_EQ(launch_strided_store(null_dst, cudaStream_t{}), cudaErrorInvalidValue);
  StridedStoreArgs negative{.src = &src, .dst = &dst64, .rank = 1};
  negative.shape[0] = -1;
  EXPECT_EQ(launch_strided_store(negative, cudaStream_t{}), cudaErrorInvalidValue);
  StridedStoreArgs empty{.rank = 2};
  empty.shape[0] = 3;  // shape[1] = 0: nothing to store, null pointers allowed
  EXPECT_EQ(launch_strided_store(empty, cudaStream_t{}), cudaSuccess);
}

// launch_clamp_abs against std::clamp: in f32 (cap rounded once to float) and f64, values on
// both sides of the cap, at it, ±0, ±inf and NaN (kept), bit for bit; bad arguments refused.
template <class T>
void expect_clamp_matches_host(StoreType type, double cap) {
  std::vector<T> values = {T(0), -T(0), T(0.25), T(-0.25), static_cast<T>(cap), static_cast<T>(-cap),
                           static_cast<T>(cap * 1.0000001), T(3), T(-3), std::numeric_limits<T>::infinity(),
                           -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()};
  std::vector<T> expected = values;
  const T c = static_cast<T>(cap);
  for (T& v : expected) v = std::clamp(v, -c, c);
  void* raw = nullptr;
  ASSERT_EQ(cudaMalloc(&raw, values.size() * sizeof(T)), cudaSuccess);
  T* device = static_cast<T*>(raw);
  ASSERT_EQ(cudaMemcpy(device, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(launch_clamp_abs(type, device, static_cast<std::int64_t>(values.size()), cap, cudaStream_t{}), cudaSuccess);
  std::vector<T> got(values.size());
  ASSERT_EQ(cudaMemcpy(got.data(), device, got.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(T)), 0);
}

TEST(ClampAbsKernel, EqualsTheHostClampBitForBit) {
  expect_clamp_matches_host<float>(StoreType::f32, 0.5);
  expect_clamp_matches_host<float>(StoreType::f32, 0.1);  // not a float: rounded once, as the host's
  expect_clamp_matches_host<double>(StoreType::f64, 0.1);
  float x = 1.0f;
  EXPECT_EQ(launch_clamp_abs(StoreType::f16, &x, 1, 0.5, cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_EQ(launch_clamp_abs(StoreType::f32, nullptr, 1, 0.5, cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_EQ(launch_clamp_abs(StoreType::f32, &x, -1, 0.5, cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_EQ(launch_clamp_abs(StoreType::f32, &x, 1, 0.0, cudaStream_t{}), cudaErrorInvalidValue);
  EXPECT_EQ(launch_clamp_abs(StoreType::f32, nullptr, 0, 0.5, cudaStream_t{}), cudaSuccess);
}

}  // namespace
}  // namespace pararnn::kernels::test
