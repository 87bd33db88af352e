// The input affine on the device, forward and backward, internal to the solver (affine.cpp):
// W_x x + b for every family (cuBLASLt / cuBLAS), and its backward: ∇W, ∇b reduced over rows in
// double on the device and delivered (into the caller's gradient targets or the host), ∇x.
//
// Guarantees: each function below says what it computes and in which arithmetic; every call
// runs on current_stream() and every cuBLAS call is checked (runtime.hpp).
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "cuda/runtime.hpp"

namespace pararnn::detail::cuda {

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

// The device inputs the dense, matrix-state and exact linear families share (family_inputs.cpp):
// UnsupportedPath naming `who` unless the CUDA backend can run; W_x x + b on the device,
// [b][t][gate_width(cell)] in the compute type (the bias row, then one GEMM per affine block
// onto its columns, as cpu/input_affine.hpp places them); h0 in the compute type (empty
// without h0).

DeviceBuffer device_input_affine(const Cell& cell, const TensorView& x, const Layout& L);
DeviceBuffer device_h0(const ApplyOptions& options, DType compute);

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
                      const double* sums, NewtonGradients& out);
inline void deliver_gradient(const Cell& cell, const ApplyOptions& options, const std::string& name,
                             const Shape& shape, const DeviceBuffer& sums, NewtonGradients& out) {
  deliver_gradient(cell, options, name, shape, sums.as<double>(), out);
}
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
// new buffer. f64 and f32 cells: the products of the unrounded operands by cuBLAS in their type
// (no TF32). f16 and bf16 cells: on bf16 tensor cores with f32 accumulation, x and W read as
// stored (f16 x and W split into two bf16 terms that add up to them exactly), d_wx split into two
// bf16 terms (kernels/bf16_split.hpp: each d_wx element to within 2^-16 of itself, relative), so
// each product is the f32 one of that d_wx up to the order of its sum (the term pairs below 2^-24
// of the leading one are left out); ∇b by cuBLAS in f32. W is the value the solve read (parameter_view: `options`'
// view where it names the weight, else the Cell's).
// `given` carries what the per-element VJP already made of d_wx (per_channel_training.cpp): its
// bf16 terms (f16 and bf16 cells; read in place of the split, the same bits, and d_wx may then be
// null) and ∇b's sums in double ([gate_width] on the device, Σ over b and t of d_wx as stored;
// read in place of the ∇b GEMMs).
struct DwxGiven {
  const void* bf16_terms = nullptr;  // [kDwxTerms][plane] bf16 bits, plane ≥ B · T · gate_width
  std::int64_t plane = 0;
  const double* bias_sums = nullptr;
};
// The number of bf16 terms the f16/bf16 backward splits d_wx into (DwxGiven::bf16_terms holds as many).
int half_backward_dwx_terms();
template <class ComputeT>
void input_affine_backward_into(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                ComputeT* dx, NewtonGradients& out, const ApplyOptions& options,
                                const DwxGiven& given = {});
template <class ComputeT>
DeviceBuffer input_affine_backward(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                   NewtonGradients& out);

}  // namespace pararnn::detail::cuda
