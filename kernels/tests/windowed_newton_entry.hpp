// Host entry points to the fused windowed Newton candidate (kernels/src/windowed_newton.cuh) for
// the kernel tests, instantiated in windowed_newton_entry.cu for every cell of
// PARARNN_FOR_EACH_WINDOWED_TEST_CELL in f32 and f64 at three block shapes (channels C × warps W ×
// steps L):
//   0: 8 × 4 × 4    (4 time lanes per warp; windows of up to 64 steps)
//   1: 32 × 32 × 8  (1 time lane per warp, 1024 threads; up to 256 steps)
//   2: 4 × 32 × 8   (8 time lanes per warp, 1024 threads; up to 2048 steps)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pararnn/kernels/windowed_newton.hpp"

// The per-channel cells the fused windowed launch runs (cells/cell_list.hpp's list without sLSTM,
// whose 4 slots and Picard guess it does not take), as X(Math); windowed_newton_entry.cu checks
// at compile time that it holds every listed cell of at most two slots.
#define PARARNN_FOR_EACH_WINDOWED_TEST_CELL(X) \
  X(GruDiagMath) X(LstmMath) X(NlruMath) X(CfcMath) X(CfcDiagHMath) X(TitansMath)

namespace pararnn::kernels::test {

inline constexpr int kWindowedShapes = 3;
// run_windowed_newton_at's shape index for the production launcher (launch_windowed_newton,
// which picks its block shape by the window).
inline constexpr int kProductionLauncher = 3;

// cudaErrorNotSupported where the shape's shared memory cannot hold the cell in T (LSTM's
// 2 × 2 elements in f64 at shape 1).
template <class CellMath, class T>
cudaError_t run_windowed_newton_at(int shape, const WindowedNewtonArgs<T>& a);

// The largest window of shape `shape` (0, 1 or 2).
std::int64_t windowed_newton_window(int shape);

}  // namespace pararnn::kernels::test
