// Sums equal-length rows of a device array into f64 on the device, in a fixed order: how the CUDA
// backward reduces per-row (batch row, chunk) partial gradients without downloading them.
//
// Guarantees: out[i] = ((0.0 + rows[0·n + i]) + rows[1·n + i]) + … + rows[(count − 1)·n + i], each
// term widened to double exactly, added left to right (the order of the host loops this
// replaces, so the result is bit for bit theirs); count = 0 writes zeros. Never allocates, needs
// no workspace; returns cudaErrorInvalidValue for a negative count or n or a null pointer with
// elements to write, else the launch's error. Example:
//   RowSumArgs<float> a{.rows = d_partials, .out = d_sum, .count = 8, .n = 768 * 256};
//   cudaError_t e = launch_row_sum(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class T>
struct RowSumArgs {
  const T* rows = nullptr;  // [count][n]
  double* out = nullptr;    // [n]
  std::int64_t count = 0;
  std::int64_t n = 0;
};

// Instantiated for float and double.
template <class T>
cudaError_t launch_row_sum(const RowSumArgs<T>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
