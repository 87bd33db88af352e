// Which per-channel cell maths the Newton kernels (cell_residual.hpp, sequential.hpp) are
// instantiated for: the one list the CUDA backend dispatches on and the CUDA tests select by.
// Every per-channel cell is among them (sLSTM-diag: the 4x4 scan, S = 4).
#pragma once

#include <type_traits>

#include "pararnn/cells/cfc.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/titans.hpp"

namespace pararnn::kernels {

template <class CellMath>
inline constexpr bool kHasNewtonKernels =
    std::is_same_v<CellMath, cells::GruDiagMath> || std::is_same_v<CellMath, cells::LstmMath> ||
    std::is_same_v<CellMath, cells::NlruMath> || std::is_same_v<CellMath, cells::TitansMath> ||
    std::is_same_v<CellMath, cells::CfcMath> || std::is_same_v<CellMath, cells::CfcDiagHMath> ||
    std::is_same_v<CellMath, cells::SlstmDiagMath>;

}  // namespace pararnn::kernels
