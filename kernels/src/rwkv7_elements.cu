// launch_rwkv7_elements (kernels/rwkv7_elements.hpp): one thread per (b, head, t), t fastest; the
// gates in a local array, J_t and the drive rows written straight from cells/rwkv7.hpp's math.
// launch_rwkv7_sequential: one block per (b, head), a thread per row, the gates in shared memory.
// launch_rwkv7_vjp: one thread per (b, t, head), Rwkv7Math::vjp with its scratch in local arrays.
#include <cuda_runtime.h>

#include <cstdint>

#include "pararnn/cells/rwkv7.hpp"
#include "pararnn/kernels/rwkv7_elements.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kThreads = 128;
constexpr int kMaxD = static_cast<int>(kDenseScanMaxN);

// S0 when there is no h0 (zero-initialised device memory, read only).
template <class T>
__device__ T zero_state[kMaxD * kMaxD];

template <class T>
__global__ void __launch_bounds__(kThreads) rwkv7_elements_kernel(Rwkv7ElementArgs<T> a) {
  const int64_t total = a.batch * a.heads * a.time;
  const int d = static_cast<int>(a.d);
  const int64_t dd = a.d * a.d;
  T g[5 * kMaxD];
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t chain = idx / a.time;  // b · H + head
    const int64_t t = idx - chain * a.time;
    const int64_t b = chain / a.heads;
    const int64_t head = chain - b * a.heads;
    const T* raw = a.wx + (b * a.time + t) * 6 * a.heads * a.d + head * a.d;
    cells::Rwkv7Math::gates(d, raw, static_cast<long long>(a.heads * a.d), g);
    T* S_t = a.S + ((b * a.time + t) * a.heads + head) * dd;
    if (t == 0) {
      const T* S0 = a.h0 != nullptr ? a.h0 + chain * dd : zero_state<T>;
      cells::Rwkv7Math::step(d, g, S0, S_t);
      continue;
    }
    cells::Rwkv7Math::transition(d, g, a.jac + idx * dd);
    for (int i = 0; i < d; ++i) cells::Rwkv7Math::drive_row(d, g, i, S_t + i * a.d);
  }
}

template <class StorageT>
__global__ void __launch_bounds__(kMaxD) rwkv7_sequential_kernel(Rwkv7SequentialArgs<StorageT> a) {
  using T = ComputeOf<StorageT>;
  __shared__ T g[5 * kMaxD];
  const int64_t chain = blockIdx.x;  // b · H + head
  const int64_t b = chain / a.heads, head = chain - b * a.heads;
  const int d = static_cast<int>(a.d);
  const int i = static_cast<int>(threadIdx.x);
  const int64_t dd = a.d * a.d;
  T s[kMaxD], s_new[kMaxD];
  for (int j = 0; j < d; ++j) s[j] = a.h0 != nullptr ? a.h0[chain * dd + i * d + j] : T(0);
  for (int64_t t = 0; t < a.time; ++t) {
    if (i == 0)
      cells::Rwkv7Math::gates(d, a.wx + (b * a.time + t) * 6 * a.heads * a.d + head * a.d,
                              static_cast<long long>(a.heads * a.d), g);
    __syncthreads();
    cells::Rwkv7Math::step_row(d, g, i, s, s_new);
    StorageT* out = a.S + ((b * a.time + t) * a.heads + head) * dd + i * a.d;
    for (int j = 0; j < d; ++j) {
      const StorageT stored = static_cast<StorageT>(s_new[j]);
      out[j] = stored;
      s[j] = static_cast<T>(stored);
    }
    __syncthreads();  // g is rewritten by the next step
  }
}

template <class OutT>
__global__ void __launch_bounds__(kThreads) rwkv7_vjp_kernel(Rwkv7VjpArgs<OutT> a) {
  const int64_t total = a.batch * a.time * a.heads;
  const int d = static_cast<int>(a.d);
  const int64_t dd = a.d * a.d, D = a.heads * a.d;
  double work[10 * kMaxD], d_raw[5 * kMaxD];
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = idx / a.heads;  // b · T + t
    const int64_t head = idx - bt * a.heads;
    const int64_t b = bt / a.time, t = bt - b * a.time;
    const double* prev = t > 0 ? a.S + (idx - a.heads) * dd
                               : (a.h0 != nullptr ? a.h0 + (b * a.heads + head) * dd : zero_state<double>);
    double* d_prev = t == 0 && a.d_h0 != nullptr ? a.d_h0 + (b * a.heads + head) * dd : nullptr;
    cells::Rwkv7Math::vjp(d, a.wx + bt * 6 * D + head * a.d, static_cast<long long>(D), prev, a.mu + idx * dd,
                          d_raw, static_cast<long long>(a.d), d_prev, work);
    // d_raw's blocks are d apart here (the raw gates D apart): copy them to the head's columns.
    OutT* out = a.d_wx + bt * 6 * D + head * a.d;
    for (int g = 0; g < 5; ++g)
      for (int j = 0; j < d; ++j) out[g * D + j] = static_cast<OutT>(d_raw[g * d + j]);
  }
}

}  // namespace

template <class OutT>
cudaError_t launch_rwkv7_vjp(const Rwkv7VjpArgs<OutT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.heads < 0 || a.d < 0) return cudaErrorInvalidValue;
  const int64_t total = a.batch * a.time * a.heads;
  if (total == 0) return cudaSuccess;
  if (a.d < 1 || a.d > kDenseScanMaxN) return cudaErrorInvalidValue;
  if (a.wx == nullptr || a.S == nullptr || a.mu == nullptr || a.d_wx == nullptr) return cudaErrorInvalidValue;
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  rwkv7_vjp_kernel<OutT><<<blocks, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_rwkv7_vjp<float>(const Rwkv7VjpArgs<float>&, cudaStream_t);
template cudaError_t launch_rwkv7_vjp<double>(const Rwkv7VjpArgs<double>&, cudaStream_t);

template <class StorageT>
cudaError_t launch_rwkv7_sequential(const Rwkv7SequentialArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.heads < 0 || a.d < 0) return cudaErrorInvalidValue;
  const int64_t chains = a.batch * a.heads;
  if (chains == 0 || a.time == 0) return cudaSuccess;
  if (a.d < 1 || a.d > kDenseScanMaxN || chains > 0x7fffffff) return cudaErrorInvalidValue;
  if (a.wx == nullptr || a.S == nullptr) return cudaErrorInvalidValue;
  rwkv7_sequential_kernel<StorageT><<<static_cast<unsigned>(chains), static_cast<unsigned>(a.d), 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_rwkv7_sequential<float>(const Rwkv7SequentialArgs<float>&, cudaStream_t);
template cudaError_t launch_rwkv7_sequential<double>(const Rwkv7SequentialArgs<double>&, cudaStream_t);
template cudaError_t launch_rwkv7_sequential<__half>(const Rwkv7SequentialArgs<__half>&, cudaStream_t);
template cudaError_t launch_rwkv7_sequential<__nv_bfloat16>(const Rwkv7SequentialArgs<__nv_bfloat16>&,
                                                            cudaStream_t);

template <class T>
cudaError_t launch_rwkv7_elements(const Rwkv7ElementArgs<T>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.heads < 0 || a.d < 0) return cudaErrorInvalidValue;
  const int64_t total = a.batch * a.heads * a.time;
  if (total == 0) return cudaSuccess;
  if (a.d < 1 || a.d > kDenseScanMaxN) return cudaErrorInvalidValue;
  if (a.wx == nullptr || a.jac == nullptr || a.S == nullptr) return cudaErrorInvalidValue;
  const int64_t wanted = (total + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  rwkv7_elements_kernel<T><<<blocks, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_rwkv7_elements<float>(const Rwkv7ElementArgs<float>&, cudaStream_t);
template cudaError_t launch_rwkv7_elements<double>(const Rwkv7ElementArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
