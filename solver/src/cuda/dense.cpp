// The CUDA dense-chain family (ParaHopfield, ParaGRU and ParaSLSTM mix='head', ParaSLSTM
// mix='dense'): the family operations of newton/family.hpp on the device, step for step the
// CPU's cpu/dense.cpp, driven by newton/driver.hpp; and the implicit adjoint (training.hpp).
//
// W_x x + b by cuBLAS in the compute type (f32 for f32/f16/bf16, f64 for f64) at each affine
// block's columns (square blocks are gates·d_h² wide), kept [b][t][gate_width]; the residual
// kernel (F, J, max|F| read back once per evaluation), launch_scan_dense of F with J (δ in
// place), H += ωδ by cuBLAS axpy; sLSTM's zero-hidden pass plus Picard passes by the dense
// sequential kernel's Picard mode. Internal layout chain-major [chain][t][N] as on the CPU; the
// result is moved to the trajectory [b][t][slot][d_h] on the device (launch_dense_relayout) and
// handed over by deliver_trajectory: stored into the caller's view (rounded to its dtype on its
// device) or downloaded once and rounded to storage. The fallback re-solves the chains still at or above residual_atol, as
// the CPU does. sequential_apply runs the dense sequential kernel in the storage dtype, writing
// the trajectory layout directly.
//
// Training: newton_forward keeps H* chain-major in the compute type on the device (the CPU's
// saved layout); the backward, everything in double as the CPU's: J at H* by the residual kernel,
// μ by the reverse dense scan of the cotangent (moved chain-major on the device), the per-step
// VJPs by duals (kernels/dense_vjp.hpp), the
// parameter partials summed over chunks and batch rows in a fixed order on the device, and the
// input affines' backward by cuBLAS (runtime.hpp), ∇x into the caller's view where one is given.
// With device x, grad_H and outputs, only parameters, their gradients and the stats cross
// (no O(B·T·d) transfer). Every step is deterministic, so recompute's
// re-solve gives the stored H* bit for bit and the gradients repeat bit for bit. Chains of N <= kernels::kDenseKernelMaxN (32) values; api.cpp
// refuses wider ones before calling here.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/affine.hpp"
#include "cuda/fallback.hpp"
#include "cuda/runtime.hpp"
#include "newton/driver.hpp"
#include "pararnn/kernels/dense_chain.hpp"
#include "pararnn/kernels/dense_residual.hpp"
#include "pararnn/kernels/dense_sequential.hpp"
#include "pararnn/kernels/dense_vjp.hpp"
#include "pararnn/kernels/scan_dense.hpp"

namespace pararnn::detail {

static_assert(kCudaDenseMaxChainWidth == kernels::kDenseKernelMaxN);

namespace cuda {
namespace {

// The inputs of one dense-cell solve on the device (kernels/dense_chain.hpp's description).
template <class ComputeT>
class DenseDeviceInputs {
 public:
  DenseDeviceInputs(const Cell& cell, const TensorView& x, const ApplyOptions& options, const Layout& L) {
    const DType compute = compute_dtype(cell.dtype());
    const std::int64_t n = cell.chain_width(), per_row = cell.chains_per_row();
    wx_ = device_input_affine(cell, x, L);
    const std::vector<double> p = cell.dense_chain_parameters();
    params_count_ = static_cast<std::int64_t>(p.size());
    h0_count_ = options.h0 ? shape_numel(options.h0->shape()) : 0;
    const Tensor params = Tensor::from_values(compute, {static_cast<std::int64_t>(p.size())}, p);
    params_ = upload_new(params.data(), params.nbytes(), "the dense chain parameters");
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(per_row * n));
    for (std::int64_t q = 0; q < per_row; ++q)
      for (std::int64_t i = 0; i < n; ++i)
        offsets[static_cast<std::size_t>(q * n + i)] = cell.chain_element_offset(q, i);
    offsets_ = upload_new(offsets.data(), offsets.size() * sizeof(std::int64_t), "the chain offsets");
    h0_ = device_h0(options, compute);
    if (L.packed) {
      head_ = upload_new(L.heads.data(), L.heads.size(), "segment heads");
      h0_row_ = upload_new(L.state_index.data(), L.state_index.size() * sizeof(std::int64_t),
                           "segment h0 rows");
    }
    in_ = {.wx = wx_.as<ComputeT>(), .params = params_.as<ComputeT>(),
           .h0 = options.h0 ? h0_.as<ComputeT>() : nullptr,
           .h0_row = L.packed ? h0_row_.as<std::int64_t>() : nullptr,
           .head = L.packed ? head_.as<std::uint8_t>() : nullptr,
           .offsets = offsets_.as<std::int64_t>(), .batch = L.batch, .time = L.time, .n = n,
           .chains_per_row = per_row, .width = gate_width(cell), .slot_width = cell.chain_slot_width(),
           .d_h = L.d_h, .state_row = cell.slots() * L.d_h};
    synchronize();  // the host vectors above are freed at return
  }

  const kernels::DenseChainInputs<ComputeT>& inputs() const { return in_; }
  std::int64_t chains() const { return in_.batch * in_.chains_per_row; }
  std::int64_t state_elems() const { return chains() * in_.time * in_.n; }
  std::int64_t params_count() const { return params_count_; }
  std::int64_t h0_count() const { return h0_count_; }

 private:
  DeviceBuffer wx_, params_, offsets_, h0_, head_, h0_row_;
  std::int64_t params_count_ = 0, h0_count_ = 0;
  kernels::DenseChainInputs<ComputeT> in_{};
};

// One dense Newton solve on the device (the CPU DenseSolver's newton_trajectory, step for step);
// H is chain-major [chain][t][N] in the compute type.
template <class DenseMath, class ComputeT>
class CudaDenseFamily {
 public:
  // `hidden_begin`: the first element of a chain's hidden slot (sLSTM's Picard passes).
  CudaDenseFamily(const DenseDeviceInputs<ComputeT>& inputs, std::int64_t hidden_begin, ComputeT* H)
      : in_(inputs.inputs()), chains_(inputs.chains()), n_(inputs.state_elems()), hidden_begin_(hidden_begin), H_(H) {
    F_ = DeviceBuffer(checked_bytes(n_, sizeof(ComputeT), "F"), "the residual F");
    J_ = DeviceBuffer(checked_bytes(n_ * in_.n, sizeof(ComputeT), "J"), "the dense Jacobian J");
    residual_ws_ = DeviceBuffer(kernels::dense_residual_workspace_bytes<ComputeT>(), "the max|F| partials");
    max_abs_ = DeviceBuffer(sizeof(ComputeT), "max|F|");
    scan_ = {.jac = J_.as<ComputeT>(), .delta = F_.as<ComputeT>(), .head = in_.head,
             .batch = in_.batch, .groups = in_.chains_per_row, .rows = 1, .time = in_.time,
             .n = in_.n, .r_batch = in_.chains_per_row * in_.time * in_.n,
             .r_group = in_.time * in_.n, .r_row = 0, .r_time = in_.n};
    scan_ws_ = DeviceBuffer(kernels::scan_dense_workspace_bytes<ComputeT>(scan_), "the dense scan workspace");
  }

  // F = f(prepend(H)) − H, J when asked, and max|F| read back when asked (else 0).
  double evaluate(bool with_jacobian, bool reduce) {
    const kernels::DenseResidualArgs<ComputeT> a{
        .in = in_, .H = H_, .residual = F_.as<ComputeT>(),
        .jac = with_jacobian ? J_.as<ComputeT>() : nullptr,
        .max_abs_residual = reduce ? max_abs_.as<ComputeT>() : nullptr};
    PARARNN_CUDA_CHECK((kernels::launch_dense_residual<DenseMath, ComputeT>(
        a, residual_ws_.get(), residual_ws_.bytes(), current_stream())));
    if (!reduce) return 0.0;
    ComputeT max_abs = 0;
    copy_to_host(&max_abs, max_abs_.get(), sizeof(ComputeT));
    return static_cast<double>(max_abs);
  }

  SolveBackend backend() const { return SolveBackend::cuda; }
  std::string fallback_unit() const { return fmt::format("chain(s) of {} values", in_.n); }
  void zero_iterate() { PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), current_stream())); }
  void iterate_from_residual() {
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, F_.get(), bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  }

  // sLSTM: the zero-hidden pass and `passes` Picard passes (the hidden slot, elements from
  // hidden_begin_ on, zero and then frozen to the previous pass), in place on H.
  void picard_guess(std::int64_t passes) {
    sequential(H_, kernels::DensePicard{.enabled = true, .passes = passes, .frozen_begin = hidden_begin_});
  }

  // The sequential recurrence (or Picard passes) of every chain into `out`, chain-major.
  void sequential(ComputeT* out, kernels::DensePicard picard = {}) {
    const kernels::DenseSequentialArgs<ComputeT> a{
        .in = in_, .out = out, .layout = kernels::dense_chain_major_layout(in_), .picard = picard};
    PARARNN_CUDA_CHECK((kernels::launch_dense_sequential<DenseMath, ComputeT>(a, current_stream())));
  }

  // The chains still at or above atol get the sequential solution (chain-major: a chain's
  // time x n values are contiguous).
  std::int64_t sequential_fallback(double atol) {
    const std::int64_t chain_elems = in_.time * in_.n;
    return sequential_fallback_units<ComputeT>(
        F_, n_, chains_, atol, [&](std::int64_t i) { return i / chain_elems; }, H_,
        [&](ComputeT* target) { sequential(target); },
        [&](std::int64_t chain, const ComputeT* scratch) {
          PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_ + chain * chain_elems, scratch + chain * chain_elems,
                                             static_cast<std::size_t>(chain_elems) * sizeof(ComputeT),
                                             cudaMemcpyDeviceToDevice, current_stream()));
        });
  }

  // δ from (J, F) in place on F, then H += ω δ.
  void update(double omega) {
    PARARNN_CUDA_CHECK(kernels::launch_scan_dense<ComputeT>(scan_, scan_ws_.get(), scan_ws_.bytes(), current_stream()));
    const ComputeT w = static_cast<ComputeT>(omega);
    cublasHandle_t handle = cublas_handle();
    if constexpr (std::is_same_v<ComputeT, double>) {
      PARARNN_CUBLAS_CHECK(cublasDaxpy_64(handle, n_, &w, F_.as<double>(), 1, H_, 1));
    } else {
      PARARNN_CUBLAS_CHECK(cublasSaxpy_64(handle, n_, &w, F_.as<float>(), 1, H_, 1));
    }
  }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(ComputeT); }

  const kernels::DenseChainInputs<ComputeT>& in_;
  std::int64_t chains_, n_, hidden_begin_;
  ComputeT* H_;
  DeviceBuffer F_, J_, residual_ws_, max_abs_, scan_ws_;
  kernels::DenseScanArgs<ComputeT> scan_{};
};

// The chain-major H (device, compute type) as a contiguous trajectory [b][t][slot][d_h] in the
// compute type on the device.
template <class ComputeT>
DeviceBuffer chain_major_to_trajectory(const DenseDeviceInputs<ComputeT>& inputs, const DeviceBuffer& H) {
  const kernels::DenseChainInputs<ComputeT>& in = inputs.inputs();
  DeviceBuffer out(checked_bytes(in.batch * in.time * in.state_row, sizeof(ComputeT), "H"), "the trajectory H");
  PARARNN_CUDA_CHECK(kernels::launch_dense_relayout(H.as<ComputeT>(), kernels::dense_chain_major_layout(in),
                                                    out.as<ComputeT>(), kernels::dense_trajectory_layout(in), in.batch,
                                                    in.chains_per_row, in.time, in.n, current_stream()));
  return out;
}

// The Newton solve of every chain into H (chain-major, compute type).
template <class DenseMath, class ComputeT>
void dense_solve(const Cell& cell, const DenseDeviceInputs<ComputeT>& inputs, const NewtonConfig& config,
                 const Layout& L, DeviceBuffer& H, NewtonStats& stats) {
  H = DeviceBuffer(checked_bytes(inputs.state_elems(), sizeof(ComputeT), "H"), "H");
  CudaDenseFamily<DenseMath, ComputeT> family(inputs, (cell.slots() - 1) * cell.chain_slot_width(), H.as<ComputeT>());
  static_assert(NewtonFamily<decltype(family)>);
  solve_newton(family, cell.spec(), cell.dtype(), config, L.time, stats);
}

// The implicit adjoint at H* (chain-major, compute type on the device); see the file comment.
template <class DenseMath, class ComputeT>
NewtonGradients dense_adjoint(const Cell& cell, const Layout& L, const DenseDeviceInputs<ComputeT>& inputs,
                              const ComputeT* H, const TensorView& x, const TensorView& grad_H,
                              const ApplyOptions& options, const TensorView* grad_x) {
  const DType compute = compute_dtype(cell.dtype());
  const kernels::DenseChainInputs<ComputeT>& in = inputs.inputs();
  const std::int64_t chains = inputs.chains(), n = in.n, T = L.time, count = inputs.state_elems();
  const std::int64_t per_row = in.chains_per_row, P = DenseMath::params_size(static_cast<int>(n));

  // Everything the adjoint reads, in double.
  DeviceBuffer wx64, params64, h064, H64;
  kernels::DenseChainInputs<double> in64{
      .wx = as_f64<ComputeT>(in.wx, L.batch * T * in.width, wx64, "W_x x (f64)"),
      .params = as_f64<ComputeT>(in.params, inputs.params_count(), params64, "the dense chain parameters (f64)"),
      .h0 = as_f64<ComputeT>(in.h0, inputs.h0_count(), h064, "h0 (f64)"), .h0_row = in.h0_row, .head = in.head,
      .offsets = in.offsets, .batch = in.batch, .time = in.time, .n = in.n, .chains_per_row = per_row,
      .width = in.width, .slot_width = in.slot_width, .d_h = in.d_h, .state_row = in.state_row};
  const double* H_f64 = as_f64<ComputeT>(H, count, H64, "H* (f64)");

  // J at H*, then μ by the reverse dense scan of the cotangent (gathered chain-major).
  DeviceBuffer F(checked_bytes(count, sizeof(double), "F (f64)"), "F (f64)");
  DeviceBuffer J(checked_bytes(count * n, sizeof(double), "J (f64)"), "J (f64)");
  const kernels::DenseResidualArgs<double> r{.in = in64, .H = H_f64, .residual = F.as<double>(), .jac = J.as<double>()};
  PARARNN_CUDA_CHECK((kernels::launch_dense_residual<DenseMath, double>(r, nullptr, 0, current_stream())));
  DeviceBuffer g_holder;
  const auto* g = static_cast<const double*>(on_device_as(grad_H, DType::f64, g_holder, "grad_H (f64)"));
  DeviceBuffer mu(checked_bytes(count, sizeof(double), "μ"), "the adjoint μ");
  PARARNN_CUDA_CHECK(kernels::launch_dense_relayout(g, kernels::dense_trajectory_layout(in64), mu.as<double>(),
                                                    kernels::dense_chain_major_layout(in64), L.batch, per_row, T, n,
                                                    current_stream()));
  const kernels::DenseScanArgs<double> scan{
      .jac = J.as<double>(), .delta = mu.as<double>(), .head = in.head, .batch = L.batch, .groups = per_row,
      .rows = 1, .time = T, .n = n, .r_batch = per_row * T * n, .r_group = T * n, .r_row = 0, .r_time = n,
      .reverse = true};
  DeviceBuffer scan_ws(kernels::scan_dense_workspace_bytes<double>(scan), "the adjoint scan's workspace");
  PARARNN_CUDA_CHECK(kernels::launch_scan_dense<double>(scan, scan_ws.get(), scan_ws.bytes(), current_stream()));

  // The per-step VJPs.
  const std::int64_t chunks = kernels::vjp_chunks(chains, T);
  DeviceBuffer d_wx(checked_bytes(L.batch * T * in.width, sizeof(ComputeT), "d W_x x"), "d W_x x");
  PARARNN_CUDA_CHECK(cudaMemsetAsync(d_wx.get(), 0, d_wx.bytes(), current_stream()));
  DeviceBuffer partials(checked_bytes(chains * chunks * P, sizeof(double), "dense parameter partials"),
                        "dense parameter partials");
  DeviceBuffer d_h0;
  if (options.h0) {
    d_h0 = DeviceBuffer(checked_bytes(inputs.h0_count(), sizeof(double), "∇h0"), "∇h0");
    PARARNN_CUDA_CHECK(cudaMemsetAsync(d_h0.get(), 0, d_h0.bytes(), current_stream()));
  }
  const kernels::DenseVjpArgs<ComputeT> v{.in = in64, .H = H_f64, .mu = mu.as<double>(), .d_wx = d_wx.as<ComputeT>(),
                                          .d_h0 = options.h0 ? d_h0.as<double>() : nullptr,
                                          .d_param_partials = partials.as<double>()};
  DeviceBuffer vjp_ws(kernels::dense_vjp_workspace_bytes<DenseMath>(in64), "the dense VJP's dual slots");
  PARARNN_CUDA_CHECK((kernels::launch_dense_vjp<DenseMath, ComputeT>(v, vjp_ws.get(), vjp_ws.bytes(), current_stream())));

  NewtonGradients out;
  // Dense-chain parameters: per chain q of a row, Σ over batch rows and chunks on the device in a
  // fixed order (row_sum over the q-major partials [q][b][chunk][P]); P doubles per q come back.
  std::vector<double> sums;
  sums.reserve(static_cast<std::size_t>(per_row * P));
  for (std::int64_t q = 0; q < per_row; ++q) {
    const std::vector<double> sum =
        sum_rows_on_device(partials.as<double>() + q * L.batch * chunks * P, L.batch * chunks, P, "∇ dense chain parameters");
    sums.insert(sums.end(), sum.begin(), sum.end());
  }
  for (const auto& [name, values] : cell.dense_chain_parameter_gradients(sums, P))
    out.parameters.emplace(name, gradient_tensor(cell, cell.parameter(name).shape(), values));

  const DeviceBuffer dx = input_affine_backward<ComputeT>(cell, L, x, d_wx.as<ComputeT>(), out);
  deliver_input_gradient(dx.get(), compute, cell, L, grad_x, out);
  if (options.h0) out.h0 = gradient_tensor(cell, options.h0->shape(), download_vector<double>(d_h0, inputs.h0_count()));
  return out;
}
}  // namespace
}  // namespace cuda

namespace {

// newton_apply / newton_apply_into: H returned as a new host tensor (out null) or stored into *out.
Tensor dense_apply(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                   const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "out");
  return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
    return cuda::dispatch_compute(cuda::compute_dtype(cell.dtype()), [&]<class ComputeT>() {
      const cuda::DenseDeviceInputs<ComputeT> inputs(cell, x, options, layout);
      cuda::DeviceBuffer H;
      cuda::dense_solve<DenseMath>(cell, inputs, config, layout, H, stats);
      const cuda::DeviceBuffer trajectory = cuda::chain_major_to_trajectory<ComputeT>(inputs, H);
      return cuda::deliver_trajectory(trajectory.get(), cuda::compute_dtype(cell.dtype()), cell,
                                      cell.trajectory_shape(layout.batch, layout.time), out, "out");
    });
  });
}

// newton_forward / newton_forward_into: H* kept chain-major on the device (unless recompute).
NewtonForward dense_forward(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                            const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_forward on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "H_out");
  NewtonForward forward;
  dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
    cuda::dispatch_compute(cuda::compute_dtype(cell.dtype()), [&]<class ComputeT>() {
      const cuda::DenseDeviceInputs<ComputeT> inputs(cell, x, options, layout);
      cuda::DeviceBuffer H;
      cuda::dense_solve<DenseMath>(cell, inputs, config, layout, H, forward.stats);
      const cuda::DeviceBuffer trajectory = cuda::chain_major_to_trajectory<ComputeT>(inputs, H);
      forward.H = cuda::deliver_trajectory(trajectory.get(), cuda::compute_dtype(cell.dtype()), cell,
                                           cell.trajectory_shape(layout.batch, layout.time), out, "H_out");
      if (!config.recompute)
        forward.saved_trajectory =
            cuda::saved_on_device(std::move(H), cuda::compute_dtype(cell.dtype()), {inputs.state_elems()});
    });
  });
  return forward;
}

// newton_backward / newton_backward_into: ∇x returned in the gradients (grad_x null) or stored into *grad_x.
NewtonGradients dense_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                               const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_backward on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (grad_x) cuda::check_store_target(*grad_x, "grad_x");
  return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
    return cuda::dispatch_compute(cuda::compute_dtype(cell.dtype()), [&]<class ComputeT>() {
      const cuda::DenseDeviceInputs<ComputeT> inputs(cell, x, options, layout);
      cuda::DeviceBuffer H;
      const void* H_star =
          cuda::saved_on_current_device(forward, cuda::compute_dtype(cell.dtype()), inputs.state_elems(), H);
      if (!H_star) {  // recompute: the forward's solve again (deterministic: the same bits)
        NewtonStats stats;
        cuda::dense_solve<DenseMath>(cell, inputs, config, layout, H, stats);
        H_star = H.get();
      }
      return cuda::dense_adjoint<DenseMath>(cell, layout, inputs, static_cast<const ComputeT*>(H_star), x, grad_H,
                                            options, grad_x);
    });
  });
}

Tensor dense_sequential_on_device(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
  const Shape shape = cell.trajectory_shape(layout.batch, layout.time);
  return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
    return cuda::dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
      using ComputeT = kernels::ComputeOf<StorageT>;
      const cuda::DenseDeviceInputs<ComputeT> inputs(cell, x, options, layout);
      const std::int64_t count = layout.batch * layout.time * cell.slots() * layout.d_h;
      cuda::DeviceBuffer H(cuda::checked_bytes(count, sizeof(StorageT), "H"), "H");
      const kernels::DenseSequentialArgs<StorageT> a{
          .in = inputs.inputs(), .out = H.as<StorageT>(),
          .layout = kernels::dense_trajectory_layout(inputs.inputs())};
      PARARNN_CUDA_CHECK((kernels::launch_dense_sequential<DenseMath, StorageT>(a, cuda::current_stream())));
      return cuda::download_trajectory(H, cell.dtype(), cell, shape);
    });
  });
}

// Chains of N <= 32 (the dense residual and sequential kernels' limit).
void supports_dense_on_device(const Cell& cell, const NewtonConfig* config, const ApplyOptions&, const char* who) {
  if (cell.chain_width() > kCudaDenseMaxChainWidth)
    throw UnsupportedPath(fmt::format("{}: cell '{}' (mix '{}') has dense chains of N = {} values; the CUDA "
                                      "dense kernels take N <= {}; use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.spec().mix, cell.chain_width(),
                                      kCudaDenseMaxChainWidth));
  refuse_cpu_only_options(config, who);
}

}  // namespace

const FamilyBackend kCudaDense{.name = "cuda dense",
                               .serves = {Capability::newton, Capability::sequential, Capability::training},
                               .supports = supports_dense_on_device,
                               .newton = dense_apply,
                               .sequential = dense_sequential_on_device,
                               .forward = dense_forward,
                               .backward = dense_backward};

}  // namespace pararnn::detail
