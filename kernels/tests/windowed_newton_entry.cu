// windowed_newton_entry.hpp's instantiations.
#include "windowed_newton_entry.hpp"

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/windowed_newton.hpp"
#include "windowed_newton.cuh"

namespace pararnn::kernels::test {

using Shape0 = detail::WindowedShape<8, 4, 4>;
using Shape1 = detail::WindowedShape<32, 32, 8>;
using Shape2 = detail::WindowedShape<4, 32, 8>;

// Shape's launch, or cudaErrorNotSupported where its shared memory cannot hold the cell in T.
template <class CellMath, class T, class Shape>
cudaError_t run_if_it_fits(const WindowedNewtonArgs<T>& a) {
  if constexpr (detail::kWindowedFits<CellMath, T, Shape>) {
    return detail::run_windowed_newton<CellMath, T, Shape>(a, cudaStream_t{});
  } else {
    return cudaErrorNotSupported;
  }
}

template <class CellMath, class T>
cudaError_t run_windowed_newton_at(int shape, const WindowedNewtonArgs<T>& a) {
  switch (shape) {
    case 0: return run_if_it_fits<CellMath, T, Shape0>(a);
    case 1: return run_if_it_fits<CellMath, T, Shape1>(a);
    case 2: return run_if_it_fits<CellMath, T, Shape2>(a);
    case kProductionLauncher: return launch_windowed_newton<CellMath, T>(a, cudaStream_t{});
    default: return cudaErrorInvalidValue;
  }
}

std::int64_t windowed_newton_window(int shape) {
  switch (shape) {
    case 0: return Shape0::kWindow;
    case 1: return Shape1::kWindow;
    case 2: return Shape2::kWindow;
    default: return 0;
  }
}

// Every per-channel cell the production launcher takes (kSlots <= 2: all but sLSTM, whose solve
// starts from a Picard guess this kernel does not run).
#define PARARNN_WINDOWED_TEST_ENTRY(Math)                                                                 \
  template cudaError_t run_windowed_newton_at<cells::Math, float>(int, const WindowedNewtonArgs<float>&); \
  template cudaError_t run_windowed_newton_at<cells::Math, double>(int, const WindowedNewtonArgs<double>&);
PARARNN_FOR_EACH_WINDOWED_TEST_CELL(PARARNN_WINDOWED_TEST_ENTRY)
#undef PARARNN_WINDOWED_TEST_ENTRY

#define PARARNN_AT_MOST_TWO_SLOTS(kind, Math, label, min_chains) +(cells::Math::kSlots <= 2 ? 1 : 0)
#define PARARNN_ONE(Math) +1
static_assert((0 PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_AT_MOST_TWO_SLOTS)) ==
                  (0 PARARNN_FOR_EACH_WINDOWED_TEST_CELL(PARARNN_ONE)),
              "PARARNN_FOR_EACH_WINDOWED_TEST_CELL must list every per-channel cell of at most two slots");
#undef PARARNN_AT_MOST_TWO_SLOTS
#undef PARARNN_ONE

}  // namespace pararnn::kernels::test
