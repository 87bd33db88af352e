// launch_rwkv7_elements (kernels/rwkv7_elements.hpp): one thread per (b, head, t), t fastest; the
// gates in a local array, J_t and the drive rows written straight from cells/rwkv7.hpp's math.
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

}  // namespace

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
