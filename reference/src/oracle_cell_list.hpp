// The oracle's own list of the cells it implements (internal to the oracle, never cells/: the
// oracle stays independent of production's cell_list.hpp and shares none of its names). Each row
// is one OracleCell: the Python cell and the mix / gate_mix that select it, the constructor
// arguments it takes, and the layout of its case (gate blocks, state slots, the input affines and
// the recurrent vectors under their state_dict names). The enum, the selection of a case's cell
// (oracle_cell_list.cpp), its refusal messages and the refusal of foreign constructor arguments all
// derive from it: adding a cell is one row here plus its reader (if its parameters are not
// affines and recurrent vectors) and its equations (oracle_cell_math.hpp).
//
// PARARNN_ORACLE_FOR_EACH_CELL(X) calls X(kind, designated initialisers of OracleCellEntry) for
// every row, in the order the refusal message of an unknown cell lists them. Rows of one Python
// cell are told apart by the mix (disjoint sets) and then by gate_mix; the first row of a cell
// holds the refusal of a mix no row of the cell takes, and its gate_mix is the default.
// Example:
//   #define PARARNN_ORACLE_NAME(kind, ...) #kind,
//   const char* names[] = {PARARNN_ORACLE_FOR_EACH_CELL(PARARNN_ORACLE_NAME)};
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// "" in .mixes stands for an absent mix (Case::meta reads "", "None" and "none" as absent).
#define PARARNN_ORACLE_W_X(gates) {"W_x.weight", "W_x.bias", gates}
#define PARARNN_ORACLE_FOR_EACH_CELL(X)                                                          \
  X(gru, .cell = "gru", .mixes = {"", "diag"},                                                   \
    .mix_rule = "the oracle implements cell gru with mix 'diag' or 'head' only",                 \
    .n_heads = HeadsRule::only_with_mix_head, .gates = 3,                                        \
    .affines = {PARARNN_ORACLE_W_X(3)}, .recurrent = {{"a_z"}, {"a_r"}, {"a_n"}})               \
  X(lstm, .cell = "lstm", .mixes = {"", "diag"},                                                 \
    .mix_rule = "cell lstm is diagonal (mix 'diag' or absent)", .gates = 3, .slots = 2,          \
    .affines = {PARARNN_ORACLE_W_X(3)},                                                          \
    .recurrent = {{"a_f"}, {"a_z"}, {"a_o"}, {"c_f"}, {"c_o"}})                                  \
  X(nlru, .cell = "nlru", .mixes = {"", "diag"},                                                 \
    .mix_rule = "cell nlru is diagonal (mix 'diag' or absent)", .gates = 2,                      \
    .affines = {PARARNN_ORACLE_W_X(2)}, .recurrent = {{"u"}})                                    \
  X(slstm, .cell = "slstm", .mixes = {"", "diag"},                                               \
    .mix_rule = "the oracle implements cell slstm with mix 'diag', 'head' or 'dense'",           \
    .n_heads = HeadsRule::only_with_mix_head, .arguments = {"eps"}, .gates = 4, .slots = 4,      \
    .affines = {PARARNN_ORACLE_W_X(4)}, .recurrent = {{"R", 4}})                                 \
  X(cfc, .cell = "cfc", .mixes = {"", "diag"},                                                   \
    .mix_rule = "cell cfc is diagonal (mix 'diag' or absent)", .gate_mix = "input",              \
    .arguments = {"gate_mix", "time_bias_init"}, .gates = 4,                                     \
    .affines = {PARARNN_ORACLE_W_X(2), {"W_b.weight", "W_b.bias", 1}}, .recurrent = {{"u"}},     \
    .time_channel = true)                                                                        \
  X(cfc_diag_h, .cell = "cfc", .mixes = {"", "diag"}, .gate_mix = "diag_h",                      \
    .arguments = {"gate_mix", "time_bias_init"}, .gates = 4,                                     \
    .affines = {PARARNN_ORACLE_W_X(2), {"W_b.weight", "W_b.bias", 1}},                           \
    .recurrent = {{"u"}, {"v"}}, .time_channel = true)                                           \
  X(titans, .cell = "titans", .mixes = {"", "diag"},                                             \
    .mix_rule = "cell titans is diagonal (mix 'diag' or absent)", .gates = 5,                    \
    .affines = {PARARNN_ORACLE_W_X(5)}, .recurrent = {{"u"}, {"r"}})                             \
  X(gru_head, .cell = "gru", .mixes = {"head"}, .n_heads = HeadsRule::required, .gates = 3,      \
    .affines = {PARARNN_ORACLE_W_X(3)}, .independent_channels = false)                           \
  X(hopfield, .cell = "hopfield", .mixes = {"", "dense", "diag"},                                \
    .mix_rule = "cell hopfield has the dense mix only ('dense' or absent)",                      \
    .n_heads = HeadsRule::refused, .arguments = {"beta"}, .gates = 2,                            \
    .affines = {PARARNN_ORACLE_W_X(2)}, .independent_channels = false)                           \
  /* slstm_head: ParaSLSTM mix 'head', and mix 'dense' as one head */                            \
  X(slstm_head, .cell = "slstm", .mixes = {"head", "dense"},                                     \
    .n_heads = HeadsRule::only_with_mix_head, .arguments = {"eps"}, .gates = 4, .slots = 4,      \
    .affines = {PARARNN_ORACLE_W_X(4)}, .independent_channels = false)                           \
  X(rwkv7, .cell = "rwkv7", .mixes = {"", "rwkv7", "diag"},                                      \
    .mix_rule = "cell rwkv7 has the rwkv7 mix only ('rwkv7' or absent)",                         \
    .n_heads = HeadsRule::taken, .gates = 6, .affines = {PARARNN_ORACLE_W_X(6)},                 \
    .independent_channels = false)                                                               \
  X(m2rnn, .cell = "m2rnn", .mixes = {"", "matrix", "diag"},                                     \
    .mix_rule = "cell m2rnn has no mix argument (absent, or 'matrix')",                          \
    .n_heads = HeadsRule::refused, .arguments = {"k_dim", "v_dim"}, .gates = 1,                  \
    .affines = {PARARNN_ORACLE_W_X(1)}, .independent_channels = false)

namespace pararnn {
struct Case;
}

namespace pararnn::reference::detail {

#define PARARNN_ORACLE_ENUMERATOR(kind, ...) kind,
enum class OracleCell : std::uint8_t { PARARNN_ORACLE_FOR_EACH_CELL(PARARNN_ORACLE_ENUMERATOR) };
#undef PARARNN_ORACLE_ENUMERATOR

// A recurrent parameter: a (d_h) vector (rows = 0), or a (rows, d_h) tensor of that many vectors.
struct RecurrentSpec {
  std::string name;
  int rows = 0;
};

// An nn.Linear of the input affine: `gates` blocks of d_h output rows.
struct AffineSpec {
  std::string weight;
  std::string bias;
  int gates = 0;
};

// How a cell treats the constructor argument n_heads. Selection (select_cell) refuses it where
// `refused`, requires it where `required`, and refuses it without mix 'head' where
// `only_with_mix_head`; `taken`: the cell's reader requires it; `foreign`: refused with the other
// constructor arguments the cell does not take (refuse_foreign_arguments).
enum class HeadsRule : std::uint8_t { foreign, refused, required, only_with_mix_head, taken };

// One row of PARARNN_ORACLE_FOR_EACH_CELL.
struct OracleCellEntry {
  OracleCell kind = OracleCell::gru;
  std::string cell;                // the Python cell (metadata "cell")
  std::vector<std::string> mixes;  // the mixes that select the row ("" for absent)
  std::string mix_rule;            // a cell's first row: why a mix no row takes is refused
  std::string gate_mix;            // the gate_mix that selects the row; "": not read
  HeadsRule n_heads = HeadsRule::foreign;
  std::vector<std::string> arguments;  // constructor arguments taken, besides n_heads and mix
  int gates = 0;                       // gate-input blocks; the affines' gates, plus cfc's Δt
  int slots = 1;
  std::vector<AffineSpec> affines;        // in row order; the first gives d_h
  std::vector<RecurrentSpec> recurrent;   // state_dict names, in order
  bool time_channel = false;              // cfc: x's last channel is Δt, not a feature
  bool independent_channels = true;       // diagonal: one channel of a chain is a chain
};

// The rows, in list order (oracle_cell_list.cpp).
const std::vector<OracleCellEntry>& oracle_cells();
const OracleCellEntry& oracle_cell(OracleCell kind);

// Which row of the list the case is: its cell, then its mix, then (cfc) its gate_mix. Refuses a
// cell, a mix or a gate_mix the oracle does not implement, and n_heads where the row's HeadsRule
// decides at selection (ContractViolation naming the argument; the messages list the rows).
const OracleCellEntry& select_cell(const Case& problem);

// A constructor argument of another cell is refused (the Python class would raise TypeError);
// "None" or "" count as absent (Case::meta). Checked in a fixed order, n_heads first.
void refuse_foreign_arguments(const Case& problem, const OracleCellEntry& cell);

// Every cell the oracle implements per channel (diagonal): channels never mix, so one channel of
// a chain is an independent chain.
inline bool channels_independent(OracleCell kind) { return oracle_cell(kind).independent_channels; }

}  // namespace pararnn::reference::detail
