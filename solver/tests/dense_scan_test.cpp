// Claims about the CPU dense scan (one chain of N x N blocks, runtime N): on dyadic inputs it
// equals sequential substitution bit for bit, for every T and every chunking, with and without
// segment heads, for N up to 32, also when the chain's r sits inside a wider row (r_stride > N).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "pararnn/core/random.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn {
namespace {

// J rows with at most one nonzero from {±1} (products of such blocks keep that form) and r
// quarter-integers in [−2, 2]: every δ and partial aggregate is a multiple of 1/4 below 2T in
// magnitude, exact in any order of evaluation.
template <class T>
struct DyadicDenseProblem {
  std::int64_t time, n, stride, offset;
  std::vector<T> J, r;
  std::vector<std::uint8_t> heads;
  DyadicDenseProblem(std::int64_t time_, std::int64_t n_, std::int64_t stride_, std::uint64_t seed,
                     bool with_heads)
      : time(time_), n(n_), stride(stride_), offset(stride_ - n_) {
    SplitMix64 rng(seed);
    const T j_values[] = {T(0), T(1), T(-1), T(1), T(-1)};
    J.assign(static_cast<std::size_t>(time * n * n), T(0));
    r.assign(static_cast<std::size_t>(time * stride), T(0));
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t o = 0; o < n; ++o) {
        const std::int64_t col = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(n));
        J[static_cast<std::size_t>((t * n + o) * n + col)] = j_values[rng.next() % 5];
        r[static_cast<std::size_t>(t * stride + offset + o)] = T(static_cast<int>(rng.next() % 17) - 8) / T(4);
      }
    heads.assign(static_cast<std::size_t>(time), 0);
    if (with_heads)
      for (std::int64_t t = 0; t < time; ++t) heads[static_cast<std::size_t>(t)] = rng.next() % 7 == 0;
  }
};

// The twin: δ_t = J_t δ_{t−1} + r_t written out, nothing shared with the scan.
template <class T>
std::vector<T> substitute(const DyadicDenseProblem<T>& p) {
  std::vector<T> delta = p.r;
  std::vector<T> prev(static_cast<std::size_t>(p.n), T(0));
  for (std::int64_t t = 0; t < p.time; ++t) {
    const bool head = t == 0 || p.heads[static_cast<std::size_t>(t)];
    std::vector<T> next(static_cast<std::size_t>(p.n));
    for (std::int64_t o = 0; o < p.n; ++o) {
      T acc = p.r[static_cast<std::size_t>(t * p.stride + p.offset + o)];
      if (!head)
        for (std::int64_t i = 0; i < p.n; ++i)
          acc += p.J[static_cast<std::size_t>((t * p.n + o) * p.n + i)] * prev[static_cast<std::size_t>(i)];
      next[static_cast<std::size_t>(o)] = acc;
    }
    for (std::int64_t o = 0; o < p.n; ++o)
      delta[static_cast<std::size_t>(t * p.stride + p.offset + o)] = next[static_cast<std::size_t>(o)];
    prev = next;
  }
  return delta;
}

template <class T>
void expect_bitwise_for_all_chunkings(std::int64_t time, std::int64_t n, std::int64_t stride,
                                      bool with_heads) {
  const DyadicDenseProblem<T> p(time, n, stride, static_cast<std::uint64_t>(time * 131 + n), with_heads);
  const std::vector<T> expected = substitute(p);
  for (std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{3},
                             std::int64_t{7}, std::int64_t{64}, time - 1, time, time + 1}) {
    std::vector<T> r = p.r;
    scan_dense<T>(p.J.data(), r.data() + p.offset,
                  DenseScanShape{.time = p.time, .n = p.n, .chunk_len = chunk, .r_stride = p.stride},
                  p.heads);
    ASSERT_EQ(std::memcmp(r.data(), expected.data(), r.size() * sizeof(T)), 0)
        << "T=" << time << " N=" << n << " stride=" << stride << " chunk=" << chunk
        << " heads=" << with_heads;
  }
}

TEST(DenseScan, DyadicScanEqualsSequentialSubstitutionBitwiseForEveryChunking) {
  for (std::int64_t time : {1, 2, 3, 17, 64, 129})
    for (std::int64_t n : {1, 3, 8, 32})
      for (bool heads : {false, true}) {
        expect_bitwise_for_all_chunkings<float>(time, n, n, heads);
        expect_bitwise_for_all_chunkings<double>(time, n, n, heads);
      }
}

TEST(DenseScan, ChainInsideAWiderRowEqualsSubstitutionAndLeavesTheRestUntouched) {
  for (std::int64_t time : {5, 40})
    for (bool heads : {false, true}) {
      expect_bitwise_for_all_chunkings<float>(time, 4, 12, heads);
      expect_bitwise_for_all_chunkings<double>(time, 16, 32, heads);
    }
}

}  // namespace
}  // namespace pararnn
