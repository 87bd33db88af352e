// The input affine of the CPU families: W_x x + b of every affine block of a cell, in the compute
// type, computed once per solve and read by every iteration; and its backward, the one
// definition every CPU family's newton_backward uses for ∇W_x, ∇b and ∇x.
#pragma once

#include <Eigen/Core>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "newton/family.hpp"
#include "pararnn/core/fault.hpp"

namespace pararnn::detail {

// A sequence-parallel backward's reduction of one rank's double sums into the sums over every
// rank, in place (empty: one rank, nothing to do).
using SumOverRanks = std::function<void(std::span<double>)>;

// The caller's h0 (any strides and floating dtype) as contiguous values in the compute type, in
// its own element order; empty without one.
template <class ComputeT>
std::vector<ComputeT> h0_values(const ApplyOptions& options) {
  if (!options.h0) return {};
  const Tensor h0 = Tensor::converted(*options.h0, StorageTraits<ComputeT>::dtype);
  return std::vector<ComputeT>(h0.data_as<ComputeT>(), h0.data_as<ComputeT>() + h0.numel());
}

// W_x x + b of every affine block, [b][t][gate_width(cell)] in the compute type: one GEMM per
// block and batch row. Blocks land at first_gate times their block width.
template <class ComputeT>
std::vector<ComputeT> input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;
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

// The backward of input_affine from the gate-input cotangents d_wx ([b][t][gate_width(cell)],
// the forward's layout): per block ∇W = Σ_b d_wxᵀ in and ∇b = Σ d_wx (summed in double, rounded
// once by gradient_tensor), added to `parameters`; returns ∇x [b·t][d_in] in ComputeT, with
// CfC's Δt channel (spec dt_gate) getting Σ_c of its gate's cotangent, zero where the 1e-4 floor
// clamped it. One GEMM each per block and batch row. `sum_over_ranks` (a sequence-parallel
// backward) turns each double sum into the sum over every rank before it is rounded.
template <class ComputeT>
Eigen::Matrix<ComputeT, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> input_affine_backward(
    const Cell& cell, const TensorView& x, const Layout& L, const std::vector<ComputeT>& d_wx,
    std::map<std::string, Tensor>& parameters, const SumOverRanks& sum_over_ranks = {}) {
  constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;
  using RowMatrix = Eigen::Matrix<ComputeT, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<Eigen::Dynamic>;
  const std::int64_t B = L.batch, T = L.time, width = gate_width(cell);
  const Tensor xc = Tensor::converted(x, kComputeDType);
  RowMatrix dx_all = RowMatrix::Zero(B * T, L.d_in);
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t inputs = cell.affine_inputs(block);
    const std::int64_t rows = cell.affine_rows(block);
    const std::int64_t offset = block.first_gate * (rows / block.gates);
    const Tensor w = Tensor::converted(cell.parameter(std::string(block.weight)), kComputeDType);
    Eigen::Map<const RowMatrix> W(w.data_as<ComputeT>(), rows, inputs);
    RowMatrixD dW = RowMatrixD::Zero(rows, inputs);
    Eigen::Matrix<double, 1, Eigen::Dynamic> db = Eigen::Matrix<double, 1, Eigen::Dynamic>::Zero(rows);
    for (std::int64_t b = 0; b < B; ++b) {
      Eigen::Map<const RowMatrix, 0, Stride> X(xc.data_as<ComputeT>() + b * T * L.d_in, T, inputs,
                                               Stride(L.d_in));
      Eigen::Map<const RowMatrix, 0, Stride> dWX(d_wx.data() + b * T * width + offset, T, rows, Stride(width));
      dW += (dWX.transpose() * X).template cast<double>();
      db += dWX.template cast<double>().colwise().sum();
      dx_all.block(b * T, 0, T, inputs).noalias() += dWX * W;
    }
    if (sum_over_ranks) {
      sum_over_ranks(std::span<double>(dW.data(), static_cast<std::size_t>(dW.size())));
      sum_over_ranks(std::span<double>(db.data(), static_cast<std::size_t>(db.size())));
    }
    parameters.emplace(std::string(block.weight),
                       gradient_tensor(cell, {rows, inputs}, std::span<const double>(dW.data(), dW.size())));
    parameters.emplace(std::string(block.bias),
                       gradient_tensor(cell, {rows}, std::span<const double>(db.data(), db.size())));
  }
  if (cell.spec().dt_gate >= 0) {
    const std::int64_t g = cell.spec().dt_gate, D = L.d_h;
    for (std::int64_t bt = 0; bt < B * T; ++bt) {
      const ComputeT raw = xc.data_as<ComputeT>()[bt * L.d_in + L.d_in - 1];
      if (raw < static_cast<ComputeT>(cells::kCfcDtFloor)) continue;
      double sum = 0.0;
      const ComputeT* dwx_t = d_wx.data() + bt * width + g * D;
      for (std::int64_t c = 0; c < D; ++c) sum += static_cast<double>(dwx_t[c]);
      dx_all(bt, L.d_in - 1) += static_cast<ComputeT>(sum);
    }
  }
  return dx_all;
}

}  // namespace pararnn::detail
