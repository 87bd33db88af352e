// The device's f32 sigmoid (cells/cell_math.hpp) against the IEEE formula it stands for, on every
// f32 input: 1 / (1 + expf(-v)) with a correctly rounded reciprocal (__frcp_rn), except where
// that reciprocal is a subnormal (v < -87.3), which the device's sigmoid flushes to +0. Bitwise,
// NaN for NaN. Exhaustive over the 2^32 bit patterns (a few milliseconds on the GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "pararnn/cells/cell_math.hpp"
#include "test_support.hpp"

namespace pararnn::kernels::test {
namespace {

struct Mismatches {
  unsigned long long count;
  unsigned int first_bits;  // the input of one mismatch (the largest bit pattern seen)
  unsigned int flushed;     // inputs whose reference is a nonzero subnormal, flushed to 0
};

__global__ void sigmoid_vs_ieee(unsigned long long first, unsigned long long count, Mismatches* out) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  unsigned int local_flushed = 0;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const unsigned int bits = static_cast<unsigned int>(first + i);
    const float v = __uint_as_float(bits);
    const float got = cells::sigmoid(v);
    float want = __frcp_rn(1.0f + expf(-v));
    if (want != 0.0f && fabsf(want) < 0x1p-126f) {
      want = 0.0f;
      ++local_flushed;
    }
    const bool same = isnan(want) ? isnan(got) : __float_as_uint(got) == __float_as_uint(want);
    if (!same) {
      ++local;
      atomicMax(&out->first_bits, bits);
    }
  }
  if (local != 0) atomicAdd(&out->count, local);
  if (local_flushed != 0) atomicAdd(&out->flushed, local_flushed);
}

TEST(DeviceMath, SigmoidReciprocalIsTheIeeeDivision) {
  DeviceBuffer<Mismatches> d_out(1);
  PARARNN_CUDA_OK(d_out.status());
  PARARNN_CUDA_OK(cudaMemset(d_out.get(), 0, sizeof(Mismatches)));
  constexpr unsigned long long kAll = 1ull << 32;
  sigmoid_vs_ieee<<<132 * 16, 256>>>(0, kAll, d_out.get());
  PARARNN_CUDA_OK(cudaGetLastError());
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  Mismatches m{};
  PARARNN_CUDA_OK(cudaMemcpy(&m, d_out.get(), sizeof m, cudaMemcpyDeviceToHost));
  EXPECT_EQ(m.count, 0u) << "the device sigmoid differs from 1/(1+expf(-v)) on " << m.count
                         << " inputs, e.g. bits 0x" << std::hex << m.first_bits;
  // The flushed range was reached (v in (-88.7, -87.3]), so the comparison above covered it: a
  // reciprocal that returned the subnormal would have failed there (and one that returned NaN
  // for x = inf, v < -88.7, fails where the reference is 0).
  EXPECT_GT(m.flushed, 0u);
}

}  // namespace
}  // namespace pararnn::kernels::test
