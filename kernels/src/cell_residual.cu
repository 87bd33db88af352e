// launch_cell_residual (kernels/cell_residual.hpp): a grid-stride loop over (b, t, c) (t every
// time_stride-th step), c fastest
// so every load and store is coalesced along channels, with a per-block NaN-propagating max|F|
// and one final block reducing the partials.
#include <cuda_runtime.h>

#include <cstdint>

#include "device_util.cuh"
#include "nan_max_reduce.cuh"
#include "pararnn/kernels/newton_cells.hpp"
#include "pararnn/kernels/cell_residual.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kResidualThreads = 256;

template <class CellMath, class StorageT>
__global__ void __launch_bounds__(kResidualThreads)
    cell_residual_kernel(CellResidualArgs<StorageT> a, ComputeOf<StorageT>* partials) {
  using ComputeT = ComputeOf<StorageT>;
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int R = CellMath::kRecurrent + CellMath::kConstants;  // clamped entries, then constants
  const int64_t D = a.channels;
  const int64_t rows = (a.time + a.time_stride - 1) / a.time_stride;  // evaluated steps per batch row
  const int64_t n = a.skip != nullptr && *a.skip != 0.0 ? 0 : a.batch * rows * D;
  ComputeT local = ComputeT(0);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t br = i / D;  // b·rows + row
    const int64_t c = i - br * D;
    const int64_t b = br / rows;
    const int64_t t = (br - b * rows) * a.time_stride;
    const int64_t bt = b * a.time + t;
    ComputeT rec[R], wx[G], h_prev[S], h_new[S], jac[S * S];
#pragma unroll
    for (int k = 0; k < R; ++k) rec[k] = a.recurrent[k * D + c];
#pragma unroll
    for (int g = 0; g < G; ++g) wx[g] = a.wx[bt * G * D + g * D + c];
    if (t == 0 || (a.head != nullptr && a.head[t] != 0)) {
      const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
      for (int s = 0; s < S; ++s)
        h_prev[s] = a.h0 != nullptr ? a.h0[(row * S + s) * D + c] : ComputeT(0);
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = static_cast<ComputeT>(a.H[((bt - 1) * S + s) * D + c]);
    }
    // Two calls rather than a conditional pointer, so that jac stays in registers.
    if (a.jac != nullptr) {
      CellMath::step(rec, wx, h_prev, h_new, jac);
    } else {
      CellMath::step(rec, wx, h_prev, h_new, static_cast<ComputeT*>(nullptr));
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const ComputeT f = h_new[s] - static_cast<ComputeT>(a.H[(bt * S + s) * D + c]);
      if (a.residual != nullptr) a.residual[(bt * S + s) * D + c] = f;
      local = detail::nan_max(local, fabs(f));
    }
    if (a.jac != nullptr) {
#pragma unroll
      for (int q = 0; q < S * S; ++q) a.jac[(bt * S * S + q) * D + c] = jac[q];
    }
  }
  if (partials != nullptr) {
    const ComputeT m = detail::block_nan_max<kResidualThreads>(local);
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
  }
}

}  // namespace

template <class StorageT>
std::size_t cell_residual_workspace_bytes() {
  return detail::max_abs_workspace_bytes<ComputeOf<StorageT>>();
}

template <class CellMath, class StorageT>
cudaError_t launch_cell_residual(const CellResidualArgs<StorageT>& a, void* workspace,
                                 std::size_t workspace_bytes, cudaStream_t stream) {
  using ComputeT = ComputeOf<StorageT>;
  if (a.batch < 0 || a.time < 0 || a.channels < 0 || a.time_stride < 1) return cudaErrorInvalidValue;
  const int64_t n = a.batch * ((a.time + a.time_stride - 1) / a.time_stride) * a.channels;
  if (n != 0 && (a.wx == nullptr || a.recurrent == nullptr || a.H == nullptr ||
                 (a.residual == nullptr && a.max_abs_residual == nullptr)))
    return cudaErrorInvalidValue;
  return detail::launch_with_max_abs<kResidualThreads>(
      n, a.max_abs_residual, workspace, workspace_bytes, stream, [&](int blocks, ComputeT* partials) {
        cell_residual_kernel<CellMath, StorageT><<<blocks, kResidualThreads, 0, stream>>>(a, partials);
      });
}

template std::size_t cell_residual_workspace_bytes<float>();
template std::size_t cell_residual_workspace_bytes<double>();

#define PARARNN_INSTANTIATE_CELL_RESIDUAL(CELL, STORAGE)                                     \
  template cudaError_t launch_cell_residual<CELL, STORAGE>(const CellResidualArgs<STORAGE>&, \
                                                           void*, std::size_t, cudaStream_t);
#define PARARNN_INSTANTIATE_CELL_RESIDUAL_CELL(kind, Math, label, min_chains) \
  PARARNN_INSTANTIATE_CELL_RESIDUAL(cells::Math, float) PARARNN_INSTANTIATE_CELL_RESIDUAL(cells::Math, double)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_CELL_RESIDUAL_CELL)
#undef PARARNN_INSTANTIATE_CELL_RESIDUAL_CELL
#undef PARARNN_INSTANTIATE_CELL_RESIDUAL

}  // namespace pararnn::kernels
