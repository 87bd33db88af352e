// `pararnn env`: one line describing this build and machine (also the report context block).
#include "env_line.hpp"

#include <fmt/format.h>

#include "pararnn/build_info.hpp"

#if defined(PARARNN_WITH_CUDA_RUNTIME)
#include <cuda_runtime_api.h>
#endif

namespace pararnn::tools {

std::string env_line() {
  std::string cuda = "cuda n/a (built without CUDA)";
  std::string gpu = "cpu";
#if defined(PARARNN_WITH_CUDA_RUNTIME)
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  cuda = fmt::format("cuda runtime {}.{} driver {}", runtime / 1000, (runtime % 1000) / 10,
                     driver ? fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10) : "none");
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
      gpu = fmt::format("{} (sm_{}{})", prop.name, prop.major, prop.minor);
  } else {
    cudaGetLastError();
  }
#endif
  return fmt::format("pararnn {} (git {}) | {} | {} | {}", PARARNN_VERSION, PARARNN_GIT_SHA,
                     PARARNN_CXX_COMPILER, cuda, gpu);
}

}  // namespace pararnn::tools
