// windowed_newton_entry.hpp's instantiations.
#include "windowed_newton_entry.hpp"

#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "windowed_newton.cuh"

namespace pararnn::kernels::test {

using SmallShape = detail::WindowedShape<8, 4, 4>;

template <class CellMath, class T>
cudaError_t run_windowed_newton_small(const detail::WindowedNewtonArgs<T>& a) {
  return detail::run_windowed_newton<CellMath, T, SmallShape>(a, cudaStream_t{});
}

std::int64_t windowed_newton_small_window() { return SmallShape::kWindow; }

template cudaError_t run_windowed_newton_small<cells::GruDiagMath, float>(const detail::WindowedNewtonArgs<float>&);
template cudaError_t run_windowed_newton_small<cells::GruDiagMath, double>(const detail::WindowedNewtonArgs<double>&);
template cudaError_t run_windowed_newton_small<cells::LstmMath, float>(const detail::WindowedNewtonArgs<float>&);
template cudaError_t run_windowed_newton_small<cells::LstmMath, double>(const detail::WindowedNewtonArgs<double>&);

}  // namespace pararnn::kernels::test
