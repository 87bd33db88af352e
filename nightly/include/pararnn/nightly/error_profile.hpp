// Where a solve leaves the true trajectory: |solver − oracle| and |sequential − oracle| along t
// (the maximum over batch rows and state entries at each step, binned to at most `max_points`
// points by the maximum of each bin), the first step that breaks τ, and the residual history.
// This is what the failure plots of a report and of a bug bundle draw, kept as data in the JSON.
// Example:
//   Json p = error_along_t(cell, problem, NewtonConfig{.max_iters = 1});
//   // {"t": [...], "solver": [...], "sequential": [...], "first_failing_t": 17, ...}
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/tensor.hpp"
#include "pararnn/solver/newton_config.hpp"

namespace pararnn::nightly {

// Per-step maxima of |a − b| over every axis but the time axis (axis 1), as doubles.
std::vector<double> max_abs_along_t(const TensorView& a, const TensorView& b);

// The first t at which some element of `actual` breaks |actual − expected| <= atol + rtol·|expected|
// (or is NaN), or -1.
std::int64_t first_failing_t(const TensorView& actual, const TensorView& expected, double atol, double rtol);

// Bins a per-step series to at most `max_points` (t, max over the bin) pairs, t the bin's
// first step.
nlohmann::ordered_json binned_series(const std::vector<double>& values, std::size_t max_points);

// Solves `problem` with `config` and the same-dtype sequential loop, runs the oracle
// (uncertified: the verdict's certified run is the report's; this is the picture), and returns
// {t, solver, sequential, first_failing_t, atol, rtol, residual_history, newton_iters, points}.
nlohmann::ordered_json error_along_t(const Cell& cell, const Case& problem, const NewtonConfig& config,
                                     std::size_t max_points = 256);

// The same picture for an external solver's trajectory `theirs` (its "solver" series; no
// residual history: a black box does not report one).
nlohmann::ordered_json external_error_along_t(const Case& problem, const TensorView& theirs,
                                              std::size_t max_points = 256);

}  // namespace pararnn::nightly
