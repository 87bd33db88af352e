// The oracle of op cases (op_oracle.hpp): one chain unroller over the generalized delta rule,
// instantiated for the primary (double, float128), the certifier (float128, cpp_bin_float_50)
// and the same-dtype floor (float, double). One translation unit on purpose: multiprecision
// units are slow to compile.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "oracle_op_math.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::reference {
namespace {

using detail::Bin50;
using detail::Float128;
using detail::LiftedOp;
using detail::o_index;
using detail::state_index;

// One chain: sequence n, head h, its first `steps` steps. o (steps·V) and the state after the
// last of them (K·V), each rounded once to double.
struct ChainAnswer {
  std::vector<double> o;
  std::vector<double> state;
};

template <class Real>
ChainAnswer run_chain(const LiftedOp& l, std::int64_t n, std::int64_t h, std::int64_t steps,
                      const std::function<void()>& poll) {
  const OpCase& c = *l.problem;
  const std::int64_t K = c.k_dim, V = c.v_dim;
  const OpCase::Sequence seq = l.sequences[static_cast<std::size_t>(n)];
  std::vector<Real> S = detail::op_initial_state<Real>(l, n, h);
  std::vector<Real> u(V);
  detail::OpStep<Real> v(K, V);
  const Real scale = Real(c.scale);
  const bool mamba = detail::is_mamba(c);
  ChainAnswer out;
  out.o.resize(static_cast<std::size_t>(steps * V));
  for (std::int64_t s = 0; s < steps; ++s) {
    if (poll && s % 1024 == 1023) poll();
    detail::prepare_op_step(l, seq, h, seq.t_begin + s, v);
    detail::apply_op_step(c, v, S, u);
    for (std::int64_t j = 0; j < V; ++j) {
      Real acc = detail::op_readout(c, v, S, j, scale);
      if (mamba) acc = (acc + v.skip[j]) * v.gate[j];
      out.o[static_cast<std::size_t>(s * V + j)] = static_cast<double>(acc);
    }
  }
  out.state.resize(static_cast<std::size_t>(K * V));
  for (std::int64_t e = 0; e < K * V; ++e) out.state[e] = static_cast<double>(S[e]);
  return out;
}

// Every chain in full, written into o [B, T, H, V] and final_state [N, H, K, V] (f64).
template <class Real>
std::map<std::string, std::vector<double>> run_all(const LiftedOp& l, const std::function<void()>& poll) {
  const OpCase& c = *l.problem;
  const std::int64_t H = c.heads, V = c.v_dim, KV = c.k_dim * c.v_dim;
  const std::int64_t N = static_cast<std::int64_t>(l.sequences.size());
  const std::int64_t K = c.k_dim;
  std::vector<double> o(static_cast<std::size_t>(c.batch * c.time * H * V), 0.0);
  std::vector<double> state(static_cast<std::size_t>(N * H * KV), 0.0);
  detail::parallel_for(N * H, [&](std::int64_t chain) {
    const std::int64_t n = chain / H, h = chain % H;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    const ChainAnswer a = run_chain<Real>(l, n, h, seq.t_end - seq.t_begin, poll);
    for (std::int64_t s = 0; s < seq.t_end - seq.t_begin; ++s)
      for (std::int64_t j = 0; j < V; ++j)
        o[static_cast<std::size_t>(o_index(c, seq.b, seq.t_begin + s, h, j))] = a.o[static_cast<std::size_t>(s * V + j)];
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j)
        state[static_cast<std::size_t>(state_index(c, n, h, i, j))] = a.state[static_cast<std::size_t>(i * V + j)];
  });
  return {{"o", std::move(o)}, {"final_state", std::move(state)}};
}

template <class Primary, class Certifier>
OpOracleResult oracle_in(const OpCase& c, const OracleOptions& options) {
  const LiftedOp l = detail::lift_op(c);
  OpOracleResult r;
  r.type = detail::op_type_name<Primary>();
  r.digits = std::numeric_limits<Primary>::digits;
  r.certifier_type = detail::op_type_name<Certifier>();
  r.certifier_digits = std::numeric_limits<Certifier>::digits;
  auto outputs = run_all<Primary>(l, options.poll);
  const std::vector<double>& o = outputs.at("o");
  const std::vector<double>& state = outputs.at("final_state");
  r.finite = std::all_of(o.begin(), o.end(), [](double x) { return std::isfinite(x); }) &&
             std::all_of(state.begin(), state.end(), [](double x) { return std::isfinite(x); });
  bool all = false;
  const auto picked = detail::op_certified_selection(l, options.certify_budget, options.seed, op_step_cost(c), all);
  r.certified_all_chains = all;
  const std::int64_t H = c.heads, V = c.v_dim;
  std::vector<double> deltas(picked.size(), 0.0);
  detail::parallel_for(static_cast<std::int64_t>(picked.size()), [&](std::int64_t p) {
    const auto [chain, steps] = picked[static_cast<std::size_t>(p)];
    const std::int64_t n = chain / H, h = chain % H;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    const ChainAnswer a = run_chain<Certifier>(l, n, h, steps, options.poll);
    double delta = 0.0;
    const auto worse = [&](double x, double y) {
      const double d = std::fabs(x - y);
      delta = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(delta, d);
    };
    for (std::int64_t s = 0; s < steps; ++s)
      for (std::int64_t j = 0; j < V; ++j)
        worse(a.o[static_cast<std::size_t>(s * V + j)], o[static_cast<std::size_t>(o_index(c, seq.b, seq.t_begin + s, h, j))]);
    if (steps == seq.t_end - seq.t_begin)
      for (std::int64_t i = 0; i < c.k_dim; ++i)
        for (std::int64_t j = 0; j < V; ++j)
          worse(a.state[static_cast<std::size_t>(i * V + j)], state[static_cast<std::size_t>(state_index(c, n, h, i, j))]);
    deltas[static_cast<std::size_t>(p)] = delta;
  });
  for (std::size_t p = 0; p < picked.size(); ++p) {
    const auto [chain, steps] = picked[p];
    const std::int64_t n = chain / H, h = chain % H;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    std::string name = c.cu_seqlens ? fmt::format("segment={},h={}", n, h) : fmt::format("b={},h={}", n, h);
    if (steps < seq.t_end - seq.t_begin) name += fmt::format(",t<{}", steps);
    r.certified_chains.push_back(std::move(name));
    r.certified_chain_steps += steps;
    r.self_check_delta = std::max(r.self_check_delta, deltas[p]);
  }
  const OpSpec& spec = op_spec(c.op);
  r.outputs.emplace(std::string(spec.out_name), Tensor::from_values(DType::f64, c.o_shape(), o));
  r.outputs.emplace(std::string(spec.state_name), Tensor::from_values(DType::f64, c.final_state_shape(), state));
  return r;
}

}  // namespace

std::int64_t op_step_cost(const OpCase& problem) { return std::max<std::int64_t>(1, problem.k_dim * problem.v_dim / 64); }

OpOracleResult oracle_op(const OpCase& problem, const OracleOptions& options) {
  if (problem.dtype() == DType::f64) return oracle_in<Float128, Bin50>(problem, options);
  return oracle_in<double, Float128>(problem, options);
}

std::map<std::string, Tensor> op_sequential_in_dtype(const OpCase& problem) {
  const LiftedOp l = detail::lift_op(problem);
  auto outputs = problem.dtype() == DType::f64 ? run_all<double>(l, {}) : run_all<float>(l, {});
  std::map<std::string, Tensor> result;
  const OpSpec& spec = op_spec(problem.op);
  result.emplace(std::string(spec.out_name), Tensor::from_values(problem.dtype(), problem.o_shape(), outputs.at("o")));
  if (problem.output_final_state)
    result.emplace(std::string(spec.state_name),
                   Tensor::from_values(problem.dtype(), problem.final_state_shape(), outputs.at("final_state")));
  return result;
}

}  // namespace pararnn::reference
