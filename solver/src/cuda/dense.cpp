// The CUDA backend of dense-Jacobian cells (ParaHopfield, ParaGRU and ParaSLSTM mix='head',
// ParaSLSTM mix='dense'), of ParaRWKV7 and of ParaM2RNN (see M2rnnDeviceSolve), forward only: host orchestration of the kernels of
// kernels/dense_*.hpp, scan_dense.hpp and rwkv7_elements.hpp, step for step the CPU backends
// dense_backend.cpp and rwkv7_backend.cpp.
//
// Dense cells: W_x x + b by cuBLAS in the compute type (f32 for f32/f16/bf16, f64 for f64) at
// each affine block's columns (square blocks are gates·d_h² wide), kept [b][t][gate_width]; the
// App. A guess (the residual kernel at H = 0) or sLSTM's zero-hidden pass plus Picard passes
// (the dense sequential kernel's Picard mode, P from picard_passes); then run_newton_iterations
// (newton_loop.hpp) through a Driver over device state: launch_dense_residual (F, J, max|F| read
// back once per evaluation), launch_scan_dense of F with J (δ in place), H += ωδ by cuBLAS axpy.
// Internal layout chain-major [chain][t][N] as on the CPU; the result is scattered to the
// trajectory [b][t][slot][d_h] on the host, after one download, and rounded to storage there.
// Without convergence at k_max the whole problem is re-solved by the dense sequential kernel in
// the compute type (the CPU re-solves the chains still above residual_atol), with the CPU's
// warning, counting every chain. sequential_apply runs the dense sequential kernel in the storage
// dtype, writing the trajectory layout directly.
//
// RWKV-7: launch_rwkv7_elements (J_t = G_tᵀ, the drive rows, S_0 = step(S0)) then
// launch_scan_dense with rwkv7_scan_args, which leaves S in place in the trajectory layout; one
// download, rounded to storage once. Stats as the CPU's, scan_backend "rwkv7_scan_cuda". Its
// sequential_apply is launch_rwkv7_sequential (the step loop, rows rounded every step).
//
// Limits: chains of N <= kernels::kDenseKernelMaxN (32) values, RWKV-7 heads of d <=
// kernels::kDenseScanMaxN (64); api.cpp refuses wider ones before calling here.
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
#include "pararnn/kernels/m2rnn.hpp"
#include "pararnn/kernels/rwkv7_elements.hpp"
#include "pararnn/kernels/scan_dense.hpp"

namespace pararnn::detail {

static_assert(kCudaDenseMaxChainWidth == kernels::kDenseKernelMaxN);
static_assert(kCudaRwkv7MaxHeadDim == kernels::kDenseScanMaxN);
static_assert(kCudaM2rnnSharedBytes == kernels::kM2rnnRowSharedLimit);

namespace cuda {
namespace {

void require_available(const char* who) {
  std::string why;
  if (!cuda_backend_available(&why)) throw UnsupportedPath(fmt::format("{}: {}", who, why));
}

// W_x x + b on the device, [b][t][gate_width(cell)] in the compute type: the bias row, then one
// GEMM per affine block onto its columns (first_gate times the block width, as newton_loop.hpp's
// input_affine places them on the CPU).
DeviceBuffer device_input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t width = gate_width(cell), rows = L.batch * L.time;
  DeviceBuffer x_buffer;
  const void* x_device = contiguous_on_device(x, x_buffer, "x");
  std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
  std::vector<DeviceBuffer> weights;
  std::vector<DeviceAffine> blocks;
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t outputs = cell.affine_rows(block);
    const std::int64_t first = block.first_gate * (outputs / block.gates);
    const Tensor& weight = cell.parameter(std::string(block.weight));
    weights.push_back(upload_new(weight.data(), weight.nbytes(), "an input weight"));
    blocks.push_back({.weight = weights.back().get(), .first_column = first, .outputs = outputs,
                      .inputs = cell.affine_inputs(block)});
    const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
    std::copy(b.begin(), b.end(), bias_row.begin() + first);
  }
  const Tensor bias = Tensor::from_values(compute, {width}, bias_row);
  const DeviceBuffer bias_device = upload_new(bias.data(), bias.nbytes(), "the input biases");
  DeviceBuffer wx(checked_bytes(rows * width, dtype_size(compute), "W_x x"), "W_x x");
  input_affine(cell.dtype(), rows, L.d_in, width, bias_device.get(), x_device, blocks, wx.get());
  synchronize();  // x, the weights and the bias row are freed at return; the GEMM reads them
  return wx;
}

// h0 on the device in the compute type (empty without h0).
DeviceBuffer device_h0(const ApplyOptions& options, DType compute) {
  if (!options.h0) return {};
  const Tensor h0 = Tensor::converted(host_copy(*options.h0, "h0"), compute);
  return upload_new(h0.data(), h0.nbytes(), "h0");
}

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

// ParaM2RNN on the device: the CPU M2rnnSolver step for step (App. A guess as the residual at
// H = 0; run_newton_iterations with launch_m2rnn_residual for F, the gains and max|F|;
// launch_m2rnn_walk for δ; H += ωδ; the sequential kernel for the whole problem when adaptive
// Newton does not converge). H [b][t][K·V] in the compute type, which is the trajectory layout.
template <class ComputeT>
class M2rnnDeviceSolve {
 public:
  M2rnnDeviceSolve(const Cell& cell, const TensorView& x, const ApplyOptions& options, const Layout& L)
      : L_(L) {
    const DType compute = compute_dtype(cell.dtype());
    const std::int64_t KV = cell.k_dim() * cell.v_dim();
    wx_ = device_input_affine(cell, x, L);
    const Tensor W = Tensor::converted(cell.parameter("W"), compute);
    W_ = upload_new(W.data(), W.nbytes(), "W");
    if (options.h0) {
      h0_ = device_h0(options, compute);
    } else {  // the kernels read a zero h0
      h0_ = DeviceBuffer(checked_bytes(L.batch * KV, sizeof(ComputeT), "h0"), "a zero h0");
      PARARNN_CUDA_CHECK(cudaMemsetAsync(h0_.get(), 0, h0_.bytes(), kStream));
    }
    in_ = {.wx = wx_.as<ComputeT>(), .W = W_.as<ComputeT>(), .h0 = h0_.as<ComputeT>(), .batch = L.batch,
           .time = L.time, .k = static_cast<int>(cell.k_dim()), .v = static_cast<int>(cell.v_dim())};
    n_ = L.batch * L.time * KV;
    synchronize();  // the host W is freed at return
  }

  const kernels::M2rnnInputs<ComputeT>& inputs() const { return in_; }
  std::int64_t size() const { return n_; }

  // The Newton solve into H (device, compute type) by the driver (newton/driver.hpp).
  void newton(const Cell& cell, const NewtonConfig& config, ComputeT* H, NewtonStats& stats) {
    H_ = H;
    F_ = DeviceBuffer(checked_bytes(n_, sizeof(ComputeT), "F"), "the residual F");
    G_ = DeviceBuffer(checked_bytes(n_, sizeof(ComputeT), "G"), "the gains G");
    ws_ = DeviceBuffer(kernels::m2rnn_residual_workspace_bytes<ComputeT>(), "the max|F| partials");
    max_abs_ = DeviceBuffer(sizeof(ComputeT), "max|F|");
    solve_newton(*this, cell.spec(), cell.dtype(), config, L_.time, stats);
  }

  // The family operations (newton/family.hpp); the "Jacobian" is the gains G.
  const char* backend_name() const { return "cuda"; }
  std::string fallback_unit() const { return fmt::format("batch row(s) of {}x{} states", in_.k, in_.v); }
  void zero_iterate() { PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), kStream)); }
  void iterate_from_residual() {
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, F_.get(), bytes(), cudaMemcpyDeviceToDevice, kStream));
  }
  void picard_guess(std::int64_t) { throw Error("ParaM2RNN has no Picard guess"); }
  // The batch rows still at or above atol get the sequential solution (a row is contiguous).
  std::int64_t sequential_fallback(double atol) {
    const std::int64_t row = L_.time * in_.k * in_.v;
    return sequential_fallback_units<ComputeT>(
        F_, n_, L_.batch, atol, [&](std::int64_t i) { return i / row; }, H_,
        [&](ComputeT* target) { PARARNN_CUDA_CHECK(kernels::launch_m2rnn_sequential<ComputeT>(in_, target, kStream)); },
        [&](std::int64_t b, const ComputeT* scratch) {
          PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_ + b * row, scratch + b * row, static_cast<std::size_t>(row) * sizeof(ComputeT),
                                             cudaMemcpyDeviceToDevice, kStream));
        });
  }
  double evaluate(bool with_gains, bool reduce) {
    const kernels::M2rnnResidualArgs<ComputeT> a{.in = in_, .H = H_, .residual = F_.as<ComputeT>(),
                                                 .gain = with_gains ? G_.as<ComputeT>() : nullptr,
                                                 .max_abs_residual = reduce ? max_abs_.as<ComputeT>() : nullptr};
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_residual<ComputeT>(a, ws_.get(), ws_.bytes(), kStream));
    if (!reduce) return 0.0;
    ComputeT max_abs = 0;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(&max_abs, max_abs_.get(), sizeof(ComputeT), cudaMemcpyDeviceToHost, kStream));
    PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
    return static_cast<double>(max_abs);
  }

  void update(double omega) {
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_walk<ComputeT>(in_, G_.as<ComputeT>(), F_.as<ComputeT>(), kStream));
    const ComputeT w = static_cast<ComputeT>(omega);
    if constexpr (std::is_same_v<ComputeT, double>) {
      PARARNN_CUBLAS_CHECK(cublasDaxpy_64(cublas_handle(), n_, &w, F_.as<double>(), 1, H_, 1));
    } else {
      PARARNN_CUBLAS_CHECK(cublasSaxpy_64(cublas_handle(), n_, &w, F_.as<float>(), 1, H_, 1));
    }
  }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(ComputeT); }

  const Layout& L_;
  DeviceBuffer wx_, W_, h0_, F_, G_, ws_, max_abs_;
  kernels::M2rnnInputs<ComputeT> in_{};
  std::int64_t n_ = 0;
  ComputeT* H_ = nullptr;
};

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

Tensor cuda_m2rnn_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H(cuda::checked_bytes(solve.size(), sizeof(ComputeT), "H"), "H");
    solve.newton(cell, config, H.as<ComputeT>(), stats);
    return cuda::download_trajectory(H, compute, cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}

Tensor cuda_m2rnn_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  return cuda::dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
    using ComputeT = kernels::ComputeOf<StorageT>;
    const cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H(cuda::checked_bytes(solve.size(), sizeof(StorageT), "H"), "H");
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_sequential<StorageT>(solve.inputs(), H.as<StorageT>(), cuda::kStream));
    return cuda::download_trajectory(H, cell.dtype(), cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}

}  // namespace pararnn::detail
