// Why a case is hard before solving it (issue 45, item 1): the largest Lyapunov exponent λ̂ of
// the recurrence along the oracle's trajectory, and the finite-time stretch, from the oracle's
// own step Jacobians (automatic differentiation, never the production cells' formulas).
//
// What is estimated, per unit (a chain: a batch row or a packed segment; for the cells whose
// channels never mix, each (chain, channel) pair is its own unit, since the Jacobian is
// block-diagonal over channels):
//   g_t = the log growth of step t: log|J_t| for a 1x1 block (one-slot diagonal cells: exact);
//         for a block of slots (LSTM, sLSTM) or a dense Jacobian (head, Hopfield, RWKV-7, M²RNN):
//         Benettin's power iteration, v ← J_t v, g_t = log‖v‖₂, v ← v/‖v‖₂ every step, from
//         v = (1, ..., 1)/√n at the chain's head;
//   λ̂     = (1/L) Σ_t g_t over the chain's L steps (the sum in float128, so that a constant
//         growth g gives exactly g);
//   stretch = the largest Σ g_t over W consecutive steps (W = min(window, L)): what an error made
//         at one step has become W steps later (the log of that factor; for Benettin units the
//         growth of the tracked direction, a lower bound of the worst direction's);
//   guess error = max_t |f(0, x_t) − H_t| over the unit's values (t past the chain's head): how
//         far the solver's App. A guess starts from the answer (one more step without derivatives).
// The Jacobian at step t is taken at the oracle's state before it: h0 (or zeros) at a chain's
// head (every packed segment start), else H[t-1] as the oracle's f64 trajectory holds it.
//
// Cost: one forward-mode AD step per chain-step, carrying `slots` derivatives for the
// channel-independent cells (their per-channel blocks by Jacobian compression: every channel of a
// slot is seeded in one direction, exact because channels never mix) and slots·d_h derivatives
// plus an N² product (N = slots·d_h) for the others; at most `chains` chains are used (all when
// the case has no more), chosen by a seeded sample. Example:
//   const Case c = read_case("case.safetensors");
//   const OracleResult r = oracle_sequential(c);
//   const LyapunovEstimate e = oracle_lyapunov(c, r, {.window = 64, .chains = 16});
//   if (!e.finite) throw std::runtime_error(e.reason);   // never a number from a NaN
//   fmt::print("λ̂ max {} median {} positive {}\n", e.max_exponent, e.median_exponent,
//              e.fraction_positive);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pararnn/core/case_file.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {

struct LyapunovOptions {
  // W of the finite-time stretch: 64 steps, a typical Newton chunk and long enough for the
  // per-step noise of g_t to average out; a chain shorter than W uses its length.
  std::int64_t window = 64;
  // Chains (rows or segments) used at most; a case with more is sampled by `seed`.
  std::int64_t chains = 64;
  std::uint64_t seed = 0;
  // Called every 1024 steps of each chain on the OpenMP threads (thread-safe); what it throws
  // stops the estimate and propagates (a caller's time budget). Empty: never called.
  std::function<void()> poll;
};

struct LyapunovUnit {
  std::string chain;     // "b=3", "segment=2", "b=3,channel=17" (describe_chain's names)
  std::int64_t steps = 0;
  double exponent = 0.0;  // λ̂ of the unit
  double stretch = 0.0;   // largest Σ g_t over its window
  // max_t |H⁽⁰⁾_t − H_t| over the unit's values: the error of the solver's App. A guess
  // H⁽⁰⁾_t = f(0, x_t) (exact at the chain's head, where it starts from h0), in the oracle's
  // type: the e₀ of the predicted K (contracts/predicted_k.hpp); +inf where the guess is not finite
  // (then that unit gets no predicted K; its exponent and stretch stand).
  double guess_error = 0.0;
};

struct LyapunovEstimate {
  std::string method;     // "exact log|J| per channel", "Benettin per channel block", "Benettin dense"
  std::int64_t block = 0; // size of the Jacobian block of one unit (1, slots, or slots·d_h)
  std::int64_t window = 0;           // W as requested (each unit uses min(W, its length))
  std::int64_t chains_total = 0;     // chains of the case
  std::int64_t chains_used = 0;      // chains sampled
  bool all_chains = false;
  std::vector<std::string> chains;   // the chains used, in order
  std::vector<LyapunovUnit> units;   // one per chain, or per (chain, channel)
  std::int64_t jacobian_steps = 0;   // AD steps taken
  // Summary over the units (only meaningful when finite).
  double max_exponent = 0.0;
  double median_exponent = 0.0;  // the mean of the two middle values for an even count
  double fraction_positive = 0.0;
  double max_stretch = 0.0;
  std::string max_stretch_chain;
  double max_guess_error = 0.0;
  // False when the trajectory, a Jacobian entry or a growth is not finite (a zero growth, log 0,
  // included): then no summary number is given and `reason` says where and why.
  bool finite = true;
  std::string reason;
};

// `trajectory` must be oracle_sequential(problem)'s result (f64 H of the case's trajectory shape);
// a different shape is refused with ContractViolation, as are window < 1 and chains < 1.
LyapunovEstimate oracle_lyapunov(const Case& problem, const OracleResult& trajectory,
                                 const LyapunovOptions& options = {});

}  // namespace pararnn::reference
