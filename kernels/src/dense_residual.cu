// launch_dense_residual (kernels/dense_residual.hpp): a grid-stride loop over (chain, t), t
// fastest so neighbouring threads read neighbouring H rows, with a per-block NaN-propagating
// max|F| and one final block reducing the partials (nan_max_reduce.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "dense_chain.cuh"
#include "device_util.cuh"
#include "nan_max_reduce.cuh"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/kernels/dense_residual.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kResidualThreads = 128;

template <class DenseMath, class T>
__global__ void __launch_bounds__(kResidualThreads)
    dense_residual_kernel(DenseResidualArgs<T> a, T* partials) {
  const DenseChainInputs<T>& in = a.in;
  const int n = static_cast<int>(in.n);
  const int64_t total = in.batch * in.chains_per_row * in.time;
  T h_prev[detail::kDenseMaxN], h_new[detail::kDenseMaxN], work[detail::kDenseMaxWork];
  T local = T(0);
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t chain = idx / in.time;
    const int64_t t = idx - chain * in.time;
    const detail::DenseChainIndex c{chain / in.chains_per_row, chain % in.chains_per_row};
    const T* H_row = a.H + idx * in.n;  // H[chain][t]
    if (detail::dense_is_head(in.head, t)) {
      detail::dense_head_state(in, c, t, h_prev);
    } else {
      for (int i = 0; i < n; ++i) h_prev[i] = H_row[i - in.n];
    }
    T* jac = a.jac != nullptr ? a.jac + idx * in.n * in.n : nullptr;
    detail::dense_step_at<DenseMath>(in, c, t, h_prev, h_new, jac, work);
    T* F_row = a.residual + idx * in.n;
    for (int i = 0; i < n; ++i) {
      const T f = h_new[i] - H_row[i];
      F_row[i] = f;
      local = detail::nan_max(local, fabs(f));
    }
  }
  if (partials != nullptr) {
    const T m = detail::block_nan_max<kResidualThreads>(local);
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
  }
}

}  // namespace

template <class ComputeT>
std::size_t dense_residual_workspace_bytes() {
  return detail::max_abs_workspace_bytes<ComputeT>();
}

template <class DenseMath, class ComputeT>
cudaError_t launch_dense_residual(const DenseResidualArgs<ComputeT>& a, void* workspace,
                                  std::size_t workspace_bytes, cudaStream_t stream) {
  if (!detail::dense_sizes_valid(a.in)) return cudaErrorInvalidValue;
  const int64_t total = a.in.batch * a.in.chains_per_row * a.in.time;
  if (total != 0 && (!detail::dense_inputs_valid<DenseMath>(a.in) || a.H == nullptr || a.residual == nullptr))
    return cudaErrorInvalidValue;
  return detail::launch_with_max_abs<kResidualThreads>(
      total, a.max_abs_residual, workspace, workspace_bytes, stream, [&](int blocks, ComputeT* partials) {
        dense_residual_kernel<DenseMath, ComputeT><<<blocks, kResidualThreads, 0, stream>>>(a, partials);
      });
}

template std::size_t dense_residual_workspace_bytes<float>();
template std::size_t dense_residual_workspace_bytes<double>();

#define PARARNN_INSTANTIATE_DENSE_RESIDUAL(MATH, T)                                          \
  template cudaError_t launch_dense_residual<MATH, T>(const DenseResidualArgs<T>&, void*,    \
                                                      std::size_t, cudaStream_t);
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::HopfieldMath, float)
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::HopfieldMath, double)
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::GruHeadMath, float)
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::GruHeadMath, double)
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::SlstmHeadMath, float)
PARARNN_INSTANTIATE_DENSE_RESIDUAL(cells::SlstmHeadMath, double)
#undef PARARNN_INSTANTIATE_DENSE_RESIDUAL

}  // namespace pararnn::kernels
