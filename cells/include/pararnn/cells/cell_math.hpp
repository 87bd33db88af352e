// Scalar building blocks shared by every production cell, usable on the host and on the device.
//
// Guarantees: PARARNN_HD marks functions compiled for both sides under nvcc and plain inline
// functions under a host compiler; `sigmoid`, `tanh_of`, `exp_of` dispatch to the float or double
// library function of the side they run on; `clamp_recurrent` is the App. C.1 clamp (cap <= 0 or
// negative means "no clamp" is expressed by the caller passing +infinity).
#pragma once

#include <cmath>

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
PARARNN_HD ComputeT sigmoid(ComputeT v) {
  return ComputeT(1) / (ComputeT(1) + exp_of(-v));
}
template <class ComputeT>
PARARNN_HD ComputeT clamp_recurrent(ComputeT v, ComputeT cap) {
  return v > cap ? cap : (v < -cap ? -cap : v);
}

}  // namespace pararnn::cells
