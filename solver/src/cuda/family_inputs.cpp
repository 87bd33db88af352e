// The device inputs every CUDA family implementation shares (cuda/runtime.hpp): the input affine
// W_x x + b by cuBLAS in the compute type and its backward, h0 in the compute type, and the
// availability check.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/runtime.hpp"
#include "pararnn/kernels/row_sum.hpp"

namespace pararnn::detail::cuda {

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

// h0 on the device in the compute type (empty without h0): a copy of its own (callers keep it
// beyond the view's life), converted on the device.
DeviceBuffer device_h0(const ApplyOptions& options, DType compute) {
  if (!options.h0) return {};
  DeviceBuffer converted;
  const void* h0 = on_device_as(*options.h0, compute, converted, "h0");
  if (converted.get() == h0) return converted;
  DeviceBuffer copy(checked_bytes(options.h0->numel(), dtype_size(compute), "h0"), "h0");
  if (copy.bytes() > 0) PARARNN_CUDA_CHECK(cudaMemcpyAsync(copy.get(), h0, copy.bytes(), cudaMemcpyDeviceToDevice, kStream));
  return copy;
}

template <class T>
std::vector<double> sum_rows_on_device(const T* rows, std::int64_t count, std::int64_t n, const char* what) {
  DeviceBuffer sum(checked_bytes(n, sizeof(double), what), what);
  PARARNN_CUDA_CHECK(kernels::launch_row_sum<T>({.rows = rows, .out = sum.as<double>(), .count = count, .n = n}, kStream));
  return download_vector<double>(sum, n);
}

template std::vector<double> sum_rows_on_device<float>(const float*, std::int64_t, std::int64_t, const char*);
template std::vector<double> sum_rows_on_device<double>(const double*, std::int64_t, std::int64_t, const char*);

template <class ComputeT>
void input_affine_backward_into(const Cell& cell, const Layout& L, const ComputeT* xc, const ComputeT* d_wx,
                                ComputeT* dx, NewtonGradients& out) {
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t B = L.batch, T = L.time, width = gate_width(cell), rows_bt = B * T;
  const std::vector<AffineBlock>& blocks = cell.spec().affine;
  // ∇x accumulates over the blocks; the first one overwrites it where it reads every column.
  const bool first_writes_all = !blocks.empty() && cell.affine_inputs(blocks.front()) == L.d_in;
  if (!first_writes_all && rows_bt * L.d_in > 0)
    PARARNN_CUDA_CHECK(cudaMemsetAsync(dx, 0, checked_bytes(rows_bt * L.d_in, sizeof(ComputeT), "∇x"), kStream));
  const DeviceBuffer ones = broadcast_on_device(1.0, compute, T, "a ones vector");
  for (const AffineBlock& block : blocks) {
    const std::int64_t inputs = cell.affine_inputs(block), rows = cell.affine_rows(block);
    const ComputeT beta = first_writes_all && &block == &blocks.front() ? ComputeT(0) : ComputeT(1);
    const ComputeT* dwx_block = d_wx + block.first_gate * (rows / block.gates);
    const Tensor w = Tensor::converted(cell.parameter(std::string(block.weight)), compute);
    const DeviceBuffer W = upload_new(w.data(), w.nbytes(), "an input weight (compute type)");
    DeviceBuffer dW(checked_bytes(B * rows * inputs, sizeof(ComputeT), "∇W per row"), "∇W per row");
    DeviceBuffer db(checked_bytes(B * rows, sizeof(ComputeT), "∇b per row"), "∇b per row");
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_T, inputs, rows, T, xc, L.d_in, T * L.d_in, dwx_block, width,
                           T * width, ComputeT(0), dW.as<ComputeT>(), inputs, rows * inputs, B);
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_T, 1, rows, T, ones.as<ComputeT>(), 1, 0, dwx_block, width,
                           T * width, ComputeT(0), db.as<ComputeT>(), 1, rows, B);
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_N, inputs, rows_bt, rows, W.as<ComputeT>(), inputs, 0,
                           dwx_block, width, 0, beta, dx, L.d_in, 0, 1);
    const std::vector<double> dW_sum = sum_rows_on_device(dW.as<ComputeT>(), B, rows * inputs, "∇W");
    const std::vector<double> db_sum = sum_rows_on_device(db.as<ComputeT>(), B, rows, "∇b");
    out.parameters.emplace(std::string(block.weight), gradient_tensor(cell, {rows, inputs}, dW_sum));
    out.parameters.emplace(std::string(block.bias), gradient_tensor(cell, {rows}, db_sum));
  }
}

template <class ComputeT>
DeviceBuffer input_affine_backward(const Cell& cell, const Layout& L, const ComputeT* xc, const ComputeT* d_wx,
                                   NewtonGradients& out) {
  DeviceBuffer dx(checked_bytes(L.batch * L.time * L.d_in, sizeof(ComputeT), "∇x"), "∇x");
  input_affine_backward_into<ComputeT>(cell, L, xc, d_wx, dx.as<ComputeT>(), out);
  return dx;
}

template void input_affine_backward_into<float>(const Cell&, const Layout&, const float*, const float*, float*,
                                                NewtonGradients&);
template void input_affine_backward_into<double>(const Cell&, const Layout&, const double*, const double*, double*,
                                                 NewtonGradients&);
template DeviceBuffer input_affine_backward<float>(const Cell&, const Layout&, const float*, const float*,
                                                   NewtonGradients&);
template DeviceBuffer input_affine_backward<double>(const Cell&, const Layout&, const double*, const double*,
                                                    NewtonGradients&);

}  // namespace pararnn::detail::cuda
