// `pararnn env`: one line describing this build and machine (also the report context block).
#include "env_line.hpp"

#include <fmt/format.h>

#include "pararnn/build_info.hpp"

#if defined(PARARNN_WITH_CUDA_RUNTIME)
#include <cuda_runtime_api.h>
#endif

namespace pararnn::tools {
namespace {

struct CudaFacts {
  std::string line = "cuda n/a (built without CUDA)";
  std::string runtime = "none", driver = "none", gpu = "cpu";
  bool device = false;
};

CudaFacts cuda_facts() {
  CudaFacts f;
#if defined(PARARNN_WITH_CUDA_RUNTIME)
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  f.runtime = fmt::format("{}.{}", runtime / 1000, (runtime % 1000) / 10);
  f.driver = driver ? fmt::format("{}.{}", driver / 1000, (driver % 1000) / 10) : "none";
  f.line = fmt::format("cuda runtime {} driver {}", f.runtime, f.driver);
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      f.gpu = fmt::format("{} (sm_{}{})", prop.name, prop.major, prop.minor);
      f.device = true;
    }
  } else {
    cudaGetLastError();
  }
#endif
  return f;
}

}  // namespace

std::string env_line() {
  const CudaFacts f = cuda_facts();
  return fmt::format("pararnn {} (git {}) | {} | {} | {}", PARARNN_VERSION, PARARNN_GIT_SHA,
                     PARARNN_CXX_COMPILER, f.line, f.gpu);
}

reports::BuildContext build_context() {
  const CudaFacts f = cuda_facts();
  return {.pararnn_version = PARARNN_VERSION,
          .git_sha = PARARNN_GIT_SHA,
          .compiler = PARARNN_CXX_COMPILER,
          .cuda_runtime = f.runtime,
          .cuda_driver = f.driver,
          .gpu = f.gpu,
          .env_line = env_line()};
}

bool cuda_device_available() { return cuda_facts().device; }

}  // namespace pararnn::tools
