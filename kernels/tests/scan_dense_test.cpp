// launch_scan_dense (forward and reverse) against sequential substitution on the host (STYLE
// rule 5: structure exactly before numerics approximately), in both addressings it serves: the dense backend's chain-major
// H/F (one chain per (b, group)) and RWKV-7's trajectory (the d rows of a head share J).
//
// Exact inputs: J_t = 2^(ℓ_t − ℓ_{t−1}) · P_t with a level walk ℓ ∈ {0..3} per (b, group) and P_t
// a random partial signed permutation (each row keeps its ±1 with probability 7/8), so every
// product of a run of J is ±2^k (|k| ≤ 3) times a partial signed permutation, or 0, and every dot
// product the scan forms has at most one nonzero term; r ∈ {−4..4}; a full zero J at least every
// 65536 steps. Every partial sum is then a multiple of 2^(ℓ−3) below 2^21 in magnitude, exact in
// float, so the result cannot depend on the chunking. J at restarts (t = 0, heads) holds NaN: the
// scan must not read it.
//
// Random inputs: entries of J uniform in ±ρ/n (‖J‖∞ ≤ ρ = ½), r uniform in [−1, 1], compared
// with a long double substitution from the same bits within the contract's band for an exact
// scan against its sequential unroll (Metric::linear_scan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/kernels/scan_dense.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

constexpr std::int64_t kMaxRunWithoutZero = 65536;

enum class DenseAddressing { dense_backend, rwkv7 };

std::string addressing_name(DenseAddressing a) {
  return a == DenseAddressing::dense_backend ? "dense_backend" : "rwkv7";
}

// The strides of kernels/scan_dense.hpp's two users. rwkv7: groups = heads, rows = n = d.
template <class T>
DenseScanArgs<T> addressing_args(DenseAddressing a, std::int64_t batch, std::int64_t groups,
                                 std::int64_t time, std::int64_t n) {
  DenseScanArgs<T> args{.batch = batch, .groups = groups, .time = time, .n = n};
  if (a == DenseAddressing::dense_backend) {
    args.rows = 1;
    args.r_time = n;
    args.r_group = time * n;
    args.r_batch = groups * time * n;
  } else {
    args.rows = n;
    args.r_row = n;
    args.r_time = groups * n * n;
    args.r_group = n * n;
    args.r_batch = time * groups * n * n;
  }
  return args;
}

template <class T>
struct DenseProblem {
  DenseAddressing addressing = DenseAddressing::dense_backend;
  DenseScanArgs<T> shape;          // sizes and strides; pointers unset
  std::vector<T> jac;              // [b][g][t][out][in]
  std::vector<T> r;                // addressed through shape's strides
  std::vector<std::uint8_t> head;  // empty or [t]

  std::int64_t n() const { return shape.n; }
  bool is_head(std::int64_t t) const { return t == 0 || (!head.empty() && head[t] != 0); }
  std::size_t j_index(std::int64_t b, std::int64_t g, std::int64_t t) const {
    return static_cast<std::size_t>(((b * shape.groups + g) * shape.time + t) * n() * n());
  }
  std::size_t r_index(std::int64_t b, std::int64_t g, std::int64_t i, std::int64_t t) const {
    return static_cast<std::size_t>(b * shape.r_batch + g * shape.r_group + i * shape.r_row +
                                    t * shape.r_time);
  }
  std::string describe() const {
    return addressing_name(addressing) + " B=" + std::to_string(shape.batch) +
           " groups=" + std::to_string(shape.groups) + " rows=" + std::to_string(shape.rows) +
           " T=" + std::to_string(shape.time) + " n=" + std::to_string(n()) +
           (head.empty() ? " no heads" : " heads");
  }
};

template <class T>
DenseProblem<T> make_problem_shell(DenseAddressing addressing, std::int64_t batch,
                                   std::int64_t groups, std::int64_t time, std::int64_t n,
                                   double head_rate, SplitMix64& rng) {
  DenseProblem<T> p;
  p.addressing = addressing;
  p.shape = addressing_args<T>(addressing, batch, groups, time, n);
  p.jac.assign(static_cast<std::size_t>(batch * groups * time * n * n), T(0));
  p.r.assign(static_cast<std::size_t>(batch * groups * p.shape.rows * time * n), T(0));
  if (head_rate > 0) {
    p.head.assign(static_cast<std::size_t>(time), 0);
    p.head[0] = 1;
    for (std::int64_t t = 1; t < time; ++t) p.head[t] = rng.uniform() < head_rate ? 1 : 0;
    if (time > 2) p.head[time - 1] = 1;  // a one-step last segment
    if (time > 1) p.head[1] = 1;         // a one-step first segment
  }
  return p;
}

template <class T>
DenseProblem<T> make_exact_problem(DenseAddressing addressing, std::int64_t batch,
                                   std::int64_t groups, std::int64_t time, std::int64_t n,
                                   double head_rate, double zero_rate, std::uint64_t seed) {
  SplitMix64 rng(seed);
  DenseProblem<T> p = make_problem_shell<T>(addressing, batch, groups, time, n, head_rate, rng);
  for (T& v : p.r) v = T(rng.below(9) - 4);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<int> perm(static_cast<std::size_t>(n));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t g = 0; g < groups; ++g) {
      int level = rng.below(4);
      std::int64_t run = 0;
      for (std::int64_t t = 0; t < time; ++t) {
        T* J = p.jac.data() + p.j_index(b, g, t);
        const int next_level = std::clamp(level + rng.below(3) - 1, 0, 3);
        const T scale = std::ldexp(T(1), next_level - level);
        level = next_level;
        if (p.is_head(t)) {  // never read by the scan
          std::fill(J, J + n * n, nan);
          continue;
        }
        if (run >= kMaxRunWithoutZero - 1 || rng.uniform() < zero_rate) {
          run = 0;  // J = 0 (already)
          continue;
        }
        ++run;
        std::iota(perm.begin(), perm.end(), 0);
        for (std::int64_t i = n - 1; i > 0; --i)
          std::swap(perm[static_cast<std::size_t>(i)],
                    perm[static_cast<std::size_t>(rng.below(static_cast<int>(i + 1)))]);
        for (std::int64_t o = 0; o < n; ++o)
          if (rng.below(8) != 0)
            J[o * n + perm[static_cast<std::size_t>(o)]] = (rng.below(2) == 0 ? -scale : scale);
      }
    }
  return p;
}

template <class T>
DenseProblem<T> make_random_problem(DenseAddressing addressing, std::int64_t batch,
                                    std::int64_t groups, std::int64_t time, std::int64_t n,
                                    double head_rate, std::uint64_t seed) {
  SplitMix64 rng(seed);
  DenseProblem<T> p = make_problem_shell<T>(addressing, batch, groups, time, n, head_rate, rng);
  const double rho = 0.5;
  for (T& v : p.r) v = static_cast<T>(rng.uniform(-1.0, 1.0));
  for (T& v : p.jac) v = static_cast<T>(rng.uniform(-rho, rho) / static_cast<double>(n));
  return p;
}

// Sequential substitution, written from the definition in kernels/scan_dense.hpp, in RefT:
// forward δ_t = J_t δ_{t−1} + r_t, or (reverse) μ_t = g_t + J_{t+1}ᵀ μ_{t+1}.
template <class RefT, class T>
std::vector<RefT> sequential_substitution(const DenseProblem<T>& p, bool reverse = false) {
  const std::int64_t n = p.n(), T_ = p.shape.time;
  std::vector<RefT> out(p.r.size());
  std::vector<RefT> prev(static_cast<std::size_t>(n)), cur(prev.size());
  for (std::int64_t b = 0; b < p.shape.batch; ++b)
    for (std::int64_t g = 0; g < p.shape.groups; ++g)
      for (std::int64_t i = 0; i < p.shape.rows; ++i)
        for (std::int64_t step = 0; step < T_; ++step) {
          const std::int64_t t = reverse ? T_ - 1 - step : step;
          const bool cut = reverse ? (t + 1 >= T_ || p.is_head(t + 1)) : p.is_head(t);
          const T* J = cut ? nullptr : p.jac.data() + p.j_index(b, g, reverse ? t + 1 : t);
          const std::size_t at = p.r_index(b, g, i, t);
          for (std::int64_t o = 0; o < n; ++o) {
            RefT acc = static_cast<RefT>(p.r[at + static_cast<std::size_t>(o)]);
            if (!cut)
              for (std::int64_t k = 0; k < n; ++k)
                acc += static_cast<RefT>(reverse ? J[k * n + o] : J[o * n + k]) * prev[static_cast<std::size_t>(k)];
            cur[static_cast<std::size_t>(o)] = acc;
          }
          for (std::int64_t o = 0; o < n; ++o)
            out[at + static_cast<std::size_t>(o)] = cur[static_cast<std::size_t>(o)];
          std::swap(prev, cur);
        }
  return out;
}

// Device buffers of one problem, reused across chunk lengths (r re-uploaded before each run).
template <class T>
struct DeviceDenseProblem {
  DeviceBuffer<T> jac, r;
  DeviceBuffer<std::uint8_t> head;
  DeviceBuffer<unsigned char> workspace;

  DeviceDenseProblem(const DenseProblem<T>& p, std::size_t workspace_bytes)
      : jac(p.jac.size()), r(p.r.size()), head(p.head.size()), workspace(workspace_bytes) {}

  cudaError_t upload(const DenseProblem<T>& p) {
    for (cudaError_t e : {jac.status(), r.status(), head.status(), workspace.status(),
                          jac.upload(p.jac), head.upload(p.head)})
      if (e != cudaSuccess) return e;
    return cudaSuccess;
  }

  DenseScanArgs<T> args(const DenseProblem<T>& p, std::int64_t chunk, bool reverse = false) const {
    DenseScanArgs<T> a = p.shape;
    a.jac = jac.get();
    a.delta = r.get();
    a.head = p.head.empty() ? nullptr : head.get();
    a.chunk_length = chunk;
    a.reverse = reverse;
    return a;
  }
};

std::vector<std::int64_t> chunks_under_test(std::int64_t n, std::int64_t time, bool tiny) {
  std::vector<std::int64_t> out = {0, n, 64, 1000};
  if (tiny) out.insert(out.end(), {1, 3, 7});
  if (time > 4096) out.push_back(4096);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

template <class T>
std::size_t workspace_for(const DenseProblem<T>& p, const std::vector<std::int64_t>& chunks) {
  std::size_t bytes = 0;
  for (std::int64_t chunk : chunks) {
    DenseScanArgs<T> a = p.shape;
    a.chunk_length = chunk;
    bytes = std::max(bytes, scan_dense_workspace_bytes<T>(a));
  }
  return bytes;
}

// Solves `p` on the device with `chunk` and returns δ.
template <class T>
void solve_on_device(const DenseProblem<T>& p, DeviceDenseProblem<T>& d, std::int64_t chunk,
                     std::vector<T>& actual, bool reverse = false) {
  PARARNN_CUDA_OK(d.r.upload(p.r));
  PARARNN_CUDA_OK(launch_scan_dense<T>(d.args(p, chunk, reverse), d.workspace.get(), d.workspace.size(),
                                       cudaStream_t{}));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  PARARNN_CUDA_OK(d.r.download(actual));
}

template <class T>
void expect_all_chunkings_exact(const DenseProblem<T>& p, bool tiny_chunks, bool reverse = false) {
  const std::vector<T> expected = sequential_substitution<T>(p, reverse);
  const std::vector<std::int64_t> chunks = chunks_under_test(p.n(), p.shape.time, tiny_chunks);
  DeviceDenseProblem<T> d(p, workspace_for(p, chunks));
  PARARNN_CUDA_OK(d.upload(p));
  std::vector<T> actual;
  for (std::int64_t chunk : chunks) {
    SCOPED_TRACE(p.describe() + " chunk=" + std::to_string(chunk) + (reverse ? " reverse" : " forward"));
    solve_on_device(p, d, chunk, actual, reverse);
    std::int64_t mismatches = 0, first = -1;
    for (std::size_t i = 0; i < expected.size(); ++i)
      if (!same_bits(expected[i], actual[i])) {
        if (first < 0) first = static_cast<std::int64_t>(i);
        ++mismatches;
      }
    if (mismatches > 0)
      ADD_FAILURE() << mismatches << " of " << expected.size()
                    << " elements differ from sequential substitution; first at flat index "
                    << first << ": expected " << hexfloat(expected[static_cast<std::size_t>(first)])
                    << ", actual " << hexfloat(actual[static_cast<std::size_t>(first)]);
  }
}

template <class T>
class DyadicDenseScan : public ::testing::Test {};
struct DtypeName {
  template <class T>
  static std::string GetName(int) {
    return std::is_same_v<T, float> ? "f32" : "f64";
  }
};
using DenseScanTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(DyadicDenseScan, DenseScanTypes, DtypeName);

TYPED_TEST(DyadicDenseScan, EqualsSequentialSubstitutionBitwiseForEveryChunking) {
  using T = TypeParam;
  std::uint64_t case_seed = test_seed(20260201);
  for (std::int64_t n : {1, 2, 5, 8, 16, 32, 64})
    for (std::int64_t time : {1, 2, 3, 7, 64, 129, 1000})
      for (DenseAddressing addressing : {DenseAddressing::dense_backend, DenseAddressing::rwkv7})
        for (double head_rate : {0.0, 1.0 / 64}) {
          // RWKV-7's rows = n chains per group: keep the host reference quick for wide chains.
          const std::int64_t batch = addressing == DenseAddressing::rwkv7 && n >= 32 ? 1 : 2;
          const auto p = make_exact_problem<T>(addressing, batch, /*groups=*/3, time, n,
                                               head_rate, 1.0 / 256, ++case_seed);
          for (bool reverse : {false, true}) expect_all_chunkings_exact(p, /*tiny_chunks=*/true, reverse);
          if (::testing::Test::HasFailure()) return;
        }
}

TYPED_TEST(DyadicDenseScan, LongSequencesCarryExactlyAcrossEveryChunk) {
  // T = 2^16 and 2^16 + 1 with no zero J but the forced ones: carries cross every chunk.
  using T = TypeParam;
  std::uint64_t case_seed = test_seed(20260202);
  for (std::int64_t n : {1, 5, 32, 64})
    for (std::int64_t time : {std::int64_t{1} << 16, (std::int64_t{1} << 16) + 1})
      for (double head_rate : {0.0, 1.0 / 4096}) {
        const auto p = make_exact_problem<T>(DenseAddressing::dense_backend, 1, /*groups=*/2,
                                             time, n, head_rate, 0.0, ++case_seed);
        for (bool reverse : {false, true}) expect_all_chunkings_exact(p, /*tiny_chunks=*/false, reverse);
        if (::testing::Test::HasFailure()) return;
      }
}

TYPED_TEST(DyadicDenseScan, RowsOfOneGroupShareTheirJacobian) {
  // RWKV-7's addressing with many heads and a long sequence: rows strided inside each step's
  // [head][i][j] block, one J per (b, head).
  using T = TypeParam;
  std::uint64_t case_seed = test_seed(20260203);
  for (std::int64_t n : {4, 16})
    for (double head_rate : {0.0, 1.0 / 512}) {
      const auto p = make_exact_problem<T>(DenseAddressing::rwkv7, 2, /*groups=*/4, 5000, n,
                                           head_rate, 1.0 / 1024, ++case_seed);
      expect_all_chunkings_exact(p, /*tiny_chunks=*/false);
      if (::testing::Test::HasFailure()) return;
    }
}

template <class T>
class RandomDenseScan : public ::testing::Test {};
TYPED_TEST_SUITE(RandomDenseScan, DenseScanTypes, DtypeName);

TYPED_TEST(RandomDenseScan, AgreesWithAHigherPrecisionSubstitutionWithinTheScanBand) {
  using T = TypeParam;
  // The contract's band for an exact linear scan against its sequential unroll. It is declared
  // for RWKV-7, whose (G, U) scan is this kernel; the dense Newton step is the same scan.
  const Tolerance band = tolerance_for({.dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64,
                                        .metric = Metric::linear_scan,
                                        .cell = "rwkv7"});
  std::uint64_t case_seed = test_seed(20260204);
  for (std::int64_t n : {3, 16, 64})
    for (DenseAddressing addressing : {DenseAddressing::dense_backend, DenseAddressing::rwkv7})
      for (double head_rate : {0.0, 1.0 / 256}) {
        const auto p = make_random_problem<T>(addressing, 1, /*groups=*/2, 4097, n, head_rate,
                                              ++case_seed);
        const std::vector<long double> reference = sequential_substitution<long double>(p);
        std::vector<T> expected(reference.size());
        for (std::size_t i = 0; i < reference.size(); ++i)
          expected[i] = static_cast<T>(reference[i]);
        const std::vector<std::int64_t> chunks = chunks_under_test(n, p.shape.time, false);
        DeviceDenseProblem<T> d(p, workspace_for(p, chunks));
        PARARNN_CUDA_OK(d.upload(p));
        std::vector<T> actual;
        for (std::int64_t chunk : chunks) {
          solve_on_device(p, d, chunk, actual);
          expect_close(expected, actual, band.atol,
                       p.describe() + " chunk=" + std::to_string(chunk) + " (band: " +
                           band.source + ")");
        }
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(DenseScanLauncher, RefusesBadArgumentsAndAcceptsEmptyProblems) {
  DeviceBuffer<float> d_jac(4 * 16 * 16), d_r(4 * 16);
  DeviceBuffer<unsigned char> d_workspace(1 << 16);
  PARARNN_CUDA_OK(d_jac.status());
  PARARNN_CUDA_OK(d_r.status());
  PARARNN_CUDA_OK(d_workspace.status());
  DenseScanArgs<float> args = addressing_args<float>(DenseAddressing::dense_backend, 1, 1, 4, 16);
  args.jac = d_jac.get();
  args.delta = d_r.get();
  const std::size_t need = scan_dense_workspace_bytes<float>(args);
  ASSERT_GT(need, 0u);
  ASSERT_LE(need, d_workspace.size());
  auto launch = [&](const DenseScanArgs<float>& a, void* ws, std::size_t bytes) {
    return launch_scan_dense<float>(a, ws, bytes, cudaStream_t{});
  };
  EXPECT_EQ(launch(args, d_workspace.get(), need), cudaSuccess);
  EXPECT_EQ(launch(args, d_workspace.get(), need - 1), cudaErrorInvalidValue) << "too small";
  EXPECT_EQ(launch(args, nullptr, 0), cudaErrorInvalidValue) << "no workspace";
  EXPECT_EQ(launch(args, d_workspace.get() + 8, d_workspace.size() - 8), cudaErrorInvalidValue)
      << "a workspace not aligned to 16 bytes";
  auto refused = [&](auto edit, const char* what) {
    DenseScanArgs<float> a = args;
    edit(a);
    EXPECT_EQ(launch(a, d_workspace.get(), d_workspace.size()), cudaErrorInvalidValue) << what;
  };
  refused([](auto& a) { a.jac = nullptr; }, "null jac");
  refused([](auto& a) { a.delta = nullptr; }, "null delta");
  refused([](auto& a) { a.n = 0; }, "n = 0");
  refused([](auto& a) { a.n = kDenseScanMaxN + 1; }, "n above the maximum");
  refused([](auto& a) { a.time = -1; }, "negative time");
  refused([](auto& a) { a.batch = -1; }, "negative batch");
  refused([](auto& a) { a.groups = -1; }, "negative groups");
  refused([](auto& a) { a.rows = -1; }, "negative rows");
  refused([](auto& a) { a.chunk_length = -1; }, "negative chunk length");
  DenseScanArgs<float> empty = args;
  empty.time = 0;
  EXPECT_EQ(scan_dense_workspace_bytes<float>(empty), 0u);
  EXPECT_EQ(launch(empty, nullptr, 0), cudaSuccess);
  empty = args;
  empty.rows = 0;
  EXPECT_EQ(launch(empty, nullptr, 0), cudaSuccess);
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pararnn::kernels::test
