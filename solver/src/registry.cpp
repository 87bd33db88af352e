// The one routing of a solve to its FamilyBackend row (backends.hpp), the one rule of a call a row
// cannot serve (FamilyBackend::require), and the CUDA backend's presence: a build without CUDA has
// no CUDA rows, and says so by name.
#include <fmt/format.h>

#include <string>

#include "backends.hpp"

namespace pararnn::detail {

namespace {

constexpr Capability kEveryCapability[] = {Capability::newton,         Capability::sequential,
                                           Capability::training,       Capability::max_residual,
                                           Capability::fused_windows,  Capability::iterate_growth,
                                           Capability::seq_parallel};

// A row's declared capabilities are its filled slots (training: forward and backward), so that
// `require` and `serves` are the whole truth about it; a row that disagrees is a bug of its file.
void check_row(const FamilyBackend& row) {
  const auto agree = [&](Capability c, bool filled) {
    if (row.serves.has(c) != filled)
      throw Error(fmt::format("internal: the {} row {} {} but {} its entry point", row.name,
                              row.serves.has(c) ? "declares" : "does not declare", capability_name(c),
                              filled ? "fills" : "lacks"));
  };
  agree(Capability::newton, row.newton != nullptr);
  agree(Capability::sequential, row.sequential != nullptr);
  if ((row.forward == nullptr) != (row.backward == nullptr))
    throw Error(fmt::format("internal: the {} row fills one of forward and backward only", row.name));
  agree(Capability::training, row.forward != nullptr);
  agree(Capability::max_residual, row.max_residual != nullptr);
  agree(Capability::fused_windows, row.fused_windows != nullptr);
  agree(Capability::iterate_growth, row.iterate_growth != nullptr);
  agree(Capability::seq_parallel, row.seq_parallel != nullptr);
}

}  // namespace

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
  check_row(*row);
  return *row;
}

const char* capability_name(Capability capability) {
  switch (capability) {
    case Capability::newton: return "newton";
    case Capability::sequential: return "sequential";
    case Capability::training: return "training";
    case Capability::max_residual: return "max_residual";
    case Capability::fused_windows: return "fused_windows";
    case Capability::iterate_growth: return "iterate_growth";
    case Capability::seq_parallel: return "seq_parallel";
  }
  return "?";
}

void FamilyBackend::require(Capability capability, const char* who) const {
  if (serves.has(capability)) return;
  std::string served;
  for (const Capability c : kEveryCapability)
    if (serves.has(c)) served += fmt::format("{}{}", served.empty() ? "" : ", ", capability_name(c));
  throw UnsupportedPath(fmt::format("{}: the {} row does not serve {} (it serves: {})", who, name,
                                    capability_name(capability), served.empty() ? "nothing" : served));
}

#ifndef PARARNN_SOLVER_CUDA
bool cuda_backend_available(std::string* why_not) {
  if (why_not) *why_not = "this build of pararnn has no CUDA backend (configured without nvcc)";
  return false;
}
#endif

Tensor deliver(Tensor value, const TensorView* out, const char* argument, std::optional<void*> stream) {
  if (out == nullptr) return value;
  if (out->device() == Device::cuda) {
#ifdef PARARNN_SOLVER_CUDA
    cuda_write_view(*out, value, argument, stream);
#else
    (void)stream;
    throw UnsupportedPath(fmt::format("{}: is a CUDA tensor and this build of pararnn has no CUDA backend",
                                      argument));
#endif
  } else {
    copy_into(*out, value, argument);
  }
  return Tensor();
}

}  // namespace pararnn::detail
