// The parameter and input cotangents of the implicit adjoint on the GPU (CONTRACT §1, the
// backward of training), every (b, t, c) in parallel, in double whatever the storage (the CPU
// backward's precision: long chains sum cotangents whose contributions cancel):
//   h_prev = h0 row (or zeros) at t = 0 and at heads, else H[b, t−1];
//   CellMath::vjp(rec[c], wx[b, t, :, c], h_prev, μ[b, t, :, c]) →
//     d_wx[b, t, g, c]                         (written, in OutT: the forward's compute type),
//     d_h0[row, s, c] = ∂/∂h_prev at heads     (written when d_h0 is given; row = h0_row[t] or b),
//     d_rec_partials[b][chunk][k][c]           (Σ over the chunk's steps of ∂/∂rec_k, k < R).
// μ is the adjoint trajectory: μ_t = g_t + J_{t+1}ᵀ μ_{t+1}, 0-coupled across segment ends —
// launch_scan_affine with reverse = true on J at H* (cell_residual.hpp) yields it.
//
// Layouts are those of kernels/sequential.hpp (wx [b][t][g·D + c], recurrent [k][c] with the
// constant rows after the R clamped ones, h0 [row][s][c], H and μ [b][t][s][c]); the partials
// are [b][chunk][k][c] with chunk = t / steps_per_partial and
// vjp_partial_chunks(time) = ceil(T / kVjpStepsPerPartial) chunks.
//
// Guarantees: deterministic (every partial is one thread's fixed-order sum); never allocates;
// returns cudaErrorInvalidValue for null required arrays or negative sizes, else the launch's
// error. Example:
//   CellVjpArgs<float> a{.wx = d_wx64, .recurrent = d_rec64, .H = d_H64, .mu = d_mu,
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

template <class OutT>
struct CellVjpArgs {
  const double* wx = nullptr;
  const double* recurrent = nullptr;
  const double* h0 = nullptr;              // optional
  const std::int64_t* h0_row = nullptr;    // optional (packed)
  const std::uint8_t* head = nullptr;      // optional (packed)
  const double* H = nullptr;               // H*
  const double* mu = nullptr;              // the adjoint trajectory
  OutT* d_wx = nullptr;
  double* d_h0 = nullptr;                  // optional
  double* d_rec_partials = nullptr;
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t channels = 0;
};

// Instantiated for the cell maths of kHasNewtonKernels × OutT ∈ {float, double}.
template <class CellMath, class OutT>
cudaError_t launch_cell_vjp(const CellVjpArgs<OutT>& args, cudaStream_t stream);

// dst[i] = src[i] for i < n, float to double (exact). Never allocates.
cudaError_t launch_widen(const float* src, double* dst, std::int64_t n, cudaStream_t stream);

}  // namespace pararnn::kernels
