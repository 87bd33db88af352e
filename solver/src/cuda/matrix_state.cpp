// The CUDA matrix-state family (ParaM2RNN), forward only: the family operations of
// newton/family.hpp on the device, step for step the CPU's cpu/matrix_state.cpp, driven by
// newton/driver.hpp: launch_m2rnn_residual for F, the gains and max|F|; launch_m2rnn_walk for δ;
// H += ωδ by cuBLAS axpy; the sequential kernel for the batch rows still at or above
// residual_atol when adaptive Newton does not converge. H [b][t][K·V] in the compute type, which
// is the trajectory layout. States whose W and two state buffers fit one block's shared memory
// (kernels::kM2rnnRowSharedLimit); api.cpp refuses larger ones.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/runtime.hpp"
#include "newton/driver.hpp"
#include "pararnn/kernels/m2rnn.hpp"

namespace pararnn::detail {

static_assert(kCudaM2rnnSharedBytes == kernels::kM2rnnRowSharedLimit);

namespace cuda {
namespace {

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
