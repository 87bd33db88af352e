// The CUDA dense-chain family (ParaHopfield, ParaGRU and ParaSLSTM mix='head', ParaSLSTM
// mix='dense'), forward only: the family operations of newton/family.hpp on the device, step for
// step the CPU's cpu/dense.cpp, driven by newton/driver.hpp.
//
// W_x x + b by cuBLAS in the compute type (f32 for f32/f16/bf16, f64 for f64) at each affine
// block's columns (square blocks are gates·d_h² wide), kept [b][t][gate_width]; the residual
// kernel (F, J, max|F| read back once per evaluation), launch_scan_dense of F with J (δ in
// place), H += ωδ by cuBLAS axpy; sLSTM's zero-hidden pass plus Picard passes by the dense
// sequential kernel's Picard mode. Internal layout chain-major [chain][t][N] as on the CPU; the
// result is scattered to the trajectory [b][t][slot][d_h] on the host, after one download, and
// rounded to storage there. The fallback re-solves the chains still at or above residual_atol, as
// the CPU does. sequential_apply runs the dense sequential kernel in the storage dtype, writing
// the trajectory layout directly. Chains of N <= kernels::kDenseKernelMaxN (32) values; api.cpp
// refuses wider ones before calling here.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/runtime.hpp"
#include "newton/driver.hpp"
#include "pararnn/kernels/dense_chain.hpp"
#include "pararnn/kernels/dense_residual.hpp"
#include "pararnn/kernels/dense_sequential.hpp"
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

 private:
  DeviceBuffer wx_, params_, offsets_, h0_, head_, h0_row_;
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
        a, residual_ws_.get(), residual_ws_.bytes(), kStream)));
    if (!reduce) return 0.0;
    ComputeT max_abs = 0;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(&max_abs, max_abs_.get(), sizeof(ComputeT), cudaMemcpyDeviceToHost, kStream));
    PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
    return static_cast<double>(max_abs);
  }

  const char* backend_name() const { return "cuda"; }
  std::string fallback_unit() const { return fmt::format("chain(s) of {} values", in_.n); }
  void zero_iterate() { PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), kStream)); }
  void iterate_from_residual() {
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, F_.get(), bytes(), cudaMemcpyDeviceToDevice, kStream));
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
    PARARNN_CUDA_CHECK((kernels::launch_dense_sequential<DenseMath, ComputeT>(a, kStream)));
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
                                             cudaMemcpyDeviceToDevice, kStream));
        });
  }

  // δ from (J, F) in place on F, then H += ω δ.
  void update(double omega) {
    PARARNN_CUDA_CHECK(kernels::launch_scan_dense<ComputeT>(scan_, scan_ws_.get(), scan_ws_.bytes(), kStream));
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

// The chain-major H (device, compute type) as the trajectory [b][t][slot][d_h] in the storage
// dtype: one download, the scatter on the host, one rounding (as the CPU's to_storage).
template <class ComputeT>
Tensor chain_major_to_trajectory(const Cell& cell, const Layout& L, const DeviceBuffer& H) {
  const std::int64_t n = cell.chain_width(), per_row = cell.chains_per_row();
  const std::int64_t chains = L.batch * per_row, state_row = cell.slots() * L.d_h;
  std::vector<ComputeT> chain_major(static_cast<std::size_t>(chains * L.time * n));
  if (!chain_major.empty())
    PARARNN_CUDA_CHECK(cudaMemcpy(chain_major.data(), H.get(), chain_major.size() * sizeof(ComputeT),
                                  cudaMemcpyDeviceToHost));
  Tensor trajectory(compute_dtype(cell.dtype()), cell.trajectory_shape(L.batch, L.time));
  auto* dst = trajectory.data_as<ComputeT>();
  for (std::int64_t chain = 0; chain < chains; ++chain) {
    const std::int64_t b = chain / per_row, q = chain % per_row;
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) offsets[static_cast<std::size_t>(i)] = cell.chain_element_offset(q, i);
    for (std::int64_t t = 0; t < L.time; ++t)
      for (std::int64_t i = 0; i < n; ++i)
        dst[(b * L.time + t) * state_row + offsets[static_cast<std::size_t>(i)]] =
            chain_major[static_cast<std::size_t>((chain * L.time + t) * n + i)];
  }
  return trajectory.dtype() == cell.dtype() ? trajectory : Tensor::converted(trajectory, cell.dtype());
}
}  // namespace
}  // namespace cuda

Tensor cuda_dense_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() {
    return cuda::dispatch_compute(cuda::compute_dtype(cell.dtype()), [&]<class ComputeT>() {
      const cuda::DenseDeviceInputs<ComputeT> inputs(cell, x, options, layout);
      cuda::DeviceBuffer H(cuda::checked_bytes(inputs.state_elems(), sizeof(ComputeT), "H"), "H");
      cuda::CudaDenseFamily<DenseMath, ComputeT> family(inputs, (cell.slots() - 1) * cell.chain_slot_width(),
                                                        H.as<ComputeT>());
      solve_newton(family, cell.spec(), cell.dtype(), config, layout.time, stats);
      return cuda::chain_major_to_trajectory<ComputeT>(cell, layout, H);
    });
  });
}

Tensor cuda_dense_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
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
      PARARNN_CUDA_CHECK((kernels::launch_dense_sequential<DenseMath, StorageT>(a, cuda::kStream)));
      return cuda::download_trajectory(H, cell.dtype(), cell, shape);
    });
  });
}
}  // namespace pararnn::detail
