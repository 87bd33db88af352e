// launch_cell_adjoint_jacobian, launch_cell_vjp and launch_widen (kernels/cell_vjp.hpp). The
// Jacobian: a block of channels by rows (b·T + t) striding over rows, c fastest (the same
// CellMath::step as launch_cell_residual's, in the adjoint's type A). The VJP: one thread per
// (b, chunk, c), c fastest so that loads and stores are coalesced along channels; the thread
// walks its chunk's steps in order, accumulating its recurrent (and input bias) partial sums in
// registers and, where asked, splitting each d_wx value into bf16 terms as it stores it. Every
// input is read in its compute type T and widened in registers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/newton_cells.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kVjpThreads = 128;
constexpr int kJacobianThreads = 256;
constexpr int64_t kJacobianBlocks = 2048;  // a full H100 or H200 twice over (8 blocks of 256 per SM)

// The Jacobian's thread geometry: a block is `ctile` channels (a power of two, 32 to 256, the
// smallest not below min(D, 256)) by kJacobianThreads / ctile rows (b·T + t); blocks stride over
// rows. A thread keeps its channel's recurrent weights in registers and steps (b, t) by adding the
// stride's quotient and remainder, so no element pays a 64-bit division (the flat grid-stride
// loop it replaces divided three times per element and was bound by them: 2.1 ms at S1, bf16).
int jacobian_channel_tile(std::int64_t channels) {
  int tile = 32;
  while (tile < kJacobianThreads && tile < channels) tile *= 2;
  return tile;
}

template <class CellMath, class T, class A>
__global__ void __launch_bounds__(kJacobianThreads) cell_adjoint_jacobian_kernel(CellAdjointJacobianArgs<T, A> a,
                                                                                 int ctile) {
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int RC = CellMath::kRecurrent + CellMath::kConstants;
  using W = A;  // the arithmetic's type: the adjoint's storage type (cell_vjp.hpp)
  const int64_t D = a.channels;
  const int rows_per_block = kJacobianThreads / ctile;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * ctile + static_cast<int>(threadIdx.x) % ctile;
  int64_t bt = static_cast<int64_t>(blockIdx.y) * rows_per_block + static_cast<int>(threadIdx.x) / ctile;
  const int64_t rows = a.batch * a.time;
  if (c >= D || bt >= rows) return;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * rows_per_block;
  const int64_t stride_b = stride / a.time;
  const int64_t stride_t = stride - stride_b * a.time;
  int64_t b = bt / a.time;
  int64_t t = bt - b * a.time;
  W rec[RC];
#pragma unroll
  for (int k = 0; k < RC; ++k) rec[k] = static_cast<W>(a.recurrent[k * D + c]);
  for (; bt < rows; bt += stride) {
    W wx[G], h_prev[S], h_new[S], jac[S * S];
#pragma unroll
    for (int g = 0; g < G; ++g) wx[g] = static_cast<W>(a.wx[bt * G * D + g * D + c]);
    if (t == 0 || (a.head != nullptr && a.head[t] != 0)) {
      const int64_t row = a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = a.h0 != nullptr ? static_cast<W>(a.h0[(row * S + s) * D + c]) : W(0);
    } else {
#pragma unroll
      for (int s = 0; s < S; ++s) h_prev[s] = static_cast<W>(a.H[((bt - 1) * S + s) * D + c]);
    }
    CellMath::step(rec, wx, h_prev, h_new, jac);
#pragma unroll
    for (int q = 0; q < S * S; ++q) a.jac[(bt * S * S + q) * D + c] = static_cast<A>(jac[q]);
#pragma unroll
    for (int s = 0; s < S; ++s) a.mu[(bt * S + s) * D + c] = static_cast<A>(a.grad_H[(bt * S + s) * D + c]);
    b += stride_b;
    t += stride_t;
    if (t >= a.time) {
      t -= a.time;
      ++b;
    }
  }
}

template <class CellMath, class T, class A>
__global__ void __launch_bounds__(kVjpThreads) cell_vjp_kernel(CellVjpArgs<T, A> a) {
  constexpr int S = CellMath::kSlots;
  constexpr int G = CellMath::kGates;
  constexpr int R = CellMath::kRecurrent;
  constexpr int RC = R + CellMath::kConstants;
  const int64_t D = a.channels;
  const int64_t chunks = (a.time + kVjpStepsPerPartial - 1) / kVjpStepsPerPartial;  // vjp_partial_chunks
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.batch * chunks * D) return;
  const int64_t bk = i / D;  // b · chunks + chunk
  const int64_t c = i - bk * D;
  const int64_t b = bk / chunks;
  const int64_t chunk = bk - b * chunks;
  using W = A;  // the arithmetic's type: the adjoint's storage type (cell_vjp.hpp)
  W rec[RC];
  double acc[R];  // the recurrent partial sums stay double whatever W
  double acc_wx[G];  // the input biases' partial sums (used where d_wx_partials is given)
#pragma unroll
  for (int k = 0; k < RC; ++k) rec[k] = static_cast<W>(a.recurrent[k * D + c]);
#pragma unroll
  for (int k = 0; k < R; ++k) acc[k] = 0.0;
#pragma unroll
  for (int g = 0; g < G; ++g) acc_wx[g] = 0.0;
  auto* const terms = static_cast<__nv_bfloat16*>(a.d_wx_bf16);
  const int64_t t_end = (chunk + 1) * kVjpStepsPerPartial < a.time ? (chunk + 1) * kVjpStepsPerPartial : a.time;
  // The step's inputs are loaded one step ahead (the next step's loads are in flight while this
  // step computes and stores), the same values in the same arithmetic.
  W wx_next[G], hp_next[S], cot_next[S];
  const auto load_step = [&](int64_t t, W (&wx)[G], W (&hp)[S], W (&cot)[S]) {
    const int64_t bt = b * a.time + t;
    const bool head = t == 0 || (a.head != nullptr && a.head[t] != 0);
    const int64_t row = head && a.h0_row != nullptr ? a.h0_row[t] : b;
#pragma unroll
    for (int g = 0; g < G; ++g) wx[g] = static_cast<W>(a.wx[bt * G * D + g * D + c]);
#pragma unroll
    for (int s = 0; s < S; ++s) {
      hp[s] = head ? (a.h0 != nullptr ? static_cast<W>(a.h0[(row * S + s) * D + c]) : W(0))
                   : static_cast<W>(a.H[((bt - 1) * S + s) * D + c]);
      cot[s] = static_cast<W>(a.mu[(bt * S + s) * D + c]);
    }
  };
  if (chunk * kVjpStepsPerPartial < t_end) load_step(chunk * kVjpStepsPerPartial, wx_next, hp_next, cot_next);
  for (int64_t t = chunk * kVjpStepsPerPartial; t < t_end; ++t) {
    const int64_t bt = b * a.time + t;
    const bool head = t == 0 || (a.head != nullptr && a.head[t] != 0);
    const int64_t row = head && a.h0_row != nullptr ? a.h0_row[t] : b;
    W wx[G], hp[S], cot[S], d_rec[RC], d_wx[G], d_hp[S];
#pragma unroll
    for (int g = 0; g < G; ++g) wx[g] = wx_next[g];
#pragma unroll
    for (int s = 0; s < S; ++s) {
      hp[s] = hp_next[s];
      cot[s] = cot_next[s];
    }
    if (t + 1 < t_end) load_step(t + 1, wx_next, hp_next, cot_next);
#pragma unroll
    for (int k = 0; k < RC; ++k) d_rec[k] = W(0);
    CellMath::vjp(rec, wx, hp, cot, d_rec, d_wx, d_hp);
#pragma unroll
    for (int k = 0; k < R; ++k) acc[k] += static_cast<double>(d_rec[k]);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const T value = static_cast<T>(d_wx[g]);
      const int64_t at = bt * G * D + g * D + c;
      if (a.d_wx != nullptr) a.d_wx[at] = value;
      acc_wx[g] += static_cast<double>(value);
      if constexpr (std::is_same_v<T, float>) {
        if (terms != nullptr) {  // launch_bf16_split's arithmetic, element for element
          float rest = value;
          const bool finite = isfinite(rest);
          for (int k = 0; k < a.bf16_terms; ++k) {
            const __nv_bfloat16 term = __float2bfloat16_rn(rest);
            terms[k * a.bf16_plane + at] = term;
            rest = finite ? __fsub_rn(rest, __bfloat162float(term)) : 0.0f;
          }
        }
      }
    }
    if (head && a.d_h0 != nullptr) {
#pragma unroll
      for (int s = 0; s < S; ++s) a.d_h0[(row * S + s) * D + c] = static_cast<double>(d_hp[s]);
    }
  }
#pragma unroll
  for (int k = 0; k < R; ++k) a.d_rec_partials[(bk * R + k) * D + c] = acc[k];
  if (a.d_wx_partials != nullptr) {
#pragma unroll
    for (int g = 0; g < G; ++g) a.d_wx_partials[(bk * G + g) * D + c] = acc_wx[g];
  }
}

__global__ void widen_kernel(const float* src, double* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<double>(src[i]);
}

}  // namespace

template <class CellMath, class T, class A>
cudaError_t launch_cell_adjoint_jacobian(const CellAdjointJacobianArgs<T, A>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  const int64_t n = a.batch * a.time * a.channels;
  if (n == 0) return cudaSuccess;
  if (a.wx == nullptr || a.recurrent == nullptr || a.H == nullptr || a.grad_H == nullptr || a.jac == nullptr ||
      a.mu == nullptr)
    return cudaErrorInvalidValue;
  const int ctile = jacobian_channel_tile(a.channels);
  const int64_t rows_per_block = kJacobianThreads / ctile;
  const int64_t channel_blocks = (a.channels + ctile - 1) / ctile;
  if (channel_blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t row_blocks = (a.batch * a.time + rows_per_block - 1) / rows_per_block;
  // About kJacobianBlocks blocks in all (never more than 65535 rows of them); the rest strides.
  const int64_t row_cap = std::max<int64_t>(1, std::min<int64_t>(65535, kJacobianBlocks / channel_blocks));
  const dim3 grid(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(std::min(row_blocks, row_cap)));
  cell_adjoint_jacobian_kernel<CellMath, T, A><<<grid, kJacobianThreads, 0, stream>>>(a, ctile);
  return cudaGetLastError();
}

template <class CellMath, class T, class A>
cudaError_t launch_cell_vjp(const CellVjpArgs<T, A>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  const int64_t threads = a.batch * vjp_partial_chunks(a.time) * a.channels;
  if (threads == 0) return cudaSuccess;
  if (a.wx == nullptr || a.recurrent == nullptr || a.H == nullptr || a.mu == nullptr ||
      (a.d_wx == nullptr && a.d_wx_bf16 == nullptr) || a.d_rec_partials == nullptr)
    return cudaErrorInvalidValue;
  if (a.d_wx_bf16 != nullptr &&
      (!std::is_same_v<T, float> || a.bf16_terms < 1 || a.bf16_terms > 3 ||
       a.bf16_plane < a.batch * a.time * CellMath::kGates * a.channels))
    return cudaErrorInvalidValue;
  const int64_t blocks = (threads + kVjpThreads - 1) / kVjpThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  cell_vjp_kernel<CellMath, T, A><<<static_cast<unsigned>(blocks), kVjpThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_widen(const float* src, double* dst, std::int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const int64_t wanted = (n + 255) / 256;
  widen_kernel<<<static_cast<unsigned>(wanted < 4096 ? wanted : 4096), 256, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_CELL_VJP(CELL)                                                                          \
  template cudaError_t launch_cell_adjoint_jacobian<CELL, float>(const CellAdjointJacobianArgs<float>&, cudaStream_t);  \
  template cudaError_t launch_cell_adjoint_jacobian<CELL, double>(const CellAdjointJacobianArgs<double>&, cudaStream_t); \
  template cudaError_t launch_cell_vjp<CELL, float>(const CellVjpArgs<float>&, cudaStream_t);                       \
  template cudaError_t launch_cell_vjp<CELL, double>(const CellVjpArgs<double>&, cudaStream_t);                     \
  template cudaError_t launch_cell_adjoint_jacobian<CELL, float, float>(const CellAdjointJacobianArgs<float, float>&,  \
                                                                      cudaStream_t);                                 \
  template cudaError_t launch_cell_vjp<CELL, float, float>(const CellVjpArgs<float, float>&, cudaStream_t);
#define PARARNN_INSTANTIATE_CELL_VJP_CELL(kind, Math, label, min_chains) PARARNN_INSTANTIATE_CELL_VJP(cells::Math)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_CELL_VJP_CELL)
#undef PARARNN_INSTANTIATE_CELL_VJP_CELL
#undef PARARNN_INSTANTIATE_CELL_VJP

}  // namespace pararnn::kernels
