// The CUDA backend's entry points in a build without CUDA: unavailable, with the reason.
#include "backends.hpp"

namespace pararnn::detail {

bool cuda_backend_available(std::string* why_not) {
  if (why_not) *why_not = "this build of pararnn has no CUDA backend (configured without nvcc)";
  return false;
}

Tensor cuda_newton_apply(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                         Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_sequential_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

}  // namespace pararnn::detail
