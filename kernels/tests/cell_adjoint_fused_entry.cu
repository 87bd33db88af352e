// cell_adjoint_fused_entry.hpp's instantiations.
#include "cell_adjoint_fused_entry.hpp"

#include "cell_adjoint_fused.cuh"
#include "pararnn/cells/cell_list.hpp"

namespace pararnn::kernels::test {

template <class CellMath, class T, int V>
cudaError_t run_fused_adjoint(const detail::FusedAdjointArgs<T>& a, void* workspace, std::size_t workspace_bytes) {
  return detail::run_fused_adjoint<CellMath, T, V, detail::SinglePassLimits<CellMath::kSlots>>(
      a, workspace, workspace_bytes, cudaStream_t{});
}

template <class CellMath, class T, int V>
std::size_t fused_adjoint_workspace_bytes(std::int64_t batch, std::int64_t time, std::int64_t channels) {
  return detail::fused_adjoint_workspace_bytes<CellMath, T, V, detail::SinglePassLimits<CellMath::kSlots>>(
      batch, time, channels);
}

template <class CellMath>
std::int64_t fused_adjoint_chunk() {
  using Shape = detail::SinglePassLimits<CellMath::kSlots>;
  return static_cast<std::int64_t>(Shape::kSteps) * Shape::kGroups;
}

#define PARARNN_FUSED_ADJOINT_ENTRY(CELL, T, V)                                                                   \
  template cudaError_t run_fused_adjoint<CELL, T, V>(const detail::FusedAdjointArgs<T>&, void*, std::size_t); \
  template std::size_t fused_adjoint_workspace_bytes<CELL, T, V>(std::int64_t, std::int64_t, std::int64_t);
#define PARARNN_FUSED_ADJOINT_CELL(kind, Math, label, min_chains)       \
  PARARNN_FUSED_ADJOINT_ENTRY(cells::Math, float, 1)         \
  PARARNN_FUSED_ADJOINT_ENTRY(cells::Math, double, 1)        \
  template std::int64_t fused_adjoint_chunk<cells::Math>();
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_FUSED_ADJOINT_CELL)
PARARNN_FUSED_ADJOINT_ENTRY(cells::GruDiagMath, float, 2)
#undef PARARNN_FUSED_ADJOINT_CELL
#undef PARARNN_FUSED_ADJOINT_ENTRY

}  // namespace pararnn::kernels::test
