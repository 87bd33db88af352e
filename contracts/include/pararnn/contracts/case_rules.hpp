// The rules every judging path applies to a case and to the oracle's answer, written once so
// that `verify`, `compare`, `oracle`, `solve` and the C++ API cannot drift apart:
//
// - `checked_case` reads the case the way the production solver does (Cell::from_case, the
//   solver's input rules for x, h0, cu_seqlens and packing) AND the way the independent oracle
//   does (its own parser), and refuses it unless both accept it; a cotangent grad.H must have
//   the trajectory's shape and be finite. A property test (property_tests/case_rules_properties)
//   shows that the two readings refuse the same generated malformed cases, so the second reading
//   is a guard, not the rule.
// - `certification_failure` is the oracle's certification rule (CONTRACT §2): its result is
//   the truth only when it is finite and its self-check delta is far below τ (NaN never
//   passes). Otherwise it says why, naming the input tensor that holds a non-finite value.
// Example:
//   const Case problem = read_case("case.safetensors");
//   const Cell cell = checked_case(problem);                 // throws on any refused input
//   const auto oracle = reference::oracle_sequential(problem, {...});
//   if (auto why = certification_failure(oracle.finite, oracle.self_check_delta,
//                                        oracle.certified_chain_steps, problem, "trajectory"))
//     ...  // Inconclusive / exit 2, never Agree
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/case_file.hpp"

namespace pararnn {

// The case's cell, after both readings accepted the case (ContractViolation or CaseFileError
// otherwise, naming the argument or tensor, the rule and the value).
Cell checked_case(const Case& problem);

// Why an oracle result (`what`: "trajectory" or "gradients") cannot be used as the truth for
// `problem`, or nothing when it is certified: finite, at least one chain-step re-run in the
// certifier type, and the self-check delta at most the oracle_self_check limit of the case's dtype.
std::optional<std::string> certification_failure(bool finite, double self_check_delta,
                                                 std::int64_t certified_chain_steps, const Case& problem,
                                                 std::string_view what);

}  // namespace pararnn
