// launch_dense_residual and launch_dense_sequential against host loops running the same dense
// math (cells/hopfield.hpp, gru_head.hpp, slstm_head.hpp) in the CPU dense backend's layouts
// (solver/src/cpu/dense.cpp: prev_state, step_at, sequential_chain, picard_guess), so that a
// difference can only come from the kernels' indexing or from device-vs-host libm rounding:
// several chains per row, h0 gathered through the element offsets, packed segments with one h0
// row each, T = 1, the App. A guess (H = 0), NaN propagation of max|F|, sLSTM's Picard guess.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/kernels/dense_residual.hpp"
#include "pararnn/kernels/dense_sequential.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

// One dense cell configuration: chains per row, channels per slot and slots of a chain.
struct DenseConfig {
  const char* name;
  std::int64_t heads;       // chains per row
  std::int64_t slot_width;  // w
  std::int64_t slots;
};

template <class DenseMath>
std::vector<DenseConfig> configs_of() {
  if constexpr (std::is_same_v<DenseMath, cells::HopfieldMath>) {
    return {{"hopfield d_h=5", 1, 5, 1}, {"hopfield d_h=32", 1, 32, 1}};
  } else if constexpr (std::is_same_v<DenseMath, cells::GruHeadMath>) {
    return {{"gru head 3x4", 3, 4, 1}, {"gru head 2x32", 2, 32, 1}};
  } else {
    return {{"slstm head 2x3", 2, 3, 4}, {"slstm dense d_h=8", 1, 8, 4}};
  }
}

template <class DenseMath, class ComputeT>
struct DenseProblem {
  DenseConfig config{};
  std::int64_t batch = 0, time = 0, n = 0, d_h = 0, state_row = 0, width = 0;
  std::vector<ComputeT> wx, params, h0;
  std::vector<std::int64_t> h0_row, offsets;
  std::vector<std::uint8_t> head;

  std::int64_t chains() const { return batch * config.heads; }
  bool is_head(std::int64_t t) const { return t == 0 || (!head.empty() && head[t] != 0); }
  std::string describe() const {
    return std::string(config.name) + " B=" + std::to_string(batch) + " T=" +
           std::to_string(time) + (h0.empty() ? " no h0" : " h0") +
           (head.empty() ? "" : " packed");
  }
  DenseChainInputs<ComputeT> inputs() const {
    return {.batch = batch, .time = time, .n = n, .chains_per_row = config.heads,
            .width = width, .slot_width = config.slot_width, .d_h = d_h,
            .state_row = state_row};
  }
  // cpu/dense.cpp's prev_state (h_chain null: zeros off heads).
  void prev_state(const ComputeT* H_chain, std::int64_t chain, std::int64_t t,
                  ComputeT* out) const {
    const std::int64_t b = chain / config.heads, q = chain % config.heads;
    if (is_head(t)) {
      const std::int64_t row = h0_row.empty() ? b : h0_row[static_cast<std::size_t>(t)];
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = h0.empty() ? ComputeT(0)
                            : h0[static_cast<std::size_t>(row * state_row +
                                                          offsets[static_cast<std::size_t>(q * n + i)])];
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) out[i] = H_chain ? H_chain[(t - 1) * n + i] : ComputeT(0);
  }
  // cpu/dense.cpp's step_at.
  void step_at(std::int64_t chain, std::int64_t t, const ComputeT* h_prev, ComputeT* h_new,
               ComputeT* jac) const {
    const std::int64_t b = chain / config.heads, q = chain % config.heads;
    std::vector<ComputeT> work(static_cast<std::size_t>(DenseMath::work_size(static_cast<int>(n))));
    const ComputeT* wx_t = wx.data() + (b * time + t) * width;
    const ComputeT* gates = DenseMath::kSquareGates ? wx_t : wx_t + q * config.slot_width;
    const long long stride = DenseMath::kSquareGates ? n * n : d_h;
    DenseMath::step(static_cast<int>(n), params.data() + q * DenseMath::params_size(static_cast<int>(n)),
                    gates, stride, h_prev, h_new, jac, work.data());
  }
};

template <class DenseMath, class ComputeT>
DenseProblem<DenseMath, ComputeT> make_problem(const DenseConfig& config, std::int64_t batch,
                                               std::int64_t time, bool with_h0, bool packed,
                                               std::uint64_t seed) {
  DenseProblem<DenseMath, ComputeT> p;
  p.config = config;
  p.batch = batch;
  p.time = time;
  p.n = config.slots * config.slot_width;
  p.d_h = config.heads * config.slot_width;
  p.state_row = config.slots * p.d_h;
  p.width = DenseMath::kSquareGates ? DenseMath::kGates * p.n * p.n : DenseMath::kGates * p.d_h;
  SplitMix64 rng(seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config.slot_width));
  p.wx.resize(static_cast<std::size_t>(batch * time * p.width));
  for (auto& v : p.wx) v = static_cast<ComputeT>(rng.uniform(-1.0, 1.0));
  const int per_chain = DenseMath::params_size(static_cast<int>(p.n));
  p.params.resize(static_cast<std::size_t>(config.heads * per_chain));
  for (auto& v : p.params) v = static_cast<ComputeT>(rng.uniform(-scale, scale));
  if constexpr (std::is_same_v<DenseMath, cells::SlstmHeadMath>) {
    for (std::int64_t q = 0; q < config.heads; ++q)  // eps, the last parameter of each head
      p.params[static_cast<std::size_t>((q + 1) * per_chain - 1)] = ComputeT(1e-6);
  } else if constexpr (std::is_same_v<DenseMath, cells::HopfieldMath>) {
    p.params[0] = static_cast<ComputeT>(scale);  // β
  }
  for (std::int64_t q = 0; q < config.heads; ++q)
    for (std::int64_t i = 0; i < p.n; ++i)  // Cell::chain_element_offset
      p.offsets.push_back((i / config.slot_width) * p.d_h + q * config.slot_width +
                          i % config.slot_width);
  std::int64_t rows = batch;
  if (packed) {
    p.head.assign(static_cast<std::size_t>(time), 0);
    p.h0_row.assign(static_cast<std::size_t>(time), 0);
    std::int64_t segment = 0;
    for (std::int64_t t = 0; t < time; ++t) {
      if (t == 0 || rng.uniform() < 1.0 / 20) {
        p.head[static_cast<std::size_t>(t)] = 1;
        if (t > 0) ++segment;
      }
      p.h0_row[static_cast<std::size_t>(t)] = segment;
    }
    rows = segment + 1;
  }
  if (with_h0) {
    p.h0.resize(static_cast<std::size_t>(rows * p.state_row));
    for (auto& v : p.h0) v = static_cast<ComputeT>(rng.uniform(0.0, 0.5));  // n, c ≥ 0 for sLSTM
  } else {
    p.h0_row.clear();
  }
  return p;
}

template <class DenseMath, class ComputeT>
struct DeviceDenseInputs {
  DeviceBuffer<ComputeT> wx, params, h0;
  DeviceBuffer<std::int64_t> h0_row, offsets;
  DeviceBuffer<std::uint8_t> head;

  explicit DeviceDenseInputs(const DenseProblem<DenseMath, ComputeT>& p)
      : wx(p.wx.size()), params(p.params.size()), h0(p.h0.size()), h0_row(p.h0_row.size()),
        offsets(p.offsets.size()), head(p.head.size()) {}

  cudaError_t upload(const DenseProblem<DenseMath, ComputeT>& p) {
    for (cudaError_t e : {wx.upload(p.wx), params.upload(p.params), h0.upload(p.h0),
                          h0_row.upload(p.h0_row), offsets.upload(p.offsets), head.upload(p.head)})
      if (e != cudaSuccess) return e;
    return cudaSuccess;
  }
  DenseChainInputs<ComputeT> inputs(const DenseProblem<DenseMath, ComputeT>& p) const {
    DenseChainInputs<ComputeT> in = p.inputs();
    in.wx = wx.get();
    in.params = params.get();
    in.h0 = p.h0.empty() ? nullptr : h0.get();
    in.h0_row = p.h0_row.empty() ? nullptr : h0_row.get();
    in.head = p.head.empty() ? nullptr : head.get();
    in.offsets = offsets.get();
    return in;
  }
};

template <class DenseMath_, class ComputeT_>
struct DenseCase {
  using DenseMath = DenseMath_;
  using ComputeT = ComputeT_;
};
struct DenseCaseName {
  template <class Case>
  static std::string GetName(int) {
    using M = typename Case::DenseMath;
    const std::string cell = std::is_same_v<M, cells::HopfieldMath>  ? "Hopfield"
                             : std::is_same_v<M, cells::GruHeadMath> ? "GruHead"
                                                                     : "SlstmHead";
    return cell + (std::is_same_v<typename Case::ComputeT, float> ? "_f32" : "_f64");
  }
};
using DenseCases = ::testing::Types<
    DenseCase<cells::HopfieldMath, float>, DenseCase<cells::HopfieldMath, double>,
    DenseCase<cells::GruHeadMath, float>, DenseCase<cells::GruHeadMath, double>,
    DenseCase<cells::SlstmHeadMath, float>, DenseCase<cells::SlstmHeadMath, double>>;

// ----------------------------------------------------------------------------------------------
// Residual.

template <class Case>
class DenseResidualKernel : public ::testing::Test {};
TYPED_TEST_SUITE(DenseResidualKernel, DenseCases, DenseCaseName);

template <class DenseMath, class ComputeT>
void expect_residual_matches_host(const DenseProblem<DenseMath, ComputeT>& p,
                                  const std::vector<ComputeT>& H) {
  SCOPED_TRACE(p.describe());
  const std::int64_t n = p.n, T_ = p.time;
  std::vector<ComputeT> F(H.size()), J(H.size() * static_cast<std::size_t>(n));
  std::vector<ComputeT> hp(static_cast<std::size_t>(n)), hn(hp.size());
  for (std::int64_t chain = 0; chain < p.chains(); ++chain)
    for (std::int64_t t = 0; t < T_; ++t) {
      const ComputeT* H_chain = H.data() + chain * T_ * n;
      p.prev_state(H_chain, chain, t, hp.data());
      p.step_at(chain, t, hp.data(), hn.data(), J.data() + (chain * T_ + t) * n * n);
      for (std::int64_t i = 0; i < n; ++i)
        F[static_cast<std::size_t>((chain * T_ + t) * n + i)] = hn[i] - H_chain[t * n + i];
    }
  DeviceDenseInputs<DenseMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<ComputeT> d_H(H.size()), d_F(H.size()), d_J(J.size()), d_max(1);
  DeviceBuffer<unsigned char> d_ws(dense_residual_workspace_bytes<ComputeT>());
  for (cudaError_t e : {d_H.status(), d_F.status(), d_J.status(), d_max.status(), d_ws.status()})
    PARARNN_CUDA_OK(e);
  PARARNN_CUDA_OK(d_H.upload(H));
  PARARNN_CUDA_OK(cudaMemset(d_F.get(), 0xff, d_F.bytes()));  // poison: NaN until written
  PARARNN_CUDA_OK(cudaMemset(d_J.get(), 0xff, d_J.bytes()));
  DenseResidualArgs<ComputeT> args{.in = in.inputs(p), .H = d_H.get(), .residual = d_F.get(),
                                   .jac = d_J.get(), .max_abs_residual = d_max.get()};
  PARARNN_CUDA_OK((launch_dense_residual<DenseMath, ComputeT>(args, d_ws.get(), d_ws.size(),
                                                              cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<ComputeT> F_dev, J_dev, max_dev;
  PARARNN_CUDA_OK(d_F.download(F_dev));
  PARARNN_CUDA_OK(d_J.download(J_dev));
  PARARNN_CUDA_OK(d_max.download(max_dev));
  expect_close(F, F_dev, kKernelVsHostTau<ComputeT>, "F");
  expect_close(J, J_dev, kKernelVsHostTau<ComputeT>, "J");
  EXPECT_TRUE(same_bits(max_dev[0], host_nan_max_abs(F_dev)))
      << "max|F| " << hexfloat(max_dev[0]) << " is not the maximum of the F written, "
      << hexfloat(host_nan_max_abs(F_dev));
}

template <class ComputeT>
std::vector<ComputeT> random_chain_major(std::size_t size, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<ComputeT> H(size);
  for (auto& v : H) v = static_cast<ComputeT>(rng.uniform(0.0, 1.0));
  return H;
}

TYPED_TEST(DenseResidualKernel, MatchesHostEvaluationWithHeadsAndH0) {
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  std::uint64_t seed = test_seed(20260301);
  for (const DenseConfig& config : configs_of<DenseMath>())
    for (std::int64_t time : {1, 2, 61})
      for (bool with_h0 : {false, true})
        for (bool packed : {false, true}) {
          if (packed && time < 2) continue;
          const auto p = make_problem<DenseMath, ComputeT>(config, packed ? 1 : 2, time, with_h0,
                                                           packed, ++seed);
          const auto H = random_chain_major<ComputeT>(
              static_cast<std::size_t>(p.chains() * p.time * p.n), ++seed);
          expect_residual_matches_host(p, H);
          if (::testing::Test::HasFailure()) return;
        }
}

TYPED_TEST(DenseResidualKernel, ZeroTrajectoryGivesTheAppendixAGuess) {
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  const std::uint64_t seed = test_seed(20260302);
  const auto p = make_problem<DenseMath, ComputeT>(configs_of<DenseMath>()[0], 2, 40, true, false,
                                                   seed);
  expect_residual_matches_host(p, std::vector<ComputeT>(
                                      static_cast<std::size_t>(p.chains() * p.time * p.n)));
}

TYPED_TEST(DenseResidualKernel, NanInTheTrajectoryMakesMaxNan) {
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  const std::uint64_t seed = test_seed(20260303);
  const auto p = make_problem<DenseMath, ComputeT>(configs_of<DenseMath>()[0], 2, 300, false,
                                                   false, seed);
  auto H = random_chain_major<ComputeT>(static_cast<std::size_t>(p.chains() * p.time * p.n), seed);
  H[H.size() / 2] = std::numeric_limits<ComputeT>::quiet_NaN();
  DeviceDenseInputs<DenseMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<ComputeT> d_H(H.size()), d_F(H.size()), d_max(1);
  DeviceBuffer<unsigned char> d_ws(dense_residual_workspace_bytes<ComputeT>());
  PARARNN_CUDA_OK(d_H.upload(H));
  DenseResidualArgs<ComputeT> args{.in = in.inputs(p), .H = d_H.get(), .residual = d_F.get(),
                                   .max_abs_residual = d_max.get()};
  PARARNN_CUDA_OK((launch_dense_residual<DenseMath, ComputeT>(args, d_ws.get(), d_ws.size(),
                                                              cudaStream_t{})));
  std::vector<ComputeT> max_dev;
  PARARNN_CUDA_OK(d_max.download(max_dev));
  EXPECT_TRUE(std::isnan(max_dev[0])) << hexfloat(max_dev[0]);
}

// ----------------------------------------------------------------------------------------------
// Sequential and Picard.

template <class Case>
class DenseSequentialKernel : public ::testing::Test {};
TYPED_TEST_SUITE(DenseSequentialKernel, DenseCases, DenseCaseName);

// cpu/dense.cpp's sequential_chain into the trajectory [b][t][slot][d_h], state rounded to
// StorageT every step.
template <class StorageT, class DenseMath, class ComputeT>
std::vector<StorageT> host_dense_sequential(const DenseProblem<DenseMath, ComputeT>& p) {
  const std::int64_t n = p.n;
  std::vector<StorageT> out(static_cast<std::size_t>(p.batch * p.time * p.state_row));
  std::vector<ComputeT> hp(static_cast<std::size_t>(n)), hn(hp.size());
  for (std::int64_t chain = 0; chain < p.chains(); ++chain) {
    const std::int64_t b = chain / p.config.heads, q = chain % p.config.heads;
    for (std::int64_t t = 0; t < p.time; ++t) {
      if (p.is_head(t)) p.prev_state(nullptr, chain, t, hp.data());
      p.step_at(chain, t, hp.data(), hn.data(), nullptr);
      for (std::int64_t i = 0; i < n; ++i) {
        const StorageT stored = static_cast<StorageT>(hn[static_cast<std::size_t>(i)]);
        out[static_cast<std::size_t>((b * p.time + t) * p.state_row +
                                     p.offsets[static_cast<std::size_t>(q * n + i)])] = stored;
        hp[static_cast<std::size_t>(i)] = static_cast<ComputeT>(stored);
      }
    }
  }
  return out;
}

// cpu/dense.cpp's picard_guess, chain-major in the compute type.
template <class DenseMath, class ComputeT>
std::vector<ComputeT> host_picard(const DenseProblem<DenseMath, ComputeT>& p, std::int64_t passes,
                                  std::int64_t frozen_begin) {
  const std::int64_t n = p.n, T_ = p.time;
  std::vector<ComputeT> current(static_cast<std::size_t>(p.chains() * T_ * n)), previous;
  std::vector<ComputeT> hp(static_cast<std::size_t>(n));
  for (std::int64_t pass = 0; pass <= passes; ++pass) {
    for (std::int64_t chain = 0; chain < p.chains(); ++chain) {
      ComputeT* H_chain = current.data() + chain * T_ * n;
      const ComputeT* prev_chain = pass == 0 ? nullptr : previous.data() + chain * T_ * n;
      for (std::int64_t t = 0; t < T_; ++t) {
        const bool head = p.is_head(t);
        p.prev_state(head ? nullptr : H_chain, chain, t, hp.data());
        for (std::int64_t i = frozen_begin; i < n; ++i)
          hp[static_cast<std::size_t>(i)] = pass == 0 ? ComputeT(0)
                                            : head    ? hp[static_cast<std::size_t>(i)]
                                                      : prev_chain[(t - 1) * n + i];
        p.step_at(chain, t, hp.data(), H_chain + t * n, nullptr);
      }
    }
    previous = current;
  }
  return current;
}

template <class StorageT>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<StorageT, double>) return DType::f64;
  if constexpr (std::is_same_v<StorageT, float>) return DType::f32;
  if constexpr (std::is_same_v<StorageT, __half>) return DType::f16;
  return DType::bf16;
}

template <class StorageT, class DenseMath, class ComputeT>
void expect_sequential_matches_host(const DenseProblem<DenseMath, ComputeT>& p) {
  static_assert(std::is_same_v<ComputeOf<StorageT>, ComputeT>);
  SCOPED_TRACE(p.describe() + " storage " + std::string(dtype_name(dtype_of<StorageT>())));
  const std::vector<StorageT> expected = host_dense_sequential<StorageT>(p);
  DeviceDenseInputs<DenseMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<StorageT> d_out(expected.size());
  PARARNN_CUDA_OK(d_out.status());
  PARARNN_CUDA_OK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));  // poison: NaN until written
  const DenseChainInputs<ComputeT> inputs = in.inputs(p);
  DenseSequentialArgs<StorageT> args{.in = inputs, .out = d_out.get(),
                                     .layout = dense_trajectory_layout(inputs)};
  PARARNN_CUDA_OK((launch_dense_sequential<DenseMath, StorageT>(args, cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<StorageT> actual;
  PARARNN_CUDA_OK(d_out.download(actual));
  std::vector<double> e(expected.size()), a(actual.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    e[i] = static_cast<double>(static_cast<float>(expected[i]));
    a[i] = static_cast<double>(static_cast<float>(actual[i]));
  }
  // The kernel and the host loop run the same math; their libms differ by ulps, which the
  // storage rounding may turn into one storage ulp: the trajectory τ of the storage dtype.
  expect_close(e, a, tolerance_for({.dtype = dtype_of<StorageT>()}).atol, "H");
}

TYPED_TEST(DenseSequentialKernel, MatchesHostLoopInTheTrajectoryLayout) {
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  std::uint64_t seed = test_seed(20260304);
  for (const DenseConfig& config : configs_of<DenseMath>())
    for (std::int64_t time : {1, 7, 500})
      for (bool with_h0 : {false, true})
        for (bool packed : {false, true}) {
          const auto p = make_problem<DenseMath, ComputeT>(config, packed ? 1 : 3, time, with_h0,
                                                           packed, ++seed);
          expect_sequential_matches_host<ComputeT>(p);
          if constexpr (std::is_same_v<ComputeT, float>) {
            expect_sequential_matches_host<__half>(p);
            expect_sequential_matches_host<__nv_bfloat16>(p);
          }
          if (::testing::Test::HasFailure()) return;
        }
}

TYPED_TEST(DenseSequentialKernel, ChainMajorOutputHoldsTheSameTrajectory) {
  // The Newton fallback's layout: [chain][t][n] in the compute type, element by element the
  // trajectory layout's values (the same kernel, the other addressing), so bitwise equal.
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  const std::uint64_t seed = test_seed(20260305);
  const auto p = make_problem<DenseMath, ComputeT>(configs_of<DenseMath>()[0], 2, 300, true,
                                                   false, seed);
  DeviceDenseInputs<DenseMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  const DenseChainInputs<ComputeT> inputs = in.inputs(p);
  const std::size_t size = static_cast<std::size_t>(p.chains() * p.time * p.n);
  DeviceBuffer<ComputeT> d_traj(static_cast<std::size_t>(p.batch * p.time * p.state_row)),
      d_chain(size);
  for (auto [buffer, layout] : {std::pair{&d_traj, dense_trajectory_layout(inputs)},
                                std::pair{&d_chain, dense_chain_major_layout(inputs)}}) {
    DenseSequentialArgs<ComputeT> args{.in = inputs, .out = buffer->get(), .layout = layout};
    PARARNN_CUDA_OK((launch_dense_sequential<DenseMath, ComputeT>(args, cudaStream_t{})));
  }
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<ComputeT> traj, chain_major;
  PARARNN_CUDA_OK(d_traj.download(traj));
  PARARNN_CUDA_OK(d_chain.download(chain_major));
  std::int64_t mismatches = 0;
  for (std::int64_t chain = 0; chain < p.chains(); ++chain)
    for (std::int64_t t = 0; t < p.time; ++t)
      for (std::int64_t i = 0; i < p.n; ++i) {
        const std::int64_t b = chain / p.config.heads, q = chain % p.config.heads;
        const ComputeT x = traj[static_cast<std::size_t>(
            (b * p.time + t) * p.state_row + p.offsets[static_cast<std::size_t>(q * p.n + i)])];
        const ComputeT y = chain_major[static_cast<std::size_t>((chain * p.time + t) * p.n + i)];
        mismatches += same_bits(x, y) ? 0 : 1;
      }
  EXPECT_EQ(mismatches, 0) << p.describe();
}

TYPED_TEST(DenseSequentialKernel, RelayoutMovesEachLayoutOntoTheOtherBitwise) {
  // launch_dense_relayout: the chain-major output moved into a poisoned trajectory buffer is the
  // trajectory output, and the trajectory moved back into a poisoned chain-major buffer is the
  // chain-major output (heads, so that the offsets permute within a row).
  using DenseMath = typename TypeParam::DenseMath;
  using ComputeT = typename TypeParam::ComputeT;
  const std::uint64_t seed = test_seed(20261205);
  const DenseConfig config = configs_of<DenseMath>()[0];
  const auto p = make_problem<DenseMath, ComputeT>(config, 3, 257, true, false, seed);
  DeviceDenseInputs<DenseMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  const DenseChainInputs<ComputeT> inputs = in.inputs(p);
  const std::size_t traj_size = static_cast<std::size_t>(p.batch * p.time * p.state_row);
  const std::size_t chain_size = static_cast<std::size_t>(p.chains() * p.time * p.n);
  DeviceBuffer<ComputeT> d_traj(traj_size), d_chain(chain_size), d_traj_moved(traj_size), d_chain_moved(chain_size);
  for (auto [buffer, layout] : {std::pair{&d_traj, dense_trajectory_layout(inputs)},
                                std::pair{&d_chain, dense_chain_major_layout(inputs)}}) {
    PARARNN_CUDA_OK(cudaMemset(buffer->get(), 0xff, buffer->bytes()));
    DenseSequentialArgs<ComputeT> args{.in = inputs, .out = buffer->get(), .layout = layout};
    PARARNN_CUDA_OK((launch_dense_sequential<DenseMath, ComputeT>(args, cudaStream_t{})));
  }
  PARARNN_CUDA_OK(cudaMemset(d_traj_moved.get(), 0xff, d_traj_moved.bytes()));
  PARARNN_CUDA_OK(cudaMemset(d_chain_moved.get(), 0xff, d_chain_moved.bytes()));
  PARARNN_CUDA_OK(launch_dense_relayout(d_chain.get(), dense_chain_major_layout(inputs), d_traj_moved.get(),
                                        dense_trajectory_layout(inputs), p.batch, inputs.chains_per_row, p.time,
                                        p.n, cudaStream_t{}));
  PARARNN_CUDA_OK(launch_dense_relayout(d_traj.get(), dense_trajectory_layout(inputs), d_chain_moved.get(),
                                        dense_chain_major_layout(inputs), p.batch, inputs.chains_per_row, p.time,
                                        p.n, cudaStream_t{}));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  for (auto [expected, actual] : {std::pair{&d_traj, &d_traj_moved}, std::pair{&d_chain, &d_chain_moved}}) {
    std::vector<ComputeT> e, a;
    PARARNN_CUDA_OK(expected->download(e));
    PARARNN_CUDA_OK(actual->download(a));
    std::int64_t mismatches = 0;
    for (std::size_t i = 0; i < e.size(); ++i) mismatches += same_bits(e[i], a[i]) ? 0 : 1;
    EXPECT_EQ(mismatches, 0) << p.describe() << (expected == &d_traj ? " chain-major -> trajectory" : " trajectory -> chain-major");
  }
}

TEST(DenseSequentialPicard, MatchesTheHostPicardGuess) {
  // sLSTM (head and dense): frozen elements = the hidden slot, [3 w, 4 w).
  std::uint64_t seed = test_seed(20260306);
  for (const DenseConfig& config : configs_of<cells::SlstmHeadMath>())
    for (std::int64_t passes : {0, 1, 3})
      for (bool packed : {false, true}) {
        const auto p = make_problem<cells::SlstmHeadMath, float>(config, packed ? 1 : 2, 200,
                                                                 true, packed, ++seed);
        SCOPED_TRACE(p.describe() + " passes=" + std::to_string(passes));
        const std::int64_t frozen_begin = (config.slots - 1) * config.slot_width;
        const std::vector<float> expected = host_picard(p, passes, frozen_begin);
        DeviceDenseInputs<cells::SlstmHeadMath, float> in(p);
        PARARNN_CUDA_OK(in.upload(p));
        DeviceBuffer<float> d_out(expected.size());
        PARARNN_CUDA_OK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
        const DenseChainInputs<float> inputs = in.inputs(p);
        DenseSequentialArgs<float> args{
            .in = inputs, .out = d_out.get(), .layout = dense_chain_major_layout(inputs),
            .picard = {.enabled = true, .passes = passes, .frozen_begin = frozen_begin}};
        PARARNN_CUDA_OK((launch_dense_sequential<cells::SlstmHeadMath, float>(args, cudaStream_t{})));
        PARARNN_CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> actual;
        PARARNN_CUDA_OK(d_out.download(actual));
        expect_close(expected, actual, kKernelVsHostTau<float>, "Picard guess");
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(DenseKernelLaunchers, RefuseBadArgumentsAndAcceptEmptyProblems) {
  DeviceBuffer<float> d_wx(64), d_params(64), d_H(64), d_F(64), d_max(1);
  DeviceBuffer<unsigned char> d_ws(dense_residual_workspace_bytes<float>());
  DenseChainInputs<float> in{.wx = d_wx.get(), .params = d_params.get(), .batch = 1, .time = 2,
                             .n = 4, .chains_per_row = 1, .width = 12, .slot_width = 4,
                             .d_h = 4, .state_row = 4};
  using M = cells::GruHeadMath;
  auto residual = [&](const DenseChainInputs<float>& i, DenseResidualArgs<float> a = {}) {
    a.in = i;
    if (a.H == nullptr) a.H = d_H.get();
    if (a.residual == nullptr) a.residual = d_F.get();
    return launch_dense_residual<M, float>(a, d_ws.get(), d_ws.size(), cudaStream_t{});
  };
  EXPECT_EQ(residual(in), cudaSuccess);
  auto edited = [&](auto edit) {
    DenseChainInputs<float> i = in;
    edit(i);
    return i;
  };
  EXPECT_EQ(residual(edited([](auto& i) { i.wx = nullptr; })), cudaErrorInvalidValue);
  EXPECT_EQ(residual(edited([](auto& i) { i.params = nullptr; })), cudaErrorInvalidValue);
  EXPECT_EQ(residual(edited([](auto& i) { i.n = kDenseKernelMaxN + 1; })), cudaErrorInvalidValue);
  EXPECT_EQ(residual(edited([](auto& i) { i.time = -1; })), cudaErrorInvalidValue);
  EXPECT_EQ(residual(edited([&](auto& i) { i.h0 = d_wx.get(); })), cudaErrorInvalidValue)
      << "h0 without offsets";
  DenseResidualArgs<float> with_max{.max_abs_residual = d_max.get()};
  with_max.in = in;
  with_max.H = d_H.get();
  with_max.residual = d_F.get();
  EXPECT_EQ((launch_dense_residual<M, float>(with_max, nullptr, 0, cudaStream_t{})),
            cudaErrorInvalidValue)
      << "the scalar without a workspace";
  DenseResidualArgs<float> empty = with_max;
  empty.in.time = 0;
  EXPECT_EQ((launch_dense_residual<M, float>(empty, nullptr, 0, cudaStream_t{})), cudaSuccess);

  DenseSequentialArgs<float> seq{.in = in, .out = d_H.get(),
                                 .layout = dense_chain_major_layout(in)};
  EXPECT_EQ((launch_dense_sequential<M, float>(seq, cudaStream_t{})), cudaSuccess);
  DenseSequentialArgs<float> bad = seq;
  bad.out = nullptr;
  EXPECT_EQ((launch_dense_sequential<M, float>(bad, cudaStream_t{})), cudaErrorInvalidValue);
  bad = seq;
  bad.picard = {.enabled = true, .passes = 1, .frozen_begin = 5};
  EXPECT_EQ((launch_dense_sequential<M, float>(bad, cudaStream_t{})), cudaErrorInvalidValue);
  bad = seq;
  bad.in.batch = 0;
  EXPECT_EQ((launch_dense_sequential<M, float>(bad, cudaStream_t{})), cudaSuccess);
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace pararnn::kernels::test
