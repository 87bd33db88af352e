// The CUDA backend (host orchestration; the kernels live in pararnn::kernels): inputs brought to
// the device once and made contiguous there, the input affine W_x x + b by cuBLAS in the compute
// type (f32: cuBLASLt with the bias epilogue), then the one Newton driver (newton/driver.hpp) over the per-channel family on the device:
// by default the fused step (kernels/newton_step.hpp: F, J, the scan and H += ωδ in one kernel),
// or (NewtonStrategy::host_driven) the residual kernel, the scan and an axpy; one host
// read of max|F| per iteration; an adaptive solve with B·d at or above the auto rule's threshold
// (sequential_min_chains) runs the sequential kernel instead. Returns host tensors in
// the storage dtype, like every public entry point.
//
// Dtypes: f64 computes in f64, f32/f16/bf16 in f32. Newton runs for all four (the f16/bf16
// trajectory lives in f32 on the device, as the CPU backend keeps it in f32, and is rounded to
// the storage dtype once at the end); the same-dtype sequential loop rounds its state to the
// storage dtype every step (__half / __nv_bfloat16 kernels for f16 / bf16), as the CPU's does.
// Cells: those with Newton kernels (kernels/newton_cells.hpp: every per-channel cell; CfC's Δt
// gate is filled on the device, sLSTM's Picard guess runs the sequential kernel with the hidden
// slot frozen); the dense, RWKV-7 and M2RNN cells run in cuda/dense.cpp, cuda/exact_linear.cpp and cuda/matrix_state.cpp.
// Training (training.hpp) for the per-channel cells: the forward is the solve above (it repeats
// bit for bit, so recompute re-solves exactly H*), the backward as J at H* and a reverse scan in f64 plus a per-element VJP
// (adjoint_backward). CudaDecoder (decode.hpp) lives here too: every per-channel cell, on the
// caller's stream.
#include "cuda/runtime.hpp"
#include "newton/driver.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <span>
#include <utility>
#include <vector>

#include "pararnn/core/logging.hpp"
#include "pararnn/solver/decode.hpp"
#include "pararnn/kernels/cell_residual.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/decode.hpp"
#include "pararnn/kernels/newton_cells.hpp"
#include "pararnn/kernels/newton_step.hpp"
#include "pararnn/kernels/time_gate.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/sequential.hpp"
#include "pararnn/kernels/strided_copy.hpp"
#include "pararnn/kernels/tile_max.hpp"
#include "pararnn/kernels/windowed_newton.hpp"

namespace pararnn::detail {
namespace cuda {
namespace {

// The cells with CUDA Newton kernels (kernels::kHasNewtonKernels); the others are refused with
// UnsupportedPath until their kernels exist.
template <class F>
decltype(auto) dispatch_cuda_cell(CellKind kind, F&& f) {
  return dispatch_cell(kind, [&]<class CellMath>() -> decltype(auto) {
    if constexpr (kernels::kHasNewtonKernels<CellMath>) {
      return f.template operator()<CellMath>();
    } else {
      throw UnsupportedPath(fmt::format("scan_backend=cuda: no CUDA Newton kernels for cell '{}' yet; "
                                        "use cpu", cell_spec(kind).name));
      return f.template operator()<cells::GruDiagMath>();  // unreachable; fixes the return type
    }
  });
}

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

// One cuBLAS handle per (thread, device), created at first use (never during static
// initialisation) and deliberately never destroyed: cublasDestroy at thread or process exit can
// run after the CUDA runtime has shut down.
cublasHandle_t cublas_handle() {
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasHandle_t handle = nullptr;
    PARARNN_CUBLAS_CHECK(cublasCreate(&handle));
    it = handles.emplace(device, handle).first;
  }
  PARARNN_CUBLAS_CHECK(cublasSetStream(it->second, kStream));
  return it->second;
}

std::size_t checked_bytes(std::int64_t count, std::size_t element_bytes, const char* what) {
  if (count < 0 || static_cast<std::uint64_t>(count) >
                       std::numeric_limits<std::size_t>::max() / std::max<std::size_t>(element_bytes, 1))
    throw Error(fmt::format("CUDA backend: {} of {} elements is too large", what, count));
  return static_cast<std::size_t>(count) * element_bytes;
}

void upload(DeviceBuffer& dst, const void* src, std::size_t bytes) {
  if (bytes > 0) PARARNN_CUDA_CHECK(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice));
}

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
  PARARNN_CUDA_CHECK(kernels::launch_strided_copy(args, kStream));
  return out;
}

// A contiguous host copy of a view on either side.
Tensor host_copy(const TensorView& view, const char* what) {
  if (view.device() == Device::cpu) return Tensor::copy_of(view);
  Tensor out(view.dtype(), view.shape());
  const DeviceBuffer contiguous = gather_contiguous(view, what);
  if (out.nbytes() > 0)
    PARARNN_CUDA_CHECK(cudaMemcpy(out.data(), contiguous.get(), out.nbytes(), cudaMemcpyDeviceToHost));
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

namespace {

// The inputs of one solve on the device, in the compute type. W_x x is computed (the input
// GEMMs) unless `saved_wx` holds it already: the training forward's, of the same cell and x on
// this device, kept for its backward (shared_wx()).
class DeviceInputs {
 public:
  DeviceInputs(const Cell& cell, const TensorView& x, const ApplyOptions& options,
               const Layout& L, std::shared_ptr<const DeviceBuffer> saved_wx = nullptr)
      : compute_(compute_dtype(cell.dtype())) {
    const CellSpec& spec = cell.spec();
    const std::int64_t D = L.d_h;
    const std::int64_t width = spec.gates * D, rows = L.batch * L.time;
    problem_.batch = L.batch;
    problem_.time = L.time;
    problem_.channels = D;

    // Per-channel values (clamped recurrent entries, then constants), as the CPU backend uses.
    const std::vector<double> rec = cell.channel_values();
    const std::int64_t R = static_cast<std::int64_t>(rec.size()) / D;
    const Tensor rec_compute = Tensor::from_values(compute_, {R, D}, rec);
    recurrent_ = upload_new(rec_compute.data(), rec_compute.nbytes(), "recurrent parameters");
    problem_.recurrent = recurrent_.get();

    const std::size_t wx_bytes = checked_bytes(rows * width, dtype_size(compute_), "W_x x");
    if (saved_wx) {
      if (saved_wx->bytes() != wx_bytes)
        throw Error(fmt::format("CUDA backend: the saved W_x x holds {} bytes, the solve needs {}",
                                saved_wx->bytes(), wx_bytes));
      wx_ = std::move(saved_wx);
    } else {
      wx_ = computed_wx(cell, x, L, wx_bytes);
    }
    problem_.wx = wx_->get();

    if (options.h0) {
      const Tensor h0 = Tensor::converted(host_copy(*options.h0, "h0"), compute_);
      h0_ = upload_new(h0.data(), h0.nbytes(), "h0");
      problem_.h0 = h0_.get();
    }
    if (L.packed) {
      head_ = upload_new(L.heads.data(), L.heads.size(), "segment heads");
      h0_row_ = upload_new(L.state_index.data(), L.state_index.size() * sizeof(std::int64_t),
                           "segment h0 rows");
      problem_.head = head_.as<std::uint8_t>();
      problem_.h0_row = h0_row_.as<std::int64_t>();
    }
  }

  const DeviceProblem& problem() const { return problem_; }
  DType compute() const { return compute_; }
  // W_x x, to be kept beyond this object (SavedOnDevice).
  std::shared_ptr<const DeviceBuffer> shared_wx() const { return wx_; }

 private:
  // W_x x by the input affines: every block's bias in one row, then each block's GEMM onto its
  // gates; CfC's Δt gate block after them.
  std::shared_ptr<const DeviceBuffer> computed_wx(const Cell& cell, const TensorView& x, const Layout& L,
                                                  std::size_t wx_bytes) {
    const CellSpec& spec = cell.spec();
    const std::int64_t D = L.d_h, width = spec.gates * D, rows = L.batch * L.time;
    DeviceBuffer x_buffer;
    const void* x_device = contiguous_on_device(x, x_buffer, "x");
    std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
    std::vector<DeviceBuffer> weights;
    std::vector<DeviceAffine> blocks;
    for (const AffineBlock& block : spec.affine) {
      const Tensor& weight = cell.parameter(std::string(block.weight));
      weights.push_back(upload_new(weight.data(), weight.nbytes(), "an input weight"));
      blocks.push_back({.weight = weights.back().get(), .first_column = block.first_gate * D,
                        .outputs = block.gates * D, .inputs = cell.affine_inputs(block)});
      const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
      std::copy(b.begin(), b.end(), bias_row.begin() + block.first_gate * D);
    }
    const Tensor bias = Tensor::from_values(compute_, {width}, bias_row);
    const DeviceBuffer bias_device = upload_new(bias.data(), bias.nbytes(), "the input biases");
    auto wx = std::make_shared<DeviceBuffer>(wx_bytes, "W_x x");
    input_affine(cell.dtype(), rows, L.d_in, width, bias_device.get(), x_device, blocks, wx->get());
    if (spec.dt_gate >= 0) fill_time_gate(cell, x_device, rows, L.d_in, *wx);
    // The input buffers freed at scope exit are still read by the GEMM queued above.
    synchronize();
    return wx;
  }

  // CfC's Δt gate block of wx: max(x[..., −1], floor) broadcast over the channels.
  void fill_time_gate(const Cell& cell, const void* x, std::int64_t rows, std::int64_t d_in, DeviceBuffer& wx) {
    dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
      using ComputeT = kernels::ComputeOf<StorageT>;
      const kernels::TimeGateArgs<StorageT> args{
          .x = static_cast<const StorageT*>(x), .wx = wx.as<ComputeT>(), .rows = rows, .d_in = d_in,
          .channels = cell.d_h(), .gates = cell.spec().gates, .dt_gate = cell.spec().dt_gate,
          .floor = cells::kCfcDtFloor};
      PARARNN_CUDA_CHECK(kernels::launch_time_gate(args, kStream));
    });
  }

 private:
  DType compute_;
  DeviceBuffer recurrent_, h0_, head_, h0_row_;
  std::shared_ptr<const DeviceBuffer> wx_;
  DeviceProblem problem_;
};

}  // namespace

Tensor download_trajectory(const DeviceBuffer& H, DType dtype, const Cell& cell, const Shape& shape,
                           bool keep_compute) {
  Tensor out(dtype, shape);
  if (out.nbytes() > 0)
    PARARNN_CUDA_CHECK(cudaMemcpy(out.data(), H.get(), out.nbytes(), cudaMemcpyDeviceToHost));
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
    PARARNN_CUDA_CHECK(cudaMemcpy(host.data(), src, host.nbytes(), cudaMemcpyDeviceToHost));
    copy_into(out, src_dtype == out.dtype() ? host : Tensor::converted(host, out.dtype()), what);
    return;
  }
  if (out.is_contiguous() && out.dtype() == src_dtype) {
    if (out.data() != src)
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, checked_bytes(out.numel(), dtype_size(src_dtype), what),
                                         cudaMemcpyDeviceToDevice, kStream));
  } else {
    auto type_of = [](DType d) {
      switch (d) {
        case DType::f64: return kernels::StoreType::f64;
        case DType::f32: return kernels::StoreType::f32;
        case DType::f16: return kernels::StoreType::f16;
        case DType::bf16: return kernels::StoreType::bf16;
        default: break;
      }
      throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(d));
    };
    kernels::StridedStoreArgs args{.src = src, .src_type = type_of(src_dtype), .dst = out.data(),
                                   .dst_type = type_of(out.dtype()), .rank = static_cast<int>(out.dim())};
    for (std::int64_t d = 0; d < out.dim(); ++d) {
      args.shape[static_cast<std::size_t>(d)] = out.shape()[static_cast<std::size_t>(d)];
      args.strides[static_cast<std::size_t>(d)] = out.strides()[static_cast<std::size_t>(d)];
    }
    PARARNN_CUDA_CHECK(kernels::launch_strided_store(args, kStream));
  }
  synchronize();
}

namespace {

// How the hidden slot enters the steps of a sequential pass: carried (the recurrence), or, for
// sLSTM's Picard guess, zero or frozen to a previous pass (kernels/sequential.hpp).
template <class ComputeT>
struct HiddenInput {
  bool zero = false;
  const ComputeT* frozen = nullptr;
  unsigned int* non_finite = nullptr;  // SequentialArgs::non_finite
};

// The sequential kernel over the whole problem, the state stored in T (the storage or the
// compute type).
template <class CellMath, class T>
void run_sequential(const DeviceProblem& p, T* H, HiddenInput<kernels::ComputeOf<T>> hidden = {}) {
  using ComputeT = kernels::ComputeOf<T>;
  kernels::SequentialArgs<T> a{.wx = static_cast<const ComputeT*>(p.wx),
                               .recurrent = static_cast<const ComputeT*>(p.recurrent),
                               .h0 = static_cast<const ComputeT*>(p.h0),
                               .h0_row = p.h0_row,
                               .head = p.head,
                               .H = H,
                               .batch = p.batch,
                               .time = p.time,
                               .channels = p.channels,
                               .frozen_hidden = hidden.frozen,
                               .zero_hidden = hidden.zero,
                               .non_finite = hidden.non_finite};
  PARARNN_CUDA_CHECK((kernels::launch_sequential_apply<CellMath, T>(a, kStream)));
}

// The per-channel family on the device (newton/family.hpp): the residual kernel for F, J and
// max|F|, the affine scan and cuBLAS axpy for the update, the sequential kernel for the Picard
// guess and the fallback; the iterate H [b][t][s][c] in the compute type.
template <class CellMath, class ComputeT>
class CudaPerChannelFamily {
 public:
  static constexpr int S = CellMath::kSlots;

  CudaPerChannelFamily(const DeviceProblem& problem, NewtonWorkspace& workspace, ComputeT* H)
      : p_(problem), ws_(workspace), out_(H), H_(H),
        n_(problem.batch * problem.time * S * problem.channels) {}

  // The fused strategy (NewtonWorkspace::fused): one kernel evaluates max|F| of H and computes
  // the candidate H + ωδ into the other iterate buffer; the driver commits it or, on the seed's
  // early stop, keeps H. The App. A guess is deferred into the first step (`from_guess`: no pass
  // of its own) and written out only if a later operation needs it as H; the buffers alternate
  // so that `expected_updates` commits end in the caller's buffer (no final copy).
  bool fused() const { return ws_.fused; }
  bool defer_guess(std::int64_t expected_updates) {
    if (!ws_.fused) return false;
    guess_pending_ = true;
    expected_updates_ = expected_updates;
    steps_ = 0;
    result_known_ = false;
    H_ = expected_updates % 2 == 1 ? second_iterate() : out_;
    return true;
  }
  // From the step expected to be the last on, the step also reduces max|F| of its result but at
  // the chunk starts (NewtonStepArgs::max_abs_result), so that the final residual is a pass over
  // 1/L of the steps (residual_max) instead of all of them.
  double evaluate_and_step(double omega) {
    ComputeT* next = H_ == out_ ? second_iterate() : out_;
    if (ws_.step_workspace.bytes() == 0)
      ws_.step_workspace = DeviceBuffer(kernels::newton_step_workspace_bytes<CellMath, ComputeT>(p_.batch, p_.time, p_.channels),
                                        "the fused Newton step workspace");
    const bool want_result = expected_updates_ > 0 && steps_ + 1 >= expected_updates_;
    const kernels::NewtonStepArgs<ComputeT> a{.wx = static_cast<const ComputeT*>(p_.wx),
                                              .recurrent = static_cast<const ComputeT*>(p_.recurrent),
                                              .h0 = static_cast<const ComputeT*>(p_.h0),
                                              .h0_row = p_.h0_row,
                                              .head = p_.head,
                                              .H_in = guess_pending_ ? nullptr : H_,
                                              .H_out = next,
                                              .max_abs_residual = ws_.max_abs.as<ComputeT>(),
                                              .max_abs_result = want_result ? ws_.max_abs.as<ComputeT>() + 1 : nullptr,
                                              .from_guess = guess_pending_,
                                              .batch = p_.batch,
                                              .time = p_.time,
                                              .channels = p_.channels,
                                              .omega = omega};
    PARARNN_CUDA_CHECK((kernels::launch_newton_step<CellMath, ComputeT>(
        a, ws_.step_workspace.get(), ws_.step_workspace.bytes(), kStream)));
    candidate_ = next;
    ComputeT values[2] = {0, 0};
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(values, ws_.max_abs.get(), (want_result ? 2 : 1) * sizeof(ComputeT),
                                       cudaMemcpyDeviceToHost, kStream));
    PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
    candidate_result_ = want_result ? std::optional<double>(static_cast<double>(values[1])) : std::nullopt;
    return static_cast<double>(values[0]);
  }
  void commit_step() {
    H_ = candidate_;
    guess_pending_ = false;
    ++steps_;
    result_known_ = candidate_result_.has_value();
    result_partial_ = candidate_result_.value_or(0.0);
  }
  // The solve's result belongs in the caller's buffer.
  void finish() {
    materialize_guess();
    if (H_ != out_) {
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(out_, H_, bytes(), cudaMemcpyDeviceToDevice, kStream));
      H_ = out_;
    }
  }

  // The auto rule's sequential strategy (NewtonWorkspace::sequential): the sequential kernel in
  // the compute type into the caller's buffer. Its residual (driver.hpp): 0, the solution being
  // the recurrence evaluated step by step, or +inf when a state value is not finite (the
  // kernel's flag, in the max|F| buffer).
  bool prefer_sequential() const { return ws_.sequential; }
  double solve_sequential() {
    guess_pending_ = false;
    result_known_ = false;
    H_ = out_;
    auto* flag = ws_.max_abs.as<unsigned int>();
    PARARNN_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(unsigned int), kStream));
    run_sequential<CellMath, ComputeT>(p_, H_, {.non_finite = flag});
    unsigned int non_finite = 0;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(&non_finite, flag, sizeof non_finite, cudaMemcpyDeviceToHost, kStream));
    PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
    return non_finite != 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
  const char* strategy_name() const { return ws_.fused ? "fused" : "host_driven"; }

  const char* backend_name() const { return "cuda"; }
  std::string fallback_unit() const {
    return fmt::format("chain tile(s) of {} channels", kFallbackTileChannels);
  }
  void zero_iterate() {
    result_known_ = false;
    PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), kStream));
  }
  void iterate_from_residual() {
    result_known_ = false;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, residual(), bytes(), cudaMemcpyDeviceToDevice, kStream));
  }

  // F = f(prepend(H)) − H, J when asked, and max|F| read back when asked (else 0).
  double evaluate(bool with_jacobian, bool reduce) { return residual_pass(with_jacobian, reduce, true); }
  // max|F| of H without writing F (the final residual of a solve).
  // After a committed step that reduced its result's max|F| (evaluate_and_step), only the chunk
  // starts are left: the residual kernel at time_stride L, and the larger of the two (NaN wins).
  double residual_max() {
    if (!result_known_) return residual_pass(false, true, false);
    const double starts = residual_pass(false, true, false, kernels::newton_step_chunk<CellMath, ComputeT>());
    return nan_max(result_partial_, starts);
  }

  // sLSTM's guess (the CPU family's picard_guess): a zero-hidden pass, then `passes` Picard
  // passes, each the sequential kernel with the hidden slot frozen to the previous pass. The
  // passes alternate between H and the residual buffer (free until the first evaluation) so that
  // the last one lands in H.
  void picard_guess(std::int64_t passes) {
    result_known_ = false;
    ComputeT* buffers[2] = {H_, residual()};
    const ComputeT* previous = nullptr;
    for (std::int64_t pass = 0; pass <= passes; ++pass) {
      ComputeT* target = buffers[(passes - pass) % 2];
      run_sequential<CellMath, ComputeT>(p_, target, {.zero = pass == 0, .frozen = previous});
      previous = target;
    }
  }

  // δ from (J, F) in place on F, then H += ω δ.
  void update(double omega) {
    result_known_ = false;
    kernels::ScanArgs<ComputeT> s{.jac = ws_.jacobian.as<ComputeT>(),
                                  .delta = residual(),
                                  .head = p_.head,
                                  .batch = p_.batch,
                                  .time = p_.time,
                                  .channels = p_.channels,
                                  .tiling = ws_.tiling};
    PARARNN_CUDA_CHECK((kernels::launch_scan_affine<S, ComputeT>(
        s, ws_.scan_workspace.get(), ws_.scan_workspace.bytes(), kStream)));
    const ComputeT w = static_cast<ComputeT>(omega);
    cublasHandle_t handle = cublas_handle();
    if constexpr (std::is_same_v<ComputeT, double>) {
      PARARNN_CUBLAS_CHECK(cublasDaxpy_64(handle, n_, &w, residual(), 1, H_, 1));
    } else {
      PARARNN_CUBLAS_CHECK(cublasSaxpy_64(handle, n_, &w, residual(), 1, H_, 1));
    }
  }

  // The tiles (batch row, 64 channels) still at or above atol get the sequential solution; the
  // tiles' max|F| are reduced on the device (kernels/tile_max.hpp), only they reach the host.
  std::int64_t sequential_fallback(double atol) {
    const std::int64_t C = p_.channels, tiles = (C + kFallbackTileChannels - 1) / kFallbackTileChannels;
    const std::int64_t row = p_.time * S * C;
    materialize_guess();
    (void)residual();
    result_known_ = false;
    const std::int64_t units = p_.batch * tiles;
    // Enough (unit, row range) blocks to fill the GPU even for a few units.
    const std::int64_t chunks = std::clamp<std::int64_t>((2048 + units - 1) / std::max<std::int64_t>(units, 1), 1,
                                                         std::max<std::int64_t>(p_.time * S, 1));
    std::vector<double> unit_max(static_cast<std::size_t>(units), 0.0);
    if (units > 0) {
      DeviceBuffer partials(checked_bytes(units * chunks, sizeof(ComputeT), "the tiles' max|F|"), "the tiles' max|F|");
      const kernels::TileMaxArgs<ComputeT> a{.F = residual(), .batch = p_.batch, .rows = p_.time * S, .channels = C,
                                             .tile = kFallbackTileChannels, .chunks = chunks,
                                             .out = partials.as<ComputeT>()};
      PARARNN_CUDA_CHECK(kernels::launch_tile_max_abs(a, kStream));
      std::vector<ComputeT> host(static_cast<std::size_t>(units * chunks));
      PARARNN_CUDA_CHECK(cudaMemcpy(host.data(), partials.get(), partials.bytes(), cudaMemcpyDeviceToHost));
      for (std::int64_t u = 0; u < units; ++u)
        for (std::int64_t j = 0; j < chunks; ++j)
          unit_max[static_cast<std::size_t>(u)] =
              nan_max(unit_max[static_cast<std::size_t>(u)], static_cast<double>(host[static_cast<std::size_t>(u * chunks + j)]));
    }
    return replace_flagged_units<ComputeT>(
        unit_max, atol, n_, H_,
        [&](ComputeT* target) { run_sequential<CellMath, ComputeT>(p_, target); },
        [&](std::int64_t unit, const ComputeT* scratch) {
          const std::int64_t b = unit / tiles, c0 = (unit % tiles) * kFallbackTileChannels;
          const std::int64_t width = std::min(C, c0 + kFallbackTileChannels) - c0;
          const std::size_t pitch = static_cast<std::size_t>(C) * sizeof(ComputeT);
          PARARNN_CUDA_CHECK(cudaMemcpy2DAsync(H_ + b * row + c0, pitch, scratch + b * row + c0, pitch,
                                               static_cast<std::size_t>(width) * sizeof(ComputeT),
                                               static_cast<std::size_t>(p_.time * S), cudaMemcpyDeviceToDevice,
                                               kStream));
        });
  }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(ComputeT); }
  // The fused strategy's second iterate, allocated on first use.
  ComputeT* second_iterate() {
    if (ws_.iterate.bytes() == 0) ws_.iterate = DeviceBuffer(bytes(), "the second iterate H'");
    return ws_.iterate.as<ComputeT>();
  }
  // F's buffer, allocated on first use (the fused strategy needs it only to write out a
  // deferred guess, for sLSTM's Picard guess or for the fallback).
  ComputeT* residual() {
    if (ws_.residual.bytes() == 0) ws_.residual = DeviceBuffer(bytes(), "the residual F");
    return ws_.residual.as<ComputeT>();
  }
  double read_max_abs() {
    ComputeT max_abs = 0;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(&max_abs, ws_.max_abs.get(), sizeof(ComputeT),
                                       cudaMemcpyDeviceToHost, kStream));
    PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
    return static_cast<double>(max_abs);
  }
  // The App. A guess into H_ when it was deferred and something other than a fused step needs
  // the iterate (the early stop at the guess, the final residual, the fallback).
  void materialize_guess() {
    if (!guess_pending_) return;
    guess_pending_ = false;
    zero_iterate();
    (void)residual_pass(false, false, true);
    iterate_from_residual();
  }
  double residual_pass(bool with_jacobian, bool reduce, bool write_residual, std::int64_t time_stride = 1) {
    materialize_guess();
    kernels::CellResidualArgs<ComputeT> a{
        .wx = static_cast<const ComputeT*>(p_.wx),
        .recurrent = static_cast<const ComputeT*>(p_.recurrent),
        .h0 = static_cast<const ComputeT*>(p_.h0),
        .h0_row = p_.h0_row,
        .head = p_.head,
        .H = H_,
        .residual = write_residual ? residual() : nullptr,
        .jac = with_jacobian ? ws_.jacobian.as<ComputeT>() : nullptr,
        .max_abs_residual = reduce ? ws_.max_abs.as<ComputeT>() : nullptr,
        .batch = p_.batch,
        .time = p_.time,
        .channels = p_.channels,
        .time_stride = time_stride};
    PARARNN_CUDA_CHECK((kernels::launch_cell_residual<CellMath, ComputeT>(
        a, ws_.residual_workspace.get(), ws_.residual_workspace.bytes(), kStream)));
    return reduce ? read_max_abs() : 0.0;
  }

  const DeviceProblem& p_;
  NewtonWorkspace& ws_;
  ComputeT* out_;                  // the caller's buffer
  ComputeT* H_;                    // the current iterate: out_, or the workspace's second iterate
  ComputeT* candidate_ = nullptr;  // fused: the iterate the last step computed
  bool guess_pending_ = false;     // fused: H_ is the App. A guess, not yet written
  std::int64_t expected_updates_ = 0, steps_ = 0;  // fused: the updates the driver expects, those committed
  std::optional<double> candidate_result_;          // the last step's max|F| of its result but the chunk starts
  bool result_known_ = false;                       // H_ is that result, unchanged since
  double result_partial_ = 0.0;
  std::int64_t n_;
};

// `view` contiguous on the device in the compute type: in place (a contiguous device view of that
// dtype), one gather (a strided one) or one upload (a host one); a view of another dtype is
// converted on the host first, as the storage types without a device conversion kernel need.
const void* compute_type_on_device(const TensorView& view, DType compute, DeviceBuffer& holder, const char* what) {
  if (view.dtype() == compute) return contiguous_on_device(view, holder, what);
  const Tensor converted = Tensor::converted(host_copy(view, what), compute);
  holder = upload_new(converted.data(), converted.nbytes(), what);
  return holder.get();
}

// The implicit adjoint on the device (training.hpp's contract; the CPU backend's backward with
// its reverse walk replaced by a parallel reverse scan), in double, every input read in the
// compute type and widened in registers (kernels/cell_vjp.hpp): J at H* and the seed μ = grad_H
// (rounded to the compute type first, as the CPU backend does) in one pass, μ by the reverse
// scan, the per-element VJP (d_wx, ∇h0 at heads, recurrent partial sums); then Σ over batch rows
// in double, and the input affines' gradients by cuBLAS in the compute type, one GEMM per batch
// row as the CPU does. ∇x is written straight into grad_x when that is a contiguous compute-type
// view on the device.
template <class CellMath, class ComputeT>
NewtonGradients adjoint_backward(const Cell& cell, const Layout& L, const DeviceProblem& p,
                                 const ComputeT* H, const TensorView& x, const TensorView& grad_H,
                                 const ApplyOptions& options, const TensorView* grad_x) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, R = CellMath::kRecurrent;
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t B = L.batch, T = L.time, D = L.d_h, n = B * T * S * D;
  const std::int64_t width = G * D, rows_bt = B * T;
  const std::int64_t h0_rows = options.h0 ? options.h0->size(0) : 0;
  if (grad_H.numel() != n)
    throw Error(fmt::format("CUDA backward: grad_H holds {} elements, the trajectory {}", grad_H.numel(), n));
  DeviceBuffer grad_H_holder;
  const auto* g = static_cast<const ComputeT*>(
      compute_type_on_device(grad_H, compute, grad_H_holder, "grad_H (compute type)"));

  // J at H* and the seed, then μ by the reverse scan (in place).
  DeviceBuffer J(checked_bytes(n * S, sizeof(double), "J (f64)"), "J (f64)");
  DeviceBuffer mu(checked_bytes(n, sizeof(double), "the adjoint μ"), "the adjoint μ");
  const kernels::CellAdjointJacobianArgs<ComputeT> j{
      .wx = static_cast<const ComputeT*>(p.wx), .recurrent = static_cast<const ComputeT*>(p.recurrent),
      .h0 = static_cast<const ComputeT*>(p.h0), .h0_row = p.h0_row, .head = p.head, .H = H, .grad_H = g,
      .jac = J.as<double>(), .mu = mu.as<double>(), .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_CHECK((kernels::launch_cell_adjoint_jacobian<CellMath, ComputeT>(j, kStream)));
  // The single-pass scan (its association is fixed: the gradients repeat bit for bit). At S1 the
  // three launches take 5.28 ms with it against 5.56 with the three-phase scan, the same d_wx
  // bit for bit and recurrent sums within 1.2e-13 (H200, pararnn_bench_shapes --only backward).
  const kernels::ScanArgs<double> scan{.jac = J.as<double>(), .delta = mu.as<double>(), .head = p.head,
                                       .batch = B, .time = T, .channels = D, .reverse = true,
                                       .tiling = {.algorithm = kernels::ScanAlgorithm::single_pass}};
  DeviceBuffer scan_ws(kernels::scan_affine_workspace_bytes<S, double>(B, T, D, scan.tiling),
                       "the adjoint scan's workspace");
  PARARNN_CUDA_CHECK((kernels::launch_scan_affine<S, double>(scan, scan_ws.get(), scan_ws.bytes(), kStream)));

  // The per-element VJP.
  const std::int64_t chunks = kernels::vjp_partial_chunks(T);
  DeviceBuffer d_wx(checked_bytes(rows_bt * width, sizeof(ComputeT), "d W_x x"), "d W_x x");
  DeviceBuffer partials(checked_bytes(B * chunks * R * D, sizeof(double), "recurrent partials"),
                        "recurrent partials");
  DeviceBuffer d_h0;
  if (options.h0) {
    d_h0 = DeviceBuffer(checked_bytes(h0_rows * S * D, sizeof(double), "∇h0"), "∇h0");
    PARARNN_CUDA_CHECK(cudaMemsetAsync(d_h0.get(), 0, d_h0.bytes(), kStream));
  }
  const kernels::CellVjpArgs<ComputeT> v{
      .wx = static_cast<const ComputeT*>(p.wx), .recurrent = static_cast<const ComputeT*>(p.recurrent),
      .h0 = static_cast<const ComputeT*>(p.h0), .h0_row = p.h0_row, .head = p.head, .H = H,
      .mu = mu.as<double>(), .d_wx = d_wx.as<ComputeT>(), .d_h0 = options.h0 ? d_h0.as<double>() : nullptr,
      .d_rec_partials = partials.as<double>(), .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_CHECK((kernels::launch_cell_vjp<CellMath, ComputeT>(v, kStream)));
  J = DeviceBuffer();  // J and μ are not read again: back to the pool before the GEMMs' buffers
  mu = DeviceBuffer();

  NewtonGradients out;
  // Recurrent entries: per (entry, channel), Σ over batch rows and chunks in a fixed order.
  out.parameters = recurrent_gradients(cell, sum_rows_on_device(partials.as<double>(), B * chunks, R * D,
                                                                  "recurrent gradients"));

  // Input affines (runtime.hpp): ∇W, ∇b into out.parameters, ∇x on the device (into grad_x itself
  // when it is a contiguous compute-type device view: no copy).
  DeviceBuffer x_holder;
  const auto* xc = static_cast<const ComputeT*>(compute_type_on_device(x, compute, x_holder, "x (compute type)"));
  const bool in_place = grad_x && grad_x->device() == Device::cuda && grad_x->is_contiguous() &&
                        grad_x->dtype() == compute;
  DeviceBuffer dx_holder;
  if (!in_place) dx_holder = DeviceBuffer(checked_bytes(rows_bt * L.d_in, sizeof(ComputeT), "∇x"), "∇x");
  auto* dx = in_place ? static_cast<ComputeT*>(grad_x->data()) : dx_holder.as<ComputeT>();
  input_affine_backward_into<ComputeT>(cell, L, xc, d_wx.as<ComputeT>(), dx, out);
  if (cell.spec().dt_gate >= 0) {  // CfC's Δt: Σ over channels of its gate's cotangent
    const kernels::TimeGateBackwardArgs<ComputeT> a{
        .x = xc, .d_wx = d_wx.as<ComputeT>(), .dx = dx, .rows = rows_bt,
        .d_in = L.d_in, .channels = D, .gates = G, .dt_gate = cell.spec().dt_gate, .floor = cells::kCfcDtFloor};
    PARARNN_CUDA_CHECK(kernels::launch_time_gate_backward(a, kStream));
  }
  if (grad_x) {
    store_into(dx, compute, *grad_x, "grad_x");  // nothing to do in place
  } else {
    Tensor dx_host(compute, {B, T, L.d_in});
    if (dx_host.nbytes() > 0)
      PARARNN_CUDA_CHECK(cudaMemcpy(dx_host.data(), dx, dx_host.nbytes(), cudaMemcpyDeviceToHost));
    out.x = compute == cell.dtype() ? dx_host : Tensor::converted(dx_host, cell.dtype());
  }
  if (options.h0) out.h0 = gradient_tensor(cell, options.h0->shape(), download_vector<double>(d_h0, h0_rows * S * D));
  return out;
}

// Refuses a cell without CUDA kernels before any device work.
void require_cuda_cell(CellKind kind) {
  dispatch_cuda_cell(kind, []<class CellMath>() {});
}

void require_device(const char* who) {
  std::string why;
  if (!cuda_backend_available(&why)) throw UnsupportedPath(fmt::format("{}: {}", who, why));
}

}  // namespace

namespace {

// The DeviceBuffer byte counters (device_memory).
std::atomic<std::size_t> live_device_bytes{0}, peak_device_bytes{0};

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
  PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream));
  PARARNN_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what, Allocation how) : bytes_(bytes), how_(how) {
  if (bytes == 0) return;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device_));
  cudaMemPool_t pool = how == Allocation::stream_ordered ? backend_pool(device_) : nullptr;
  if (pool == nullptr) how_ = Allocation::synchronous;
  auto allocate = [&] {
    return pool != nullptr ? cudaMallocFromPoolAsync(&data_, bytes, pool, kStream) : cudaMalloc(&data_, bytes);
  };
  cudaError_t e = allocate();
  if (e == cudaErrorMemoryAllocation) {
    // What the pool keeps may be what is missing (for a cudaMalloc too): return it to the
    // device once and retry.
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
  if (how_ == Allocation::stream_ordered) {
    int current = device_;
    (void)cudaGetDevice(&current);
    if (current != device_) (void)cudaSetDevice(device_);
    // Unwinding from an error: the work queued before it may still read or write the caller's
    // memory, which the caller may free once it has caught the error. Wait for it, as the
    // device-wide cudaFree of a synchronous buffer does.
    if (std::uncaught_exceptions() > 0) (void)cudaStreamSynchronize(kStream);
    (void)cudaFreeAsync(data_, kStream);
    if (current != device_) (void)cudaSetDevice(current);
  } else {
    (void)cudaFree(data_);
  }
  live_device_bytes.fetch_sub(bytes_);
  data_ = nullptr;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)),
      device_(other.device_), how_(other.how_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    how_ = other.how_;
  }
  return *this;
}

// Chains per SM from which the sequential kernel beats the fused Newton solve at equal tokens:
// 2048 × (sequential kernel / fused adaptive solve) / SMs at B 8, T 16384, d 256, f32
// (bench/targets_bench.cpp "P6" crossover, H200, 132 SMs, 2026-12-02, the sequential kernel of
// 66a061c): GRU 21.8, LSTM 14.9, NLRU 14.3, CfC 35.6, Titans 30.0; sLSTM 0.5 (its Newton solve
// starts with P + 1 sequential passes and did not converge by k_max there), kept at 1 so that a
// few hundred chains still run Newton.
std::int64_t sequential_min_chains(CellKind cell, int sm_count) {
  std::int64_t per_sm = 0;
  switch (cell) {
    case CellKind::gru: per_sm = 21; break;
    case CellKind::lstm: per_sm = 14; break;
    case CellKind::slstm: per_sm = 1; break;
    case CellKind::nlru: per_sm = 14; break;
    case CellKind::cfc: per_sm = 35; break;
    case CellKind::titans: per_sm = 30; break;
    default: return std::numeric_limits<std::int64_t>::max();  // not a per-channel cell
  }
  return per_sm * std::max(sm_count, 1);
}

bool sequential_is_faster(CellKind cell, std::int64_t batch, std::int64_t channels) {
  int device = 0, sm_count = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  PARARNN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return batch * channels >= sequential_min_chains(cell, sm_count);
}

NewtonWorkspace::NewtonWorkspace(CellKind cell, DType storage, std::int64_t batch,
                                 std::int64_t time, std::int64_t channels, NewtonStrategy strategy)
    : tiling{.algorithm = kernels::ScanAlgorithm::single_pass},
      fused(strategy == NewtonStrategy::fused_step || strategy == NewtonStrategy::automatic),
      sequential(strategy == NewtonStrategy::automatic && sequential_is_faster(cell, batch, channels)) {
  dispatch_cuda_cell(cell, [&]<class CellMath>() {
    dispatch_compute(compute_dtype(storage), [&]<class ComputeT>() {
      constexpr int S = CellMath::kSlots;
      const std::int64_t n = batch * time * S * channels;
      const std::size_t iterate_bytes = checked_bytes(n, sizeof(ComputeT), "H");
      // Fused: F on first use, H' and the step's workspace on the first step (a solve that the
      // auto rule makes sequential allocates neither).
      if (!fused) {
        residual = DeviceBuffer(iterate_bytes, "the residual F");
        jacobian = DeviceBuffer(checked_bytes(n * S, sizeof(ComputeT), "J"), "the Jacobian J");
        scan_workspace = DeviceBuffer(
            kernels::scan_affine_workspace_bytes<S, ComputeT>(batch, time, channels, tiling),
            "the scan workspace");
      }
      residual_workspace =
          DeviceBuffer(kernels::cell_residual_workspace_bytes<ComputeT>(), "the max|F| partials");
      max_abs = DeviceBuffer(2 * sizeof(ComputeT), "max|F| (and of a fused step's result)");
    });
  });
}

void input_affine(DType storage, std::int64_t rows, std::int64_t d_in, std::int64_t width,
                  const void* bias_row, const void* x, std::span<const DeviceAffine> blocks,
                  void* wx) {
  input_affine_on(kStream, cublas_handle(), storage, rows, d_in, width, bias_row, x, blocks, wx);
}

namespace {

// The largest power of two (at most 256) that divides the address: the alignment cuBLASLt may
// assume of an operand.
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// One cuBLASLt handle and workspace per (thread, device), made at first use and never destroyed
// (as cublas_handle, for the same reason).
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
};
LtContext& lt_context() {
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  thread_local std::map<int, LtContext> contexts;
  auto it = contexts.find(device);
  if (it == contexts.end()) {
    LtContext c;
    PARARNN_CUBLAS_CHECK(cublasLtCreate(&c.handle));
    PARARNN_CUDA_CHECK(cudaMalloc(&c.workspace, LtContext::kWorkspaceBytes));
    it = contexts.emplace(device, c).first;
  }
  return it->second;
}

// Owns the cuBLASLt descriptors of one GEMM.
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtGemm() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// f32: each block's W x with its bias slice added in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS),
// written once (no bias fill of wx, no read of it). False when cuBLASLt offers no algorithm for
// a block (the caller then takes the fill-and-accumulate path for all of them).
bool input_affine_f32_bias_epilogue(cudaStream_t stream, std::int64_t rows, std::int64_t d_in, std::int64_t width,
                                    const float* bias_row, const float* x, std::span<const DeviceAffine> blocks,
                                    float* wx) {
  LtContext& lt = lt_context();
  struct Planned {
    std::unique_ptr<LtGemm> gemm;
    cublasLtMatmulHeuristicResult_t heuristic{};
    const DeviceAffine* block = nullptr;
  };
  std::vector<Planned> plans;
  for (const DeviceAffine& block : blocks) {
    if (block.outputs == 0 || block.inputs == 0) continue;
    Planned plan{std::make_unique<LtGemm>(), {}, &block};
    LtGemm& g = *plan.gemm;
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const float* bias = bias_row + block.first_column;
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    PARARNN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    // Column-major: A = the weight as stored (inputs × outputs, ld inputs), used transposed;
    // B = x (inputs × rows, ld d_in); D = wx's columns of the block (outputs × rows, ld width).
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_32F, static_cast<std::uint64_t>(block.inputs),
                                                    static_cast<std::uint64_t>(block.outputs), block.inputs));
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_32F, static_cast<std::uint64_t>(block.inputs),
                                                    static_cast<std::uint64_t>(rows), d_in));
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, static_cast<std::uint64_t>(block.outputs),
                                                    static_cast<std::uint64_t>(rows), width));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.preference));
    const std::uint64_t ws_bytes = LtContext::kWorkspaceBytes;
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &ws_bytes, sizeof(ws_bytes)));
    float* out = wx + block.first_column;
    const std::uint32_t align_a = alignment_of(block.weight), align_b = alignment_of(x), align_d = alignment_of(out);
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.handle, g.op, g.a, g.b, g.d, g.d, g.preference, 1,
                                                                 &plan.heuristic, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    plans.push_back(std::move(plan));
  }
  const float one = 1.0f, zero = 0.0f;
  for (const Planned& plan : plans) {
    float* out = wx + plan.block->first_column;
    PARARNN_CUBLAS_CHECK(cublasLtMatmul(lt.handle, plan.gemm->op, &one, plan.block->weight, plan.gemm->a, x,
                                        plan.gemm->b, &zero, out, plan.gemm->d, out, plan.gemm->d,
                                        &plan.heuristic.algo, lt.workspace, LtContext::kWorkspaceBytes, stream));
  }
  return true;
}

}  // namespace

void input_affine_on(cudaStream_t stream, cublasHandle_t handle, DType storage, std::int64_t rows,
                     std::int64_t d_in, std::int64_t width, const void* bias_row, const void* x,
                     std::span<const DeviceAffine> blocks, void* wx) {
  if (rows == 0 || width == 0) return;
  // f32 with blocks covering every column, outside a graph capture (cuBLASLt's first call
  // allocates its workspace): the bias in the GEMM's epilogue (one write of wx).
  std::int64_t covered = 0;
  for (const DeviceAffine& block : blocks) covered += block.inputs > 0 ? block.outputs : 0;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PARARNN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (storage == DType::f32 && covered == width && capture == cudaStreamCaptureStatusNone &&
      input_affine_f32_bias_epilogue(stream, rows, d_in, width, static_cast<const float*>(bias_row),
                                     static_cast<const float*>(x), blocks, static_cast<float*>(wx)))
    return;
  const DType compute = compute_dtype(storage);
  const std::size_t element = dtype_size(compute);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * element;
  // The bias row in every row (copies doubling the filled rows), then W x accumulated onto it.
  auto* out = static_cast<unsigned char*>(wx);
  PARARNN_CUDA_CHECK(cudaMemcpyAsync(out, bias_row, row_bytes, cudaMemcpyDeviceToDevice, stream));
  for (std::int64_t filled = 1; filled < rows; filled *= 2) {
    const std::int64_t n = std::min(filled, rows - filled);
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(out + static_cast<std::size_t>(filled) * row_bytes, out,
                                       static_cast<std::size_t>(n) * row_bytes,
                                       cudaMemcpyDeviceToDevice, stream));
  }
  cudaDataType_t input_type = CUDA_R_32F, output_type = CUDA_R_32F;
  cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
  const double one_f64 = 1.0;
  const float one_f32 = 1.0f;
  const void* one = &one_f32;
  switch (storage) {
    case DType::f64:
      input_type = output_type = CUDA_R_64F;
      compute_type = CUBLAS_COMPUTE_64F;
      one = &one_f64;
      break;
    case DType::f32: break;
    case DType::f16: input_type = CUDA_R_16F; break;
    case DType::bf16: input_type = CUDA_R_16BF; break;
    default:
      throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(storage));
  }
  // Column-major view of block k: wx[:, cols] (outputs × rows, ld width) += Wᵀ-stored weight
  // (inputs × outputs, ld inputs) transposed, times x[:, :inputs] (inputs × rows, ld d_in).
  PARARNN_CUBLAS_CHECK(cublasSetStream(handle, stream));
  for (const DeviceAffine& block : blocks) {
    if (block.outputs == 0 || block.inputs == 0) continue;
    PARARNN_CUBLAS_CHECK(cublasGemmEx_64(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, block.outputs, rows, block.inputs, one, block.weight,
        input_type, block.inputs, x, input_type, d_in, one,
        out + static_cast<std::size_t>(block.first_column) * element, output_type, width,
        compute_type, CUBLAS_GEMM_DEFAULT));
  }
}

void newton_solve(const CellSpec& spec, DType storage, const DeviceProblem& problem,
                  const NewtonConfig& config, void* H, NewtonWorkspace& workspace,
                  NewtonStats& stats) {
  dispatch_cuda_cell(spec.kind, [&]<class CellMath>() {
    dispatch_compute(compute_dtype(storage), [&]<class ComputeT>() {
      CudaPerChannelFamily<CellMath, ComputeT> family(problem, workspace, static_cast<ComputeT*>(H));
      solve_newton(family, spec, storage, config, problem.time, stats);
    });
  });
}

void sequential_solve(CellKind cell, DType output, const DeviceProblem& problem, void* H) {
  dispatch_cuda_cell(cell, [&]<class CellMath>() {
    auto run = [&]<class T>() { run_sequential<CellMath, T>(problem, static_cast<T*>(H)); };
    switch (output) {
      case DType::f64: return run.template operator()<double>();
      case DType::f32: return run.template operator()<float>();
      case DType::f16: return run.template operator()<__half>();
      case DType::bf16: return run.template operator()<__nv_bfloat16>();
      default: break;
    }
    throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(output));
  });
}

void synchronize() { PARARNN_CUDA_CHECK(cudaStreamSynchronize(kStream)); }

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

Tensor cuda_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                         const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::require_device("newton_apply on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  const cuda::DeviceInputs inputs(cell, x, options, layout);
  cuda::NewtonWorkspace workspace(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h);
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  cuda::DeviceBuffer H(cuda::checked_bytes(n, dtype_size(inputs.compute()), "H"), "H");
  cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H.get(), workspace, stats);
  return cuda::download_trajectory(H, inputs.compute(), cell,
                                   cell.trajectory_shape(layout.batch, layout.time));
}

std::optional<Tensor> cuda_windowed_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                                 const ApplyOptions& options, Layout layout, const TensorView* out,
                                                 NewtonStats& stats) {
  const CellSpec& spec = cell.spec();
  const DType storage = cell.dtype();
  if (!config.chunk_len || options.cu_seqlens || spec.picard || config.coords != Coords::native ||
      config.newton_backtrack || (storage != DType::f32 && storage != DType::f64))
    return std::nullopt;
  // A faults build injecting into the driver's loop keeps that loop (the catalog measures it).
  if (PARARNN_FAULT_POINT("dropped_last_update") || PARARNN_FAULT_POINT("loose_early_stop")) return std::nullopt;
  const KResolution k = resolve_newton_iters(config, spec, storage, layout.time);
  if (k.adaptive && resolved_residual_atol(config, storage)) return std::nullopt;
  // The launch's bounds (kernels/windowed_newton.hpp): beyond them the window loop, which has none.
  if (k.k > kernels::kWindowedMaxIterations || layout.batch > kernels::kWindowedMaxBatch) return std::nullopt;
  const std::int64_t window = *config.chunk_len;
  const std::int64_t windows = (layout.time + window - 1) / window;
  const int K = static_cast<int>(k.k);
  cuda::require_cuda_cell(cell.kind());
  std::optional<Tensor> result;
  cuda::dispatch_cuda_cell(spec.kind, [&]<class CellMath>() {
    cuda::dispatch_compute(storage, [&]<class T>() {
      if (window > kernels::windowed_newton_max_window<CellMath, T>()) return;
      cuda::require_device("newton_apply on the CUDA backend");
      cuda::DeviceGuard guard(cuda::solve_device(x, options));
      if (out) cuda::check_store_target(*out, "out");
      const cuda::DeviceInputs inputs(cell, x, options, layout);
      const cuda::DeviceProblem& p = inputs.problem();
      using Bits = typename kernels::WindowedNewtonArgs<T>::Bits;
      const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
      // The launch writes into `out` itself where it can (as cuda_newton_apply_into).
      const bool in_place = out && out->device() == Device::cuda && out->is_contiguous() && out->dtype() == storage;
      cuda::DeviceBuffer H;
      if (!in_place) H = cuda::DeviceBuffer(cuda::checked_bytes(n, sizeof(T), "H"), "H");
      T* const target = in_place ? static_cast<T*>(out->data()) : H.as<T>();
      const std::int64_t maxima = windows * (K + 1);
      cuda::DeviceBuffer residual(cuda::checked_bytes(maxima, sizeof(Bits), "the windows' residual maxima"),
                                  "the windows' residual maxima");
      PARARNN_CUDA_CHECK(cudaMemsetAsync(residual.get(), 0, residual.bytes(), cuda::kStream));
      const kernels::WindowedNewtonArgs<T> args{
          .wx = static_cast<const T*>(p.wx), .recurrent = static_cast<const T*>(p.recurrent),
          .h0 = static_cast<const T*>(p.h0), .H = target, .residual_max = residual.as<Bits>(),
          .batch = layout.batch, .time = layout.time, .channels = layout.d_h, .window = window,
          .iterations = K, .omega = static_cast<T>(config.omega)};
      PARARNN_CUDA_CHECK((kernels::launch_windowed_newton<CellMath, T>(args, cuda::kStream)));
      std::vector<Bits> bits(static_cast<std::size_t>(maxima));
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(bits.data(), residual.get(), residual.bytes(), cudaMemcpyDeviceToHost,
                                         cuda::kStream));
      cuda::synchronize();
      // The driver's fixed-K loop per window (newton/driver.hpp): evaluation k is followed by an
      // update unless it is non-finite or below the early-stop threshold. Where either may have
      // happened the kernel's K updates are not that loop's answer: the caller runs the window loop.
      const std::optional<double> stop = resolved_residual_atol(config, storage);
      NewtonStats s;
      s.k = k;
      // The window loop pins the table's K per window with a one-entry newton_iters_by_t
      // (api.cpp window_config), so its stats name that source.
      if (!config.max_iters) s.k.source = "newton_iters_by_t";
      s.scan_backend = "cuda";
      s.strategy = "fused_windowed";
      s.iters = s.updates = K;
      // The final residual is the worst window's; a NaN in any window stays a NaN.
      double worst = 0.0;
      bool nan = false;
      for (std::int64_t w = 0; w < windows; ++w) {
        for (int e = 0; e <= K; ++e) {
          const double v = static_cast<double>(std::bit_cast<T>(bits[static_cast<std::size_t>(w * (K + 1) + e)]));
          if (e < K) {
            // A factor of 2 above the threshold as a band: the kernel's residual and the loop's
            // differ by rounding (a few ulps of the state), so near the threshold the loop decides.
            if (!std::isfinite(v) || (stop && v < 2.0 * *stop)) return;
            s.residual_history.push_back(v);
          } else if (std::isnan(v)) {
            nan = true;
          } else {
            worst = std::max(worst, v);
          }
        }
      }
      s.max_residual = nan ? std::numeric_limits<double>::quiet_NaN() : worst;
      stats = std::move(s);
      if (out) {
        cuda::store_into(target, storage, *out, "out");
        result = Tensor();
      } else {
        result = cuda::download_trajectory(H, storage, cell, cell.trajectory_shape(layout.batch, layout.time));
      }
    });
  });
  return result;
}

// The solve writes straight into `out` when it is a contiguous view of the compute type on the
// solve's device (f32 and f64 storage); otherwise into a buffer, stored into `out` after.
void cuda_newton_apply_into(const Cell& cell, const TensorView& x, const TensorView& out,
                            const NewtonConfig& config, const ApplyOptions& options, Layout layout,
                            NewtonStats& stats) {
  cuda::require_device("newton_apply_into on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  cuda::check_store_target(out, "out");
  const cuda::DeviceInputs inputs(cell, x, options, layout);
  cuda::NewtonWorkspace workspace(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h);
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  const bool in_place = out.device() == Device::cuda && out.is_contiguous() && out.dtype() == inputs.compute();
  cuda::DeviceBuffer H;
  if (!in_place) H = cuda::DeviceBuffer(cuda::checked_bytes(n, dtype_size(inputs.compute()), "H"), "H");
  void* target = in_place ? out.data() : H.get();
  cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, target, workspace, stats);
  cuda::store_into(target, inputs.compute(), out, "out");
}

void cuda_write_view(const TensorView& out, const Tensor& value, const char* argument) {
  cuda::require_device(argument);
  cuda::DeviceGuard guard(out.device_id());
  const cuda::DeviceBuffer staged = cuda::upload_new(value.data(), value.nbytes(), argument);
  cuda::store_into(staged.get(), value.dtype(), out, argument);
}

Tensor cuda_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                             Layout layout) {
  cuda::require_device("sequential_apply on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  const cuda::DeviceInputs inputs(cell, x, options, layout);
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  cuda::DeviceBuffer H(cuda::checked_bytes(n, dtype_size(cell.dtype()), "H"), "H");
  cuda::sequential_solve(cell.kind(), cell.dtype(), inputs.problem(), H.get());
  return cuda::download_trajectory(H, cell.dtype(), cell,
                                   cell.trajectory_shape(layout.batch, layout.time));
}

namespace cuda {
namespace {

// H* kept on the device of the forward's solve, in the compute type, and the forward's W_x x
// beside it, so that the backward runs no second input GEMM (training.hpp).
class SavedOnDevice final : public SavedTrajectory {
 public:
  SavedOnDevice(DeviceBuffer H, std::shared_ptr<const DeviceBuffer> wx, int device, DType compute, Shape shape)
      : H_(std::move(H)), wx_(std::move(wx)), device_(device), compute_(compute), shape_(std::move(shape)) {}
  std::size_t bytes() const override { return H_.bytes() + (wx_ ? wx_->bytes() : 0); }
  Tensor host() const override {
    DeviceGuard guard(device_);
    Tensor out(compute_, shape_);
    if (out.nbytes() > 0)
      PARARNN_CUDA_CHECK(cudaMemcpy(out.data(), H_.get(), out.nbytes(), cudaMemcpyDeviceToHost));
    return out;
  }
  // H* on the current device: in place when it is the forward's, else a peer copy in `holder`.
  const void* on_current_device(DeviceBuffer& holder) const {
    int current = 0;
    PARARNN_CUDA_CHECK(cudaGetDevice(&current));
    if (current == device_) return H_.get();
    holder = DeviceBuffer(H_.bytes(), "H* (peer copy)");
    PARARNN_CUDA_CHECK(cudaMemcpyPeer(holder.get(), current, H_.get(), device_, H_.bytes()));
    return holder.get();
  }
  // The forward's W_x x where the current device is the forward's; null elsewhere (the backward
  // there computes it again).
  std::shared_ptr<const DeviceBuffer> wx_on_current_device() const {
    int current = 0;
    PARARNN_CUDA_CHECK(cudaGetDevice(&current));
    return current == device_ ? wx_ : nullptr;
  }
  DType compute() const { return compute_; }
  std::int64_t numel() const { return shape_numel(shape_); }

 private:
  DeviceBuffer H_;
  std::shared_ptr<const DeviceBuffer> wx_;
  int device_;
  DType compute_;
  Shape shape_;
};

}  // namespace
}  // namespace cuda

// Training on the device: the forward is newton_apply's solve (the auto rule included); a solve
// repeats bit for bit, so recompute's re-solve in the backward is exactly the forward's H*.
namespace {

// The forward's solve; H returned as a new host tensor (out null) or stored into *out.
NewtonForward forward_on_device(const Cell& cell, const TensorView& x, const TensorView* out,
                                const NewtonConfig& config, const ApplyOptions& options, const Layout& layout) {
  cuda::require_device("newton_forward on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  if (out) cuda::check_store_target(*out, "H_out");
  const cuda::DeviceInputs inputs(cell, x, options, layout);
  cuda::NewtonWorkspace workspace(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h);
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  cuda::DeviceBuffer H(cuda::checked_bytes(n, dtype_size(inputs.compute()), "H"), "H");
  NewtonForward forward;
  cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H.get(), workspace, forward.stats);
  const Shape shape = cell.trajectory_shape(layout.batch, layout.time);
  if (out)
    cuda::store_into(H.get(), inputs.compute(), *out, "H_out");
  else
    forward.H = cuda::download_trajectory(H, inputs.compute(), cell, shape);
  if (!config.recompute) {
    int device = 0;
    PARARNN_CUDA_CHECK(cudaGetDevice(&device));
    forward.saved_trajectory =
        std::make_shared<const cuda::SavedOnDevice>(std::move(H), inputs.shared_wx(), device, inputs.compute(), shape);
  }
  return forward;
}

NewtonGradients backward_on_device(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                   const TensorView& grad_H, const TensorView* grad_x,
                                   const NewtonConfig& config, const ApplyOptions& options, const Layout& layout);

}  // namespace

NewtonForward cuda_newton_forward(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                  const ApplyOptions& options, Layout layout) {
  return forward_on_device(cell, x, nullptr, config, options, layout);
}

NewtonForward cuda_newton_forward_into(const Cell& cell, const TensorView& x, const TensorView& out,
                                       const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
  return forward_on_device(cell, x, &out, config, options, layout);
}

NewtonGradients cuda_newton_backward(const Cell& cell, const TensorView& x,
                                     const NewtonForward& forward, const TensorView& grad_H,
                                     const NewtonConfig& config, const ApplyOptions& options,
                                     Layout layout) {
  return backward_on_device(cell, x, forward, grad_H, nullptr, config, options, layout);
}

NewtonGradients cuda_newton_backward_into(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                          const TensorView& grad_H, const TensorView& grad_x,
                                          const NewtonConfig& config, const ApplyOptions& options,
                                          Layout layout) {
  return backward_on_device(cell, x, forward, grad_H, &grad_x, config, options, layout);
}

namespace {

// The backward; ∇x returned as a new host tensor (grad_x null) or stored into *grad_x.
NewtonGradients backward_on_device(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                   const TensorView& grad_H, const TensorView* grad_x,
                                   const NewtonConfig& config, const ApplyOptions& options, const Layout& layout) {
  cuda::require_device("newton_backward on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::DeviceGuard guard(cuda::solve_device(x, options));
  if (grad_x) cuda::check_store_target(*grad_x, "grad_x");
  const DType compute = cuda::compute_dtype(cell.dtype());
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  auto refuse = [&](DType dtype, std::int64_t count, const char* what) {
    if (dtype != compute || count != n)
      throw ContractViolation("forward", "must come from newton_forward on this cell and x",
                              fmt::format("{} of {} {} values", what, count, dtype_name(dtype)));
  };
  // A forward of this backend on this device lends its W_x x too (no second input GEMM).
  const auto* on_device = dynamic_cast<const cuda::SavedOnDevice*>(forward.saved_trajectory.get());
  std::shared_ptr<const cuda::DeviceBuffer> saved_wx;
  if (on_device) {
    refuse(on_device->compute(), on_device->numel(), "a saved trajectory");
    saved_wx = on_device->wx_on_current_device();
    const std::size_t wx_bytes =
        static_cast<std::size_t>(layout.batch * layout.time * cell.spec().gates * layout.d_h) * dtype_size(compute);
    if (saved_wx && saved_wx->bytes() != wx_bytes)
      throw ContractViolation("forward", "must come from newton_forward on this cell and x",
                              fmt::format("a saved W_x x of {} bytes where this cell and x give {}",
                                          saved_wx->bytes(), wx_bytes));
  }
  const cuda::DeviceInputs inputs(cell, x, options, layout, std::move(saved_wx));
  cuda::DeviceBuffer H;  // H* unless the forward's device copy is read in place
  const void* H_star = nullptr;
  if (on_device) {
    H_star = on_device->on_current_device(H);
  } else if (forward.saved_trajectory) {  // held on the host (a forward of the CPU backend)
    const Tensor saved = forward.saved_trajectory->host();
    refuse(saved.dtype(), saved.numel(), "a saved trajectory");
    H = cuda::upload_new(saved.data(), saved.nbytes(), "H*");
    H_star = H.get();
  } else {  // recompute: the forward's solve again (it repeats: the same bits)
    H = cuda::DeviceBuffer(cuda::checked_bytes(n, dtype_size(compute), "H*"), "H*");
    cuda::NewtonWorkspace workspace(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h);
    NewtonStats stats;
    cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H.get(), workspace, stats);
    H_star = H.get();
  }
  return cuda::dispatch_cuda_cell(cell.kind(), [&]<class CellMath>() {
    return cuda::dispatch_compute(compute, [&]<class ComputeT>() {
      return cuda::adjoint_backward<CellMath, ComputeT>(cell, layout, inputs.problem(),
                                                        static_cast<const ComputeT*>(H_star), x, grad_H, options,
                                                        grad_x);
    });
  });
}

}  // namespace

}  // namespace pararnn::detail

namespace pararnn {

namespace {

void require_device_index(int device, const char* who) {
  using namespace detail::cuda;
  require_device(who);
  int count = 0;
  PARARNN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw ContractViolation("device", fmt::format("must name one of the {} CUDA devices", count),
                            std::to_string(device));
}

}  // namespace

void cuda_release_cached_memory(int device) {
  require_device_index(device, "cuda_release_cached_memory");
  detail::cuda::release_cached_memory(device);
}

std::size_t cuda_cached_memory(int device) {
  require_device_index(device, "cuda_cached_memory");
  return detail::cuda::cached_memory(device);
}

std::int64_t cuda_sequential_min_chains(const Cell& cell, int device) {
  using namespace detail::cuda;
  require_device("cuda_sequential_min_chains");
  int count = 0;
  PARARNN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw ContractViolation("device", fmt::format("must name one of the {} CUDA devices", count),
                            std::to_string(device));
  if (cell.spec().jacobian != JacobianClass::per_channel) return std::numeric_limits<std::int64_t>::max();
  int sm_count = 0;
  PARARNN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return sequential_min_chains(cell.kind(), sm_count);
}

// Everything one decoder needs on its device, allocated at construction.
struct CudaDecoder::Impl {
  Cell cell;
  std::int64_t batch = 0;
  int device = 0;
  std::int64_t affine_inputs = 0;  // the x columns the input affines read (CfC: all but Δt)
  // values [k][c], bias [G·d_h], weight_t [affine_inputs][G·d_h]: the decode kernel's layout
  // (kernels/decode.hpp), in the compute type.
  detail::cuda::DeviceBuffer values, bias, weight_t;

  Impl(const Cell& c, std::int64_t b, int d) : cell(c), batch(b), device(d) {}
};

CudaDecoder::CudaDecoder(const Cell& cell, std::int64_t batch, int device) {
  using namespace detail::cuda;
  require_device("CudaDecoder");
  if (cell.spec().jacobian != JacobianClass::per_channel)
    throw UnsupportedPath(fmt::format("CudaDecoder: cell '{}' (mix '{}') has a dense Jacobian; its "
                                      "decode runs on the CPU (decode_step with host tensors)",
                                      cell.name(), cell.spec().mix));
  if (batch < 0) throw ContractViolation("batch", "must be >= 0", std::to_string(batch));
  int count = 0;
  PARARNN_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw ContractViolation("device", fmt::format("must name one of the {} CUDA devices", count),
                            std::to_string(device));
  DeviceGuard guard(device);
  auto impl = std::make_unique<Impl>(cell, batch, device);
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t D = cell.d_h();
  const std::int64_t width = cell.spec().gates * D;
  const std::vector<double> values = cell.channel_values();
  const Tensor values_compute =
      Tensor::from_values(compute, {static_cast<std::int64_t>(values.size()) / D, D}, values);
  impl->values = upload_new(values_compute.data(), values_compute.nbytes(), "recurrent values", Allocation::synchronous);
  // Every block of a per-channel cell reads the same x columns (all, or CfC's features): one k
  // range for the kernel's sum.
  const auto& affine = cell.spec().affine;
  impl->affine_inputs = affine.empty() ? 0 : cell.affine_inputs(affine.front());
  for (const AffineBlock& block : affine)
    if (cell.affine_inputs(block) != impl->affine_inputs)
      throw UnsupportedPath(fmt::format("CudaDecoder: the input affines of cell '{}' read different x columns",
                                        cell.name()));
  std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
  std::vector<double> weight_t(static_cast<std::size_t>(impl->affine_inputs * width), 0.0);
  for (const AffineBlock& block : affine) {
    const std::vector<double> w = cell.parameter(std::string(block.weight)).to_f64_vector();
    const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
    const std::int64_t first = block.first_gate * D, outputs = cell.affine_rows(block);
    for (std::int64_t o = 0; o < outputs; ++o) {
      bias_row[static_cast<std::size_t>(first + o)] = b[static_cast<std::size_t>(o)];
      for (std::int64_t k = 0; k < impl->affine_inputs; ++k)
        weight_t[static_cast<std::size_t>(k * width + first + o)] =
            w[static_cast<std::size_t>(o * impl->affine_inputs + k)];
    }
  }
  const Tensor bias = Tensor::from_values(compute, {width}, bias_row);
  impl->bias = upload_new(bias.data(), bias.nbytes(), "the input biases", Allocation::synchronous);
  if (impl->affine_inputs > 0) {
    const Tensor wt = Tensor::from_values(compute, {impl->affine_inputs, width}, weight_t);
    impl->weight_t = upload_new(wt.data(), wt.nbytes(), "the transposed input weights", Allocation::synchronous);
  }
  // The decode kernel's device questions (cluster or block shape) asked here, not in a step
  // that may be captured into a graph.
  dispatch_cell(cell.kind(), [&]<class CellMath>() {
    dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
      PARARNN_CUDA_CHECK((kernels::prepare_decode_step<CellMath, StorageT>(batch, D)));
    });
  });
  detail::cuda::synchronize();
  impl_ = std::move(impl);
}

CudaDecoder::~CudaDecoder() = default;
CudaDecoder::CudaDecoder(CudaDecoder&&) noexcept = default;
CudaDecoder& CudaDecoder::operator=(CudaDecoder&&) noexcept = default;

const Cell& CudaDecoder::cell() const { return impl_->cell; }
std::int64_t CudaDecoder::batch() const { return impl_->batch; }

namespace {

// A CudaDecoder step's views: the decoder's batch, on its device and contiguous.
void check_on_decoder_device(std::initializer_list<std::pair<const char*, const TensorView*>> views,
                             std::int64_t batch, std::int64_t decoder_batch, int device, const char* who) {
  if (batch != decoder_batch)
    throw ContractViolation("state", fmt::format("must hold the decoder's batch of {} carries", decoder_batch),
                            std::to_string(batch));
  for (const auto& [name, view] : views) {
    if (view->device() != Device::cuda || view->device_id() != device)
      throw ContractViolation(name, fmt::format("must be on CUDA device {} (the decoder's)", device),
                              view->device() == Device::cpu ? "cpu" : fmt::format("cuda:{}", view->device_id()));
    if (!view->is_contiguous())
      throw ContractViolation(name, fmt::format("must be contiguous for {}", who), shape_string(view->shape()));
  }
}

}  // namespace

void CudaDecoder::step(const TensorView& state, const TensorView& x, const TensorView& out,
                       void* stream) const {
  using namespace detail::cuda;
  const Impl& d = *impl_;
  const std::int64_t batch = check_decode_arguments(d.cell, state, x, out);
  check_on_decoder_device({{"state", &state}, {"x", &x}, {"out", &out}}, batch, d.batch, d.device,
                          "CudaDecoder::step");
  if (batch == 0) return;
  DeviceGuard guard(d.device);
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch_cell(d.cell.kind(), [&]<class CellMath>() {
    dispatch_device_storage(d.cell.dtype(), [&]<class StorageT>() {
      using ComputeT = kernels::ComputeOf<StorageT>;
      const kernels::DecodeArgs<StorageT> args{
          .weight_t = d.weight_t.as<ComputeT>(), .bias = d.bias.as<ComputeT>(), .values = d.values.as<ComputeT>(),
          .state = static_cast<const StorageT*>(state.data()), .x = static_cast<const StorageT*>(x.data()),
          .out = static_cast<StorageT*>(out.data()), .batch = batch, .channels = d.cell.d_h(),
          .d_in = d.cell.d_in(), .affine_inputs = d.affine_inputs, .dt_gate = d.cell.spec().dt_gate,
          .dt_floor = cells::kCfcDtFloor};
      PARARNN_CUDA_CHECK((kernels::launch_decode_step<CellMath, StorageT>(args, s)));
    });
  });
}

void CudaDecoder::step_gates(const TensorView& state, const TensorView& gates, const TensorView& out,
                             void* stream) const {
  using namespace detail::cuda;
  const Impl& d = *impl_;
  const Cell& cell = d.cell;
  const std::int64_t batch = check_decode_gates_arguments(cell, state, gates, out);
  check_on_decoder_device({{"state", &state}, {"gates", &gates}, {"out", &out}}, batch, d.batch, d.device,
                          "CudaDecoder::step_gates");
  if (batch == 0) return;
  DeviceGuard guard(d.device);
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch_cell(cell.kind(), [&]<class CellMath>() {
    dispatch_device_storage(cell.dtype(), [&]<class StorageT>() {
      using ComputeT = kernels::ComputeOf<StorageT>;
      const kernels::DecodeGatesArgs<StorageT> args{
          .gates = static_cast<const ComputeT*>(gates.data()), .values = d.values.as<ComputeT>(),
          .state = static_cast<const StorageT*>(state.data()), .out = static_cast<StorageT*>(out.data()),
          .batch = batch, .channels = cell.d_h(), .dt_gate = cell.spec().dt_gate, .dt_floor = cells::kCfcDtFloor};
      PARARNN_CUDA_CHECK((kernels::launch_decode_gates<CellMath, StorageT>(args, s)));
    });
  });
}

void CudaDecoder::synchronize() const {
  detail::cuda::DeviceGuard guard(impl_->device);
  PARARNN_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace pararnn
