// The CUDA backend's runtime, internal to the solver (host code: the CUDA runtime API only, no
// kernels): errors, device buffers and the allocators behind them, streams, the cuBLAS handle,
// the counted host<->device copies, device views of the caller's tensors, saved trajectories and
// the dtype dispatch. The families (per_channel.hpp, dense.cpp, matrix_state.cpp, ...) are built
// on it with newton_device.hpp (the per-channel solve), affine.hpp (the input affine) and
// fallback.hpp (the sequential fallback).
//
// Guarantees: every CUDA and cuBLAS call is checked and a failure throws pararnn::Error naming
// the call, the runtime's error and the source location; allocation happens here (cudaMalloc,
// freed by DeviceBuffer), never in the kernels' launchers; all work of a solve runs on its
// stream (`current_stream`: the caller's ApplyOptions::cuda_stream inside the entry point's
// SolveScope, else the per-thread default stream, never the legacy default stream implicitly),
// so it is ordered after whatever the caller queued there (device inputs included), and every
// entry point waits for that stream before it returns. Example (the bench):
//   cuda::NewtonWorkspace ws(CellKind::gru, DType::f32, 8, 65536, 256);   // newton_device.hpp
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
#include <map>
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
  // Allocated while its stream was captured into a CUDA graph (the graph's memory): freed on that
  // stream, wherever the buffer dies (a free of graph memory on another stream while the capture
  // runs would spoil it), instead of on the then current stream.
  std::optional<cudaStream_t> graph_stream_;
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

// Whether current_stream() is being captured into a CUDA graph (cudaStreamIsCapturing: active, or
// invalidated by an earlier error). Under capture the backend never waits for the stream and
// never reads a device value back (copy_to_host refuses, naming the capture), and uploads its
// small host values as kernel arguments (copy_to_device): what a graph replays is its launches
// alone (docs/cuda.md, "CUDA graphs").
bool stream_capturing();
// Whether this thread's solve was asked not to wait or read back (ApplyOptions::sync_free, set
// by SolveScope): then, as under capture, copy_to_host refuses (naming `sync_free`),
// synchronize() does nothing and the fixed-K loop's outcome stays on the device.
bool sync_free();
// stream_capturing() || sync_free(): the solve's outcome is not read on the host.
inline bool outcome_unread() { return sync_free() || stream_capturing(); }
class SyncFreeScope {
 public:
  explicit SyncFreeScope(bool on);
  ~SyncFreeScope();
  SyncFreeScope(const SyncFreeScope&) = delete;
  SyncFreeScope& operator=(const SyncFreeScope&) = delete;

 private:
  bool previous_;
};

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

// The one cache of such resources: the calling thread's `T` for the current device, made at first
// use by `make()` (which throws, releasing what it made, where it cannot) and released by
// `release(value)` on its device at shutdown; a shutdown since the last use drops the cache, so
// the next use makes a new one. Each call site (its lambdas' types) has a cache of its own.
// Example: cublas_handle (runtime.cpp), the cuBLASLt handle and workspace (affine.cpp).
template <class T, class Make, class Release>
T& per_device_resource(Make make, Release release) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  thread_local std::map<int, T> cache;
  thread_local std::uint64_t made_in = 0;
  if (made_in != resource_generation()) {
    cache.clear();  // released by a shutdown since
    made_in = resource_generation();
  }
  auto it = cache.find(device);
  if (it == cache.end()) {
    T made = make();
    keep_until_shutdown([made, device, release] {
      if (cudaSetDevice(device) == cudaSuccess) release(made);
    });
    it = cache.emplace(device, made).first;
  }
  return it->second;
}

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
// everything queued before it on current_stream()); copy_to_device is ordered on it. Under
// capture (stream_capturing) copy_to_host throws UnsupportedPath naming the capture and the rule
// (a captured solve has a fixed K and device tensors), and copy_to_device writes the bytes as
// kernel arguments (kernels::launch_write_argument_bytes), at most kCaptureUploadBytes of them
// (else UnsupportedPath naming the size).
inline constexpr std::size_t kCaptureUploadBytes = 64 * 1024;
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
      : device_(solve_device(x, options)), stream_(options.cuda_stream), allocator_(options.cuda_allocator),
        sync_free_(options.sync_free) {}

 private:
  DeviceGuard device_;
  StreamScope stream_;
  AllocatorScope allocator_;
  SyncFreeScope sync_free_;
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

// Waits for the device work queued by the functions above; nothing under capture (the graph's
// launch is the caller's to wait for).
void synchronize();

// UnsupportedPath naming `who` unless the CUDA backend can run; require_device_index also
// ContractViolation unless `device` names one of the CUDA devices.
void require_available(const char* who);
void require_device_index(int device, const char* who);

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

template <class T>
std::vector<T> download_vector(const DeviceBuffer& buffer, std::int64_t count) {
  std::vector<T> out(static_cast<std::size_t>(count));
  if (count > 0)
    copy_to_host(out.data(), buffer.get(), out.size() * sizeof(T));
  return out;
}

}  // namespace pararnn::detail::cuda
