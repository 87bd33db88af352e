// launch_newton_loop_decision and launch_newton_loop_final (kernels/newton_loop.hpp): one thread
// each, reading the step's scalars as the host loop reads them (widened to double); the guess's
// zero iterate and the delivery of the result: grid-stride element kernels.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "pararnn/kernels/newton_loop.hpp"

namespace pararnn::kernels {
namespace {

template <class T>
__global__ void newton_loop_decision_kernel(NewtonLoopDecisionArgs<T> a) {
  double* s = a.state;
  if (s[kStopped] != 0.0) return;
  const double res = static_cast<double>(a.max_abs[0]);
  s[kLoopHeader + a.step] = res;
  if (!isfinite(res)) {
    s[kStopped] = 1.0;
    s[kFinal] = res;
    return;
  }
  if (a.stop && res < a.stop_atol) {  // the seed's early stop: no update
    s[kStopped] = 1.0;
    s[kConverged] = 1.0;
    s[kFinal] = res;
    return;
  }
  s[kCommitted] = static_cast<double>(a.step + 1);
  if (a.with_result) s[kResultPartial] = static_cast<double>(a.max_abs[1]);
}

template <class T>
__global__ void newton_loop_final_kernel(NewtonLoopFinalArgs<T> a) {
  double* s = a.state;
  s[kGuessSkip] = a.guess_pending && s[kCommitted] == 0.0 ? 0.0 : 1.0;
  if (s[kStopped] != 0.0) return;
  const double res = static_cast<double>(*a.residual);
  if (!a.partial) {
    s[kFinal] = res;
  } else {  // the host's nan_max (newton/family.hpp): the quiet NaN when either is NaN
    const double r = s[kResultPartial];
    s[kFinal] = isnan(r) || isnan(res) ? __longlong_as_double(0x7ff8000000000000LL) : fmax(r, res);
  }
}

template <class T>
__global__ void newton_loop_guess_zero_kernel(const double* state, T* buffer, std::int64_t n) {
  if (state[kGuessSkip] != 0.0) return;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    buffer[i] = T(0);
}

template <class T>
__global__ void newton_loop_deliver_kernel(NewtonLoopDeliverArgs<T> a) {
  const double* s = a.state;
  const bool poison = a.gate && !(s[kFinal] <= a.residual_fail);  // NaN and +inf included
  const T* src = s[kGuessSkip] == 0.0 ? nullptr : a.buffers[static_cast<std::int64_t>(s[kCommitted]) % 2];
  if (src == a.out) src = nullptr;
  if (!poison && src == nullptr) return;
  const T nan = static_cast<T>(__longlong_as_double(0x7ff8000000000000LL));
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride)
    a.out[i] = poison ? nan : src[i];
}

// A grid that covers n with 256-thread blocks, capped (the kernels stride over the rest).
unsigned element_blocks(std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
}

}  // namespace

template <class T>
cudaError_t launch_newton_loop_guess_zero(const double* state, T* buffer, std::int64_t n, cudaStream_t stream) {
  if (state == nullptr || n < 0 || (n > 0 && buffer == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  newton_loop_guess_zero_kernel<T><<<element_blocks(n), 256, 0, stream>>>(state, buffer, n);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_newton_loop_deliver(const NewtonLoopDeliverArgs<T>& a, cudaStream_t stream) {
  if (a.state == nullptr || a.n < 0 || (a.n > 0 && a.out == nullptr)) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  newton_loop_deliver_kernel<T><<<element_blocks(a.n), 256, 0, stream>>>(a);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_newton_loop_decision(const NewtonLoopDecisionArgs<T>& a, cudaStream_t stream) {
  if (a.max_abs == nullptr || a.state == nullptr || a.step < 0) return cudaErrorInvalidValue;
  newton_loop_decision_kernel<T><<<1, 1, 0, stream>>>(a);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_newton_loop_final(const NewtonLoopFinalArgs<T>& a, cudaStream_t stream) {
  if (a.residual == nullptr || a.state == nullptr) return cudaErrorInvalidValue;
  newton_loop_final_kernel<T><<<1, 1, 0, stream>>>(a);
  return cudaGetLastError();
}

template cudaError_t launch_newton_loop_decision<float>(const NewtonLoopDecisionArgs<float>&, cudaStream_t);
template cudaError_t launch_newton_loop_decision<double>(const NewtonLoopDecisionArgs<double>&, cudaStream_t);
template cudaError_t launch_newton_loop_final<float>(const NewtonLoopFinalArgs<float>&, cudaStream_t);
template cudaError_t launch_newton_loop_final<double>(const NewtonLoopFinalArgs<double>&, cudaStream_t);
template cudaError_t launch_newton_loop_guess_zero<float>(const double*, float*, std::int64_t, cudaStream_t);
template cudaError_t launch_newton_loop_guess_zero<double>(const double*, double*, std::int64_t, cudaStream_t);
template cudaError_t launch_newton_loop_deliver<float>(const NewtonLoopDeliverArgs<float>&, cudaStream_t);
template cudaError_t launch_newton_loop_deliver<double>(const NewtonLoopDeliverArgs<double>&, cudaStream_t);

}  // namespace pararnn::kernels
