// The registry of production cells: the table of every CellSpec (one per (cell, mix, gate_mix)),
// the lookups by kind and by the names a case file or a command line uses, and the dispatch from
// a kind to its math struct. An unknown name or mix is refused with a ContractViolation naming
// the argument and listing what is known. The per-channel dispatch derives from the one cell
// list (cell_list.hpp). Host only (the math structs it dispatches to are host + device).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "pararnn/cells/cell_list.hpp"
#include "pararnn/cells/gru_head.hpp"
#include "pararnn/cells/hopfield.hpp"
#include "pararnn/cells/slstm_head.hpp"
#include "pararnn/cells/spec.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {

const std::vector<CellSpec>& cell_specs();

const CellSpec& cell_spec(CellKind kind);

// The first spec of that name (for "gru": mix 'diag'); an unknown name is refused, naming
// `argument` and listing the known cells.
const CellSpec& cell_spec(std::string_view name, std::string_view argument = "cell");

// The spec of (cell, mix, gate_mix). A cell with a single mix also accepts "diag" (the default
// when a case names no mix) for it; gate_mix selects among ParaCfC's specs and is ignored by
// cells that have none (Cell refuses a gate_mix other than "input" for them).
const CellSpec& cell_spec(std::string_view name, std::string_view mix, std::string_view argument,
                          std::string_view gate_mix = "input");

// Whether every spec of `name` has the same mix (Hopfield, RWKV-7, M2RNN): such a cell also
// answers to mix "diag".
bool has_single_mix(std::string_view name);

// The label of a spec, the one name of a (cell, mix, gate_mix) that tests and property tests
// use: the cell's name for its first spec, "name:gate_mix" for another ParaCfC gate_mix
// ("cfc:diag_h", the label of cell_list.hpp) and "name:mix" for another mix ("gru:head",
// "slstm:dense"). Tests take their cell lists from cell_specs() through it, a subset by a
// property of the spec (its JacobianClass, picard, ...), never by names.
std::string cell_label(const CellSpec& spec);

// Calls `f.template operator()<CellMath>()` with the per-channel math struct of `kind`: the one
// cell dispatch of the project.
template <class F>
decltype(auto) dispatch_cell(CellKind kind, F&& f) {
  switch (kind) {
#define PARARNN_DISPATCH_CELL(kind_name, Math, label, min_chains) \
  case CellKind::kind_name: return f.template operator()<cells::Math>();
    PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_DISPATCH_CELL)
#undef PARARNN_DISPATCH_CELL
    default: break;
  }
  throw UnsupportedPath(fmt::format("cell '{}' (mix '{}') has a {} Jacobian: it has no per-channel math",
                                    cell_spec(kind).name, cell_spec(kind).mix,
                                    cell_spec(kind).jacobian == JacobianClass::dense ? "dense" : "matrix-map"));
}

// Calls `f.template operator()<DenseMath>()` with the dense-chain math struct of `kind`
// (JacobianClass::dense cells).
template <class F>
decltype(auto) dispatch_dense_cell(CellKind kind, F&& f) {
  switch (kind) {
    case CellKind::gru_head: return f.template operator()<cells::GruHeadMath>();
    case CellKind::hopfield: return f.template operator()<cells::HopfieldMath>();
    case CellKind::slstm_head:
    case CellKind::slstm_dense: return f.template operator()<cells::SlstmHeadMath>();
    default: break;
  }
  throw UnsupportedPath(fmt::format("cell '{}' has a per-channel Jacobian: it has no dense-chain math",
                                    cell_spec(kind).name));
}

}  // namespace pararnn
