// The CUDA matrix-state family (ParaM2RNN): the family operations of
// newton/family.hpp on the device, step for step the CPU's cpu/matrix_state.cpp, driven by
// newton/driver.hpp: launch_m2rnn_residual for F, the gains and max|F|; launch_m2rnn_walk for δ;
// H += ωδ by cuBLAS axpy; the sequential kernel for the batch rows still at or above
// residual_atol when adaptive Newton does not converge. H [b][t][K·V] in the compute type, which
// is the trajectory layout. States whose W and two state buffers fit one block's shared memory
// (kernels::kM2rnnRowSharedLimit); api.cpp refuses larger ones.
//
// Training: newton_forward keeps H* in the compute type on the device (the CPU's saved
// trajectory); the backward is the CPU's implicit adjoint in double on the device: the gains at H* by the residual
// kernel, μ by the reverse walk μ_t = g_t + J_{t+1}ᵀ[μ_{t+1}] (a block per row; ∇h0 = J_0ᵀ[μ_0]),
// M2rnnMath::vjp at every (b, t) in parallel, ∇W summed over rows and chunks in a fixed order on
// the device (sum_rows_on_device), and the input affine's backward by cuBLAS (runtime.hpp). The walk keeps its state
// in double, so training takes states whose W and two buffers fit in double
// (kernels::m2rnn_fits_on_gpu(k, v, 8)); larger ones raise UnsupportedPath naming the sizes.
// newton_backtrack stays CPU-only (api.cpp). H and ∇x are handed over by deliver_trajectory /
// deliver_input_gradient: into the caller's views on the device where given, so that with device
// x, grad_H and outputs only parameters, their gradients and the stats cross.
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
      PARARNN_CUDA_CHECK(cudaMemsetAsync(h0_.get(), 0, h0_.bytes(), current_stream()));
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
    static_assert(NewtonFamily<M2rnnDeviceSolve>);
    solve_newton(*this, cell.spec(), cell.dtype(), config, L_.time, stats);
  }

  // The family operations (newton/family.hpp); the "Jacobian" is the gains G.
  SolveBackend backend() const { return SolveBackend::cuda; }
  std::string fallback_unit() const { return fmt::format("batch row(s) of {}x{} states", in_.k, in_.v); }
  void zero_iterate() { PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), current_stream())); }
  void iterate_from_residual() {
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, F_.get(), bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  }
  void picard_guess(std::int64_t) { throw Error("ParaM2RNN has no Picard guess"); }
  // The batch rows still at or above atol get the sequential solution (a row is contiguous).
  std::int64_t sequential_fallback(double atol) {
    const std::int64_t row = L_.time * in_.k * in_.v;
    return sequential_fallback_units<ComputeT>(
        F_, n_, L_.batch, atol, [&](std::int64_t i) { return i / row; }, H_,
        [&](ComputeT* target) { PARARNN_CUDA_CHECK(kernels::launch_m2rnn_sequential<ComputeT>(in_, target, current_stream())); },
        [&](std::int64_t b, const ComputeT* scratch) {
          PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_ + b * row, scratch + b * row, static_cast<std::size_t>(row) * sizeof(ComputeT),
                                             cudaMemcpyDeviceToDevice, current_stream()));
        });
  }
  double evaluate(bool with_gains, bool reduce) {
    const kernels::M2rnnResidualArgs<ComputeT> a{.in = in_, .H = H_, .residual = F_.as<ComputeT>(),
                                                 .gain = with_gains ? G_.as<ComputeT>() : nullptr,
                                                 .max_abs_residual = reduce ? max_abs_.as<ComputeT>() : nullptr};
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_residual<ComputeT>(a, ws_.get(), ws_.bytes(), current_stream()));
    if (!reduce) return 0.0;
    ComputeT max_abs = 0;
    copy_to_host(&max_abs, max_abs_.get(), sizeof(ComputeT));
    return static_cast<double>(max_abs);
  }

  void update(double omega) {
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_walk<ComputeT>(in_, G_.as<ComputeT>(), F_.as<ComputeT>(), current_stream()));
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

// UnsupportedPath naming `who` unless the adjoint walk's double state fits a block.
void require_adjoint_fits(const Cell& cell, const char* who) {
  const int k = static_cast<int>(cell.k_dim()), v = static_cast<int>(cell.v_dim());
  if (!kernels::m2rnn_fits_on_gpu(k, v, sizeof(double)))
    throw UnsupportedPath(fmt::format("{}: the CUDA M2RNN adjoint walk keeps W and two {} x {} states in double, "
                                      "{} bytes, in one block's shared memory, which takes at most {}; use "
                                      "scan_backend=cpu with host tensors",
                                      who, k, v, (2 * k * v + v * v) * sizeof(double), kernels::kM2rnnRowSharedLimit));
}

// The implicit adjoint at H* (compute type on the device); see the file comment.
template <class ComputeT>
NewtonGradients m2rnn_adjoint(const Cell& cell, const Layout& L, const M2rnnDeviceSolve<ComputeT>& solve,
                              const ComputeT* H, const TensorView& x, const TensorView& grad_H,
                              const ApplyOptions& options, const TensorView* grad_x) {
  const DType compute = compute_dtype(cell.dtype());
  const kernels::M2rnnInputs<ComputeT>& in = solve.inputs();
  const std::int64_t KV = static_cast<std::int64_t>(in.k) * in.v, VV = static_cast<std::int64_t>(in.v) * in.v;
  const std::int64_t width = in.k + in.v + 1, n = solve.size();
  DeviceBuffer wx64, W64, h064, H64;
  const kernels::M2rnnInputs<double> in64{
      .wx = as_f64<ComputeT>(in.wx, L.batch * L.time * width, wx64, "W_x x (f64)"),
      .W = as_f64<ComputeT>(in.W, VV, W64, "W (f64)"), .h0 = as_f64<ComputeT>(in.h0, L.batch * KV, h064, "h0 (f64)"),
      .batch = in.batch, .time = in.time, .k = in.k, .v = in.v};
  const double* H_f64 = as_f64<ComputeT>(H, n, H64, "H* (f64)");
  // The gains at H*, then μ by the reverse walk (∇h0 from its last step).
  DeviceBuffer F(checked_bytes(n, sizeof(double), "F (f64)"), "F (f64)");
  DeviceBuffer G(checked_bytes(n, sizeof(double), "G (f64)"), "the gains G (f64)");
  const kernels::M2rnnResidualArgs<double> r{.in = in64, .H = H_f64, .residual = F.as<double>(), .gain = G.as<double>()};
  PARARNN_CUDA_CHECK(kernels::launch_m2rnn_residual<double>(r, nullptr, 0, current_stream()));
  DeviceBuffer mu = owned_f64_on_device(grad_H, "the adjoint μ");  // the walk runs in place
  DeviceBuffer d_h0;
  if (options.h0) d_h0 = DeviceBuffer(checked_bytes(L.batch * KV, sizeof(double), "∇h0"), "∇h0");
  const kernels::M2rnnAdjointArgs walk{.in = in64, .gain = G.as<double>(), .mu = mu.as<double>(),
                                       .d_h0 = options.h0 ? d_h0.as<double>() : nullptr};
  PARARNN_CUDA_CHECK(kernels::launch_m2rnn_adjoint_walk(walk, current_stream()));
  // The per-step VJPs.
  const std::int64_t chunks = kernels::vjp_chunks(L.batch, L.time);
  DeviceBuffer d_wx(checked_bytes(L.batch * L.time * width, sizeof(ComputeT), "d W_x x"), "d W_x x");
  DeviceBuffer partials(checked_bytes(L.batch * chunks * VV, sizeof(double), "∇W partials"), "∇W partials");
  DeviceBuffer ws(kernels::m2rnn_vjp_workspace_bytes(in64), "the M2RNN VJP scratch");
  const kernels::M2rnnVjpArgs<ComputeT> v{.in = in64, .H = H_f64, .mu = mu.as<double>(), .d_wx = d_wx.as<ComputeT>(),
                                          .dW_partials = partials.as<double>()};
  PARARNN_CUDA_CHECK(kernels::launch_m2rnn_vjp<ComputeT>(v, ws.get(), ws.bytes(), current_stream()));
  NewtonGradients out;
  out.parameters.emplace("W", gradient_tensor(cell, cell.parameter("W").shape(),
                                              cuda::sum_rows_on_device(partials.as<double>(), L.batch * chunks, VV, "∇W")));
  const DeviceBuffer dx = input_affine_backward<ComputeT>(cell, L, x, d_wx.as<ComputeT>(), out);
  deliver_input_gradient(dx.get(), compute, cell, L, grad_x, out);
  if (options.h0) out.h0 = gradient_tensor(cell, options.h0->shape(), download_vector<double>(d_h0, L.batch * KV));
  return out;
}
}  // namespace
}  // namespace cuda

namespace {

// newton_apply / newton_apply_into: H returned as a new host tensor (out null) or stored into *out.
Tensor m2rnn_apply(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                   const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_available("newton_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "out");
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H(cuda::checked_bytes(solve.size(), sizeof(ComputeT), "H"), "H");
    solve.newton(cell, config, H.as<ComputeT>(), stats);
    return cuda::deliver_trajectory(H.get(), compute, cell, cell.trajectory_shape(layout.batch, layout.time), out,
                                    "out");
  });
}

// newton_forward / newton_forward_into: H* kept on the device (unless recompute).
NewtonForward m2rnn_forward(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                            const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_forward on the CUDA backend");
  cuda::require_adjoint_fits(cell, "newton_forward");
  cuda::SolveScope scope(x, options);
  if (out) cuda::check_store_target(*out, "H_out");
  const DType compute = cuda::compute_dtype(cell.dtype());
  NewtonForward forward;
  cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H(cuda::checked_bytes(solve.size(), sizeof(ComputeT), "H"), "H");
    solve.newton(cell, config, H.as<ComputeT>(), forward.stats);
    const Shape shape = cell.trajectory_shape(layout.batch, layout.time);
    forward.H = cuda::deliver_trajectory(H.get(), compute, cell, shape, out, "H_out");
    if (!config.recompute) forward.saved_trajectory = cuda::saved_on_device(std::move(H), compute, shape);
  });
  return forward;
}

// newton_backward / newton_backward_into: ∇x returned in the gradients (grad_x null) or stored into *grad_x.
NewtonGradients m2rnn_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                               const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout) {
  cuda::require_available("newton_backward on the CUDA backend");
  cuda::require_adjoint_fits(cell, "newton_backward");
  cuda::SolveScope scope(x, options);
  if (grad_x) cuda::check_store_target(*grad_x, "grad_x");
  const DType compute = cuda::compute_dtype(cell.dtype());
  return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
    cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H;
    const void* H_star = cuda::saved_on_current_device(forward, compute, solve.size(), H);
    if (!H_star) {  // recompute: the forward's solve again (deterministic: the same bits)
      H = cuda::DeviceBuffer(cuda::checked_bytes(solve.size(), sizeof(ComputeT), "H"), "H");
      NewtonStats stats;
      solve.newton(cell, config, H.as<ComputeT>(), stats);
      H_star = H.get();
    }
    return cuda::m2rnn_adjoint<ComputeT>(cell, layout, solve, static_cast<const ComputeT*>(H_star), x, grad_H, options,
                                         grad_x);
  });
}

Tensor m2rnn_sequential_on_device(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::SolveScope scope(x, options);
  return cuda::dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
    using ComputeT = kernels::ComputeOf<StorageT>;
    const cuda::M2rnnDeviceSolve<ComputeT> solve(cell, x, options, layout);
    cuda::DeviceBuffer H(cuda::checked_bytes(solve.size(), sizeof(StorageT), "H"), "H");
    PARARNN_CUDA_CHECK(kernels::launch_m2rnn_sequential<StorageT>(solve.inputs(), H.as<StorageT>(), cuda::current_stream()));
    return cuda::download_trajectory(H, cell.dtype(), cell, cell.trajectory_shape(layout.batch, layout.time));
  });
}

// ParaM2RNN's input rules, and states whose walk (W and two K x V states) fits one block's
// shared memory.
void supports_m2rnn_on_device(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                              const char* who) {
  check_matrix_state_inputs(cell, config, options, who);
  if (cuda_m2rnn_shared_bytes(cell) > kCudaM2rnnSharedBytes)
    throw UnsupportedPath(fmt::format("{}: cell '{}' has a {} x {} state; the CUDA M2RNN walk keeps W and two "
                                      "states, {} bytes, in one block's shared memory, which takes at most {}; "
                                      "use scan_backend=cpu with host tensors",
                                      who, cell.name(), cell.k_dim(), cell.v_dim(), cuda_m2rnn_shared_bytes(cell),
                                      kCudaM2rnnSharedBytes));
  refuse_cpu_only_options(config, who);
}

}  // namespace

const FamilyBackend kCudaMatrixState{.name = "cuda matrix_map",
                                     .serves = {Capability::newton, Capability::sequential, Capability::training},
                                     .supports = supports_m2rnn_on_device,
                                     .newton = m2rnn_apply,
                                     .sequential = m2rnn_sequential_on_device,
                                     .forward = m2rnn_forward,
                                     .backward = m2rnn_backward};

}  // namespace pararnn::detail
