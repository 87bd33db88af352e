// The fused adjoint (kernels/src/cell_adjoint_fused.cuh) against the backward's three launches
// (launch_cell_adjoint_jacobian, the reverse f64 launch_scan_affine, launch_cell_vjp; the scan
// three-phase here, an association independent of the fused kernel's, where production runs the
// single-pass one) on the same inputs, for every per-channel cell in both compute types, one
// sequence per row and packed with h0 rows, with and without h0: d_wx, ∇h0 and the recurrent
// sums per batch row. Both compute μ in double with the same per-element arithmetic and differ
// only by the scans' association and the order of the recurrent sums, so the bound is the
// compute type's trajectory τ from the table (kKernelVsHostTau), relative as expect_close takes it.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cell_adjoint_fused_entry.hpp"
#include "cell_test_support.hpp"
#include "pararnn/kernels/cell_vjp.hpp"
#include "pararnn/kernels/scan.hpp"

namespace pararnn::kernels::test {
namespace {

template <class T>
class CellAdjointFused : public ::testing::Test {};
TYPED_TEST_SUITE(CellAdjointFused, CellCases, CellCaseName);

// Σ over the time chunks of [b][chunk][r][c] partials: [b][r][c], chunks in order.
std::vector<double> per_row_sums(const std::vector<double>& partials, std::int64_t batch, std::int64_t chunks,
                                 std::int64_t width) {
  std::vector<double> out(static_cast<std::size_t>(batch * width), 0.0);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t k = 0; k < chunks; ++k)
      for (std::int64_t i = 0; i < width; ++i)
        out[static_cast<std::size_t>(b * width + i)] += partials[static_cast<std::size_t>((b * chunks + k) * width + i)];
  return out;
}

template <class CellMath, class ComputeT, int V>
void expect_fused_equals_three_launches(std::int64_t B, std::int64_t T, std::int64_t D, bool packed, bool with_h0,
                                        std::uint64_t seed) {
  constexpr int S = CellMath::kSlots, G = CellMath::kGates, R = CellMath::kRecurrent;
  const auto p = make_cell_problem<CellMath, ComputeT>(B, T, D, with_h0, packed, seed);
  const std::size_t n = static_cast<std::size_t>(B * T * S * D);
  std::vector<ComputeT> H(n), g(n);
  SplitMix64 rng(seed + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = rng.uniform(-1.0, 1.0);
    // sLSTM's normalizer (slot 1) is never negative in a true trajectory.
    const bool normalizer = std::is_same_v<CellMath, cells::SlstmDiagMath> && (static_cast<std::int64_t>(i) / D) % S == 1;
    H[i] = static_cast<ComputeT>(normalizer ? std::fabs(v) : v);
    g[i] = static_cast<ComputeT>(rng.uniform(-3.0, 3.0));
  }
  const std::int64_t h0_rows = with_h0 ? static_cast<std::int64_t>(p.h0.size()) / (S * D) : 0;
  DeviceCellInputs<CellMath, ComputeT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  DeviceBuffer<ComputeT> d_H(n), d_g(n), dwx_ref(n / S * G), dwx(n / S * G);
  DeviceBuffer<double> d_J(n * S), d_mu(n), dh0_ref(static_cast<std::size_t>(h0_rows * S * D)),
      dh0(static_cast<std::size_t>(h0_rows * S * D));
  const std::int64_t ref_chunks = vjp_partial_chunks(T), chunk = fused_adjoint_chunk<CellMath>(),
                     chunks = (T + chunk - 1) / chunk;
  DeviceBuffer<double> part_ref(static_cast<std::size_t>(B * ref_chunks * R * D)),
      part(static_cast<std::size_t>(B * chunks * R * D));
  const ScanArgs<double> scan{.jac = d_J.get(), .delta = d_mu.get(), .head = packed ? in.head.get() : nullptr,
                              .batch = B, .time = T, .channels = D, .reverse = true,
                              .tiling = {.algorithm = ScanAlgorithm::three_phase}};
  DeviceBuffer<unsigned char> scan_ws(scan_affine_workspace_bytes<S, double>(B, T, D, scan.tiling));
  DeviceBuffer<unsigned char> ws(fused_adjoint_workspace_bytes<CellMath, ComputeT, V>(B, T, D));
  for (cudaError_t e : {d_H.status(), d_g.status(), dwx_ref.status(), dwx.status(), d_J.status(), d_mu.status(),
                        dh0_ref.status(), dh0.status(), part_ref.status(), part.status(), scan_ws.status(), ws.status()})
    PARARNN_CUDA_OK(e);
  PARARNN_CUDA_OK(d_H.upload(H));
  PARARNN_CUDA_OK(d_g.upload(g));
  PARARNN_CUDA_OK(cudaMemset(dwx.get(), 0xff, dwx.bytes()));  // poison: NaN until written
  PARARNN_CUDA_OK(cudaMemset(part.get(), 0xff, part.bytes()));
  if (with_h0) {
    PARARNN_CUDA_OK(cudaMemset(dh0_ref.get(), 0, dh0_ref.bytes()));
    PARARNN_CUDA_OK(cudaMemset(dh0.get(), 0xff, dh0.bytes()));
  }
  const ComputeT* h0 = with_h0 ? in.h0.get() : nullptr;
  const std::int64_t* h0_row = packed && with_h0 ? in.h0_row.get() : nullptr;
  const std::uint8_t* head = packed ? in.head.get() : nullptr;

  const CellAdjointJacobianArgs<ComputeT> j{.wx = in.wx.get(), .recurrent = in.recurrent.get(), .h0 = h0,
                                            .h0_row = h0_row, .head = head, .H = d_H.get(), .grad_H = d_g.get(),
                                            .jac = d_J.get(), .mu = d_mu.get(), .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_OK((launch_cell_adjoint_jacobian<CellMath, ComputeT>(j, cudaStream_t{})));
  PARARNN_CUDA_OK((launch_scan_affine<S, double>(scan, scan_ws.get(), scan_ws.bytes(), cudaStream_t{})));
  const CellVjpArgs<ComputeT> v{.wx = in.wx.get(), .recurrent = in.recurrent.get(), .h0 = h0, .h0_row = h0_row,
                                .head = head, .H = d_H.get(), .mu = d_mu.get(), .d_wx = dwx_ref.get(),
                                .d_h0 = with_h0 ? dh0_ref.get() : nullptr, .d_rec_partials = part_ref.get(),
                                .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_OK((launch_cell_vjp<CellMath, ComputeT>(v, cudaStream_t{})));

  const detail::FusedAdjointArgs<ComputeT> a{.wx = in.wx.get(), .recurrent = in.recurrent.get(), .h0 = h0,
                                             .h0_row = h0_row, .head = head, .H = d_H.get(), .grad_H = d_g.get(),
                                             .d_wx = dwx.get(), .d_h0 = with_h0 ? dh0.get() : nullptr,
                                             .d_rec_partials = part.get(), .batch = B, .time = T, .channels = D};
  PARARNN_CUDA_OK((run_fused_adjoint<CellMath, ComputeT, V>(a, ws.get(), ws.bytes())));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());

  std::vector<ComputeT> want_dwx, got_dwx;
  std::vector<double> want_part, got_part, want_h0, got_h0;
  PARARNN_CUDA_OK(dwx_ref.download(want_dwx));
  PARARNN_CUDA_OK(dwx.download(got_dwx));
  PARARNN_CUDA_OK(part_ref.download(want_part));
  PARARNN_CUDA_OK(part.download(got_part));
  const double tau = kKernelVsHostTau<ComputeT>;
  expect_close(want_dwx, got_dwx, tau, "d_wx");
  expect_close(per_row_sums(want_part, B, ref_chunks, R * D), per_row_sums(got_part, B, chunks, R * D), tau,
               "recurrent sums per batch row");
  if (with_h0) {
    PARARNN_CUDA_OK(dh0_ref.download(want_h0));
    PARARNN_CUDA_OK(dh0.download(got_h0));
    expect_close(want_h0, got_h0, tau, "∇h0");
  }
}

TYPED_TEST(CellAdjointFused, EqualsTheThreeLaunchesWithinTau) {
  using CellMath = typename TypeParam::CellMath;
  using ComputeT = ComputeOf<typename TypeParam::StorageT>;
  std::uint64_t seed = test_seed(20261204);
  struct Variant {
    bool packed, with_h0;
  };
  for (const Variant v : {Variant{false, true}, Variant{true, true}, Variant{false, false}, Variant{true, false}}) {
    SCOPED_TRACE(std::string(v.packed ? "packed" : "one sequence per row") + (v.with_h0 ? ", h0" : ", no h0"));
    // T not a multiple of any chunk; D not a multiple of 32 (a partial channel tile). Packed
    // sequences are one batch row, as the solver requires (their heads and h0 rows are per row).
    expect_fused_equals_three_launches<CellMath, ComputeT, 1>(v.packed ? 1 : 3, v.packed ? 1500 : 333, 37, v.packed,
                                                              v.with_h0, ++seed);
  }
}

// Two channels per lane (the vector loads), GRU f32 at a width that V divides.
TEST(CellAdjointFusedWide, TwoChannelsPerLaneEqualTheThreeLaunches) {
  const std::uint64_t seed = test_seed(20261205);
  expect_fused_equals_three_launches<cells::GruDiagMath, float, 2>(1, 777, 96, /*packed=*/true, /*with_h0=*/true, seed);
  expect_fused_equals_three_launches<cells::GruDiagMath, float, 2>(3, 777, 96, /*packed=*/false, /*with_h0=*/true,
                                                                   seed + 1);
}

}  // namespace
}  // namespace pararnn::kernels::test
