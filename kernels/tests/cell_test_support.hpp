// Problems and host twins for the cell kernels' tests (sequential unroll, Newton residual): random
// gate pre-activations, recurrent vectors and initial states in the kernels' layouts
// (kernels/sequential.hpp), and host loops running the same CellMath, so that a difference can
// only come from the kernel's indexing or from device-vs-host libm rounding.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/kernels/launch.hpp"
#include "test_support.hpp"

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/contracts/tolerance.hpp"

namespace pararnn::kernels::test {

// Agreement bound between a kernel and the host loop running the same cell math (device and
// host libm differ by a few ulps a step): the contract's "GPU backend ≡ CPU backend within τ",
// i.e. the trajectory τ of the compute type's dtype, from the one tolerance table.
template <class ComputeT>
inline const double kKernelVsHostTau =
    tolerance_for({.dtype = std::is_same_v<ComputeT, float> ? DType::f32 : DType::f64}).atol;

// A residual F = f(h) − h computed in a compute type T from states of magnitude M differs from the
// same residual in double by the rounding of its two terms to T: the contract table's kernel band
// (KernelBand::residual_rounding), in ulp of M.
inline const double kResidualRoundingUlps = kernel_band(KernelBand::residual_rounding).ulps;
// How near the adaptive stop's threshold a chain's residual leaves its decision open (the
// contract table's KernelBand::stop_decision): within `relative` of it or `ulps` of T at max|H|.
inline const UlpBand kStopDecisionBand = kernel_band(KernelBand::stop_decision);

// The longest T at which two f32 evaluations of the cell's sequential loop (host libm, device
// libm) are expected to stay within τ: sLSTM's (c, n) grow with T and its long-T f32 loops
// drift apart (docs/kstar.md: at T = 8192 the f32 sequential floor itself exceeds the band);
// the other cells contract.
template <class CellMath>
inline constexpr std::int64_t kComparableTime =
    std::is_same_v<CellMath, cells::SlstmDiagMath> || std::is_same_v<CellMath, cells::TitansMath>
        ? 2048  // Titans: the surprise memory is not squashed either (|h| reaches ~10)
        : std::int64_t{1} << 40;

template <class CellMath_, class StorageT_>
struct CellCase {
  using CellMath = CellMath_;
  using StorageT = StorageT_;
};

// Typed-test names: the cell's label from the one list (cells/cell_list.hpp) and the dtype.
struct CellCaseName {
  template <class Case>
  static std::string GetName(int) {
    using M = typename Case::CellMath;
    std::string cell;
#define PARARNN_CELL_CASE_NAME(kind, Math, label, min_chains) \
  if (std::is_same_v<M, cells::Math>) cell = #kind;
    PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_CELL_CASE_NAME)
#undef PARARNN_CELL_CASE_NAME
    using St = typename Case::StorageT;
    return cell + (std::is_same_v<St, float>    ? "_f32"
                   : std::is_same_v<St, double> ? "_f64"
                   : std::is_same_v<St, __half> ? "_f16"
                                                : "_bf16");
  }
};

// Every per-channel cell of the list, in both compute types.
#define PARARNN_CELL_CASES(kind, Math, label, min_chains) , CellCase<cells::Math, float>, CellCase<cells::Math, double>
template <class... Cases>
struct DropFirst;
template <class First, class... Rest>
struct DropFirst<::testing::Types<First, Rest...>> {
  using type = ::testing::Types<Rest...>;
};
using CellCases =
    typename DropFirst<::testing::Types<void PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_CELL_CASES)>>::type;
#undef PARARNN_CELL_CASES

// Every per-channel cell in every storage dtype (kernels whose output is the storage dtype: the
// sequential unroll rounds the state to f16 / bf16 every step, with f32 arithmetic).
#define PARARNN_STORAGE_CELL_CASES(kind, Math, label, min_chains)                                              \
  , CellCase<cells::Math, float>, CellCase<cells::Math, double>, CellCase<cells::Math, __half>, \
      CellCase<cells::Math, __nv_bfloat16>
using StorageCellCases =
    typename DropFirst<::testing::Types<void PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_STORAGE_CELL_CASES)>>::type;
#undef PARARNN_STORAGE_CELL_CASES

// The contract's dtype of a device storage type.
template <class StorageT>
inline constexpr DType kStorageDType = std::is_same_v<StorageT, float>    ? DType::f32
                                       : std::is_same_v<StorageT, double> ? DType::f64
                                       : std::is_same_v<StorageT, __half> ? DType::f16
                                                                          : DType::bf16;

// The same agreement bound for a kernel whose output is rounded to StorageT every step: the
// trajectory τ of the storage dtype (two loops whose f32 steps differ by an ulp may round to
// adjacent f16 / bf16 values and carry that on).
template <class StorageT>
inline const double kKernelVsHostStorageTau = tolerance_for({.dtype = kStorageDType<StorageT>}).atol;

// A storage value as a double (the half types convert through float).
template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

template <class CellMath, class StorageT>
struct CellProblem {
  using ComputeT = ComputeOf<StorageT>;
  static constexpr int S = CellMath::kSlots;
  static constexpr int G = CellMath::kGates;
  static constexpr int R = CellMath::kRecurrent;
  static constexpr int C = CellMath::kConstants;
  std::int64_t batch = 0, time = 0, channels = 0;
  std::vector<ComputeT> wx;           // [b][t][g·D + c]
  std::vector<ComputeT> recurrent;    // [k][c], R clamped rows then C constant rows
  std::vector<ComputeT> h0;           // empty or [row][s][c]
  std::vector<std::int64_t> h0_row;   // empty or [t]
  std::vector<std::uint8_t> head;     // empty or [t]

  bool is_head(std::int64_t t) const { return t == 0 || (!head.empty() && head[t] != 0); }

  // The state entering step t at a head (h0 row, or zeros).
  ComputeT head_state(std::int64_t b, std::int64_t t, int s, std::int64_t c) const {
    if (h0.empty()) return ComputeT(0);
    const std::int64_t row = h0_row.empty() ? b : h0_row[static_cast<std::size_t>(t)];
    return h0[static_cast<std::size_t>((row * S + s) * channels + c)];
  }

  void step(std::int64_t b, std::int64_t t, std::int64_t c, const ComputeT* h_prev,
            ComputeT* h_new, ComputeT* jac) const {
    ComputeT rec[R + C], w[G];
    for (int k = 0; k < R + C; ++k) rec[k] = recurrent[static_cast<std::size_t>(k * channels + c)];
    for (int g = 0; g < G; ++g)
      w[g] = wx[static_cast<std::size_t>((b * time + t) * G * channels + g * channels + c)];
    CellMath::step(rec, w, h_prev, h_new, jac);
  }
};

// packed: heads at random steps (rate ~1/50) with one h0 row per segment through h0_row.
template <class CellMath, class StorageT>
CellProblem<CellMath, StorageT> make_cell_problem(std::int64_t batch, std::int64_t time,
                                                  std::int64_t channels, bool with_h0,
                                                  bool packed, std::uint64_t seed) {
  using P = CellProblem<CellMath, StorageT>;
  using ComputeT = typename P::ComputeT;
  P p;
  p.batch = batch;
  p.time = time;
  p.channels = channels;
  SplitMix64 rng(seed);
  p.wx.resize(static_cast<std::size_t>(batch * time * P::G * channels));
  for (auto& v : p.wx) v = static_cast<ComputeT>(rng.uniform(-2.0, 2.0));
  p.recurrent.resize(static_cast<std::size_t>((P::R + P::C) * channels));
  // Recurrent rows in [−0.5, 0.5]; constants (sLSTM's eps) positive, as a cell's are.
  for (std::size_t i = 0; i < p.recurrent.size(); ++i)
    p.recurrent[i] = static_cast<ComputeT>(static_cast<std::int64_t>(i) < P::R * channels
                                               ? rng.uniform(-0.5, 0.5) : rng.uniform(0.5, 1.0));
  std::int64_t rows = batch;
  if (packed) {
    p.head.assign(static_cast<std::size_t>(time), 0);
    p.h0_row.assign(static_cast<std::size_t>(time), 0);
    std::int64_t segment = 0;
    for (std::int64_t t = 0; t < time; ++t) {
      if (t == 0 || rng.uniform() < 1.0 / 50) {
        p.head[static_cast<std::size_t>(t)] = 1;
        if (t > 0) ++segment;
      }
      p.h0_row[static_cast<std::size_t>(t)] = segment;
    }
    rows = segment + 1;
  }
  if (with_h0) {
    p.h0.resize(static_cast<std::size_t>(rows * P::S * channels));
    for (auto& v : p.h0) v = static_cast<ComputeT>(rng.uniform(-0.5, 0.5));
  } else {
    p.h0_row.clear();
  }
  return p;
}

// The host sequential loop, rounding the state to StorageT every step. With `zero_hidden` or
// `frozen_hidden` ([b][t][s][c]) it is a pass of sLSTM's Picard guess (kernels/sequential.hpp):
// the hidden slot entering a step is 0 everywhere, or frozen_hidden's at t − 1 off heads.
template <class CellMath, class StorageT>
std::vector<StorageT> host_sequential(const CellProblem<CellMath, StorageT>& p, bool zero_hidden = false,
                                      const std::vector<ComputeOf<StorageT>>* frozen_hidden = nullptr) {
  using P = CellProblem<CellMath, StorageT>;
  using ComputeT = typename P::ComputeT;
  constexpr int S = P::S;
  std::vector<StorageT> H(static_cast<std::size_t>(p.batch * p.time * S * p.channels));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t c = 0; c < p.channels; ++c) {
      ComputeT h[S] = {};
      for (std::int64_t t = 0; t < p.time; ++t) {
        ComputeT h_prev[S], h_new[S];
        for (int s = 0; s < S; ++s) h_prev[s] = p.is_head(t) ? p.head_state(b, t, s, c) : h[s];
        if (frozen_hidden != nullptr && !p.is_head(t))
          h_prev[S - 1] = (*frozen_hidden)[static_cast<std::size_t>(((b * p.time + t - 1) * S + S - 1) * p.channels + c)];
        if (zero_hidden) h_prev[S - 1] = ComputeT(0);
        p.step(b, t, c, h_prev, h_new, nullptr);
        for (int s = 0; s < S; ++s) {
          const StorageT stored = static_cast<StorageT>(h_new[s]);
          H[static_cast<std::size_t>(((b * p.time + t) * S + s) * p.channels + c)] = stored;
          h[s] = static_cast<ComputeT>(stored);
        }
      }
    }
  return H;
}

// |actual − expected| <= tau·(1 + |expected|) everywhere; NaN never passes. Records a failure
// naming the count, the worst element and both values.
template <class T>
void expect_close(const std::vector<T>& expected, const std::vector<T>& actual, double tau,
                  const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  std::int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double e = as_double(expected[i]), a = as_double(actual[i]);
    const double allowed = tau * (1.0 + std::fabs(e));
    const double diff = std::fabs(a - e);
    if (!(diff <= allowed)) {
      ++bad;
      const double excess = std::isnan(diff) ? INFINITY : diff / allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = static_cast<std::int64_t>(i);
        worst_excess = excess;
      }
    }
  }
  if (bad > 0)
    ADD_FAILURE() << what << ": " << bad << " of " << expected.size()
                  << " elements beyond tau=" << tau << "·(1+|expected|); worst at flat index "
                  << worst << ": expected " << hexfloat(as_double(expected[static_cast<std::size_t>(worst)]))
                  << ", actual " << hexfloat(as_double(actual[static_cast<std::size_t>(worst)]));
}

// max|v| as every residual kernel reduces it: NaN ranks above every number.
template <class T>
T host_nan_max_abs(const std::vector<T>& v) {
  T m = T(0);
  for (T x : v) {
    const T a = std::fabs(x);
    if (std::isnan(a)) return a;
    if (a > m) m = a;
  }
  return m;
}

// Device copies of a problem's inputs.
template <class CellMath, class StorageT>
struct DeviceCellInputs {
  using ComputeT = ComputeOf<StorageT>;
  DeviceBuffer<ComputeT> wx, recurrent, h0;
  DeviceBuffer<std::int64_t> h0_row;
  DeviceBuffer<std::uint8_t> head;

  explicit DeviceCellInputs(const CellProblem<CellMath, StorageT>& p)
      : wx(p.wx.size()),
        recurrent(p.recurrent.size()),
        h0(p.h0.size()),
        h0_row(p.h0_row.size()),
        head(p.head.size()) {}

  cudaError_t upload(const CellProblem<CellMath, StorageT>& p) {
    for (cudaError_t e : {wx.upload(p.wx), recurrent.upload(p.recurrent), h0.upload(p.h0),
                          h0_row.upload(p.h0_row), head.upload(p.head)})
      if (e != cudaSuccess) return e;
    return cudaSuccess;
  }
};

}  // namespace pararnn::kernels::test
