// What the host-side CUDA benchmarks share (pararnn_bench_newton, pararnn_bench_targets): a
// checked CUDA call that exits with the benchmark's name, event timing on the legacy default
// stream (median of `runs` after `warmup`), integer flags, device downloads, seeded uniform
// inputs and the run's context block (GPU, runtime and driver, argv, date, seed).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/runtime.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn::bench {

inline const char* program_name = "pararnn_bench";

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program_name, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Times `body` (device work on the legacy default stream) with events: median over `runs`.
template <class Body>
double median_ms(int warmup, int runs, Body&& body) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < warmup + runs; ++i) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= warmup) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

inline std::int64_t arg_value(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoll(argv[i + 1], nullptr, 10);
  return fallback;
}

inline bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

template <class T = float>
std::vector<T> download(const detail::cuda::DeviceBuffer& buffer) {
  std::vector<T> host(buffer.bytes() / sizeof(T));
  check(cudaMemcpy(host.data(), buffer.get(), buffer.bytes(), cudaMemcpyDeviceToHost), "download");
  return host;
}

// x [B, T, d_in] in `dtype`, uniform in [-1, 1) (SplitMix64 from `seed`).
inline Tensor uniform_input(std::int64_t B, std::int64_t T, std::int64_t d_in, std::uint64_t seed,
                            DType dtype = DType::f32) {
  Tensor x(DType::f32, {B, T, d_in});
  std::uint64_t state = seed;
  float* p = x.data_as<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    p[i] = static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;
  }
  return dtype == DType::f32 ? x : Tensor::converted(x, dtype);
}

// The run's context: GPU, SM count, CUDA runtime and driver, argv, date (UTC), seed.
inline nlohmann::ordered_json run_context(int argc, char** argv, std::uint64_t seed) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int runtime_version = 0, driver_version = 0;
  check(cudaRuntimeGetVersion(&runtime_version), "cudaRuntimeGetVersion");
  check(cudaDriverGetVersion(&driver_version), "cudaDriverGetVersion");
  std::string args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) args += ' ';
    args += argv[i];
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"gpu", prop.name}, {"sm_count", prop.multiProcessorCount}, {"cuda_runtime", runtime_version},
          {"cuda_driver", driver_version}, {"argv", args}, {"date", date}, {"seed", seed}};
}

}  // namespace pararnn::bench
