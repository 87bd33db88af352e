// What every CUDA benchmark shares (pararnn_bench_scan, _shapes, _newton, _targets; the CUDA
// runtime API only): a checked CUDA call that exits with the benchmark's name, event timing
// (median of `runs` after `warmup`, an untimed `prepare` before each), integer flags, device
// downloads and the run's context block (GPU, runtime and driver, argv, date, seed). Seeded
// inputs as pararnn tensors are in bench_inputs.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pararnn::bench {

inline const char* program_name = "pararnn_bench";

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", program_name, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// max |a − b| over two trajectories, a NaN (or a length mismatch) as infinity.
inline double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double err = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    err = std::isnan(d) ? INFINITY : std::max(err, d);
  }
  return err;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Times `body` (work it queues on `stream`) with events: the median over `runs` after `warmup`
// runs; `prepare` runs untimed before each.
template <class Prepare, class Body>
double median_ms_on(cudaStream_t stream, int warmup, int runs, Prepare&& prepare, Body&& body) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < warmup + runs; ++i) {
    prepare();
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= warmup) times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

// The same on the legacy default stream without a prepare step.
template <class Body>
double median_ms(int warmup, int runs, Body&& body) {
  return median_ms_on(nullptr, warmup, runs, [] {}, std::forward<Body>(body));
}

// Microseconds per step of `step` (one step queued on `stream`, its errors checked by the
// callable) captured `steps` times in one CUDA graph and replayed: the median over `runs`
// replays after `warmup`, divided by `steps`.
template <class Step>
double graph_us_per_step(cudaStream_t stream, int steps, int warmup, int runs, Step&& step) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (int i = 0; i < steps; ++i) step();
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  const double ms = median_ms_on(stream, warmup, runs, [] {}, [&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); });
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  return 1000.0 * ms / steps;
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

// A device buffer's contents (anything with get() and bytes()) as host values of T.
template <class T = float, class Buffer>
std::vector<T> download(const Buffer& buffer) {
  std::vector<T> host(buffer.bytes() / sizeof(T));
  check(cudaMemcpy(host.data(), buffer.get(), host.size() * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return host;
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
