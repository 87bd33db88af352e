// launch_dense_sequential (kernels/dense_sequential.hpp): one thread per chain, 32 threads a
// block (each chain is a latency-bound dependency chain; a few hundred chains then spread over
// as many multiprocessors as possible). Sequential mode is Picard mode's pass loop with one
// pass and nothing frozen.
#include <cuda_runtime.h>

#include <cstdint>

#include "dense_chain.cuh"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/kernels/dense_sequential.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kSequentialThreads = 32;

template <class DenseMath, class StorageT>
__global__ void __launch_bounds__(kSequentialThreads)
    dense_sequential_kernel(DenseSequentialArgs<StorageT> a) {
  using T = ComputeOf<StorageT>;
  const DenseChainInputs<T>& in = a.in;
  const int n = static_cast<int>(in.n);
  const int64_t chain = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chain >= in.batch * in.chains_per_row) return;
  const detail::DenseChainIndex c{chain / in.chains_per_row, chain % in.chains_per_row};
  StorageT* out = a.out + c.b * a.layout.batch_stride + c.q * a.layout.chain_stride;
  const int64_t* offsets = a.layout.offsets != nullptr ? a.layout.offsets + c.q * in.n : nullptr;
  auto at = [&](int64_t t, int i) { return t * a.layout.time_stride + (offsets ? offsets[i] : i); };

  const bool picard = a.picard.enabled;
  const int frozen = picard ? static_cast<int>(a.picard.frozen_begin) : n;
  const int64_t passes = picard ? a.picard.passes + 1 : 1;
  T state[detail::kDenseMaxN], h_prev[detail::kDenseMaxN], h_new[detail::kDenseMaxN];
  T held[detail::kDenseMaxN];  // the previous pass's frozen elements at t − 1
  T work[detail::kDenseMaxWork];
  for (int64_t pass = 0; pass < passes; ++pass) {
    for (int64_t t = 0; t < in.time; ++t) {
      const bool head = detail::dense_is_head(in.head, t);
      if (head) {
        detail::dense_head_state(in, c, t, h_prev);
      } else {
        for (int i = 0; i < n; ++i) h_prev[i] = state[i];
      }
      for (int i = frozen; i < n; ++i)
        h_prev[i] = pass == 0 ? T(0) : head ? h_prev[i] : held[i];
      detail::dense_step_at<DenseMath>(in, c, t, h_prev, h_new, static_cast<T*>(nullptr), work);
      for (int i = 0; i < n; ++i) {
        StorageT* dst = out + at(t, i);
        if (i >= frozen && pass > 0) held[i] = static_cast<T>(*dst);  // previous pass, for t + 1
        const StorageT stored = static_cast<StorageT>(h_new[i]);
        *dst = stored;
        state[i] = static_cast<T>(stored);
      }
    }
  }
}

}  // namespace

template <class DenseMath, class StorageT>
cudaError_t launch_dense_sequential(const DenseSequentialArgs<StorageT>& a, cudaStream_t stream) {
  if (!detail::dense_sizes_valid(a.in)) return cudaErrorInvalidValue;
  const int64_t chains = a.in.batch * a.in.chains_per_row;
  if (chains == 0 || a.in.time == 0) return cudaSuccess;
  if (!detail::dense_inputs_valid<DenseMath>(a.in) || a.out == nullptr)
    return cudaErrorInvalidValue;
  if (a.picard.enabled &&
      (a.picard.passes < 0 || a.picard.frozen_begin < 0 || a.picard.frozen_begin > a.in.n))
    return cudaErrorInvalidValue;
  const int64_t blocks = (chains + kSequentialThreads - 1) / kSequentialThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  dense_sequential_kernel<DenseMath, StorageT>
      <<<static_cast<unsigned>(blocks), kSequentialThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_DENSE_SEQUENTIAL(MATH)                                              \
  template cudaError_t launch_dense_sequential<MATH, float>(const DenseSequentialArgs<float>&,  \
                                                            cudaStream_t);                      \
  template cudaError_t launch_dense_sequential<MATH, double>(const DenseSequentialArgs<double>&, \
                                                             cudaStream_t);                     \
  template cudaError_t launch_dense_sequential<MATH, __half>(const DenseSequentialArgs<__half>&, \
                                                             cudaStream_t);                     \
  template cudaError_t launch_dense_sequential<MATH, __nv_bfloat16>(                            \
      const DenseSequentialArgs<__nv_bfloat16>&, cudaStream_t);
PARARNN_INSTANTIATE_DENSE_SEQUENTIAL(cells::HopfieldMath)
PARARNN_INSTANTIATE_DENSE_SEQUENTIAL(cells::GruHeadMath)
PARARNN_INSTANTIATE_DENSE_SEQUENTIAL(cells::SlstmHeadMath)
#undef PARARNN_INSTANTIATE_DENSE_SEQUENTIAL

}  // namespace pararnn::kernels
