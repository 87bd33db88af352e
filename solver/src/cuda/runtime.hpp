// The CUDA backend's device-level pieces, internal to the solver (host code: the CUDA runtime
// API only, no kernels). The CUDA family rows (backends.hpp) are built from them, and the Newton
// benchmark uses them to time the loop on device-resident inputs without the input GEMM or the
// transfers.
//
// Guarantees: every CUDA and cuBLAS call is checked and a failure throws pararnn::Error naming
// the call, the runtime's error and the source location; allocation happens here (cudaMalloc,
// freed by DeviceBuffer), never in the kernels' launchers; all work of a solve runs on its
// stream (`current_stream`: the caller's ApplyOptions::cuda_stream inside the entry point's
// SolveScope, else the per-thread default stream, never the legacy default stream implicitly),
// so it is ordered after whatever the caller queued there (device inputs included), and every
// entry point waits for that stream before it returns.
// `newton_solve` is the CPU backend's algorithm step for step (App. A guess, K from
// resolve_newton_iters, the adaptive loop with residual_atol, k_max and one more update, the
// same NewtonStats) with the residual, the scan and H += ωδ on the device; in an adaptive solve
// that does not converge by k_max the CPU's fallback units (64-channel tiles of a batch row) still
// above residual_atol are replaced by the sequential kernel's solution, with the CPU's
// `newton_residual_high` warning; an adaptive solve past the auto rule's threshold
// (`sequential_min_chains`) is the sequential kernel's solution. Example (the bench):
//   cuda::NewtonWorkspace ws(CellKind::gru, DType::f32, 8, 65536, 256);
//   cuda::DeviceProblem p{.wx = d_wx, .recurrent = d_rec, .batch = 8, .time = 65536, .channels = 256};
//   NewtonStats stats;
//   cuda::newton_solve(cell_spec(CellKind::gru), DType::f32, p, {.max_iters = 3}, d_H, ws, stats);
#pragma once

#include <cmath>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <type_traits>
#include <span>
#include <utility>

#include "backends.hpp"
#include "newton/family.hpp"
#include "pararnn/kernels/launch.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/strided_copy.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::detail::cuda {

using detail::compute_dtype;  // backends.hpp

// How a DeviceBuffer is allocated and freed.
//   stream_ordered: from the backend's own memory pool of the current device, in the order of the
//     current stream (cudaMallocFromPoolAsync / cudaFreeAsync on current_stream(): a buffer that
//     outlives its call, a saved trajectory, is freed after that call waited for its stream, so
//     on whichever stream is current then): a free does not synchronise the device and the
//     pool keeps what is freed for the next allocation (a solve's 2-10 GB of temporaries cost a
//     cudaMalloc and a device-wide cudaFree each call otherwise). The pool is returned to the
//     device by cuda_release_cached_memory (solver.hpp) and, once, when an allocation fails.
//     Only for memory used on the solve's stream (every solve's);
//   synchronous: cudaMalloc / cudaFree, for memory other streams use (CudaDecoder's parameters,
//     read on the caller's stream: a free then waits for every stream's work).
enum class Allocation : std::uint8_t { stream_ordered, synchronous };

// An owning device allocation on the current device: a stream-ordered one comes from the
// caller's DeviceAllocator where one is current (AllocatorScope; solver.hpp's
// ApplyOptions::cuda_allocator) and is freed through it, else from the backend's pool. Every
// DeviceBuffer of the process is counted (device_memory below).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, const char* what = "buffer",
                        Allocation how = Allocation::stream_ordered);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
  Allocation how_ = Allocation::stream_ordered;
  std::shared_ptr<const DeviceAllocator> allocator_;  // the caller's, or null: the backend's pool
};

// The caller's allocator of this thread's stream-ordered DeviceBuffers (null: the backend's
// pool): the innermost AllocatorScope's.
const std::shared_ptr<const DeviceAllocator>& current_allocator();

// Makes `allocator` this thread's current allocator for its lifetime (null: the backend's pool)
// and restores the previous one.
class AllocatorScope {
 public:
  explicit AllocatorScope(std::shared_ptr<const DeviceAllocator> allocator);
  ~AllocatorScope();
  AllocatorScope(const AllocatorScope&) = delete;
  AllocatorScope& operator=(const AllocatorScope&) = delete;

 private:
  std::shared_ptr<const DeviceAllocator> previous_;
};

// Bytes held by DeviceBuffers of this process (all devices together): now, and the most at any
// moment since the last reset_device_peak() (the allocator statistics the memory benchmark
// reads, P10; cuBLAS's own workspaces are not DeviceBuffers and not counted).
struct DeviceMemory {
  std::size_t live = 0, peak = 0;
};
DeviceMemory device_memory();
void reset_device_peak();  // peak = live
// Waits for `device`, then returns what the backend's pool of `device` keeps to it;
// the bytes it keeps beyond the live buffers (solver.hpp's cuda_release_cached_memory and
// cuda_cached_memory).
void release_cached_memory(int device);
std::size_t cached_memory(int device);

// The stream this thread's CUDA work runs on: the innermost StreamScope's, else the per-thread
// default stream (cudaStreamPerThread, which is ordered with the legacy default stream's work).
cudaStream_t current_stream();

// Makes `stream` this thread's current stream for its lifetime (unset: the per-thread default
// stream) and restores the previous one.
class StreamScope {
 public:
  explicit StreamScope(std::optional<void*> stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  std::optional<cudaStream_t> previous_;
};

// Throw pararnn::Error naming the call, the error and the place unless the call succeeded (a
// non-sticky CUDA error is cleared first, so that later calls are not blamed).
void check_cuda(cudaError_t e, const char* call,
                std::source_location at = std::source_location::current());
void check_cublas(cublasStatus_t s, const char* call,
                  std::source_location at = std::source_location::current());

#define PARARNN_CUDA_CHECK(expr) ::pararnn::detail::cuda::check_cuda((expr), #expr)
#define PARARNN_CUBLAS_CHECK(expr) ::pararnn::detail::cuda::check_cublas((expr), #expr)

// The cuBLAS handle of this (thread, device), bound to current_stream().
cublasHandle_t cublas_handle();

// What the backend makes once and keeps (the cuBLAS and cuBLASLt handles of each thread and
// device, their workspaces, the memory pools): each registers its release here when made;
// cuda_shutdown (solver.hpp) and process exit (an atexit hook, registered with the first one,
// so it runs before the CUDA runtime's own teardown) release them all, newest first, after the
// devices' work is done. `resource_generation()` changes at every release: a per-thread cache of
// such resources made in an older generation holds released ones and is dropped (a later use
// makes them again).
void keep_until_shutdown(std::function<void()> release);
std::uint64_t resource_generation();
// Waits for every device, then releases what keep_until_shutdown holds and the pools (solver.hpp's
// cuda_shutdown). Never throws; the calling thread's current device is kept.
void shutdown_backend() noexcept;

// Makes `device` current for its lifetime and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    PARARNN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) PARARNN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The only host<->device copies of the backend: each adds its bytes to the process's transfer
// counters (solver.hpp's cuda_transfer_bytes). copy_to_host waits for the copy (and so for
// everything queued before it on current_stream()); copy_to_device is ordered on it.
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void copy_to_device(void* dst, const void* src, std::size_t bytes);

// count · element_bytes, or Error naming `what` when it overflows (or count < 0).
std::size_t checked_bytes(std::int64_t count, std::size_t element_bytes, const char* what);
void upload(DeviceBuffer& dst, const void* src, std::size_t bytes);
DeviceBuffer upload_new(const void* src, std::size_t bytes, const char* what,
                        Allocation how = Allocation::stream_ordered);
// A contiguous copy on the device of a device view of any strides (one gather kernel).
DeviceBuffer gather_contiguous(const TensorView& view, const char* what);
// A contiguous host copy of a view on either side.
Tensor host_copy(const TensorView& view, const char* what);
// `view` contiguous on the device in its dtype: one transfer (host) or one gather (a strided
// device view) into `holder`; a contiguous device view is used in place.
const void* contiguous_on_device(const TensorView& view, DeviceBuffer& holder, const char* what);
// `view` contiguous on the device in `dtype`: contiguous_on_device in its own dtype (a host view
// crosses in its storage bytes), then, for another dtype, one converting store on the device
// (kernels/strided_copy.hpp: widening is exact, f64 -> f32 rounds to nearest) into `holder`.
// A device view never goes through the host. Example: x (bf16, any strides) in f32 for a GEMM.
const void* on_device_as(const TensorView& view, DType dtype, DeviceBuffer& holder, const char* what);
// The value of parameter `name` a CUDA solve reads (backends.hpp parameter_of: the caller's view,
// else the Cell's host tensor); a view on another device than the current one (the solve's) is
// refused, ContractViolation naming "parameters['name']".
TensorView parameter_view(const Cell& cell, const ApplyOptions& options, const std::string& name);
// A floating dtype as the kernels' element type (ContractViolation for another).
kernels::StoreType store_type(DType dtype);
// Cell::channel_values' array (R rows of d_h: the recurrent entries clamped to the cap, then the
// constants) in `compute` on the device, bit for bit the host's: the Cell's values, one upload;
// each entry whose tensor ApplyOptions::parameters views is then overwritten on the device from
// the view (widened exactly, then kernels::launch_clamp_abs), its value never crossing the host.
DeviceBuffer channel_values_on_device(const Cell& cell, const ApplyOptions& options, DType compute);
// `count` copies of `value` in `dtype` on the device: one element crosses, the rest is a gather
// with stride 0 (so that a vector as long as T never crosses).
DeviceBuffer broadcast_on_device(double value, DType dtype, std::int64_t count, const char* what);
// The device of a solve: x's, or h0's, or the current one for host inputs.
int solve_device(const TensorView& x, const ApplyOptions& options);

// What a CUDA entry point holds for its lifetime: the solve's device current (solve_device), the
// caller's stream (ApplyOptions::cuda_stream) as this thread's current stream and the caller's
// allocator (ApplyOptions::cuda_allocator) as its current allocator.
class SolveScope {
 public:
  SolveScope(const TensorView& x, const ApplyOptions& options)
      : device_(solve_device(x, options)), stream_(options.cuda_stream), allocator_(options.cuda_allocator) {}

 private:
  DeviceGuard device_;
  StreamScope stream_;
  AllocatorScope allocator_;
};
// A device trajectory in `dtype` as a host tensor of the storage dtype (or of `dtype` itself
// with keep_compute).
Tensor download_trajectory(const DeviceBuffer& H, DType dtype, const Cell& cell, const Shape& shape,
                           bool keep_compute = false);

// Writes the contiguous values of `src_dtype` at `src` (on the current device) into `out`: a view
// of the current device (one strided-store kernel, converting to its dtype; a device copy when
// it is contiguous in `src_dtype`) or of the host (a download, then the host's conversion and
// scatter). Returns when the values are in `out` (it synchronises). UnsupportedPath naming `what`
// for a view on another device or of more than kernels::kStridedCopyMaxRank dimensions.
void store_into(const void* src, DType src_dtype, const TensorView& out, const char* what);
// Refuses (UnsupportedPath naming `what`) a device view `out` that is not on the current device
// or that store_into cannot write.
void check_store_target(const TensorView& out, const char* what);

// H* kept on the device of the forward's solve, in the compute type (training.hpp), with what a
// family keeps beside it (the per-channel family's W_x x, so that its backward runs no second
// input GEMM; null for the other families).
class SavedOnDevice final : public SavedTrajectory {
 public:
  SavedOnDevice(DeviceBuffer H, std::shared_ptr<const DeviceBuffer> wx, int device, DType compute, Shape shape);
  std::size_t bytes() const override;
  Tensor host() const override;
  // H* on the current device: in place when it is the forward's, else a peer copy in `holder`.
  const void* on_current_device(DeviceBuffer& holder) const;
  // The forward's W_x x where the current device is the forward's; null elsewhere.
  std::shared_ptr<const DeviceBuffer> wx_on_current_device() const;
  DType compute() const { return compute_; }
  std::int64_t numel() const { return shape_numel(shape_); }

 private:
  DeviceBuffer H_;
  std::shared_ptr<const DeviceBuffer> wx_;
  int device_;
  DType compute_;
  Shape shape_;
};

// A SavedOnDevice of H (`shape` values of `compute` on the current device), with nothing beside it.
std::shared_ptr<const SavedTrajectory> saved_on_device(DeviceBuffer H, DType compute, Shape shape);

// H* of `forward` on the current device for a backward (`numel` values of `compute`): the
// forward's device copy in place (a peer copy into `holder` from another device), a host-held H*
// (a forward of the CPU backend) uploaded into `holder`, or null for a recompute forward (which
// holds nothing). ContractViolation naming `forward` when it holds another dtype or count.
const void* saved_on_current_device(const NewtonForward& forward, DType compute, std::int64_t numel,
                                    DeviceBuffer& holder);

// A finished trajectory (contiguous values of `compute` on the current device, of `shape`) handed
// to the caller: stored into *out (store_into, naming `what`: on its device no byte of it crosses
// to the host) with an empty tensor returned, or, without `out`, returned as a new host tensor of
// the cell's dtype.
Tensor deliver_trajectory(const void* H, DType compute, const Cell& cell, const Shape& shape, const TensorView* out,
                          const char* what);

// ∇x (contiguous values of `compute` on the current device, (B, T, d_in)) handed to the caller:
// stored into *grad_x, or returned in out.x as a new host tensor of the cell's dtype.
void deliver_input_gradient(const void* dx, DType compute, const Cell& cell, const Layout& L,
                            const TensorView* grad_x, NewtonGradients& out);

// `view` in double, contiguous, in memory of its own on the current device: never the caller's
// memory, since the adjoints scan their cotangent in place (on_device_as, then a device copy when
// that lent the view itself).
DeviceBuffer owned_f64_on_device(const TensorView& view, const char* what);

// Calls f.template operator()<StorageT>() with the device storage type of `dtype`.
template <class F>
decltype(auto) dispatch_device_storage(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f64: return f.template operator()<double>();
    case DType::f32: return f.template operator()<float>();
    case DType::f16: return f.template operator()<__half>();
    case DType::bf16: return f.template operator()<__nv_bfloat16>();
    default: break;
  }
  throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(dtype));
}

// Calls f.template operator()<ComputeT>() with float or double.
template <class F>
decltype(auto) dispatch_compute(DType compute, F&& f) {
  if (compute == DType::f64) return f.template operator()<double>();
  return f.template operator()<float>();
}

// Inputs of one solve on the device, in the compute type; layouts of kernels/sequential.hpp.
struct DeviceProblem {
  const void* wx = nullptr;               // [b][t][g·D + c], W_x x + b
  const void* recurrent = nullptr;        // [k][c], clamped
  const void* h0 = nullptr;               // [row][s][c]; null: zeros
  const std::int64_t* h0_row = nullptr;   // [t], packed input only
  const std::uint8_t* head = nullptr;     // [t], packed input only (null: the only head is t = 0)
  std::int64_t batch = 0, time = 0, channels = 0;
};

// Scratch of the Newton loop for one shape: F, J, the scan's and the reduction's workspaces.
// Every strategy repeats bit for bit (the single-pass scan's look-back has a fixed association,
// kernels/src/scan.cuh), so training's recompute re-solves exactly the forward's H* on any of them.
//
// The strategy of the per-channel solve (newton/driver.hpp runs each): `host_driven`, one
// residual kernel, one scan and one axpy per iteration (F and J through memory); `fused_step`,
// one fused kernel per iteration (kernels/newton_step.hpp: F, J in registers, the single-pass
// scan, H' = H + ωδ into a second iterate buffer). `automatic` is fused_step; and for an adaptive
// solve (max_iters unset, NewtonConfig::allow_sequential) it is the sequential kernel in the
// compute type where `sequential_is_faster` says so (the auto rule, docs/cuda.md).
enum class NewtonStrategy { automatic, host_driven, fused_step };

// The auto rule (measured on the H200, bench/targets_bench.cpp "P6"): at equal tokens the
// sequential kernel's time grows with T (one step's latency per step, every chain in flight at
// once) and a Newton solve's with the token-channels (its passes over memory), so their ratio
// depends on the number of chains B·d alone; the sequential kernel is the faster from
// `sequential_min_chains(cell, sm_count)` chains on. sLSTM's Newton starts with P + 1 sequential
// passes (its Picard guess), so its threshold is the lowest.
std::int64_t sequential_min_chains(CellKind cell, int sm_count);
bool sequential_is_faster(CellKind cell, std::int64_t batch, std::int64_t channels);

class NewtonWorkspace {
 public:
  NewtonWorkspace(CellKind cell, DType storage, std::int64_t batch, std::int64_t time,
                  std::int64_t channels, NewtonStrategy strategy = NewtonStrategy::automatic);
  DeviceBuffer residual, jacobian, scan_workspace, residual_workspace, max_abs;
  // fused_step: the second iterate and the kernel's workspace, allocated on the first fused step.
  DeviceBuffer iterate, step_workspace;
  kernels::ScanTiling tiling;
  bool fused = false;
  bool sequential = false;  // automatic and sequential_is_faster: adaptive solves run sequentially
};

// One input affine block on the device: W (outputs × inputs, row-major, storage dtype) applied to
// the first `inputs` columns of x, written to columns [first_column, first_column + outputs).
struct DeviceAffine {
  const void* weight = nullptr;
  std::int64_t first_column = 0, outputs = 0, inputs = 0;
};

// The gate pre-activations into `wx` (`rows` = B·T rows of `width` = G·d_h, compute type):
// `bias_row` (width values, compute type) in every row, plus every block's W x, by cuBLAS with f64
// arithmetic for f64 and f32 accumulation otherwise (f16/bf16 inputs multiply exactly in f32).
// `x` is contiguous (rows × d_in) in the storage dtype. f32, f16 and bf16 (every column in a
// block, not during a graph capture): one cuBLASLt GEMM per block, the storage dtype read as it is
// (tensor cores with f32 accumulation for f16/bf16), the bias in its epilogue (wx written once);
// otherwise the bias rows are copied in and the GEMMs accumulate onto them.
void input_affine(DType storage, std::int64_t rows, std::int64_t d_in, std::int64_t width,
                  const void* bias_row, const void* x, std::span<const DeviceAffine> blocks,
                  void* wx);

// The same on `stream` with `handle` (which is left bound to `stream`).
void input_affine_on(cudaStream_t stream, cublasHandle_t handle, DType storage, std::int64_t rows,
                     std::int64_t d_in, std::int64_t width, const void* bias_row, const void* x,
                     std::span<const DeviceAffine> blocks, void* wx);

// The Newton solve; `H` (device, compute type, [b][t][s][c]) receives H*.
void newton_solve(const CellSpec& spec, DType storage, const DeviceProblem& problem,
                  const NewtonConfig& config, void* H, NewtonWorkspace& workspace,
                  NewtonStats& stats);

// The sequential kernel, the state rounded to `output` every step; `H` is in that dtype (the
// storage dtype, or the compute dtype for the Newton fallback).
void sequential_solve(CellKind cell, DType output, const DeviceProblem& problem, void* H);

// Waits for the device work queued by the functions above.
void synchronize();

// UnsupportedPath naming `who` unless the CUDA backend can run; require_device_index also
// ContractViolation unless `device` names one of the CUDA devices.
void require_available(const char* who);
void require_device_index(int device, const char* who);

// The device inputs the dense, matrix-state and exact linear families share (family_inputs.cpp):
// UnsupportedPath naming `who` unless the CUDA backend can run; W_x x + b on the device,
// [b][t][gate_width(cell)] in the compute type (the bias row, then one GEMM per affine block
// onto its columns, as cpu/input_affine.hpp places them); h0 in the compute type (empty
// without h0).

DeviceBuffer device_input_affine(const Cell& cell, const TensorView& x, const Layout& L);
DeviceBuffer device_h0(const ApplyOptions& options, DType compute);

// A compute-type device array as doubles: itself for f64, else a widened copy in `storage`.
template <class ComputeT>
const double* as_f64(const void* src, std::int64_t count, DeviceBuffer& storage, const char* what) {
  if constexpr (std::is_same_v<ComputeT, double>) {
    return static_cast<const double*>(src);
  } else {
    if (src == nullptr) return nullptr;
    storage = DeviceBuffer(checked_bytes(count, sizeof(double), what), what);
    PARARNN_CUDA_CHECK(kernels::launch_widen(static_cast<const float*>(src), storage.as<double>(), count, current_stream()));
    return storage.as<double>();
  }
}

// One strided-batched GEMM in the compute type (column-major, cuBLAS's convention):
// C_i = α op(A_i) B_i-op + β C_i for i < batch.
template <class ComputeT>
void gemm_batched(cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n,
                  std::int64_t k, const ComputeT* A, std::int64_t lda, std::int64_t stride_a,
                  const ComputeT* B, std::int64_t ldb, std::int64_t stride_b, ComputeT beta, ComputeT* C,
                  std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  constexpr bool kF64 = std::is_same_v<ComputeT, double>;
  const cudaDataType_t type = kF64 ? CUDA_R_64F : CUDA_R_32F;
  const ComputeT one = 1;
  PARARNN_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      cublas_handle(), op_a, op_b, m, n, k, &one, A, type, lda, stride_a, B, type, ldb, stride_b, &beta, C,
      type, ldc, stride_c, batch, kF64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <class T>
std::vector<T> download_vector(const DeviceBuffer& buffer, std::int64_t count) {
  std::vector<T> out(static_cast<std::size_t>(count));
  if (count > 0)
    copy_to_host(out.data(), buffer.get(), out.size() * sizeof(T));
  return out;
}

// Σ over `count` device rows of n values (float or double), in row order, each widened to double
// (kernels/row_sum.hpp), downloaded: how the backward reduces its per-row parameter partials.
template <class T>
std::vector<double> sum_rows_on_device(const T* rows, std::int64_t count, std::int64_t n, const char* what);
// The same sums left on the device: n doubles.
template <class T>
DeviceBuffer sum_rows_device(const T* rows, std::int64_t count, std::int64_t n, const char* what);

// A parameter's gradient, summed in double on the device (`sums`, the parameter's shape
// row-major), delivered: into the caller's target (ApplyOptions::parameter_gradients[name]) when
// that is on the current device, by kernels::launch_gradient_store (the host's rounding, bit for
// bit; nothing crosses and nothing waits) and `name` recorded in out.written; else downloaded
// and rounded on the host into out.parameters[name] (solve_newton's caller then writes a host
// target).
void deliver_gradient(const Cell& cell, const ApplyOptions& options, const std::string& name, const Shape& shape,
                      const DeviceBuffer& sums, NewtonGradients& out);
// The recurrent entries' gradients from their sums on the device ([R][d_h] doubles in the order
// of cell.spec().recurrent), zero where the clamp clipped the raw value the solve read (the mask
// of backends.hpp's recurrent_gradients, from the caller's view or the Cell's value), delivered
// as deliver_gradient does, one tensor at a time.
void deliver_recurrent_gradients(const Cell& cell, const ApplyOptions& options, const DeviceBuffer& sums,
                                 NewtonGradients& out);

// The input affines' backward on the device, every block of cell.spec().affine at its columns
// of d_wx ([b][t][gate_width(cell)], compute type; x as the caller gave it, on any device or the
// host): per batch row ∇W_b = d_wx_bᵀ x_b and ∇b_b = d_wx_bᵀ 1, summed over rows in double in a
// fixed order on the device (sum_rows_on_device) into out.parameters (storage dtype), and
// ∇x = Σ_blocks d_wx W ([b][t][d_in], compute type, on the device; blocks reading features only
// leave the Δt column 0): written over every element of `dx` (the _into form), or returned in a
// new buffer. The products are those of the unrounded operands in f32 (f64 for f64 cells):
// f64 and f32 cells by cuBLAS in their type (no TF32); f16 and bf16 cells on bf16 tensor cores
// with f32 accumulation, x and W read as stored, d_wx split into three bf16 terms and f16 x and
// W into two (kernels/bf16_split.hpp: the terms add up to the value exactly), so each product
// is the f32 one up to the order of its sum (the term pairs below 2^-24 of the leading one are
// left out); ∇b by cuBLAS in f32. W is the value the solve read (parameter_view: `options`'
// view where it names the weight, else the Cell's).
template <class ComputeT>
void input_affine_backward_into(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                ComputeT* dx, NewtonGradients& out, const ApplyOptions& options);
template <class ComputeT>
DeviceBuffer input_affine_backward(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                   NewtonGradients& out);

// The sequential fallback of a CUDA family (newton/family.hpp: the same units as the CPU's).
// `unit_max` holds each of the units' max|F| at the last evaluation; units at or above `atol`
// (NaN included) are re-solved: `solve(target)` writes the sequential solution of the whole
// problem (`count` compute-type values) to `target`; it goes straight into H when every unit
// needs it, else into a scratch buffer from which `copy_unit(unit, scratch)` copies each flagged
// unit into H. Returns the number of units re-solved.
template <class ComputeT, class Solve, class CopyUnit>
std::int64_t replace_flagged_units(const std::vector<double>& unit_max, double atol, std::int64_t count,
                                   ComputeT* H, Solve&& solve, CopyUnit&& copy_unit) {
  const auto units = static_cast<std::int64_t>(unit_max.size());
  std::vector<std::int64_t> flagged;
  for (std::int64_t u = 0; u < units; ++u)
    if (!(unit_max[static_cast<std::size_t>(u)] < atol)) flagged.push_back(u);
  if (flagged.empty()) return 0;
  if (static_cast<std::int64_t>(flagged.size()) == units) {
    solve(H);
    return units;
  }
  DeviceBuffer scratch(checked_bytes(count, sizeof(ComputeT), "the fallback trajectory"), "the fallback trajectory");
  solve(scratch.as<ComputeT>());
  for (std::int64_t u : flagged) copy_unit(u, scratch.as<const ComputeT>());
  return static_cast<std::int64_t>(flagged.size());
}

// The same with the units' maxima taken on the host: `F` (the residual of the final iterate,
// `count` values on the device) is downloaded and `unit_of(i)` names element i's unit, of
// `units` in all (the dense and matrix-state families; the per-channel family reduces its tiles
// on the device, kernels/tile_max.hpp).
template <class ComputeT, class UnitOf, class Solve, class CopyUnit>
std::int64_t sequential_fallback_units(const DeviceBuffer& F, std::int64_t count, std::int64_t units,
                                       double atol, UnitOf&& unit_of, ComputeT* H, Solve&& solve,
                                       CopyUnit&& copy_unit) {
  std::vector<ComputeT> host(static_cast<std::size_t>(count));
  if (count > 0)
    copy_to_host(host.data(), F.get(), host.size() * sizeof(ComputeT));
  std::vector<double> unit_max(static_cast<std::size_t>(units), 0.0);
  for (std::int64_t i = 0; i < count; ++i) {
    double& m = unit_max[static_cast<std::size_t>(unit_of(i))];
    m = nan_max(m, std::abs(static_cast<double>(host[static_cast<std::size_t>(i)])));
  }
  return replace_flagged_units<ComputeT>(unit_max, atol, count, H, std::forward<Solve>(solve),
                                         std::forward<CopyUnit>(copy_unit));
}

}  // namespace pararnn::detail::cuda
