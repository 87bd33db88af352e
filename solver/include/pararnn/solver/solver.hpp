// The production solver's entry points: parallel Newton (`newton_apply`) and the same-dtype
// sequential loop (`sequential_apply`), on the CPU backend.
//
// Guarantees (docs/numerics-contract.md): inputs are storage-dtype tensors (f64, f32, f16,
// bf16) with any strides; arithmetic is f64 for f64 and f32 otherwise; outputs are contiguous
// trajectories in the storage dtype, (B, T, d_h) or (B, T, slots, d_h) (RWKV-7: (B, T, n_heads, d, d),
// an exact (G, U) scan without Newton). Newton starts from the
// App. A guess, solves δ_t = J_t δ_{t−1} + F_t by a scan, and runs the residual gate after every
// solve (NewtonDivergenceError above residual_fail, warning `newton_residual_high` above 1e-3).
// Packed input (cu_seqlens) restarts the state at every segment start. Example:
//   NewtonStats stats;
//   Tensor H = newton_apply(cell, x, NewtonConfig{}, {}, &stats);
//   Tensor H_seq = sequential_apply(cell, x);
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/tensor.hpp"
#include "pararnn/solver/newton_config.hpp"

namespace pararnn {

// Where the CUDA backend takes its device memory from: the caller's allocator (torch's caching
// allocator, say), so that two libraries in one process never starve each other. Every device
// buffer of a CUDA solve, forward or backward (workspaces, W_x x, the iterates, the saved
// trajectory a NewtonForward keeps, outputs the backend allocates) comes from `allocate` and goes
// back through `deallocate`, on the stream that is current for the solve (ApplyOptions::
// cuda_stream, else the per-thread default stream): memory freed on that stream may be reused
// there at once, as stream-ordered allocators do. A buffer that outlives its call (the saved
// trajectory) holds a share of the allocator and is freed through it. `allocate` returns the
// memory, or throws / returns null when it cannot (the backend then throws pararnn::Error naming
// `name`, the bytes and what they were for). Unset (ApplyOptions::cuda_allocator null): the
// backend's own stream-ordered pool (cuda_release_cached_memory). Not used: cuBLAS's and
// cuBLASLt's own per-thread workspaces (made once, freed by cuda_shutdown) and CudaDecoder's
// parameters. Example (a counting cudaMalloc):
//   auto a = std::make_shared<DeviceAllocator>(DeviceAllocator{.name = "mine",
//       .allocate = [](std::size_t n, int, void*) { void* p; return cudaMalloc(&p, n) ? nullptr : p; },
//       .deallocate = [](void* p, std::size_t, int, void*) { cudaFree(p); }});
//   newton_apply_into(cell, x, out, {}, {.cuda_allocator = a});
struct DeviceAllocator {
  std::string name;
  std::function<void*(std::size_t bytes, int device, void* stream)> allocate;
  std::function<void(void* data, std::size_t bytes, int device, void* stream)> deallocate;
};

struct ApplyOptions {
  std::optional<TensorView> h0;          // (B, slots, d_h), or (B, d_h) for one-slot cells
  std::optional<TensorView> cu_seqlens;  // (S+1,) int32/int64; then B = 1 and h0 is (S, ...)
  // The CUDA stream a CUDA solve runs on (a cudaStream_t: the caller's, e.g. torch's current
  // stream; nullptr names the legacy default stream). Unset: the per-thread default stream
  // (cudaStreamPerThread), which is ordered with work on the legacy default stream; the backend
  // never uses the legacy default stream unless named here. Either way the call returns when its
  // work on that stream is done. Ignored by the CPU backend.
  std::optional<void*> cuda_stream;
  // The CUDA backend's device memory (DeviceAllocator); null: its own stream-ordered pool.
  std::shared_ptr<const DeviceAllocator> cuda_allocator;
  // The cell's parameter values where they live now, by the Cell's names (e.g. a torch module's
  // CUDA tensors through DLPack): a CUDA solve of a per-channel cell (cuda_reads_parameter_views)
  // reads each view in place, forward and backward, instead of the Cell's own value of that name,
  // which then gives only the structure (shape, dtype, the clamp's cap): no value crosses through
  // the host, and a value changed on the device is the one solved with. A name not given is read
  // from the Cell. Each view must name a parameter of the cell, have its shape and the cell's
  // dtype, be contiguous and on the solve's device; else ContractViolation naming
  // "parameters['name']" before any work. Any other path (the CPU backend, the dense and
  // matrix-state families, sequential_apply) refuses views with UnsupportedPath. The same views
  // must be given to newton_backward as to its newton_forward (their values unchanged between).
  std::map<std::string, TensorView> parameters;
  // Where newton_backward (and newton_backward_into) write parameter gradients, by the Cell's
  // names (e.g. fresh torch CUDA tensors an autograd backward returns): each view must name a
  // parameter of the cell, have its shape and the cell's dtype, be contiguous, on the host or
  // the solve's CUDA device, and share no byte with another target, x, grad_H, grad_x, h0,
  // cu_seqlens or a parameters view; else ContractViolation naming "parameter_gradients['name']"
  // before any work (a CUDA target of a CUDA solve on the solve's device). The gradient has the
  // bits NewtonGradients::parameters would hold (a NaN in an f16/bf16 device target is CUDA's
  // canonical NaN, as for newton_apply_into's `out`); the
  // name is then in NewtonGradients::written and not in ::parameters. The CUDA per-channel
  // backward reduces and rounds it on the device straight into a device target (no value
  // crosses the host, no wait); every other path writes its host gradient into the target, on
  // the caller's stream (cuda_stream).
  // Ignored by the forward and the solves.
  std::map<std::string, TensorView> parameter_gradients;
  // The call neither waits for its stream nor reads a value back, as under a CUDA graph capture
  // (docs/cuda.md, "CUDA graphs"): a fixed K's outcome stays on the device
  // (NewtonStats::outcome_on_device), the residual gate sets H to NaN instead of raising, and the
  // call returns once its work is queued (its outputs are ready when the stream gets there; the
  // inputs must stay unchanged until then). The CUDA per-channel family only (elsewhere
  // ContractViolation naming `sync_free`); what needs a read back (an adaptive K, host outputs,
  // ∇h0) is refused with UnsupportedPath naming `sync_free`. Give newton_backward the same (Python: the forward's).
  bool sync_free = false;
};

// Whether a CUDA solve of `cell` reads ApplyOptions::parameters (the per-channel cells with CUDA
// Newton kernels); false for the others and without a usable CUDA backend.
bool cuda_reads_parameter_views(const Cell& cell);

[[nodiscard]] Tensor newton_apply(const Cell& cell, const TensorView& x,
                                  const NewtonConfig& config = {},
                                  const ApplyOptions& options = {}, NewtonStats* stats = nullptr);

// newton_apply writing H into the caller's `out` instead of a new host tensor: `out` has the
// trajectory's shape and the cell's storage dtype, any strides (no two elements at one address,
// no byte shared with x, h0 or cu_seqlens), on the host or on a CUDA device: the solve's device
// for a CUDA solve (x's, h0's or the current one). With x and out on the device, a CUDA solve
// moves no O(B·T·d) byte through the host (the per-channel one solves straight into `out` when
// `out` is contiguous f32 or f64; the other families store their result into it on the device);
// the CPU backend and window_len windows outside the fused windowed launch solve as newton_apply
// does and copy H into `out`.
// Same H bits, stats and residual gate as newton_apply (one exception: a NaN that reaches an
// f16/bf16 device `out`, possible only with the gate off, is CUDA's canonical NaN, where the host
// conversion keeps the sign and Eigen's quiet-NaN pattern); returns when H is in `out` (the CUDA
// solve's stream, ApplyOptions::cuda_stream, is synchronised, also when an error is thrown). ContractViolation naming `out` for a wrong
// shape, dtype, overlap or aliasing, before any work; on any exception `out`'s contents are
// unspecified. Example (a torch CUDA tensor through DLPack):
//   newton_apply_into(cell, x_device, H_device, NewtonConfig{}, {}, &stats);
void newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                       const NewtonConfig& config = {}, const ApplyOptions& options = {},
                       NewtonStats* stats = nullptr);

[[nodiscard]] Tensor sequential_apply(const Cell& cell, const TensorView& x,
                                      const ApplyOptions& options = {});
// The same loop on an explicit backend (cpu, or cuda: one thread per chain on the GPU).
[[nodiscard]] Tensor sequential_apply(const Cell& cell, const TensorView& x, ScanBackend backend,
                                      const ApplyOptions& options = {});

// The CUDA backend's auto rule (docs/cuda.md "The auto rule"): an adaptive solve (max_iters
// unset, NewtonConfig::allow_sequential) of a per-channel cell with at least this many chains
// (B·d_h) on CUDA device `device` is the sequential kernel's solution in the compute type
// instead of Newton (NewtonStats::strategy "sequential"). INT64_MAX for a cell the rule does not
// cover (the dense, matrix-state and exact linear families); UnsupportedPath without a usable
// CUDA device.
std::int64_t cuda_sequential_min_chains(const Cell& cell, int device = 0);

// The CUDA backend keeps the device memory its solves free (their temporaries: W_x x, the
// iterates, the backward's f64 buffers) in a pool of its own for the next solve, as torch's
// caching allocator does; this waits for the backend's work on CUDA device `device` and returns
// that memory to the device (for another library's allocations). ContractViolation for a device
// that does not exist; UnsupportedPath without a usable CUDA device; nothing to do on a device
// the backend has not used.
void cuda_release_cached_memory(int device = 0);
// The bytes that pool holds on `device` beyond the buffers alive now (0 on a device the backend
// has not used); the same errors.
std::size_t cuda_cached_memory(int device = 0);

// Releases what the CUDA backend keeps for the process's life (the cuBLAS and cuBLASLt handles
// and workspaces of every thread, the memory pools), after every device's work is done; a later
// solve makes them again. Process exit does the same (before the CUDA runtime's teardown), so a
// program embedding the library leaves no device allocation behind (compute-sanitizer's leak
// check). Call it where no solve runs on another thread. Never throws; nothing to do without the
// CUDA backend.
void cuda_shutdown();

// The bytes the CUDA backend has moved between host and device since the process started
// (every host<->device copy of this backend is counted, in both directions, on every device): a
// solve or training step on device tensors moves O(parameters + B·d_h) bytes (weights, per-channel
// values, h0, the per-iteration residual maxima and the parameter gradients), never
// O(B·T·d_h), in every dtype. Zeros without the CUDA backend in the build.
// `host_reads` counts the device-to-host copies (each waits for the stream) and `stream_syncs`
// every wait of the host for a stream of the backend (host reads included): a step's count of
// both is what tests and benchmarks compare before and after.
struct CudaTransferBytes {
  std::uint64_t to_device = 0, to_host = 0;
  std::uint64_t host_reads = 0, stream_syncs = 0;
};
CudaTransferBytes cuda_transfer_bytes();

// Checks cu_seqlens against CONTRACT §6 for a packed length `total_length` and returns the
// segment starts; throws ContractViolation naming the rule and value.
std::vector<std::int64_t> validate_cu_seqlens(const TensorView& cu_seqlens,
                                              std::int64_t total_length);

// The input rules every solve applies (x's shape and dtype, h0's shape, cu_seqlens, packing
// support of the cell), without solving: ContractViolation naming the argument, the rule and
// the value. Commands run it before any work, beside the oracle's own reading of the case.
void validate_apply_inputs(const Cell& cell, const TensorView& x, const ApplyOptions& options = {});

// max|f(prepend(H, h0)) − H| of a trajectory (the residual gate's quantity), in the compute
// type of the cell's dtype, NaN ranking above every number. Served by the row of `backend`,
// resolved as a solve's (auto: cuda for device tensors, cpu for host tensors), after the same
// input rules as a solve; a row that has no residual of its own (the CUDA dense, matrix-state and
// RWKV-7 rows) raises UnsupportedPath. H has the trajectory's shape, any floating dtype, on x's
// device (the CPU backend: on the host).
double max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                    const ApplyOptions& options = {}, ScanBackend backend = ScanBackend::auto_select);

}  // namespace pararnn
