// The CUDA backend's runtime (runtime.hpp): checked calls, the cuBLAS handle, transfers, device
// buffers from the backend's memory pools and their byte counter, stores into caller views. Every
// other file of cuda/ builds on it.
#include "cuda/runtime.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <source_location>
#include <utility>

#include "pararnn/kernels/strided_copy.hpp"

namespace pararnn::detail {
namespace cuda {
namespace {

std::string where(const std::source_location& at) {
  std::string_view file = at.file_name();
  if (const auto slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return fmt::format("{}:{} ({})", file, at.line(), at.function_name());
}

}  // namespace

void check_cuda(cudaError_t e, const char* call, std::source_location at) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed
  throw Error(fmt::format("CUDA backend: {} failed: {} ({}) at {}", call, cudaGetErrorName(e),
                          cudaGetErrorString(e), where(at)));
}

void check_cublas(cublasStatus_t s, const char* call, std::source_location at) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(fmt::format("CUDA backend: {} failed: {} ({}) at {}", call, cublasGetStatusName(s),
                          cublasGetStatusString(s), where(at)));
}

namespace {
thread_local std::optional<cudaStream_t> scoped_stream;  // the innermost StreamScope's
}  // namespace

cudaStream_t current_stream() { return scoped_stream ? *scoped_stream : cudaStreamPerThread; }

namespace {
thread_local bool scoped_sync_free = false;  // the innermost SyncFreeScope's
}  // namespace

bool sync_free() { return scoped_sync_free; }
SyncFreeScope::SyncFreeScope(bool on) : previous_(std::exchange(scoped_sync_free, on)) {}
SyncFreeScope::~SyncFreeScope() { scoped_sync_free = previous_; }

bool stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  PARARNN_CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

namespace {
thread_local std::shared_ptr<const DeviceAllocator> scoped_allocator;  // the innermost AllocatorScope's
}  // namespace

const std::shared_ptr<const DeviceAllocator>& current_allocator() { return scoped_allocator; }

AllocatorScope::AllocatorScope(std::shared_ptr<const DeviceAllocator> allocator)
    : previous_(std::exchange(scoped_allocator, std::move(allocator))) {}

AllocatorScope::~AllocatorScope() { scoped_allocator = std::move(previous_); }

StreamScope::StreamScope(std::optional<void*> stream) : previous_(scoped_stream) {
  scoped_stream = stream ? static_cast<cudaStream_t>(*stream) : cudaStreamPerThread;
}

StreamScope::~StreamScope() { scoped_stream = previous_; }

namespace {
std::mutex kept_mutex;
// Leaked on purpose: read by the atexit hook, after static destructors may have run.
std::vector<std::function<void()>>& kept_releases() {
  static auto* releases = new std::vector<std::function<void()>>();
  return *releases;
}
std::atomic<std::uint64_t> generation{1};
bool exit_hook = false;

void release_kept() {
  std::vector<std::function<void()>> releases;
  {
    std::lock_guard lock(kept_mutex);
    releases.swap(kept_releases());
    generation.fetch_add(1);
  }
  for (auto it = releases.rbegin(); it != releases.rend(); ++it) (*it)();
}

void release_pools();  // below, with the pools
}  // namespace

void keep_until_shutdown(std::function<void()> release) {
  std::lock_guard lock(kept_mutex);
  if (!exit_hook) {
    // Registered after the CUDA runtime initialised (a resource is made with it), so it runs
    // before the runtime's own exit teardown.
    std::atexit([] { shutdown_backend(); });
    exit_hook = true;
  }
  kept_releases().push_back(std::move(release));
}

std::uint64_t resource_generation() { return generation.load(); }

void shutdown_backend() noexcept {
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  // The devices' queued work first: a handle or pool still in use is not released under it.
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess)
    for (int d = 0; d < count; ++d)
      if (cudaSetDevice(d) == cudaSuccess) (void)cudaDeviceSynchronize();
  (void)cudaGetLastError();
  try {
    release_kept();
    release_pools();
  } catch (...) {  // at exit nothing can be reported; what could not be released stays
  }
  if (restore) (void)cudaSetDevice(current);
  (void)cudaGetLastError();
}

// One cuBLAS handle per (thread, device), created at first use (never during static
// initialisation) and released by shutdown_backend (cuda_shutdown, or process exit before the
// CUDA runtime's teardown: a destructor of the thread_local itself could run after it).
cublasHandle_t cublas_handle() {
  cublasHandle_t handle = per_device_resource<cublasHandle_t>(
      [] {
        cublasHandle_t made = nullptr;
        PARARNN_CUBLAS_CHECK(cublasCreate(&made));
        return made;
      },
      [](cublasHandle_t made) { (void)cublasDestroy(made); });
  PARARNN_CUBLAS_CHECK(cublasSetStream(handle, current_stream()));
  return handle;
}

std::size_t checked_bytes(std::int64_t count, std::size_t element_bytes, const char* what) {
  if (count < 0 || static_cast<std::uint64_t>(count) >
                       std::numeric_limits<std::size_t>::max() / std::max<std::size_t>(element_bytes, 1))
    throw Error(fmt::format("CUDA backend: {} of {} elements is too large", what, count));
  return static_cast<std::size_t>(count) * element_bytes;
}

namespace {
std::atomic<std::uint64_t> bytes_to_device{0}, bytes_to_host{0}, host_reads{0}, stream_syncs{0};
}  // namespace

void copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (sync_free())
    throw UnsupportedPath(fmt::format(
        "CUDA backend: sync_free is set (ApplyOptions::sync_free, Python sync_free=True) and this call would read {} "
        "bytes back to the host; a sync-free solve has a fixed K (max_iters set), a per-channel cell and device "
        "tensors, and returns no h0 gradient (docs/cuda.md, \"CUDA graphs\")",
        bytes));
  if (stream_capturing())
    throw UnsupportedPath(fmt::format(
        "CUDA backend: the stream is being captured into a CUDA graph and this call would read {} bytes back to "
        "the host, which a graph cannot replay; under capture only a solve with a fixed K (max_iters set) of a "
        "per-channel cell on device tensors runs (the training forward and backward included, parameters as "
        "device views; docs/cuda.md, \"CUDA graphs\")",
        bytes));
  PARARNN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, current_stream()));
  PARARNN_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  bytes_to_host.fetch_add(bytes);
  host_reads.fetch_add(1);
  stream_syncs.fetch_add(1);
}

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (stream_capturing()) {
    // A captured copy would read this host memory again at every replay: the bytes go as
    // kernel arguments instead, held by the graph.
    if (bytes > kCaptureUploadBytes)
      throw UnsupportedPath(fmt::format(
          "CUDA backend: the stream is being captured into a CUDA graph and this call would upload {} bytes of "
          "host values; under capture at most {} bytes go, as kernel arguments (pass the inputs as device "
          "tensors; a packed batch's segment tables are uploaded whole)",
          bytes, kCaptureUploadBytes));
    PARARNN_CUDA_CHECK(kernels::launch_write_argument_bytes(dst, src, bytes, current_stream()));
    bytes_to_device.fetch_add(bytes);
    return;
  }
  // From pageable memory the source is staged before the call returns, so it may go at once.
  PARARNN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, current_stream()));
  bytes_to_device.fetch_add(bytes);
}

void upload(DeviceBuffer& dst, const void* src, std::size_t bytes) { copy_to_device(dst.get(), src, bytes); }

DeviceBuffer upload_new(const void* src, std::size_t bytes, const char* what, Allocation how) {
  DeviceBuffer dst(bytes, what, how);
  upload(dst, src, bytes);
  return dst;
}

// A contiguous copy on the device of a device view of any strides (one gather kernel).
DeviceBuffer gather_contiguous(const TensorView& view, const char* what) {
  if (view.dim() > kernels::kStridedCopyMaxRank)
    throw UnsupportedPath(fmt::format("CUDA backend: {} has {} dimensions; at most {} are gathered",
                                      what, view.dim(), kernels::kStridedCopyMaxRank));
  const std::size_t element = dtype_size(view.dtype());
  DeviceBuffer out(checked_bytes(view.numel(), element, what), what);
  kernels::StridedCopyArgs args{.src = view.data(), .dst = out.get(),
                                .rank = static_cast<int>(view.dim()),
                                .element_bytes = static_cast<int>(element)};
  for (std::int64_t d = 0; d < view.dim(); ++d) {
    args.shape[static_cast<std::size_t>(d)] = view.shape()[static_cast<std::size_t>(d)];
    args.strides[static_cast<std::size_t>(d)] = view.strides()[static_cast<std::size_t>(d)];
  }
  PARARNN_CUDA_CHECK(kernels::launch_strided_copy(args, current_stream()));
  return out;
}

// A contiguous host copy of a view on either side.
Tensor host_copy(const TensorView& view, const char* what) {
  if (view.device() == Device::cpu) return Tensor::copy_of(view);
  Tensor out(view.dtype(), view.shape());
  const DeviceBuffer contiguous = gather_contiguous(view, what);
  if (out.nbytes() > 0)
    copy_to_host(out.data(), contiguous.get(), out.nbytes());
  return out;
}

const void* contiguous_on_device(const TensorView& view, DeviceBuffer& holder, const char* what) {
  if (view.device() == Device::cpu) {
    const Tensor host = view.is_contiguous() ? Tensor() : Tensor::copy_of(view);
    const void* src = host.defined() ? host.data() : view.data();
    holder = upload_new(src, checked_bytes(view.numel(), dtype_size(view.dtype()), what), what);
    return holder.get();
  }
  if (view.is_contiguous()) return view.data();
  holder = gather_contiguous(view, what);
  return holder.get();
}

kernels::StoreType store_type(DType d) {
  switch (d) {
    case DType::f64: return kernels::StoreType::f64;
    case DType::f32: return kernels::StoreType::f32;
    case DType::f16: return kernels::StoreType::f16;
    case DType::bf16: return kernels::StoreType::bf16;
    default: break;
  }
  throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(d));
}

const void* on_device_as(const TensorView& view, DType dtype, DeviceBuffer& holder, const char* what) {
  if (view.dtype() == dtype) return contiguous_on_device(view, holder, what);
  DeviceBuffer own;
  const void* src = contiguous_on_device(view, own, what);
  holder = DeviceBuffer(checked_bytes(view.numel(), dtype_size(dtype), what), what);
  if (view.numel() == 0) return holder.get();
  const kernels::StridedStoreArgs args{.src = src, .src_type = store_type(view.dtype()), .dst = holder.get(),
                                       .dst_type = store_type(dtype), .rank = 1, .shape = {view.numel()},
                                       .strides = {1}};
  PARARNN_CUDA_CHECK(kernels::launch_strided_store(args, current_stream()));
  return holder.get();
}

TensorView parameter_view(const Cell& cell, const ApplyOptions& options, const std::string& name) {
  const TensorView view = parameter_of(cell, options, name);
  if (view.device() == Device::cuda) {
    int current = 0;
    PARARNN_CUDA_CHECK(cudaGetDevice(&current));
    if (view.device_id() != current)
      throw ContractViolation(fmt::format("parameters['{}']", name),
                              fmt::format("must be on the solve's device {}", current),
                              fmt::format("device {}", view.device_id()));
  }
  return view;
}

DeviceBuffer channel_values_on_device(const Cell& cell, const ApplyOptions& options, DType compute) {
  const std::vector<double> values = cell.channel_values();
  const std::int64_t D = cell.d_h();
  const std::int64_t rows = D > 0 ? static_cast<std::int64_t>(values.size()) / D : 0;
  const Tensor host = Tensor::from_values(compute, {rows, D}, values);
  DeviceBuffer out = upload_new(host.data(), host.nbytes(), "recurrent parameters");
  const auto& entries = cell.spec().recurrent;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::string name(entries[k].tensor);
    if (!options.parameters.count(name)) continue;
    const TensorView view = parameter_view(cell, options, name);
    const std::int64_t first = entries[k].row < 0 ? 0 : entries[k].row * D;
    auto* dst = static_cast<std::byte*>(out.get()) + static_cast<std::size_t>(k) * D * dtype_size(compute);
    if (D == 0) continue;
    const kernels::StridedStoreArgs args{
        .src = static_cast<const std::byte*>(view.data()) + static_cast<std::size_t>(first) * dtype_size(view.dtype()),
        .src_type = store_type(view.dtype()), .dst = dst, .dst_type = store_type(compute), .rank = 1,
        .shape = {D}, .strides = {1}};
    PARARNN_CUDA_CHECK(kernels::launch_strided_store(args, current_stream()));
    if (const auto cap = cell.max_recurrent_norm())
      PARARNN_CUDA_CHECK(kernels::launch_clamp_abs(store_type(compute), dst, D, *cap, current_stream()));
  }
  return out;
}

DeviceBuffer broadcast_on_device(double value, DType dtype, std::int64_t count, const char* what) {
  DeviceBuffer out(checked_bytes(count, dtype_size(dtype), what), what);
  if (count == 0) return out;
  const double values[1] = {value};
  const Tensor one = Tensor::from_values(dtype, {1}, values);
  const DeviceBuffer element = upload_new(one.data(), one.nbytes(), what);
  const kernels::StridedCopyArgs args{.src = element.get(), .dst = out.get(), .rank = 1, .shape = {count},
                                      .strides = {0}, .element_bytes = static_cast<int>(dtype_size(dtype))};
  PARARNN_CUDA_CHECK(kernels::launch_strided_copy(args, current_stream()));
  return out;
}

// The device of a solve: x's, or h0's, or the current one for host inputs.
int solve_device(const TensorView& x, const ApplyOptions& options) {
  std::optional<int> device;
  if (x.device() == Device::cuda) device = x.device_id();
  if (options.h0 && options.h0->device() == Device::cuda) {
    if (device && *device != options.h0->device_id())
      throw UnsupportedPath(fmt::format("CUDA backend: x is on device {} and h0 on device {}; "
                                        "pass both on one device",
                                        *device, options.h0->device_id()));
    device = options.h0->device_id();
  }
  if (device) return *device;
  int current = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&current));
  return current;
}

Tensor download_trajectory(const DeviceBuffer& H, DType dtype, const Cell& cell, const Shape& shape,
                           bool keep_compute) {
  Tensor out(dtype, shape);
  if (out.nbytes() > 0)
    copy_to_host(out.data(), H.get(), out.nbytes());
  return dtype == cell.dtype() || keep_compute ? out : Tensor::converted(out, cell.dtype());
}

void check_store_target(const TensorView& out, const char* what) {
  if (out.device() != Device::cuda) return;
  int current = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&current));
  if (out.device_id() != current)
    throw UnsupportedPath(fmt::format("CUDA backend: {} is on device {} and the solve runs on device {}; "
                                      "pass it on the solve's device (or on the host)",
                                      what, out.device_id(), current));
  if (out.dim() > kernels::kStridedCopyMaxRank)
    throw UnsupportedPath(fmt::format("CUDA backend: {} has {} dimensions; at most {} are written on the device",
                                      what, out.dim(), kernels::kStridedCopyMaxRank));
}

void store_into(const void* src, DType src_dtype, const TensorView& out, const char* what) {
  check_store_target(out, what);
  if (out.numel() == 0) return;
  if (out.device() == Device::cpu) {
    Tensor host(src_dtype, out.shape());
    copy_to_host(host.data(), src, host.nbytes());
    copy_into(out, src_dtype == out.dtype() ? host : Tensor::converted(host, out.dtype()), what);
    return;
  }
  if (out.is_contiguous() && out.dtype() == src_dtype) {
    if (out.data() != src)
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, checked_bytes(out.numel(), dtype_size(src_dtype), what),
                                         cudaMemcpyDeviceToDevice, current_stream()));
  } else {
    kernels::StridedStoreArgs args{.src = src, .src_type = store_type(src_dtype), .dst = out.data(),
                                   .dst_type = store_type(out.dtype()), .rank = static_cast<int>(out.dim())};
    for (std::int64_t d = 0; d < out.dim(); ++d) {
      args.shape[static_cast<std::size_t>(d)] = out.shape()[static_cast<std::size_t>(d)];
      args.strides[static_cast<std::size_t>(d)] = out.strides()[static_cast<std::size_t>(d)];
    }
    PARARNN_CUDA_CHECK(kernels::launch_strided_store(args, current_stream()));
  }
  synchronize();
}

SavedOnDevice::SavedOnDevice(DeviceBuffer H, std::shared_ptr<const DeviceBuffer> wx, int device, DType compute,
                             Shape shape)
    : H_(std::move(H)), wx_(std::move(wx)), device_(device), compute_(compute), shape_(std::move(shape)) {}

std::size_t SavedOnDevice::bytes() const { return H_.bytes() + (wx_ ? wx_->bytes() : 0); }

Tensor SavedOnDevice::host() const {
  DeviceGuard guard(device_);
  Tensor out(compute_, shape_);
  if (out.nbytes() > 0)
    copy_to_host(out.data(), H_.get(), out.nbytes());
  return out;
}

const void* SavedOnDevice::on_current_device(DeviceBuffer& holder) const {
  int current = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device_) return H_.get();
  holder = DeviceBuffer(H_.bytes(), "H* (peer copy)");
  PARARNN_CUDA_CHECK(cudaMemcpyPeer(holder.get(), current, H_.get(), device_, H_.bytes()));
  return holder.get();
}

std::shared_ptr<const DeviceBuffer> SavedOnDevice::wx_on_current_device() const {
  int current = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&current));
  return current == device_ ? wx_ : nullptr;
}

std::shared_ptr<const SavedTrajectory> saved_on_device(DeviceBuffer H, DType compute, Shape shape) {
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  return std::make_shared<const SavedOnDevice>(std::move(H), nullptr, device, compute, std::move(shape));
}

const void* saved_on_current_device(const NewtonForward& forward, DType compute, std::int64_t numel,
                                    DeviceBuffer& holder) {
  if (!forward.saved_trajectory) return nullptr;
  auto refuse = [&](DType dtype, std::int64_t count) {
    if (dtype != compute || count != numel)
      throw ContractViolation("forward", "must come from newton_forward on this cell and x",
                              fmt::format("a saved trajectory of {} {} values where this cell and x give {} {}",
                                          count, dtype_name(dtype), numel, dtype_name(compute)));
  };
  if (const auto* on_device = dynamic_cast<const SavedOnDevice*>(forward.saved_trajectory.get())) {
    refuse(on_device->compute(), on_device->numel());
    return on_device->on_current_device(holder);
  }
  const Tensor saved = forward.saved_trajectory->host();  // a forward of the CPU backend
  refuse(saved.dtype(), saved.numel());
  holder = upload_new(saved.data(), saved.nbytes(), "H*");
  return holder.get();
}

Tensor deliver_trajectory(const void* H, DType compute, const Cell& cell, const Shape& shape, const TensorView* out,
                          const char* what) {
  if (out) {
    store_into(H, compute, *out, what);
    return Tensor();
  }
  Tensor host(compute, shape);
  if (host.nbytes() > 0)
    copy_to_host(host.data(), H, host.nbytes());
  return compute == cell.dtype() ? host : Tensor::converted(host, cell.dtype());
}

void deliver_input_gradient(const void* dx, DType compute, const Cell& cell, const Layout& L,
                            const TensorView* grad_x, NewtonGradients& out) {
  out.x = deliver_trajectory(dx, compute, cell, {L.batch, L.time, L.d_in}, grad_x, "grad_x");
}

DeviceBuffer owned_f64_on_device(const TensorView& view, const char* what) {
  DeviceBuffer holder;
  const void* values = on_device_as(view, DType::f64, holder, what);
  if (holder.get() != nullptr || view.numel() == 0) return holder;
  DeviceBuffer own(checked_bytes(view.numel(), sizeof(double), what), what);  // on_device_as lent the view itself
  PARARNN_CUDA_CHECK(cudaMemcpyAsync(own.get(), values, own.bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  return own;
}

namespace {

// The DeviceBuffer byte counters (device_memory).
std::atomic<std::size_t> live_device_bytes{0}, peak_device_bytes{0};

// stream_capturing for a destructor: an unreadable status counts as captured (no wait).
bool capturing_noexcept() noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

void count_allocation(std::size_t bytes) {
  const std::size_t now = live_device_bytes.fetch_add(bytes) + bytes;
  std::size_t peak = peak_device_bytes.load();
  while (now > peak && !peak_device_bytes.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

DeviceMemory device_memory() { return {.live = live_device_bytes.load(), .peak = peak_device_bytes.load()}; }
void reset_device_peak() { peak_device_bytes.store(live_device_bytes.load()); }

namespace {

std::mutex pools_mutex;
std::map<int, cudaMemPool_t> pools;  // the backend's pool of each device it has used

// The backend's memory pool of `device` (created at first use, never destroyed: it outlives
// every DeviceBuffer), keeping what is freed (release threshold: all); null where the device
// has no memory pools (then stream-ordered buffers fall back to cudaMalloc).
cudaMemPool_t backend_pool(int device) {
  std::lock_guard lock(pools_mutex);
  if (const auto it = pools.find(device); it != pools.end()) return it->second;
  int supported = 0;
  PARARNN_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  cudaMemPool_t pool = nullptr;
  if (supported != 0) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    PARARNN_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
    std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
    PARARNN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  pools.emplace(device, pool);
  return pool;
}

// Every pool back to its device (shutdown_backend): destroyed once its buffers are freed (a
// buffer still alive keeps its memory until then, as cudaMemPoolDestroy allows).
void release_pools() {
  std::map<int, cudaMemPool_t> released;
  {
    std::lock_guard lock(pools_mutex);
    released.swap(pools);
  }
  for (const auto& [device, pool] : released) {
    if (pool == nullptr || cudaSetDevice(device) != cudaSuccess) continue;
    (void)cudaMemPoolTrimTo(pool, 0);
    (void)cudaMemPoolDestroy(pool);
  }
}

// The backend's pool of `device` if it has one already (null: never used, or no pools there).
cudaMemPool_t existing_pool(int device) {
  std::lock_guard lock(pools_mutex);
  const auto it = pools.find(device);
  return it != pools.end() ? it->second : nullptr;
}

}  // namespace

std::size_t cached_memory(int device) {
  cudaMemPool_t pool = existing_pool(device);
  if (pool == nullptr) return 0;
  std::uint64_t reserved = 0, used = 0;
  PARARNN_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  PARARNN_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return static_cast<std::size_t>(reserved - std::min(reserved, used));
}

void release_cached_memory(int device) {
  cudaMemPool_t pool = existing_pool(device);
  if (pool == nullptr) return;
  DeviceGuard guard(device);
  PARARNN_CUDA_CHECK(cudaDeviceSynchronize());  // the frees of every stream
  PARARNN_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what, Allocation how) : bytes_(bytes), how_(how) {
  if (bytes == 0) return;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device_));
  if (how == Allocation::stream_ordered && stream_capturing()) graph_stream_ = current_stream();
  if (how == Allocation::stream_ordered && current_allocator()) {
    // The caller's allocator (torch's caching allocator, say): its failure is named with it.
    const std::shared_ptr<const DeviceAllocator>& allocator = current_allocator();
    std::string why = "it returned no memory";
    try {
      if (allocator->allocate) data_ = allocator->allocate(bytes, device_, current_stream());
      else why = "it has no allocate function";
    } catch (const std::exception& e) {
      data_ = nullptr;
      why = e.what();
    }
    if (data_ == nullptr) {
      bytes_ = 0;
      throw Error(fmt::format("CUDA backend: the allocator '{}' could not allocate {} bytes for {} on device {}: {}",
                              allocator->name, bytes, what, device_, why));
    }
    allocator_ = allocator;
    count_allocation(bytes);
    return;
  }
  cudaMemPool_t pool = how == Allocation::stream_ordered ? backend_pool(device_) : nullptr;
  if (pool == nullptr) how_ = Allocation::synchronous;
  auto allocate = [&] {
    return pool != nullptr ? cudaMallocFromPoolAsync(&data_, bytes, pool, current_stream()) : cudaMalloc(&data_, bytes);
  };
  cudaError_t e = allocate();
  if (e == cudaErrorMemoryAllocation && !capturing_noexcept()) {
    // What the pool keeps may be what is missing (for a cudaMalloc too): return it to the
    // device once and retry (not under capture, where the device cannot be waited for).
    (void)cudaGetLastError();
    release_cached_memory(device_);
    e = allocate();
  }
  if (e != cudaSuccess) {
    data_ = nullptr;
    bytes_ = 0;
    (void)cudaGetLastError();
    throw Error(fmt::format("CUDA backend: {} of {} bytes for {} failed: {} ({})",
                            pool != nullptr ? "cudaMallocFromPoolAsync" : "cudaMalloc", bytes, what,
                            cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  count_allocation(bytes);
}

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (allocator_) {
    // As below: while unwinding from an error, the queued work may still use the memory.
    if (std::uncaught_exceptions() > 0 && !capturing_noexcept()) (void)cudaStreamSynchronize(current_stream());
    try {
      if (allocator_->deallocate) allocator_->deallocate(data_, bytes_, device_, graph_stream_.value_or(current_stream()));
    } catch (...) {  // a destructor cannot throw: the memory stays with the allocator
    }
    allocator_.reset();
  } else if (how_ == Allocation::stream_ordered) {
    int current = device_;
    (void)cudaGetDevice(&current);
    if (current != device_) (void)cudaSetDevice(device_);
    // Unwinding from an error: the work queued before it may still read or write the caller's
    // memory, which the caller may free once it has caught the error. Wait for it, as the
    // device-wide cudaFree of a synchronous buffer does.
    if (std::uncaught_exceptions() > 0 && !capturing_noexcept()) (void)cudaStreamSynchronize(current_stream());
    (void)cudaFreeAsync(data_, graph_stream_.value_or(current_stream()));
    if (current != device_) (void)cudaSetDevice(current);
  } else {
    (void)cudaFree(data_);
  }
  live_device_bytes.fetch_sub(bytes_);
  data_ = nullptr;
  graph_stream_.reset();
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_), how_(other.how_), allocator_(std::move(other.allocator_)),
      graph_stream_(std::exchange(other.graph_stream_, std::nullopt)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    how_ = other.how_;
    allocator_ = std::move(other.allocator_);
    graph_stream_ = std::exchange(other.graph_stream_, std::nullopt);
  }
  return *this;
}

void require_available(const char* who) {
  std::string why;
  if (!cuda_backend_available(&why)) throw UnsupportedPath(fmt::format("{}: {}", who, why));
}

void require_device_index(int device, const char* who) {
  require_available(who);
  int count = 0;
  PARARNN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw ContractViolation("device", fmt::format("must name one of the {} CUDA devices", count),
                            std::to_string(device));
}

void synchronize() {
  if (outcome_unread()) return;
  PARARNN_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  stream_syncs.fetch_add(1);
}

}  // namespace cuda

bool cuda_backend_available(std::string* why_not) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why_not)
      *why_not = fmt::format("no usable CUDA device (cudaGetDeviceCount: {}: {})",
                             cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
  }
  if (count == 0) {
    if (why_not) *why_not = "no CUDA device (cudaGetDeviceCount found 0)";
    return false;
  }
  return true;
}

void cuda_write_view(const TensorView& out, const Tensor& value, const char* argument,
                     std::optional<void*> stream) {
  cuda::require_available(argument);
  cuda::DeviceGuard guard(out.device_id());
  cuda::StreamScope on_stream(stream);
  const cuda::DeviceBuffer staged = cuda::upload_new(value.data(), value.nbytes(), argument);
  cuda::store_into(staged.get(), value.dtype(), out, argument);
}

int cuda_solve_device(const TensorView& x, const ApplyOptions& options) {
  return cuda::solve_device(x, options);
}

}  // namespace pararnn::detail

namespace pararnn {

CudaTransferBytes cuda_transfer_bytes() {
  return {.to_device = detail::cuda::bytes_to_device.load(), .to_host = detail::cuda::bytes_to_host.load(),
          .host_reads = detail::cuda::host_reads.load(), .stream_syncs = detail::cuda::stream_syncs.load()};
}

void cuda_shutdown() { detail::cuda::shutdown_backend(); }

void cuda_release_cached_memory(int device) {
  detail::cuda::require_device_index(device, "cuda_release_cached_memory");
  detail::cuda::release_cached_memory(device);
}

std::size_t cuda_cached_memory(int device) {
  detail::cuda::require_device_index(device, "cuda_cached_memory");
  return detail::cuda::cached_memory(device);
}

}  // namespace pararnn
