// pararnn_bench_targets: the fused-kernel targets pararnn_bench_newton does not time, each
// checked in the same run (PERFORMANCE.md "How to measure"; the summary reads the JSON):
//   P2  S1 (GRU-diag B 8, T 65536, d 256) with bf16 storage: the fused solve, K = 3 and
//       adaptive, its output rounded to bf16 against an f64 sequential loop of the cell on the
//       solve's own W_x x (16 chains);
//   P3  the GPU training step at S1 f32 through the public API: newton_forward_into and
//       newton_backward_into with x, grad_H, H and ∇x on the device (the target's figure), then
//       newton_forward / newton_backward returning host tensors (grad_H on the device, and again
//       on the host); gradients bitwise equal across the three, host clocks;
//   P4  hard weights (unclamped recurrent std 0.7) at S1: adaptive (Newton, the auto rule off)
//       against fixed K = 3, both checked against the CPU's f32 sequential loop;
//   P6  the auto rule (NewtonStrategy::automatic) across B·d ∈ {512 … 131072} at S1's tokens
//       against the faster of the fused solve and the sequential kernel, and the crossover of
//       every per-channel cell at 2048 chains (the rule's thresholds come from it);
//   P8  sLSTM-diag B 8, T 4096, d 256 under the auto rule, f32 and bf16 storage, against the fused
//       solve and the sequential kernel;
//   P10 the peak of device bytes held by the solver (DeviceBuffer counters) during newton_apply
//       on device x, against x plus the output trajectory;
//   P14 newton_apply from host tensors against its transfers (pageable H2D of x, D2H into a new
//       tensor) plus the device time (input GEMM + fused solve) measured in the same run;
//   T   the training step on device tensors through the public API (newton_forward_into and
//       newton_backward_into: x, grad_H, H and ∇x on the device, GEMMs included) at S1 for GRU and
//       LSTM in f32, bf16 and f16 (T1, T2, T3, T4's ours, P9b's forward, P10's training peak):
//       forward, backward and step times, the host<->device bytes of one step, the backend's peak
//       device bytes over the forward and over the step against x + H; checked in the same run:
//       the half-precision forward and parameter gradients against the f32-storage step on the
//       same (widened) inputs;
//   P16 CudaDecoder::step (GRU d 256, W_x x inside) and CudaDecoder::step_gates (W_x x
//       precomputed by decode_gates) per step under CUDA-graph replay, B ∈ {1, 8, 64, 256},
//       each form's first step checked against the host decode_step.
//   TF  T's other families alone.
// Usage: pararnn_bench_targets [--runs 10] [--only P2,P6,T,TF,...]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_inputs.hpp"
#include "cuda/affine.hpp"
#include "cuda/newton_device.hpp"
#include "cuda/runtime.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/solver/decode.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace {

using namespace pararnn;
using bench::check;
using bench::max_abs_difference;
using bench::median;
using bench::median_ms;
using detail::cuda::DeviceBuffer;
namespace cuda = detail::cuda;

constexpr std::uint64_t kSeed = 20260301;
constexpr int kWarmup = 2;

double host_ms(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One per-channel problem on the device: the cell, x, W_x x + b (the backend's own GEMM), the
// clamped recurrent values in the compute type.
struct DeviceCase {
  Cell cell;
  Tensor x;
  DeviceBuffer d_x, wx, rec;
  detail::Layout layout;
  cuda::DeviceProblem problem;

  DeviceCase(const CellOptions& options, DType dtype, std::int64_t B, std::int64_t T, std::uint64_t seed)
      : cell(Cell::initialise(options, dtype, seed)),
        x(bench::uniform_input(B, T, options.d_in, seed + 1, dtype)),
        d_x(x.nbytes()),
        layout{.batch = B, .time = T, .d_h = cell.d_h(), .d_in = options.d_in} {
    check(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice), "upload x");
    wx = cuda::device_input_affine(cell, x_device(), layout);
    const std::vector<double> values = cell.channel_values();
    if (dtype == DType::f64) {
      rec = DeviceBuffer(values.size() * sizeof(double));
      check(cudaMemcpy(rec.get(), values.data(), rec.bytes(), cudaMemcpyHostToDevice), "upload rec");
    } else {
      const std::vector<float> v(values.begin(), values.end());
      rec = DeviceBuffer(v.size() * sizeof(float));
      check(cudaMemcpy(rec.get(), v.data(), rec.bytes(), cudaMemcpyHostToDevice), "upload rec");
    }
    problem = {.wx = wx.get(), .recurrent = rec.get(), .batch = B, .time = T, .channels = cell.d_h()};
  }
  TensorView x_device() const {
    return TensorView(d_x.get(), x.dtype(), x.shape(), {}, Device::cuda, 0);
  }
  std::size_t trajectory_bytes() const {  // compute type (f32 here)
    return static_cast<std::size_t>(layout.batch * layout.time * cell.slots() * cell.d_h()) * sizeof(float);
  }
};

nlohmann::ordered_json stats_json(const NewtonStats& s) {
  return {{"strategy", std::string(solve_strategy_name(s.strategy))}, {"k", s.k.k}, {"iters", s.iters}, {"updates", s.updates},
          {"converged", s.converged}, {"max_residual", s.max_residual}, {"picard_iters", s.picard_iters},
          {"fallback_tiles", s.fallback_tiles}};
}

// A timed Newton solve on a device case: its figures and the trajectory it left in H.
nlohmann::ordered_json timed_solve(const DeviceCase& c, DType storage, const NewtonConfig& config,
                                   cuda::NewtonStrategy strategy, const DeviceBuffer& H, int runs) {
  cuda::NewtonWorkspace ws(c.cell.kind(), storage, c.layout.batch, c.layout.time, c.cell.d_h(), strategy);
  NewtonStats stats;
  const double ms = median_ms(kWarmup, runs, [&] {
    cuda::newton_solve(c.cell.spec(), storage, c.problem, config, H.get(), ws, stats);
  });
  nlohmann::ordered_json out = stats_json(stats);
  out["ms"] = ms;
  return out;
}

// GRU-diag chains against an f64 sequential loop of the cell on the solve's W_x x: max over 16
// chains of |H − h| (H as given, and rounded to `storage` as the API returns it).
struct ChainCheck {
  double compute = 0, stored = 0;
  std::int64_t chains = 0;
};
ChainCheck gru_against_f64_loop(const DeviceCase& c, const std::vector<float>& H, DType storage) {
  ChainCheck out;
  out.chains = bench::walk_gru_chains<double>(
      bench::download(c.wx), bench::download(c.rec), c.layout.batch, c.layout.time, c.cell.d_h(),
      [&](std::size_t i, double h) {
        const float v = H[i];
        const double stored = dispatch_float_dtype(storage, [&]<class StorageT>() {
          return static_cast<double>(round_to_storage<StorageT>(static_cast<double>(v)));
        });
        const double dc = std::fabs(static_cast<double>(v) - h), ds = std::fabs(stored - h);
        out.compute = std::isnan(dc) ? INFINITY : std::max(out.compute, dc);
        out.stored = std::isnan(ds) ? INFINITY : std::max(out.stored, ds);
      });
  return out;
}

// The CPU's f32 sequential loop of GRU-diag on the solve's W_x x, 16 chains: max |H − h|.
double gru_against_f32_loop(const DeviceCase& c, const std::vector<float>& H) {
  double err = 0;
  bench::walk_gru_chains<float>(bench::download(c.wx), bench::download(c.rec), c.layout.batch, c.layout.time,
                                c.cell.d_h(), [&](std::size_t i, double h) {
                                  const double d = std::fabs(static_cast<double>(H[i]) - h);
                                  err = std::isnan(d) ? INFINITY : std::max(err, d);
                                });
  return err;
}

double tau_of(DType dtype, const char* cell) {
  return tolerance_for({.dtype = dtype, .cell = cell, .backend = "cuda"}).atol;
}

const CellOptions kS1Gru{.cell = "gru", .d_in = 256, .d_h = 256};

nlohmann::ordered_json p2_bf16(int runs) {
  DeviceCase c(kS1Gru, DType::bf16, 8, 65536, kSeed);
  DeviceBuffer H(c.trajectory_bytes());
  nlohmann::ordered_json out = {{"shape", "S1 gru bf16 storage (x, W in bf16; W_x x and the iterate in f32)"}};
  out["input_gemm_ms"] = median_ms(kWarmup, runs, [&] { (void)cuda::device_input_affine(c.cell, c.x_device(), c.layout); });
  out["fused_k3_fixed"] = timed_solve(c, DType::bf16, {.max_iters = 3, .residual_atol = std::nullopt},
                                      cuda::NewtonStrategy::fused_step, H, runs);
  const ChainCheck k3 = gru_against_f64_loop(c, bench::download(H), DType::bf16);
  out["fused_adaptive_default"] = timed_solve(c, DType::bf16, {.allow_sequential = false},
                                              cuda::NewtonStrategy::fused_step, H, runs);
  const ChainCheck adaptive = gru_against_f64_loop(c, bench::download(H), DType::bf16);
  out["check_vs_f64_loop"] = {{"chains", k3.chains}, {"reference", "the cell's step in f64 on the solve's W_x x"},
                              {"fused_k3_fixed_bf16_max_abs", k3.stored}, {"fused_k3_fixed_f32_max_abs", k3.compute},
                              {"fused_adaptive_bf16_max_abs", adaptive.stored},
                              {"fused_adaptive_f32_max_abs", adaptive.compute},
                              {"target_max_abs", 3e-3}, {"tau_atol_bf16", tau_of(DType::bf16, "gru")}};
  return out;
}

// FNV-1a over a tensor's bytes, in hex: two builds' gradients compared bit for bit across runs.
std::string bytes_digest(const Tensor& t) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(t.data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

nlohmann::ordered_json p3_training(int runs) {
  DeviceCase c(kS1Gru, DType::f32, 8, 65536, kSeed);
  nlohmann::ordered_json out = {{"shape", "S1 gru f32, public newton_forward + newton_backward from device x (grad_H on the device; also from the host)"},
                                {"clock", "host steady_clock"}};
  const NewtonConfig config{};
  std::vector<double> fwd, bwd, bwd_host_g;
  NewtonForward forward;
  NewtonGradients grads, grads_host_g;
  std::optional<Tensor> grad_H;
  DeviceBuffer grad_H_device;
  for (int i = 0; i < 1 + std::max(1, runs / 3); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    forward = newton_forward(c.cell, c.x_device(), config);
    const double f = host_ms(t0);
    if (!grad_H) {
      const std::vector<double> ones(static_cast<std::size_t>(forward.H.numel()), 1e-3);
      grad_H = Tensor::from_values(DType::f32, forward.H.shape(), ones);
      grad_H_device = DeviceBuffer(grad_H->nbytes());
      check(cudaMemcpy(grad_H_device.get(), grad_H->data(), grad_H->nbytes(), cudaMemcpyHostToDevice), "upload grad_H");
    }
    const TensorView g_device(grad_H_device.get(), DType::f32, grad_H->shape(), {}, Device::cuda, 0);
    t0 = std::chrono::steady_clock::now();
    grads = newton_backward(c.cell, c.x_device(), forward, g_device, config);
    const double b = host_ms(t0);
    t0 = std::chrono::steady_clock::now();
    grads_host_g = newton_backward(c.cell, c.x_device(), forward, *grad_H, config);
    const double bh = host_ms(t0);
    if (i > 0) {
      fwd.push_back(f);
      bwd.push_back(b);
      bwd_host_g.push_back(bh);
    }
  }
  // Device outputs: H and ∇x written into device buffers (nothing of size B·T crosses to the host).
  DeviceBuffer H_device(forward.H.nbytes()), grad_x_device(c.x.nbytes());
  const TensorView H_out(H_device.get(), DType::f32, forward.H.shape(), {}, Device::cuda, 0);
  const TensorView grad_x(grad_x_device.get(), DType::f32, c.x.shape(), {}, Device::cuda, 0);
  std::vector<double> fwd_dev, bwd_dev;
  NewtonForward forward_dev;
  NewtonGradients grads_dev;
  for (int i = 0; i < kWarmup + runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    forward_dev = newton_forward_into(c.cell, c.x_device(), H_out, config);
    const double f = host_ms(t0);
    const TensorView g_device(grad_H_device.get(), DType::f32, grad_H->shape(), {}, Device::cuda, 0);
    t0 = std::chrono::steady_clock::now();
    grads_dev = newton_backward_into(c.cell, c.x_device(), forward_dev, g_device, grad_x, config);
    const double b = host_ms(t0);
    if (i >= kWarmup) {
      fwd_dev.push_back(f);
      bwd_dev.push_back(b);
    }
  }
  bool finite = true, same = grads.parameters.size() == grads_host_g.parameters.size(),
       same_dev = grads.parameters.size() == grads_dev.parameters.size();
  for (const auto& [name, g] : grads.parameters) {
    for (double v : g.to_f64_vector()) finite = finite && std::isfinite(v);
    same = same && grads_host_g.parameters.contains(name) && same_bits(g, grads_host_g.parameters.at(name));
    same_dev = same_dev && grads_dev.parameters.contains(name) && same_bits(g, grads_dev.parameters.at(name));
  }
  same = same && same_bits(grads.x, grads_host_g.x);
  same_dev = same_dev && bench::download(grad_x_device) ==
                             std::vector<float>(grads.x.data_as<float>(), grads.x.data_as<float>() + grads.x.numel());
  same_dev = same_dev && bench::download(H_device) ==
                             std::vector<float>(forward.H.data_as<float>(), forward.H.data_as<float>() + forward.H.numel());
  // The forward's trajectory against the CPU's f32 loop (16 chains).
  const std::vector<float> H(forward.H.data_as<float>(), forward.H.data_as<float>() + forward.H.numel());
  out["forward_device_outputs_ms"] = median(fwd_dev);
  out["backward_device_outputs_ms"] = median(bwd_dev);  // x, grad_H, H and ∇x on the device
  out["forward_ms"] = median(fwd);
  out["backward_ms"] = median(bwd);  // grad_H on the device, host outputs
  out["backward_host_grad_H_ms"] = median(bwd_host_g);
  out["forward_stats"] = stats_json(forward.stats);
  nlohmann::ordered_json digests = {{"x", bytes_digest(grads.x)}, {"H", bytes_digest(forward.H)}};
  for (const auto& [name, g] : grads.parameters) digests[name] = bytes_digest(g);
  out["gradient_digests_fnv1a"] = digests;  // equal across builds iff the bits are
  out["check"] = {{"forward_vs_cpu_f32_loop_max_abs", gru_against_f32_loop(c, H)},
                  {"tau_atol", tau_of(DType::f32, "gru")}, {"parameter_gradients_finite", finite},
                  {"device_grad_H_equals_host_grad_H_bitwise", same},
                  {"device_outputs_equal_host_outputs_bitwise", same_dev}};
  return out;
}

// Largest |a − b| over largest |b| (0 when b is all zeros and a equals it).
double max_relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_f64_vector(), vb = b.to_f64_vector();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double d = std::fabs(va[i] - vb[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// One training step's figures on device tensors of `cell` (x given on the host, copied to the
// device once): forward_into, backward_into; H and the gradients of the last run kept.
struct TrainingRun {
  nlohmann::ordered_json figures;
  Tensor H, grad_x;
  NewtonGradients grads;
};
TrainingRun training_on_device(const Cell& cell, const Tensor& x, int runs) {
  const DType dtype = cell.dtype();
  const std::int64_t B = x.size(0), T = x.size(1);
  const Shape shape = cell.trajectory_shape(B, T);
  DeviceBuffer d_x(x.nbytes()), d_H(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype)),
      d_g(d_H.bytes()), d_dx(x.nbytes());
  check(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice), "upload x");
  const Tensor g = Tensor::from_values(dtype, shape, std::vector<double>(static_cast<std::size_t>(shape_numel(shape)), 1e-3));
  check(cudaMemcpy(d_g.get(), g.data(), g.nbytes(), cudaMemcpyHostToDevice), "upload grad_H");
  const TensorView xv(d_x.get(), dtype, x.shape(), {}, Device::cuda, 0), Hv(d_H.get(), dtype, shape, {}, Device::cuda, 0),
      gv(d_g.get(), dtype, shape, {}, Device::cuda, 0), dxv(d_dx.get(), dtype, x.shape(), {}, Device::cuda, 0);
  const NewtonConfig config{};
  std::vector<double> fwd, bwd, step;
  TrainingRun run;
  NewtonForward forward;
  std::uint64_t moved_to_device = 0, moved_to_host = 0;
  std::size_t forward_peak = 0, step_peak = 0;
  for (int i = 0; i < kWarmup + runs; ++i) {
    check(cudaDeviceSynchronize(), "sync");
    const std::size_t live = detail::cuda::device_memory().live;
    detail::cuda::reset_device_peak();
    const CudaTransferBytes before = cuda_transfer_bytes();
    auto t0 = std::chrono::steady_clock::now();
    forward = newton_forward_into(cell, xv, Hv, config);
    const double f = host_ms(t0);
    forward_peak = detail::cuda::device_memory().peak - live;
    t0 = std::chrono::steady_clock::now();
    run.grads = newton_backward_into(cell, xv, forward, gv, dxv, config);
    const double b = host_ms(t0);
    step_peak = detail::cuda::device_memory().peak - live;
    const CudaTransferBytes after = cuda_transfer_bytes();
    moved_to_device = after.to_device - before.to_device;
    moved_to_host = after.to_host - before.to_host;
    forward = NewtonForward();  // the saved H* and W_x x go back to the pool, as a step's end does
    if (i >= kWarmup) {
      fwd.push_back(f);
      bwd.push_back(b);
      step.push_back(f + b);
    }
  }
  run.H = Tensor(dtype, shape);
  check(cudaMemcpy(run.H.data(), d_H.get(), run.H.nbytes(), cudaMemcpyDeviceToHost), "download H");
  run.grad_x = Tensor(dtype, x.shape());
  check(cudaMemcpy(run.grad_x.data(), d_dx.get(), run.grad_x.nbytes(), cudaMemcpyDeviceToHost), "download grad_x");
  const double x_plus_H = static_cast<double>(x.nbytes() + run.H.nbytes());
  run.figures = {{"forward_ms", median(fwd)}, {"backward_ms", median(bwd)}, {"step_ms", median(step)},
                 {"bytes_to_device_per_step", moved_to_device}, {"bytes_to_host_per_step", moved_to_host},
                 {"trajectory_bytes", run.H.nbytes()},
                 {"forward_peak_bytes", forward_peak}, {"step_peak_bytes", step_peak},
                 {"forward_peak_over_x_plus_H", static_cast<double>(forward_peak) / x_plus_H},
                 {"step_peak_over_x_plus_H", static_cast<double>(step_peak) / x_plus_H}};
  // Progress on stderr (stdout is the JSON): a run cut short by a time limit still tells what it measured.
  std::fprintf(stderr, "T: %s %s B %lld T %lld: step %.3f ms (forward %.3f, backward %.3f)\n", std::string(cell.name()).c_str(),
               std::string(dtype_name(dtype)).c_str(), static_cast<long long>(B), static_cast<long long>(T),
               median(step), median(fwd), median(bwd));
  return run;
}

std::vector<float> floats(const Tensor& t) {
  const Tensor f = Tensor::converted(t, DType::f32);
  return std::vector<float>(f.data_as<float>(), f.data_as<float>() + f.numel());
}

nlohmann::ordered_json t_families(int runs);

nlohmann::ordered_json t_training(int runs) {
  nlohmann::ordered_json out = {
      {"shape", "S1 (B 8, T 65536, d_in = d_h = 256), NewtonConfig{} (adaptive, auto rule), device tensors, "
                "grad_H = 1e-3 everywhere"},
      {"clock", "host steady_clock around each public call (each returns synchronised)"}};
  for (const char* cell_name : {"gru", "lstm"}) {
    CellOptions options = kS1Gru;
    options.cell = cell_name;
    nlohmann::ordered_json rows;
    for (const DType dtype : {DType::bf16, DType::f16}) {
      // The half-precision step, and the f32-storage step on the same values widened (exactly).
      const Cell cell = Cell::initialise(options, dtype, kSeed);
      const Tensor x = bench::uniform_input(8, 65536, options.d_in, kSeed + 1, dtype);
      Cell wide = Cell::initialise(options, DType::f32, kSeed);
      for (const auto& [name, value] : cell.parameters()) wide.set_parameter(name, Tensor::converted(value, DType::f32));
      const Tensor x_wide = Tensor::converted(x, DType::f32);
      TrainingRun half = training_on_device(cell, x, runs);
      const TrainingRun f32 = training_on_device(wide, x_wide, runs);
      nlohmann::ordered_json check_row = {
          {"forward_vs_f32_storage_max_abs", max_abs_difference(floats(half.H), floats(f32.H))},
          {"grad_x_vs_f32_storage_max_rel", max_relative_difference(half.grad_x, f32.grad_x)}};
      for (const auto& [name, g] : f32.grads.parameters)
        check_row["grad_" + name + "_vs_f32_storage_max_rel"] =
            half.grads.parameters.contains(name) ? max_relative_difference(half.grads.parameters.at(name), g) : INFINITY;
      check_row["tau_atol"] = tau_of(dtype, cell_name);
      half.figures["check"] = check_row;
      half.figures["backward_over_f32_backward"] =
          half.figures["backward_ms"].get<double>() / f32.figures["backward_ms"].get<double>();
      rows[std::string(dtype_name(dtype))] = half.figures;
      if (!rows.contains("f32")) rows["f32"] = f32.figures;
    }
    out[cell_name] = rows;
  }
  out["other_families"] = t_families(runs);
  return out;
}

// The dense, matrix-state and exact linear families at B 4, T 4096, on device tensors: the step
// and the bytes it moves, f32 and bf16 (T's `other_families`; alone as TF).
nlohmann::ordered_json t_families(int runs) {
  const std::pair<const char*, CellOptions> others[] = {
      {"gru_head", {.cell = "gru", .mix = "head", .d_in = 64, .d_h = 64, .n_heads = 8}},
      {"hopfield", {.cell = "hopfield", .d_in = 32, .d_h = 32}},
      {"slstm_head", {.cell = "slstm", .mix = "head", .d_in = 64, .d_h = 64, .n_heads = 8}},
      {"m2rnn", {.cell = "m2rnn", .d_in = 64, .d_h = 64, .k_dim = 8, .v_dim = 8}},
      {"rwkv7", {.cell = "rwkv7", .d_in = 64, .d_h = 64, .n_heads = 1}}};
  nlohmann::ordered_json families = {{"shape", "B 4, T 4096, NewtonConfig{}, device tensors"}};
  for (const auto& [name, options] : others) {
    nlohmann::ordered_json rows;
    for (const DType dtype : {DType::f32, DType::bf16}) {
      try {
        const Cell cell = Cell::initialise(options, dtype, kSeed);
        const Tensor x = bench::uniform_input(4, 4096, options.d_in, kSeed + 1, dtype);
        rows[std::string(dtype_name(dtype))] = training_on_device(cell, x, std::max(3, runs / 3)).figures;
      } catch (const std::exception& e) {
        rows[std::string(dtype_name(dtype))] = {{"error", e.what()}};
      }
    }
    families[name] = rows;
  }
  return families;
}

nlohmann::ordered_json p4_hard(int runs) {
  CellOptions hard = kS1Gru;
  hard.max_recurrent_norm = std::nullopt;
  hard.weight_std = 0.7;
  DeviceCase c(hard, DType::f32, 8, 65536, kSeed);
  DeviceBuffer H(c.trajectory_bytes());
  nlohmann::ordered_json out = {{"shape", "S1 gru f32, recurrent unclamped std 0.7"}};
  out["fused_k3_fixed"] = timed_solve(c, DType::f32, {.max_iters = 3, .residual_atol = std::nullopt},
                                      cuda::NewtonStrategy::fused_step, H, runs);
  const double k3 = gru_against_f32_loop(c, bench::download(H));
  out["fused_adaptive_default"] =
      timed_solve(c, DType::f32, {.allow_sequential = false}, cuda::NewtonStrategy::fused_step, H, runs);
  const double adaptive = gru_against_f32_loop(c, bench::download(H));
  out["ratio_adaptive_to_k3"] =
      out["fused_adaptive_default"]["ms"].get<double>() / out["fused_k3_fixed"]["ms"].get<double>();
  out["check_vs_cpu_f32_loop"] = {{"fused_k3_fixed_max_abs", k3}, {"fused_adaptive_max_abs", adaptive},
                                  {"tau_atol", tau_of(DType::f32, "gru")},
                                  {"adaptive_within_tau", adaptive <= tau_of(DType::f32, "gru")}};
  return out;
}

// One shape of the sweep: fused (adaptive), sequential kernel, automatic; auto checked against
// the sequential kernel.
nlohmann::ordered_json strategies_at(const CellOptions& options, std::int64_t B, std::int64_t T, int runs,
                                     DType dtype = DType::f32) {
  DeviceCase c(options, dtype, B, T, kSeed);
  DeviceBuffer H_fused(c.trajectory_bytes()), H_seq(c.trajectory_bytes()), H_auto(c.trajectory_bytes());
  nlohmann::ordered_json out = {{"cell", options.cell}, {"batch", B}, {"time", T}, {"d_h", c.cell.d_h()},
                                {"chains", B * c.cell.d_h()}};
  out["dtype"] = dtype_name(dtype);
  out["fused_adaptive"] = timed_solve(c, dtype, {.allow_sequential = false},
                                      cuda::NewtonStrategy::fused_step, H_fused, runs);
  // The sequential kernel in the compute type (f32), as the auto rule runs it.
  out["sequential_kernel_ms"] =
      median_ms(kWarmup, runs, [&] { cuda::sequential_solve(c.cell.kind(), DType::f32, c.problem, H_seq.get()); });
  out["auto"] = timed_solve(c, dtype, {}, cuda::NewtonStrategy::automatic, H_auto, runs);
  const double best = std::min(out["fused_adaptive"]["ms"].get<double>(), out["sequential_kernel_ms"].get<double>());
  out["auto_over_best"] = out["auto"]["ms"].get<double>() / best;
  const std::vector<float> seq = bench::download(H_seq);
  const double tau = tau_of(dtype, options.cell.c_str());
  const double auto_err = max_abs_difference(bench::download(H_auto), seq);
  const double fused_err = max_abs_difference(bench::download(H_fused), seq);
  out["check_vs_sequential_kernel"] = {{"auto_max_abs", auto_err}, {"fused_max_abs", fused_err}, {"tau_atol", tau},
                                       {"auto_within_tau", auto_err <= tau}};
  return out;
}

nlohmann::ordered_json p6_auto(int runs) {
  nlohmann::ordered_json out;
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const std::int64_t tokens = std::int64_t{1} << 27;  // S1's B·T·d
  double worst = 0;
  nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
  for (std::int64_t chains : {512, 2048, 8192, 32768, 131072}) {
    const std::int64_t B = chains / 256, T = tokens / chains;
    nlohmann::ordered_json row = strategies_at(kS1Gru, B, T, runs);
    worst = std::max(worst, row["auto_over_best"].get<double>());
    sweep.push_back(row);
    std::fprintf(stderr, "P6 chains %lld done\n", static_cast<long long>(chains));
  }
  out["sweep_gru_equal_tokens"] = sweep;
  out["worst_auto_over_best"] = worst;
  // Every per-channel cell at 2048 chains (B 8, d 256, T 16384): where the sequential kernel
  // would take over, chains × sequential / fused, per SM.
  nlohmann::ordered_json crossover;
  for (const char* name : {"gru", "lstm", "nlru", "slstm", "cfc", "titans"}) {
    const CellOptions options{.cell = name, .d_in = 256, .d_h = 256};
    nlohmann::ordered_json row = strategies_at(options, 8, 16384, std::max(3, runs / 3));
    const double ratio = row["sequential_kernel_ms"].get<double>() / row["fused_adaptive"]["ms"].get<double>();
    row["crossover_chains"] = 2048.0 * ratio;
    row["crossover_chains_per_sm"] = 2048.0 * ratio / sms;
    row["rule_min_chains"] = cuda::sequential_min_chains(Cell::initialise(options, DType::f32, 1).kind(), sms);
    crossover[name] = row;
    std::fprintf(stderr, "P6 crossover %s done\n", name);
  }
  out["crossover_2048_chains"] = crossover;
  return out;
}

// P8: sLSTM-diag B 8, T 4096, d 256 under the auto rule, f32 and bf16 storage.
nlohmann::ordered_json p8_slstm(int runs) {
  const CellOptions options{.cell = "slstm", .d_in = 256, .d_h = 256};
  return {{"f32", strategies_at(options, 8, 4096, std::max(3, runs / 3))},
          {"bf16", strategies_at(options, 8, 4096, std::max(3, runs / 3), DType::bf16)}};
}

nlohmann::ordered_json p10_memory() {
  DeviceCase c(kS1Gru, DType::f32, 8, 65536, kSeed);
  const std::size_t x_bytes = c.x.nbytes();
  const std::size_t h_bytes = c.trajectory_bytes();
  c.wx = DeviceBuffer();  // only x stays on the device before the call
  cuda::reset_device_peak();
  const std::size_t before = cuda::device_memory().live;
  NewtonStats stats;
  const Tensor H = newton_apply(c.cell, c.x_device(), NewtonConfig{}, {}, &stats);
  const cuda::DeviceMemory after = cuda::device_memory();
  return {{"shape", "S1 gru f32, newton_apply on device x (default config)"},
          {"x_bytes", x_bytes}, {"output_bytes", h_bytes}, {"live_before_bytes", before},
          {"peak_bytes", after.peak}, {"ratio_to_inputs_plus_outputs",
                                       static_cast<double>(after.peak) / static_cast<double>(x_bytes + h_bytes)},
          {"stats", stats_json(stats)}, {"output_finite", std::isfinite(stats.max_residual)}};
}

nlohmann::ordered_json p14_host(int runs) {
  DeviceCase c(kS1Gru, DType::f32, 8, 65536, kSeed);
  DeviceBuffer H(c.trajectory_bytes()), upload(c.x.nbytes());
  nlohmann::ordered_json out = {{"shape", "S1 gru f32, newton_apply(cell, host x) on the CUDA backend"},
                                {"clock", "host steady_clock"}};
  std::vector<double> apply, h2d, d2h_new, d2h_touched;
  Tensor touched(DType::f32, c.cell.trajectory_shape(8, 65536));
  NewtonStats stats;
  Tensor result;
  for (int i = 0; i < 1 + std::max(2, runs / 3); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    result = newton_apply(c.cell, c.x, NewtonConfig{.scan_backend = ScanBackend::cuda}, {}, &stats);
    const double a = host_ms(t0);
    t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(upload.get(), c.x.data(), c.x.nbytes(), cudaMemcpyHostToDevice), "H2D");
    const double up = host_ms(t0);
    t0 = std::chrono::steady_clock::now();
    {
      Tensor fresh(DType::f32, c.cell.trajectory_shape(8, 65536));
      check(cudaMemcpy(fresh.data(), H.get(), fresh.nbytes(), cudaMemcpyDeviceToHost), "D2H");
    }
    const double down = host_ms(t0);
    t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(touched.data(), H.get(), touched.nbytes(), cudaMemcpyDeviceToHost), "D2H");
    const double down_touched = host_ms(t0);
    if (i > 0) {
      apply.push_back(a);
      h2d.push_back(up);
      d2h_new.push_back(down);
      d2h_touched.push_back(down_touched);
    }
  }
  const double gemm = median_ms(kWarmup, runs, [&] { (void)cuda::device_input_affine(c.cell, c.x_device(), c.layout); });
  const nlohmann::ordered_json solve = timed_solve(c, DType::f32, {}, cuda::NewtonStrategy::automatic, H, runs);
  const double device_ms = gemm + solve["ms"].get<double>();
  const double floor_ms = median(h2d) + median(d2h_new) + device_ms;
  const std::vector<float> got(result.data_as<float>(), result.data_as<float>() + result.numel());
  out["newton_apply_ms"] = median(apply);
  out["stats"] = stats_json(stats);
  out["h2d_pageable_ms"] = median(h2d);
  out["d2h_into_new_tensor_ms"] = median(d2h_new);
  out["d2h_into_touched_memory_ms"] = median(d2h_touched);
  out["input_gemm_ms"] = gemm;
  out["solve_ms"] = solve["ms"];
  out["transfers_plus_device_ms"] = floor_ms;
  out["ratio"] = median(apply) / floor_ms;
  out["check"] = {{"vs_cpu_f32_loop_max_abs", gru_against_f32_loop(c, got)}, {"tau_atol", tau_of(DType::f32, "gru")}};
  return out;
}

nlohmann::ordered_json p16_decode(int runs) {
  nlohmann::ordered_json out = {{"shape", "gru d 256 f32, CudaDecoder::step (one kernel: W_x x + b and the step) "
                                          "and CudaDecoder::step_gates (W_x x + b precomputed: the step alone)"},
                                {"steps_per_graph", 100}};
  const Cell cell = Cell::initialise(kS1Gru, DType::f32, kSeed);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::int64_t B : {1, 8, 64, 256}) {
    CudaDecoder decoder(cell, B);
    const Tensor x = bench::uniform_input(B, 1, 256, kSeed + static_cast<std::uint64_t>(B)).reshaped({B, 256});
    const Tensor state = bench::uniform_input(B, 1, 256, kSeed + 7).reshaped({B, 256});
    // Read on the bench's own stream: synchronous allocations (runtime.hpp's Allocation).
    DeviceBuffer d_x(x.nbytes(), "x", cuda::Allocation::synchronous),
        d_state(state.nbytes(), "state", cuda::Allocation::synchronous),
        d_out(state.nbytes(), "out", cuda::Allocation::synchronous);
    check(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice), "upload x");
    check(cudaMemcpy(d_state.get(), state.data(), state.nbytes(), cudaMemcpyHostToDevice), "upload state");
    const TensorView vx(d_x.get(), DType::f32, {B, 256}, {}, Device::cuda, 0);
    const TensorView vs(d_state.get(), DType::f32, {B, 256}, {}, Device::cuda, 0);
    const TensorView vo(d_out.get(), DType::f32, {B, 256}, {}, Device::cuda, 0);
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // One step checked against the host decode_step.
    decoder.step(vs, vx, vo, stream);
    check(cudaStreamSynchronize(stream), "sync");
    const Tensor expect = decode_step(cell, state, x);
    std::vector<float> got(static_cast<std::size_t>(B * 256));
    check(cudaMemcpy(got.data(), d_out.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
    const std::vector<float> want(expect.data_as<float>(), expect.data_as<float>() + expect.numel());
    const double err = max_abs_difference(got, want);
    // The precomputed-gates form (CudaDecoder::step_gates) from the same state and x's gates.
    const Tensor gates = decode_gates(cell, x.view());
    DeviceBuffer d_gates(gates.nbytes(), "gates", cuda::Allocation::synchronous);
    check(cudaMemcpy(d_gates.get(), gates.data(), gates.nbytes(), cudaMemcpyHostToDevice), "upload gates");
    const TensorView vg(d_gates.get(), DType::f32, {B, 3 * 256}, {}, Device::cuda, 0);
    decoder.step_gates(vs, vg, vo, stream);
    check(cudaStreamSynchronize(stream), "sync");
    check(cudaMemcpy(got.data(), d_out.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
    const double gates_err = max_abs_difference(got, want);
    // 100 steps (out -> out, in place) captured once and replayed, for each form.
    const auto replayed_us_per_step = [&](auto&& one_step) {
      return bench::graph_us_per_step(stream, 100, kWarmup, runs, one_step);
    };
    const double x_us = replayed_us_per_step([&] { decoder.step(vo, vx, vo, stream); });
    const double gates_us = replayed_us_per_step([&] { decoder.step_gates(vo, vg, vo, stream); });
    std::vector<float> after(static_cast<std::size_t>(B * 256));
    check(cudaMemcpy(after.data(), d_out.get(), after.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
    bool finite = true;
    for (float v : after) finite = finite && std::isfinite(v);
    rows.push_back({{"batch", B}, {"us_per_step", x_us}, {"one_step_vs_host_max_abs", err},
                    {"gates_us_per_step", gates_us}, {"gates_one_step_vs_host_max_abs", gates_err},
                    {"tau_atol", tau_of(DType::f32, "gru")}, {"replayed_state_finite", finite}});
    check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }
  out["rows"] = rows;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::program_name = "pararnn_bench_targets";
  const int runs = static_cast<int>(std::max<std::int64_t>(5, bench::arg_value(argc, argv, "--runs", 10)));
  std::string only = ",P2,P3,P4,P6,P8,P10,P14,P16,T,";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--only") only = "," + std::string(argv[i + 1]) + ",";
  const auto wanted = [&](const char* id) { return only.find("," + std::string(id) + ",") != std::string::npos; };
  nlohmann::ordered_json out;
  out["schema_version"] = 1;
  out["benchmark"] = "pararnn_bench_targets";
  out["context"] = bench::run_context(argc, argv, kSeed);
  out["runs"] = runs;
  out["warmup"] = kWarmup;
  try {
    if (wanted("P2")) out["P2"] = p2_bf16(runs);
    if (wanted("P4")) out["P4"] = p4_hard(runs);
    if (wanted("P10")) out["P10"] = p10_memory();
    if (wanted("P14")) out["P14"] = p14_host(runs);
    if (wanted("P16")) out["P16"] = p16_decode(runs);
    if (wanted("P3")) out["P3"] = p3_training(runs);
    if (wanted("T")) out["T"] = t_training(runs);
    if (wanted("TF") && !wanted("T")) out["TF"] = t_families(runs);
    if (wanted("P8")) out["P8"] = p8_slstm(runs);
    if (wanted("P6")) out["P6"] = p6_auto(runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pararnn_bench_targets: %s\n", e.what());
    std::cout << out.dump(2) << std::endl;  // what was measured before the failure
    return 1;
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}
