// The CPU backend of the per-channel cells: App. A initial guess, Newton iterations with a
// batch x channel parallel scan, the implicit adjoint, and the same-dtype sequential loop, each
// the one Newton driver (newton/driver.hpp) over CpuSolver (cpu/per_channel_solver.hpp), one
// template per (cell math, storage dtype); the entry points are cpu/family_row.hpp's. The cell
// math itself lives in cells/ and is shared with the CUDA kernels.
#include "cpu/family_row.hpp"
#include "cpu/per_channel_solver.hpp"

namespace pararnn::detail {
namespace {

struct PerChannelFamily {
  template <class Body>
  static decltype(auto) with_solver(const Cell& cell, Body&& body) {
    return dispatch_solver(cell, [&]<class CellMath, class StorageT>() -> decltype(auto) {
      return body.template operator()<CpuSolver<CellMath, StorageT>>();
    });
  }
  // The backward's level-2 re-solve loses the caller's h0 (a planted fault; false in production).
  static bool stale_h0_recompute() { return PARARNN_FAULT_POINT("stale_h0_recompute"); }
};

// The common CPU row, and what only this family serves: the growth pass and the split over ranks.
constexpr FamilyBackend per_channel_row() {
  FamilyBackend row = cpu_family_row<PerChannelFamily>("cpu per_channel", nullptr);
  row.serves.bits |= Capabilities{Capability::iterate_growth, Capability::seq_parallel}.bits;
  row.iterate_growth = cpu_iterate_growth;
  row.seq_parallel = &kCpuSeqParallel;
  return row;
}

}  // namespace

const FamilyBackend kCpuPerChannel = per_channel_row();

}  // namespace pararnn::detail
