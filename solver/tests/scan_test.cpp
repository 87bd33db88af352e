// Claims about the CPU affine scan: structure exactly before numerics approximately. On dyadic
// inputs (every product and sum exact in the compute type) the scan equals sequential
// substitution bit for bit, for every T and every chunking, with and without segment heads.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "pararnn/core/random.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn {
namespace {

// J entries from {0, ±1} with one nonzero per row (so every product of J blocks keeps that
// form) and r from quarter-integers in [−2, 2]: every δ and every partial aggregate is a
// multiple of 1/4 below 2T in magnitude, exact in float in any order of evaluation.
template <int S, class T>
struct DyadicProblem {
  std::int64_t time, channels;
  std::vector<T> J, r;
  std::vector<std::uint8_t> heads;
  DyadicProblem(std::int64_t time_, std::int64_t channels_, std::uint64_t seed, bool with_heads)
      : time(time_), channels(channels_) {
    SplitMix64 rng(seed);
    const T j_values[] = {T(0), T(1), T(-1), T(1), T(-1)};
    J.resize(static_cast<std::size_t>(time * S * S * channels));
    r.resize(static_cast<std::size_t>(time * S * channels));
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t c = 0; c < channels; ++c) {
        for (int o = 0; o < S; ++o) {
          const int col = static_cast<int>(rng.next() % S);
          for (int i = 0; i < S; ++i)
            J[static_cast<std::size_t>((t * S * S + o * S + i) * channels + c)] =
                i == col ? j_values[rng.next() % 5] : T(0);
          r[static_cast<std::size_t>((t * S + o) * channels + c)] =
              T(static_cast<int>(rng.next() % 17) - 8) / T(4);
        }
      }
    heads.assign(static_cast<std::size_t>(time), 0);
    if (with_heads)
      for (std::int64_t t = 0; t < time; ++t) heads[static_cast<std::size_t>(t)] = rng.next() % 7 == 0;
  }
};

// The twin: δ_t = J_t δ_{t−1} + r_t written out per channel, nothing shared with the scan.
template <int S, class T>
std::vector<T> substitute(const DyadicProblem<S, T>& p) {
  std::vector<T> delta(p.r.size());
  for (std::int64_t c = 0; c < p.channels; ++c) {
    T prev[S] = {};
    for (std::int64_t t = 0; t < p.time; ++t) {
      const bool head = t == 0 || p.heads[static_cast<std::size_t>(t)];
      T next[S];
      for (int o = 0; o < S; ++o) {
        T acc = p.r[static_cast<std::size_t>((t * S + o) * p.channels + c)];
        if (!head)
          for (int i = 0; i < S; ++i)
            acc += p.J[static_cast<std::size_t>((t * S * S + o * S + i) * p.channels + c)] * prev[i];
        next[o] = acc;
      }
      for (int o = 0; o < S; ++o) {
        delta[static_cast<std::size_t>((t * S + o) * p.channels + c)] = next[o];
        prev[o] = next[o];
      }
    }
  }
  return delta;
}

template <int S, class T>
void expect_bitwise_for_all_chunkings(std::int64_t time, bool with_heads) {
  const DyadicProblem<S, T> p(time, 5, static_cast<std::uint64_t>(time * 31 + S), with_heads);
  const std::vector<T> expected = substitute(p);
  for (std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{3},
                             std::int64_t{7}, std::int64_t{64}, time - 1, time, time + 1}) {
    std::vector<T> r = p.r;
    scan_affine<S, T>(p.J.data(), r.data(),
                      ScanShape{.time = p.time, .channels = p.channels, .chunk_len = chunk},
                      p.heads);
    ASSERT_EQ(0, std::memcmp(r.data(), expected.data(), r.size() * sizeof(T)))
        << "S=" << S << " T=" << time << " channels=" << p.channels << " chunk=" << chunk << " heads=" << with_heads;
  }
}

const std::int64_t kTimes[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255,
                               256, 257, 1000, 1023, 1025, 4095, 4097};

TEST(CpuScan, DyadicScanEqualsSequentialSubstitutionBitwiseDiag) {
  for (auto t : kTimes) {
    expect_bitwise_for_all_chunkings<1, float>(t, false);
    expect_bitwise_for_all_chunkings<1, double>(t, true);
  }
}

TEST(CpuScan, DyadicScanEqualsSequentialSubstitutionBitwiseBlock2) {
  for (auto t : kTimes) {
    expect_bitwise_for_all_chunkings<2, float>(t, true);
    expect_bitwise_for_all_chunkings<2, double>(t, false);
  }
}

TEST(CpuScan, DyadicScanEqualsSequentialSubstitutionBitwiseBlock4) {
  for (auto t : kTimes) expect_bitwise_for_all_chunkings<4, float>(t, true);
}

TEST(CpuScan, ChannelTileOfAWiderRowTouchesOnlyItsChannels) {
  const DyadicProblem<1, float> p(100, 8, 7, false);
  const std::vector<float> expected = substitute(p);
  std::vector<float> r = p.r;
  // Scan channels [3, 6) of the 8-wide rows.
  scan_affine<1, float>(p.J.data() + 3, r.data() + 3,
                        ScanShape{.time = p.time, .channels = 3, .channel_stride = 8});
  for (std::int64_t t = 0; t < p.time; ++t)
    for (std::int64_t c = 0; c < 8; ++c) {
      const auto i = static_cast<std::size_t>(t * 8 + c);
      EXPECT_EQ(r[i], (c >= 3 && c < 6) ? expected[i] : p.r[i]) << "t=" << t << " c=" << c;
    }
}

}  // namespace
}  // namespace pararnn
