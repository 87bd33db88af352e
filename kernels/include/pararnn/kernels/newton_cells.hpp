// Which per-channel cell maths the Newton kernels (cell_residual.hpp, sequential.hpp, cell_vjp.hpp,
// decode.hpp) are instantiated for: every cell of the one list (cells/cell_list.hpp), which the
// CUDA backend dispatches on and the CUDA tests select by.
#pragma once

#include <type_traits>

#include "pararnn/cells/cell_list.hpp"

namespace pararnn::kernels {

#define PARARNN_IS_LISTED_CELL(kind, Math, label, min_chains) || std::is_same_v<CellMath, cells::Math>
template <class CellMath>
inline constexpr bool kHasNewtonKernels = false PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_IS_LISTED_CELL);
#undef PARARNN_IS_LISTED_CELL

}  // namespace pararnn::kernels
