// launch_windowed_newton (kernels/windowed_newton.hpp): the kernel of windowed_newton.cuh at the
// production block shapes, the smallest that holds the window and the cell. All three run 4 steps
// per thread at 64 registers: with the time lanes scanned by shuffles, more lanes are cheap, and 4
// steps keep GRU f32 within 64 registers (LSTM f32 spills about 100 bytes, 1248 at 8 steps).
// Measured at S1, GRU f32, K = 3 by pararnn_bench_shapes --only windowed (2026-12-04, two runs):
// windows up to 256 run 8 channels × 16 warps × 4 steps, two 512-thread blocks per SM (2.20–2.21 ms
// against 2.38 at 16 × 32 × 4, one 1024-thread block: the other block runs while one waits at a
// barrier); up to 512, 8 × 32 × 4 (2.21–2.22 ms; 4 × 16 × 4 at two per SM 2.28); up to 1024,
// 4 × 32 × 4 (2.45 ms; 4 × 16 × 8 at two per SM 2.41: within 2 %, and 8 steps per thread is
// where LSTM spilled, so not taken). Blocks of 512 threads at one per SM were 4.0–4.4 ms.
// Every per-channel cell with 1 × 1 or 2 × 2 elements in float and double; a shape whose shared
// memory cannot hold the cell in T is not instantiated and the next larger one takes its windows
// (none at present: every 1 × 1 and 2 × 2 cell fits all three in f32 and f64).
// sLSTM's 4 × 4 cell is not instantiated (its solve starts from a Picard guess this kernel does
// not run): its windows are refused (windowed_newton_max_window 0).
#include "pararnn/cells/cell_list.hpp"
#include "pararnn/kernels/windowed_newton.hpp"
#include "windowed_newton.cuh"

namespace pararnn::kernels {
namespace {

using Window256 = detail::WindowedShape<8, 16, 4, 2>;
using Window512 = detail::WindowedShape<8, 32, 4>;
using Window1024 = detail::WindowedShape<4, 32, 4>;

template <class CellMath, class T, class Shape>
inline constexpr bool kInstantiated = CellMath::kSlots <= 2 && detail::kWindowedFits<CellMath, T, Shape>;

template <class CellMath, class T, class Shape>
constexpr std::int64_t window_if_it_fits() {
  return kInstantiated<CellMath, T, Shape> ? Shape::kWindow : 0;
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
  if constexpr (kInstantiated<CellMath, T, Window256>)
    if (a.window <= Window256::kWindow) return detail::run_windowed_newton<CellMath, T, Window256>(a, stream);
  if constexpr (kInstantiated<CellMath, T, Window512>)
    if (a.window <= Window512::kWindow) return detail::run_windowed_newton<CellMath, T, Window512>(a, stream);
  if constexpr (kInstantiated<CellMath, T, Window1024>)
    return detail::run_windowed_newton<CellMath, T, Window1024>(a, stream);
  return cudaErrorInvalidValue;
}

#define PARARNN_INSTANTIATE_WINDOWED(kind, Math, label, min_chains)                                                      \
  template std::int64_t windowed_newton_max_window<cells::Math, float>();                                    \
  template std::int64_t windowed_newton_max_window<cells::Math, double>();                                   \
  template cudaError_t launch_windowed_newton<cells::Math, float>(const WindowedNewtonArgs<float>&, cudaStream_t); \
  template cudaError_t launch_windowed_newton<cells::Math, double>(const WindowedNewtonArgs<double>&, cudaStream_t);
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_WINDOWED)
#undef PARARNN_INSTANTIATE_WINDOWED

}  // namespace pararnn::kernels
