// Host entry points to the fused windowed Newton candidate (kernels/src/windowed_newton.cuh) for
// the kernel tests, instantiated in windowed_newton_entry.cu at a small shape (8 channels per
// block, 4 warps, 4 steps per thread: windows of up to 64 steps) for GRU-diag and LSTM in f32 and
// f64.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "windowed_newton_args.hpp"

namespace pararnn::kernels::test {

template <class CellMath, class T>
cudaError_t run_windowed_newton_small(const detail::WindowedNewtonArgs<T>& a);

// The largest window of that shape.
std::int64_t windowed_newton_small_window();

}  // namespace pararnn::kernels::test
