// Sums equal-length rows of a device array into f64 on the device, in a fixed order: how the CUDA
// backward reduces per-row (batch row, chunk) partial gradients without downloading them.
//
// Guarantees: with q = ceil(count / kRowSumRanges) and range r the rows r·q … min((r + 1)·q,
// count) − 1, out[i] = ((0.0 + p_0) + p_1) + … + p_{kRowSumRanges − 1}, where p_r = ((0.0 +
// rows[r·q·n + i]) + …) adds its range's rows in row order, each term widened to double exactly.
// The order depends on count only (never on the device or the launch), so the sums are the same
// bits on every run; for count ≤ kRowSumRanges it is the plain row order ((0.0 + rows[0·n + i]) +
// rows[1·n + i]) + …; count = 0 writes zeros. Never allocates, needs no workspace; returns
// cudaErrorInvalidValue for a negative count or n or a null pointer with elements to write, else
// the launch's error. Example:
//   RowSumArgs<float> a{.rows = d_partials, .out = d_sum, .count = 8, .n = 768 * 256};
//   cudaError_t e = launch_row_sum(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

inline constexpr int kRowSumRanges = 32;   // row ranges summed apart, then in order
inline constexpr int kRowSumColumns = 32;  // columns per block

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
