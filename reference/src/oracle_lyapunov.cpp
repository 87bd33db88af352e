// λ̂ and the finite-time stretch along the oracle's trajectory (lyapunov.hpp): the step
// Jacobians by forward-mode AD over the oracle's own cell equations (oracle_math.hpp), in the
// oracle's primary type (double; float128 for f64 cases), the log growths summed in float128.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "oracle_math.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/lyapunov.hpp"

namespace pararnn::reference {
namespace detail {
namespace {

// The oracle's primary type of a storage dtype (oracle.cpp's rule: float128 for f64 cases).
template <class StorageT>
using LyapunovPrimaryOf =
    std::conditional_t<std::is_same_v<ComputeOf<StorageT>, double>, Float128, double>;

// One chain's step Jacobians, with the lifted parameters hoisted out of the step loop.
// compressed: a channel-independent cell, every channel of slot k seeded in direction k, so
// that derivative k of output (slot o, channel c) is J[(o, c), (k, c)] (channels never mix, so
// no other channel contributes); the result is [channel][out slot][in slot]. Otherwise the
// whole N×N Jacobian, row-major [out][in].
template <class Real>
class JacobianStepper {
 public:
  using Ad = Eigen::AutoDiffScalar<Vec<Real>>;

  JacobianStepper(const PreparedCase& problem, bool compressed)
      : p_(problem),
        compressed_(compressed),
        n_(problem.state_size()),
        directions_(compressed ? problem.slots : n_),
        recurrent_(lift_recurrent<Real>(problem, -1).template cast<Ad>()),
        affine_(problem, -1),
        x_(static_cast<std::size_t>(problem.d_in)),
        wx_(problem.gate_inputs(problem.d_h)),
        s_(n_),
        s_new_(n_),
        work_(problem.d_h) {}

  // The step at (b, t) from the zero state, without derivatives: the App. A guess H⁽⁰⁾_t = f(0, x_t)
  // away from a chain's head (state_size values).
  void guess(std::int64_t b, std::int64_t t, std::vector<double>& h_new) {
    lift_x(p_, b, t, 1, x_.data());
    affine_.apply(x_.data(), wx_);
    fill_derived_gates<Real>(p_, p_.d_h, x_.data(), wx_);
    const Vec<Ad> wx = wx_.template cast<Ad>();
    for (Index i = 0; i < n_; ++i) s_(i) = Ad(Real(0));
    cell_step(recurrent_, wx, s_, s_new_, work_);
    h_new.resize(static_cast<std::size_t>(n_));
    for (Index i = 0; i < n_; ++i) h_new[static_cast<std::size_t>(i)] = to_double(s_new_(i).value());
  }

  // Jacobian entries of the step at (b, t) from h_prev (state_size values).
  void step(std::int64_t b, std::int64_t t, const double* h_prev, std::vector<double>& jacobian) {
    lift_x(p_, b, t, 1, x_.data());
    affine_.apply(x_.data(), wx_);
    fill_derived_gates<Real>(p_, p_.d_h, x_.data(), wx_);
    const Vec<Ad> wx = wx_.template cast<Ad>();
    for (Index i = 0; i < n_; ++i) {
      s_(i) = Ad(Real(h_prev[i]), static_cast<int>(directions_),
                 static_cast<int>(compressed_ ? i / p_.d_h : i));
    }
    cell_step(recurrent_, wx, s_, s_new_, work_);
    const Index d = p_.d_h, slots = p_.slots;
    jacobian.assign(static_cast<std::size_t>(compressed_ ? d * slots * slots : n_ * n_), 0.0);
    for (Index i = 0; i < n_; ++i) {
      const auto& derivatives = s_new_(i).derivatives();  // empty: independent of the state
      for (Index k = 0; k < derivatives.size(); ++k) {
        const std::size_t at = compressed_
                                   ? static_cast<std::size_t>(((i % d) * slots + i / d) * slots + k)
                                   : static_cast<std::size_t>(i * n_ + k);
        jacobian[at] = to_double(derivatives(k));
      }
    }
  }

 private:
  const PreparedCase& p_;
  bool compressed_;
  Index n_, directions_;
  RecurrentDiagonals<Ad> recurrent_;
  InputAffine<Real> affine_;
  std::vector<double> x_;
  Vec<Real> wx_;
  Vec<Ad> s_, s_new_;
  StepWork<Ad> work_;
};

// The running λ̂ and stretch of one unit: Σ g_t and the window sums in float128 (a constant
// growth g gives exactly L·g and W·g, so λ̂ = g and stretch = fl(W·g)), the last W growths in a
// ring.
class GrowthAccumulator {
 public:
  explicit GrowthAccumulator(std::int64_t window) : ring_(static_cast<std::size_t>(window)) {}
  void add(double g) {
    total_ += g;
    window_sum_ += g;
    const std::size_t slot = static_cast<std::size_t>(count_ % static_cast<std::int64_t>(ring_.size()));
    if (count_ >= static_cast<std::int64_t>(ring_.size())) window_sum_ -= ring_[slot];
    ring_[slot] = g;
    ++count_;
    if (count_ >= static_cast<std::int64_t>(ring_.size()) && (!seen_ || window_sum_ > best_)) {
      best_ = window_sum_;
      seen_ = true;
    }
  }
  void add_guess_error(double e) { guess_error_ = std::max(guess_error_, e); }
  double guess_error() const { return guess_error_; }
  double exponent() const { return static_cast<double>(total_ / Float128(count_)); }
  // A chain shorter than the window: its whole sum.
  double stretch() const { return static_cast<double>(seen_ ? best_ : window_sum_); }
  std::int64_t steps() const { return count_; }

 private:
  std::vector<double> ring_;
  Float128 total_ = 0, window_sum_ = 0, best_ = 0;
  std::int64_t count_ = 0;
  bool seen_ = false;
  double guess_error_ = 0.0;
};

// What one chain produced: its units' growth accumulators, or the first non-finite value.
struct ChainOutcome {
  std::vector<GrowthAccumulator> units;
  std::string failure;  // empty: finite
  std::int64_t steps = 0;
};

template <class Real>
ChainOutcome run_chain(const PreparedCase& problem, const double* H, std::int64_t chain_index,
                       const LyapunovOptions& options) {
  const RowChain& chain = problem.chains[static_cast<std::size_t>(chain_index)];
  const bool per_channel = channels_independent(problem.kind);
  const std::int64_t d = problem.d_h, n = problem.state_size();
  const std::int64_t block = per_channel ? problem.slots : n;
  const std::int64_t unit_count = per_channel ? d : 1;
  ChainOutcome out;
  if (chain.length() == 0) return out;  // an empty packed segment: no step, no unit
  out.units.assign(static_cast<std::size_t>(unit_count),
                   GrowthAccumulator(std::min(options.window, std::max<std::int64_t>(chain.length(), 1))));
  // Benettin vectors (blocks larger than 1): v = (1, ..., 1)/√block at the head.
  std::vector<double> v(static_cast<std::size_t>(unit_count * block), 1.0 / std::sqrt(static_cast<double>(block)));
  std::vector<double> w(static_cast<std::size_t>(block));
  std::vector<double> head_state(static_cast<std::size_t>(n), 0.0);
  if (chain.h0_row >= 0 && !problem.h0.empty()) {
    std::copy_n(problem.h0.data() + chain.h0_row * n, n, head_state.begin());
  }
  JacobianStepper<Real> stepper(problem, per_channel);
  std::vector<double> jacobian, guess;
  const auto where = [&](std::int64_t unit, std::int64_t t) {
    return fmt::format("{} t={}", describe_chain(problem, {chain_index, per_channel ? unit : -1}), t);
  };
  for (std::int64_t t = chain.t_begin; t < chain.t_end; ++t) {
    if (options.poll && (t - chain.t_begin) % kPollSteps == 0) options.poll();
    const double* h_prev = t == chain.t_begin ? head_state.data() : H + problem.h_offset(chain.b, t - 1, 0, 0);
    stepper.step(chain.b, t, h_prev, jacobian);
    ++out.steps;
    if (t > chain.t_begin) {  // the guess is exact at the head (it starts from h0 there)
      stepper.guess(chain.b, t, guess);
      const double* h_true = H + problem.h_offset(chain.b, t, 0, 0);
      for (std::int64_t i = 0; i < n; ++i) {
        // A guess that is not finite is an infinite error: the unit gets no predicted K
        // (predict_unit_k refuses it), its exponent stands.
        const double e = std::abs(guess[static_cast<std::size_t>(i)] - h_true[i]);
        out.units[static_cast<std::size_t>(per_channel ? i % d : 0)].add_guess_error(std::isfinite(e) ? e : INFINITY);
      }
    }
    for (std::int64_t u = 0; u < unit_count; ++u) {
      const double* J = jacobian.data() + u * block * block;
      for (std::int64_t e = 0; e < block * block; ++e) {
        if (!std::isfinite(J[e])) {
          out.failure = fmt::format("the Jacobian d h_new/d h_prev at {} holds {} (entry [{}][{}] of its {}x{} block)",
                                    where(u, t), J[e], e / block, e % block, block, block);
          return out;
        }
      }
      double growth = 0.0;
      if (block == 1) {
        growth = std::log(std::abs(J[0]));
      } else {
        double* vu = v.data() + u * block;
        double norm2 = 0.0;
        for (std::int64_t i = 0; i < block; ++i) {
          double acc = 0.0;
          for (std::int64_t k = 0; k < block; ++k) acc += J[i * block + k] * vu[k];
          w[static_cast<std::size_t>(i)] = acc;
          norm2 += acc * acc;
        }
        const double norm = std::sqrt(norm2);
        for (std::int64_t i = 0; i < block; ++i) vu[i] = w[static_cast<std::size_t>(i)] / norm;
        growth = std::log(norm);
      }
      if (!std::isfinite(growth)) {
        out.failure = fmt::format("the log growth at {} is {} ({}): no finite exponent", where(u, t), growth,
                                  growth < 0 ? "the Jacobian maps the tracked direction to zero, log 0"
                                             : "the tracked direction overflowed");
        return out;
      }
      out.units[static_cast<std::size_t>(u)].add(growth);
    }
  }
  return out;
}

// The first non-finite element of the oracle's H ("H holds nan at index (b, t, ...)"); empty
// when every element is finite.
std::string first_non_finite(const Tensor& H) {
  const double* p = H.data_as<double>();
  for (std::int64_t i = 0; i < H.numel(); ++i) {
    if (std::isfinite(p[i])) continue;
    std::vector<std::int64_t> index(H.shape().size());
    std::int64_t rest = i;
    for (std::size_t k = index.size(); k-- > 0;) {
      index[k] = rest % H.shape()[k];
      rest /= H.shape()[k];
    }
    return fmt::format("H holds {} at index ({})", p[i], fmt::join(index, ", "));
  }
  return "";
}

std::vector<std::int64_t> sampled_chains(std::int64_t total, const LyapunovOptions& options, bool* all) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(total));
  std::iota(order.begin(), order.end(), 0);
  *all = total <= options.chains;
  if (*all) return order;
  std::mt19937_64 rng(options.seed);
  for (std::int64_t i = 0; i < options.chains; ++i) {  // partial Fisher-Yates
    const auto span = static_cast<std::uint64_t>(total - i);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(i + static_cast<std::int64_t>(rng() % span))]);
  }
  order.resize(static_cast<std::size_t>(options.chains));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

std::vector<double> channel_jacobian_blocks(const PreparedCase& problem, std::int64_t b, std::int64_t t,
                                            std::span<const double> h_prev) {
  std::vector<double> blocks;
  dispatch_float_dtype(problem.dtype, [&]<class StorageT>() {
    JacobianStepper<LyapunovPrimaryOf<StorageT>> stepper(problem, true);
    stepper.step(b, t, h_prev.data(), blocks);
  });
  return blocks;
}

}  // namespace detail

LyapunovEstimate oracle_lyapunov(const Case& problem, const OracleResult& trajectory,
                                 const LyapunovOptions& options) {
  if (options.window < 1) {
    throw ContractViolation("window", "must be >= 1 (steps of the finite-time stretch)", std::to_string(options.window));
  }
  if (options.chains < 1) {
    throw ContractViolation("chains", "must be >= 1 (chains sampled)", std::to_string(options.chains));
  }
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  if (trajectory.H.dtype() != DType::f64 || trajectory.H.shape() != prepared.trajectory_shape()) {
    throw ContractViolation("trajectory",
                            fmt::format("must be the oracle's f64 H of shape {}", shape_string(prepared.trajectory_shape())),
                            fmt::format("{} {}", dtype_name(trajectory.H.dtype()), shape_string(trajectory.H.shape())));
  }
  LyapunovEstimate out;
  const bool per_channel = detail::channels_independent(prepared.kind);
  out.block = per_channel ? prepared.slots : prepared.state_size();
  out.method = per_channel ? (prepared.slots == 1 ? "exact log|J| per channel" : "Benettin per channel block")
                           : "Benettin dense";
  out.window = options.window;
  out.chains_total = static_cast<std::int64_t>(prepared.chains.size());
  const std::vector<std::int64_t> picked = detail::sampled_chains(out.chains_total, options, &out.all_chains);
  out.chains_used = static_cast<std::int64_t>(picked.size());
  for (const std::int64_t c : picked) out.chains.push_back(detail::describe_chain(prepared, {c, -1}));
  const std::string non_finite = detail::first_non_finite(trajectory.H);
  if (!trajectory.finite || !non_finite.empty()) {
    out.finite = false;
    out.reason = fmt::format("the oracle's trajectory is not finite ({}): no exponent from it",
                             non_finite.empty() ? "OracleResult::finite is false" : non_finite);
    return out;
  }

  std::vector<detail::ChainOutcome> outcomes(picked.size());
  const double* H = trajectory.H.data_as<double>();
  dispatch_float_dtype(prepared.dtype, [&]<class StorageT>() {
    using Primary = detail::LyapunovPrimaryOf<StorageT>;
    detail::parallel_for(static_cast<std::int64_t>(picked.size()), [&](std::int64_t i) {
      outcomes[static_cast<std::size_t>(i)] =
          detail::run_chain<Primary>(prepared, H, picked[static_cast<std::size_t>(i)], options);
    });
  });
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const detail::ChainOutcome& o = outcomes[i];
    out.jacobian_steps += o.steps;
    if (!o.failure.empty() && out.finite) {
      out.finite = false;
      out.reason = o.failure;
    }
    for (std::size_t u = 0; u < o.units.size() && o.failure.empty(); ++u) {
      out.units.push_back({detail::describe_chain(prepared, {picked[i], per_channel ? static_cast<std::int64_t>(u) : -1}),
                           o.units[u].steps(), o.units[u].exponent(), o.units[u].stretch(),
                           o.units[u].guess_error()});
    }
  }
  if (out.finite && out.units.empty()) {
    out.finite = false;
    out.reason = "no chain used has a step (every sampled segment is empty)";
  }
  if (!out.finite) {
    out.units.clear();
    return out;
  }
  std::vector<double> exponents;
  for (const LyapunovUnit& u : out.units) exponents.push_back(u.exponent);
  std::sort(exponents.begin(), exponents.end());
  const std::size_t m = exponents.size();
  out.max_exponent = exponents.back();
  out.median_exponent = m % 2 == 1 ? exponents[m / 2] : (exponents[m / 2 - 1] + exponents[m / 2]) / 2;
  out.fraction_positive = static_cast<double>(std::count_if(exponents.begin(), exponents.end(),
                                                            [](double e) { return e > 0.0; })) /
                          static_cast<double>(m);
  const auto widest = std::max_element(out.units.begin(), out.units.end(),
                                       [](const LyapunovUnit& a, const LyapunovUnit& b) { return a.stretch < b.stretch; });
  out.max_stretch = widest->stretch;
  out.max_stretch_chain = widest->chain;
  for (const LyapunovUnit& u : out.units) out.max_guess_error = std::max(out.max_guess_error, u.guess_error);
  return out;
}

}  // namespace pararnn::reference
