// A fixed-K Newton loop decided on the device (the CUDA per-channel family's fused strategy,
// solver/src/cuda/per_channel.cpp): the host enqueues all K fused steps at once, and after each
// step one thread applies the driver's rule for a fixed K (newton/driver.hpp) to the step's
// max|F|, so that the host reads the loop's outcome once, after the last step, instead of once
// per step (no stream wait inside the loop).
//
// The state is an array of doubles on the device (kLoopHeader + K of them), zeroed by the
// caller before the first step:
//   [kStopped]   1 once a step's max|F| was not finite or below the stop threshold; every later
//                launch that is given the state as its `skip` (NewtonStepArgs::skip,
//                CellResidualArgs::skip) then does nothing;
//   [kConverged] 1 when it stopped below the threshold (the seed's early stop, no update);
//   [kCommitted] the steps committed (their candidate became the iterate);
//   [kFinal]     the residual of the iterate the loop ends with (launch_newton_loop_final);
//   [kResultPartial] the last committed step's max|F| of its result but the chunk starts;
//   [kGuessSkip] 0 when the iterate the loop ends with is a deferred App. A guess never written
//                (launch_newton_loop_final with `guess_pending`, no step committed), else 1: the
//                `skip` flag of the launches that write that guess out on the device;
//   [kLoopHeader + i] max|F| of step i's entering iterate, for the steps that ran.
// Rule of step i (launch_newton_loop_decision), nothing when already stopped: record max|F|;
// not finite: stop, final = it; below `stop_atol` (when given): stop, converged, final = it;
// else committed = i + 1 (and the result partial when the step reduced it).
// Guarantees: the decisions read the same scalars in the same order as the host loop, so the
// committed steps, the history, the final residual and the iterate are the host loop's bit for
// bit (a NaN residual as a NaN: its payload is the device's conversion's). cudaErrorInvalidValue for null pointers or a negative step. Example:
//   launch_newton_step<GruDiagMath, float>(a /* .skip = d_state */, ws, bytes, stream);
//   launch_newton_loop_decision<float>({.max_abs = d_max, .state = d_state, .step = i,
//                                       .stop = true, .stop_atol = 1e-5}, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

inline constexpr int kStopped = 0, kConverged = 1, kCommitted = 2, kFinal = 3, kResultPartial = 4, kGuessSkip = 5;
inline constexpr int kLoopHeader = 6;

template <class T>
struct NewtonLoopDecisionArgs {
  const T* max_abs = nullptr;  // [0]: max|F| of the step's entering iterate; [1]: of its result
  double* state = nullptr;
  std::int64_t step = 0;
  bool stop = false;           // an early-stop threshold is given
  double stop_atol = 0.0;
  bool with_result = false;    // the step reduced max_abs[1] (NewtonStepArgs::max_abs_result)
};

// After the last step and the final residual pass (skipped when stopped) into `residual`:
// when not stopped, final = residual, or nan_max(result partial, residual) with `partial` (the
// pass covered the chunk starts only).
// Also sets kGuessSkip: 0 when `guess_pending` (the first step started from a deferred guess)
// and no step committed, else 1.
template <class T>
struct NewtonLoopFinalArgs {
  const T* residual = nullptr;
  double* state = nullptr;
  bool partial = false;
  bool guess_pending = false;
};

// The loop's result delivered on the device, for a loop whose state the host does not read (a
// stream being captured into a CUDA graph): the iterate after c = state[kCommitted] commits is
// buffers[c % 2], copied into `out` unless it is `out` or the deferred guess (kGuessSkip 0,
// written into `out` by the caller's guess launches); with `gate`, every element of `out` is set
// to NaN when the final residual state[kFinal] is not finite or above `residual_fail` (the
// residual gate the host applies after a solve, solver newton_config.hpp residual_fail, made
// visible in the output since no exception can be raised from the device).
template <class T>
struct NewtonLoopDeliverArgs {
  const double* state = nullptr;
  const T* buffers[2] = {nullptr, nullptr};
  T* out = nullptr;
  std::int64_t n = 0;
  bool gate = false;
  double residual_fail = 0.0;
};

// Instantiated for float and double (the decision and the final kernel: one thread each).
template <class T>
cudaError_t launch_newton_loop_decision(const NewtonLoopDecisionArgs<T>& args, cudaStream_t stream);
template <class T>
cudaError_t launch_newton_loop_final(const NewtonLoopFinalArgs<T>& args, cudaStream_t stream);
// Zeros the n values of `buffer` when state[kGuessSkip] is 0 (the zero iterate the deferred
// guess is evaluated at), else nothing.
template <class T>
cudaError_t launch_newton_loop_guess_zero(const double* state, T* buffer, std::int64_t n, cudaStream_t stream);
template <class T>
cudaError_t launch_newton_loop_deliver(const NewtonLoopDeliverArgs<T>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
