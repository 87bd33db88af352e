// pararnn_bench_scan: the diagonal affine scan (P5) and the sequential GRU-diag kernel at the
// reference shape S1 (B·d_h = 2048 chains, T = 65536), against the device-to-device copy
// bandwidth measured in the same run. Prints one JSON object on stdout.
//
// Method (PERFORMANCE.md "How to measure"): CUDA events around the launch only, warm-up first,
// median of >= 20 runs (10 for the ~10 ms sequential kernel), random non-zero data generated on
// the device, the scan's input restored (untimed) before every run since it works in place, and
// the timed configuration's result checked in the same run against a host sequential
// substitution in double. Effective bandwidth counts 12 bytes per token-channel (read J and r,
// write δ), the floor of any scan; the copy counts bytes read plus written.
//
// Usage: pararnn_bench_scan [--batch 8] [--channels 256] [--time 65536] [--runs 20]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/sequential.hpp"

namespace {

using pararnn::kernels::ScanAlgorithm;
using pararnn::kernels::ScanArgs;
using pararnn::kernels::ScanTiling;
using pararnn::bench::arg_value;
using pararnn::bench::check;
using pararnn::bench::median;
using pararnn::bench::median_ms_on;


template <class T>
struct DeviceArray {
  T* p = nullptr;
  std::size_t n = 0;
  explicit DeviceArray(std::size_t count) : n(count) {
    if (count > 0) check(cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(T)), "cudaMalloc");
  }
  ~DeviceArray() {
    if (p != nullptr) cudaFree(p);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::size_t bytes() const { return n * sizeof(T); }
};

__device__ __forceinline__ std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [lo, hi) with a random sign when `signed_magnitude` (then |v| in [lo, hi)).
__global__ void fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi,
                             bool signed_magnitude) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL + i);
    const float u = static_cast<float>(h >> 40) * 0x1.0p-24f;
    float v = lo + (hi - lo) * u;
    if (signed_magnitude && (h & 1)) v = -v;
    out[i] = v;
  }
}

void fill(DeviceArray<float>& a, std::uint64_t seed, float lo, float hi, bool signed_magnitude) {
  fill_uniform<<<1024, 256>>>(a.p, a.n, seed, lo, hi, signed_magnitude);
  check(cudaGetLastError(), "fill_uniform");
}

struct ScanResult {
  std::string algorithm;
  bool reverse = false;
  std::int64_t chunk = 0;
  double ms = 0;
  double tb_per_s = 0;
  double max_abs_error = 0;  // vs host sequential substitution in double
};

}  // namespace

int main(int argc, char** argv) {
  pararnn::bench::program_name = "pararnn_bench_scan";
  const std::int64_t batch = arg_value(argc, argv, "--batch", 8);
  const std::int64_t channels = arg_value(argc, argv, "--channels", 256);
  const std::int64_t time = arg_value(argc, argv, "--time", 65536);
  const int runs = static_cast<int>(arg_value(argc, argv, "--runs", 20));
  const int warmup = 3;
  const std::size_t n = static_cast<std::size_t>(batch * time * channels);

  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int runtime_version = 0, driver_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  cudaDriverGetVersion(&driver_version);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  // Copy bandwidth: 1 GiB device to device.
  const std::size_t copy_bytes = std::size_t{1} << 30;
  double copy_tb_per_s = 0, copy_ms = 0;
  {
    DeviceArray<unsigned char> src(copy_bytes), dst(copy_bytes);
    check(cudaMemsetAsync(src.p, 1, copy_bytes, stream), "cudaMemsetAsync");
    copy_ms = median_ms_on(stream, warmup, runs, [] {}, [&] {
      check(cudaMemcpyAsync(dst.p, src.p, copy_bytes, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync");
    });
    copy_tb_per_s = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e-3) / 1e12;
  }

  // The f32 diagonal scan.
  std::vector<ScanResult> scans;
  {
    DeviceArray<float> J(n), r0(n), r(n);
    fill(J, 1, 0.5f, 1.0f, true);    // |J| in [0.5, 1): non-zero, contractive
    fill(r0, 2, 0.0f, 1.0f, true);   // r in (−1, 1)
    std::vector<float> hJ(n), hr(n);
    check(cudaMemcpy(hJ.data(), J.p, J.bytes(), cudaMemcpyDeviceToHost), "download J");
    check(cudaMemcpy(hr.data(), r0.p, r0.bytes(), cudaMemcpyDeviceToHost), "download r");
    // Host references in double, both directions.
    std::vector<double> ref_fwd(n), ref_rev(n);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::size_t row = static_cast<std::size_t>(b * time * channels);
      const std::size_t D = static_cast<std::size_t>(channels);
      for (std::int64_t t = 0; t < time; ++t)
        for (std::size_t c = 0; c < D; ++c) {
          const std::size_t i = row + static_cast<std::size_t>(t) * D + c;
          ref_fwd[i] = (t == 0 ? 0.0 : static_cast<double>(hJ[i]) * ref_fwd[i - D]) + hr[i];
        }
      for (std::int64_t t = time - 1; t >= 0; --t)
        for (std::size_t c = 0; c < D; ++c) {
          const std::size_t i = row + static_cast<std::size_t>(t) * D + c;
          ref_rev[i] =
              (t == time - 1 ? 0.0 : static_cast<double>(hJ[i + D]) * ref_rev[i + D]) + hr[i];
        }
    }

    struct Config {
      ScanAlgorithm algorithm;
      std::int64_t chunk;
      bool reverse;
    };
    const Config configs[] = {
        {ScanAlgorithm::single_pass, 128, false}, {ScanAlgorithm::single_pass, 64, false},
        {ScanAlgorithm::single_pass, 32, false},  {ScanAlgorithm::single_pass, 16, false},
        {ScanAlgorithm::single_pass, 128, true},  {ScanAlgorithm::single_pass, 64, true},
        {ScanAlgorithm::three_phase, 256, false}, {ScanAlgorithm::three_phase, 1024, false}};
    std::size_t workspace_bytes = 0;
    for (const Config& cfg : configs)
      workspace_bytes = std::max(workspace_bytes, pararnn::kernels::scan_affine_workspace_bytes<1, float>(
                                                      batch, time, channels, {cfg.algorithm, cfg.chunk}));
    DeviceArray<unsigned char> workspace(workspace_bytes);
    std::vector<float> out(n);
    for (const Config& cfg : configs) {
      ScanArgs<float> args{.jac = J.p, .delta = r.p, .head = nullptr, .batch = batch,
                           .time = time, .channels = channels, .reverse = cfg.reverse,
                           .tiling = {cfg.algorithm, cfg.chunk}};
      ScanResult res;
      res.algorithm = cfg.algorithm == ScanAlgorithm::single_pass ? "single_pass" : "three_phase";
      res.reverse = cfg.reverse;
      res.chunk = cfg.chunk;
      res.ms = median_ms_on(stream, warmup, runs,
          [&] { check(cudaMemcpyAsync(r.p, r0.p, r0.bytes(), cudaMemcpyDeviceToDevice, stream), "restore r"); },
          [&] {
            check(pararnn::kernels::launch_scan_affine<1, float>(args, workspace.p, workspace.n, stream),
                  "launch_scan_affine");
          });
      check(cudaStreamSynchronize(stream), "scan");
      check(cudaMemcpy(out.data(), r.p, r.bytes(), cudaMemcpyDeviceToHost), "download δ");
      const std::vector<double>& ref = cfg.reverse ? ref_rev : ref_fwd;
      double err = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double d = std::fabs(static_cast<double>(out[i]) - ref[i]);
        err = std::isnan(d) ? INFINITY : std::max(err, d);
      }
      res.max_abs_error = err;
      res.tb_per_s = 12.0 * static_cast<double>(n) / (res.ms * 1e-3) / 1e12;
      scans.push_back(res);
    }
  }

  // The sequential GRU-diag kernel at S1.
  double sequential_ms = 0, sequential_max_abs_error = 0;
  {
    using Gru = pararnn::cells::GruDiagMath;
    constexpr int kGates = Gru::kGates, kRec = Gru::kRecurrent;
    DeviceArray<float> wx(n * kGates), rec(static_cast<std::size_t>(kRec * channels)), H(n);
    fill(wx, 3, -2.0f, 2.0f, false);
    fill(rec, 4, -0.5f, 0.5f, false);
    pararnn::kernels::SequentialArgs<float> args{.wx = wx.p, .recurrent = rec.p, .H = H.p,
                                                 .batch = batch, .time = time, .channels = channels};
    sequential_ms = median_ms_on(stream, 1, std::max(10, runs / 2), [] {}, [&] {
      check(pararnn::kernels::launch_sequential_apply<Gru, float>(args, stream),
            "launch_sequential_apply");
    });
    check(cudaStreamSynchronize(stream), "sequential");
    // Check 16 chains against the host loop with the same cell math.
    std::vector<float> hwx(wx.n), hrec(rec.n), hH(H.n);
    check(cudaMemcpy(hwx.data(), wx.p, wx.bytes(), cudaMemcpyDeviceToHost), "download wx");
    check(cudaMemcpy(hrec.data(), rec.p, rec.bytes(), cudaMemcpyDeviceToHost), "download rec");
    check(cudaMemcpy(hH.data(), H.p, H.bytes(), cudaMemcpyDeviceToHost), "download H");
    for (std::int64_t chain = 0; chain < batch * channels; chain += std::max<std::int64_t>(1, batch * channels / 16)) {
      const std::int64_t b = chain / channels, c = chain % channels;
      float r3[kRec];
      for (int k = 0; k < kRec; ++k) r3[k] = hrec[static_cast<std::size_t>(k * channels + c)];
      float h = 0;
      for (std::int64_t t = 0; t < time; ++t) {
        float w[kGates];
        for (int g = 0; g < kGates; ++g)
          w[g] = hwx[static_cast<std::size_t>((b * time + t) * kGates * channels + g * channels + c)];
        float h_new;
        Gru::step(r3, w, &h, &h_new, static_cast<float*>(nullptr));
        h = h_new;
        const double d = std::fabs(static_cast<double>(hH[static_cast<std::size_t>((b * time + t) * channels + c)]) - h);
        sequential_max_abs_error = std::isnan(d) ? INFINITY : std::max(sequential_max_abs_error, d);
      }
    }
  }

  std::printf("{\n  \"schema_version\": 1,\n  \"benchmark\": \"pararnn_bench_scan\",\n");
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("  \"gpu\": \"%s\", \"sm_count\": %d, \"cuda_runtime\": %d, \"cuda_driver\": %d, \"date\": \"%s\",\n",
              prop.name, prop.multiProcessorCount, runtime_version, driver_version, date);
  std::printf("  \"shape\": {\"batch\": %lld, \"channels\": %lld, \"time\": %lld, \"chains\": %lld},\n",
              static_cast<long long>(batch), static_cast<long long>(channels),
              static_cast<long long>(time), static_cast<long long>(batch * channels));
  std::printf("  \"runs\": %d, \"warmup\": %d,\n", runs, warmup);
  std::printf("  \"copy\": {\"bytes\": %zu, \"ms\": %.4f, \"tb_per_s\": %.4f},\n", copy_bytes,
              copy_ms, copy_tb_per_s);
  std::printf("  \"scan_f32_diag\": [\n");
  for (std::size_t i = 0; i < scans.size(); ++i) {
    const ScanResult& s = scans[i];
    std::printf("    {\"algorithm\": \"%s\", \"reverse\": %s, \"chunk\": %lld, \"ms\": %.4f, "
                "\"effective_tb_per_s\": %.4f, \"ratio_to_copy\": %.4f, \"max_abs_error\": %.3e}%s\n",
                s.algorithm.c_str(), s.reverse ? "true" : "false", static_cast<long long>(s.chunk),
                s.ms, s.tb_per_s, s.tb_per_s / copy_tb_per_s, s.max_abs_error,
                i + 1 < scans.size() ? "," : "");
  }
  std::printf("  ],\n");
  std::printf("  \"sequential_gru_diag_f32\": {\"ms\": %.4f, \"max_abs_error_16_chains\": %.3e}\n",
              sequential_ms, sequential_max_abs_error);
  std::printf("}\n");
  cudaStreamDestroy(stream);
  return 0;
}
