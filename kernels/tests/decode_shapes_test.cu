// Every decode shape with 16 slices sums a row in the same order (kernels/decode.hpp), whatever
// its rows per block, its x staging (row- or k-major), its x chunk or its cluster: on the same
// inputs, each is bit for bit launch_decode_step's result at every batch. The property tests
// (Decode.*) compare batches through CudaDecoder, which runs one class per batch and, on a device
// with clusters, never the block a batch of one takes without them; here every shape runs at
// every batch, including the one-chunk shapes the benchmark measures as candidates.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "decode.cuh"
#include "decode_cluster.cuh"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/kernels/decode.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

using Gru = cells::GruDiagMath;

template <class T>
struct DecodeProblem {
  static constexpr int G = Gru::kGates, S = Gru::kSlots, V = Gru::kRecurrent + Gru::kConstants;
  std::int64_t batch, channels, d_in;
  DeviceBuffer<T> weight_t, bias, values, state, x, out;
  DecodeProblem(std::int64_t b, std::int64_t d, std::int64_t k)
      : batch(b), channels(d), d_in(k), weight_t(static_cast<std::size_t>(k * G * d)),
        bias(static_cast<std::size_t>(G * d)), values(static_cast<std::size_t>(V * d)),
        state(static_cast<std::size_t>(b * S * d)), x(static_cast<std::size_t>(b * k)),
        out(static_cast<std::size_t>(b * S * d)) {}
  DecodeArgs<T> args() const {
    return {.weight_t = weight_t.get(), .bias = bias.get(), .values = values.get(), .state = state.get(),
            .x = x.get(), .out = out.get(), .batch = batch, .channels = channels, .d_in = d_in,
            .affine_inputs = d_in};
  }
};

template <class T>
std::vector<T> draws(SplitMix64& rng, std::size_t n, double lo, double hi) {
  std::vector<T> v(n);
  for (T& e : v) e = static_cast<T>(rng.uniform(lo, hi));
  return v;
}

// Runs `launch` on p into p.out and expects the result bit for bit `want` (and finite).
template <class T, class Launch>
void expect_same_bits(DecodeProblem<T>& p, const std::vector<T>& want, const std::string& shape, Launch launch) {
  SCOPED_TRACE(shape);
  PARARNN_CUDA_OK(cudaMemset(p.out.get(), 0xff, p.out.bytes()));  // poison: NaN until written
  PARARNN_CUDA_OK(launch(p.args()));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<T> got;
  PARARNN_CUDA_OK(p.out.download(got));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(T)))
      << "a row's sums differ from launch_decode_step's";
}

template <class T>
void every_shape_equals_the_production_step(std::uint64_t seed) {
  // 70 channels: a partial channel block; 300 inputs: three 128-column chunks, two of 256.
  const std::int64_t D = 70, K = 300;
  for (const std::int64_t B : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, kDecodeFewBatch,
                               kDecodeFewBatch + 1, kDecodeSmallBatch, kDecodeSmallBatch + 1}) {
    SCOPED_TRACE("B " + std::to_string(B));
    DecodeProblem<T> p(B, D, K);
    for (cudaError_t e : {p.weight_t.status(), p.bias.status(), p.values.status(), p.state.status(), p.x.status(),
                          p.out.status()})
      PARARNN_CUDA_OK(e);
    SplitMix64 rng(seed + static_cast<std::uint64_t>(B));
    PARARNN_CUDA_OK(p.weight_t.upload(draws<T>(rng, p.weight_t.size(), -0.1, 0.1)));
    PARARNN_CUDA_OK(p.bias.upload(draws<T>(rng, p.bias.size(), -0.5, 0.5)));
    PARARNN_CUDA_OK(p.values.upload(draws<T>(rng, p.values.size(), -0.9, 0.9)));
    PARARNN_CUDA_OK(p.state.upload(draws<T>(rng, p.state.size(), -1.0, 1.0)));
    PARARNN_CUDA_OK(p.x.upload(draws<T>(rng, p.x.size(), -1.0, 1.0)));
    PARARNN_CUDA_OK((launch_decode_step<Gru, T>(p.args(), cudaStream_t{})));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<T> want;
    PARARNN_CUDA_OK(p.out.download(want));
    for (const T v : want) ASSERT_TRUE(std::isfinite(static_cast<double>(v)));

    const auto block = [](auto shape) {
      using Shape = decltype(shape);
      return [](const DecodeArgs<T>& a) { return detail::run_decode_step<Gru, T, Shape>(a, cudaStream_t{}); };
    };
    expect_same_bits(p, want, "2 x 16 k-major", block(detail::DecodeShape<2, 16, true>{}));
    expect_same_bits(p, want, "2 x 16 row-major", block(detail::DecodeShape<2, 16, false>{}));
    expect_same_bits(p, want, "4 x 16 k-major", block(detail::DecodeShape<4, 16, true>{}));
    expect_same_bits(p, want, "8 x 16 k-major", block(detail::DecodeShape<8, 16, true>{}));
    expect_same_bits(p, want, "4 x 16 k-major, chunk 256", block(detail::DecodeShape<4, 16, true, 256>{}));
    expect_same_bits(p, want, "8 x 16 k-major, chunk 256", block(detail::DecodeShape<8, 16, true, 256>{}));
    if constexpr (sizeof(T) == 4) {  // 16 × 16's partial sums in double would not fit static shared memory
      expect_same_bits(p, want, "16 x 16 k-major", block(detail::DecodeShape<16, 16, true>{}));
      expect_same_bits(p, want, "16 x 16 k-major, chunk 256", block(detail::DecodeShape<16, 16, true, 256>{}));
    }
    bool cluster = false;
    PARARNN_CUDA_OK((detail::decode_cluster_available<Gru, T, detail::DecodeClusterShape<1, 16, 16>>(cluster)));
    if (cluster) {
      expect_same_bits(p, want, "cluster 1 x 16 over 16 ranks", [](const DecodeArgs<T>& a) {
        return detail::run_decode_cluster<Gru, T, detail::DecodeClusterShape<1, 16, 16>>(a, cudaStream_t{});
      });
      expect_same_bits(p, want, "cluster 4 x 16 over 4 ranks", [](const DecodeArgs<T>& a) {
        return detail::run_decode_cluster<Gru, T, detail::DecodeClusterShape<4, 16, 4>>(a, cudaStream_t{});
      });
    }
  }
}

TEST(DecodeShapes, EverySixteenSliceShapeEqualsTheProductionStepF32) {
  every_shape_equals_the_production_step<float>(test_seed(20261206));
}

TEST(DecodeShapes, EverySixteenSliceShapeEqualsTheProductionStepF64) {
  every_shape_equals_the_production_step<double>(test_seed(20261207));
}

}  // namespace
}  // namespace pararnn::kernels::test
