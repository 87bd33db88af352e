// The ParaM2RNN kernels (kernels/m2rnn.hpp): the residual a thread per state entry
// (grid-stride, entries fastest, so loads of H and F are coalesced); the walk and the loop a
// block per batch row with the state double-buffered in shared memory next to W. The backward:
// the adjoint walk a block per row (μ and G ⊙ μ in shared memory), the VJP a thread per (row,
// chunk of steps).
#include <cuda_runtime.h>

#include <cstdint>

#include "device_util.cuh"
#include "nan_max_reduce.cuh"
#include "pararnn/cells/m2rnn.hpp"
#include "pararnn/kernels/m2rnn.hpp"

namespace pararnn::kernels {
namespace {

using cells::M2rnnMath;
using std::int64_t;

constexpr int kResidualThreads = 256;
constexpr int kRowThreads = 256;

std::size_t row_shared_bytes(int k, int v, std::size_t element) {
  return (2 * static_cast<std::size_t>(k) * v + static_cast<std::size_t>(v) * v) * element;
}

template <class T>
bool valid(const M2rnnInputs<T>& in) {
  return in.batch >= 0 && in.time >= 0 && in.k >= 1 && in.v >= 1 &&
         (in.batch * in.time == 0 || (in.wx != nullptr && in.W != nullptr && in.h0 != nullptr));
}

template <class T>
__global__ void __launch_bounds__(kResidualThreads)
    m2rnn_residual_kernel(M2rnnResidualArgs<T> a, T* partials) {
  const M2rnnInputs<T>& in = a.in;
  const int K = in.k, V = in.v;
  const int64_t KV = static_cast<int64_t>(K) * V, width = K + V + 1;
  const int64_t n = in.batch * in.time * KV;
  T local = T(0);
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = idx / KV;
    const int entry = static_cast<int>(idx - bt * KV);
    const int64_t b = bt / in.time, t = bt - b * in.time;
    const T* raw = in.wx + bt * width;
    const T* h_prev = t > 0 ? a.H + (bt - 1) * KV : in.h0 + b * KV;
    T g = T(0);
    const T h_new = M2rnnMath::step_entry(K, V, in.W, raw, M2rnnMath::forget(K, V, raw), h_prev,
                                          entry / V, entry % V, &g);
    const T r = h_new - a.H[idx];
    a.residual[idx] = r;
    if (a.gain != nullptr) a.gain[idx] = g;
    local = detail::nan_max(local, fabs(r));
  }
  if (partials != nullptr) {
    const T m = detail::block_nan_max<kResidualThreads>(local);
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
  }
}

// Loads W into shared memory; returns the two state buffers after it.
template <class T>
__device__ T* load_w(const M2rnnInputs<T>& in, T* shared) {
  const int VV = in.v * in.v;
  for (int i = static_cast<int>(threadIdx.x); i < VV; i += blockDim.x) shared[i] = in.W[i];
  return shared + VV;
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    m2rnn_walk_kernel(M2rnnInputs<T> in, const T* gain, T* delta) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* W = reinterpret_cast<T*>(shared_bytes);
  const int K = in.k, V = in.v, KV = K * V;
  T* buffers = load_w(in, W);
  const int64_t b = blockIdx.x, width = K + V + 1;
  T* row = delta + b * in.time * KV;
  const T* gain_row = gain + b * in.time * KV;
  T* prev = buffers;
  T* next = buffers + KV;
  for (int e = static_cast<int>(threadIdx.x); e < KV; e += blockDim.x) prev[e] = row[e];  // δ_0 = F_0
  __syncthreads();
  for (int64_t t = 1; t < in.time; ++t) {
    const T f = M2rnnMath::forget(K, V, in.wx + (b * in.time + t) * width);
    for (int entry = static_cast<int>(threadIdx.x); entry < KV; entry += blockDim.x) {
      const T d = row[t * KV + entry] +
                  M2rnnMath::jacobian_entry(V, W, f, gain_row[t * KV + entry], prev, entry / V, entry % V);
      row[t * KV + entry] = d;
      next[entry] = d;
    }
    __syncthreads();
    T* swap = prev;
    prev = next;
    next = swap;
  }
}

template <class StorageT>
__global__ void __launch_bounds__(kRowThreads)
    m2rnn_sequential_kernel(M2rnnInputs<ComputeOf<StorageT>> in, StorageT* H) {
  using T = ComputeOf<StorageT>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* W = reinterpret_cast<T*>(shared_bytes);
  const int K = in.k, V = in.v, KV = K * V;
  T* buffers = load_w(in, W);
  const int64_t b = blockIdx.x, width = K + V + 1;
  T* prev = buffers;
  T* next = buffers + KV;
  for (int e = static_cast<int>(threadIdx.x); e < KV; e += blockDim.x) prev[e] = in.h0[b * KV + e];
  __syncthreads();
  for (int64_t t = 0; t < in.time; ++t) {
    const T* raw = in.wx + (b * in.time + t) * width;
    const T f = M2rnnMath::forget(K, V, raw);
    for (int entry = static_cast<int>(threadIdx.x); entry < KV; entry += blockDim.x) {
      const StorageT stored = static_cast<StorageT>(
          M2rnnMath::step_entry(K, V, W, raw, f, prev, entry / V, entry % V, static_cast<T*>(nullptr)));
      H[(b * in.time + t) * KV + entry] = stored;
      next[entry] = static_cast<T>(stored);
    }
    __syncthreads();
    T* swap = prev;
    prev = next;
    next = swap;
  }
}

// Block size and shared memory of a row kernel; false when the state does not fit.
template <class T, class Kernel>
cudaError_t row_launch_setup(const M2rnnInputs<T>& in, Kernel kernel, std::size_t& shared, int& threads) {
  shared = row_shared_bytes(in.k, in.v, sizeof(T));
  if (shared > kM2rnnRowSharedLimit) return cudaErrorInvalidValue;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared));
      e != cudaSuccess)
    return e;
  const int kv = in.k * in.v;
  threads = kv >= kRowThreads ? kRowThreads : ((kv + 31) / 32) * 32;
  return cudaSuccess;
}

__global__ void __launch_bounds__(kRowThreads) m2rnn_adjoint_walk_kernel(M2rnnAdjointArgs a) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  double* W = reinterpret_cast<double*>(shared_bytes);
  const int K = a.in.k, V = a.in.v, KV = K * V;
  double* mu_s = load_w(a.in, W);  // μ_t, then (in place) the carry J_tᵀ[μ_t]
  double* gain_mu = mu_s + KV;
  const int64_t b = blockIdx.x, width = K + V + 1;
  double* row = a.mu + b * a.in.time * KV;
  const double* gain_row = a.gain + b * a.in.time * KV;
  for (int e = static_cast<int>(threadIdx.x); e < KV; e += blockDim.x) mu_s[e] = 0.0;
  for (int64_t t = a.in.time - 1; t >= 0; --t) {
    // Every entry reads and writes only its own μ_s slot here, so no barrier is needed before.
    for (int entry = static_cast<int>(threadIdx.x); entry < KV; entry += blockDim.x) {
      const double m = row[t * KV + entry] + mu_s[entry];
      row[t * KV + entry] = m;
      mu_s[entry] = m;
      gain_mu[entry] = gain_row[t * KV + entry] * m;
    }
    __syncthreads();
    const double f = M2rnnMath::forget(K, V, a.in.wx + (b * a.in.time + t) * width);
    for (int entry = static_cast<int>(threadIdx.x); entry < KV; entry += blockDim.x) {
      const int i = entry / V, j = entry % V;
      mu_s[entry] = M2rnnMath::jacobian_transpose_entry(V, W, f, mu_s[entry], gain_mu + i * V, j);
    }
    __syncthreads();  // gain_mu is rewritten by the next step
  }
  if (a.d_h0 != nullptr)
    for (int e = static_cast<int>(threadIdx.x); e < KV; e += blockDim.x) a.d_h0[b * KV + e] = mu_s[e];
}

int64_t vjp_slot(const M2rnnInputs<double>& in) { return static_cast<int64_t>(in.k) * in.v + in.k + in.v + 1; }

template <class OutT>
__global__ void __launch_bounds__(kResidualThreads)
    m2rnn_vjp_kernel(M2rnnVjpArgs<OutT> a, double* scratch, int64_t threads, int64_t chunks, int64_t steps,
                     int64_t slot) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid >= threads) return;
  const int K = a.in.k, V = a.in.v, KV = K * V, width = K + V + 1;
  double* dA = scratch + tid * slot;
  double* d_raw = dA + KV;
  for (int64_t item = tid; item < a.in.batch * chunks; item += threads) {
    const int64_t b = item / chunks, chunk = item - b * chunks;
    double* dW = a.dW_partials + item * V * V;
    for (int k = 0; k < V * V; ++k) dW[k] = 0.0;
    const int64_t t_end = (chunk + 1) * steps < a.in.time ? (chunk + 1) * steps : a.in.time;
    for (int64_t t = chunk * steps; t < t_end; ++t) {
      const double* h_prev = t == 0 ? a.in.h0 + b * KV : a.H + (b * a.in.time + t - 1) * KV;
      M2rnnMath::vjp(K, V, a.in.W, a.in.wx + (b * a.in.time + t) * width, h_prev, a.mu + (b * a.in.time + t) * KV,
                     d_raw, dW, static_cast<double*>(nullptr), dA);
      OutT* out = a.d_wx + (b * a.in.time + t) * width;
      for (int k = 0; k < width; ++k) out[k] = static_cast<OutT>(d_raw[k]);
    }
  }
}

}  // namespace

bool m2rnn_fits_on_gpu(int k, int v, std::size_t element_bytes) {
  return k >= 1 && v >= 1 && row_shared_bytes(k, v, element_bytes) <= kM2rnnRowSharedLimit;
}

template <class T>
std::size_t m2rnn_residual_workspace_bytes() {
  return detail::max_abs_workspace_bytes<T>();
}

template <class T>
cudaError_t launch_m2rnn_residual(const M2rnnResidualArgs<T>& a, void* workspace,
                                  std::size_t workspace_bytes, cudaStream_t stream) {
  if (!valid(a.in)) return cudaErrorInvalidValue;
  const int64_t n = a.in.batch * a.in.time * a.in.k * a.in.v;
  if (n != 0 && (a.H == nullptr || a.residual == nullptr)) return cudaErrorInvalidValue;
  return detail::launch_with_max_abs<kResidualThreads>(
      n, a.max_abs_residual, workspace, workspace_bytes, stream, [&](int blocks, T* partials) {
        m2rnn_residual_kernel<T><<<blocks, kResidualThreads, 0, stream>>>(a, partials);
      });
}

template <class T>
cudaError_t launch_m2rnn_walk(const M2rnnInputs<T>& in, const T* gain, T* delta, cudaStream_t stream) {
  if (!valid(in)) return cudaErrorInvalidValue;
  if (in.batch * in.time == 0) return cudaSuccess;
  if (gain == nullptr || delta == nullptr || in.batch > 0x7fffffff) return cudaErrorInvalidValue;
  std::size_t shared = 0;
  int threads = 0;
  if (cudaError_t e = row_launch_setup(in, m2rnn_walk_kernel<T>, shared, threads); e != cudaSuccess) return e;
  m2rnn_walk_kernel<T><<<static_cast<unsigned>(in.batch), threads, shared, stream>>>(in, gain, delta);
  return cudaGetLastError();
}

template <class StorageT>
cudaError_t launch_m2rnn_sequential(const M2rnnInputs<ComputeOf<StorageT>>& in, StorageT* H,
                                    cudaStream_t stream) {
  if (!valid(in)) return cudaErrorInvalidValue;
  if (in.batch * in.time == 0) return cudaSuccess;
  if (H == nullptr || in.batch > 0x7fffffff) return cudaErrorInvalidValue;
  std::size_t shared = 0;
  int threads = 0;
  if (cudaError_t e = row_launch_setup(in, m2rnn_sequential_kernel<StorageT>, shared, threads); e != cudaSuccess)
    return e;
  m2rnn_sequential_kernel<StorageT><<<static_cast<unsigned>(in.batch), threads, shared, stream>>>(in, H);
  return cudaGetLastError();
}

cudaError_t launch_m2rnn_adjoint_walk(const M2rnnAdjointArgs& a, cudaStream_t stream) {
  if (!valid(a.in)) return cudaErrorInvalidValue;
  if (a.in.batch * a.in.time == 0) return cudaSuccess;
  if (a.gain == nullptr || a.mu == nullptr || a.in.batch > 0x7fffffff) return cudaErrorInvalidValue;
  std::size_t shared = 0;
  int threads = 0;
  if (cudaError_t e = row_launch_setup(a.in, m2rnn_adjoint_walk_kernel, shared, threads); e != cudaSuccess) return e;
  m2rnn_adjoint_walk_kernel<<<static_cast<unsigned>(a.in.batch), threads, shared, stream>>>(a);
  return cudaGetLastError();
}

std::size_t m2rnn_vjp_workspace_bytes(const M2rnnInputs<double>& in) {
  if (!valid(in)) return 0;
  return static_cast<std::size_t>(vjp_threads(in.batch, in.time) * vjp_slot(in)) * sizeof(double);
}

template <class OutT>
cudaError_t launch_m2rnn_vjp(const M2rnnVjpArgs<OutT>& a, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream) {
  if (!valid(a.in)) return cudaErrorInvalidValue;
  const int64_t threads = vjp_threads(a.in.batch, a.in.time);
  if (threads == 0) return cudaSuccess;
  if (a.H == nullptr || a.mu == nullptr || a.d_wx == nullptr || a.dW_partials == nullptr) return cudaErrorInvalidValue;
  if (workspace == nullptr || workspace_bytes < m2rnn_vjp_workspace_bytes(a.in) ||
      reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) != 0)
    return cudaErrorInvalidValue;
  const int64_t blocks = (threads + kResidualThreads - 1) / kResidualThreads;
  m2rnn_vjp_kernel<OutT><<<static_cast<unsigned>(blocks), kResidualThreads, 0, stream>>>(
      a, static_cast<double*>(workspace), threads, vjp_chunks(a.in.batch, a.in.time),
      vjp_chunk_steps(a.in.batch, a.in.time), vjp_slot(a.in));
  return cudaGetLastError();
}

template cudaError_t launch_m2rnn_vjp<float>(const M2rnnVjpArgs<float>&, void*, std::size_t, cudaStream_t);
template cudaError_t launch_m2rnn_vjp<double>(const M2rnnVjpArgs<double>&, void*, std::size_t, cudaStream_t);

#define PARARNN_INSTANTIATE_M2RNN_COMPUTE(T)                                                          \
  template std::size_t m2rnn_residual_workspace_bytes<T>();                                          \
  template cudaError_t launch_m2rnn_residual<T>(const M2rnnResidualArgs<T>&, void*, std::size_t,     \
                                                cudaStream_t);                                       \
  template cudaError_t launch_m2rnn_walk<T>(const M2rnnInputs<T>&, const T*, T*, cudaStream_t);
PARARNN_INSTANTIATE_M2RNN_COMPUTE(float)
PARARNN_INSTANTIATE_M2RNN_COMPUTE(double)
#undef PARARNN_INSTANTIATE_M2RNN_COMPUTE
#define PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL(S)                                                       \
  template cudaError_t launch_m2rnn_sequential<S>(const M2rnnInputs<ComputeOf<S>>&, S*, cudaStream_t);
PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL(float)
PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL(double)
PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL(__half)
PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL(__nv_bfloat16)
#undef PARARNN_INSTANTIATE_M2RNN_SEQUENTIAL

}  // namespace pararnn::kernels
