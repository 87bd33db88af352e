// launch_newton_loop_decision and launch_newton_loop_final (kernels/newton_loop.hpp): one thread
// each, reading the step's scalars as the host loop reads them (widened to double).
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
  if (s[kStopped] != 0.0) return;
  const double res = static_cast<double>(*a.residual);
  if (!a.partial) {
    s[kFinal] = res;
  } else {  // the host's nan_max (newton/family.hpp): the quiet NaN when either is NaN
    const double r = s[kResultPartial];
    s[kFinal] = isnan(r) || isnan(res) ? __longlong_as_double(0x7ff8000000000000LL) : fmax(r, res);
  }
}

}  // namespace

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

}  // namespace pararnn::kernels
