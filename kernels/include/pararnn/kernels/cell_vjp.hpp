// The implicit adjoint on the GPU (CONTRACT §1, the backward of training), every (b, t, c) in
// parallel, its arithmetic in the adjoint's type A whatever the compute type T of the inputs:
// double by default (the CPU backward's precision: long chains sum cotangents whose contributions
// cancel), float for A = float (below). The inputs are read in T and converted in registers, so
// no widened copy of W_x x or H* is ever written.
//
// launch_cell_adjoint_jacobian, before the reverse scan:
//   h_prev = h0 row (or zeros) at t = 0 and at heads, else H[b, t−1];
//   jac[b, t, :, :, c] = J of CellMath::step at (rec[c], wx[b, t, :, c], h_prev) in A — for
//     A = double the same arithmetic as launch_cell_residual<CellMath, double>'s J on the inputs
//     widened to double, except where the compiler contracts products into FMAs differently
//     without F (measured: bit for bit for GRU-diag at S1, Titans 1 ulp apart);
//   mu[b, t, s, c] = grad_H[b, t, s, c] widened: the reverse scan's right-hand side, which the
//     scan (launch_scan_affine, reverse = true) turns in place into the adjoint μ.
// launch_cell_vjp, after it:
//   CellMath::vjp(rec[c], wx[b, t, :, c], h_prev, μ[b, t, :, c]) →
//     d_wx[b, t, g, c]                         (written in T: the forward's compute type),
//     d_h0[row, s, c] = ∂/∂h_prev at heads     (written when d_h0 is given; row = h0_row[t] or b),
//     d_rec_partials[b][chunk][k][c]           (Σ over the chunk's steps of ∂/∂rec_k, k < R),
//     d_wx_partials[b][chunk][g][c]            (optional: Σ over the chunk's steps of d_wx as
//                                               written, in double: the input biases' gradients),
//     d_wx_bf16[j][b, t, g, c], j < bf16_terms (optional, T = float only, in place of or beside
//                                               d_wx: d_wx's value split into bf16 terms exactly
//                                               as kernels/bf16_split.hpp splits it, plane
//                                               bf16_plane elements apart: the bf16 GEMMs'
//                                               operand without a separate pass over d_wx).
// μ is the adjoint trajectory: μ_t = g_t + J_{t+1}ᵀ μ_{t+1}, 0-coupled across segment ends.
//
// Layouts are those of kernels/sequential.hpp (wx [b][t][g·D + c], recurrent [k][c] with the
// constant rows after the R clamped ones, h0 [row][s][c], H, grad_H and μ [b][t][s][c], J
// [b][t][out][in][c]); the partials are [b][chunk][k][c] with chunk = t / steps_per_partial and
// vjp_partial_chunks(time) = ceil(T / kVjpStepsPerPartial) chunks.
//
// The adjoint's type A (J and μ in memory, the reverse scan's type, and the arithmetic of J and
// the VJP) is double by default; A = float stores J and μ in float (half the bytes of the two
// largest arrays of a backward) and computes J and the VJP in float (the device's f32
// transcendentals, no f64 units); the recurrent partials and ∇h0 are still summed and written in
// double. The production backward takes it for f16 and bf16 storage, whose gradient τ (atol 2e-2,
// rtol 1e-2) is orders of magnitude above f32's rounding (docs/cuda.md "Training on the device").
//
// Guarantees: deterministic (every partial is one thread's fixed-order sum); never allocates;
// returns cudaErrorInvalidValue for null required arrays (d_wx and d_wx_bf16 both null
// included), negative sizes, d_wx_bf16 with T = double, bf16_terms outside 1 to 3 or bf16_plane
// below batch · time · G · D, else the launch's error. Example:
//   CellAdjointJacobianArgs<float> j{.wx = d_wx, .recurrent = d_rec, .H = d_H, .grad_H = d_g,
//                                    .jac = d_J64, .mu = d_mu64, .batch = 8, .time = 4096,
//                                    .channels = 256};
//   launch_cell_adjoint_jacobian<cells::GruDiagMath, float>(j, stream);
//   ... launch_scan_affine<1, double>({.jac = d_J64, .delta = d_mu64, ..., .reverse = true}, ...);
//   CellVjpArgs<float> a{.wx = d_wx, .recurrent = d_rec, .H = d_H, .mu = d_mu64,
//                        .d_wx = d_dwx, .d_rec_partials = d_part, .batch = 8, .time = 4096,
//                        .channels = 256};
//   cudaError_t e = launch_cell_vjp<cells::GruDiagMath, float>(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

inline constexpr std::int64_t kVjpStepsPerPartial = 128;

constexpr std::int64_t vjp_partial_chunks(std::int64_t time) {
  return (time + kVjpStepsPerPartial - 1) / kVjpStepsPerPartial;
}

template <class T, class A = double>
struct CellAdjointJacobianArgs {
  const T* wx = nullptr;
  const T* recurrent = nullptr;
  const T* h0 = nullptr;                 // optional
  const std::int64_t* h0_row = nullptr;  // optional (packed)
  const std::uint8_t* head = nullptr;    // optional (packed)
  const T* H = nullptr;                  // H*
  const T* grad_H = nullptr;             // the loss's cotangent of H
  A* jac = nullptr;                      // J at H*
  A* mu = nullptr;                       // grad_H widened (the reverse scan's input)
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
};

template <class T, class A = double>
struct CellVjpArgs {
  const T* wx = nullptr;
  const T* recurrent = nullptr;
  const T* h0 = nullptr;                   // optional
  const std::int64_t* h0_row = nullptr;    // optional (packed)
  const std::uint8_t* head = nullptr;      // optional (packed)
  const T* H = nullptr;                    // H*
  const A* mu = nullptr;                   // the adjoint trajectory
  T* d_wx = nullptr;                       // optional where d_wx_bf16 is given
  double* d_h0 = nullptr;                  // optional
  double* d_rec_partials = nullptr;
  double* d_wx_partials = nullptr;         // optional: [b][chunk][g][c]
  void* d_wx_bf16 = nullptr;               // optional (T = float): bf16 terms [bf16_terms][bf16_plane]
  std::int64_t bf16_plane = 0;             // ≥ batch · time · G · D
  int bf16_terms = 2;                      // 1 to 3, as kernels/bf16_split.hpp
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
};

// Both instantiated for the cell maths of kHasNewtonKernels × T ∈ {float, double}.
// Instantiated for (T, A) = (float, double), (double, double) and (float, float).
template <class CellMath, class T, class A = double>
cudaError_t launch_cell_adjoint_jacobian(const CellAdjointJacobianArgs<T, A>& args, cudaStream_t stream);
template <class CellMath, class T, class A = double>
cudaError_t launch_cell_vjp(const CellVjpArgs<T, A>& args, cudaStream_t stream);

// dst[i] = src[i] for i < n, float to double (exact). Never allocates.
cudaError_t launch_widen(const float* src, double* dst, std::int64_t n, cudaStream_t stream);

}  // namespace pararnn::kernels
