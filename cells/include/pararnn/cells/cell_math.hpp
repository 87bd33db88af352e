// Scalar building blocks shared by every production cell, usable on the host and on the device.
//
// Guarantees: PARARNN_HD marks functions compiled for both sides under nvcc and plain inline
// functions under a host compiler; `sigmoid`, `tanh_of`, `exp_of`, `log_of` dispatch to the
// float or double library function of the side they run on (the device's f32 sigmoid divides
// without a branch: reciprocal_at_least_one); `logaddexp` is exact at −∞;
// `clamp_recurrent` is the App. C.1 clamp (cap <= 0 or negative means "no clamp" is expressed by
// the caller passing +infinity).
#pragma once

#include <cmath>
#include <limits>

#if defined(__CUDACC__)
#define PARARNN_HD __host__ __device__ __forceinline__
#else
#define PARARNN_HD inline
#endif

namespace pararnn::cells {

template <class ComputeT>
PARARNN_HD ComputeT exp_of(ComputeT v) {
  return ::exp(v);
}
template <>
PARARNN_HD float exp_of<float>(float v) {
  return ::expf(v);
}
template <class ComputeT>
PARARNN_HD ComputeT tanh_of(ComputeT v) {
  return ::tanh(v);
}
template <>
PARARNN_HD float tanh_of<float>(float v) {
  return ::tanhf(v);
}
template <class ComputeT>
PARARNN_HD ComputeT log_of(ComputeT v) {
  return ::log(v);
}
template <>
PARARNN_HD float log_of<float>(float v) {
  return ::logf(v);
}

// log(e^a + e^b), exact at a = −∞ or b = −∞ (NaN propagates).
template <class ComputeT>
PARARNN_HD ComputeT logaddexp(ComputeT a, ComputeT b) {
  const ComputeT hi = a > b ? a : b, lo = a > b ? b : a;
  if (hi == -std::numeric_limits<ComputeT>::infinity()) return hi;
  return hi + ::log1p(exp_of(lo - hi));
}

// 1/x for x >= 1 (or NaN) on the device without the IEEE division's out-of-range branch: the
// approximate reciprocal and one Newton step, the sequence nvcc emits for 1.0f / x when x lies in
// [2^-126, 2^126), where it is correctly rounded (bitwise 1.0f / x; checked on every such x by
// DeviceMath.SigmoidReciprocalIsTheIeeeDivision). Above, where 1/x is a subnormal (sigmoid of
// v < -87.3), it returns 0, as a flush-to-zero f32 division does (docs/choices.md). The
// division's branch kept a step's independent gates from being scheduled together.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float reciprocal_at_least_one(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  r = fmaf(r, -fmaf(x, r, -1.0f), r);
  return x >= 0x1p126f ? 0.0f : r;  // NaN fails the test and stays NaN
}
#endif

template <class ComputeT>
PARARNN_HD ComputeT sigmoid(ComputeT v) {
  return ComputeT(1) / (ComputeT(1) + exp_of(-v));
}
template <>
PARARNN_HD float sigmoid<float>(float v) {
#if defined(__CUDA_ARCH__)
  return reciprocal_at_least_one(1.0f + ::expf(-v));
#else
  return 1.0f / (1.0f + ::expf(-v));
#endif
}
// sLSTM's stabiliser max(left, right) with the contract's tie convention: the value is the
// larger one; at left == right its derivative is 1/2 to each side. For a plain scalar only the
// value exists; a number type that carries derivatives (the CPU backward's Dual) overloads it
// (found by argument-dependent lookup) so that its tangent follows the convention too.
template <class ComputeT>
PARARNN_HD ComputeT tie_max(ComputeT left, ComputeT right) {
  return left > right ? left : right;
}
template <class ComputeT>
PARARNN_HD ComputeT clamp_recurrent(ComputeT v, ComputeT cap) {
  return v > cap ? cap : (v < -cap ? -cap : v);
}

}  // namespace pararnn::cells

namespace pararnn::cells {

// PyTorch's softplus (beta 1, threshold 20): x above 20 passes through unchanged.
template <class ComputeT>
PARARNN_HD ComputeT softplus(ComputeT v) {
  return v > ComputeT(20) ? v : ::log1p(exp_of(v));
}
template <>
PARARNN_HD float softplus<float>(float v) {
  return v > 20.0f ? v : ::log1pf(exp_of(v));
}
// Its derivative, σ(v) (1 above the threshold, where softplus is the identity).
template <class ComputeT>
PARARNN_HD ComputeT softplus_derivative(ComputeT v) {
  return v > ComputeT(20) ? ComputeT(1) : sigmoid(v);
}

}  // namespace pararnn::cells
