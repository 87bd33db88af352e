// Without NCCL in the build (no CUDA backend, or nccl.h / libnccl not found): the NCCL
// communicator is refused by name.
#include "pararnn/core/errors.hpp"
#include "pararnn/solver/nccl_communicator.hpp"

namespace pararnn {

namespace {
constexpr const char* kWhy =
    "this build has no NCCL communicator (it needs the CUDA backend and NCCL: nccl.h and libnccl at configure "
    "time); use the in-process communicator (pararnn seqpar --ranks P)";
}

bool nccl_available(std::string* why_not) {
  if (why_not) *why_not = kWhy;
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclLaunch&) { throw UnsupportedPath(kWhy); }

}  // namespace pararnn
