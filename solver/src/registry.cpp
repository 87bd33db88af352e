// The one routing of a solve to its FamilyBackend row (backends.hpp), and the CUDA backend's
// presence: a build without CUDA has no CUDA rows, and says so by name.
#include <fmt/format.h>

#include "backends.hpp"

namespace pararnn::detail {

const FamilyBackend& family_backend(JacobianClass family, Backend backend) {
  static const FamilyBackend* const kCpu[] = {&kCpuPerChannel, &kCpuDense, &kCpuExactLinear, &kCpuMatrixState};
#ifdef PARARNN_SOLVER_CUDA
  static const FamilyBackend* const kCuda[] = {&kCudaPerChannel, &kCudaDense, &kCudaExactLinear,
                                               &kCudaMatrixState};
#else
  static const FamilyBackend* const kCuda[] = {nullptr, nullptr, nullptr, nullptr};
#endif
  static_assert(static_cast<int>(JacobianClass::per_channel) == 0 && static_cast<int>(JacobianClass::dense) == 1 &&
                static_cast<int>(JacobianClass::linear_gu) == 2 && static_cast<int>(JacobianClass::matrix_map) == 3);
  const FamilyBackend* row = (backend == Backend::cuda ? kCuda : kCpu)[static_cast<int>(family)];
  if (row == nullptr) {
    std::string why;
    (void)cuda_backend_available(&why);
    throw UnsupportedPath("scan_backend=cuda: " + why);
  }
  return *row;
}

#ifndef PARARNN_SOLVER_CUDA
bool cuda_backend_available(std::string* why_not) {
  if (why_not) *why_not = "this build of pararnn has no CUDA backend (configured without nvcc)";
  return false;
}
#endif

Tensor deliver(Tensor value, const TensorView* out, const char* argument) {
  if (out == nullptr) return value;
  if (out->device() == Device::cuda) {
#ifdef PARARNN_SOLVER_CUDA
    cuda_write_view(*out, value, argument);
#else
    throw UnsupportedPath(fmt::format("{}: is a CUDA tensor and this build of pararnn has no CUDA backend",
                                      argument));
#endif
  } else {
    copy_into(*out, value, argument);
  }
  return Tensor();
}

}  // namespace pararnn::detail
