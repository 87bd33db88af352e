// launch_sequential_apply against the host loop running the same cell math (cell_test_support.hpp),
// every per-channel cell in every storage dtype (f16 and bf16: f32 steps, the state rounded to
// storage every step on both sides): batch rows, initial states, packed segments with one h0 row
// each, T = 1 as one cell step, and the Picard passes of sLSTM's guess.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cell_test_support.hpp"
#include "pararnn/kernels/sequential.hpp"

namespace pararnn::kernels::test {
namespace {

template <class Case>
class SequentialKernel : public ::testing::Test {};
TYPED_TEST_SUITE(SequentialKernel, StorageCellCases, CellCaseName);

template <class CellMath, class StorageT>
void expect_matches_host(const CellProblem<CellMath, StorageT>& p, const std::string& what) {
  SCOPED_TRACE(what);
  DeviceCellInputs<CellMath, StorageT> in(p);
  PARARNN_CUDA_OK(in.upload(p));
  const std::vector<StorageT> expected = host_sequential(p);
  DeviceBuffer<StorageT> d_H(expected.size());
  PARARNN_CUDA_OK(d_H.status());
  PARARNN_CUDA_OK(cudaMemset(d_H.get(), 0xff, d_H.bytes()));  // poison: NaN until written
  SequentialArgs<StorageT> args{.wx = in.wx.get(),
                                .recurrent = in.recurrent.get(),
                                .h0 = p.h0.empty() ? nullptr : in.h0.get(),
                                .h0_row = p.h0_row.empty() ? nullptr : in.h0_row.get(),
                                .head = p.head.empty() ? nullptr : in.head.get(),
                                .H = d_H.get(),
                                .batch = p.batch,
                                .time = p.time,
                                .channels = p.channels};
  PARARNN_CUDA_OK((launch_sequential_apply<CellMath, StorageT>(args, cudaStream_t{})));
  PARARNN_CUDA_OK(cudaDeviceSynchronize());
  std::vector<StorageT> actual;
  PARARNN_CUDA_OK(d_H.download(actual));
  expect_close(expected, actual, kKernelVsHostStorageTau<StorageT>, "H");
}

TYPED_TEST(SequentialKernel, MatchesHostLoop) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  std::uint64_t seed = test_seed(20260201);
  for (std::int64_t longest : {1, 2, 7, 129, 4097})
    for (bool with_h0 : {false, true}) {
      const std::int64_t time = std::min(longest, kComparableTime<CellMath>);
      const auto p = make_cell_problem<CellMath, StorageT>(2, time, 37, with_h0, false, ++seed);
      expect_matches_host(p, "T=" + std::to_string(time) + (with_h0 ? " h0" : " no h0"));
    }
}

TYPED_TEST(SequentialKernel, PackedSegmentsRestartFromTheirOwnH0Row) {
  using CellMath = typename TypeParam::CellMath;
  using StorageT = typename TypeParam::StorageT;
  const std::uint64_t seed = test_seed(20260202);
  for (bool with_h0 : {false, true}) {
    const auto p = make_cell_problem<CellMath, StorageT>(1, 3000, 33, with_h0, true, seed);
    expect_matches_host(p, with_h0 ? "packed, h0 per segment" : "packed, zero h0");
  }
}

template <class StorageT>
class PicardPass : public ::testing::Test {};
using PicardStorage = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PicardPass, PicardStorage);

// sLSTM's guess on the device: a zero-hidden pass, then a pass with the hidden slot frozen to
// the first one, each against the host loop with the same rule (fed the device's first pass,
// so that only one pass of rounding differences is compared).
TYPED_TEST(PicardPass, ZeroHiddenAndFrozenHiddenPassesMatchTheHostLoop) {
  using StorageT = TypeParam;
  using CellMath = cells::SlstmDiagMath;
  const std::uint64_t seed = test_seed(20260203);
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed, h0 per segment" : "two rows with h0");
    const auto p = make_cell_problem<CellMath, StorageT>(packed ? 1 : 2, 3000, 33, true, packed, seed);
    DeviceCellInputs<CellMath, StorageT> in(p);
    PARARNN_CUDA_OK(in.upload(p));
    const std::size_t n = static_cast<std::size_t>(p.batch * p.time * CellMath::kSlots * p.channels);
    DeviceBuffer<StorageT> first(n), second(n);
    PARARNN_CUDA_OK(first.status());
    PARARNN_CUDA_OK(second.status());
    SequentialArgs<StorageT> args{.wx = in.wx.get(), .recurrent = in.recurrent.get(), .h0 = in.h0.get(),
                                  .h0_row = p.h0_row.empty() ? nullptr : in.h0_row.get(),
                                  .head = p.head.empty() ? nullptr : in.head.get(), .H = first.get(),
                                  .batch = p.batch, .time = p.time, .channels = p.channels,
                                  .zero_hidden = true};
    PARARNN_CUDA_OK((launch_sequential_apply<CellMath, StorageT>(args, cudaStream_t{})));
    args.zero_hidden = false;
    args.frozen_hidden = first.get();
    args.H = second.get();
    PARARNN_CUDA_OK((launch_sequential_apply<CellMath, StorageT>(args, cudaStream_t{})));
    PARARNN_CUDA_OK(cudaDeviceSynchronize());
    std::vector<StorageT> zero_pass, frozen_pass;
    PARARNN_CUDA_OK(first.download(zero_pass));
    PARARNN_CUDA_OK(second.download(frozen_pass));
    expect_close(host_sequential(p, /*zero_hidden=*/true), zero_pass, kKernelVsHostTau<StorageT>,
                 "zero-hidden pass");
    expect_close(host_sequential(p, false, &zero_pass), frozen_pass, kKernelVsHostTau<StorageT>,
                 "frozen-hidden pass");
    // The passes differ from the plain recurrence (the test sees the modes at all).
    EXPECT_NE(host_sequential(p), frozen_pass);
  }
}

TEST(SequentialLauncher, RefusesMissingArraysAndAcceptsEmptyProblems) {
  SequentialArgs<float> args{.batch = 1, .time = 4, .channels = 4};
  EXPECT_EQ((launch_sequential_apply<cells::GruDiagMath, float>(args, cudaStream_t{})),
            cudaErrorInvalidValue);
  args.time = 0;
  EXPECT_EQ((launch_sequential_apply<cells::GruDiagMath, float>(args, cudaStream_t{})),
            cudaSuccess);
}

}  // namespace
}  // namespace pararnn::kernels::test
