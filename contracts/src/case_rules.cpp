// checked_case and certification_failure (case_rules.hpp).
#include "pararnn/contracts/case_rules.hpp"

#include <fmt/format.h>

#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {
namespace {

// The first non-finite value among the tensors of the problem, as a sentence, or nothing.
std::optional<std::string> non_finite_input(const Case& problem) {
  if (auto where = describe_first_non_finite(problem.x, "x")) return where;
  if (problem.h0)
    if (auto where = describe_first_non_finite(*problem.h0, "h0")) return where;
  for (const auto& [name, tensor] : problem.parameters)
    if (auto where = describe_first_non_finite(tensor, fmt::format("parameter '{}'", name))) return where;
  if (problem.grad_H) return describe_first_non_finite(*problem.grad_H, "grad.H");
  return std::nullopt;
}

}  // namespace

Cell checked_case(const Case& problem) {
  const Cell cell = Cell::from_case(problem);
  ApplyOptions apply;
  if (problem.h0) apply.h0 = problem.h0->view();
  if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
  validate_apply_inputs(cell, problem.x, apply);
  (void)reference::oracle_state_shape(problem);  // the oracle's own reading
  if (problem.grad_H) {
    const Shape trajectory = cell.trajectory_shape(problem.x.size(0), problem.x.size(1));
    Shape one_slot = trajectory;
    if (cell.slots() == 1 && trajectory.size() == 3) one_slot.insert(one_slot.begin() + 2, 1);
    if (problem.grad_H->shape() != trajectory && problem.grad_H->shape() != one_slot)
      throw ContractViolation("grad.H", "must have the trajectory's shape " + shape_string(trajectory),
                              shape_string(problem.grad_H->shape()));
    if (const auto where = describe_first_non_finite(*problem.grad_H, "grad.H"))
      throw ContractViolation("grad.H", "must be finite (a non-finite cotangent makes every gradient non-finite)",
                              *where);
  }
  return cell;
}

std::optional<std::string> certification_failure(bool finite, double self_check_delta,
                                                 std::int64_t certified_chain_steps, const Case& problem,
                                                 std::string_view what) {
  const Tolerance limit = tolerance_for({.dtype = problem.dtype(), .metric = Metric::oracle_self_check,
                                         .cell = problem.cell});
  if (!finite) {
    const std::optional<std::string> input = non_finite_input(problem);
    return fmt::format("the oracle {} is not finite ({})", what,
                       input ? "the input is not finite: " + *input
                             : std::string("every input is finite: the recurrence overflows, or a harness failure"));
  }
  if (certified_chain_steps <= 0)
    return fmt::format("the oracle {} is not certified: no chain was re-run in the certifier type "
                       "(certify budget 0?)", what);
  if (!(self_check_delta <= limit.atol))
    return fmt::format("the oracle {} is not certified: its self-check delta {:.3e} is not far below tau "
                       "(limit {:.1e}, metric oracle_self_check)",
                       what, self_check_delta, limit.atol);
  return std::nullopt;
}

}  // namespace pararnn
