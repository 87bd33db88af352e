// predict_k: the model of predicted_k.hpp, unit by unit.
#include "pararnn/contracts/predicted_k.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace pararnn {

namespace {

// m = Σ_{j<L} e^{j s}, without cancellation for s near 0 (expm1); +inf when it overflows.
double memory_of(double rate, std::int64_t length) {
  if (rate == 0.0) return static_cast<double>(length);
  return std::expm1(static_cast<double>(length) * rate) / std::expm1(rate);
}

}  // namespace

PredictedK predict_unit_k(double rate, std::int64_t length, double guess_error, double tau, double curvature) {
  PredictedK p;
  p.rate = rate;
  p.curvature = curvature;
  p.guess_error = guess_error;
  if (!std::isfinite(rate) || !std::isfinite(guess_error) || !(tau > 0.0) || length < 1 || !(curvature > 0.0)) {
    p.reason = fmt::format("no prediction from rate {}, length {}, guess error {}, tau {}", rate, length,
                           guess_error, tau);
    return p;
  }
  p.memory = memory_of(rate, length);
  const double C = curvature * p.memory;
  p.basin = guess_error == 0.0 ? 0.0 : C * guess_error;  // never inf * 0
  if (guess_error <= tau) {
    p.k = 0;
    return p;
  }
  if (!(p.basin <= kBasin)) {
    p.reason = fmt::format("outside the quadratic basin: C*e0 = {:.3g} > {:g} (memory {:.3g} steps at a log growth of "
                           "{:.3g} per step, guess error {:.3g})",
                           p.basin, kBasin, p.memory, rate, guess_error);
    return p;
  }
  // 2^k · log(C e0) <= log(C τ), both logs negative.
  const double needed = std::log(C * tau) / std::log(p.basin);
  std::int64_t k = 0;
  while (std::ldexp(1.0, static_cast<int>(k)) < needed && k < 64) ++k;
  p.k = k;
  return p;
}

PredictedK predict_k(const reference::LyapunovEstimate& estimate, double tau, double curvature) {
  if (!estimate.finite || estimate.units.empty()) {
    PredictedK p;
    p.reason = "no prediction: no finite lambda-hat estimate" + (estimate.reason.empty() ? "" : " (" + estimate.reason + ")");
    return p;
  }
  std::optional<PredictedK> worst;
  for (const reference::LyapunovUnit& u : estimate.units) {
    const std::int64_t window = std::max<std::int64_t>(1, std::min(estimate.window, u.steps));
    PredictedK p = predict_unit_k(u.stretch / static_cast<double>(window), u.steps, u.guess_error, tau, curvature);
    p.unit = u.chain;
    // No number beats any number; among numbers the largest K; ties: the larger basin, then the name.
    const auto rank = [](const PredictedK& q) { return q.k ? *q.k : std::int64_t{1} << 62; };
    if (!worst || rank(p) > rank(*worst) ||
        (rank(p) == rank(*worst) && (p.basin > worst->basin || (p.basin == worst->basin && p.unit < worst->unit))))
      worst = std::move(p);
  }
  if (!worst->k) worst->reason = worst->unit + ": " + worst->reason;
  return *worst;
}

IteratePrediction predict_from_iterate(const Cell& cell, const TensorView& x, const TensorView& H,
                                       const ApplyOptions& options, double tau, std::int64_t window,
                                       double curvature) {
  IteratePrediction out;
  out.tau = tau;
  out.predicted.curvature = curvature;
  if (cell.spec().jacobian != JacobianClass::per_channel) {
    out.predicted.reason =
        fmt::format("not computed: the cheap form covers the per-channel cells ('{}' is not one)", cell.name());
    return out;
  }
  if (x.device() != Device::cpu || H.device() != Device::cpu) {
    out.predicted.reason = "not computed: the cheap form reads host tensors";
    return out;
  }
  out.growth = iterate_growth(cell, x, H, options, window);
  // The oracle estimate's shape, so that one function (predict_k) ranks the units.
  reference::LyapunovEstimate e;
  e.method = out.growth->method;
  e.block = out.growth->block;
  e.window = out.growth->window;
  e.finite = out.growth->finite;
  e.reason = out.growth->reason;
  e.units.reserve(out.growth->units.size());
  for (const IterateGrowthUnit& u : out.growth->units)
    e.units.push_back({.chain = u.chain, .steps = u.steps, .exponent = u.exponent, .stretch = u.stretch,
                       .guess_error = u.guess_error});
  out.predicted = predict_k(e, tau, curvature);
  return out;
}

PredictedK predict_k_from_iterate(const Cell& cell, const TensorView& x, const TensorView& H,
                                  const ApplyOptions& options, double tau, double curvature) {
  return predict_from_iterate(cell, x, H, options, tau, 64, curvature).predicted;
}

namespace {
// A number, "inf" for an overflowed memory, null for what is not a number.
nlohmann::ordered_json number_or_text(double v) {
  if (std::isfinite(v)) return v;
  return std::isinf(v) && v > 0 ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(nullptr);
}
}  // namespace

std::string PredictedK::describe() const {
  if (!k) return fmt::format("none ({})", reason);
  return fmt::format("{} (C*e0 = {:.3g} at {}: memory {:.3g} steps, guess error {:.3g})", *k, basin, unit, memory,
                     guess_error);
}

nlohmann::ordered_json IteratePrediction::to_json() const {
  nlohmann::ordered_json j;
  if (growth) {
    j["method"] = growth->method;
    j["window"] = growth->window;
    j["finite"] = growth->finite;
    if (!growth->finite) j["reason"] = growth->reason;
    j["units"] = growth->units.size();
    j["max_exponent"] = growth->finite ? nlohmann::ordered_json(growth->max_exponent) : nlohmann::ordered_json(nullptr);
    j["max_stretch"] = growth->finite ? nlohmann::ordered_json(growth->max_stretch) : nlohmann::ordered_json(nullptr);
    j["max_stretch_chain"] = growth->max_stretch_chain;
    j["max_guess_error"] = growth->finite ? nlohmann::ordered_json(growth->max_guess_error) : nlohmann::ordered_json(nullptr);
  } else {
    j["method"] = nullptr;
  }
  j["tau"] = tau;
  j["predicted_k"] = predicted.to_json();
  return j;
}

nlohmann::ordered_json PredictedK::to_json() const {
  nlohmann::ordered_json j;
  j["k"] = k ? nlohmann::ordered_json(*k) : nlohmann::ordered_json(nullptr);
  if (!k) j["reason"] = reason;
  j["unit"] = unit;
  j["rate"] = number_or_text(rate);
  j["memory"] = number_or_text(memory);
  j["guess_error"] = number_or_text(guess_error);
  j["basin"] = number_or_text(basin);
  j["curvature"] = curvature;
  return j;
}

}  // namespace pararnn
