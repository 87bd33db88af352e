// One fused Newton iteration of a per-channel cell on the device (the fused strategy of the
// per-channel CUDA family, solver/src/cuda/per_channel.cpp): for every step t of the iterate
// H_in, the residual F_t = f(h_prev_t, x_t) − H_in[t] and the Jacobian J_t are computed in
// registers from the cell math (the one definition, cells/), the linear step δ_t = J_t δ_{t−1} +
// F_t is solved by the single-pass scan of kernels/scan.hpp (its decoupled look-back, a restart
// at t = 0 and at every head), and H_out[t] = H_in[t] + ω δ_t is written once. max|F| of H_in
// over the whole problem (NaN wins) is reduced on the device into `max_abs_residual`.
//
// Traffic per token-channel and iteration (f32 GRU-diag): W_x x (G values) and H_in read once,
// H_out written once (20 bytes), against 48 for the residual kernel + scan + axpy sequence; F and
// J never reach memory. A thread keeps the iterate of its run of steps in registers, so only a
// run's first step reads H_in[t−1] again (from cache). Same arithmetic as that sequence
// (the same step, the same monoid), so the result differs from it by the scan's re-association
// only: within τ, not bitwise. H_in and H_out must not overlap. With `from_guess` H_in is not
// read: the iterate is the App. A guess, evaluated on the fly (two cell evaluations per element
// instead of one, no pass of its own), and the result equals the guess pass followed by this
// step on its output up to the same re-association.
//
// Layout (the residual kernel's, kernels/cell_residual.hpp): wx [b][t][g·D + c], recurrent
// [k][c] (clamped entries, then constants), h0 [row][s][c] (optional; zeros), h0_row [t] and
// head [t] for packed input (optional), H [b][t][s][c] in the compute type T (float or double).
// Instantiated for every cell of cells/cell_list.hpp. Example:
//   NewtonStepArgs<float> a{.wx = d_wx, .recurrent = d_rec, .H_in = d_H, .H_out = d_H2,
//                           .max_abs_residual = d_max, .batch = 8, .time = 65536, .channels = 256};
//   std::size_t bytes = newton_step_workspace_bytes<cells::GruDiagMath, float>(8, 65536, 256);
//   cudaError_t e = launch_newton_step<cells::GruDiagMath, float>(a, d_ws, bytes, stream);
#pragma once

#include <cstddef>
#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class T>
struct NewtonStepArgs {
  const T* wx = nullptr;
  const T* recurrent = nullptr;
  const T* h0 = nullptr;
  const std::int64_t* h0_row = nullptr;
  const std::uint8_t* head = nullptr;
  const T* H_in = nullptr;  // null exactly when from_guess
  T* H_out = nullptr;
  T* max_abs_residual = nullptr;  // one device scalar (required): max|F(H_in)|
  // Optional device scalar: max|F(H_out)|, the residual of the result, over every step except
  // the chunk starts t = 0, L, 2L, ... (L = newton_step_chunk); the caller completes it with
  // launch_cell_residual at time_stride L (a pass over 1/L of the steps instead of all).
  T* max_abs_result = nullptr;
  // The iterate entering this iteration is the App. A guess H_t = f(h̃_t, x_t) (h̃ = h0 at heads,
  // else 0), computed in registers: the first iteration without the guess's own pass.
  bool from_guess = false;
  // Optional device flag (a fixed-K loop's state decided on the device, kernels/newton_loop.hpp):
  // when *skip != 0 the launch does nothing past zeroing the maxima (H_out is not written).
  const double* skip = nullptr;
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
  double omega = 1.0;
};

template <class CellMath, class T>
std::size_t newton_step_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels);

// L, the chunk of the launch: the steps max_abs_result leaves out are the multiples of L.
template <class CellMath, class T>
std::int64_t newton_step_chunk();

template <class CellMath, class T>
cudaError_t launch_newton_step(const NewtonStepArgs<T>& args, void* workspace, std::size_t workspace_bytes,
                               cudaStream_t stream);

}  // namespace pararnn::kernels
