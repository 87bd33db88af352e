// The cheap diagnosis (issue 45, item 2's production form): how an error grows along a trajectory
// the solver itself produced, and how far its App. A guess starts from it, with no oracle, so that
// a user can predict the Newton iterations a recurrence needs from a solution they already have
// (the previous training step's, or this solve's). contracts/predicted_k.hpp turns it into a
// predicted K (predict_k_from_iterate); the oracle-based estimate (reference/lyapunov.hpp) is the
// same quantities along the oracle's trajectory from automatic differentiation.
//
// Per unit (a (chain, channel) pair: a chain is a batch row, or a packed segment):
//   g_t     = log|J_t| (one slot) or Benettin's power iteration over the channel's S x S block
//             (v <- J_t v, g_t = log ||v||_2, v <- v / ||v||_2, from v = (1, ..., 1)/sqrt(S) at
//             the chain's head), J_t the production cell's Jacobian of step t at the state
//             before it as H holds it (h0, or zeros, at a chain's head), in the compute type;
//   exponent = (1/L) sum_t g_t over the unit's L steps;
//   stretch  = the largest sum of g_t over min(window, L) consecutive steps;
//   guess_error = max_t max_s |f(guess state, x_t) - H_t|: the App. A guess's distance from H.
// Guarantees: the per-channel cells, host tensors, every storage dtype (computed in its compute
// type, summed in double); a non-finite H, Jacobian entry or growth (log 0 included) gives no
// summary number (`finite` false, `reason` naming the unit and step), never a number from a NaN.
// Refused (ContractViolation naming the argument): H not of the trajectory shape or not of the
// cell's dtype or not on the host, window < 1, and every rule newton_apply applies to x, h0 and
// cu_seqlens (the same plan); (UnsupportedPath): ApplyOptions::parameters (the CPU rows do not
// read them), and a row other than the CPU per-channel one: a cell outside the per-channel family
// ("the cpu <family> row does not serve iterate_growth"), device tensors (the CUDA row's refusal,
// or the plan's "scan_backend=cuda: ..." where no CUDA device or kernel can take the cell).
// Cost: one residual-and-Jacobian pass over H (as one Newton iteration's) plus an S x S product
// per step and channel; every unit is used (no sampling). Example:
//   const Tensor H = newton_apply(cell, x);
//   const IterateGrowth g = iterate_growth(cell, x, H);
//   if (g.finite) fmt::print("lambda max {} stretch {}\n", g.max_exponent, g.max_stretch);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pararnn/cells/cell.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {

struct IterateGrowthUnit {
  std::string chain;  // "b=3,channel=17" or "segment=2,channel=5" (the oracle estimate's names)
  std::int64_t steps = 0;
  double exponent = 0.0;
  double stretch = 0.0;
  double guess_error = 0.0;
};

struct IterateGrowth {
  std::string method;  // "exact log|J| per channel" or "Benettin per channel block"
  std::int64_t block = 0;   // S, the channel block's size
  std::int64_t window = 0;  // as requested
  std::vector<IterateGrowthUnit> units;  // every (chain, channel), chains in order
  double max_exponent = 0.0;
  double max_stretch = 0.0;
  std::string max_stretch_chain;
  double max_guess_error = 0.0;
  bool finite = true;
  std::string reason;
};

[[nodiscard]] IterateGrowth iterate_growth(const Cell& cell, const TensorView& x, const TensorView& H,
                                           const ApplyOptions& options = {}, std::int64_t window = 64);

}  // namespace pararnn
