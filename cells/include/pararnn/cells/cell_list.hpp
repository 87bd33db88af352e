// The one list of the per-channel cells and of the storage types, from which the project's cell
// dispatch (dispatch_cell), the CUDA backend's cell set (kernels::kHasNewtonKernels), every
// kernel explicit-instantiation list and the typed test lists derive (STYLE 16: adding a
// per-channel cell is one line here plus its math). Host and device compilers read it.
//
// PARARNN_FOR_EACH_PER_CHANNEL_CELL(X) calls X(kind, Math, "label") for every per-channel cell:
// kind is its CellKind enumerator, Math its math struct in pararnn::cells, label its test label
// (a cell name, or "cfc:diag_h" for a ParaCfC gate_mix variant).
// Example:
//   #define INSTANTIATE(kind, Math, label) template void f<cells::Math>();
//   PARARNN_FOR_EACH_PER_CHANNEL_CELL(INSTANTIATE)
#pragma once

#include "pararnn/cells/cfc.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/titans.hpp"

#define PARARNN_FOR_EACH_PER_CHANNEL_CELL(X) \
  X(gru, GruDiagMath, "gru")                 \
  X(lstm, LstmMath, "lstm")                  \
  X(nlru, NlruMath, "nlru")                  \
  X(slstm, SlstmDiagMath, "slstm")           \
  X(cfc, CfcMath, "cfc")                     \
  X(cfc_diag_h, CfcDiagHMath, "cfc:diag_h")  \
  X(titans, TitansMath, "titans")
