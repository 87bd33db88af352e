// The fused windowed Newton solve (spec §2.8, NewtonConfig::window_len) of a per-channel cell on
// the GPU: one launch solves every window of `window` steps, each from the previous window's last
// state (h0, or zeros, for the first): the App. A guess, then exactly K Newton updates
// H ← H + ω δ (δ_t = J_t δ_{t−1} + F_t, δ = 0 entering the window, J = 0 at its first step), the
// gate pre-activations read once per window and H written once (kernels/src/windowed_newton.cuh).
//
// Layout (D = d_h channels, G = CellMath::kGates, S = kSlots), all in T (f32 or f64):
//   wx[b][t][g·D + c]   gate pre-activations W_x x + b (CfC's Δt gate block already floored)
//   recurrent[k][c]     the clamped recurrent rows, then the constants (Cell::channel_values)
//   h0[b][s][c]         optional
//   H[b][t][s][c]       written
//   residual_max        [window index][K + 1] (K = iterations), zeroed by the caller; optional
//                       when fixed: the bits of max|F| over the window's whole batch at each of
//                       its K loop evaluations and at its final iterate (atomicMax of the bits of
//                       |F|: a NaN anywhere in the window leaves a NaN's bits, which compare above
//                       +inf's)
//   evaluations         adaptive only: [window index], zeroed by the caller
// Semantics, fixed (adaptive false): the CPU's windowed solve with the fixed K and no early
// stop, window by window, up to rounding (the time lanes' association and the device's libm).
// The fixed-K early stop on residual_atol needs the window's max|F| over every row before each
// update, which no block has: the solver (cuda/windowed.cpp) reads residual_max afterwards and
// takes this result only where that stop cannot have fired (no evaluation non-finite or within
// a factor 2 of the threshold).
// Semantics, adaptive (adaptive true; the solver's default, max_iters unset): the driver's
// adaptive rule (newton/driver.hpp) decided on the device per chain (batch row, channel) and
// window: `iterations` is the cap (k_max), `min_iterations` the minimum K; at evaluation k a
// chain whose max|F| over its slots and the window's steps is finite is updated, and it stops
// after that update once that max is below stop_atol and k + 1 >= min_iterations; a chain
// whose max is not finite stops without the update. The block runs while any of its chains
// does. residual_max[w][k] is then the max over the chains still running at evaluation k (0
// where none ran it) and evaluations[w] the most evaluations any chain of window w ran; a
// window whose chains did not all stop below stop_atol within the cap shows as a non-finite
// residual_max[w][k] or as evaluations[w] = iterations with residual_max[w][iterations − 1] at
// or above stop_atol (the solver then runs the window loop, whose fallback handles it). The
// window loop's rule is the same with the max over the window's whole batch: a chain here may
// stop (after its one more update) while another still runs, where the loop would update it
// again, a change far below the residual it already reached.
//
// Guarantees: never allocates, never synchronises; deterministic (every decision is a chain's
// own, and maxima are order-free); cudaErrorInvalidValue for negative sizes, a null required
// array (residual_max and evaluations when adaptive), min_iterations outside [0, iterations], a window outside [1, windowed_newton_max_window<CellMath, T>()], more
// than kWindowedMaxBatch batch rows or more than kWindowedMaxIterations iterations, else the
// launch's error. Instantiated for every per-channel cell
// (cells/cell_list.hpp) in float and double. Example:
//   WindowedNewtonArgs<float> a{.wx = wx, .recurrent = rec, .H = H, .batch = 8, .time = 65536,
//                               .channels = 256, .window = 512, .iterations = 3};
//   cudaError_t e = launch_windowed_newton<cells::GruDiagMath, float>(a, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

namespace pararnn::kernels {

// The launch's bounds: batch rows are the grid's y dimension; K + 1 residual maxima per window
// stay an int.
inline constexpr std::int64_t kWindowedMaxBatch = 65535;
inline constexpr int kWindowedMaxIterations = 1 << 20;

template <class T>
struct WindowedNewtonArgs {
  using Bits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  const T* wx = nullptr;
  const T* recurrent = nullptr;
  const T* h0 = nullptr;
  T* H = nullptr;
  Bits* residual_max = nullptr;
  unsigned int* evaluations = nullptr;  // adaptive only
  std::int64_t batch = 0, time = 0, channels = 0, window = 0;
  int iterations = 0;  // K; the cap when adaptive
  T omega = T(1);
  bool adaptive = false;
  int min_iterations = 0;  // adaptive: the minimum K
  double stop_atol = 0.0;  // adaptive: residual_atol
};

// The largest window launch_windowed_newton takes for CellMath in T (the block shapes whose
// shared memory holds the cell's per-lane state): 1024 for the cells of 1 × 1 and 2 × 2
// elements in f32 and f64; 0 (every window refused) for sLSTM's 4 × 4, which is not
// instantiated (its solve starts from a Picard guess the kernel does not run).
template <class CellMath, class T>
std::int64_t windowed_newton_max_window();

template <class CellMath, class T>
cudaError_t launch_windowed_newton(const WindowedNewtonArgs<T>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
