// Host entry points to the fused adjoint (kernels/src/cell_adjoint_fused.cuh) for the kernel
// tests, instantiated in cell_adjoint_fused_entry.cu at the production scan shape of the cell's
// slot count (SinglePassLimits<S>): V = 1 for every per-channel cell in both compute types, and
// V = 2 for GRU-diag f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cell_adjoint_fused_args.hpp"

namespace pararnn::kernels::test {

template <class CellMath, class T, int V>
cudaError_t run_fused_adjoint(const detail::FusedAdjointArgs<T>& a, void* workspace, std::size_t workspace_bytes);

template <class CellMath, class T, int V>
std::size_t fused_adjoint_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels);

// Time steps per recurrent partial (the shape's chunk).
template <class CellMath>
std::int64_t fused_adjoint_chunk();

}  // namespace pararnn::kernels::test
