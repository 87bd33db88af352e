// Certification of the oracle: the same unroll in a second, wider type of another implementation
// (float128 for a double primary; cpp_bin_float_50 for a float128 primary) on every chain of a
// small case, or on a seeded sample of chains of a large one, compared with the primary's
// working values. The cpp_bin_float_50 working type is instantiated here.
#include <boost/multiprecision/cpp_bin_float.hpp>

#include <algorithm>
#include <bit>
#include <limits>
#include <random>
#include <unordered_map>

#include "oracle_math.hpp"
#include "pararnn/core/fault.hpp"

namespace pararnn::reference::detail {

// cpp_bin_float_50 without expression templates (Eigen needs plain value types); the same
// arithmetic as boost::multiprecision::cpp_bin_float_50.
using Bin50 = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<50>,
                                            boost::multiprecision::et_off>;

extern template class ChainRunner<Float128>;  // instantiated in oracle_float128.cpp
template class ChainRunner<Bin50>;

static_assert(std::numeric_limits<Float128>::digits >= 113,
              "the certifier of a double primary must have at least 113 bits");
static_assert(std::numeric_limits<Bin50>::digits > std::numeric_limits<Float128>::digits,
              "the certifier of a float128 primary must be wider than float128");

namespace {

// Calls every lazily filled std::numeric_limits member of one cpp_bin_float number type.
template <class Number>
void fill_limits() {
  using Limits = std::numeric_limits<Number>;
  static_cast<void>(Limits::epsilon());
  static_cast<void>(Limits::round_error());
  static_cast<void>((Limits::min)());
  static_cast<void>((Limits::max)());
  static_cast<void>(Limits::infinity());
  static_cast<void>(Limits::quiet_NaN());
}

}  // namespace

void initialize_multiprecision_statics() {
  // A function-local static: filled exactly once, and every later call (from any thread) waits
  // for that fill to finish. Both expression-template options: Bin50 is et_off, while the
  // backend's eval_log / eval_exp read the limits of number<cpp_bin_float<50>, et_on>.
  static const bool filled = [] {
    fill_limits<Bin50>();
    fill_limits<boost::multiprecision::number<boost::multiprecision::cpp_bin_float<50>,
                                              boost::multiprecision::et_on>>();
    return true;
  }();
  static_cast<void>(filled);
}

namespace {

// Uniform in [0, n) from the 64-bit engine, by rejection (the same draws on every platform,
// unlike std::uniform_int_distribution).
std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t limit = std::numeric_limits<std::uint64_t>::max() -
                              std::numeric_limits<std::uint64_t>::max() % n;
  std::uint64_t v = 0;
  do {
    v = rng();
  } while (v >= limit);
  return v % n;
}

// Visits a uniformly random permutation of [0, n) lazily (sparse Fisher-Yates) until `visit`
// returns false.
template <class Visit>
void visit_permutation(std::mt19937_64& rng, std::int64_t n, Visit&& visit) {
  std::unordered_map<std::int64_t, std::int64_t> moved;
  const auto at = [&](std::int64_t i) {
    const auto it = moved.find(i);
    return it == moved.end() ? i : it->second;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t j = i + static_cast<std::int64_t>(
                                   draw_below(rng, static_cast<std::uint64_t>(n - i)));
    const std::int64_t picked = at(j);
    moved[j] = at(i);
    if (!visit(picked)) return;
  }
}

// max |primary - certifier| over one chain, in the certifier type, NaN when either side is NaN.
template <class Certifier, class PrimaryAt>
double chain_delta(const PreparedCase& problem, const ChainSpec& spec, const std::function<void()>& poll,
                   PrimaryAt&& primary_at) {
  using std::abs;
  ChainRunner<Certifier> certifier(problem, spec);
  const std::int64_t width = certifier.width();
  const std::int64_t n = problem.slots * width;
  Certifier worst(0);
  bool nan = false;
  while (certifier.advance()) {
    if (poll && certifier.time() % kPollSteps == 0) poll();
    const Certifier* s = certifier.state();
    for (std::int64_t k = 0; k < n; ++k) {
      const Certifier diff = abs(primary_at(certifier.time(), k) - s[k]);
      if (!(diff == diff)) nan = true;
      if (diff > worst) worst = diff;
    }
  }
  return nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(worst);
}

std::int64_t chain_cost(const PreparedCase& problem, const ChainSpec& spec) {
  const RowChain& chain = problem.chains[static_cast<std::size_t>(spec.chain)];
  return chain.length() * problem.slots * (spec.channel < 0 ? problem.d_h : 1);
}

}  // namespace

std::vector<ChainSpec> select_certified_chains(const PreparedCase& problem,
                                               const OracleOptions& options, bool* all_chains) {
  const auto n_chains = static_cast<std::int64_t>(problem.chains.size());
  std::int64_t total = 0;
  std::int64_t longest = 0;
  std::int64_t shortest = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t i = 0; i < n_chains; ++i) {
    const std::int64_t cost = chain_cost(problem, {i, -1});
    total += cost;
    longest = std::max(longest, cost);
    shortest = std::min(shortest, cost);
  }
  std::vector<ChainSpec> picked;
  *all_chains = total <= options.certify_budget;
  if (*all_chains) {
    for (std::int64_t i = 0; i < n_chains; ++i) picked.push_back({i, -1});
    return picked;
  }

  std::mt19937_64 rng(options.seed);
  std::int64_t remaining = options.certify_budget;
  if (longest <= options.certify_budget || !channels_independent(problem.kind)) {
    // A seeded sample of whole chains (rows or segments).
    visit_permutation(rng, n_chains, [&](std::int64_t i) {
      const std::int64_t cost = chain_cost(problem, {i, -1});
      if (cost <= remaining) {
        picked.push_back({i, -1});
        remaining -= cost;
      }
      return remaining >= shortest;
    });
  } else {
    // A chain exceeds the budget: a seeded sample of (chain, channel) pairs over their full
    // length, so that long chains are certified too.
    const std::int64_t shortest_channel = shortest / problem.d_h;
    visit_permutation(rng, n_chains * problem.d_h, [&](std::int64_t pair) {
      const ChainSpec spec{pair / problem.d_h, pair % problem.d_h};
      const std::int64_t cost = chain_cost(problem, spec);
      if (cost <= remaining) {
        picked.push_back(spec);
        remaining -= cost;
      }
      return remaining >= shortest_channel;
    });
  }
  if (picked.empty() && options.certify_budget > 0) {
    // A positive budget below the cost of the cheapest unit still certifies one: a seeded
    // shortest chain (or one of its channels), never nothing (an empty certification would
    // report a self-check delta of 0 over no chain-steps).
    std::vector<std::int64_t> shortest_chains;
    for (std::int64_t i = 0; i < n_chains; ++i)
      if (chain_cost(problem, {i, -1}) == shortest) shortest_chains.push_back(i);
    const std::int64_t chain = shortest_chains[static_cast<std::size_t>(rng() % shortest_chains.size())];
    const bool per_channel = channels_independent(problem.kind) && longest > options.certify_budget;
    picked.push_back({chain, per_channel ? static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(problem.d_h)) : -1});
  }
  std::sort(picked.begin(), picked.end(), [](const ChainSpec& a, const ChainSpec& b) {
    return a.chain != b.chain ? a.chain < b.chain : a.channel < b.channel;
  });
  return picked;
}

Certification certify(const PreparedCase& problem, const double* H, const OracleOptions& options) {
  Certification out;
  const std::vector<ChainSpec> specs = select_certified_chains(problem, options, &out.all_chains);
  for (const ChainSpec& spec : specs) {
    out.chains.push_back(describe_chain(problem, spec));
    out.chain_steps += chain_cost(problem, spec);
  }

  const std::vector<ChainSpec> items = work_items<Float128>(problem, specs);
  std::vector<double> deltas(items.size(), 0.0);
  // H of element k (slot-major over the runner's channels) of `spec` at time t.
  const auto reported = [&](const ChainSpec& spec, std::int64_t t, std::int64_t k) {
    const RowChain& chain = problem.chains[static_cast<std::size_t>(spec.chain)];
    const std::int64_t width = spec.channel < 0 ? problem.d_h : 1;
    const std::int64_t channel = spec.channel < 0 ? k % width : spec.channel;
    return H[problem.h_offset(chain.b, t, k / width, channel)];
  };
  if (problem.dtype == DType::f64) {
    // float128 primary: its working values are recomputed beside the cpp_bin_float_50 unroll
    // (the same operations, so the same bits as the primary run). Should a recomputed value not
    // round to the reported H, the reported value is what gets compared, so a harness bug shows
    // as a large delta instead of hiding.
    out.certifier_type = working_type_name<Bin50>();
    out.certifier_digits = std::numeric_limits<Bin50>::digits;
    parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t i) {
      const ChainSpec& spec = items[static_cast<std::size_t>(i)];
      ChainRunner<Float128> primary(problem, spec);
      deltas[static_cast<std::size_t>(i)] =
          chain_delta<Bin50>(problem, spec, options.poll, [&](std::int64_t t, std::int64_t k) {
            if (primary.time() != t) primary.advance();
            const Float128& value = primary.state()[k];
            const double h = reported(spec, t, k);
            if (std::bit_cast<std::uint64_t>(to_double(value)) != std::bit_cast<std::uint64_t>(h)) {
              return Bin50(h);
            }
            return Bin50(value);
          });
    });
  } else {
    // double primary: its working values are H itself.
    out.certifier_type = working_type_name<Float128>();
    out.certifier_digits = std::numeric_limits<Float128>::digits;
    parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t i) {
      const ChainSpec& spec = items[static_cast<std::size_t>(i)];
      deltas[static_cast<std::size_t>(i)] =
          chain_delta<Float128>(problem, spec, options.poll, [&](std::int64_t t, std::int64_t k) {
            return Float128(reported(spec, t, k));
          });
    });
  }
  // Fault point (faults builds only): the last certified chain's delta left out of the self-check.
  const std::size_t counted =
      deltas.size() - (PARARNN_FAULT_POINT("self_check_chain_left_out") && !deltas.empty() ? 1 : 0);
  for (std::size_t i = 0; i < counted; ++i) {
    const double d = deltas[i];
    if (!(d == d)) {
      out.self_check_delta = std::numeric_limits<double>::quiet_NaN();
      break;
    }
    out.self_check_delta = std::max(out.self_check_delta, d);
  }
  return out;
}

}  // namespace pararnn::reference::detail
