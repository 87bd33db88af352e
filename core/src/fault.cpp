// The run-time switch of the fault points (fault.hpp); compiled only with PARARNN_FAULTS=ON.
#include "pararnn/core/fault.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pararnn::fault {

bool active(const char* name) {
  static const char* const selected = std::getenv("PARARNN_FAULT");
  if (selected == nullptr || std::strcmp(selected, name) != 0) return false;
  static std::atomic<bool> announced{false};
  if (!announced.exchange(true)) std::fprintf(stderr, "pararnn fault '%s' injected\n", name);
  return true;
}

}  // namespace pararnn::fault
