// The input affine of the CPU families: W_x x + b of every affine block of a cell, in the compute
// type, computed once per solve and read by every iteration.
#pragma once

#include <Eigen/Core>
#include <type_traits>
#include <vector>

#include "newton/family.hpp"
#include "pararnn/core/fault.hpp"

namespace pararnn::detail {

// W_x x + b of every affine block, [b][t][gate_width(cell)] in the compute type: one GEMM per
// block and batch row. Blocks land at first_gate times their block width.
template <class ComputeT>
std::vector<ComputeT> input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  constexpr DType kComputeDType = std::is_same_v<ComputeT, double> ? DType::f64 : DType::f32;
  using RowMatrix = Eigen::Matrix<ComputeT, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<Eigen::Dynamic>;
  const std::int64_t width = gate_width(cell);
  std::vector<ComputeT> wx(static_cast<std::size_t>(L.batch * L.time * width));
  const Tensor xc = Tensor::converted(
      PARARNN_FAULT_POINT("strided_as_contiguous") ? TensorView(x.data(), x.dtype(), x.shape()) : x, kComputeDType);
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t inputs = cell.affine_inputs(block);
    const Tensor w = Tensor::converted(cell.parameter(std::string(block.weight)), kComputeDType);
    const Tensor bias = Tensor::converted(cell.parameter(std::string(block.bias)), kComputeDType);
    const std::int64_t rows = cell.affine_rows(block);
    const std::int64_t offset = block.first_gate * (rows / block.gates);
    Eigen::Map<const RowMatrix> W(w.data_as<ComputeT>(), rows, inputs);
    Eigen::Map<const Eigen::Matrix<ComputeT, 1, Eigen::Dynamic>> b(bias.data_as<ComputeT>(), rows);
    for (std::int64_t bi = 0; bi < L.batch; ++bi) {
      Eigen::Map<const RowMatrix, 0, Stride> X(xc.data_as<ComputeT>() + bi * L.time * L.d_in, L.time,
                                               inputs, Stride(L.d_in));
      Eigen::Map<RowMatrix, 0, Stride> out(wx.data() + bi * L.time * width + offset, L.time, rows,
                                           Stride(width));
      out.noalias() = X * W.transpose();
      out.rowwise() += b;
      if (block.first_gate == 0 && PARARNN_FAULT_POINT("bias_dropped_one_gate"))
        out.leftCols(rows / block.gates).rowwise() -= b.head(rows / block.gates);
    }
  }
  return wx;
}

}  // namespace pararnn::detail
