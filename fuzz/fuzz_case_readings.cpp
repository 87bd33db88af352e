// libFuzzer target: a case file read through the production path (Cell::from_case and the
// solver's input rules) and the independent oracle's own parser. Claim (contracts/case_rules.hpp):
// refused by one reading <=> refused by the other, and checked_case accepts exactly when both do.
#include "fuzz_input.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  const auto path = fuzz::input_file(data, size, "case");
  Case problem;
  if (!fuzz::accepts([&] { problem = read_case(path); })) return 0;
  std::string production_message, oracle_message;
  const bool production = fuzz::accepts(
      [&] {
        const Cell cell = Cell::from_case(problem);
        ApplyOptions apply;
        if (problem.h0) apply.h0 = problem.h0->view();
        if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
        validate_apply_inputs(cell, problem.x, apply);
      },
      &production_message);
  const bool oracle = fuzz::accepts([&] { (void)reference::oracle_state_shape(problem); }, &oracle_message);
  PARARNN_FUZZ_EXPECT(production == oracle, "production " + std::string(production ? "accepts" : "refuses: ") +
                                                production_message + " / oracle " +
                                                (oracle ? "accepts" : "refuses: ") + oracle_message);
  const bool checked = fuzz::accepts([&] { (void)checked_case(problem); });
  PARARNN_FUZZ_EXPECT(checked == (production && oracle), "checked_case disagrees with the two readings");
  return 0;
}
