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

#include "oracle_gradient_math.hpp"
#include "oracle_math.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::reference {
namespace {

using detail::Bin50;
using detail::Float128;

// The case's inputs, lifted exactly into double (every storage dtype is a subset of double).
struct LiftedOp {
  const OpCase* problem = nullptr;
  std::map<std::string, std::vector<double>> in;
  std::vector<double> h0;  // [N, H, K, V] or empty
  std::vector<OpCase::Sequence> sequences;
};

LiftedOp lift(const OpCase& c) {
  LiftedOp l{&c, {}, {}, c.sequences()};
  for (const auto& [name, t] : c.inputs) l.in.emplace(name, Tensor::copy_of(t).to_f64_vector());
  if (c.initial_state) l.h0 = Tensor::copy_of(*c.initial_state).to_f64_vector();
  return l;
}

// Where element (b, t, h, j) of the output and (n, h, i, j) of the state (i: key / state index,
// j: value index) live in the op's own layouts.
std::int64_t o_index(const OpCase& c, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t j) {
  if (c.kind == OpKind::selective_scan) return (b * c.heads + h) * c.time + t;
  return ((b * c.time + t) * c.heads + h) * c.v_dim + j;
}
std::int64_t state_index(const OpCase& c, std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (c.kind == OpKind::ssd) return ((n * c.heads + h) * c.v_dim + j) * c.k_dim + i;
  return ((n * c.heads + h) * c.k_dim + i) * c.v_dim + j;
}

// mamba's softplus: x above 20 is x (torch's threshold, and the kernels').
template <class Real>
Real softplus(const Real& x) {
  using std::exp;
  using std::log;
  return x > Real(20) ? x : Real(log(Real(1) + exp(x)));
}

// One chain: sequence n, head h, its first `steps` steps. o (steps·V) and the state after the
// last of them (K·V), each rounded once to double.
struct ChainAnswer {
  std::vector<double> o;
  std::vector<double> state;
};

template <class Real>
ChainAnswer run_chain(const LiftedOp& l, std::int64_t n, std::int64_t h, std::int64_t steps,
                      const std::function<void()>& poll) {
  using std::exp;
  using std::sqrt;
  const OpCase& c = *l.problem;
  const std::int64_t T = c.time, H = c.heads, K = c.k_dim, V = c.v_dim;
  const OpCase::Sequence seq = l.sequences[static_cast<std::size_t>(n)];
  std::vector<Real> S(static_cast<std::size_t>(K * V), Real(0));
  if (!l.h0.empty())
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j)
        S[i * V + j] = Real(l.h0[static_cast<std::size_t>(state_index(c, n, h, i, j))]);
  std::vector<Real> q(K), k(K), d(K), a(K), b(K), vv(V), u(V);
  const Real scale = Real(c.scale);
  const Real l2_eps = Real(1e-6);
  const auto get = [&](const char* name) -> const std::vector<double>& { return l.in.at(name); };
  const auto has = [&](const char* name) { return l.in.contains(name); };
  const bool mamba = c.kind == OpKind::selective_scan || c.kind == OpKind::ssd;
  const std::int64_t G = c.groups, group = h / (H / G);
  std::vector<Real> skip(V, Real(0)), gate(V, Real(1));
  const bool low_rank = c.kind == OpKind::delta_rule || c.kind == OpKind::gated_delta_rule ||
                        c.kind == OpKind::dplr_delta_rule || c.kind == OpKind::rwkv7;
  ChainAnswer out;
  out.o.resize(static_cast<std::size_t>(steps * V));
  for (std::int64_t s = 0; s < steps; ++s) {
    if (poll && s % 1024 == 1023) poll();
    const std::int64_t t = seq.t_begin + s;
    const std::int64_t row = (seq.b * T + t) * H + h;  // [B, T, H] index
    const auto key = [&](const char* name, std::vector<Real>& dst) {
      const std::vector<double>& src = get(name);
      for (std::int64_t i = 0; i < K; ++i) dst[i] = Real(src[static_cast<std::size_t>(row * K + i)]);
    };
    if (mamba) {
      // selective_scan: channel h; ssd: head h (docs/ops/README.md). Δ = softplus(raw + bias).
      const bool ss = c.kind == OpKind::selective_scan;
      const std::size_t dt_at = static_cast<std::size_t>(ss ? (seq.b * H + h) * T + t : row);
      Real dt = Real(get(ss ? "delta" : "dt")[dt_at]);
      if (has(ss ? "delta_bias" : "dt_bias")) dt += Real(get(ss ? "delta_bias" : "dt_bias")[static_cast<std::size_t>(h)]);
      if (c.softplus) dt = softplus(dt);
      const std::vector<double>& A = get("A");
      for (std::int64_t i = 0; i < K; ++i) {
        d[i] = exp(dt * Real(A[static_cast<std::size_t>(ss ? h * K + i : h)]));
        const std::size_t bc = static_cast<std::size_t>(ss ? ((seq.b * G + group) * K + i) * T + t
                                                           : ((seq.b * T + t) * G + group) * K + i);
        k[i] = Real(get("B")[bc]);
        q[i] = Real(get("C")[bc]);
      }
      for (std::int64_t j = 0; j < V; ++j) {
        const std::size_t at = static_cast<std::size_t>(ss ? dt_at : row * V + j);
        const Real x = Real(get(ss ? "u" : "x")[at]);
        vv[j] = dt * x;
        skip[j] = has("D") ? Real(get("D")[static_cast<std::size_t>(h)]) * x : Real(0);
        if (has("z")) {
          const Real z = Real(get("z")[at]);
          gate[j] = z / (Real(1) + exp(-z));
        }
      }
    } else {
      const std::vector<double>& vsrc = get("v");
      for (std::int64_t j = 0; j < V; ++j) vv[j] = Real(vsrc[static_cast<std::size_t>(row * V + j)]);
      key(c.kind == OpKind::rwkv7 ? "r" : "q", q);
      key("k", k);
    }
    if (c.qk_l2norm) {
      for (std::vector<Real>* x : {&q, &k}) {
        Real sum(0);
        for (const Real& e : *x) sum += e * e;
        const Real norm = sqrt(sum + l2_eps);
        for (Real& e : *x) e = e / norm;
      }
    }
    switch (c.kind) {
      case OpKind::gla:
        key("g", d);
        for (Real& e : d) e = exp(e);
        break;
      case OpKind::simple_gla: {
        const Real e = exp(Real(get("g")[static_cast<std::size_t>(row)]));
        std::fill(d.begin(), d.end(), e);
        break;
      }
      case OpKind::delta_rule:
      case OpKind::gated_delta_rule: {
        const Real beta = Real(get("beta")[static_cast<std::size_t>(row)]);
        const Real decay =
            c.kind == OpKind::gated_delta_rule ? Real(exp(Real(get("g")[static_cast<std::size_t>(row)]))) : Real(1);
        std::fill(d.begin(), d.end(), decay);
        for (std::int64_t i = 0; i < K; ++i) {
          a[i] = k[i];
          b[i] = -(beta * decay) * k[i];
        }
        for (Real& e : vv) e = beta * e;
        break;
      }
      case OpKind::dplr_delta_rule:
      case OpKind::rwkv7:
        key(c.kind == OpKind::rwkv7 ? "w" : "gk", d);
        for (Real& e : d) e = exp(e);
        key("a", a);
        key("b", b);
        break;
      case OpKind::selective_scan:
      case OpKind::ssd: break;
    }
    if (low_rank) {
      std::fill(u.begin(), u.end(), Real(0));
      for (std::int64_t i = 0; i < K; ++i)
        for (std::int64_t j = 0; j < V; ++j) u[j] += a[i] * S[i * V + j];
    }
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j) {
        Real next = d[i] * S[i * V + j] + k[i] * vv[j];
        if (low_rank) next += b[i] * u[j];
        S[i * V + j] = next;
      }
    for (std::int64_t j = 0; j < V; ++j) {
      Real acc(0);
      for (std::int64_t i = 0; i < K; ++i) acc += (scale * q[i]) * S[i * V + j];
      if (mamba) acc = (acc + skip[j]) * gate[j];
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

template <class Real>
std::string type_name() {
  if constexpr (std::is_same_v<Real, double>) return "double";
  else if constexpr (std::is_same_v<Real, Float128>) return "float128";
  else return "cpp_bin_float_50";
}

// The chains to certify: all within the budget, else a seeded sample that fits, else a seeded
// prefix of one chain (at least one step). Each entry: (chain, steps).
std::vector<std::pair<std::int64_t, std::int64_t>> certified_selection(const LiftedOp& l, const OracleOptions& options,
                                                                       bool& all) {
  const OpCase& c = *l.problem;
  const std::int64_t cost = op_step_cost(c);
  const std::int64_t chains = static_cast<std::int64_t>(l.sequences.size()) * c.heads;
  const auto length = [&](std::int64_t chain) {
    const OpCase::Sequence& s = l.sequences[static_cast<std::size_t>(chain / c.heads)];
    return s.t_end - s.t_begin;
  };
  std::vector<std::pair<std::int64_t, std::int64_t>> picked;
  all = false;
  if (options.certify_budget <= 0) return picked;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < chains; ++i) total += length(i) * cost;
  if (total <= options.certify_budget) {
    for (std::int64_t i = 0; i < chains; ++i) picked.emplace_back(i, length(i));
    all = true;
    return picked;
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(chains));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::int64_t spent = 0;
  for (std::int64_t i : order)
    if (spent + length(i) * cost <= options.certify_budget) {
      picked.emplace_back(i, length(i));
      spent += length(i) * cost;
    }
  if (picked.empty())
    picked.emplace_back(order.front(), std::clamp<std::int64_t>(options.certify_budget / cost, 1, length(order.front())));
  return picked;
}

template <class Primary, class Certifier>
OpOracleResult oracle_in(const OpCase& c, const OracleOptions& options) {
  const LiftedOp l = lift(c);
  OpOracleResult r;
  r.type = type_name<Primary>();
  r.digits = std::numeric_limits<Primary>::digits;
  r.certifier_type = type_name<Certifier>();
  r.certifier_digits = std::numeric_limits<Certifier>::digits;
  auto outputs = run_all<Primary>(l, options.poll);
  const std::vector<double>& o = outputs.at("o");
  const std::vector<double>& state = outputs.at("final_state");
  r.finite = std::all_of(o.begin(), o.end(), [](double x) { return std::isfinite(x); }) &&
             std::all_of(state.begin(), state.end(), [](double x) { return std::isfinite(x); });
  bool all = false;
  const auto picked = certified_selection(l, options, all);
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
  const LiftedOp l = lift(problem);
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
