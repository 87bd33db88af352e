// The CUDA exact linear family (ParaRWKV7), no Newton: launch_rwkv7_elements (J_t = G_tᵀ, the
// drive rows, S_0 = step(S0)) then launch_scan_dense with rwkv7_scan_args, which leaves S in place
// in the trajectory layout; one download, rounded to storage once. Stats as the CPU's
// (cpu/exact_linear.cpp), scan_backend "rwkv7_scan_cuda". Its sequential_apply is
// launch_rwkv7_sequential (the step loop, rows rounded every step). Heads of d <=
// kernels::kDenseScanMaxN (64); api.cpp refuses wider ones.
//
// Training: newton_forward keeps S in the compute type on the device (the CPU's saved trajectory);
// the backward is the CPU's exact adjoint in double on the device: G_tᵀ again by the elements
// kernel, μ by the reverse dense scan of the cotangent, Rwkv7Math::vjp per (b, t, head)
// (launch_rwkv7_vjp), then the input affines' backward by cuBLAS (runtime.hpp), ∇x into the
// caller's view where one is given. Deterministic, so
// recompute gives the stored S and the same gradients bit for bit.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/affine.hpp"
#include "cuda/runtime.hpp"
#include "pararnn/kernels/rwkv7_elements.hpp"
#include "pararnn/kernels/scan_dense.hpp"
#include "pararnn/kernels/tile_max.hpp"

namespace pararnn::detail {

static_assert(kCudaRwkv7MaxHeadDim == kernels::kDenseScanMaxN);

namespace {

void rwkv7_stats(NewtonStats& stats) {
  stats = NewtonStats{};
  stats.k = KResolution{0, false, KSource::exact_scan};
  stats.scan_backend = SolveBackend::rwkv7_scan_cuda;
  stats.converged = true;
}

// The elements of the (G, U) scan in ComputeT: J_t = G_tᵀ into J and the drive rows (S_0 =
// step(S0)) into S; `scan` then turns S into the trajectory (or, with reverse, a cotangent in
// S's layout into μ).
template <class ComputeT>
kernels::Rwkv7ElementArgs<ComputeT> rwkv7_elements(const Cell& cell, const Layout& L, const ComputeT* wx,
                                                   const ComputeT* h0, cuda::DeviceBuffer& J, cuda::DeviceBuffer& S) {
  const std::int64_t heads = cell.n_heads(), d = cell.head_dim();
  const std::int64_t count = L.batch * L.time * heads * d * d;
  S = cuda::DeviceBuffer(cuda::checked_bytes(count, sizeof(ComputeT), "S"), "the state S");
  J = cuda::DeviceBuffer(cuda::checked_bytes(count, sizeof(ComputeT), "J"), "the transitions G_tᵀ");
  const kernels::Rwkv7ElementArgs<ComputeT> a{.wx = wx, .h0 = h0, .jac = J.as<ComputeT>(), .S = S.as<ComputeT>(),
                                              .batch = L.batch, .time = L.time, .heads = heads, .d = d};
  PARARNN_CUDA_CHECK(kernels::launch_rwkv7_elements<ComputeT>(a, cuda::current_stream()));
  return a;
}

template <class ComputeT>
void scan(kernels::DenseScanArgs<ComputeT> args, bool reverse) {
  args.reverse = reverse;
  const cuda::DeviceBuffer workspace(kernels::scan_dense_workspace_bytes<ComputeT>(args), "the dense scan workspace");
  PARARNN_CUDA_CHECK(kernels::launch_scan_dense<ComputeT>(args, workspace.get(), workspace.bytes(), cuda::current_stream()));
}

// S on the device in the compute type, [b][t][head][d][d].
template <class ComputeT>
cuda::DeviceBuffer rwkv7_trajectory(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                    const Layout& L) {
  const cuda::DeviceBuffer wx = cuda::device_input_affine(cell, x, L);
  const cuda::DeviceBuffer h0 = cuda::device_h0(options, cuda::compute_dtype(cell.dtype()));
  cuda::DeviceBuffer J, S;
  const auto a = rwkv7_elements<ComputeT>(cell, L, wx.as<ComputeT>(), options.h0 ? h0.as<ComputeT>() : nullptr, J, S);
  scan<ComputeT>(kernels::rwkv7_scan_args(a), /*reverse=*/false);
  return S;
}

// +inf into stats.max_residual where S holds a NaN or an infinity (the CPU path's all_finite):
// per-block maxima of |S| (kernels/tile_max.hpp, NaN ranking above every number) reach the host.
template <class ComputeT>
void flag_non_finite(const Cell& cell, const Layout& L, const cuda::DeviceBuffer& S, NewtonStats& stats) {
  const std::int64_t d = cell.head_dim();
  constexpr std::int64_t kChunks = 32;
  if (L.batch * L.time * d == 0) return;
  cuda::DeviceBuffer maxima(cuda::checked_bytes(L.batch * kChunks, sizeof(ComputeT), "max|S|"), "max|S| per block");
  const kernels::TileMaxArgs<ComputeT> a{.F = S.as<ComputeT>(), .batch = L.batch, .rows = L.time * cell.n_heads() * d,
                                         .channels = d, .tile = d, .chunks = kChunks, .out = maxima.as<ComputeT>()};
  PARARNN_CUDA_CHECK(kernels::launch_tile_max_abs(a, cuda::current_stream()));
  for (const ComputeT m : cuda::download_vector<ComputeT>(maxima, L.batch * kChunks))
    if (!std::isfinite(static_cast<double>(m))) {
      stats.max_residual = std::numeric_limits<double>::infinity();
      return;
    }
}

// The exact adjoint at S (compute type on the device); see the file comment.
template <class ComputeT>
NewtonGradients rwkv7_adjoint(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* S,
                              const TensorView& grad_H, const ApplyOptions& options, const TensorView* grad_x) {
  const DType compute = cuda::compute_dtype(cell.dtype());
  const std::int64_t heads = cell.n_heads(), d = cell.head_dim();
  const std::int64_t count = L.batch * L.time * heads * d * d, width = gate_width(cell);
  const cuda::DeviceBuffer wx = cuda::device_input_affine(cell, x, L);
  const cuda::DeviceBuffer h0 = cuda::device_h0(options, compute);
  cuda::DeviceBuffer wx64, h064, S64;
  const double* wx_f64 = cuda::as_f64<ComputeT>(wx.get(), L.batch * L.time * width, wx64, "W_x x (f64)");
  const double* h0_f64 = options.h0 ? cuda::as_f64<ComputeT>(h0.get(), L.batch * heads * d * d, h064, "h0 (f64)") : nullptr;
  const double* S_f64 = cuda::as_f64<ComputeT>(S, count, S64, "S (f64)");
  // μ: the cotangent (S's layout) through the reverse scan of G_tᵀ (the elements' S is scratch).
  cuda::DeviceBuffer J, drive;
  auto a = rwkv7_elements<double>(cell, L, wx_f64, h0_f64, J, drive);
  cuda::DeviceBuffer mu = cuda::owned_f64_on_device(grad_H, "the adjoint μ");  // the scan runs in place
  a.S = mu.as<double>();
  scan<double>(kernels::rwkv7_scan_args(a), /*reverse=*/true);
  // The per-step VJPs.
  cuda::DeviceBuffer d_wx(cuda::checked_bytes(L.batch * L.time * width, sizeof(ComputeT), "d W_x x"), "d W_x x");
  PARARNN_CUDA_CHECK(cudaMemsetAsync(d_wx.get(), 0, d_wx.bytes(), cuda::current_stream()));
  cuda::DeviceBuffer d_h0;
  if (options.h0) d_h0 = cuda::DeviceBuffer(cuda::checked_bytes(L.batch * heads * d * d, sizeof(double), "∇h0"), "∇h0");
  const kernels::Rwkv7VjpArgs<ComputeT> v{.wx = wx_f64, .h0 = h0_f64, .S = S_f64, .mu = mu.as<double>(),
                                          .d_wx = d_wx.as<ComputeT>(),
                                          .d_h0 = options.h0 ? d_h0.as<double>() : nullptr, .batch = L.batch,
                                          .time = L.time, .heads = heads, .d = d};
  PARARNN_CUDA_CHECK(kernels::launch_rwkv7_vjp<ComputeT>(v, cuda::current_stream()));
  NewtonGradients out;
  const cuda::DeviceBuffer dx = cuda::input_affine_backward<ComputeT>(cell, L, x, d_wx.as<ComputeT>(), out);
  cuda::deliver_input_gradient(dx.get(), compute, cell, L, grad_x, out);
  if (options.h0)
    out.h0 = gradient_tensor(cell, options.h0->shape(),
                             cuda::download_vector<double>(d_h0, L.batch * heads * d * d));
  return out;
}

}  // namespace

namespace {

// newton_apply / newton_apply_into: S returned as a new host tensor (out null) or stored into *out.
Tensor rwkv7_apply_on_device(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig&,
                             const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "out");
  rwkv7_stats(stats);
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    const cuda::DeviceBuffer S = rwkv7_trajectory<ComputeT>(cell, x, options, layout);
    flag_non_finite<ComputeT>(cell, layout, S, stats);
    return cuda::deliver_trajectory(S.get(), compute, cell, cell.trajectory_shape(layout.batch, layout.time), out,
                                    "out");
  });
}

// newton_forward / newton_forward_into: S kept on the device (unless recompute).
NewtonForward rwkv7_forward(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                            const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_forward on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "H_out");
  NewtonForward forward;
  rwkv7_stats(forward.stats);
  const DType compute = cuda::compute_dtype(cell.dtype());
  cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::DeviceBuffer S = rwkv7_trajectory<ComputeT>(cell, x, options, layout);
    const Shape shape = cell.trajectory_shape(layout.batch, layout.time);
    forward.H = cuda::deliver_trajectory(S.get(), compute, cell, shape, out, "H_out");
    if (!config.recompute) forward.saved_trajectory = cuda::saved_on_device(std::move(S), compute, shape);
  });
  return forward;
}

// newton_backward / newton_backward_into: ∇x returned in the gradients (grad_x null) or stored into *grad_x.
NewtonGradients rwkv7_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                               const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig&,
                               const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_backward on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (grad_x) cuda::check_store_target(*grad_x, "grad_x");
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::DeviceBuffer S;
    const std::int64_t count = shape_numel(cell.trajectory_shape(layout.batch, layout.time));
    const void* S_star = cuda::saved_on_current_device(forward, compute, count, S);
    if (!S_star) {  // recompute: the same scan again (deterministic: the same bits)
      S = rwkv7_trajectory<ComputeT>(cell, x, options, layout);
      S_star = S.get();
    }
    return rwkv7_adjoint<ComputeT>(cell, layout, x, static_cast<const ComputeT*>(S_star), grad_H, options, grad_x);
  });
}

Tensor rwkv7_sequential_on_device(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
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
    PARARNN_CUDA_CHECK(kernels::launch_rwkv7_sequential<StorageT>(a, cuda::current_stream()));
    return cuda::download_trajectory(S, cell.dtype(), cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}

// Heads of d <= 64 (the dense scan's and the step loop's limit); ParaRWKV7's input rules.
void supports_rwkv7_on_device(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                              const char* who) {
  if (cell.head_dim() > kCudaRwkv7MaxHeadDim)
    throw UnsupportedPath(fmt::format("{}: cell '{}' has heads of d = {} (d_h {} / n_heads {}); the CUDA "
                                      "dense scan takes d <= {}; use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.head_dim(), cell.d_h(), cell.n_heads(),
                                      kCudaRwkv7MaxHeadDim));
  refuse_cpu_only_options(config, who);
  check_exact_linear_inputs(cell, config, options, who);
}

}  // namespace

const FamilyBackend kCudaExactLinear{.name = "cuda linear_gu",
                                     .serves = {Capability::newton, Capability::sequential, Capability::training},
                                     .supports = supports_rwkv7_on_device,
                                     .newton = rwkv7_apply_on_device,
                                     .sequential = rwkv7_sequential_on_device,
                                     .forward = rwkv7_forward,
                                     .backward = rwkv7_backward};

}  // namespace pararnn::detail
