// launch_newton_step (kernels/newton_step.hpp) at the production register shape: the
// source and its launch are newton_step.cuh's; max|F| by one atomic per warp on the value's bits
// (non-negative floats order as their bit patterns, and a NaN's bits rank above +inf, so NaN
// wins as detail::nan_max says).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "newton_step.cuh"
#include "pararnn/cells/cell_list.hpp"

namespace pararnn::kernels {
namespace detail {
namespace {

// Channels per lane and the register shape: the plain scan's (SinglePassLimits), measured on
// the H200 by pararnn_bench_shapes (docs/cuda.md has the table). One-slot cells in f32 (GRU-diag,
// NLRU, CfC, Titans): 4 channels per lane, 8 steps per thread, 16 warps, anchors every 2nd chunk:
// 1.29 ms per step at S1 against 1.37 ms for the previous step shape (2 lanes, 4 steps, 16 warps,
// 2 blocks per SM, anchors every 4th; 2026-12-02). One-slot cells in f64 take the same shape
// (2 channels per lane; tested, not timed); the 2- and 4-slot cells' shapes are not measured yet.
template <class CellMath, class T>
constexpr int kStepLanes = channel_vector_width<CellMath::kSlots, T>();
template <class CellMath, class T>
using StepShape = SinglePassLimits<CellMath::kSlots>;

}  // namespace
}  // namespace detail

template <class CellMath, class T>
std::size_t newton_step_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels) {
  if (batch <= 0 || time <= 0 || channels <= 0) return 0;
  using Shape = detail::StepShape<CellMath, T>;
  const std::size_t narrow = detail::newton_step_shape_bytes<CellMath, T, 1, Shape>(batch, time, channels);
  const std::size_t wide =
      detail::newton_step_shape_bytes<CellMath, T, detail::kStepLanes<CellMath, T>, Shape>(batch, time, channels);
  return narrow > wide ? narrow : wide;
}

template <class CellMath, class T>
cudaError_t launch_newton_step(const NewtonStepArgs<T>& a, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  if (a.wx == nullptr || a.recurrent == nullptr || a.H_out == nullptr || a.max_abs_residual == nullptr)
    return cudaErrorInvalidValue;
  if (a.from_guess ? a.H_in != nullptr : (a.H_in == nullptr || a.H_in == a.H_out)) return cudaErrorInvalidValue;
  if (cudaError_t e = cudaMemsetAsync(a.max_abs_residual, 0, sizeof(T), stream); e != cudaSuccess) return e;
  if (a.max_abs_result != nullptr) {
    if (cudaError_t e = cudaMemsetAsync(a.max_abs_result, 0, sizeof(T), stream); e != cudaSuccess) return e;
  }
  if (a.batch == 0 || a.time == 0 || a.channels == 0) return cudaSuccess;
  if (workspace == nullptr || !detail::aligned_to(workspace, 16)) return cudaErrorInvalidValue;
  using Shape = detail::StepShape<CellMath, T>;
  constexpr int kWide = detail::kStepLanes<CellMath, T>;
  if (kWide > 1 && a.channels % kWide == 0 && detail::newton_step_aligned(a, sizeof(T) * kWide))
    return detail::run_newton_step<CellMath, T, kWide, Shape>(a, workspace, workspace_bytes, stream);
  return detail::run_newton_step<CellMath, T, 1, Shape>(a, workspace, workspace_bytes, stream);
}

template <class CellMath, class T>
std::int64_t newton_step_chunk() {
  return detail::shape_chunk<detail::StepShape<CellMath, T>>();
}

#define PARARNN_INSTANTIATE_NEWTON_STEP(CELL, T)                                                            \
  template std::int64_t newton_step_chunk<CELL, T>();                                                       \
  template std::size_t newton_step_workspace_bytes<CELL, T>(std::int64_t, std::int64_t, std::int64_t); \
  template cudaError_t launch_newton_step<CELL, T>(const NewtonStepArgs<T>&, void*, std::size_t, cudaStream_t);
#define PARARNN_INSTANTIATE_NEWTON_STEP_CELL(kind, Math, label, min_chains) \
  PARARNN_INSTANTIATE_NEWTON_STEP(cells::Math, float) PARARNN_INSTANTIATE_NEWTON_STEP(cells::Math, double)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_NEWTON_STEP_CELL)
#undef PARARNN_INSTANTIATE_NEWTON_STEP_CELL
#undef PARARNN_INSTANTIATE_NEWTON_STEP

}  // namespace pararnn::kernels
