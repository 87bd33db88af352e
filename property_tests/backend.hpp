// The backend a property executable puts under test. The same sources build
// property_tests_host (PARARNN_TEST_BACKEND=cpu) and property_tests_cuda
// (PARARNN_TEST_BACKEND=cuda, PARARNN_TEST_ON_CUDA=1), so every backend meets the same claims;
// claims that do not involve a backend (the oracle, the comparison) are compiled into the host
// executable only. Example:
//   NewtonConfig config{.scan_backend = testing::kTestBackend};
#pragma once

#include <string>
#include <vector>

#include "pararnn/cells/cell.hpp"
#include "pararnn/solver/newton_config.hpp"

#if PARARNN_TEST_ON_CUDA
#include "pararnn/kernels/newton_cells.hpp"
#endif

#ifndef PARARNN_TEST_BACKEND
#define PARARNN_TEST_BACKEND cpu
#endif
#ifndef PARARNN_TEST_ON_CUDA
#define PARARNN_TEST_ON_CUDA 0
#endif
// A claim that involves no backend (the oracle, construction rules, case files): a gtest TEST in
// the host executable only. In a CUDA executable the body is still compiled (so it stays
// type-checked) but never registered, so `ctest -L cuda` lists backend claims only, instead of
// runtime skips.
#if PARARNN_TEST_ON_CUDA
#define PARARNN_HOST_ONLY_TEST(suite, name) [[maybe_unused]] static void suite##_##name##_host_only_claim()
#else
#define PARARNN_HOST_ONLY_TEST(suite, name) TEST(suite, name)
#endif
#define PARARNN_TEST_STRINGIFY_IMPL(x) #x
#define PARARNN_TEST_STRINGIFY(x) PARARNN_TEST_STRINGIFY_IMPL(x)

namespace pararnn::testing {

inline constexpr std::string_view kTestBackendName = PARARNN_TEST_STRINGIFY(PARARNN_TEST_BACKEND);
inline const ScanBackend kTestBackend = parse_scan_backend(kTestBackendName);

// Storage dtypes whose Newton solve the backend under test runs (all four on both backends:
// the CUDA backend keeps f16/bf16 trajectories in f32, as the CPU backend does).
inline const std::vector<DType> kNewtonDtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};

// The cells (labels "name" or "cfc:diag_h") of `wanted` that the backend under test runs: all
// on the host; on cuda those with Newton kernels (kernels::kHasNewtonKernels), the others being
// refused there with UnsupportedPath.
inline std::vector<std::string> backend_cells(const std::vector<std::string>& wanted) {
  if (!PARARNN_TEST_ON_CUDA) return wanted;
  std::vector<std::string> out;
#if PARARNN_TEST_ON_CUDA
  for (const std::string& label : wanted) {
    const auto colon = label.find(':');
    const std::string gate_mix = colon == std::string::npos ? "input" : label.substr(colon + 1);
    const CellSpec& spec = cell_spec(label.substr(0, colon), "diag", "cell", gate_mix);
    if (spec.jacobian != JacobianClass::per_channel) continue;
    if (dispatch_cell(spec.kind, []<class CellMath>() { return kernels::kHasNewtonKernels<CellMath>; }))
      out.push_back(label);
  }
#endif
  return out;
}

}  // namespace pararnn::testing
