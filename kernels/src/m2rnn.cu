// The ParaM2RNN kernels (kernels/m2rnn.hpp): the residual a thread per state entry
// (grid-stride, entries fastest, so loads of H and F are coalesced); the walk and the loop a
// block per batch row with the state double-buffered in shared memory next to W.
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
