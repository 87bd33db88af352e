// The oracle's gradients (oracle_gradients): BPTT by automatic differentiation of the oracle's
// own step in the primary working type (double for f32/f16/bf16 cases, float128 for f64 cases),
// certified by the same BPTT in the certifier type (float128, cpp_bin_float_50). The AD and the
// BPTT are in oracle_gradient_math.hpp; the double instances are here, the float128 and
// cpp_bin_float_50 ones in their own translation units.
//
// What certification compares, and why that is enough. For each certified chain (or (chain,
// channel) pair, when a chain alone is over the budget) the certifier recomputes, in its own
// type: the gate-input cotangent d_wx_t of every step (every gate of the certified channels),
// the cotangent of the initial state (∇h0's row, or what ∇h0 would be from zeros), the chain's
// contribution to every (masked) recurrent gradient, and, for a whole chain, the chain's rows of
// ∇x (∇x_t = Wᵀ d_wx_t mixes channels, and so does CfC's Δt row, a sum over channels: a lone
// channel cannot certify it). The parameter gradients of the affines (W_x, CfC's W_b) are sums
// over all rows, ∇W = Σ d_wx featᵀ and ∇b = Σ d_wx: exact inputs (W and x lifted exactly)
// times certified d_wx, summed in the working type (at most B·T terms, a relative error of
// B·T·2^-53 in the worst case for double); they are not recomputed. The
// recurrent gradients are certified per chain, which is where their error would come from
// (the AD through T steps), not from the final sum over chains.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "oracle_gradient_math.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace detail {

PARARNN_ORACLE_GRADIENT_TEMPLATES(, double)
PARARNN_ORACLE_PRIMARY_GRADIENT_TEMPLATES(, double)

namespace {

// grad_H lifted exactly in the trajectory layout, or empty (ones) when the case has none.
std::vector<double> checked_cotangent(const Case& problem, const PreparedCase& prepared) {
  if (!problem.grad_H) return {};
  const Tensor& g = *problem.grad_H;
  const Shape trajectory = prepared.slots == 1
                               ? Shape{prepared.batch, prepared.time, prepared.d_h}
                               : Shape{prepared.batch, prepared.time, prepared.slots, prepared.d_h};
  const Shape with_slot_axis{prepared.batch, prepared.time, prepared.slots, prepared.d_h};
  // M2RNN's (B, T, K, V) and RWKV-7's (B, T, H, d, d): the same bytes as the slot layout.
  if (g.shape() != trajectory && g.shape() != with_slot_axis && g.shape() != prepared.trajectory_shape()) {
    throw ContractViolation("grad_H", "must have the trajectory's shape " + shape_string(trajectory),
                            shape_string(g.shape()));
  }
  if (!is_floating(g.dtype())) {
    throw ContractViolation("grad_H", "must be f64, f32, f16 or bf16",
                            std::string(dtype_name(g.dtype())));
  }
  return g.to_f64_vector();  // every floating dtype widens exactly; the layout is H's
}

// Max |a - b| with NaN winning.
template <class Real>
struct WorstDifference {
  Real worst = Real(0);
  bool nan = false;
  void add(const Real& a, const Real& b) {
    using std::abs;
    const Real d = abs(a - b);
    if (!(d == d)) nan = true;
    if (d > worst) worst = d;
  }
  double value() const {
    return nan ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(worst);
  }
};

// Everything the primary computes, in its working type.
template <class Real>
struct PrimaryGradients {
  ColMajorMatrix<Real> d_wx;       // (gates·d_h, B·T): column b·T + t
  ColMajorMatrix<Real> state;      // (slots·d_h, chains): cotangent of each chain's initial state
  ColMajorMatrix<Real> recurrent;  // (n_rec·d_h, chains): each chain's masked contribution
  InputAffineGradients<Real> affine;
};

template <class Real>
PrimaryGradients<Real> primary_gradients(const GradientCase& gc) {
  const PreparedCase& problem = gc.problem;
  const auto chains = static_cast<std::int64_t>(problem.chains.size());
  const std::int64_t rows = problem.gates * problem.d_h;
  PrimaryGradients<Real> out;
  out.d_wx = ColMajorMatrix<Real>::Zero(rows, problem.batch * problem.time);
  out.state = ColMajorMatrix<Real>::Zero(problem.state_size(), chains);
  out.recurrent = ColMajorMatrix<Real>::Zero(
      static_cast<Index>(problem.recurrent.size()) * problem.d_h, chains);
  std::vector<ChainSpec> whole;
  for (std::int64_t c = 0; c < chains; ++c) whole.push_back({c, -1});
  const std::vector<ChainSpec> items = work_items<Real>(problem, whole);
  std::vector<ChainGradientView<Real>> views;
  for (const ChainSpec& item : items) {
    const RowChain& chain = problem.chains[static_cast<std::size_t>(item.chain)];
    const std::int64_t column = chain.b * problem.time + chain.t_begin;
    views.push_back({out.d_wx.data() + column * rows, out.state.col(item.chain).data(),
                     out.recurrent.col(item.chain).data(), problem.d_h,
                     item.channel < 0 ? 0 : item.channel});
  }
  run_bptt<Real>(gc, items, views);
  out.affine = input_affine_gradients<Real>(problem, out.d_wx);
  return out;
}

struct GradientCertification {
  double delta = 0.0;
  bool all_chains = false;
  std::vector<std::string> chains;
  std::int64_t chain_steps = 0;
};

// The certifying BPTT of the selected chains in Certifier, compared with the primary's values
// (converted exactly into Certifier).
template <class Certifier, class Primary>
GradientCertification certify_gradients(const GradientCase& gc,
                                        const PrimaryGradients<Primary>& primary,
                                        const OracleOptions& options) {
  const PreparedCase& problem = gc.problem;
  GradientCertification out;
  OracleOptions budget = options;
  budget.certify_budget = options.certify_budget / kGradientCertifyStepCost;
  std::vector<ChainSpec> specs = select_certified_chains(problem, budget, &out.all_chains);
  if (specs.empty() && options.certify_budget > 0) {
    // Over budget even for one (chain, channel) pair: certify one seeded pair of a shortest
    // chain anyway, so that a certified result always certified something.
    std::int64_t shortest = std::numeric_limits<std::int64_t>::max();
    for (const RowChain& chain : problem.chains) shortest = std::min(shortest, chain.length());
    budget.certify_budget = shortest * problem.slots;
    specs = select_certified_chains(problem, budget, &out.all_chains);
  }
  for (const ChainSpec& spec : specs) {
    out.chains.push_back(describe_chain(problem, spec));
    const RowChain& chain = problem.chains[static_cast<std::size_t>(spec.chain)];
    out.chain_steps += chain.length() * problem.slots * (spec.channel < 0 ? problem.d_h : 1);
  }

  // Each item (a chain, or one channel of it) into its own compact arrays.
  const std::vector<ChainSpec> items = work_items<Certifier>(problem, specs);
  const Index gates = problem.gates;
  const Index slots = problem.slots;
  const auto n_recurrent = static_cast<Index>(problem.recurrent.size());
  struct Arrays {
    ColMajorMatrix<Certifier> d_wx;  // (gates·width, len)
    Vec<Certifier> state;            // slots·width
    Vec<Certifier> recurrent;        // n_rec·width
  };
  std::vector<Arrays> arrays(items.size());
  std::vector<ChainGradientView<Certifier>> views;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Index width = items[i].channel < 0 ? problem.d_h : 1;
    const RowChain& chain = problem.chains[static_cast<std::size_t>(items[i].chain)];
    arrays[i].d_wx = ColMajorMatrix<Certifier>::Zero(gates * width, chain.length());
    arrays[i].state = Vec<Certifier>::Zero(slots * width);
    arrays[i].recurrent = Vec<Certifier>::Zero(n_recurrent * width);
    views.push_back({arrays[i].d_wx.data(), arrays[i].state.data(), arrays[i].recurrent.data(),
                     width, 0});
  }
  run_bptt<Certifier>(gc, items, views);

  WorstDifference<Certifier> worst;
  const auto lift = [](const Primary& v) { return Certifier(v); };
  const Index d_h = problem.d_h;
  const Index rows = gates * d_h;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const ChainSpec& item = items[i];
    const RowChain& chain = problem.chains[static_cast<std::size_t>(item.chain)];
    const Index width = item.channel < 0 ? d_h : 1;
    const Index first = item.channel < 0 ? 0 : item.channel;
    const Index column = chain.b * problem.time + chain.t_begin;
    for (Index t = 0; t < chain.length(); ++t) {
      for (Index g = 0; g < gates; ++g) {
        for (Index j = 0; j < width; ++j) {
          worst.add(lift(primary.d_wx(g * d_h + first + j, column + t)),
                    arrays[i].d_wx(g * width + j, t));
        }
      }
    }
    for (Index j = 0; j < width; ++j) {
      for (Index slot = 0; slot < slots; ++slot) {
        worst.add(lift(primary.state(slot * d_h + first + j, item.chain)),
                  arrays[i].state(slot * width + j));
      }
      for (Index r = 0; r < n_recurrent; ++r) {
        worst.add(lift(primary.recurrent(r * d_h + first + j, item.chain)),
                  arrays[i].recurrent(r * width + j));
      }
    }
  }

  // ∇x rows of the whole chains certified, from the certifier's d_wx of all their channels, a
  // block of steps at a time on the threads.
  constexpr Index kStepsPerBlock = 256;
  const RowMajorMatrix<Certifier> w = lifted_weight<Certifier>(problem);
  std::vector<WorstDifference<Certifier>> x_worst;
  for (const ChainSpec& spec : specs) {
    if (spec.channel >= 0) continue;
    const RowChain& chain = problem.chains[static_cast<std::size_t>(spec.chain)];
    const Index len = chain.length();
    ColMajorMatrix<Certifier> d_wx(rows, len);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].chain != spec.chain) continue;
      const Index width = items[i].channel < 0 ? d_h : 1;
      const Index first = items[i].channel < 0 ? 0 : items[i].channel;
      for (Index g = 0; g < gates; ++g) {
        d_wx.middleRows(g * d_h + first, width) = arrays[i].d_wx.middleRows(g * width, width);
      }
    }
    const Index blocks = (len + kStepsPerBlock - 1) / kStepsPerBlock;
    std::vector<WorstDifference<Certifier>> block_worst(static_cast<std::size_t>(blocks));
    const Index column = chain.b * problem.time + chain.t_begin;
    std::vector<double> x_lifted(static_cast<std::size_t>(len * problem.d_in));
    lift_x(problem, chain.b, chain.t_begin, len, x_lifted.data());
    parallel_for(blocks, [&](std::int64_t block) {
      const Index t0 = block * kStepsPerBlock;
      const Index count = std::min(kStepsPerBlock, len - t0);
      ColMajorMatrix<Certifier> x(problem.d_in, count);
      input_gradient<Certifier>(problem, w, d_wx.data() + t0 * rows,
                                x_lifted.data() + t0 * problem.d_in, count, x.data());
      for (Index t = 0; t < count; ++t) {
        for (Index k = 0; k < problem.d_in; ++k) {
          block_worst[static_cast<std::size_t>(block)].add(
              lift(primary.affine.x(k, column + t0 + t)), x(k, t));
        }
      }
    });
    x_worst.insert(x_worst.end(), block_worst.begin(), block_worst.end());
  }
  out.delta = worst.value();
  for (const auto& x : x_worst) {
    const double d = x.value();
    out.delta = std::isnan(out.delta) || std::isnan(d) ? std::numeric_limits<double>::quiet_NaN()
                                                       : std::max(out.delta, d);
  }
  return out;
}

template <class Real, class Matrix>
Tensor to_tensor(const Matrix& values, Shape shape) {
  Tensor t(DType::f64, std::move(shape));
  double* out = t.data_as<double>();
  const Real* in = values.data();
  for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = to_double(in[i]);
  return t;
}

bool all_finite(const Tensor& t) {
  const double* p = t.data_as<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) return false;
  }
  return true;
}

template <class Primary, class Certifier>
OracleGradients gradients_in(const Case& problem, const GradientCase& gc,
                             const OracleOptions& options) {
  const PreparedCase& prepared = gc.problem;
  const PrimaryGradients<Primary> primary = primary_gradients<Primary>(gc);
  OracleGradients result;
  result.type = working_type_name<Primary>();
  result.digits = std::numeric_limits<Primary>::digits;

  result.tensors["x"] =
      to_tensor<Primary>(primary.affine.x, {prepared.batch, prepared.time, prepared.d_in});
  for (const AffineParameter& affine : prepared.affine_parameters) {
    const Index first = affine.first_gate * prepared.d_h;
    const Index rows = affine.gates * prepared.d_h;
    const RowMajorMatrix<Primary> weight = primary.affine.weight.middleRows(first, rows);
    const Vec<Primary> bias = primary.affine.bias.segment(first, rows);
    result.tensors[affine.weight] = to_tensor<Primary>(weight, {rows, prepared.features});
    result.tensors[affine.bias] = to_tensor<Primary>(bias, {rows});
  }
  const Vec<Primary> recurrent = primary.recurrent.rowwise().sum();  // chains in order
  for (const RecurrentParameter& parameter : prepared.recurrent_parameters) {
    // Its vectors are consecutive d_h blocks: the (rows, d_h) tensor, row-major.
    const Vec<Primary> all = recurrent.segment(static_cast<Index>(parameter.first) * prepared.d_h,
                                               parameter.rows * prepared.d_h);
    result.tensors[parameter.name] = to_tensor<Primary>(all, parameter.shape);
  }
  if (problem.h0) {
    Tensor h0(DType::f64, problem.h0->shape());
    double* out = h0.data_as<double>();
    const std::int64_t n = prepared.state_size();
    for (std::size_t c = 0; c < prepared.chains.size(); ++c) {
      const std::int64_t row = prepared.chains[c].h0_row;
      for (std::int64_t k = 0; k < n; ++k) {
        out[row * n + k] = to_double(primary.state(k, static_cast<Index>(c)));
      }
    }
    result.tensors["h0"] = std::move(h0);
  }
  for (const auto& [name, t] : result.tensors) result.finite = result.finite && all_finite(t);

  if (options.certify) {
    GradientCertification c = certify_gradients<Certifier>(gc, primary, options);
    result.certifier_type = working_type_name<Certifier>();
    result.certifier_digits = std::numeric_limits<Certifier>::digits;
    result.self_check_delta = c.delta;
    result.certified_all_chains = c.all_chains;
    result.certified_chains = std::move(c.chains);
    result.certified_chain_steps = c.chain_steps;
  }
  return result;
}

}  // namespace
}  // namespace detail

OracleGradients oracle_gradients(const Case& problem, const OracleOptions& options) {
  if (options.certify_budget < 0) {
    throw ContractViolation("certify_budget", "must be >= 0",
                            std::to_string(options.certify_budget));
  }
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  const detail::GradientCase gc{prepared, detail::checked_cotangent(problem, prepared)};
  if (!detail::channels_independent(prepared.kind)) {
    // Channels mix (head and dense mixes, Hopfield, M2RNN, RWKV-7): whole-chain AD.
    return detail::oracle_gradients_whole_chains(problem, gc, options);
  }
  if (prepared.dtype == DType::f64) {
    return detail::gradients_in<detail::Float128, detail::Bin50>(problem, gc, options);
  }
  return detail::gradients_in<double, detail::Float128>(problem, gc, options);
}

}  // namespace pararnn::reference
