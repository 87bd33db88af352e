// The CUDA exact linear family (ParaRWKV7), forward only, no Newton: launch_rwkv7_elements
// (J_t = G_tᵀ, the drive rows, S_0 = step(S0)) then launch_scan_dense with rwkv7_scan_args, which
// leaves S in place in the trajectory layout; one download, rounded to storage once. Stats as the
// CPU's (cpu/exact_linear.cpp), scan_backend "rwkv7_scan_cuda". Its sequential_apply is
// launch_rwkv7_sequential (the step loop, rows rounded every step). Heads of d <=
// kernels::kDenseScanMaxN (64); api.cpp refuses wider ones.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/runtime.hpp"
#include "pararnn/kernels/rwkv7_elements.hpp"
#include "pararnn/kernels/scan_dense.hpp"

namespace pararnn::detail {

static_assert(kCudaRwkv7MaxHeadDim == kernels::kDenseScanMaxN);

Tensor cuda_rwkv7_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout,
                        NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  stats = NewtonStats{};
  stats.k = KResolution{0, false, "rwkv7 (linear: exact (G, U) scan, no Newton)"};
  stats.scan_backend = "rwkv7_scan_cuda";
  stats.converged = true;
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    const cuda::DeviceBuffer wx = cuda::device_input_affine(cell, x, layout);
    const cuda::DeviceBuffer h0 = cuda::device_h0(options, compute);
    const std::int64_t heads = cell.n_heads(), d = cell.head_dim();
    const std::int64_t count = layout.batch * layout.time * heads * d * d;
    cuda::DeviceBuffer S(cuda::checked_bytes(count, sizeof(ComputeT), "S"), "the state S");
    cuda::DeviceBuffer J(cuda::checked_bytes(count, sizeof(ComputeT), "J"), "the transitions G_tᵀ");
    const kernels::Rwkv7ElementArgs<ComputeT> a{
        .wx = wx.as<ComputeT>(), .h0 = options.h0 ? h0.as<ComputeT>() : nullptr, .jac = J.as<ComputeT>(),
        .S = S.as<ComputeT>(), .batch = layout.batch, .time = layout.time, .heads = heads, .d = d};
    PARARNN_CUDA_CHECK(kernels::launch_rwkv7_elements<ComputeT>(a, cuda::kStream));
    const kernels::DenseScanArgs<ComputeT> scan = kernels::rwkv7_scan_args(a);
    const cuda::DeviceBuffer workspace(kernels::scan_dense_workspace_bytes<ComputeT>(scan),
                                       "the dense scan workspace");
    PARARNN_CUDA_CHECK(kernels::launch_scan_dense<ComputeT>(scan, workspace.get(), workspace.bytes(),
                                                            cuda::kStream));
    return cuda::download_trajectory(S, compute, cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}

Tensor cuda_rwkv7_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
    using ComputeT = kernels::ComputeOf<StorageT>;
    const cuda::DeviceBuffer wx = cuda::device_input_affine(cell, x, layout);
    const cuda::DeviceBuffer h0 = cuda::device_h0(options, compute);
    const std::int64_t heads = cell.n_heads(), d = cell.head_dim();
    const std::int64_t count = layout.batch * layout.time * heads * d * d;
    cuda::DeviceBuffer S(cuda::checked_bytes(count, sizeof(StorageT), "S"), "the state S");
    const kernels::Rwkv7SequentialArgs<StorageT> a{
        .wx = wx.as<ComputeT>(), .h0 = options.h0 ? h0.as<ComputeT>() : nullptr, .S = S.as<StorageT>(),
        .batch = layout.batch, .time = layout.time, .heads = heads, .d = d};
    PARARNN_CUDA_CHECK(kernels::launch_rwkv7_sequential<StorageT>(a, cuda::kStream));
    return cuda::download_trajectory(S, cell.dtype(), cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}
}  // namespace pararnn::detail
