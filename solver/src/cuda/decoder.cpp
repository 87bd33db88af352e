// CudaDecoder (solver/decode.hpp): one decode step for a batch of carries of a per-channel cell on
// the GPU, on the caller's stream, CUDA-graph safe (its device questions are asked at
// construction).
#include "cuda/runtime.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/decode.hpp"
#include "pararnn/solver/decode.hpp"

namespace pararnn {

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
  require_device_index(device, "CudaDecoder");
  if (cell.spec().jacobian != JacobianClass::per_channel)
    throw UnsupportedPath(fmt::format("CudaDecoder: cell '{}' (mix '{}') has a dense Jacobian; its "
                                      "decode runs on the CPU (decode_step with host tensors)",
                                      cell.name(), cell.spec().mix));
  if (batch < 0) throw ContractViolation("batch", "must be >= 0", std::to_string(batch));
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
          .state = static_cast<const StorageT*>(PARARNN_FAULT_POINT("cuda_decoder_stale_carry") ? out.data() : state.data()),
          .x = static_cast<const StorageT*>(x.data()),
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
