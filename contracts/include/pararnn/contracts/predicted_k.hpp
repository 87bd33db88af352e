// A predicted K (issue 45, item 2): the smallest number of Newton updates after which the solver's
// trajectory agrees at τ, predicted from the recurrence's contraction along the oracle's
// trajectory, before any solve (docs/kstar.md, "The predicted K", has the derivation, the
// calibration and the validation table over the nightly plan).
//
// The model, per unit u (a (chain, channel) pair of a per-channel cell, else a chain):
//   e_{k+1} <= C_u e_k²      Newton on a recurrence: the error of update k+1 is the linear
//                            propagation (Σ of the products of the step Jacobians) of the
//                            quadratic remainder of update k;
//   C_u = c · m_u            m_u = Σ_{j<L} e^{j s} (s = the unit's stretch / its window, the
//                            worst finite-time log growth per step; L its length): the memory of
//                            the linear step, 1/(1 − e^s) for a contracting unit over a long chain;
//                            c the calibrated curvature constant (kCurvature);
//   e_0 = the unit's guess error (reference::LyapunovUnit::guess_error, the App. A guess's).
// Then e_k = (C e_0)^(2^k) / C, and K_u is the smallest k with e_k <= τ (0 when e_0 <= τ). When
// C e_0 > kBasin (1/2, Kantorovich's h <= 1/2) the guess is outside the quadratic basin and the
// model gives no number for u: near C e_0 = 1 the count of iterations is too sensitive to C.
// The case's K is the max over its units; no number when a unit has none (`reason` says which).
//
// Guarantees: a pure function of its arguments (no solver, no oracle here); never a number from
// a non-finite input; the same units in another order give the same answer.
// Example:
//   const PredictedK p = predict_k(estimate, /*tau=*/1e-4);
//   if (p.k) fmt::print("K predicted {}\n", *p.k); else fmt::print("{}\n", p.reason);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "pararnn/reference/lyapunov.hpp"
#include "pararnn/solver/iterate_growth.hpp"

namespace pararnn {

// c of the model and the basin's edge (docs/kstar.md, "The predicted K"). A first calibration on
// kstar rows that were not kept fitted c = 1/8; the property of kPredictedKMargin then found misses
// near the basin's edge (NLRU hard cases at C·e0 = 0.67 in bf16 and 0.92 in f32), so the shipped
// model takes c = 1/4 and a number only for C·e0 <= 1/2. The calibration in the tree
// (docs/kstar/calibration.json, scripts/kstar-calibration.py: 186 rows, 129 pairs in the quadratic
// phase) measures e_{k+1} / (e_k² m) from 6.8e-4 (CfC) to 0.17 (hard GRU), below 1/4.
inline constexpr double kCurvature = 0.25;
inline constexpr double kBasin = 0.5;

// The documented margin: on the campaign's init and hard classes the measured K* is at most the
// predicted K + this (the property PredictedK.NeverBelowTheMeasuredKstarOnInitAndHardCases). The
// misses by one are hard GRU and LSTM cases whose error at the predicted K is within 2x of τ (e.g.
// 2e-4 against 1e-4): the bound's constant is not tight enough to split them.
inline constexpr std::int64_t kPredictedKMargin = 1;

struct PredictedK {
  std::optional<std::int64_t> k;  // empty: outside the model (reason)
  std::string reason;
  // The deciding unit: the one with the largest K (or the first without a number).
  std::string unit;
  double rate = 0.0;          // s, log growth per step
  double memory = 0.0;        // m
  double guess_error = 0.0;   // e_0
  double basin = 0.0;         // C·e_0 (<= kBasin: inside the quadratic basin)
  double curvature = kCurvature;  // c used
  nlohmann::ordered_json to_json() const;
  // One line: "4 (C*e0 = 0.384 at b=1,channel=9: memory 2.43 steps, guess error 0.633)" or
  // "none (<reason>)": what the CLI and the report summary print after "predicted K: ".
  std::string describe() const;
};

// One unit's prediction (the model above) from its rate s, length L, guess error e_0 and τ.
PredictedK predict_unit_k(double rate, std::int64_t length, double guess_error, double tau,
                          double curvature = kCurvature);

// The case's: the max over the estimate's units. Requires a finite estimate (else no number).
PredictedK predict_k(const reference::LyapunovEstimate& estimate, double tau, double curvature = kCurvature);

// The cheap form (no oracle, for production use): the same model over iterate_growth's units,
// the rate, the memory and the guess error measured along a trajectory H the solver produced
// (solver/iterate_growth.hpp) instead of the oracle's. Its error against the oracle-based
// prediction over the nightly plan's K* tasks is in docs/kstar.md ("The cheap form"). Where
// iterate_growth does not apply (a cell outside the per-channel family, device tensors) the
// result has no number and its reason says why; what it refuses (H's shape or dtype, x, h0)
// propagates.
PredictedK predict_k_from_iterate(const Cell& cell, const TensorView& x, const TensorView& H,
                                  const ApplyOptions& options, double tau, double curvature = kCurvature);

// The same with what it was computed from: iterate_growth's result (empty where the cheap form
// does not apply, `predicted.reason` saying why) and τ. Its JSON (the Python module's
// predicted_k_from_trajectory): method, window, finite, reason, units (count), max_exponent,
// max_stretch, max_stretch_chain, max_guess_error, tau, predicted_k (PredictedK::to_json).
struct IteratePrediction {
  std::optional<IterateGrowth> growth;
  PredictedK predicted;
  double tau = 0.0;
  nlohmann::ordered_json to_json() const;
};
IteratePrediction predict_from_iterate(const Cell& cell, const TensorView& x, const TensorView& H,
                                       const ApplyOptions& options, double tau, std::int64_t window = 64,
                                       double curvature = kCurvature);

}  // namespace pararnn
