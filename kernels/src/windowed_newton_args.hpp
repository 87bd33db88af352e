// The arguments of the fused windowed Newton candidate (windowed_newton.cuh), host-compilable so
// that host code (the kernel tests, the benchmark) can fill them. Layouts as windowed_newton.cuh.
#pragma once

#include <cstdint>

namespace pararnn::kernels::detail {

template <class T>
struct WindowedNewtonArgs {
  const T* wx = nullptr;         // [b][t][g·D + c]
  const T* recurrent = nullptr;  // [k][c]: the clamped recurrent values, then the constants
  const T* h0 = nullptr;         // optional [b][s][c]
  T* H = nullptr;                // [b][t][s][c], written
  std::int64_t batch = 0, time = 0, channels = 0, window = 0;
  int iterations = 0;  // K
  T omega = T(1);
};

}  // namespace pararnn::kernels::detail
