// Internal to the solver: the input checks and residual gate shared by every backend, and the
// entry points of each backend. The public functions (api.cpp) validate, resolve the backend,
// call it and run the residual gate.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::detail {

// The arithmetic dtype of a storage dtype (core/dtype.hpp's ComputeOf at run time): f64 for f64,
// f32 for f32, f16 and bf16.
constexpr DType compute_dtype(DType storage) { return storage == DType::f64 ? DType::f64 : DType::f32; }

struct Layout {
  std::int64_t batch = 0, time = 0, d_h = 0, d_in = 0;
  std::vector<std::uint8_t> heads;           // [T]: 1 at t = 0 and at segment starts
  std::vector<std::int64_t> state_index;     // [T]: h0 row used at a head (-1: zeros / row b)
  bool packed = false;
};

Layout check_inputs(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                    const char* who, Device required = Device::cpu);
// The residual gate (CONTRACT §3). When it fires, the message also names the first non-finite
// value of the inputs (x, h0, a parameter) when there is one, so a NaN input is not reported as
// a bare "diverged: nan".
void residual_gate(const Cell& cell, const NewtonConfig& config, const NewtonStats& stats,
                   const TensorView& x, const ApplyOptions& options);
// The rules of a cotangent (newton_backward's grad_H, a rank's grad_H_chunk), named
// `argument`: the trajectory's shape, floating, finite.
void check_cotangent(const TensorView& grad_H, const Shape& trajectory, const char* argument);
// " The input is not finite: x holds nan at index (0, 3, 2)." or "" (host tensors only).
std::string non_finite_input_note(const Cell& cell, const TensorView& x, const ApplyOptions& options);

// CPU per-channel family (cpu/per_channel.cpp).
Tensor cpu_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                        const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor cpu_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                            Layout layout);
NewtonForward cpu_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                 const ApplyOptions& options, Layout layout);
NewtonGradients cpu_newton_backward(const Cell& cell, const TensorView& x,
                                    const NewtonForward& forward, const TensorView& grad_H,
                                    const NewtonConfig& config, const ApplyOptions& options,
                                    Layout layout);
double cpu_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                        const ApplyOptions& options, Layout layout);

// The training outputs every per-channel backend writes the same way (common.cpp): a gradient
// tensor from double sums, rounded once to the cell's compute dtype and then to its storage
// dtype; the recurrent tensors' gradients from per-(entry, channel) sums [R][d_h] (Σ over batch
// rows already taken), zero where |raw| > max_recurrent_norm (the clamp mask).
Tensor gradient_tensor(const Cell& cell, const Shape& shape, std::span<const double> values);
std::map<std::string, Tensor> recurrent_gradients(const Cell& cell, std::span<const double> sums);

// CPU backend of dense-Jacobian cells (cpu/dense.cpp; forward only).
NewtonForward dense_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                   const ApplyOptions& options, Layout layout);
NewtonGradients dense_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                      const TensorView& grad_H, const NewtonConfig& config,
                                      const ApplyOptions& options, Layout layout);
Tensor dense_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                          const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor dense_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                              Layout layout);
double dense_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                          const ApplyOptions& options, Layout layout);

// CPU backend of ParaRWKV7, the linear (G, U) cell (cpu/exact_linear.cpp; forward only, no
// Newton): `use_scan` = the exact (G, U) scan, else the sequential step loop; stats: iters 0,
// max_residual 0, scan_backend "rwkv7_scan" / "rwkv7_sequential", K 0.
NewtonForward rwkv7_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                   const ApplyOptions& options, Layout layout);
NewtonGradients rwkv7_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                      const TensorView& grad_H, const NewtonConfig& config,
                                      const ApplyOptions& options, Layout layout);
Tensor rwkv7_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout,
                   bool use_scan, NewtonStats& stats);
Tensor rwkv7_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                              Layout layout);
double rwkv7_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                          const ApplyOptions& options, Layout layout);
// CPU backend of ParaM2RNN (cpu/matrix_state.cpp; forward only, rectangular batches).
NewtonForward m2rnn_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                   const ApplyOptions& options, Layout layout);
NewtonGradients m2rnn_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                      const TensorView& grad_H, const NewtonConfig& config,
                                      const ApplyOptions& options, Layout layout);
Tensor m2rnn_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                          const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor m2rnn_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                              Layout layout);
double m2rnn_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                          const ApplyOptions& options, Layout layout);

// CUDA per-channel family (cuda/per_channel.cpp; without CUDA in the build, `cuda_backend_available` is false
// with the reason and the others throw UnsupportedPath).
bool cuda_backend_available(std::string* why_not = nullptr);
Tensor cuda_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                         const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor cuda_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                             Layout layout);
NewtonForward cuda_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                  const ApplyOptions& options, Layout layout);
NewtonGradients cuda_newton_backward(const Cell& cell, const TensorView& x,
                                     const NewtonForward& forward, const TensorView& grad_H,
                                     const NewtonConfig& config, const ApplyOptions& options,
                                     Layout layout);
// Windowed Newton (chunk_len) in one fused launch (kernels/windowed_newton.hpp): f32 and f64, a
// fixed K (max_iters, or the table's K with residual_atol unset), a window the kernel holds,
// no Picard guess, native coordinates. The trajectory, with `stats` of the window loop's
// meaning (iters = updates = K, the K evaluations of every window in residual_history, the worst
// window's final max|F|, strategy "fused_windowed"); with `out` (newton_apply_into, checked
// there) the trajectory is written into it, in place where it is a contiguous view of the
// compute type on the solve's device, and the tensor returned is empty. nullopt, `stats`
// untouched, where the path does not apply or where the window loop would have stopped early in
// some window (an evaluation non-finite or below residual_atol): the caller then runs the window
// loop (which overwrites all of `out`).
std::optional<Tensor> cuda_windowed_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                                 const ApplyOptions& options, Layout layout, const TensorView* out,
                                                 NewtonStats& stats);
// The same three writing their big output into a caller's view (solver.hpp's newton_apply_into,
// training.hpp's *_into: checked there for shape, dtype and aliasing) on the host or on the
// solve's device: H, H (forward.H left undefined) and ∇x (the gradients' x left undefined).
void cuda_newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                            const NewtonConfig& config, const ApplyOptions& options, Layout layout,
                            NewtonStats& stats);
NewtonForward cuda_newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                       const NewtonConfig& config, const ApplyOptions& options, Layout layout);
NewtonGradients cuda_newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                          const TensorView& grad_H, const TensorView& grad_x,
                                          const NewtonConfig& config, const ApplyOptions& options,
                                          Layout layout);
// A host tensor written into a device view of the same shape and dtype (any strides), on that
// view's device: one upload and one strided store. Returns when done.
void cuda_write_view(const TensorView& out, const Tensor& value, const char* argument);

// CUDA backend of dense-Jacobian cells (chain width N <= kernels::kDenseKernelMaxN = 32,
// cuda/dense.cpp) and of ParaRWKV7 (head_dim <= kernels::kDenseScanMaxN = 64,
// cuda/exact_linear.cpp), forward and training: the CPU dense / RWKV-7 backends' algorithms with
// the residual, the dense scan, the update, the sequential loop and the adjoint on the device.
// The public routing (api.cpp) refuses wider chains.
inline constexpr std::int64_t kCudaDenseMaxChainWidth = 32;
inline constexpr std::int64_t kCudaRwkv7MaxHeadDim = 64;
Tensor cuda_dense_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor cuda_dense_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout);
NewtonForward cuda_dense_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                        const ApplyOptions& options, Layout layout);
NewtonGradients cuda_dense_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                           const TensorView& grad_H, const NewtonConfig& config,
                                           const ApplyOptions& options, Layout layout);
// The _into forms of the dense, RWKV-7 and M2RNN families, as cuda_newton_apply_into's above:
// with x, grad_H and the outputs on the device, no O(B·T·d) byte crosses to the host.
void cuda_dense_newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                 const NewtonConfig& config, const ApplyOptions& options, Layout layout,
                                 NewtonStats& stats);
NewtonForward cuda_dense_newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                             const NewtonConfig& config, const ApplyOptions& options, Layout layout);
NewtonGradients cuda_dense_newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                                const TensorView& grad_H, const TensorView& grad_x,
                                                const NewtonConfig& config, const ApplyOptions& options,
                                                Layout layout);
// The exact (G, U) scan on the device; stats as rwkv7_apply's with scan_backend "rwkv7_scan_cuda".
Tensor cuda_rwkv7_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout,
                        NewtonStats& stats);
// The factorized step loop on the device (a block per (b, head), a thread per row of S).
Tensor cuda_rwkv7_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout);
NewtonForward cuda_rwkv7_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                        const ApplyOptions& options, Layout layout);
NewtonGradients cuda_rwkv7_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                           const TensorView& grad_H, const NewtonConfig& config,
                                           const ApplyOptions& options, Layout layout);
void cuda_rwkv7_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                          const NewtonConfig& config, const ApplyOptions& options, Layout layout,
                          NewtonStats& stats);
NewtonForward cuda_rwkv7_newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                             const NewtonConfig& config, const ApplyOptions& options, Layout layout);
NewtonGradients cuda_rwkv7_newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                                const TensorView& grad_H, const TensorView& grad_x,
                                                const NewtonConfig& config, const ApplyOptions& options,
                                                Layout layout);
// CUDA backend of ParaM2RNN (cuda/matrix_state.cpp), forward and training: the CPU M2RNN backend's
// algorithm with the residual, the factorized walk and the sequential loop on the device, for
// K x V states whose W and two state buffers, (2·K·V + V²) values of the compute type, fit one
// block's shared memory (kCudaM2rnnSharedBytes, kernels/m2rnn.hpp's limit); api.cpp refuses
// larger ones.
inline constexpr std::size_t kCudaM2rnnSharedBytes = 200 * 1024;
inline std::size_t cuda_m2rnn_shared_bytes(const Cell& cell) {
  const std::size_t k = static_cast<std::size_t>(cell.k_dim()), v = static_cast<std::size_t>(cell.v_dim());
  return (2 * k * v + v * v) * (cell.dtype() == DType::f64 ? 8 : 4);
}
Tensor cuda_m2rnn_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                               const ApplyOptions& options, Layout layout, NewtonStats& stats);
Tensor cuda_m2rnn_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                   Layout layout);
NewtonForward cuda_m2rnn_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                        const ApplyOptions& options, Layout layout);
NewtonGradients cuda_m2rnn_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                           const TensorView& grad_H, const NewtonConfig& config,
                                           const ApplyOptions& options, Layout layout);
void cuda_m2rnn_newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                 const NewtonConfig& config, const ApplyOptions& options, Layout layout,
                                 NewtonStats& stats);
NewtonForward cuda_m2rnn_newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                             const NewtonConfig& config, const ApplyOptions& options, Layout layout);
NewtonGradients cuda_m2rnn_newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                                const TensorView& grad_H, const TensorView& grad_x,
                                                const NewtonConfig& config, const ApplyOptions& options,
                                                Layout layout);

}  // namespace pararnn::detail
