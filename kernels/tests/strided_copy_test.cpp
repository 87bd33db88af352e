// launch_strided_copy against the host gather it replaces: permuted, time-skipped, broadcast
// (zero stride) and reversed (negative stride) views, every element size, bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace
}  // namespace pararnn::kernels::test
