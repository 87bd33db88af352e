// launch_scan_dense (kernels/scan_dense.hpp): the three-phase dense scan, forward or reverse (the
// sweeps walk the reversed time axis and stage J_{t+1} transposed; the carry phase is the same).
//
// Thread geometry of every phase: blockDim = (n, Cy), thread (e, y) owns entry e of one column
// vector (a column of A, of B, or a row chain's δ); Cy = min(columns, 256 / n) columns per block,
// columns beyond one block go to further blocks (column tiles). A matrix-vector step is
// out[e] = drive[e] + Σ_k M[e][k] v[k] with v in shared memory (double-buffered), so each step is
// one barrier-separated stage per block. J_t is staged row-padded (stride n + 1) so the threads
// of a column, reading J_t[e][k] for one k, hit distinct banks.
//
// Workspace: [chunk_restart: K bytes][aggregates: (b, g, chunk) × (n + rows) columns × n], the
// column c < n of an aggregate being column c of A, column n + i the chunk's δ for row i from a
// zero carry (B), overwritten by phase 2 with the carry entering the chunk.
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device_util.cuh"
#include "pararnn/kernels/scan_dense.hpp"

namespace pararnn::kernels {
namespace {

using std::int64_t;

constexpr int kMaxThreads = 256;

struct DenseGeometry {
  int64_t chains = 0;   // batch · groups
  int64_t n_chunks = 0; // K
  int64_t chunk = 0;    // L
  int64_t columns = 0;  // n + rows (aggregate columns)
  int cy = 0;           // columns per block of the launch
  int64_t tiles = 0;    // column tiles per (chain, chunk) or per chain
};

__device__ __forceinline__ bool restart_at(const std::uint8_t* head, int64_t t) {
  return t == 0 || (head != nullptr && head[t] != 0);
}

template <class T>
__device__ __forceinline__ T* shared_values() {
  extern __shared__ __align__(16) unsigned char dense_scan_smem[];
  return reinterpret_cast<T*>(dense_scan_smem);
}

// Phases 1 (kApply = false) and 3 (kApply = true): one block per (chain, chunk, column tile)
// sweeps the chunk's steps. Phase 1 columns: c < n → column c of A (starts at e_c, no drive),
// c ≥ n → B for row c − n (starts at 0, driven by r); phase 3 columns: row c (starts at the
// carry, driven by r, δ_t written every step).
template <class T, bool kApply, bool kReverse>
__global__ void __launch_bounds__(kMaxThreads)
    dense_sweep_kernel(DenseScanArgs<T> a, DenseGeometry g, T* aggregates,
                       std::uint8_t* chunk_restart) {
  const int n = static_cast<int>(a.n);
  const int e = static_cast<int>(threadIdx.x);
  const int y = static_cast<int>(threadIdx.y);
  const int threads = n * static_cast<int>(blockDim.y);
  const int tid = y * n + e;
  const int64_t item = static_cast<int64_t>(blockIdx.x) / g.tiles;  // chain · K + chunk
  const int64_t tile = static_cast<int64_t>(blockIdx.x) - item * g.tiles;
  const int64_t chain = item / g.n_chunks;                          // b · groups + group
  const int64_t k = item - chain * g.n_chunks;
  const int64_t b = chain / a.groups;
  const int64_t group = chain - b * a.groups;
  const int64_t c = tile * g.cy + y;
  const bool active = c < (kApply ? a.rows : g.columns);
  const bool is_a_column = !kApply && c < n;
  const int64_t row = kApply ? c : c - n;
  const bool driven = active && !is_a_column;

  T* J_s = shared_values<T>();            // [n][n + 1]
  T* V_s = J_s + n * (n + 1);             // [2][cy][n]
  const int stride_v = static_cast<int>(blockDim.y) * n;

  const T* J_chain = a.jac + chain * a.time * a.n * a.n;
  T* r_chain = driven ? a.delta + b * a.r_batch + group * a.r_group + row * a.r_row : nullptr;
  T* aggregate = aggregates + item * g.columns * a.n;

  T start = T(0);
  if (kApply) {
    if (active) start = aggregate[(a.n + row) * a.n + e];
  } else if (is_a_column) {
    start = e == c ? T(1) : T(0);
  }
  V_s[y * n + e] = start;

  const int64_t begin = k * g.chunk;
  const int64_t end = begin + g.chunk < a.time ? begin + g.chunk : a.time;
  bool any_restart = false;
  int p = 0;
  for (int64_t step = begin; step < end; ++step) {
    // Forward: step t couples through J_t. Reverse: t = T−1−step couples through J_{t+1}ᵀ,
    // cut at the last step and before a head.
    const int64_t t = kReverse ? a.time - 1 - step : step;
    const bool restart = kReverse ? (t + 1 >= a.time || (a.head != nullptr && a.head[t + 1] != 0))
                                  : restart_at(a.head, t);
    any_restart = any_restart || restart;
    if (!restart) {
      const T* J_t = J_chain + (kReverse ? t + 1 : t) * a.n * a.n;
      for (int q = tid; q < n * n; q += threads) {
        if (kReverse) {
          J_s[(q % n) * (n + 1) + q / n] = J_t[q];  // staged transposed
        } else {
          J_s[(q / n) * (n + 1) + q % n] = J_t[q];
        }
      }
    }
    __syncthreads();
    if (active) {
      T acc = driven ? r_chain[t * a.r_time + e] : T(0);
      if (!restart) {
        const T* J_row = J_s + e * (n + 1);
        const T* v = V_s + p * stride_v + y * n;
        for (int q = 0; q < n; ++q) acc += J_row[q] * v[q];
      }
      V_s[(p ^ 1) * stride_v + y * n + e] = acc;
      if (kApply) r_chain[t * a.r_time + e] = acc;
    }
    p ^= 1;
    __syncthreads();
  }
  if (!kApply) {
    if (active) aggregate[c * a.n + e] = V_s[p * stride_v + y * n + e];
    if (chain == 0 && tile == 0 && tid == 0) chunk_restart[k] = any_restart ? 1 : 0;
  }
}

// Phase 2: one block per (chain, row tile) walks the chunks: carry_{k+1} = A_k carry_k + B_k
// (B_k alone after a restart inside chunk k); carry_k replaces B_k in the workspace.
template <class T>
__global__ void __launch_bounds__(kMaxThreads)
    dense_carry_kernel(DenseScanArgs<T> a, DenseGeometry g, T* aggregates,
                       const std::uint8_t* chunk_restart) {
  const int n = static_cast<int>(a.n);
  const int e = static_cast<int>(threadIdx.x);
  const int y = static_cast<int>(threadIdx.y);
  const int64_t chain = static_cast<int64_t>(blockIdx.x) / g.tiles;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) - chain * g.tiles;
  const int64_t row = tile * g.cy + y;
  const bool active = row < a.rows;
  T* V_s = shared_values<T>();  // [2][cy][n]
  const int stride_v = static_cast<int>(blockDim.y) * n;
  V_s[y * n + e] = T(0);
  __syncthreads();
  int p = 0;
  for (int64_t k = 0; k < g.n_chunks; ++k) {
    T* aggregate = aggregates + (chain * g.n_chunks + k) * g.columns * a.n;
    if (active) {
      T* slot = aggregate + (a.n + row) * a.n + e;
      const T* v = V_s + p * stride_v + y * n;
      T acc = *slot;
      *slot = v[e];
      if (chunk_restart[k] == 0)
        for (int q = 0; q < n; ++q) acc += aggregate[q * a.n + e] * v[q];  // A[e][q]
      V_s[(p ^ 1) * stride_v + y * n + e] = acc;
    }
    p ^= 1;
    __syncthreads();
  }
}

bool aligned_to(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

int columns_per_block(int64_t n, int64_t columns) {
  const int64_t most = kMaxThreads / n;
  return static_cast<int>(columns < most ? columns : most);
}

struct DenseLayout {
  std::size_t aggregates = 0;  // byte offset of the aggregates
  std::size_t total = 0;
};

template <class T>
DenseLayout dense_layout(const DenseScanArgs<T>& a, int64_t chunk) {
  const int64_t n_chunks = (a.time + chunk - 1) / chunk;
  DenseLayout l;
  l.aggregates = detail::align_up(static_cast<std::size_t>(n_chunks), kWorkspaceAlignment);
  const std::size_t values = static_cast<std::size_t>(a.batch * a.groups * n_chunks) *
                             static_cast<std::size_t>((a.n + a.rows) * a.n);
  l.total = detail::align_up(l.aggregates + values * sizeof(T), kWorkspaceAlignment);
  return l;
}

template <class T>
bool shape_is_valid(const DenseScanArgs<T>& a) {
  return a.batch >= 0 && a.groups >= 0 && a.rows >= 0 && a.time >= 0 && a.n >= 0 &&
         a.chunk_length >= 0;
}

template <class T>
bool is_empty(const DenseScanArgs<T>& a) {
  return a.batch == 0 || a.groups == 0 || a.rows == 0 || a.time == 0;
}

template <class T>
int64_t chunk_of(const DenseScanArgs<T>& a) {
  return a.chunk_length > 0 ? a.chunk_length : dense_scan_default_chunk(a.n);
}

}  // namespace

template <class T>
std::size_t scan_dense_workspace_bytes(const DenseScanArgs<T>& a) {
  if (!shape_is_valid(a) || is_empty(a) || a.n < 1 || a.n > kDenseScanMaxN) return 0;
  return dense_layout(a, chunk_of(a)).total;
}

template <class T>
cudaError_t launch_scan_dense(const DenseScanArgs<T>& a, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
  if (!shape_is_valid(a)) return cudaErrorInvalidValue;
  if (is_empty(a)) return cudaSuccess;
  if (a.n < 1 || a.n > kDenseScanMaxN) return cudaErrorInvalidValue;
  if (a.jac == nullptr || a.delta == nullptr) return cudaErrorInvalidValue;
  if (workspace == nullptr || !aligned_to(workspace, 16)) return cudaErrorInvalidValue;
  const int64_t chunk = chunk_of(a);
  const DenseLayout l = dense_layout(a, chunk);
  if (workspace_bytes < l.total) return cudaErrorInvalidValue;

  DenseGeometry g;
  g.chains = a.batch * a.groups;
  g.chunk = chunk;
  g.n_chunks = (a.time + chunk - 1) / chunk;
  g.columns = a.n + a.rows;
  auto* base = static_cast<unsigned char*>(workspace);
  auto* chunk_restart = reinterpret_cast<std::uint8_t*>(base);
  T* aggregates = reinterpret_cast<T*>(base + l.aggregates);
  const unsigned n = static_cast<unsigned>(a.n);
  const std::size_t j_bytes = static_cast<std::size_t>(a.n * (a.n + 1)) * sizeof(T);

  // Phase 1: aggregates of every (chain, chunk).
  DenseGeometry g1 = g;
  g1.cy = columns_per_block(a.n, g.columns);
  g1.tiles = (g.columns + g1.cy - 1) / g1.cy;
  // Phases 2 and 3: the row chains.
  DenseGeometry g3 = g;
  g3.cy = columns_per_block(a.n, a.rows);
  g3.tiles = (a.rows + g3.cy - 1) / g3.cy;
  const int64_t blocks1 = g.chains * g.n_chunks * g1.tiles;
  const int64_t blocks2 = g.chains * g3.tiles;
  const int64_t blocks3 = g.chains * g.n_chunks * g3.tiles;
  if (blocks1 > INT_MAX || blocks3 > INT_MAX) return cudaErrorInvalidValue;

  const std::size_t v1_bytes = 2 * static_cast<std::size_t>(g1.cy) * n * sizeof(T);
  const std::size_t v3_bytes = 2 * static_cast<std::size_t>(g3.cy) * n * sizeof(T);
  const auto sweep = [&](auto apply, const DenseGeometry& geometry, int64_t blocks, std::size_t v_bytes) {
    constexpr bool kApply = decltype(apply)::value;
    const dim3 grid(static_cast<unsigned>(blocks)), block(n, static_cast<unsigned>(geometry.cy));
    if (a.reverse) {
      dense_sweep_kernel<T, kApply, true><<<grid, block, j_bytes + v_bytes, stream>>>(a, geometry, aggregates,
                                                                                    chunk_restart);
    } else {
      dense_sweep_kernel<T, kApply, false><<<grid, block, j_bytes + v_bytes, stream>>>(a, geometry, aggregates,
                                                                                     chunk_restart);
    }
  };
  sweep(std::false_type{}, g1, blocks1, v1_bytes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  dense_carry_kernel<T><<<static_cast<unsigned>(blocks2), dim3(n, static_cast<unsigned>(g3.cy)),
                          v3_bytes, stream>>>(a, g3, aggregates, chunk_restart);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  sweep(std::true_type{}, g3, blocks3, v3_bytes);
  return cudaGetLastError();
}

template std::size_t scan_dense_workspace_bytes<float>(const DenseScanArgs<float>&);
template std::size_t scan_dense_workspace_bytes<double>(const DenseScanArgs<double>&);
template cudaError_t launch_scan_dense<float>(const DenseScanArgs<float>&, void*, std::size_t,
                                              cudaStream_t);
template cudaError_t launch_scan_dense<double>(const DenseScanArgs<double>&, void*, std::size_t,
                                               cudaStream_t);

}  // namespace pararnn::kernels
