// Training: the forward that keeps what the backward needs, and the implicit adjoint backward
// (CONTRACT §1), on the CPU backend and, for the per-channel cells, the CUDA backend
// (NewtonConfig::scan_backend; docs/cuda.md).
//
// Guarantees: `newton_backward` returns the gradients of L = Σ grad_H ⊙ H at the converged
// trajectory H*: μ_t = g_t + J_{t+1}ᵀ μ_{t+1} (J = 0 across packed segment boundaries), then
// Σ_t VJP of f at (h_prev_t, x_t) with cotangent μ_t for W_x, its bias, the recurrent vectors
// (zero where |raw| > max_recurrent_norm: the clamp mask) and x, and ∇h0 = J_0ᵀ μ_0 (per
// segment when packed). With `NewtonConfig::recompute = true` the forward keeps nothing of H*
// and the backward re-solves it with the same configuration; outputs and gradients are bitwise
// those of `recompute = false`. Memory held between forward and backward: B·T·slots·d_h values
// of the compute type (4 bytes for f32/f16/bf16, 8 for f64) without recompute, none with it;
// host memory for a CPU forward; a CUDA forward keeps them on its device (no download and
// re-upload), a per-channel cell's together with the forward's gate pre-activations W_x x
// (B·T·gates·d_h more values), which its backward on that device reads in place (no second input
// GEMM; on another device it computes W_x x again). saved_bytes() counts everything held.
// The backward takes the forward of the same cell (same parameters) and the same x values: what
// it holds (H*, and on CUDA W_x x) is not recomputed from them; a forward of another shape or
// dtype is refused (ContractViolation naming `forward`), changed values are not detected.
// CUDA graphs: a fixed-K newton_forward_into + newton_backward_into of a per-channel cell on
// device tensors, views and targets (ApplyOptions::parameters, ::parameter_gradients) can be
// captured from ApplyOptions::cuda_stream after a warm-up call; a replay is the uncaptured calls
// on the buffers' values then, bit for bit; the forward's stats say outcome_on_device, and the
// residual gate sets H to NaN instead of raising. What needs a read back is refused
// (UnsupportedPath naming the capture; docs/cuda.md, "CUDA graphs").
// Example:
//   NewtonForward fwd = newton_forward(cell, x, config);
//   NewtonGradients grads = newton_backward(cell, x, fwd, ones_like(fwd.H), config);
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "pararnn/solver/solver.hpp"

namespace pararnn {

// H* in the compute type, held by the forward for the backward: a host tensor, or device memory
// of the backend that made it (opaque here; every backward can read it through host()).
class SavedTrajectory {
 public:
  virtual ~SavedTrajectory() = default;
  virtual std::size_t bytes() const = 0;  // everything held (H*, and what a backend keeps beside it)
  // H* as a contiguous host tensor of the compute type (a device holder downloads it).
  virtual Tensor host() const = 0;
};

// A SavedTrajectory held in host memory.
std::shared_ptr<const SavedTrajectory> saved_on_host(Tensor trajectory);

struct NewtonForward {
  Tensor H;  // the trajectory, storage dtype
  NewtonStats stats;
  // Null with recompute (the backward re-solves it).
  std::shared_ptr<const SavedTrajectory> saved_trajectory;
  std::size_t saved_bytes() const { return saved_trajectory ? saved_trajectory->bytes() : 0; }
};

// `parameters` holds every parameter's gradient except those written into the caller's views
// ApplyOptions::parameter_gradients, whose names are in `written` (solver.hpp).
struct NewtonGradients {
  Tensor x;                                  // (B, T, d_in), storage dtype
  std::optional<Tensor> h0;                  // the shape of the given h0 (absent without h0)
  std::map<std::string, Tensor> parameters;  // state_dict name -> gradient, storage dtype
  std::set<std::string> written;             // names whose gradient is in parameter_gradients
};

[[nodiscard]] NewtonForward newton_forward(const Cell& cell, const TensorView& x,
                                           const NewtonConfig& config = {},
                                           const ApplyOptions& options = {});

// `grad_H` has the trajectory's shape (any floating dtype, any strides).
[[nodiscard]] NewtonGradients newton_backward(const Cell& cell, const TensorView& x,
                                              const NewtonForward& forward,
                                              const TensorView& grad_H,
                                              const NewtonConfig& config = {},
                                              const ApplyOptions& options = {});

// The two with their big outputs written into caller views, as newton_apply_into (solver.hpp)
// writes H: same bits, same checks (`H_out` / `grad_x` named in the errors; neither may share a
// byte with x, h0, cu_seqlens or grad_H), on the host or on the solve's CUDA device. With x,
// grad_H and the outputs on the device, the CUDA forward and backward of every family move only
// the parameters, their gradients (O(parameters)) and the stats: H* stays on the device.
// newton_forward_into leaves forward.H undefined, except with window_len windows (their backward
// re-solves each window from the boundary states forward.H holds); newton_backward_into leaves
// the returned gradients' x undefined (∇x is in `grad_x`: x's shape, the cell's dtype; the CUDA
// backward computes it straight into a contiguous compute-type `grad_x`). On any exception the
// contents of `H_out` / `grad_x` are unspecified.
[[nodiscard]] NewtonForward newton_forward_into(const Cell& cell, const TensorView& x,
                                                const TensorView& H_out,
                                                const NewtonConfig& config = {},
                                                const ApplyOptions& options = {});
[[nodiscard]] NewtonGradients newton_backward_into(const Cell& cell, const TensorView& x,
                                                   const NewtonForward& forward,
                                                   const TensorView& grad_H, const TensorView& grad_x,
                                                   const NewtonConfig& config = {},
                                                   const ApplyOptions& options = {});

}  // namespace pararnn
