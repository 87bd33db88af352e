// windowed_newton_entry.hpp's instantiations.
#include "windowed_newton_entry.hpp"

#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
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

template cudaError_t run_windowed_newton_at<cells::GruDiagMath, float>(int, const WindowedNewtonArgs<float>&);
template cudaError_t run_windowed_newton_at<cells::GruDiagMath, double>(int, const WindowedNewtonArgs<double>&);
template cudaError_t run_windowed_newton_at<cells::LstmMath, float>(int, const WindowedNewtonArgs<float>&);
template cudaError_t run_windowed_newton_at<cells::LstmMath, double>(int, const WindowedNewtonArgs<double>&);

}  // namespace pararnn::kernels::test
