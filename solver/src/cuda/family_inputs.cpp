// The device inputs every CUDA family implementation shares (cuda/runtime.hpp): the input affine
// W_x x + b by cuBLAS in the compute type, h0 in the compute type, and the availability check.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/runtime.hpp"

namespace pararnn::detail::cuda {

void require_available(const char* who) {
  std::string why;
  if (!cuda_backend_available(&why)) throw UnsupportedPath(fmt::format("{}: {}", who, why));
}

// W_x x + b on the device, [b][t][gate_width(cell)] in the compute type: the bias row, then one
// GEMM per affine block onto its columns (first_gate times the block width, as cpu/input_affine.hpp's
// input_affine places them on the CPU).
DeviceBuffer device_input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t width = gate_width(cell), rows = L.batch * L.time;
  DeviceBuffer x_buffer;
  const void* x_device = contiguous_on_device(x, x_buffer, "x");
  std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
  std::vector<DeviceBuffer> weights;
  std::vector<DeviceAffine> blocks;
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t outputs = cell.affine_rows(block);
    const std::int64_t first = block.first_gate * (outputs / block.gates);
    const Tensor& weight = cell.parameter(std::string(block.weight));
    weights.push_back(upload_new(weight.data(), weight.nbytes(), "an input weight"));
    blocks.push_back({.weight = weights.back().get(), .first_column = first, .outputs = outputs,
                      .inputs = cell.affine_inputs(block)});
    const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
    std::copy(b.begin(), b.end(), bias_row.begin() + first);
  }
  const Tensor bias = Tensor::from_values(compute, {width}, bias_row);
  const DeviceBuffer bias_device = upload_new(bias.data(), bias.nbytes(), "the input biases");
  DeviceBuffer wx(checked_bytes(rows * width, dtype_size(compute), "W_x x"), "W_x x");
  input_affine(cell.dtype(), rows, L.d_in, width, bias_device.get(), x_device, blocks, wx.get());
  synchronize();  // x, the weights and the bias row are freed at return; the GEMM reads them
  return wx;
}

// h0 on the device in the compute type (empty without h0).
DeviceBuffer device_h0(const ApplyOptions& options, DType compute) {
  if (!options.h0) return {};
  const Tensor h0 = Tensor::converted(host_copy(*options.h0, "h0"), compute);
  return upload_new(h0.data(), h0.nbytes(), "h0");
}

}  // namespace pararnn::detail::cuda
