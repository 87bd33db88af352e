// launch_time_gate (kernels/time_gate.hpp): one thread per (row, channel); its backward, one
// thread per row.
#include <cuda_runtime.h>

#include "pararnn/kernels/time_gate.hpp"

namespace pararnn::kernels {
namespace {

constexpr int kTimeGateThreads = 256;

template <class StorageT>
__global__ void __launch_bounds__(kTimeGateThreads) time_gate_kernel(TimeGateArgs<StorageT> a) {
  using ComputeT = ComputeOf<StorageT>;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.rows * a.channels) return;
  const std::int64_t r = i / a.channels, c = i - r * a.channels;
  const ComputeT dt = static_cast<ComputeT>(a.x[r * a.d_in + a.d_in - 1]);
  const ComputeT floor = static_cast<ComputeT>(a.floor);
  a.wx[(r * a.gates + a.dt_gate) * a.channels + c] = dt < floor ? floor : dt;
}

template <class ComputeT>
__global__ void __launch_bounds__(kTimeGateThreads)
    time_gate_backward_kernel(TimeGateBackwardArgs<ComputeT> a) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= a.rows) return;
  if (a.x[r * a.d_in + a.d_in - 1] < static_cast<ComputeT>(a.floor)) return;  // NaN passes, as on the host
  double sum = 0.0;
  const ComputeT* gate = a.d_wx + (r * a.gates + a.dt_gate) * a.channels;
  for (std::int64_t c = 0; c < a.channels; ++c) sum += static_cast<double>(gate[c]);
  a.dx[r * a.d_in + a.d_in - 1] += static_cast<ComputeT>(sum);
}

}  // namespace

template <class ComputeT>
cudaError_t launch_time_gate_backward(const TimeGateBackwardArgs<ComputeT>& a, cudaStream_t stream) {
  if (a.rows < 0 || a.d_in < 1 || a.channels < 0 || a.dt_gate < 0 || a.dt_gate >= a.gates)
    return cudaErrorInvalidValue;
  if (a.rows == 0) return cudaSuccess;
  if (a.x == nullptr || a.d_wx == nullptr || a.dx == nullptr) return cudaErrorInvalidValue;
  const std::int64_t blocks = (a.rows + kTimeGateThreads - 1) / kTimeGateThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  time_gate_backward_kernel<ComputeT><<<static_cast<unsigned>(blocks), kTimeGateThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_time_gate_backward<float>(const TimeGateBackwardArgs<float>&, cudaStream_t);
template cudaError_t launch_time_gate_backward<double>(const TimeGateBackwardArgs<double>&, cudaStream_t);

template <class StorageT>
cudaError_t launch_time_gate(const TimeGateArgs<StorageT>& a, cudaStream_t stream) {
  if (a.rows < 0 || a.d_in < 1 || a.channels < 0 || a.dt_gate < 0 || a.dt_gate >= a.gates)
    return cudaErrorInvalidValue;
  if (a.rows == 0 || a.channels == 0) return cudaSuccess;
  if (a.x == nullptr || a.wx == nullptr) return cudaErrorInvalidValue;
  const std::int64_t blocks = (a.rows * a.channels + kTimeGateThreads - 1) / kTimeGateThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  time_gate_kernel<StorageT><<<static_cast<unsigned>(blocks), kTimeGateThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_time_gate<float>(const TimeGateArgs<float>&, cudaStream_t);
template cudaError_t launch_time_gate<double>(const TimeGateArgs<double>&, cudaStream_t);
template cudaError_t launch_time_gate<__half>(const TimeGateArgs<__half>&, cudaStream_t);
template cudaError_t launch_time_gate<__nv_bfloat16>(const TimeGateArgs<__nv_bfloat16>&, cudaStream_t);

}  // namespace pararnn::kernels
