// main() of every GPU test executable (RESOURCE cuda in cmake/testing.cmake).
//
// Guarantees: nothing touches the CUDA runtime before main() runs, and listing the tests
// (--gtest_list_tests) never does, so listing works without a driver. Without a usable device the
// executable exits 77 (ctest's SKIP_RETURN_CODE) after printing "no CUDA device: skipped", or,
// when PARARNN_REQUIRE_CUDA=1, prints why and exits 1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSkipReturnCode = 77;

bool cuda_required() {
  const char* v = std::getenv("PARARNN_REQUIRE_CUDA");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (!GTEST_FLAG_GET(list_tests)) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      const char* why = e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0";
      if (cuda_required()) {
        std::fprintf(stderr, "PARARNN_REQUIRE_CUDA=1 but no CUDA device is usable: %s\n", why);
        return 1;
      }
      std::printf("no CUDA device: skipped (%s)\n", why);
      return kSkipReturnCode;
    }
  }
  return RUN_ALL_TESTS();
}
