// launch_scan_affine against sequential substitution on the host, bit for bit (STYLE rule 5:
// structure exactly before numerics approximately).
//
// The inputs are built so that every value any association of the scan can form is exact in
// float: J_t = 2^(ℓ_t − ℓ_{t−1}) · P_t with a level walk ℓ ∈ {0..3} and P_t a partial signed
// permutation (S = 1: ±1; S = 4: a permutation with some entries dropped), so the product of any run of J is ±2^k (|k| ≤ 3) times a partial signed
// permutation, or 0; a full zero J at least every 65536 steps; r ∈ {−4..4}. Every partial sum is
// then a multiple of 2^(ℓ−3) below 2^21 in magnitude, so no rounding ever happens and the result
// cannot depend on the chunking, the algorithm or the vector width. J at restarts (t = 0, heads)
// holds NaN: the scan must not read it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "pararnn/core/dtype.hpp"
#include "pararnn/kernels/scan.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

static_assert(std::is_same_v<kernels::ComputeOf<float>, pararnn::ComputeOf<float>>);
static_assert(std::is_same_v<kernels::ComputeOf<double>, pararnn::ComputeOf<double>>);

// A full zero J is forced after this many nonzero steps, which bounds every partial sum.
constexpr std::int64_t kMaxRunWithoutZero = 65536;

template <int S, class T>
struct ExactProblem {
  std::int64_t batch = 0, time = 0, channels = 0;
  std::vector<T> jac;                // [b][t][o][i][c]
  std::vector<T> r;                  // [b][t][s][c]
  std::vector<std::uint8_t> head;    // empty or [t]

  std::size_t j_index(std::int64_t b, std::int64_t t, int o, int i, std::int64_t c) const {
    return static_cast<std::size_t>(((b * time + t) * S * S + o * S + i) * channels + c);
  }
  std::size_t r_index(std::int64_t b, std::int64_t t, int s, std::int64_t c) const {
    return static_cast<std::size_t>(((b * time + t) * S + s) * channels + c);
  }
  bool is_head(std::int64_t t) const { return t == 0 || (!head.empty() && head[t] != 0); }
};

// head_rate: probability of a segment head at t > 0 (0: no head array at all).
template <int S, class T>
ExactProblem<S, T> make_exact_problem(std::int64_t batch, std::int64_t time,
                                      std::int64_t channels, double head_rate, double zero_rate,
                                      std::uint64_t seed) {
  ExactProblem<S, T> p;
  p.batch = batch;
  p.time = time;
  p.channels = channels;
  p.jac.assign(static_cast<std::size_t>(batch * time * S * S * channels), T(0));
  p.r.assign(static_cast<std::size_t>(batch * time * S * channels), T(0));
  SplitMix64 rng(seed);
  if (head_rate > 0) {
    p.head.assign(static_cast<std::size_t>(time), 0);
    p.head[0] = 1;
    for (std::int64_t t = 1; t < time; ++t) p.head[t] = rng.uniform() < head_rate ? 1 : 0;
    if (time > 2) p.head[time - 1] = 1;  // a one-step last segment
    if (time > 1) p.head[1] = 1;         // a one-step first segment
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t c = 0; c < channels; ++c) {
      int level = rng.below(4);
      std::int64_t run = 0;
      for (std::int64_t t = 0; t < time; ++t) {
        for (int s = 0; s < S; ++s) p.r[p.r_index(b, t, s, c)] = T(rng.below(9) - 4);
        const int next_level = std::clamp(level + rng.below(3) - 1, 0, 3);
        const T scale = std::ldexp(T(1), next_level - level);
        level = next_level;
        if (p.is_head(t)) {  // never read by the scan
          for (int q = 0; q < S * S; ++q) p.jac[p.j_index(b, t, q / S, q % S, c)] = nan;
          continue;
        }
        if (run >= kMaxRunWithoutZero - 1 || rng.uniform() < zero_rate) {
          run = 0;  // J = 0 (already)
          continue;
        }
        ++run;
        auto sign = [&] { return rng.below(2) == 0 ? T(-1) : T(1); };
        if constexpr (S == 1) {
          p.jac[p.j_index(b, t, 0, 0, c)] = sign() * scale;
        } else if constexpr (S > 2) {
          // A random permutation, each of its entries kept (as ±1) with probability 3/4.
          int column[S];
          for (int o = 0; o < S; ++o) column[o] = o;
          for (int o = S - 1; o > 0; --o) std::swap(column[o], column[rng.below(o + 1)]);
          for (int o = 0; o < S; ++o)
            if (rng.below(4) != 0) p.jac[p.j_index(b, t, o, column[o], c)] = sign() * scale;
        } else {
          // Partial signed permutations: each row and column holds at most one ±1.
          static constexpr int kPatterns[6][4] = {{1, 0, 0, 1}, {0, 1, 1, 0}, {1, 0, 0, 0},
                                                  {0, 0, 0, 1}, {0, 1, 0, 0}, {0, 0, 1, 0}};
          const int* pattern = kPatterns[rng.below(6)];
          for (int q = 0; q < 4; ++q)
            p.jac[p.j_index(b, t, q / 2, q % 2, c)] = pattern[q] != 0 ? sign() * scale : T(0);
        }
      }
    }
  return p;
}

// Sequential substitution, written from the definition in kernels/scan.hpp.
template <int S, class T>
std::vector<T> sequential_substitution(const ExactProblem<S, T>& p, bool reverse) {
  std::vector<T> out(p.r.size());
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t c = 0; c < p.channels; ++c) {
      T prev[S] = {};
      for (std::int64_t step = 0; step < p.time; ++step) {
        const std::int64_t t = reverse ? p.time - 1 - step : step;
        const bool restart = reverse ? (t + 1 >= p.time || p.is_head(t + 1)) : p.is_head(t);
        T cur[S];
        for (int o = 0; o < S; ++o) {
          T acc = p.r[p.r_index(b, t, o, c)];
          if (!restart)
            for (int i = 0; i < S; ++i)
              acc += (reverse ? p.jac[p.j_index(b, t + 1, i, o, c)]
                              : p.jac[p.j_index(b, t, o, i, c)]) *
                     prev[i];
          cur[o] = acc;
        }
        for (int o = 0; o < S; ++o) {
          out[p.r_index(b, t, o, c)] = cur[o];
          prev[o] = cur[o];
        }
      }
    }
  return out;
}

template <int S_, class T_>
struct ScanCase {
  static constexpr int S = S_;
  using T = T_;
};

struct ScanCaseName {
  template <class Case>
  static std::string GetName(int) {
    return "S" + std::to_string(Case::S) + (std::is_same_v<typename Case::T, float> ? "_f32" : "_f64");
  }
};

std::string algorithm_name(ScanAlgorithm a) {
  return a == ScanAlgorithm::single_pass ? "single_pass" : "three_phase";
}

// The tilings each problem is solved with (all that scan_chunk_supported accepts for S).
template <int S>
std::vector<ScanTiling> tilings_under_test(bool include_tiny_chunks) {
  std::vector<ScanTiling> out;
  for (std::int64_t chunk : {0, 1, 3, 5, 8, 16, 24, 32, 64, 128})
    if (scan_chunk_supported(S, ScanAlgorithm::single_pass, chunk) &&
        (include_tiny_chunks || chunk == 0 || chunk >= 8))
      out.push_back({ScanAlgorithm::single_pass, chunk});
  for (std::int64_t chunk : {0, 1, 7, 64, 1000})
    if (include_tiny_chunks || chunk == 0 || chunk >= 64)
      out.push_back({ScanAlgorithm::three_phase, chunk});
  return out;
}

// Runs every tiling and both directions on `p`; `offset` > 0 shifts both arrays off 16-byte
// alignment (forcing the scalar path). Records failures with a full description.
template <int S, class T>
void expect_all_tilings_exact(const ExactProblem<S, T>& p, bool include_tiny_chunks,
                              std::size_t offset = 0) {
  const std::vector<T> expected[2] = {sequential_substitution(p, false),
                                      sequential_substitution(p, true)};
  const std::vector<ScanTiling> tilings = tilings_under_test<S>(include_tiny_chunks);
  std::size_t workspace_bytes = 0;
  for (const ScanTiling& tiling : tilings)
    workspace_bytes = std::max(workspace_bytes, scan_affine_workspace_bytes<S, T>(
                                                    p.batch, p.time, p.channels, tiling));
  DeviceBuffer<T> d_jac(p.jac.size() + offset), d_r(p.r.size() + offset);
  DeviceBuffer<std::uint8_t> d_head(p.head.size());
  DeviceBuffer<unsigned char> d_workspace(workspace_bytes);
  PARARNN_CUDA_OK(d_jac.status());
  PARARNN_CUDA_OK(d_r.status());
  PARARNN_CUDA_OK(d_head.status());
  PARARNN_CUDA_OK(d_workspace.status());
  PARARNN_CUDA_OK(cudaMemcpy(d_jac.get() + offset, p.jac.data(), p.jac.size() * sizeof(T),
                             cudaMemcpyHostToDevice));
  if (!p.head.empty()) PARARNN_CUDA_OK(d_head.upload(p.head));

  std::vector<T> actual(p.r.size());
  for (bool reverse : {false, true})
    for (const ScanTiling& tiling : tilings) {
      const std::string what = "B=" + std::to_string(p.batch) + " T=" + std::to_string(p.time) +
                               " D=" + std::to_string(p.channels) +
                               (p.head.empty() ? " no heads" : " heads") +
                               (reverse ? " reverse " : " forward ") +
                               algorithm_name(tiling.algorithm) +
                               " chunk=" + std::to_string(tiling.chunk_length) +
                               " offset=" + std::to_string(offset);
      SCOPED_TRACE(what);
      PARARNN_CUDA_OK(cudaMemcpy(d_r.get() + offset, p.r.data(), p.r.size() * sizeof(T),
                                 cudaMemcpyHostToDevice));
      ScanArgs<T> args{.jac = d_jac.get() + offset,
                       .delta = d_r.get() + offset,
                       .head = p.head.empty() ? nullptr : d_head.get(),
                       .batch = p.batch,
                       .time = p.time,
                       .channels = p.channels,
                       .reverse = reverse,
                       .tiling = tiling};
      PARARNN_CUDA_OK((launch_scan_affine<S, T>(args, d_workspace.get(), d_workspace.size(),
                                                cudaStream_t{})));
      PARARNN_CUDA_OK(cudaDeviceSynchronize());
      PARARNN_CUDA_OK(cudaMemcpy(actual.data(), d_r.get() + offset, p.r.size() * sizeof(T),
                                 cudaMemcpyDeviceToHost));
      const std::vector<T>& want = expected[reverse ? 1 : 0];
      std::int64_t mismatches = 0, first = -1;
      for (std::size_t i = 0; i < want.size(); ++i)
        if (!same_bits(want[i], actual[i])) {
          if (first < 0) first = static_cast<std::int64_t>(i);
          ++mismatches;
        }
      if (mismatches > 0) {
        const std::int64_t c = first % p.channels;
        const std::int64_t s = (first / p.channels) % S;
        const std::int64_t t = (first / p.channels / S) % p.time;
        const std::int64_t b = first / p.channels / S / p.time;
        ADD_FAILURE() << mismatches << " of " << want.size()
                      << " elements differ from sequential substitution; first at (b=" << b
                      << ", t=" << t << ", s=" << s << ", c=" << c
                      << "): expected " << hexfloat(want[static_cast<std::size_t>(first)])
                      << ", actual " << hexfloat(actual[static_cast<std::size_t>(first)]);
      }
    }
}

template <class Case>
class DyadicScan : public ::testing::Test {};
using ScanCases = ::testing::Types<ScanCase<1, float>, ScanCase<1, double>, ScanCase<2, float>,
                                   ScanCase<2, double>, ScanCase<4, float>, ScanCase<4, double>>;
TYPED_TEST_SUITE(DyadicScan, ScanCases, ScanCaseName);

TYPED_TEST(DyadicScan, EqualsSequentialSubstitutionBitwiseForEveryChunking) {
  constexpr int S = TypeParam::S;
  using T = typename TypeParam::T;
  const std::uint64_t seed = test_seed(20260101);
  std::uint64_t case_seed = seed;
  for (std::int64_t time : {1, 2, 3, 7, 64, 127, 128, 129, 1000, 4097, 65537}) {
    struct Shape {
      std::int64_t batch, channels;
    };
    // Small channel counts for long sequences keep the host reference quick; 132 channels give
    // a full and a one-lane channel tile for 16-byte vectors, 5 the scalar path.
    const std::vector<Shape> shapes = time <= 4097 ? std::vector<Shape>{{2, 5}, {3, 132}}
                                                   : std::vector<Shape>{{2, 5}, {1, 8}};
    for (const Shape& shape : shapes)
      for (double head_rate : {0.0, 1.0 / 64}) {
        const auto p = make_exact_problem<S, T>(shape.batch, time, shape.channels, head_rate,
                                                1.0 / 256, ++case_seed);
        expect_all_tilings_exact(p, /*include_tiny_chunks=*/time <= 4097);
        if (::testing::Test::HasFailure()) return;
      }
  }
}

TYPED_TEST(DyadicScan, LongRunsWithoutZerosAreExact) {
  // No zero J except the forced ones: carries cross every chunk of a 65537-step sequence.
  constexpr int S = TypeParam::S;
  using T = typename TypeParam::T;
  const std::uint64_t seed = test_seed(20260102);
  const auto p = make_exact_problem<S, T>(2, 65537, 8, 0.0, 0.0, seed);
  expect_all_tilings_exact(p, /*include_tiny_chunks=*/false);
}

TYPED_TEST(DyadicScan, MisalignedArraysTakeTheScalarPathExactly) {
  constexpr int S = TypeParam::S;
  using T = typename TypeParam::T;
  const std::uint64_t seed = test_seed(20260103);
  const auto p = make_exact_problem<S, T>(2, 1000, 132, 1.0 / 64, 1.0 / 256, seed);
  expect_all_tilings_exact(p, /*include_tiny_chunks=*/true, /*offset=*/1);
}

TEST(DyadicScanLong, FourMillionStepsSingleChannelGroupIsExact) {
  // T = 2^22 for one small channel count (a tile with a partly empty warp).
  const std::uint64_t seed = test_seed(20260104);
  for (double head_rate : {0.0, 1.0 / 4096}) {
    const auto p = make_exact_problem<1, float>(1, std::int64_t{1} << 22, 8, head_rate, 0.0, seed);
    expect_all_tilings_exact(p, /*include_tiny_chunks=*/false);
  }
}

// Inputs that round (J entries uniform in ±0.95/S, r in ±1, heads at rate 1/4096): the
// single-pass look-back composes a fixed set of chunks whatever order they finish in
// (scan.cuh), so repeated launches agree bit for bit (CONTRACT §5); the three-phase scan is
// fixed by construction and asked too. Thousands of chunks per sequence keep many blocks racing.
template <class Case>
class RoundingScan : public ::testing::Test {};
TYPED_TEST_SUITE(RoundingScan, ScanCases, ScanCaseName);

TYPED_TEST(RoundingScan, RepeatedLaunchesAgreeBitForBit) {
  constexpr int S = TypeParam::S;
  using T = typename TypeParam::T;
  const std::int64_t batch = 4, time = S == 4 ? 8192 : 32768, channels = S == 1 ? 256 : 64;
  SplitMix64 rng(test_seed(20261202));
  std::vector<T> jac(static_cast<std::size_t>(batch * time * S * S * channels));
  std::vector<T> r(static_cast<std::size_t>(batch * time * S * channels));
  std::vector<std::uint8_t> head(static_cast<std::size_t>(time), 0);
  for (T& j : jac) j = static_cast<T>((2 * rng.uniform() - 1) * 0.95 / S);
  for (T& x : r) x = static_cast<T>(2 * rng.uniform() - 1);
  head[0] = 1;
  for (std::int64_t t = 1; t < time; ++t) head[static_cast<std::size_t>(t)] = rng.uniform() < 1.0 / 4096 ? 1 : 0;
  const std::vector<ScanTiling> tilings = {{ScanAlgorithm::single_pass, 0}, {ScanAlgorithm::single_pass, 8},
                                           {ScanAlgorithm::three_phase, 0}};
  std::size_t workspace_bytes = 0;
  for (const ScanTiling& tiling : tilings)
    workspace_bytes =
        std::max(workspace_bytes, scan_affine_workspace_bytes<S, T>(batch, time, channels, tiling));
  DeviceBuffer<T> d_jac(jac.size()), d_r(r.size());
  DeviceBuffer<std::uint8_t> d_head(head.size());
  DeviceBuffer<unsigned char> d_workspace(workspace_bytes);
  PARARNN_CUDA_OK(d_jac.upload(jac));
  PARARNN_CUDA_OK(d_head.upload(head));
  PARARNN_CUDA_OK(d_workspace.status());
  std::vector<T> first, again;
  for (bool with_heads : {false, true})
    for (bool reverse : {false, true})
      for (const ScanTiling& tiling : tilings) {
        SCOPED_TRACE(algorithm_name(tiling.algorithm) + " chunk=" + std::to_string(tiling.chunk_length) +
                     (reverse ? " reverse" : " forward") + (with_heads ? " heads" : " no heads"));
        const ScanArgs<T> args{.jac = d_jac.get(),
                               .delta = d_r.get(),
                               .head = with_heads ? d_head.get() : nullptr,
                               .batch = batch,
                               .time = time,
                               .channels = channels,
                               .reverse = reverse,
                               .tiling = tiling};
        for (int launch = 0; launch < 6; ++launch) {
          PARARNN_CUDA_OK(d_r.upload(r));
          PARARNN_CUDA_OK((launch_scan_affine<S, T>(args, d_workspace.get(), d_workspace.size(), cudaStream_t{})));
          PARARNN_CUDA_OK(d_r.download(launch == 0 ? first : again));
          if (launch == 0) continue;
          std::int64_t mismatches = 0;
          for (std::size_t i = 0; i < first.size(); ++i) mismatches += same_bits(first[i], again[i]) ? 0 : 1;
          ASSERT_EQ(mismatches, 0) << "launch " << launch << " differs from the first in " << mismatches << " of "
                                   << first.size() << " elements";
        }
      }
}

TEST(ScanLauncher, RefusesBadArgumentsAndAcceptsEmptyProblems) {
  DeviceBuffer<float> d_jac(64), d_r(64);
  DeviceBuffer<unsigned char> d_workspace(1 << 16);
  PARARNN_CUDA_OK(d_jac.status());
  PARARNN_CUDA_OK(d_r.status());
  PARARNN_CUDA_OK(d_workspace.status());
  ScanArgs<float> args{.jac = d_jac.get(), .delta = d_r.get(), .batch = 1, .time = 16,
                       .channels = 4};
  EXPECT_EQ((launch_scan_affine<1, float>(args, d_workspace.get(), 16, cudaStream_t{})),
            cudaErrorInvalidValue)
      << "a workspace that is too small";
  EXPECT_EQ((launch_scan_affine<1, float>(args, nullptr, 0, cudaStream_t{})), cudaErrorInvalidValue)
      << "no workspace";
  ScanArgs<float> bad_chunk = args;
  bad_chunk.tiling.chunk_length = 129;  // 3 · 43: no steps_per_thread × time_groups split
  EXPECT_FALSE(scan_chunk_supported(1, ScanAlgorithm::single_pass, 129));
  EXPECT_EQ((launch_scan_affine<1, float>(bad_chunk, d_workspace.get(), d_workspace.size(),
                                          cudaStream_t{})),
            cudaErrorInvalidValue);
  ScanArgs<float> no_jac = args;
  no_jac.jac = nullptr;
  EXPECT_EQ((launch_scan_affine<1, float>(no_jac, d_workspace.get(), d_workspace.size(),
                                          cudaStream_t{})),
            cudaErrorInvalidValue);
  ScanArgs<float> empty = args;
  empty.time = 0;
  EXPECT_EQ((scan_affine_workspace_bytes<1, float>(1, 0, 4)), 0u);
  EXPECT_EQ((launch_scan_affine<1, float>(empty, nullptr, 0, cudaStream_t{})), cudaSuccess);
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pararnn::kernels::test
