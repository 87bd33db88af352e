// The one list of the per-channel cells and of the storage types, from which the project's cell
// dispatch (dispatch_cell), the CUDA backend's cell set (kernels::kHasNewtonKernels), every
// kernel explicit-instantiation list and the typed test lists derive (STYLE 16: adding a
// per-channel cell is one line here plus its math). Host and device compilers read it.
//
// PARARNN_FOR_EACH_PER_CHANNEL_CELL(X) calls X(kind, Math, "label", min_chains_per_sm) for every
// per-channel cell: kind is its CellKind enumerator, Math its math struct in pararnn::cells, label
// its test label (a cell name, or "cfc:diag_h" for a ParaCfC gate_mix variant), and
// min_chains_per_sm the CUDA auto rule's threshold: the chains (B·d_h) per SM from which the
// sequential kernel beats the fused Newton solve at equal tokens (docs/cuda.md "The auto rule").
// The thresholds were measured on the H200 (bench/targets_bench.cpp "P6" crossover, 132 SMs,
// B 8, T 16384, d 256, f32, 2026-12-02): GRU 21.8, LSTM 14.9, NLRU 14.3, CfC 35.6, Titans 30.0;
// sLSTM 0.5 (its Newton solve starts with P + 1 sequential passes), kept at 1 so that a few
// hundred chains still run Newton; CfC diag_h takes CfC's (the same gates and one more product
// per step; not measured on its own).
// Example:
//   #define INSTANTIATE(kind, Math, label, min_chains) template void f<cells::Math>();
//   PARARNN_FOR_EACH_PER_CHANNEL_CELL(INSTANTIATE)
#pragma once

#include "pararnn/cells/cfc.hpp"
#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/cells/lstm.hpp"
#include "pararnn/cells/nlru.hpp"
#include "pararnn/cells/slstm_diag.hpp"
#include "pararnn/cells/titans.hpp"

#define PARARNN_FOR_EACH_PER_CHANNEL_CELL(X)    \
  X(gru, GruDiagMath, "gru", 21)                \
  X(lstm, LstmMath, "lstm", 14)                 \
  X(nlru, NlruMath, "nlru", 14)                 \
  X(slstm, SlstmDiagMath, "slstm", 1)           \
  X(cfc, CfcMath, "cfc", 35)                    \
  X(cfc_diag_h, CfcDiagHMath, "cfc:diag_h", 35) \
  X(titans, TitansMath, "titans", 30)
