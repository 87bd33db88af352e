// The per-channel family's pieces shared by the CUDA backend's files (host code): the cell
// dispatch over the cells with CUDA Newton kernels, and DeviceInputs, the inputs of one solve on
// the device (W_x x by the input affines, the per-channel values, h0, the packing's heads).
// per_channel.cpp solves with them, per_channel_training.cpp trains, windowed.cpp runs the fused
// windowed launch. Example:
//   const cuda::DeviceInputs inputs(cell, x, options, layout);
//   cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, H, workspace, stats);
#pragma once

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/affine.hpp"
#include "cuda/fallback.hpp"
#include "cuda/newton_device.hpp"
#include "cuda/runtime.hpp"
#include "pararnn/kernels/newton_cells.hpp"
#include "pararnn/kernels/time_gate.hpp"

namespace pararnn::detail::cuda {

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

// Refuses a cell without CUDA kernels before any device work.
inline void require_cuda_cell(CellKind kind) {
  dispatch_cuda_cell(kind, []<class CellMath>() {});
}

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

    // Per-channel values (clamped recurrent entries, then constants), as the CPU backend uses;
    // the entries ApplyOptions::parameters views read on the device.
    recurrent_ = channel_values_on_device(cell, options, compute_);
    problem_.recurrent = recurrent_.get();

    const std::size_t wx_bytes = checked_bytes(rows * width, dtype_size(compute_), "W_x x");
    if (saved_wx) {
      if (saved_wx->bytes() != wx_bytes)
        throw Error(fmt::format("CUDA backend: the saved W_x x holds {} bytes, the solve needs {}",
                                saved_wx->bytes(), wx_bytes));
      wx_ = std::move(saved_wx);
    } else {
      wx_ = computed_wx(cell, x, options, L, wx_bytes);
    }
    problem_.wx = wx_->get();

    if (options.h0) problem_.h0 = on_device_as(*options.h0, compute_, h0_, "h0");
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
  // The weights and biases: the Cell's (uploaded) or ApplyOptions::parameters' views (a weight
  // read in place, a bias widened on the device into its place in the bias row).
  std::shared_ptr<const DeviceBuffer> computed_wx(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                                  const Layout& L, std::size_t wx_bytes) {
    const CellSpec& spec = cell.spec();
    const std::int64_t D = L.d_h, width = spec.gates * D, rows = L.batch * L.time;
    DeviceBuffer x_buffer;
    const void* x_device = contiguous_on_device(x, x_buffer, "x");
    std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
    std::vector<DeviceBuffer> weights;
    std::vector<DeviceAffine> blocks;
    for (const AffineBlock& block : spec.affine) {
      weights.emplace_back();
      const void* weight =
          contiguous_on_device(parameter_view(cell, options, std::string(block.weight)), weights.back(), "an input weight");
      blocks.push_back({.weight = weight, .first_column = block.first_gate * D,
                        .outputs = block.gates * D, .inputs = cell.affine_inputs(block)});
      if (options.parameters.count(std::string(block.bias))) continue;  // widened on the device below
      const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
      std::copy(b.begin(), b.end(), bias_row.begin() + block.first_gate * D);
    }
    const Tensor bias = Tensor::from_values(compute_, {width}, bias_row);
    const DeviceBuffer bias_device = upload_new(bias.data(), bias.nbytes(), "the input biases");
    for (const AffineBlock& block : spec.affine) {
      const std::string name(block.bias);
      if (!options.parameters.count(name)) continue;
      DeviceBuffer widened;
      const TensorView view = parameter_view(cell, options, name);
      const void* b = on_device_as(view, compute_, widened, "an input bias (compute type)");
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(bias_device.get()) +
                                             static_cast<std::size_t>(block.first_gate * D) * dtype_size(compute_),
                                         b, static_cast<std::size_t>(view.numel()) * dtype_size(compute_),
                                         cudaMemcpyDeviceToDevice, current_stream()));
    }
    auto wx = std::make_shared<DeviceBuffer>(wx_bytes, "W_x x");
    input_affine(cell.dtype(), rows, L.d_in, width, bias_device.get(), x_device, blocks, wx->get());
    if (spec.dt_gate >= 0) fill_time_gate(cell, x_device, rows, L.d_in, *wx);
    // The input buffers freed at scope exit are still read by the GEMM queued above: their frees
    // are stream-ordered (the pool's cudaFreeAsync, or the caller's allocator on this stream), and
    // the host bias row was staged by its copy, so no wait is needed here.
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
      PARARNN_CUDA_CHECK(kernels::launch_time_gate(args, current_stream()));
    });
  }

 private:
  DType compute_;
  DeviceBuffer recurrent_, h0_, head_, h0_row_;
  std::shared_ptr<const DeviceBuffer> wx_;
  DeviceProblem problem_;
};

// What a per-channel solve on the device sets up first, in this order: the backend and the cell
// checked (`who` names the entry point), the solve's device and stream for the call (SolveScope),
// the caller's output view checked (`out`, named `out_name`; null: none), the inputs on the device
// and a Newton workspace for them.
class PerChannelSolve {
 public:
  PerChannelSolve(const Cell& cell, const TensorView& x, const ApplyOptions& options, const Layout& layout,
                  const TensorView* out, const char* who, const char* out_name)
      : checked_(check(cell, who)), scope_(x, options), target_checked_(check_target(out, out_name)),
        inputs_(cell, x, options, layout),
        workspace_(cell.kind(), cell.dtype(), layout.batch, layout.time, layout.d_h),
        elements_(layout.batch * layout.time * cell.slots() * layout.d_h) {}

  const DeviceInputs& inputs() const { return inputs_; }
  NewtonWorkspace& workspace() { return workspace_; }
  std::int64_t elements() const { return elements_; }  // B·T·slots·d_h, the trajectory's

 private:
  static bool check(const Cell& cell, const char* who) {
    require_available(who);
    require_cuda_cell(cell.kind());
    return true;
  }
  static bool check_target(const TensorView* out, const char* name) {
    if (out) check_store_target(*out, name);
    return true;
  }
  bool checked_;
  SolveScope scope_;
  bool target_checked_;
  DeviceInputs inputs_;
  NewtonWorkspace workspace_;
  std::int64_t elements_;
};

// The per-channel row's training (per_channel_training.cpp) and fused windowed launch
// (windowed.cpp), as backends.hpp's FamilyBackend forward, backward and fused_windows.
NewtonForward per_channel_forward(const Cell& cell, const TensorView& x, const TensorView* H_out,
                                  const NewtonConfig& config, const ApplyOptions& options, Layout layout);
NewtonGradients per_channel_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
                                     const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig& config,
                                     const ApplyOptions& options, Layout layout);
std::optional<Tensor> per_channel_fused_windows(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                                                const ApplyOptions& options, Layout layout, const TensorView* out,
                                                NewtonStats& stats);

}  // namespace pararnn::detail::cuda
