// Training on the device for the per-channel cells (training.hpp's contract): the forward is
// newton_apply's solve (the auto rule included; a solve repeats bit for bit, so recompute's
// re-solve in the backward is exactly the forward's H*), H* and W_x x kept on the device for the
// backward; the backward is the implicit adjoint: J at H* and a reverse scan in f64 plus a
// per-element VJP (the input biases' gradients summed in it), then the input affines' other
// gradients by cuBLAS.
#include "cuda/per_channel.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/time_gate.hpp"

namespace pararnn::detail {
namespace cuda {
namespace {

// The implicit adjoint on the device (training.hpp's contract; the CPU backend's backward with
// its reverse walk replaced by a parallel reverse scan), in AdjointT (double; float for f16/bf16
// storage: J and μ stored and J and the VJP computed in it), every input read in the compute type
// and converted in registers (kernels/cell_vjp.hpp): J at H* and the seed μ = grad_H
// (rounded to the compute type first, on the device, as the CPU backend rounds it) in one pass, μ by the reverse
// scan, the per-element VJP (d_wx, ∇h0 at heads, recurrent partial sums); then Σ over batch rows
// in double, and the input affines' gradients by cuBLAS in the compute type, one GEMM per batch
// row as the CPU does. ∇x is written straight into grad_x when that is a contiguous compute-type
// view on the device.
template <class CellMath, class ComputeT, class AdjointT>
NewtonGradients adjoint_backward(const Cell& cell, const Layout& L, const DeviceProblem& p,
                                 const ComputeT* H, const TensorView& x, const TensorView& grad_H,
                                 const ApplyOptions& options, const TensorView* grad_x) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, R = CellMath::kRecurrent;
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t B = L.batch, T = L.time, D = L.d_h, n = B * T * S * D;
  const std::int64_t width = G * D, rows_bt = B * T;
  const std::int64_t h0_rows = options.h0 ? options.h0->size(0) : 0;
  if (grad_H.numel() != n)
    throw Error(fmt::format("CUDA backward: grad_H holds {} elements, the trajectory {}", grad_H.numel(), n));
  DeviceBuffer grad_H_holder;
  const auto* g = static_cast<const ComputeT*>(
      on_device_as(grad_H, compute, grad_H_holder, "grad_H (compute type)"));

  // J at H* and the seed, then μ by the reverse scan (in place), stored in AdjointT.
  DeviceBuffer J(checked_bytes(n * S, sizeof(AdjointT), "J"), "J");
  DeviceBuffer mu(checked_bytes(n, sizeof(AdjointT), "the adjoint μ"), "the adjoint μ");
  const kernels::CellAdjointJacobianArgs<ComputeT, AdjointT> j{
      .wx = static_cast<const ComputeT*>(p.wx), .recurrent = static_cast<const ComputeT*>(p.recurrent),
      .h0 = static_cast<const ComputeT*>(p.h0), .h0_row = p.h0_row, .head = p.head, .H = H, .grad_H = g,
      .jac = J.as<AdjointT>(), .mu = mu.as<AdjointT>(), .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_CHECK((kernels::launch_cell_adjoint_jacobian<CellMath, ComputeT, AdjointT>(j, current_stream())));
  // The single-pass scan (its association is fixed: the gradients repeat bit for bit). At S1 the
  // three launches take 5.28 ms with it against 5.56 with the three-phase scan, the same d_wx
  // bit for bit and recurrent sums within 1.2e-13 (H200, pararnn_bench_shapes --only backward).
  const kernels::ScanArgs<AdjointT> scan{.jac = J.as<AdjointT>(), .delta = mu.as<AdjointT>(),
                                       .head = PARARNN_FAULT_POINT("cuda_adjoint_not_cut_at_segment_end") ? nullptr : p.head,
                                       .batch = B, .time = T, .channels = D, .reverse = true,
                                       .tiling = {.algorithm = kernels::ScanAlgorithm::single_pass}};
  DeviceBuffer scan_ws(kernels::scan_affine_workspace_bytes<S, AdjointT>(B, T, D, scan.tiling),
                       "the adjoint scan's workspace");
  PARARNN_CUDA_CHECK((kernels::launch_scan_affine<S, AdjointT>(scan, scan_ws.get(), scan_ws.bytes(), current_stream())));

  // The per-element VJP. It also sums d W_x x over each chunk's steps (the input biases'
  // gradients: no pass over d W_x x for them), and for f16/bf16 storage writes d W_x x as the bf16
  // terms the input affines' GEMMs read in place of its f32 values (no split pass, no f32 array),
  // except for CfC, whose Δt gradient reads the values.
  const std::int64_t chunks = kernels::vjp_partial_chunks(T);
  const bool terms_in_vjp = std::is_same_v<ComputeT, float> &&
                            (cell.dtype() == DType::f16 || cell.dtype() == DType::bf16) && cell.spec().dt_gate < 0;
  const int n_terms = half_backward_dwx_terms();
  DeviceBuffer d_wx, d_wx_terms;
  if (terms_in_vjp)
    d_wx_terms = DeviceBuffer(checked_bytes(n_terms * rows_bt * width, 2, "d W_x x's bf16 terms"), "d W_x x's bf16 terms");
  else
    d_wx = DeviceBuffer(checked_bytes(rows_bt * width, sizeof(ComputeT), "d W_x x"), "d W_x x");
  DeviceBuffer partials(checked_bytes(B * chunks * R * D, sizeof(double), "recurrent partials"),
                        "recurrent partials");
  DeviceBuffer bias_partials(checked_bytes(B * chunks * width, sizeof(double), "input bias partials"),
                             "input bias partials");
  DeviceBuffer d_h0;
  if (options.h0) {
    d_h0 = DeviceBuffer(checked_bytes(h0_rows * S * D, sizeof(double), "∇h0"), "∇h0");
    PARARNN_CUDA_CHECK(cudaMemsetAsync(d_h0.get(), 0, d_h0.bytes(), current_stream()));
  }
  const kernels::CellVjpArgs<ComputeT, AdjointT> v{
      .wx = static_cast<const ComputeT*>(p.wx), .recurrent = static_cast<const ComputeT*>(p.recurrent),
      .h0 = static_cast<const ComputeT*>(p.h0), .h0_row = p.h0_row, .head = p.head, .H = H,
      .mu = mu.as<AdjointT>(), .d_wx = terms_in_vjp ? nullptr : d_wx.as<ComputeT>(),
      .d_h0 = options.h0 ? d_h0.as<double>() : nullptr, .d_rec_partials = partials.as<double>(),
      .d_wx_partials = bias_partials.as<double>(), .d_wx_bf16 = d_wx_terms.get(), .bf16_plane = rows_bt * width,
      .bf16_terms = n_terms, .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_CHECK((kernels::launch_cell_vjp<CellMath, ComputeT, AdjointT>(v, current_stream())));
  J = DeviceBuffer();  // J and μ are not read again: back to the pool before the GEMMs' buffers
  mu = DeviceBuffer();

  NewtonGradients out;
  // Recurrent entries: per (entry, channel), Σ over batch rows and chunks in a fixed order; the
  // clamp mask from the raw values the solve read; into the caller's device targets in place.
  deliver_recurrent_gradients(cell, options, sum_rows_device(partials.as<double>(), B * chunks, R * D, "recurrent gradients"),
                              out);

  // Input affines (runtime.hpp): ∇W, ∇b into out.parameters, ∇x on the device (into grad_x itself
  // when it is a contiguous compute-type device view: no copy).
  const bool in_place = grad_x && grad_x->device() == Device::cuda && grad_x->is_contiguous() &&
                        grad_x->dtype() == compute;
  DeviceBuffer dx_holder;
  if (!in_place) dx_holder = DeviceBuffer(checked_bytes(rows_bt * L.d_in, sizeof(ComputeT), "∇x"), "∇x");
  auto* dx = in_place ? static_cast<ComputeT*>(grad_x->data()) : dx_holder.as<ComputeT>();
  const DeviceBuffer bias_sums = sum_rows_device(bias_partials.as<double>(), B * chunks, width, "input bias gradients");
  bias_partials = DeviceBuffer();
  input_affine_backward_into<ComputeT>(cell, L, x, terms_in_vjp ? nullptr : d_wx.as<ComputeT>(), dx, out, options,
                                       {.bf16_terms = d_wx_terms.get(), .plane = rows_bt * width,
                                        .bias_sums = bias_sums.as<double>()});
  if (cell.spec().dt_gate >= 0) {  // CfC's Δt: Σ over channels of its gate's cotangent
    DeviceBuffer x_holder;
    const auto* xc = static_cast<const ComputeT*>(on_device_as(x, compute, x_holder, "x (compute type)"));
    const kernels::TimeGateBackwardArgs<ComputeT> a{
        .x = xc, .d_wx = d_wx.as<ComputeT>(), .dx = dx, .rows = rows_bt,
        .d_in = L.d_in, .channels = D, .gates = G, .dt_gate = cell.spec().dt_gate, .floor = cells::kCfcDtFloor};
    PARARNN_CUDA_CHECK(kernels::launch_time_gate_backward(a, current_stream()));
  }
  if (grad_x) {
    store_into(dx, compute, *grad_x, "grad_x");  // nothing to do in place
  } else {
    Tensor dx_host(compute, {B, T, L.d_in});
    if (dx_host.nbytes() > 0)
      copy_to_host(dx_host.data(), dx, dx_host.nbytes());
    out.x = compute == cell.dtype() ? dx_host : Tensor::converted(dx_host, cell.dtype());
  }
  if (options.h0) out.h0 = gradient_tensor(cell, options.h0->shape(), download_vector<double>(d_h0, h0_rows * S * D));
  return out;
}

}  // namespace
}  // namespace cuda

// Training on the device: the forward is newton_apply's solve (the auto rule included); a solve
// repeats bit for bit, so recompute's re-solve in the backward is exactly the forward's H*.
// The forward's solve; H returned as a new host tensor (out null) or stored into *out.
NewtonForward cuda::per_channel_forward(const Cell& cell, const TensorView& x, const TensorView* out,
                                        const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
  cuda::PerChannelSolve solve(cell, x, options, layout, out, "newton_forward on the CUDA backend", "H_out");
  const cuda::DeviceInputs& inputs = solve.inputs();
  cuda::DeviceBuffer H(cuda::checked_bytes(solve.elements(), dtype_size(inputs.compute()), "H"), "H");
  NewtonForward forward;
  cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H.get(), solve.workspace(), forward.stats);
  const Shape shape = cell.trajectory_shape(layout.batch, layout.time);
  if (out)
    cuda::store_into(H.get(), inputs.compute(), *out, "H_out");
  else
    forward.H = cuda::download_trajectory(H, inputs.compute(), cell, shape);
  if (!config.recompute) {
    int device = 0;
    PARARNN_CUDA_CHECK(cudaGetDevice(&device));
    forward.saved_trajectory =
        std::make_shared<const cuda::SavedOnDevice>(std::move(H), inputs.shared_wx(), device, inputs.compute(), shape);
  }
  return forward;
}

// The backward; ∇x returned as a new host tensor (grad_x null) or stored into *grad_x.
NewtonGradients cuda::per_channel_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                           const TensorView& grad_H, const TensorView* grad_x,
                                           const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_backward on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::SolveScope scope(x, options);
  if (grad_x) cuda::check_store_target(*grad_x, "grad_x");
  const DType compute = cuda::compute_dtype(cell.dtype());
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  // A forward of this backend on this device lends its W_x x too (no second input GEMM).
  const auto* on_device = dynamic_cast<const cuda::SavedOnDevice*>(forward.saved_trajectory.get());
  std::shared_ptr<const cuda::DeviceBuffer> saved_wx = on_device ? on_device->wx_on_current_device() : nullptr;
  const std::size_t wx_bytes =
      static_cast<std::size_t>(layout.batch * layout.time * cell.spec().gates * layout.d_h) * dtype_size(compute);
  if (saved_wx && saved_wx->bytes() != wx_bytes)
    throw ContractViolation("forward", "must come from newton_forward on this cell and x",
                            fmt::format("a saved W_x x of {} bytes where this cell and x give {}", saved_wx->bytes(),
                                        wx_bytes));
  const cuda::DeviceInputs inputs(cell, x, options, layout, std::move(saved_wx));
  cuda::DeviceBuffer H;  // H* unless the forward's device copy is read in place
  const void* H_star = cuda::saved_on_current_device(forward, compute, n, H);
  if (!H_star) {  // recompute: the forward's solve again (it repeats: the same bits)
    H = cuda::DeviceBuffer(cuda::checked_bytes(n, dtype_size(compute), "H*"), "H*");
    cuda::NewtonWorkspace workspace(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h);
    NewtonStats stats;
    cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H.get(), workspace, stats);
    H_star = H.get();
  }
  // f16 and bf16 storage keep J and μ, and their arithmetic, in f32 (kernels/cell_vjp.hpp: half
  // the bytes of the two largest arrays, no f64 arithmetic; their gradient τ is far above f32's
  // rounding); f32 and f64 in f64.
  const bool half_storage = cell.dtype() == DType::f16 || cell.dtype() == DType::bf16;
  return cuda::dispatch_cuda_cell(cell.kind(), [&]<class CellMath>() {
    return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
      const auto backward = [&]<class AdjointT>() {
        return cuda::adjoint_backward<CellMath, ComputeT, AdjointT>(cell, layout, inputs.problem(),
                                                                    static_cast<const ComputeT*>(H_star), x, grad_H,
                                                                    options, grad_x);
      };
      if constexpr (std::is_same_v<ComputeT, float>) {
        if (half_storage) return backward.template operator()<float>();
      }
      return backward.template operator()<double>();
    });
  });
}

}  // namespace pararnn::detail
