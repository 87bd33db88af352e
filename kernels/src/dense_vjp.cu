// launch_dense_vjp (kernels/dense_vjp.hpp): one thread per (chain, chunk) item (a grid-stride
// loop beyond kVjpMaxThreads items), t ascending inside the chunk, each step's VJP by the cell's
// reverse pass (DenseMath::vjp, the CPU dense backward's call) reading the gate inputs in place
// and writing their cotangents into d_wx.
#include <cuda_runtime.h>

#include <cstdint>

#include "dense_chain.cuh"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/kernels/dense_vjp.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kVjpThreads = 64;

// Per thread: the reverse pass's work array.
template <class DenseMath>
__host__ __device__ int64_t slot_elems(const DenseChainInputs<double>& in) {
  return DenseMath::vjp_work_size(static_cast<int>(in.n));
}

int64_t thread_count(const DenseChainInputs<double>& in) {
  return vjp_threads(in.batch * in.chains_per_row, in.time);
}

template <class DenseMath, class OutT>
__global__ void __launch_bounds__(kVjpThreads)
    dense_vjp_kernel(DenseVjpArgs<OutT> a, double* scratch, int64_t threads, int64_t chunks, int64_t steps) {
  const DenseChainInputs<double>& in = a.in;
  const int n = static_cast<int>(in.n);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= threads) return;
  const bool square = DenseMath::kSquareGates;
  // The gate blocks' stride in W_x x: square blocks are n x n and consecutive; otherwise gate g of
  // chain q starts at column g·d_h + q·slot_width.
  const int64_t gate_stride = square ? in.n * in.n : in.d_h;
  const int64_t P = DenseMath::params_size(n);
  double* work = scratch + tid * slot_elems<DenseMath>(in);
  const int64_t chains = in.batch * in.chains_per_row;
  double mu[detail::kDenseMaxN], hp[detail::kDenseMaxN], dh[detail::kDenseMaxN];
  for (int64_t item = tid; item < chains * chunks; item += threads) {
    const int64_t chain = item / chunks, chunk = item - chain * chunks;
    const detail::DenseChainIndex c{chain / in.chains_per_row, chain % in.chains_per_row};
    const double* p = in.params + c.q * P;
    double* partial = a.d_param_partials + ((c.q * in.batch + c.b) * chunks + chunk) * P;
    for (int64_t k = 0; k < P; ++k) partial[k] = 0.0;
    const int64_t first_column = square ? 0 : c.q * in.slot_width;
    const int64_t t_end = (chunk + 1) * steps < in.time ? (chunk + 1) * steps : in.time;
    for (int64_t t = chunk * steps; t < t_end; ++t) {
      const bool head = detail::dense_is_head(in.head, t);
      if (head) {
        detail::dense_head_state(in, c, t, hp);
      } else {
        for (int i = 0; i < n; ++i) hp[i] = a.H[(chain * in.time + t - 1) * in.n + i];
      }
      for (int i = 0; i < n; ++i) mu[i] = a.mu[(chain * in.time + t) * in.n + i];
      const double* wx_t = in.wx + (c.b * in.time + t) * in.width + first_column;
      OutT* dwx_t = a.d_wx + (c.b * in.time + t) * in.width + first_column;
      const bool to_h0 = head && a.d_h0 != nullptr;  // a head reads h0: its d h_prev is ∇h0's row
      DenseMath::vjp(n, p, wx_t, gate_stride, hp, mu, partial, dwx_t, to_h0 ? dh : nullptr, work);
      if (to_h0) {
        const int64_t row = in.h0_row != nullptr ? in.h0_row[t] : c.b;
        for (int i = 0; i < n; ++i) a.d_h0[row * in.state_row + in.offsets[c.q * in.n + i]] = dh[i];
      }
    }
  }
}

}  // namespace

template <class DenseMath>
std::size_t dense_vjp_workspace_bytes(const DenseChainInputs<double>& in) {
  if (!detail::dense_sizes_valid(in) || in.n < 1 || in.n > kDenseKernelMaxN) return 0;
  return static_cast<std::size_t>(thread_count(in) * slot_elems<DenseMath>(in)) * sizeof(double);
}

template <class DenseMath, class OutT>
cudaError_t launch_dense_vjp(const DenseVjpArgs<OutT>& a, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream) {
  if (!detail::dense_sizes_valid(a.in)) return cudaErrorInvalidValue;
  const int64_t threads = thread_count(a.in);
  if (threads == 0) return cudaSuccess;
  if (!detail::dense_inputs_valid<DenseMath>(a.in) || a.H == nullptr || a.mu == nullptr || a.d_wx == nullptr ||
      a.d_param_partials == nullptr || (a.d_h0 != nullptr && a.in.offsets == nullptr))
    return cudaErrorInvalidValue;
  if (workspace == nullptr || workspace_bytes < dense_vjp_workspace_bytes<DenseMath>(a.in) ||
      reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) != 0)
    return cudaErrorInvalidValue;
  const int64_t chains = a.in.batch * a.in.chains_per_row;
  const int64_t blocks = (threads + kVjpThreads - 1) / kVjpThreads;
  dense_vjp_kernel<DenseMath, OutT><<<static_cast<unsigned>(blocks), kVjpThreads, 0, stream>>>(
      a, static_cast<double*>(workspace), threads, vjp_chunks(chains, a.in.time),
      vjp_chunk_steps(chains, a.in.time));
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_DENSE_VJP(MATH)                                                                  \
  template std::size_t dense_vjp_workspace_bytes<MATH>(const DenseChainInputs<double>&);                     \
  template cudaError_t launch_dense_vjp<MATH, float>(const DenseVjpArgs<float>&, void*, std::size_t,         \
                                                     cudaStream_t);                                          \
  template cudaError_t launch_dense_vjp<MATH, double>(const DenseVjpArgs<double>&, void*, std::size_t,       \
                                                      cudaStream_t);
PARARNN_INSTANTIATE_DENSE_VJP(cells::HopfieldMath)
PARARNN_INSTANTIATE_DENSE_VJP(cells::GruHeadMath)
PARARNN_INSTANTIATE_DENSE_VJP(cells::SlstmHeadMath)
#undef PARARNN_INSTANTIATE_DENSE_VJP

}  // namespace pararnn::kernels
