// launch_cell_vjp's optional outputs (kernels/cell_vjp.hpp) against what they replace, for every
// per-channel cell, one sequence per row and packed with h0 rows: d_wx's bf16 terms equal, bit
// for bit, launch_bf16_split's terms of the d_wx the same launch writes (and d_wx itself is the
// same with and without them, and they are the same when d_wx is not written); the input bias
// partials equal, bit for bit, the chunk-wise double sums of that d_wx in step order. A double
// compute type asking for bf16 terms is refused.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/kernels/bf16_split.hpp"
#include "pararnn/kernels/cell_vjp.hpp"

namespace pararnn::kernels::test {
namespace {

template <class T>
class CellVjpOutputs : public ::testing::Test {};
TYPED_TEST_SUITE(CellVjpOutputs, CellCases, CellCaseName);

template <class CellMath, class ComputeT>
void expect_outputs_equal_their_sources(std::int64_t B, std::int64_t T, std::int64_t D, bool packed,
                                        std::uint64_t seed) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, R = CellMath::kRecurrent;
  constexpr int kTerms = 2;
  const auto p = make_cell_problem<CellMath, ComputeT>(B, T, D, /*with_h0=*/true, packed, seed);
  const std::size_t n = static_cast<std::size_t>(B * T * S * D), n_wx = static_cast<std::size_t>(B * T * G * D);
  std::vector<ComputeT> H(n);
  std::vector<double> mu(n);
  SplitMix64 rng(seed + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = rng.uniform(-1.0, 1.0);
    const bool normalizer = std::is_same_v<CellMath, cells::SlstmDiagMath> && (static_cast<std::int64_t>(i) / D) % S == 1;
    H[i] = static_cast<ComputeT>(normalizer ? std::fabs(v) : v);
    mu[i] = rng.uniform(-3.0, 3.0);
  }
  const std::int64_t chunks = vjp_partial_chunks(T);
  DeviceCellInputs<CellMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<ComputeT> d_H(n), dwx_plain(n_wx), dwx(n_wx);
  DeviceBuffer<double> d_mu(n), part(static_cast<std::size_t>(B * chunks * R * D)),
      bias(static_cast<std::size_t>(B * chunks * G * D)), bias_alone(static_cast<std::size_t>(B * chunks * G * D));
  DeviceBuffer<std::uint16_t> terms(kTerms * n_wx), terms_alone(kTerms * n_wx), split(kTerms * n_wx);
  for (cudaError_t e : {d_H.status(), dwx_plain.status(), dwx.status(), d_mu.status(), part.status(), bias.status(),
                        bias_alone.status(), terms.status(), terms_alone.status(), split.status()})
    PARARNN_CUDA_OK(e);
  PARARNN_CUDA_OK(d_H.upload(H));
  PARARNN_CUDA_OK(d_mu.upload(mu));
  // Poison (NaN until written) what the launches under test write.
  PARARNN_CUDA_OK(cudaMemset(dwx.get(), 0xff, dwx.bytes()));
  PARARNN_CUDA_OK(cudaMemset(bias.get(), 0xff, bias.bytes()));
  PARARNN_CUDA_OK(cudaMemset(bias_alone.get(), 0xff, bias_alone.bytes()));
  PARARNN_CUDA_OK(cudaMemset(terms.get(), 0xff, terms.bytes()));
  PARARNN_CUDA_OK(cudaMemset(terms_alone.get(), 0xff, terms_alone.bytes()));
  const CellVjpArgs<ComputeT> plain{.wx = in.wx.get(), .recurrent = in.recurrent.get(), .h0 = in.h0.get(),
                                    .h0_row = packed ? in.h0_row.get() : nullptr,
                                    .head = packed ? in.head.get() : nullptr, .H = d_H.get(), .mu = d_mu.get(),
                                    .d_wx = dwx_plain.get(), .d_rec_partials = part.get(), .batch = B, .time = T,
                                    .channels = D};
  PARARNN_CUDA_OK((launch_cell_vjp<CellMath, ComputeT>(plain, cudaStream_t{})));
  CellVjpArgs<ComputeT> with = plain;
  with.d_wx = dwx.get();
  with.d_wx_partials = bias.get();
  with.d_wx_bf16 = terms.get();
  with.bf16_plane = static_cast<std::int64_t>(n_wx);
  with.bf16_terms = kTerms;
  if constexpr (!std::is_same_v<ComputeT, float>) {
    EXPECT_EQ((launch_cell_vjp<CellMath, ComputeT>(with, cudaStream_t{})), cudaErrorInvalidValue)
        << "bf16 terms of a double d_wx";
    return;
  } else {
    PARARNN_CUDA_OK((launch_cell_vjp<CellMath, ComputeT>(with, cudaStream_t{})));
    CellVjpArgs<ComputeT> alone = with;  // the terms in place of d_wx
    alone.d_wx = nullptr;
    alone.d_wx_partials = bias_alone.get();
    alone.d_wx_bf16 = terms_alone.get();
    PARARNN_CUDA_OK((launch_cell_vjp<CellMath, ComputeT>(alone, cudaStream_t{})));
    CellVjpArgs<ComputeT> short_plane = alone;
    short_plane.bf16_plane = static_cast<std::int64_t>(n_wx) - 1;
    EXPECT_EQ((launch_cell_vjp<CellMath, ComputeT>(short_plane, cudaStream_t{})), cudaErrorInvalidValue)
        << "a plane shorter than d_wx";
    const Bf16SplitArgs s{.src = dwx_plain.get(), .src_type = Bf16SplitSource::f32, .dst = split.get(),
                          .n = static_cast<std::int64_t>(n_wx), .terms = kTerms,
                          .plane = static_cast<std::int64_t>(n_wx)};
    PARARNN_CUDA_OK(launch_bf16_split(s, cudaStream_t{}));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> want_dwx, got_dwx;
    std::vector<std::uint16_t> want_terms, got_terms, got_terms_alone;
    std::vector<double> got_bias, got_bias_alone;
    PARARNN_CUDA_OK(dwx_plain.download(want_dwx));
    PARARNN_CUDA_OK(dwx.download(got_dwx));
    PARARNN_CUDA_OK(split.download(want_terms));
    PARARNN_CUDA_OK(terms.download(got_terms));
    PARARNN_CUDA_OK(terms_alone.download(got_terms_alone));
    PARARNN_CUDA_OK(bias.download(got_bias));
    PARARNN_CUDA_OK(bias_alone.download(got_bias_alone));
    EXPECT_EQ(0, std::memcmp(want_dwx.data(), got_dwx.data(), n_wx * sizeof(float))) << "d_wx beside the terms";
    EXPECT_EQ(want_terms, got_terms) << "the terms beside d_wx against launch_bf16_split's";
    EXPECT_EQ(want_terms, got_terms_alone) << "the terms without d_wx against launch_bf16_split's";
    std::vector<double> want_bias(static_cast<std::size_t>(B * chunks * G * D), 0.0);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t i = 0; i < G * D; ++i)
          want_bias[static_cast<std::size_t>((b * chunks + t / kVjpStepsPerPartial) * G * D + i)] +=
              static_cast<double>(want_dwx[static_cast<std::size_t>((b * T + t) * G * D + i)]);
    EXPECT_EQ(0, std::memcmp(want_bias.data(), got_bias.data(), want_bias.size() * sizeof(double)))
        << "the bias partials against the chunk sums of d_wx";
    EXPECT_EQ(0, std::memcmp(want_bias.data(), got_bias_alone.data(), want_bias.size() * sizeof(double)))
        << "the bias partials without d_wx";
  }
}

TYPED_TEST(CellVjpOutputs, TermsAndBiasPartialsEqualWhatTheyReplace) {
  using CellMath = typename TypeParam::CellMath;
  using ComputeT = ComputeOf<typename TypeParam::StorageT>;
  std::uint64_t seed = test_seed(20261207);
  for (const bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "one sequence per row");
    // T not a multiple of the chunk (kVjpStepsPerPartial), D not a multiple of the block.
    expect_outputs_equal_their_sources<CellMath, ComputeT>(packed ? 1 : 3, 333, 37, packed, ++seed);
  }
}

}  // namespace
}  // namespace pararnn::kernels::test
