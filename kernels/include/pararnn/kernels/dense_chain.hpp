// What the dense-chain kernels (dense_residual.hpp, dense_sequential.hpp) read: the inputs of
// dense-Jacobian cells (ParaHopfield, ParaGRU and ParaSLSTM mix='head', ParaSLSTM mix='dense')
// in the CPU dense backend's layouts (solver/src/cpu/dense.cpp), and where a kernel writes
// a chain's state. Host-compilable; device code in src/dense_chain.cuh.
//
// A chain is a batch row or a (batch row, head): chain = b · chains_per_row + q, N = n state
// values (all slots of its channels). Step t of chain (b, q) runs the production math
//   DenseMath::step(n, params + q · params_size(n), gates, gate_stride, h_prev, h_new, jac, work)
// with gates = wx + (b·T + t)·width + (kSquareGates ? 0 : q · slot_width) and gate_stride =
// kSquareGates ? n² : d_h. The state entering a step at t = 0 and at every head is h0's row
// (h0_row[t] when given, else b) gathered through offsets: element i of chain q is
// h0[row · state_row + offsets[q · n + i]] (offsets[q·n + i] = Cell::chain_element_offset(q, i));
// zeros without h0. The dense kernels support n ≤ kDenseKernelMaxN (their per-thread arrays).
//
// Output addressing (DenseOutputLayout): element i of chain (b, q) at step t goes to
//   out[b · batch_stride + q · chain_stride + t · time_stride + (offsets ? offsets[q·n + i] : i)]
// dense_chain_major_layout: the Newton solver's [chain][t][n]; dense_trajectory_layout: the
// trajectory [b][t][slot][d_h]. launch_dense_relayout moves a state between two such layouts on
// the device (the solver's chain-major H into the trajectory, a cotangent the other way). Example:
//   DenseChainInputs<float> in{.wx = d_wx, .params = d_params, .offsets = d_offsets,
//                              .batch = 4, .time = 1024, .n = 16, .chains_per_row = 4,
//                              .width = 3 * 64, .slot_width = 16, .d_h = 64, .state_row = 64};
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

// The largest chain width the dense residual and sequential kernels accept.
inline constexpr std::int64_t kDenseKernelMaxN = 32;

template <class ComputeT>
struct DenseChainInputs {
  const ComputeT* wx = nullptr;          // [b][t][width], W_x x + b
  const ComputeT* params = nullptr;      // [q][params_size(n)], clamped (App. C.1)
  const ComputeT* h0 = nullptr;          // optional, [row][state_row]
  const std::int64_t* h0_row = nullptr;  // optional, [t]: h0 row of the segment starting at t
  const std::uint8_t* head = nullptr;    // optional, [t]: 1 where a packed segment starts
  const std::int64_t* offsets = nullptr; // [q · n + i]; required with h0 or a trajectory output
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t n = 0;                    // chain width N
  std::int64_t chains_per_row = 1;
  std::int64_t width = 0;                // gate width of one (b, t) row of wx
  std::int64_t slot_width = 0;           // Cell::chain_slot_width()
  std::int64_t d_h = 0;
  std::int64_t state_row = 0;            // slots · d_h
};

struct DenseOutputLayout {
  std::int64_t batch_stride = 0;
  std::int64_t chain_stride = 0;
  std::int64_t time_stride = 0;
  const std::int64_t* offsets = nullptr;  // device [q · n + i], or null: element i at + i
};

// [chain][t][n], chain = b · chains_per_row + q.
template <class ComputeT>
constexpr DenseOutputLayout dense_chain_major_layout(const DenseChainInputs<ComputeT>& in) {
  return {.batch_stride = in.chains_per_row * in.time * in.n,
          .chain_stride = in.time * in.n,
          .time_stride = in.n,
          .offsets = nullptr};
}

// [b][t][slot][d_h] through in.offsets.
template <class ComputeT>
constexpr DenseOutputLayout dense_trajectory_layout(const DenseChainInputs<ComputeT>& in) {
  return {.batch_stride = in.time * in.state_row,
          .chain_stride = 0,
          .time_stride = in.state_row,
          .offsets = in.offsets};
}

// Copies every element (b, q, t, i) (b < batch, q < chains_per_row, t < time, i < n) from `src`
// addressed by `from` to `dst` addressed by `to` (the addressing above); what `to` does not
// address is left alone. `src` and `dst` must not overlap. Never allocates; deterministic (a
// permutation, no arithmetic). Instantiated for float and double. cudaErrorInvalidValue for a
// negative size, or a null array with a non-empty problem. Example (the Newton solver's H into a trajectory-shaped buffer):
//   launch_dense_relayout(d_H, dense_chain_major_layout(in), d_traj, dense_trajectory_layout(in),
//                         in.batch, in.chains_per_row, in.time, in.n, stream);
template <class T>
cudaError_t launch_dense_relayout(const T* src, DenseOutputLayout from, T* dst, DenseOutputLayout to,
                                  std::int64_t batch, std::int64_t chains_per_row, std::int64_t time,
                                  std::int64_t n, cudaStream_t stream);

}  // namespace pararnn::kernels
