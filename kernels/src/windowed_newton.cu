// launch_windowed_newton (kernels/windowed_newton.hpp): the kernel of windowed_newton.cuh at the
// production block shapes, the smallest that holds the window (measured at S1, GRU f32, K = 3 by
// pararnn_bench_shapes --only windowed: 16 channels × 32 warps × 8 steps, windows up to 512,
// was the fastest shape; a 256-step window runs half as many warps, a 1024-step one 8 channels).
// Every per-channel cell in float and double; a shape whose shared memory cannot hold the cell
// in T (LSTM's 2 × 2 elements in f64 beyond 16 × 16 × 8) is not instantiated and its windows are
// refused (windowed_newton_max_window).
#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/windowed_newton.hpp"
#include "windowed_newton.cuh"

namespace pararnn::kernels {
namespace {

using Window256 = detail::WindowedShape<16, 16, 8>;
using Window512 = detail::WindowedShape<16, 32, 8>;
using Window1024 = detail::WindowedShape<8, 32, 8>;

template <class CellMath, class T, class Shape>
constexpr std::int64_t window_if_it_fits() {
  return detail::kWindowedFits<CellMath, T, Shape> ? Shape::kWindow : 0;
}

template <class CellMath, class T, class Shape>
cudaError_t launch_if_it_fits(const WindowedNewtonArgs<T>& a, cudaStream_t stream) {
  if constexpr (detail::kWindowedFits<CellMath, T, Shape>) {
    return detail::run_windowed_newton<CellMath, T, Shape>(a, stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace

template <class CellMath, class T>
std::int64_t windowed_newton_max_window() {
  std::int64_t best = window_if_it_fits<CellMath, T, Window256>();
  if (const std::int64_t w = window_if_it_fits<CellMath, T, Window512>(); w > best) best = w;
  if (const std::int64_t w = window_if_it_fits<CellMath, T, Window1024>(); w > best) best = w;
  return best;
}

template <class CellMath, class T>
cudaError_t launch_windowed_newton(const WindowedNewtonArgs<T>& a, cudaStream_t stream) {
  if (a.window < 1 || a.window > windowed_newton_max_window<CellMath, T>()) return cudaErrorInvalidValue;
  if (a.window <= Window256::kWindow) return launch_if_it_fits<CellMath, T, Window256>(a, stream);
  if (a.window <= Window512::kWindow) return launch_if_it_fits<CellMath, T, Window512>(a, stream);
  return launch_if_it_fits<CellMath, T, Window1024>(a, stream);
}

#define PARARNN_INSTANTIATE_WINDOWED(kind, Math, label)                                                      \
  template std::int64_t windowed_newton_max_window<cells::Math, float>();                                    \
  template std::int64_t windowed_newton_max_window<cells::Math, double>();                                   \
  template cudaError_t launch_windowed_newton<cells::Math, float>(const WindowedNewtonArgs<float>&, cudaStream_t); \
  template cudaError_t launch_windowed_newton<cells::Math, double>(const WindowedNewtonArgs<double>&, cudaStream_t);
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_WINDOWED)
#undef PARARNN_INSTANTIATE_WINDOWED

}  // namespace pararnn::kernels
