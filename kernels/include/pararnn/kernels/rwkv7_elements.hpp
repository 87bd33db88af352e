// The (G, U) elements of ParaRWKV7's linear recurrence on the GPU (and, at the end, its step
// loop and the backward's per-step VJPs), written where
// launch_scan_dense (kernels/scan_dense.hpp, RWKV-7 addressing) reads them, so that the scan then
// leaves the matrix-state trajectory S in place: the device twin of solver/src/cpu/exact_linear.cpp's
// scan() before its scan_dense calls. One thread per (b, head, t), cells/rwkv7.hpp's math:
//   g = Rwkv7Math::gates(raw of (b, t, head));
//   t ≥ 1:  J_t = Rwkv7Math::transition(g) (= G_tᵀ),  row i of S[b][t][head] = drive_row(g, i);
//   t = 0:  S[b][0][head] = Rwkv7Math::step(g, S0) (r_0 = S0 G_0 + U_0; J_0 is not written,
//           the scan treats it as 0), S0 = h0[b][head] or zeros.
//
// Layout (ComputeT = float or double, D = H·d): wx [b][t][6·D] (W_x x + b, gate-major blocks of D,
// head-major inside), h0 [b][head][d][d] (optional), J [b][head][t][d][d], S [b][t][head][d][d].
// Then, for the scan:
//   DenseScanArgs<T>{.jac = J, .delta = S, .batch = B, .groups = H, .rows = d, .time = T, .n = d,
//                    .r_batch = T·H·d², .r_group = d², .r_row = d, .r_time = H·d²}
// (rwkv7_scan_args fills it). Packing is not supported (RWKV-7 refuses it on the CPU too).
//
// Guarantees: never allocates, needs no workspace; d ≤ kDenseScanMaxN (64); returns
// cudaErrorInvalidValue for negative sizes, null wx, jac or S, or d outside 1 .. 64. Example:
//   Rwkv7ElementArgs<float> a{.wx = d_wx, .h0 = nullptr, .jac = d_J, .S = d_S,
//                             .batch = 2, .time = 4096, .heads = 4, .d = 16};
//   launch_rwkv7_elements<float>(a, stream);
//   launch_scan_dense<float>(rwkv7_scan_args(a), d_ws, scan_dense_workspace_bytes(rwkv7_scan_args(a)), stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/scan_dense.hpp"

namespace pararnn::kernels {

template <class T>
struct Rwkv7ElementArgs {
  const T* wx = nullptr;   // [b][t][6·H·d]
  const T* h0 = nullptr;   // optional, [b][head][d][d]
  T* jac = nullptr;        // [b][head][t][d][d]
  T* S = nullptr;          // [b][t][head][d][d]
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t heads = 0;
  std::int64_t d = 0;
};

// The launch_scan_dense arguments that turn the elements into S (chunk length: the default).
template <class T>
constexpr DenseScanArgs<T> rwkv7_scan_args(const Rwkv7ElementArgs<T>& a) {
  return {.jac = a.jac, .delta = a.S, .head = nullptr, .batch = a.batch, .groups = a.heads,
          .rows = a.d, .time = a.time, .n = a.d, .r_batch = a.time * a.heads * a.d * a.d,
          .r_group = a.d * a.d, .r_row = a.d, .r_time = a.heads * a.d * a.d};
}

// Instantiated for float and double.
template <class T>
cudaError_t launch_rwkv7_elements(const Rwkv7ElementArgs<T>& args, cudaStream_t stream);

// RWKV-7's factorized step loop (sequential_apply): one block per (b, head), one thread per row
// i of S (the rows are independent given the step's gates, which one thread computes into
// shared memory), S_t = step(S_{t−1}) from S0 = h0 (or zeros), every row rounded to StorageT
// after every step and carried rounded, written to S [b][t][head][d][d] in StorageT. StorageT:
// float, double, __half, __nv_bfloat16 (f32 arithmetic for the half types). Returns
// cudaErrorInvalidValue for negative sizes, null wx or S, or d outside 1 .. 64.
template <class StorageT>
struct Rwkv7SequentialArgs {
  const ComputeOf<StorageT>* wx = nullptr;  // [b][t][6·H·d]
  const ComputeOf<StorageT>* h0 = nullptr;  // optional, [b][head][d][d]
  StorageT* S = nullptr;                    // [b][t][head][d][d]
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t heads = 0;
  std::int64_t d = 0;
};

template <class StorageT>
cudaError_t launch_rwkv7_sequential(const Rwkv7SequentialArgs<StorageT>& args, cudaStream_t stream);

// The per-step VJPs of the exact adjoint (training's backward), one thread per (b, t, head), in
// double: Rwkv7Math::vjp at (raw gates of (b, t, head), S_prev, μ_t) with S_prev = S[b][t−1]
// (h0[b][head] or zeros at t = 0), writing d_wx's five blocks w, a, κ, v, k of the head (in OutT;
// the r block is not written) and, at t = 0 when d_h0 is given, ∇h0[b][head] = dS_prev. μ is the
// adjoint trajectory μ_t = g_t + μ_{t+1} G_{t+1}ᵀ: launch_scan_dense with rwkv7_scan_args on the
// cotangent and reverse = true yields it. Layouts as above (μ like S). OutT: float or double.
// Deterministic; never allocates; cudaErrorInvalidValue for negative sizes, null wx, S, mu or
// d_wx, or d outside 1 .. 64.
template <class OutT>
struct Rwkv7VjpArgs {
  const double* wx = nullptr;  // [b][t][6·H·d]
  const double* h0 = nullptr;  // optional, [b][head][d][d]
  const double* S = nullptr;   // [b][t][head][d][d]
  const double* mu = nullptr;  // [b][t][head][d][d]
  OutT* d_wx = nullptr;        // [b][t][6·H·d]
  double* d_h0 = nullptr;      // optional, [b][head][d][d]
  std::int64_t batch = 0;
  std::int64_t time = 0;
  std::int64_t heads = 0;
  std::int64_t d = 0;
};
template <class OutT>
cudaError_t launch_rwkv7_vjp(const Rwkv7VjpArgs<OutT>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
