// pararnn_bench_newton: the CUDA backend's generic Newton forward (residual kernel, scan, cuBLAS
// axpy; one host read of max|F| per iteration) for GRU-diag at the reference shape S1 (B = 8,
// T = 65536, d_h = 256, f32), with K = 3 fixed and with the default adaptive K, beside the
// sequential kernel at the same shape, the input GEMM, and the public newton_apply end to end; the
// host-driven strategy (residual, scan, axpy) and the fused step (kernels/newton_step.hpp) both.
// Prints one JSON object on stdout.
//
// Method (PERFORMANCE.md "How to measure"): CUDA events on the legacy default stream (the
// backend's per-thread default stream is ordered with it both ways) around the solve only, gate pre-activations W_x x + b precomputed once and
// timed separately, warm-up first, median of >= 20 runs (5 for the end-to-end call, which also
// allocates and copies 0.5 GB to the host). Random data: x uniform in [-1, 1), the cell's App.
// C.1 initialisation (seeded). The timed configurations' trajectories are checked in the same run
// against the CPU sequential loop (the production cell math in f32, state rounded every step) on
// 16 chains spread over batch rows and channels, with τ from contracts/tolerance.hpp. The
// device-to-device copy bandwidth is measured in the same run; `bytes_model` counts the HBM
// traffic of the unfused loop (per token-channel: guess 32 B, an iteration with its update 48 B,
// a residual evaluation without update 20 B).
//
// Then windowed Newton (window_len 256, 512, 1024; K = 3 per window) in its one fused launch, and
// the public newton_apply_into with window_len 512 (windowed_k3): K = 3, and the default adaptive
// configuration beside the window loop it replaces.
//
// Then the fused strategy for LSTM at S1 (P7) and sLSTM-diag at B 8, T 4096, d 256 (P8), checked
// against the sequential kernel (cell_figures).
//
// Usage: pararnn_bench_newton [--batch 8] [--channels 256] [--time 65536] [--d-in 256] [--runs 20]
//                             [--skip-cells]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_inputs.hpp"
#include "cuda/affine.hpp"
#include "cuda/newton_device.hpp"
#include "cuda/runtime.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/kernels/newton_step.hpp"
#include "pararnn/kernels/windowed_newton.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/solver/solver.hpp"

namespace {

using pararnn::detail::cuda::DeviceBuffer;
namespace cuda = pararnn::detail::cuda;
using pararnn::bench::arg_value;
using pararnn::bench::check;
using pararnn::bench::download;
using pararnn::bench::max_abs_difference;
using pararnn::bench::median;
using pararnn::bench::median_ms;
using pararnn::bench::uniform_input;

// The fused strategy for another per-channel cell (P7: LSTM at S1, P8: sLSTM-diag at B 8,
// T 4096): K = 3 fixed and the default adaptive K, the sequential kernel at the same shape, and
// the fused K = 3 trajectory (every slot) against the sequential kernel's, judged at the cell's
// f32 τ. W_x x + b by the backend's own GEMM (untimed).
nlohmann::ordered_json cell_figures(const char* name, std::int64_t B, std::int64_t T, std::int64_t D,
                                    std::int64_t d_in, int warmup, int runs, std::uint64_t seed) {
  using namespace pararnn;
  const Cell cell = Cell::initialise({.cell = name, .d_in = d_in, .d_h = D}, DType::f32, seed);
  const int S = cell.spec().slots;
  const Tensor x = uniform_input(B, T, d_in, seed + 1);
  DeviceBuffer d_x(x.nbytes());
  check(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice), "upload x");
  const TensorView x_device(d_x.get(), DType::f32, {B, T, d_in}, {}, Device::cuda, 0);
  const detail::Layout layout{.batch = B, .time = T, .d_h = D, .d_in = d_in};
  const DeviceBuffer wx = cuda::device_input_affine(cell, x_device, layout);
  const std::vector<double> values = cell.channel_values();
  const std::vector<float> rec(values.begin(), values.end());
  DeviceBuffer d_rec(rec.size() * sizeof(float));
  check(cudaMemcpy(d_rec.get(), rec.data(), d_rec.bytes(), cudaMemcpyHostToDevice), "upload rec");
  const cuda::DeviceProblem problem{.wx = wx.get(), .recurrent = d_rec.get(), .batch = B, .time = T, .channels = D};
  cuda::NewtonWorkspace ws(cell.kind(), DType::f32, B, T, D, cuda::NewtonStrategy::fused_step);
  const std::size_t bytes = static_cast<std::size_t>(B * T * S * D) * sizeof(float);
  DeviceBuffer H(bytes), H_seq(bytes);
  nlohmann::ordered_json out = {{"cell", name}, {"batch", B}, {"time", T}, {"d_h", D}, {"d_in", d_in}, {"slots", S}};
  for (const auto& [label, config] : {std::pair{"fused_k3_fixed", NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt}},
                                      std::pair{"fused_adaptive_default", NewtonConfig{}}}) {
    NewtonStats stats;
    const double ms = median_ms(warmup, runs, [&] {
      cuda::newton_solve(cell.spec(), DType::f32, problem, config, H.get(), ws, stats);
    });
    out[label] = {{"ms", ms}, {"k", stats.k.k}, {"iters", stats.iters}, {"updates", stats.updates},
                  {"converged", stats.converged}, {"max_residual", stats.max_residual},
                  {"picard_iters", stats.picard_iters}, {"fallback_tiles", stats.fallback_tiles}};
  }
  NewtonStats stats;
  cuda::newton_solve(cell.spec(), DType::f32, problem, NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt},
                     H.get(), ws, stats);
  out["sequential_kernel_ms"] =
      median_ms(warmup, runs, [&] { cuda::sequential_solve(cell.kind(), DType::f32, problem, H_seq.get()); });
  check(cudaDeviceSynchronize(), "sync");
  const std::vector<float> a = download(H), b = download(H_seq);
  const double err = max_abs_difference(a, b);
  const Tolerance tau = tolerance_for({.dtype = DType::f32, .cell = name, .backend = "cuda"});
  out["fused_k3_vs_sequential_kernel"] = {{"max_abs", err}, {"tau_atol", tau.atol}, {"within_tau", err <= tau.atol}};
  if (std::string(name) == "lstm") {
    // Windowed Newton at window_len 512, K = 3 per window, in its one fused launch (no residual
    // maxima: the trajectory alone), against the sequential kernel at the cell's τ.
    const kernels::WindowedNewtonArgs<float> args{
        .wx = static_cast<const float*>(wx.get()), .recurrent = static_cast<const float*>(d_rec.get()),
        .H = static_cast<float*>(H.get()), .batch = B, .time = T, .channels = D, .window = 512, .iterations = 3};
    const double ms = median_ms(warmup, runs, [&] {
      check(kernels::launch_windowed_newton<cells::LstmMath, float>(args, nullptr), "windowed Newton");
    });
    check(cudaDeviceSynchronize(), "windowed Newton");
    const double werr = max_abs_difference(download(H), b);
    out["windowed_k3_chunk_512"] = {{"ms", ms}, {"vs_sequential_kernel_max_abs", werr}, {"tau_atol", tau.atol},
                                    {"within_tau", werr <= tau.atol}};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pararnn;
  using Gru = cells::GruDiagMath;
  constexpr int G = Gru::kGates;
  const std::int64_t B = arg_value(argc, argv, "--batch", 8);
  const std::int64_t D = arg_value(argc, argv, "--channels", 256);
  const std::int64_t T = arg_value(argc, argv, "--time", 65536);
  const std::int64_t d_in = arg_value(argc, argv, "--d-in", 256);
  const int runs = static_cast<int>(std::max<std::int64_t>(20, arg_value(argc, argv, "--runs", 20)));
  const int warmup = 3;
  const std::int64_t n = B * T * D;  // token-channels
  const std::uint64_t seed = 20260301;

  pararnn::bench::program_name = "pararnn_bench_newton";
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");

  nlohmann::ordered_json out;
  out["schema_version"] = 1;
  out["benchmark"] = "pararnn_bench_newton";
  out["context"] = pararnn::bench::run_context(argc, argv, seed);
  out["shape"] = {{"cell", "gru"}, {"dtype", "f32"}, {"batch", B}, {"time", T}, {"d_h", D},
                  {"d_in", d_in}, {"chains", B * D}, {"token_channels", n}};
  out["runs"] = runs;
  out["warmup"] = warmup;

  // Copy bandwidth: 1 GiB device to device, bytes read plus written.
  double copy_tb_per_s = 0;
  {
    const std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer src(bytes), dst(bytes);
    check(cudaMemset(src.get(), 1, bytes), "cudaMemset");
    const double ms = median_ms(warmup, runs, [&] {
      check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, nullptr), "copy");
    });
    copy_tb_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e12;
    out["copy"] = {{"bytes", bytes}, {"ms", ms}, {"tb_per_s", copy_tb_per_s}};
  }

  // The problem: App. C.1 cell, x uniform in [-1, 1).
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = d_in, .d_h = D}, DType::f32, seed);
  const Tensor x = uniform_input(B, T, d_in, seed);
  const std::vector<double> channel_values = cell.channel_values();  // clamped (App. C.1)
  const std::vector<float> rec(channel_values.begin(), channel_values.end());
  const Tensor bias = Tensor::converted(cell.parameter("W_x.bias"), DType::f32);
  const Tensor& weight = cell.parameter("W_x.weight");
  DeviceBuffer d_x(x.nbytes()), d_w(weight.nbytes()), d_b(bias.nbytes()),
      d_rec(rec.size() * sizeof(float)), d_wx(static_cast<std::size_t>(n * G) * sizeof(float));
  check(cudaMemcpy(d_x.get(), x.data(), x.nbytes(), cudaMemcpyHostToDevice), "upload x");
  check(cudaMemcpy(d_w.get(), weight.data(), weight.nbytes(), cudaMemcpyHostToDevice), "upload W");
  check(cudaMemcpy(d_b.get(), bias.data(), bias.nbytes(), cudaMemcpyHostToDevice), "upload b");
  check(cudaMemcpy(d_rec.get(), rec.data(), d_rec.bytes(), cudaMemcpyHostToDevice), "upload rec");

  // The input GEMM W_x x + b (excluded from the Newton timings).
  {
    const cuda::DeviceAffine block{.weight = d_w.get(), .outputs = G * D, .inputs = d_in};
    const double ms = median_ms(warmup, runs, [&] {
      cuda::input_affine(DType::f32, B * T, d_in, G * D, d_b.get(), d_x.get(), {&block, 1}, d_wx.get());
    });
    const double flops = 2.0 * static_cast<double>(B * T) * static_cast<double>(d_in) * static_cast<double>(G * D);
    out["input_gemm"] = {{"ms", ms}, {"tflop_per_s", flops / (ms * 1e-3) / 1e12}};
  }

  const cuda::DeviceProblem problem{.wx = d_wx.get(), .recurrent = d_rec.get(), .batch = B,
                                    .time = T, .channels = D};
  // Both strategies of the per-channel family (cuda/runtime.hpp NewtonStrategy), same inputs.
  cuda::NewtonWorkspace generic(CellKind::gru, DType::f32, B, T, D, cuda::NewtonStrategy::host_driven);
  cuda::NewtonWorkspace fused(CellKind::gru, DType::f32, B, T, D, cuda::NewtonStrategy::fused_step);
  const std::size_t h_bytes = static_cast<std::size_t>(n) * sizeof(float);
  DeviceBuffer d_H_k3(h_bytes), d_H_adaptive(h_bytes), d_H_seq(h_bytes), d_H_fused_k3(h_bytes),
      d_H_fused_adaptive(h_bytes);
  const double token_channels = static_cast<double>(n);
  auto newton_figures = [&](const NewtonConfig& config, const DeviceBuffer& H, const char* name,
                            cuda::NewtonWorkspace& workspace) {
    NewtonStats stats;
    const double ms = median_ms(warmup, runs, [&] {
      cuda::newton_solve(cell.spec(), DType::f32, problem, config, H.get(), workspace, stats);
    });
    // Host-driven: the guess (32 B), every update's iteration (48 B), and the evaluations without
    // an update (the early stop's or the final residual, 20 B each). Fused: the first step
    // evaluates the guess itself (W_x x 12 B read, H' 4 B written), later steps also read H
    // (20 B), an evaluation without an update is 20 B, and the final residual, reduced by the
    // last step, leaves only the chunk starts to the residual kernel (20 B / L; the step re-reads
    // its W_x x from L2, not counted).
    const double evaluations_without_update = static_cast<double>(stats.iters - stats.updates);
    const double bytes =
        workspace.fused && stats.updates > 0
            ? token_channels * (16.0 + 20.0 * static_cast<double>(stats.updates - 1) + 20.0 * evaluations_without_update +
                                20.0 / static_cast<double>(kernels::newton_step_chunk<cells::GruDiagMath, float>()))
            : token_channels * (32.0 + 48.0 * static_cast<double>(stats.updates) + 20.0 * (evaluations_without_update + 1));
    out[name] = {{"ms", ms},
                 {"k", stats.k.k},
                 {"k_source", std::string(k_source_name(stats.k.source))},
                 {"iters", stats.iters},
                 {"updates", stats.updates},
                 {"converged", stats.converged},
                 {"max_residual", stats.max_residual},
                 {"residual_history", stats.residual_history},
                 {"bytes_model", bytes},
                 {"effective_tb_per_s", bytes / (ms * 1e-3) / 1e12},
                 {"ratio_to_copy", bytes / (ms * 1e-3) / 1e12 / copy_tb_per_s}};
  };
  newton_figures(NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt}, d_H_k3, "newton_k3_fixed", generic);
  newton_figures(NewtonConfig{}, d_H_adaptive, "newton_adaptive_default", generic);
  newton_figures(NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt}, d_H_fused_k3, "fused_k3_fixed", fused);
  newton_figures(NewtonConfig{}, d_H_fused_adaptive, "fused_adaptive_default", fused);
  out["fused_vs_generic_k3_speedup"] =
      out["newton_k3_fixed"]["ms"].get<double>() / out["fused_k3_fixed"]["ms"].get<double>();

  // The sequential kernel (one thread per chain), same inputs.
  {
    const double ms = median_ms(warmup, runs, [&] {
      cuda::sequential_solve(CellKind::gru, DType::f32, problem, d_H_seq.get());
    });
    out["sequential_kernel"] = {{"ms", ms}, {"bytes_model", token_channels * 16.0}};
  }
  out["newton_k3_vs_sequential_speedup"] =
      out["sequential_kernel"]["ms"].get<double>() / out["newton_k3_fixed"]["ms"].get<double>();

  // The public API end to end: device x, input GEMM, allocations, Newton (default config), the
  // residual gate and the 0.5 GB copy to a host tensor.
  {
    const TensorView x_device(d_x.get(), DType::f32, {B, T, d_in}, {}, Device::cuda, device);
    std::vector<double> times;
    for (int i = 0; i < 1 + 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor H = newton_apply(cell, x_device, NewtonConfig{});
      const auto t1 = std::chrono::steady_clock::now();
      if (i > 0) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    out["newton_apply_end_to_end"] = {{"ms", median(times)}, {"runs", 5}, {"clock", "host steady_clock"}};
  }
  // The same into a device H (newton_apply_into: nothing of size B·T crosses to the host), with the
  // default configuration and with K = 3 fixed (P9's end-to-end figure: input GEMM, allocations,
  // the fused solve, the residual gate), each checked bitwise against the timed launcher's H.
  {
    const TensorView x_device(d_x.get(), DType::f32, {B, T, d_in}, {}, Device::cuda, device);
    DeviceBuffer d_H_into(d_H_k3.bytes());
    const TensorView H_out(d_H_into.get(), DType::f32, {B, T, D}, {}, Device::cuda, device);
    auto into = [&](const NewtonConfig& config, const char* name, const DeviceBuffer& expected) {
      std::vector<double> times;
      for (int i = 0; i < 1 + runs; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        newton_apply_into(cell, x_device, H_out, config);
        const auto t1 = std::chrono::steady_clock::now();
        if (i > 0) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      out[name] = {{"ms", median(times)}, {"runs", runs}, {"clock", "host steady_clock"},
                   {"equals_the_launchers_H_bitwise", download(d_H_into) == download(expected)}};
    };
    into(NewtonConfig{}, "newton_apply_into_device_end_to_end", d_H_fused_adaptive);
    into(NewtonConfig{.max_iters = 3, .residual_atol = std::nullopt}, "newton_apply_into_device_k3_end_to_end",
         d_H_fused_k3);
  }

  // Windowed Newton (window_len, spec §2.8) in one fused launch, as the solver runs it
  // (kernels/windowed_newton.hpp): K = 3 per window, no early stop (residual_atol unset), the
  // residual maxima reduced on the device (every window's K evaluations and final residual) and
  // read back; gates precomputed, as P1. Each window size's trajectory against the CPU sequential
  // loop on the same 16 chains as below (τ of the contract: a window's K = 3 is a different fixed
  // point from the global solve's, judged, not assumed), then the public newton_apply_into on
  // device x with that window_len (its input GEMM included), checked bitwise against the launcher.
  {
    const std::vector<float> wx_host = download(d_wx);
    const Tolerance tau = tolerance_for({.dtype = DType::f32, .cell = "gru", .backend = "cuda"});
    DeviceBuffer d_H_window(h_bytes);
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    constexpr int K = 3;
    for (const std::int64_t window : {std::int64_t{256}, std::int64_t{512}, std::int64_t{1024}}) {
      const std::int64_t windows = (T + window - 1) / window;
      DeviceBuffer d_residual(static_cast<std::size_t>(windows * (K + 1)) * sizeof(unsigned int));
      std::vector<unsigned int> bits(static_cast<std::size_t>(windows * (K + 1)));
      const kernels::WindowedNewtonArgs<float> args{
          .wx = static_cast<const float*>(d_wx.get()), .recurrent = static_cast<const float*>(d_rec.get()),
          .H = static_cast<float*>(d_H_window.get()), .residual_max = static_cast<unsigned int*>(d_residual.get()),
          .batch = B, .time = T, .channels = D, .window = window, .iterations = K};
      const double ms = median_ms(warmup, runs, [&] {
        check(cudaMemsetAsync(d_residual.get(), 0, d_residual.bytes(), nullptr), "zero the residual maxima");
        check(kernels::launch_windowed_newton<Gru, float>(args, nullptr), "windowed Newton");
        check(cudaMemcpyAsync(bits.data(), d_residual.get(), d_residual.bytes(), cudaMemcpyDeviceToHost, nullptr),
              "read the residual maxima");
      });
      check(cudaDeviceSynchronize(), "windowed Newton");
      double final_residual = 0, last_loop_residual = 0;
      for (std::int64_t w = 0; w < windows; ++w) {
        const auto at = [&](int e) {
          return static_cast<double>(std::bit_cast<float>(bits[static_cast<std::size_t>(w * (K + 1) + e)]));
        };
        final_residual = std::isnan(at(K)) ? INFINITY : std::max(final_residual, at(K));
        last_loop_residual = std::isnan(at(K - 1)) ? INFINITY : std::max(last_loop_residual, at(K - 1));
      }
      const std::vector<float> H_window = download(d_H_window);
      double err = 0;
      pararnn::bench::walk_gru_chains<float>(wx_host, rec, B, T, D, [&](std::size_t i, double h) {
        const double d = std::fabs(static_cast<double>(H_window[i]) - h);
        err = std::isnan(d) ? INFINITY : std::max(err, d);
      });
      // Bytes it must move: W_x x read once (12 B), H written once (4 B) per token-channel.
      const double bytes = token_channels * 16.0;
      nlohmann::ordered_json row = {{"window_len", window},
                                    {"k", K},
                                    {"ms", ms},
                                    {"bytes_model", bytes},
                                    {"effective_tb_per_s", bytes / (ms * 1e-3) / 1e12},
                                    {"max_final_residual", final_residual},
                                    {"max_third_evaluation_residual", last_loop_residual},
                                    {"vs_cpu_sequential_max_abs", err},
                                    {"tau_atol", tau.atol},
                                    {"within_tau", err <= tau.atol}};
      // The same launch with the default configuration's adaptive rule (kernels/windowed_newton.hpp:
      // the table's K of the whole length the minimum, k_max 16 the cap, residual_atol 1e-5 per
      // chain), gates precomputed as above; its evaluations per window read back with the maxima.
      {
        const NewtonConfig defaults{};
        const int minimum = static_cast<int>(resolve_newton_iters(defaults, cell.spec(), DType::f32, T).k);
        const int cap = static_cast<int>(std::max<std::int64_t>(minimum, defaults.k_max));
        DeviceBuffer d_res_a(static_cast<std::size_t>(windows * (cap + 1)) * sizeof(unsigned int));
        DeviceBuffer d_ran(static_cast<std::size_t>(windows) * sizeof(unsigned int));
        std::vector<unsigned int> ran(static_cast<std::size_t>(windows));
        kernels::WindowedNewtonArgs<float> adaptive_args = args;
        adaptive_args.residual_max = static_cast<unsigned int*>(d_res_a.get());
        adaptive_args.evaluations = static_cast<unsigned int*>(d_ran.get());
        adaptive_args.iterations = cap;
        adaptive_args.adaptive = true;
        adaptive_args.min_iterations = minimum;
        adaptive_args.stop_atol = *resolved_residual_atol(defaults, DType::f32);
        const double adaptive_ms = median_ms(warmup, runs, [&] {
          check(cudaMemsetAsync(d_res_a.get(), 0, d_res_a.bytes(), nullptr), "zero the residual maxima");
          check(cudaMemsetAsync(d_ran.get(), 0, d_ran.bytes(), nullptr), "zero the evaluations");
          check(kernels::launch_windowed_newton<Gru, float>(adaptive_args, nullptr), "adaptive windowed Newton");
          check(cudaMemcpyAsync(ran.data(), d_ran.get(), d_ran.bytes(), cudaMemcpyDeviceToHost, nullptr),
                "read the evaluations");
        });
        check(cudaDeviceSynchronize(), "adaptive windowed Newton");
        const std::vector<float> H_adaptive_launch = download(d_H_window);
        double adaptive_err = 0;
        pararnn::bench::walk_gru_chains<float>(wx_host, rec, B, T, D, [&](std::size_t i, double h) {
          const double d = std::fabs(static_cast<double>(H_adaptive_launch[i]) - h);
          adaptive_err = std::isnan(d) ? INFINITY : std::max(adaptive_err, d);
        });
        row["adaptive_launch"] = {{"ms", adaptive_ms},
                                  {"minimum_k", minimum},
                                  {"k_max", cap},
                                  {"most_evaluations", *std::max_element(ran.begin(), ran.end())},
                                  {"fewest_evaluations", *std::min_element(ran.begin(), ran.end())},
                                  {"vs_cpu_sequential_max_abs", adaptive_err},
                                  {"within_tau", adaptive_err <= tau.atol}};
      }
      if (window == 512) {
        // The public entry point on device x with this window_len: input GEMM, the launch, the
        // residual gate, H into a device view.
        const TensorView x_device(d_x.get(), DType::f32, {B, T, d_in}, {}, Device::cuda, device);
        DeviceBuffer d_H_into(h_bytes);
        const TensorView H_out(d_H_into.get(), DType::f32, {B, T, D}, {}, Device::cuda, device);
        const NewtonConfig config{.max_iters = K, .residual_atol = std::nullopt, .window_len = window};
        std::vector<double> times;
        NewtonStats stats;
        for (int i = 0; i < 1 + runs; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          newton_apply_into(cell, x_device, H_out, config, {}, &stats);
          const auto t1 = std::chrono::steady_clock::now();
          if (i > 0) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        row["newton_apply_into_device_end_to_end"] = {
            {"ms", median(times)}, {"clock", "host steady_clock"}, {"strategy", std::string(solve_strategy_name(stats.strategy))},
            {"iters", stats.iters}, {"max_residual", stats.max_residual},
            {"equals_the_launchers_H_bitwise", download(d_H_into) == H_window}};
        // The default configuration (adaptive K, residual_atol) with this window_len: the one
        // fused launch deciding each chain's K on the device; against the window loop it replaces,
        // timed as that loop runs (newton_apply_into per window on slices of the same device x
        // and H, each from the previous window's last state, the full length's K as the minimum);
        // both checked against the CPU sequential loop.
        const NewtonConfig adaptive{.window_len = window};
        NewtonStats adaptive_stats;
        times.clear();
        for (int i = 0; i < 1 + runs; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          newton_apply_into(cell, x_device, H_out, adaptive, {}, &adaptive_stats);
          const auto t1 = std::chrono::steady_clock::now();
          if (i > 0) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        const std::vector<float> H_adaptive_window = download(d_H_into);
        NewtonConfig each{};
        each.newton_iters_by_t = {{1, resolve_newton_iters(adaptive, cell.spec(), DType::f32, T).k}};
        std::vector<double> loop_times;
        std::int64_t loop_iters = 0;
        std::string loop_strategy;
        // The public API refuses an h0 inside `out`'s extent (the loop itself passes that view):
        // each window's h0 is copied out first (B·d_h values a window, on the solve's stream).
        DeviceBuffer d_h0(static_cast<std::size_t>(B * D) * sizeof(float));
        const TensorView h0_view(d_h0.get(), DType::f32, {B, D}, {}, Device::cuda, device);
        for (int i = 0; i < 1 + runs / 4; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          for (std::int64_t begin = 0; begin < T; begin += window) {
            const std::int64_t end = std::min(T, begin + window);
            ApplyOptions wo;
            if (begin > 0) {
              check(cudaMemcpy2DAsync(d_h0.get(), D * sizeof(float),
                                      static_cast<const float*>(H_out.data()) + (begin - 1) * D,
                                      T * D * sizeof(float), D * sizeof(float), B, cudaMemcpyDeviceToDevice,
                                      cudaStreamPerThread),
                    "copy a window's h0");
              wo.h0 = h0_view;
            }
            NewtonStats ws;
            newton_apply_into(cell, x_device.slice(1, begin, end), H_out.slice(1, begin, end), each, wo, &ws);
            loop_iters = std::max(loop_iters, ws.iters);
            loop_strategy = std::string(solve_strategy_name(ws.strategy));
          }
          const auto t1 = std::chrono::steady_clock::now();
          if (i > 0) loop_times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        const std::vector<float> H_loop = download(d_H_into);
        double err_adaptive = 0, err_loop = 0, adaptive_vs_loop = 0;
        pararnn::bench::walk_gru_chains<float>(wx_host, rec, B, T, D, [&](std::size_t i, double h) {
          const double a = std::fabs(static_cast<double>(H_adaptive_window[i]) - h);
          const double l = std::fabs(static_cast<double>(H_loop[i]) - h);
          err_adaptive = std::isnan(a) ? INFINITY : std::max(err_adaptive, a);
          err_loop = std::isnan(l) ? INFINITY : std::max(err_loop, l);
        });
        for (std::size_t i = 0; i < H_loop.size(); ++i) {
          const double d = std::fabs(static_cast<double>(H_adaptive_window[i]) - static_cast<double>(H_loop[i]));
          adaptive_vs_loop = std::isnan(d) ? INFINITY : std::max(adaptive_vs_loop, d);
        }
        row["adaptive_newton_apply_into_device_end_to_end"] = {
            {"ms", median(times)}, {"clock", "host steady_clock"},
            {"strategy", std::string(solve_strategy_name(adaptive_stats.strategy))},
            {"iters", adaptive_stats.iters}, {"converged", adaptive_stats.converged},
            {"max_residual", adaptive_stats.max_residual}, {"vs_cpu_sequential_max_abs", err_adaptive},
            {"within_tau", err_adaptive <= tau.atol}, {"vs_window_loop_max_abs", adaptive_vs_loop},
            {"window_loop", {{"ms", median(loop_times)}, {"runs", runs / 4}, {"strategy", loop_strategy},
                             {"iters", loop_iters}, {"vs_cpu_sequential_max_abs", err_loop},
                             {"within_tau", err_loop <= tau.atol}}}};
      }
      rows.push_back(row);
    }
    out["windowed_k3"] = rows;
  }

  // Correctness of what was timed: 16 chains against the CPU sequential loop (f32 state).
  {
    const std::vector<float> wx = download(d_wx), H_k3 = download(d_H_k3),
                             H_adaptive = download(d_H_adaptive), H_seq = download(d_H_seq),
                             H_fused_k3 = download(d_H_fused_k3), H_fused_adaptive = download(d_H_fused_adaptive);
    double err_k3 = 0, err_adaptive = 0, err_seq = 0, err_fused_k3 = 0, err_fused_adaptive = 0;
    auto worse = [](double e, double d) { return std::isnan(d) ? INFINITY : std::max(e, d); };
    const std::int64_t checked = pararnn::bench::walk_gru_chains<float>(wx, rec, B, T, D, [&](std::size_t i, double h) {
      err_k3 = worse(err_k3, std::fabs(static_cast<double>(H_k3[i]) - h));
      err_adaptive = worse(err_adaptive, std::fabs(static_cast<double>(H_adaptive[i]) - h));
      err_seq = worse(err_seq, std::fabs(static_cast<double>(H_seq[i]) - h));
      err_fused_k3 = worse(err_fused_k3, std::fabs(static_cast<double>(H_fused_k3[i]) - h));
      err_fused_adaptive = worse(err_fused_adaptive, std::fabs(static_cast<double>(H_fused_adaptive[i]) - h));
    });
    const Tolerance tau = tolerance_for({.dtype = DType::f32, .cell = "gru", .backend = "cuda"});
    out["check_vs_cpu_sequential"] = {{"chains", checked},
                                      {"tau_atol", tau.atol},
                                      {"tolerance_source", tau.source},
                                      {"newton_k3_fixed_max_abs", err_k3},
                                      {"newton_adaptive_default_max_abs", err_adaptive},
                                      {"sequential_kernel_max_abs", err_seq},
                                      {"fused_k3_fixed_max_abs", err_fused_k3},
                                      {"fused_adaptive_default_max_abs", err_fused_adaptive},
                                      {"all_within_tau", err_k3 <= tau.atol && err_adaptive <= tau.atol &&
                                                             err_seq <= tau.atol && err_fused_k3 <= tau.atol &&
                                                             err_fused_adaptive <= tau.atol}};
  }
  // P7 and P8 (`--skip-cells` leaves them out).
  if (!pararnn::bench::has_flag(argc, argv, "--skip-cells")) {
    out["P7_lstm_s1"] = cell_figures("lstm", B, T, D, d_in, warmup, runs, seed);
    out["P8_slstm"] = cell_figures("slstm", 8, 4096, 256, 256, warmup, runs, seed);
  }
  std::cout << out.dump(2) << std::endl;
  return 0;
}
