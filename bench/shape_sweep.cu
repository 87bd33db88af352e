// pararnn_bench_shapes: the register shapes of the single-pass scan kernel (kernels/src/scan.cuh,
// SinglePassShape: channels per lane V, steps per thread, warps per block, blocks per SM asked of
// the register allocator), measured at the reference shape S1 (GRU-diag f32, B 8, T 65536,
// d_h 256) for the fused Newton step (from an iterate, and from the guess) and for the plain
// diagonal scan. Each shape's result is checked in the same run against the production launcher
// (launch_newton_step, launch_scan_affine): the difference is the scan's re-association only.
// This is how the production shapes (newton_step.cu StepShape, scan.cuh SinglePassLimits) are
// chosen; docs/cuda.md records the table. The production launch is also timed from the guess and
// with max|F| of its result (the first and the last step of a fixed K = 3 solve). Prints one JSON
// object on stdout.
//
// Method: CUDA events around the launch (flags reset and max|F| zeroing included, as production
// pays them), 3 warm-up runs, median of --runs (default 20); bytes per token-channel: step 20
// (W_x x 12, H 4, H' 4), step from the guess 16, scan 12 (J, r, δ).
//
// The decode kernel's block shapes (decode.cuh DecodeShape<rows, slices>) are measured the same
// way at GRU d 256 f32 for B 1, 8, 64, 256: per step under CUDA-graph replay of 100 in-place
// steps, each shape's first step checked against the production launch_decode_step; the
// precomputed-gates step (launch_decode_gates) is timed beside them and checked against the
// cell's step on the host. Cluster shapes (decode_cluster.cuh) spread a block's slices over
// a thread-block cluster; k-major staging (DecodeShape's kKMajor) changes the loads, not the
// sums, so those candidates must be 0 from production.
//
// The training backward at S1 (kernels/src/cell_adjoint_fused.cuh): the fused adjoint (one
// reverse single-pass scan with J and the VJP computed on the fly) at a few shapes, its μ form
// (the scan with J on the fly writes μ, the production VJP follows) and its float-compute form,
// each checked against the production backward's three launches (J and the seed, the reverse
// f64 scan, the VJP: d_wx and the recurrent sums) run with the three-phase scan as the
// reference, which the single-pass scan production runs is timed and checked against too.
//
// The fused windowed solve (windowed_newton.cuh, production for window_len windows on CUDA:
// windowed_newton.cu picks its shapes from this table) at candidate block shapes, K = 3 per
// window, each checked against the sequential kernel in the run.
//
// Usage: pararnn_bench_shapes [--runs 20] [--only decode|backward|windowed]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decode.cuh"
#include "cell_adjoint_fused.cuh"
#include "decode_cluster.cuh"
#include "windowed_newton.cuh"
#include "newton_step.cuh"
#include "sequential.cuh"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/decode.hpp"
#include "pararnn/kernels/newton_step.hpp"
#include "bench_common.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/sequential.hpp"

namespace {

using namespace pararnn::kernels;
using Gru = pararnn::cells::GruDiagMath;
using pararnn::bench::check;


struct Buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit Buffer(std::size_t n) : bytes(n) {
    if (n > 0) check(cudaMalloc(&p, n), "cudaMalloc");
  }
  ~Buffer() {
    if (p != nullptr) cudaFree(p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

__global__ void fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL + i);
    out[i] = lo + (hi - lo) * (static_cast<float>(h >> 40) * 0x1.0p-24f);
  }
}

void fill(const Buffer& b, std::uint64_t seed, float lo, float hi) {
  fill_uniform<<<1024, 256>>>(b.f(), b.bytes / sizeof(float), seed, lo, hi);
  check(cudaGetLastError(), "fill_uniform");
}

// The median over `runs` after three warm-up launches.
template <class F>
double time_ms(int runs, F&& launch) {
  return pararnn::bench::median_ms(3, runs, std::forward<F>(launch));
}

std::vector<float> download(const Buffer& b) {
  std::vector<float> h(b.bytes / sizeof(float));
  check(cudaMemcpy(h.data(), b.p, b.bytes, cudaMemcpyDeviceToHost), "download");
  return h;
}

double max_abs_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
    if (!(d <= m)) m = d;  // NaN wins
  }
  return m;
}

struct Shape {
  const char* name;
  int lanes, steps, groups, min_blocks, anchor;
  cudaError_t (*step)(const NewtonStepArgs<float>&, void*, std::size_t, cudaStream_t);
  std::size_t (*step_bytes)(std::int64_t, std::int64_t, std::int64_t);
  cudaError_t (*scan)(const ScanArgs<float>&, void*, std::size_t, cudaStream_t);
};

template <int V, int kSteps, int kGroups, int kMinBlocks, int kAnchor = 4>
cudaError_t step_at(const NewtonStepArgs<float>& a, void* w, std::size_t bytes, cudaStream_t s) {
  if (cudaError_t e = cudaMemsetAsync(a.max_abs_residual, 0, sizeof(float), s); e != cudaSuccess) return e;
  return detail::run_newton_step<Gru, float, V, detail::SinglePassShape<kSteps, kGroups, kMinBlocks, kAnchor>>(a, w, bytes, s);
}
template <int V, int kSteps, int kGroups, int kMinBlocks, int kAnchor = 4>
std::size_t step_bytes_at(std::int64_t b, std::int64_t t, std::int64_t c) {
  return detail::newton_step_shape_bytes<Gru, float, V, detail::SinglePassShape<kSteps, kGroups, kMinBlocks>>(b, t, c);
}
template <int V, int kSteps, int kGroups, int kMinBlocks, int kAnchor = 4>
cudaError_t scan_at(const ScanArgs<float>& a, void* w, std::size_t bytes, cudaStream_t s) {
  using Sh = detail::SinglePassShape<kSteps, kGroups, kMinBlocks, kAnchor>;
  return detail::run_single_pass<1, float, V, false, Sh>(
      detail::BufferSource<1, float, V, false>{a.jac, a.delta, a.time, a.channels}, a.head, a.batch, a.time,
      a.channels, static_cast<std::int64_t>(kSteps) * kGroups, w, bytes, s);
}

#define PARARNN_SHAPE(V, ST, GR, MB, W)                                                                  \
  Shape{"v" #V "_s" #ST "_g" #GR "_b" #MB "_a" #W, V, ST, GR, MB, W, &step_at<V, ST, GR, MB, W>,               \
        &step_bytes_at<V, ST, GR, MB, W>, &scan_at<V, ST, GR, MB, W>}

// Measured 2026-12-01 (CHANGELOG.md): v2_s4_g16_b2 fastest of 12 for the step; the plain
// scan's own shape (v4_s8_g8_b1) fastest for the scan. Here the look-back anchor spacing of the
// fixed association (scan.cuh) is swept at both shapes (2026-12-02: 4 is the fastest for the step),
// and at chunks of 128 and 256 steps (fewer anchors in the chain per sequence). Since the run's
// iterate moved to shared memory (2026-12-02, the step at 25 % occupancy without spills), also
// 128-step chunks with more warps per SM: two 512-thread blocks (V 2), or 1024-thread blocks.
const Shape kShapes[] = {
    PARARNN_SHAPE(2, 4, 16, 2, 2),  PARARNN_SHAPE(2, 4, 16, 2, 4),  PARARNN_SHAPE(2, 4, 16, 2, 8),
    PARARNN_SHAPE(4, 8, 8, 1, 4),   PARARNN_SHAPE(4, 8, 8, 1, 8),   PARARNN_SHAPE(2, 8, 16, 1, 4),
    PARARNN_SHAPE(2, 8, 16, 1, 8),  PARARNN_SHAPE(4, 8, 16, 1, 2),  PARARNN_SHAPE(4, 8, 16, 1, 4),
    PARARNN_SHAPE(4, 8, 16, 1, 8),  PARARNN_SHAPE(4, 8, 32, 1, 4),  PARARNN_SHAPE(4, 8, 32, 1, 8),
    PARARNN_SHAPE(2, 8, 16, 2, 2),  PARARNN_SHAPE(2, 4, 32, 1, 2),  PARARNN_SHAPE(4, 4, 32, 1, 2),
};

// kHeads: the kernel's packed-input form (a head flag loaded per step), here on input without
// heads: what packing support costs the loop. kPicard: the per-step branch of sLSTM's Picard
// passes left in (the general instantiation has both; S1's production launch has neither).
template <int kPrefetch, bool kHeads, bool kPicard = kHeads>
cudaError_t sequential_at(const SequentialArgs<float>& a, cudaStream_t s) {
  const std::int64_t blocks = (a.batch * a.channels + detail::kSequentialThreads - 1) / detail::kSequentialThreads;
  detail::sequential_kernel<Gru, float, kPrefetch, kHeads, kPicard>
      <<<static_cast<unsigned>(blocks), detail::kSequentialThreads, 0, s>>>(a);
  return cudaGetLastError();
}
struct Prefetch {
  int distance;
  bool heads, picard;
  cudaError_t (*run)(const SequentialArgs<float>&, cudaStream_t);
};
const Prefetch kPrefetches[] = {{4, false, false, &sequential_at<4, false>},
                                {8, false, false, &sequential_at<8, false>},
                                {16, false, false, &sequential_at<16, false>},
                                {24, false, false, &sequential_at<24, false>},
                                {32, false, false, &sequential_at<32, false>},
                                {24, false, true, &sequential_at<24, false, true>},
                                {24, true, true, &sequential_at<24, true>}};

// --- decode -------------------------------------------------------------------------------

// ranks 1: decode.cuh's block; ranks > 1: decode_cluster.cuh, the slices over a cluster of
// that many blocks (the same sums as ranks 1 at equal slices and chunk).
// k_major: x staged [k][row] (DecodeShape's kKMajor: one 16-byte load per 4 rows of a column).
// chunk: x columns staged at a time (DecodeShape's kChunk; the sums do not depend on it).
struct DecodeCandidate {
  int rows, slices, ranks;
  cudaError_t (*run)(const DecodeArgs<float>&, cudaStream_t);
  bool k_major = false;
  int chunk = 0;  // 0: the shape's default (128 columns at every shape here)
};
template <int R, int W, bool K = false, int C = 0>
cudaError_t decode_at(const DecodeArgs<float>& a, cudaStream_t s) {
  return detail::run_decode_step<Gru, float, detail::DecodeShape<R, W, K, C>>(a, s);
}
template <int R, int W, int Q, bool K = false>
cudaError_t decode_cluster_at(const DecodeArgs<float>& a, cudaStream_t s) {
  return detail::run_decode_cluster<Gru, float, detail::DecodeClusterShape<R, W, Q, K>>(a, s);
}
const DecodeCandidate kDecodeShapes[] = {
    {1, 32, 1, &decode_at<1, 32>},  {2, 32, 1, &decode_at<2, 32>},  {4, 32, 1, &decode_at<4, 32>},
    {1, 16, 1, &decode_at<1, 16>},  {2, 16, 1, &decode_at<2, 16>},  {4, 16, 1, &decode_at<4, 16>},
    {8, 16, 1, &decode_at<8, 16>},  {8, 8, 1, &decode_at<8, 8>},    {16, 8, 1, &decode_at<16, 8>},
    {16, 16, 1, &decode_at<16, 16>}, {32, 4, 1, &decode_at<32, 4>}, {32, 8, 1, &decode_at<32, 8>},
    {1, 16, 8, &decode_cluster_at<1, 16, 8>},   {1, 16, 16, &decode_cluster_at<1, 16, 16>},
    {4, 16, 4, &decode_cluster_at<4, 16, 4>},   {4, 16, 8, &decode_cluster_at<4, 16, 8>},
    {4, 16, 16, &decode_cluster_at<4, 16, 16>}, {16, 16, 4, &decode_cluster_at<16, 16, 4>},
    {16, 16, 8, &decode_cluster_at<16, 16, 8>}, {32, 16, 8, &decode_cluster_at<32, 16, 8>},
    {32, 16, 16, &decode_cluster_at<32, 16, 16>},
    {2, 16, 1, &decode_at<2, 16, true>, true},  {4, 16, 1, &decode_at<4, 16, true>, true},
    {8, 16, 1, &decode_at<8, 16, true>, true},  {16, 16, 1, &decode_at<16, 16, true>, true},
    {32, 8, 1, &decode_at<32, 8, true>, true},  {4, 16, 4, &decode_cluster_at<4, 16, 4, true>, true},
    {16, 16, 4, &decode_cluster_at<16, 16, 4, true>, true},
    // One chunk of all 256 columns (d_in here): one x staging and one barrier instead of two.
    {2, 16, 1, &decode_at<2, 16, true, 256>, true, 256},  {4, 16, 1, &decode_at<4, 16, true, 256>, true, 256},
    {8, 16, 1, &decode_at<8, 16, true, 256>, true, 256},  {16, 16, 1, &decode_at<16, 16, true, 256>, true, 256}};

// Microseconds per step of `launch` (one in-place step) captured 100 times in a graph and replayed.
template <class F>
double graph_us_per_step(int runs, cudaStream_t stream, F&& launch) {
  return pararnn::bench::graph_us_per_step(stream, 100, 3, runs, [&] { check(launch(stream), "decode step"); });
}

void decode_section(int runs) {
  const std::int64_t D = 256, d_in = 256, G = 3;
  Buffer weight_t(d_in * G * D * sizeof(float)), bias(G * D * sizeof(float)), values(G * D * sizeof(float));
  fill(weight_t, 11, -0.0625f, 0.0625f);
  fill(bias, 12, -0.5f, 0.5f);
  fill(values, 13, -0.9f, 0.9f);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("  \"decode\": {\"cell\": \"gru\", \"dtype\": \"f32\", \"d_h\": %lld, \"d_in\": %lld, "
              "\"steps_per_graph\": 100, \"small_batch\": %lld, \"rows\": [\n",
              static_cast<long long>(D), static_cast<long long>(d_in), static_cast<long long>(kDecodeSmallBatch));
  bool first_row = true;
  for (std::int64_t B : {1, 8, 64, 256}) {
    Buffer x(B * d_in * sizeof(float)), state(B * D * sizeof(float)), out(B * D * sizeof(float)),
        gates(B * G * D * sizeof(float));
    fill(x, 20 + static_cast<std::uint64_t>(B), -1.0f, 1.0f);
    fill(state, 30 + static_cast<std::uint64_t>(B), -1.0f, 1.0f);
    fill(gates, 40 + static_cast<std::uint64_t>(B), -2.0f, 2.0f);
    check(cudaDeviceSynchronize(), "fill");
    const DecodeArgs<float> from_state{.weight_t = weight_t.f(), .bias = bias.f(), .values = values.f(),
                                       .state = state.f(), .x = x.f(), .out = out.f(), .batch = B,
                                       .channels = D, .d_in = d_in, .affine_inputs = d_in};
    DecodeArgs<float> in_place = from_state;
    in_place.state = out.f();
    check(launch_decode_step<Gru, float>(from_state, stream), "production decode");
    check(cudaStreamSynchronize(stream), "production decode");
    const std::vector<float> ref = download(out);
    const double prod_us = graph_us_per_step(runs, stream, [&](cudaStream_t s) {
      return launch_decode_step<Gru, float>(in_place, s);
    });
    // The gates form, checked against the cell's step on the host from the same gates.
    const DecodeGatesArgs<float> gates_from_state{.gates = gates.f(), .values = values.f(), .state = state.f(),
                                                  .out = out.f(), .batch = B, .channels = D};
    check(launch_decode_gates<Gru, float>(gates_from_state, stream), "decode from gates");
    check(cudaStreamSynchronize(stream), "decode from gates");
    const std::vector<float> got_gates = download(out), h_gates = download(gates), h_values = download(values),
                             h_state = download(state);
    std::vector<float> want_gates(got_gates.size());
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < D; ++c) {
        float wx[3], rec[3], h_prev[1] = {h_state[static_cast<std::size_t>(b * D + c)]}, h_new[1];
        for (int g = 0; g < 3; ++g) {
          wx[g] = h_gates[static_cast<std::size_t>((b * G + g) * D + c)];
          rec[g] = h_values[static_cast<std::size_t>(g * D + c)];
        }
        Gru::step(rec, wx, h_prev, h_new, static_cast<float*>(nullptr));
        want_gates[static_cast<std::size_t>(b * D + c)] = h_new[0];
      }
    const double gates_err = max_abs_diff(got_gates, want_gates);
    DecodeGatesArgs<float> gates_in_place = gates_from_state;
    gates_in_place.state = out.f();
    const double gates_us = graph_us_per_step(runs, stream, [&](cudaStream_t s) {
      return launch_decode_gates<Gru, float>(gates_in_place, s);
    });
    std::printf("%s    {\"batch\": %lld, \"production_us\": %.3f, \"gates_us\": %.3f, "
                "\"gates_max_abs_vs_host_step\": %.3e, \"shapes\": [",
                first_row ? "" : ",\n", static_cast<long long>(B), prod_us, gates_us, gates_err);
    first_row = false;
    bool first = true;
    for (const DecodeCandidate& shape : kDecodeShapes) {
      if (const cudaError_t e = shape.run(from_state, stream); e != cudaSuccess) {
        std::printf("%s{\"rows\": %d, \"slices\": %d, \"ranks\": %d, \"x_layout\": \"%s\", \"chunk\": %d, "
                    "\"launch_error\": \"%s\"}",
                    first ? "" : ", ", shape.rows, shape.slices, shape.ranks, shape.k_major ? "k_major" : "row_major",
                    shape.chunk, cudaGetErrorString(e));
        first = false;
        continue;
      }
      check(cudaStreamSynchronize(stream), "decode shape");
      const double err = max_abs_diff(download(out), ref);
      const double us = graph_us_per_step(runs, stream, [&](cudaStream_t s) { return shape.run(in_place, s); });
      std::printf("%s{\"rows\": %d, \"slices\": %d, \"ranks\": %d, \"x_layout\": \"%s\", \"chunk\": %d, "
                  "\"us\": %.3f, \"max_abs_vs_production\": %.3e}",
                  first ? "" : ", ", shape.rows, shape.slices, shape.ranks, shape.k_major ? "k_major" : "row_major",
                  shape.chunk, us, err);
      first = false;
    }
    std::printf("]}");
  }
  std::printf("\n  ]}");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

// --- the training backward: the fused adjoint against the three launches -----------------

struct BackwardCandidate {
  const char* name;
  const char* form;     // "fused": the VJP in the scan's store; "mu_then_vjp": μ written, then launch_cell_vjp
  const char* compute;  // the type J and the VJP are computed in ("f64": the production backward's)
  int lanes, steps, groups;
  cudaError_t (*run)(const detail::FusedAdjointArgs<float>&, void*, std::size_t, cudaStream_t);
  std::size_t (*bytes)(std::int64_t, std::int64_t, std::int64_t);
};
template <int V, int kSteps, int kGroups, int kAnchor, int kMinBlocks = 1, class C = double>
cudaError_t fused_adjoint_at(const detail::FusedAdjointArgs<float>& a, void* ws, std::size_t bytes, cudaStream_t s) {
  return detail::run_fused_adjoint<Gru, float, V, detail::SinglePassShape<kSteps, kGroups, kMinBlocks, kAnchor>,
                                   /*kVjpInStore=*/true, C>(a, ws, bytes, s);
}
// The μ form: the reverse scan with J computed on the fly writes μ in double (J never written),
// then the production VJP kernel reads it, so d_wx and the partials are the three launches'
// arithmetic and layout up to the scan's association.
template <int V, int kSteps, int kGroups, int kAnchor>
cudaError_t mu_then_vjp_at(const detail::FusedAdjointArgs<float>& a, void* ws, std::size_t bytes, cudaStream_t s) {
  if (const cudaError_t e = detail::run_fused_adjoint<Gru, float, V, detail::SinglePassShape<kSteps, kGroups, 1, kAnchor>,
                                                      /*kVjpInStore=*/false>(a, ws, bytes, s);
      e != cudaSuccess)
    return e;
  const CellVjpArgs<float> v{.wx = a.wx, .recurrent = a.recurrent, .h0 = a.h0, .h0_row = a.h0_row,
                             .head = a.head, .H = a.H, .mu = a.mu, .d_wx = a.d_wx, .d_h0 = a.d_h0,
                             .d_rec_partials = a.d_rec_partials, .batch = a.batch, .time = a.time,
                             .channels = a.channels};
  return launch_cell_vjp<Gru, float>(v, s);
}
template <int V, int kSteps, int kGroups, int kAnchor, int kMinBlocks = 1>
std::size_t fused_adjoint_bytes(std::int64_t b, std::int64_t t, std::int64_t d) {
  return detail::fused_adjoint_workspace_bytes<Gru, float, V,
                                               detail::SinglePassShape<kSteps, kGroups, kMinBlocks, kAnchor>>(b, t, d);
}
// ncu on v1_s8_g16_a2 (2026-12-03): 128 registers at 512 threads, 32.5 M local-memory spill
// requests, 25 % occupancy: the double elements and the cell math in double do not fit. The
// shapes after the first three trade steps per thread and threads per block for registers; the
// μ form takes the VJP out of the scan kernel, the f32 rows compute J and the VJP in float.
const BackwardCandidate kBackwardShapes[] = {
    {"v1_s8_g16_a2", "fused", "f64", 1, 8, 16, &fused_adjoint_at<1, 8, 16, 2>, &fused_adjoint_bytes<1, 8, 16, 2>},
    {"v2_s8_g16_a2", "fused", "f64", 2, 8, 16, &fused_adjoint_at<2, 8, 16, 2>, &fused_adjoint_bytes<2, 8, 16, 2>},
    {"v1_s4_g32_a4", "fused", "f64", 1, 4, 32, &fused_adjoint_at<1, 4, 32, 4>, &fused_adjoint_bytes<1, 4, 32, 4>},
    {"v1_s4_g16_a4", "fused", "f64", 1, 4, 16, &fused_adjoint_at<1, 4, 16, 4>, &fused_adjoint_bytes<1, 4, 16, 4>},
    {"v1_s2_g32_a4", "fused", "f64", 1, 2, 32, &fused_adjoint_at<1, 2, 32, 4>, &fused_adjoint_bytes<1, 2, 32, 4>},
    {"v1_s2_g16_a4", "fused", "f64", 1, 2, 16, &fused_adjoint_at<1, 2, 16, 4>, &fused_adjoint_bytes<1, 2, 16, 4>},
    {"v1_s4_g8_a4_m2", "fused", "f64", 1, 4, 8, &fused_adjoint_at<1, 4, 8, 4, 2>, &fused_adjoint_bytes<1, 4, 8, 4, 2>},
    {"v1_s8_g8_a4_m2", "fused", "f64", 1, 8, 8, &fused_adjoint_at<1, 8, 8, 4, 2>, &fused_adjoint_bytes<1, 8, 8, 4, 2>},
    {"mu_v1_s8_g16_a2", "mu_then_vjp", "f64", 1, 8, 16, &mu_then_vjp_at<1, 8, 16, 2>, &fused_adjoint_bytes<1, 8, 16, 2>},
    {"mu_v2_s8_g16_a2", "mu_then_vjp", "f64", 2, 8, 16, &mu_then_vjp_at<2, 8, 16, 2>, &fused_adjoint_bytes<2, 8, 16, 2>},
    {"mu_v1_s4_g32_a4", "mu_then_vjp", "f64", 1, 4, 32, &mu_then_vjp_at<1, 4, 32, 4>, &fused_adjoint_bytes<1, 4, 32, 4>},
    {"mu_v2_s4_g16_a4", "mu_then_vjp", "f64", 2, 4, 16, &mu_then_vjp_at<2, 4, 16, 4>, &fused_adjoint_bytes<2, 4, 16, 4>},
    {"f32_v1_s8_g16_a2", "fused", "f32", 1, 8, 16, &fused_adjoint_at<1, 8, 16, 2, 1, float>,
     &fused_adjoint_bytes<1, 8, 16, 2>},
    {"f32_v2_s8_g16_a2", "fused", "f32", 2, 8, 16, &fused_adjoint_at<2, 8, 16, 2, 1, float>,
     &fused_adjoint_bytes<2, 8, 16, 2>},
    {"f32_v1_s4_g32_a4", "fused", "f32", 1, 4, 32, &fused_adjoint_at<1, 4, 32, 4, 1, float>,
     &fused_adjoint_bytes<1, 4, 32, 4>},
    {"f32_v1_s4_g16_a4", "fused", "f32", 1, 4, 16, &fused_adjoint_at<1, 4, 16, 4, 1, float>,
     &fused_adjoint_bytes<1, 4, 16, 4>}};

std::vector<double> download_doubles(const Buffer& b) {
  std::vector<double> h(b.bytes / sizeof(double));
  check(cudaMemcpy(h.data(), b.p, b.bytes, cudaMemcpyDeviceToHost), "download");
  return h;
}
// Σ over the rows of [rows][width] partials, in row order.
std::vector<double> sum_rows(const std::vector<double>& partials, std::int64_t width) {
  std::vector<double> out(static_cast<std::size_t>(width), 0.0);
  for (std::size_t i = 0; i < partials.size(); ++i) out[i % static_cast<std::size_t>(width)] += partials[i];
  return out;
}
// max |a − b| over equal-length vectors; NaN where any difference is NaN.
double worst_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    if (std::isnan(d)) return d;
    if (d > worst) worst = d;
  }
  return worst;
}
double max_abs_of(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

void backward_section(int runs) {
  const std::int64_t B = 8, T = 65536, D = 256, G = 3, R = 3;
  const std::size_t n = static_cast<std::size_t>(B * T * D);
  Buffer wx(n * G * sizeof(float)), rec(R * D * sizeof(float)), H(n * sizeof(float)), grad_H(n * sizeof(float)),
      jac(n * sizeof(double)), mu(n * sizeof(double)), d_wx_ref(n * G * sizeof(float)), d_wx(n * G * sizeof(float));
  fill(wx, 61, -2.0f, 2.0f);
  fill(rec, 62, -0.5f, 0.5f);
  fill(H, 63, -1.0f, 1.0f);
  fill(grad_H, 64, -1.0f, 1.0f);
  check(cudaDeviceSynchronize(), "fill");
  const std::int64_t ref_chunks = vjp_partial_chunks(T);
  Buffer partials_ref(static_cast<std::size_t>(B * ref_chunks * R * D) * sizeof(double));
  const ScanArgs<double> scan{.jac = static_cast<double*>(jac.p), .delta = static_cast<double*>(mu.p), .batch = B,
                              .time = T, .channels = D, .reverse = true,
                              .tiling = {.algorithm = ScanAlgorithm::three_phase}};
  Buffer scan_ws(scan_affine_workspace_bytes<1, double>(B, T, D, scan.tiling));
  const CellAdjointJacobianArgs<float> j{.wx = wx.f(), .recurrent = rec.f(), .H = H.f(), .grad_H = grad_H.f(),
                                         .jac = static_cast<double*>(jac.p), .mu = static_cast<double*>(mu.p),
                                         .batch = B, .time = T, .channels = D};
  const CellVjpArgs<float> v{.wx = wx.f(), .recurrent = rec.f(), .H = H.f(), .mu = static_cast<double*>(mu.p),
                             .d_wx = d_wx_ref.f(), .d_rec_partials = static_cast<double*>(partials_ref.p),
                             .batch = B, .time = T, .channels = D};
  // J and the seed, the reverse scan `sc` (workspace ws), the VJP `vj`: the production backward's
  // launches (with the three-phase scan first, the reference every candidate is checked against).
  const auto three_launches_with = [&](const ScanArgs<double>& sc, const Buffer& ws, const CellVjpArgs<float>& vj) {
    check(launch_cell_adjoint_jacobian<Gru, float>(j, nullptr), "J and the seed");
    check(launch_scan_affine<1, double>(sc, ws.p, ws.bytes, nullptr), "reverse f64 scan");
    check(launch_cell_vjp<Gru, float>(vj, nullptr), "VJP");
  };
  const auto three_launches = [&] { three_launches_with(scan, scan_ws, v); };
  three_launches();
  check(cudaDeviceSynchronize(), "three launches");
  const std::vector<float> ref_dwx = download(d_wx_ref);
  const std::vector<double> ref_rec = sum_rows(download_doubles(partials_ref), R * D);
  const double ref_ms = time_ms(runs, three_launches);
  const double dwx_scale = max_abs_of(ref_dwx);
  double rec_scale = 0;
  for (double x : ref_rec) rec_scale = std::max(rec_scale, std::fabs(x));
  // The same three launches with the single-pass reverse scan (production since 2026-12-03,
  // measured faster here than the three-phase scan it replaced), checked against them.
  ScanArgs<double> scan_sp = scan;
  scan_sp.tiling = {.algorithm = ScanAlgorithm::single_pass};
  Buffer scan_sp_ws(scan_affine_workspace_bytes<1, double>(B, T, D, scan_sp.tiling));
  Buffer d_wx_sp(n * G * sizeof(float)), partials_sp(static_cast<std::size_t>(B * ref_chunks * R * D) * sizeof(double));
  CellVjpArgs<float> v_sp = v;
  v_sp.d_wx = d_wx_sp.f();
  v_sp.d_rec_partials = static_cast<double*>(partials_sp.p);
  const auto three_launches_sp = [&] { three_launches_with(scan_sp, scan_sp_ws, v_sp); };
  three_launches_sp();
  check(cudaDeviceSynchronize(), "three launches, single pass");
  const double sp_dwx_err = max_abs_diff(download(d_wx_sp), ref_dwx);
  const double sp_rec_err = worst_diff(sum_rows(download_doubles(partials_sp), R * D), ref_rec);
  const double sp_ms = time_ms(runs, three_launches_sp);
  std::printf(",\n  \"backward\": {\"cell\": \"gru\", \"dtype\": \"f32\", \"batch\": %lld, \"time\": %lld, \"d_h\": %lld, "
              "\"three_launches_ms\": %.4f, \"d_wx_max_abs\": %.4e, \"recurrent_max_abs\": %.4e, "
              "\"three_launches_single_pass_scan\": {\"ms\": %.4f, \"d_wx_max_abs_vs_three_launches\": %.4e, "
              "\"recurrent_max_abs_vs_three_launches\": %.4e}, \"fused\": [",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(D), ref_ms, dwx_scale,
              rec_scale, sp_ms, sp_dwx_err, sp_rec_err);
  bool first = true;
  for (const BackwardCandidate& c : kBackwardShapes) {
    const bool mu_form = std::strcmp(c.form, "mu_then_vjp") == 0;
    const std::int64_t chunk = static_cast<std::int64_t>(c.steps) * c.groups,
                       chunks = mu_form ? ref_chunks : (T + chunk - 1) / chunk;
    Buffer ws(c.bytes(B, T, D)), partials(static_cast<std::size_t>(B * chunks * R * D) * sizeof(double));
    const detail::FusedAdjointArgs<float> a{.wx = wx.f(), .recurrent = rec.f(), .H = H.f(), .grad_H = grad_H.f(),
                                            .d_wx = d_wx.f(), .d_rec_partials = static_cast<double*>(partials.p),
                                            .mu = static_cast<double*>(mu.p), .batch = B, .time = T, .channels = D};
    if (const cudaError_t e = c.run(a, ws.p, ws.bytes, nullptr); e != cudaSuccess) {
      std::printf("%s{\"shape\": \"%s\", \"launch_error\": \"%s\"}", first ? "" : ", ", c.name, cudaGetErrorString(e));
      first = false;
      continue;
    }
    check(cudaDeviceSynchronize(), "fused adjoint");
    const double dwx_err = max_abs_diff(download(d_wx), ref_dwx);
    const double rec_err = worst_diff(sum_rows(download_doubles(partials), R * D), ref_rec);
    const double ms = time_ms(runs, [&] { check(c.run(a, ws.p, ws.bytes, nullptr), "fused adjoint"); });
    // Bytes per token-channel the launches must move: W_x x, H*, grad_H read, d_wx written (f32);
    // the μ form also writes μ (f64) and reads W_x x, H* and μ again in the VJP.
    const double per_tc = mu_form ? sizeof(float) * (G + 1 + 1) + sizeof(double) +
                                        sizeof(float) * (G + 1 + G) + sizeof(double)
                                  : sizeof(float) * (G + 1 + 1 + G);
    const double bytes = static_cast<double>(n) * per_tc;
    std::printf("%s{\"shape\": \"%s\", \"form\": \"%s\", \"compute\": \"%s\", \"lanes\": %d, \"steps\": %d, "
                "\"groups\": %d, \"ms\": %.4f, \"bytes_per_token_channel\": %.0f, \"tb_per_s\": %.4f, "
                "\"d_wx_max_abs_vs_three_launches\": %.4e, \"recurrent_max_abs_vs_three_launches\": %.4e}",
                first ? "" : ", ", c.name, c.form, c.compute, c.lanes, c.steps, c.groups, ms, per_tc,
                bytes / (ms * 1e-3) / 1e12, dwx_err, rec_err);
    first = false;
  }
  std::printf("]}");
}

// --- the fused windowed solve (windowed_newton.cuh): candidate shapes at S1 ----------------

struct WindowedCandidate {
  int channels, warps, steps, min_blocks;
  std::int64_t window;
  cudaError_t (*run)(const WindowedNewtonArgs<float>&, cudaStream_t);
};
template <int C, int W, int L, int M>
cudaError_t windowed_at(const WindowedNewtonArgs<float>& a, cudaStream_t s) {
  return detail::run_windowed_newton<Gru, float, detail::WindowedShape<C, W, L, M>>(a, s);
}
template <int C, int W, int L, int M = 1>
constexpr WindowedCandidate windowed_candidate() {
  return {C, W, L, M, detail::WindowedShape<C, W, L, M>::kWindow, &windowed_at<C, W, L, M>};
}
// 1024-thread blocks of 4 steps first (8 × 32 × 4 and 4 × 32 × 4 are production's, 16 × 32 × 4
// was until 8 × 16 × 4 at min_blocks 2 replaced it), then 512-thread blocks capped at 64
// registers so that two share an SM (min_blocks 2), then the other shapes of earlier sweeps.
const WindowedCandidate kWindowedShapes[] = {
    windowed_candidate<8, 32, 4>(),     windowed_candidate<16, 32, 4>(),    windowed_candidate<4, 32, 4>(),
    windowed_candidate<8, 16, 4, 2>(),  windowed_candidate<4, 16, 4, 2>(),  windowed_candidate<4, 16, 8, 2>(),
    windowed_candidate<8, 16, 8, 2>(),  windowed_candidate<8, 32, 8>(),
    windowed_candidate<16, 32, 8>(),    windowed_candidate<4, 32, 8>(),     windowed_candidate<8, 16, 8>(),
    windowed_candidate<16, 16, 8>(),    windowed_candidate<4, 16, 8>()};

// A JSON number, or null where the value is not finite (a broken candidate must not break the
// file).
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

// K = 3 per window at each shape's largest window, timed, its result against the sequential
// kernel's (the recurrence itself in f32: K = 3's truncation and rounding together, a figure, not
// a test); and every shape again at one common window (256 steps, the smallest largest window
// here) against the first shape there: equal algorithms, so only the association differs (the
// check that no shape is broken). H is poisoned (NaN) before every run that is compared.
void windowed_section(int runs) {
  const std::int64_t B = 8, T = 65536, D = 256, G = 3;
  const std::size_t n = static_cast<std::size_t>(B * T * D);
  Buffer wx(n * G * sizeof(float)), rec(G * D * sizeof(float)), H_seq(n * sizeof(float)), H(n * sizeof(float));
  fill(wx, 71, -2.0f, 2.0f);
  fill(rec, 72, -0.9f, 0.9f);
  check(cudaDeviceSynchronize(), "fill");
  const SequentialArgs<float> seq{.wx = wx.f(), .recurrent = rec.f(), .H = H_seq.f(), .batch = B, .time = T,
                                  .channels = D};
  check(launch_sequential_apply<Gru, float>(seq, nullptr), "sequential kernel");
  check(cudaDeviceSynchronize(), "sequential kernel");
  const std::vector<float> ref = download(H_seq);
  std::printf(",\n  \"windowed\": {\"cell\": \"gru\", \"dtype\": \"f32\", \"batch\": %lld, \"time\": %lld, "
              "\"d_h\": %lld, \"iterations\": 3, \"shapes\": [",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(D));
  constexpr std::int64_t kCommonWindow = 256;
  std::vector<float> common_ref;  // the first shape's result at the common window
  bool first = true;
  for (const WindowedCandidate& c : kWindowedShapes) {
    const WindowedNewtonArgs<float> a{.wx = wx.f(), .recurrent = rec.f(), .H = H.f(), .batch = B,
                                              .time = T, .channels = D, .window = c.window, .iterations = 3};
    std::printf("%s{\"channels\": %d, \"warps\": %d, \"steps\": %d, \"min_blocks\": %d, \"window\": %lld",
                first ? "" : ", ", c.channels, c.warps, c.steps, c.min_blocks, static_cast<long long>(c.window));
    first = false;
    // Launches `args` on poisoned H and returns the error of the launch or of the run.
    const auto run_checked = [&](const WindowedNewtonArgs<float>& args) {
      check(cudaMemset(H.p, 0xff, H.bytes), "poison H");
      if (const cudaError_t e = c.run(args, nullptr); e != cudaSuccess) return e;
      return cudaDeviceSynchronize();
    };
    if (const cudaError_t e = run_checked(a); e != cudaSuccess) {
      std::printf(", \"error\": \"%s\"}", cudaGetErrorString(e));
      continue;
    }
    const double err = max_abs_diff(download(H), ref);
    const double ms = time_ms(runs, [&] { check(c.run(a, nullptr), "windowed solve"); });
    WindowedNewtonArgs<float> common = a;
    common.window = kCommonWindow;
    double common_err = std::nan("");
    if (run_checked(common) == cudaSuccess) {
      std::vector<float> got = download(H);
      if (common_ref.empty()) common_ref = got;
      common_err = max_abs_diff(got, common_ref);
    }
    // Bytes it must move: W_x x read once, H written once (f32).
    const double bytes = static_cast<double>(n) * sizeof(float) * (G + 1);
    std::printf(", \"ms\": %.4f, \"tb_per_s\": %.4f, \"max_abs_vs_sequential\": %s, "
                "\"window_256_max_abs_vs_first_shape\": %s}",
                ms, bytes / (ms * 1e-3) / 1e12, json_number(err).c_str(), json_number(common_err).c_str());
  }
  std::printf("]}");
}

// One section alone (--only): the file's head and context, `after_context` (the separator the
// section expects before it), the section, the file's end.
int only_section(int argc, char** argv, int runs, const char* after_context, void (*section)(int)) {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  const std::string date = pararnn::bench::run_context(argc, argv, 0)["date"].get<std::string>();
  std::printf("{\n  \"schema_version\": 1,\n  \"benchmark\": \"pararnn_bench_shapes\",\n");
  std::printf("  \"context\": {\"gpu\": \"%s\", \"sm_count\": %d, \"runs\": %d, \"date\": \"%s\"}%s", prop.name,
              prop.multiProcessorCount, runs, date.c_str(), after_context);
  section(runs);
  std::printf("\n}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pararnn::bench::program_name = "pararnn_bench_shapes";
  int runs = 20;
  bool decode_only = false, backward_only = false, windowed_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "decode") == 0) {
      decode_only = true;
      ++i;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "backward") == 0) {
      backward_only = true;
      ++i;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc && std::strcmp(argv[i + 1], "windowed") == 0) {
      windowed_only = true;
      ++i;
    } else {
      std::fprintf(stderr, "usage: pararnn_bench_shapes [--runs N] [--only decode|backward|windowed]\n");
      return 2;
    }
  }
  if (decode_only) return only_section(argc, argv, runs, ",\n", &decode_section);
  if (windowed_only) return only_section(argc, argv, runs, "", &windowed_section);
  if (backward_only) return only_section(argc, argv, runs, "", &backward_section);
  const std::int64_t B = 8, T = 65536, D = 256, G = 3;
  const std::size_t n = static_cast<std::size_t>(B * T * D);
  Buffer wx(n * G * sizeof(float)), rec(G * D * sizeof(float)), H(n * sizeof(float)), H_ref(n * sizeof(float)),
      H_out(n * sizeof(float)), max_abs(2 * sizeof(float)), jac(n * sizeof(float)), r(n * sizeof(float)),
      delta(n * sizeof(float)), delta_ref(n * sizeof(float));
  fill(wx, 1, -2.0f, 2.0f);
  fill(rec, 2, -0.9f, 0.9f);
  fill(H, 3, -1.0f, 1.0f);
  fill(jac, 4, 0.0f, 0.99f);
  fill(r, 5, -1.0f, 1.0f);
  check(cudaDeviceSynchronize(), "fill");

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  int clock_khz = 0, mem_clock_khz = 0;
  (void)cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  (void)cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, 0);

  // Production references, same inputs.
  std::size_t prod_bytes = newton_step_workspace_bytes<Gru, float>(B, T, D);
  std::size_t ws_bytes = std::max(prod_bytes, scan_affine_workspace_bytes<1, float>(B, T, D));
  for (const Shape& s : kShapes) ws_bytes = std::max(ws_bytes, s.step_bytes(B, T, D));
  Buffer ws(ws_bytes);
  const NewtonStepArgs<float> step_args{.wx = wx.f(), .recurrent = rec.f(), .H_in = H.f(), .H_out = H_ref.f(),
                                        .max_abs_residual = max_abs.f(), .batch = B, .time = T, .channels = D};
  NewtonStepArgs<float> guess_args = step_args;
  guess_args.H_in = nullptr;
  guess_args.from_guess = true;
  check(launch_newton_step<Gru, float>(step_args, ws.p, ws.bytes, nullptr), "production step");
  const std::vector<float> ref_step = download(H_ref);
  check(launch_newton_step<Gru, float>(guess_args, ws.p, ws.bytes, nullptr), "production step from the guess");
  const std::vector<float> ref_guess = download(H_ref);
  auto scan_reset = [&] {
    check(cudaMemcpyAsync(delta.p, r.p, r.bytes, cudaMemcpyDeviceToDevice), "reset");
  };
  scan_reset();
  const ScanArgs<float> prod_scan{.jac = jac.f(), .delta = delta.f(), .batch = B, .time = T, .channels = D};
  check(launch_scan_affine<1, float>(prod_scan, ws.p, ws.bytes, nullptr), "production scan");
  check(cudaDeviceSynchronize(), "production scan");
  const std::vector<float> ref_scan = download(delta);

  const double tokens = static_cast<double>(n);
  std::printf("{\n  \"schema_version\": 1,\n  \"benchmark\": \"pararnn_bench_shapes\",\n");
  const std::string date = pararnn::bench::run_context(argc, argv, 0)["date"].get<std::string>();
  std::printf("  \"context\": {\"gpu\": \"%s\", \"sm_count\": %d, \"sm_clock_mhz\": %d, \"memory_clock_mhz\": %d, "
              "\"runs\": %d, \"date\": \"%s\"},\n",
              prop.name, prop.multiProcessorCount, clock_khz / 1000, mem_clock_khz / 1000, runs, date.c_str());
  std::printf("  \"shape\": {\"cell\": \"gru\", \"dtype\": \"f32\", \"batch\": %lld, \"time\": %lld, \"d_h\": %lld},\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(D));
  const double prod_step_ms = time_ms(runs, [&] {
    check(launch_newton_step<Gru, float>(step_args, ws.p, ws.bytes, nullptr), "step");
  });
  const double prod_scan_ms = time_ms(runs, [&] {
    check(launch_scan_affine<1, float>(prod_scan, ws.p, ws.bytes, nullptr), "scan");
  });
  // The other two steps of a fixed K = 3 solve: the first (from the guess) and the last (with
  // max|F| of its result, NewtonStepArgs::max_abs_result).
  const double prod_guess_ms = time_ms(runs, [&] {
    check(launch_newton_step<Gru, float>(guess_args, ws.p, ws.bytes, nullptr), "guess step");
  });
  NewtonStepArgs<float> result_args = step_args;
  result_args.max_abs_result = max_abs.f() + 1;
  const double prod_result_ms = time_ms(runs, [&] {
    check(launch_newton_step<Gru, float>(result_args, ws.p, ws.bytes, nullptr), "step with its result's residual");
  });
  std::printf("  \"production\": {\"step_ms\": %.5f, \"step_tb_per_s\": %.4f, \"scan_ms\": %.5f, \"scan_tb_per_s\": %.4f, "
              "\"guess_step_ms\": %.5f, \"step_with_result_residual_ms\": %.5f},\n",
              prod_step_ms, tokens * 20 / (prod_step_ms * 1e-3) / 1e12, prod_scan_ms,
              tokens * 12 / (prod_scan_ms * 1e-3) / 1e12, prod_guess_ms, prod_result_ms);
  std::printf("  \"shapes\": [\n");
  bool first = true;
  for (const Shape& s : kShapes) {
    if (D % s.lanes != 0) continue;
    NewtonStepArgs<float> a = step_args;
    a.H_out = H_out.f();
    // A shape the launcher refuses (its block's resources) is reported, not fatal.
    if (const cudaError_t e = s.step(a, ws.p, ws.bytes, nullptr); e != cudaSuccess) {
      std::printf("%s    {\"name\": \"%s\", \"lanes\": %d, \"steps\": %d, \"groups\": %d, \"min_blocks\": %d, "
                  "\"anchor\": %d, \"launch_error\": \"%s\"}",
                  first ? "" : ",\n", s.name, s.lanes, s.steps, s.groups, s.min_blocks, s.anchor, cudaGetErrorString(e));
      first = false;
      continue;
    }
    check(cudaDeviceSynchronize(), s.name);
    const std::vector<float> first_step = download(H_out);
    const double step_err = max_abs_diff(first_step, ref_step);
    const double step_ms = time_ms(runs, [&] { check(s.step(a, ws.p, ws.bytes, nullptr), s.name); });
    // The fixed look-back association: the step after the timed runs repeats the first bit for bit.
    const std::vector<float> last_step = download(H_out);
    const bool step_repeats =
        std::memcmp(first_step.data(), last_step.data(), first_step.size() * sizeof(float)) == 0;
    NewtonStepArgs<float> g = guess_args;
    g.H_out = H_out.f();
    check(s.step(g, ws.p, ws.bytes, nullptr), s.name);
    check(cudaDeviceSynchronize(), s.name);
    const double guess_err = max_abs_diff(download(H_out), ref_guess);
    const double guess_ms = time_ms(runs, [&] { check(s.step(g, ws.p, ws.bytes, nullptr), s.name); });
    scan_reset();
    check(s.scan(prod_scan, ws.p, ws.bytes, nullptr), s.name);
    check(cudaDeviceSynchronize(), s.name);
    const double scan_err = max_abs_diff(download(delta), ref_scan);
    // Timed in place on δ (values grow bounded: |J| < 1); the result above is the checked one.
    const double scan_ms = time_ms(runs, [&] { check(s.scan(prod_scan, ws.p, ws.bytes, nullptr), s.name); });
    std::printf("%s    {\"name\": \"%s\", \"lanes\": %d, \"steps\": %d, \"groups\": %d, \"min_blocks\": %d, "
                "\"anchor\": %d, \"step_ms\": %.5f, \"step_tb_per_s\": %.4f, \"step_max_abs_vs_production\": %.3e, "
                "\"step_repeats_bitwise\": %s, "
                "\"guess_step_ms\": %.5f, \"guess_step_tb_per_s\": %.4f, \"guess_max_abs_vs_production\": %.3e, "
                "\"scan_ms\": %.5f, \"scan_tb_per_s\": %.4f, \"scan_max_abs_vs_production\": %.3e}",
                first ? "" : ",\n", s.name, s.lanes, s.steps, s.groups, s.min_blocks, s.anchor, step_ms,
                tokens * 20 / (step_ms * 1e-3) / 1e12, step_err, step_repeats ? "true" : "false", guess_ms, tokens * 16 / (guess_ms * 1e-3) / 1e12,
                guess_err, scan_ms, tokens * 12 / (scan_ms * 1e-3) / 1e12, scan_err);
    first = false;
  }
  std::printf("\n  ],\n");

  // The sequential kernel's prefetch distance (bitwise: the same arithmetic in the same order).
  const SequentialArgs<float> seq{.wx = wx.f(), .recurrent = rec.f(), .H = H_ref.f(), .batch = B, .time = T, .channels = D};
  check(launch_sequential_apply<Gru, float>(seq, nullptr), "production sequential");
  check(cudaDeviceSynchronize(), "production sequential");
  const std::vector<float> ref_seq = download(H_ref);
  const double prod_seq_ms = time_ms(runs, [&] { check(launch_sequential_apply<Gru, float>(seq, nullptr), "seq"); });
  std::printf("  \"sequential_production_ms\": %.4f,\n  \"sequential\": [\n", prod_seq_ms);
  first = true;
  for (const Prefetch& p : kPrefetches) {
    SequentialArgs<float> a = seq;
    a.H = H_out.f();
    check(p.run(a, nullptr), "sequential");
    check(cudaDeviceSynchronize(), "sequential");
    const double err = max_abs_diff(download(H_out), ref_seq);
    const double ms = time_ms(runs, [&] { check(p.run(a, nullptr), "sequential"); });
    std::printf("%s    {\"prefetch\": %d, \"heads\": %s, \"picard\": %s, \"ms\": %.4f, \"max_abs_vs_production\": %.3e}",
                first ? "" : ",\n", p.distance, p.heads ? "true" : "false", p.picard ? "true" : "false", ms, err);
    first = false;
  }
  std::printf("\n  ],\n");
  decode_section(runs);
  backward_section(runs);
  std::printf("\n}\n");
  return 0;
}
