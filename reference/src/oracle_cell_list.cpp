// The rows of the oracle's cell list (oracle_cell_list.hpp) and what derives from them: the
// selection of a case's row, its refusal messages, and the refusal of foreign constructor
// arguments. No Eigen or Boost here (a cheap translation unit).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "oracle_cell_list.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn::reference::detail {

const std::vector<OracleCellEntry>& oracle_cells() {
#define PARARNN_ORACLE_ENTRY(kind_, ...) OracleCellEntry{.kind = OracleCell::kind_, __VA_ARGS__},
  static const std::vector<OracleCellEntry> rows = {
      PARARNN_ORACLE_FOR_EACH_CELL(PARARNN_ORACLE_ENTRY)};
#undef PARARNN_ORACLE_ENTRY
  return rows;
}

const OracleCellEntry& oracle_cell(OracleCell kind) {
  return oracle_cells()[static_cast<std::size_t>(kind)];  // rows in enum order
}

namespace {

// "a", "a or b", "a, b or c".
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}

// The rows of one Python cell, in list order.
std::vector<const OracleCellEntry*> rows_of(std::string_view cell) {
  std::vector<const OracleCellEntry*> rows;
  for (const OracleCellEntry& row : oracle_cells()) {
    if (row.cell == cell) rows.push_back(&row);
  }
  return rows;
}

// "gru (mix diag or head), lstm, ..., cfc (gate_mix input or diag_h), ...": each cell once, with
// the mixes (or gate_mix values) that tell its rows apart.
std::string implemented_cells() {
  std::vector<std::string> seen;
  std::string out;
  for (const OracleCellEntry& row : oracle_cells()) {
    if (std::find(seen.begin(), seen.end(), row.cell) != seen.end()) continue;
    seen.push_back(row.cell);
    const std::vector<const OracleCellEntry*> rows = rows_of(row.cell);
    std::vector<std::string> mixes;
    std::vector<std::string> gate_mixes;
    for (const OracleCellEntry* r : rows) {
      if (!r->gate_mix.empty()) gate_mixes.push_back(r->gate_mix);
      for (const std::string& mix : r->mixes) {
        if (!mix.empty() && std::find(mixes.begin(), mixes.end(), mix) == mixes.end()) {
          mixes.push_back(mix);
        }
      }
    }
    out += (out.empty() ? "" : ", ") + row.cell;
    if (rows.size() > 1) {
      out += gate_mixes.size() > 1 ? " (gate_mix " + listed(gate_mixes) + ")"
                                   : " (mix " + listed(mixes) + ")";
    }
  }
  return out;
}

}  // namespace

const OracleCellEntry& select_cell(const Case& problem) {
  const std::vector<const OracleCellEntry*> rows = rows_of(problem.cell);
  if (rows.empty()) {
    throw ContractViolation("cell", "must be a cell the oracle implements: " + implemented_cells(),
                            problem.cell.empty() ? std::string("<empty>") : problem.cell);
  }
  const std::optional<std::string> mix = problem.meta("mix");
  std::vector<const OracleCellEntry*> by_mix;
  for (const OracleCellEntry* r : rows) {
    if (std::find(r->mixes.begin(), r->mixes.end(), mix.value_or("")) != r->mixes.end()) {
      by_mix.push_back(r);
    }
  }
  if (by_mix.empty()) throw ContractViolation("mix", rows.front()->mix_rule, mix.value_or(""));
  const OracleCellEntry* selected = by_mix.front();
  if (!selected->gate_mix.empty()) {
    const std::string gate_mix = problem.meta("gate_mix").value_or(selected->gate_mix);
    const auto it = std::find_if(by_mix.begin(), by_mix.end(), [&](const OracleCellEntry* r) {
      return r->gate_mix == gate_mix;
    });
    if (it == by_mix.end()) {
      std::vector<std::string> quoted;
      for (const OracleCellEntry* r : by_mix) quoted.push_back("'" + r->gate_mix + "'");
      throw ContractViolation(
          "gate_mix", fmt::format("must be {} for cell {}", listed(quoted), problem.cell), gate_mix);
    }
    selected = *it;
  }
  const std::optional<std::string> heads = problem.meta("n_heads");
  const bool heads_given = heads && !heads->empty() && *heads != "none";
  switch (selected->n_heads) {
    case HeadsRule::required:
      if (!heads_given) {
        throw ContractViolation(
            "n_heads", fmt::format("is required with cell {}, mix '{}'", problem.cell, *mix),
            heads ? *heads : std::string("<absent>"));
      }
      break;
    case HeadsRule::only_with_mix_head:
      if (heads_given && mix.value_or("") != "head") {
        throw ContractViolation("n_heads",
                                fmt::format("is only valid with mix 'head' (cell {}, mix {})",
                                            problem.cell, mix.value_or("diag")),
                                *heads);
      }
      break;
    case HeadsRule::refused:
      if (heads_given) {
        throw ContractViolation("n_heads", "is not an argument of cell " + problem.cell, *heads);
      }
      break;
    case HeadsRule::foreign:
    case HeadsRule::taken: break;
  }
  return *selected;
}

void refuse_foreign_arguments(const Case& problem, const OracleCellEntry& cell) {
  const bool heads = cell.n_heads == HeadsRule::required || cell.n_heads == HeadsRule::taken ||
                     (cell.n_heads == HeadsRule::only_with_mix_head &&
                      problem.meta("mix").value_or("") == "head");
  // Every constructor argument of some row, in the order a case is refused for them.
  for (const char* key : {"n_heads", "eps", "beta", "gate_mix", "time_bias_init", "k_dim", "v_dim"}) {
    const bool takes = std::string_view(key) == "n_heads"
                           ? heads
                           : std::find(cell.arguments.begin(), cell.arguments.end(), key) !=
                                 cell.arguments.end();
    if (!takes && problem.meta(key)) {
      throw ContractViolation(key, fmt::format("is not an argument of cell {} (mix {})", problem.cell,
                                               problem.meta("mix").value_or("absent")),
                              *problem.meta(key));
    }
  }
}

}  // namespace pararnn::reference::detail
