// Internal to the op oracle (op_oracle.hpp): the case lifted exactly, the layouts, one step of
// the generalized delta rule (its quantities from the op's inputs, docs/ops/README.md) and the
// chains to certify, shared by the forward unroll (oracle_ops.cpp) and the reverse loop of the
// gradients (oracle_op_gradients.cpp), generic on the working type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "oracle_gradient_math.hpp"
#include "oracle_math.hpp"
#include "pararnn/reference/op_oracle.hpp"

namespace pararnn::reference::detail {

// The case's inputs, lifted exactly into double (every storage dtype is a subset of double).
struct LiftedOp {
  const OpCase* problem = nullptr;
  std::map<std::string, std::vector<double>> in;
  std::vector<double> h0;  // [N, H, K, V] or empty
  std::vector<OpCase::Sequence> sequences;
};

inline LiftedOp lift_op(const OpCase& c) {
  LiftedOp l{&c, {}, {}, c.sequences()};
  for (const auto& [name, t] : c.inputs) l.in.emplace(name, Tensor::copy_of(t).to_f64_vector());
  if (c.initial_state) l.h0 = Tensor::copy_of(*c.initial_state).to_f64_vector();
  return l;
}

inline bool is_mamba(const OpCase& c) { return c.kind == OpKind::selective_scan || c.kind == OpKind::ssd; }
inline bool is_low_rank(const OpCase& c) {
  return c.kind == OpKind::delta_rule || c.kind == OpKind::gated_delta_rule || c.kind == OpKind::dplr_delta_rule ||
         c.kind == OpKind::rwkv7;
}

// Where element (b, t, h, j) of the output and (n, h, i, j) of the state (i: key / state index,
// j: value index) live in the op's own layouts.
inline std::int64_t o_index(const OpCase& c, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t j) {
  if (c.kind == OpKind::selective_scan) return (b * c.heads + h) * c.time + t;
  return ((b * c.time + t) * c.heads + h) * c.v_dim + j;
}
inline std::int64_t state_index(const OpCase& c, std::int64_t n, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (c.kind == OpKind::ssd) return ((n * c.heads + h) * c.v_dim + j) * c.k_dim + i;
  return ((n * c.heads + h) * c.k_dim + i) * c.v_dim + j;
}

// How many values of an input one step (or, for weights, one chain) of head / channel h reads,
// and where element e of it lives for batch row b, time t.
inline std::int64_t input_width(const OpCase& c, OpInputShape shape) {
  switch (shape) {
    case OpInputShape::key:
    case OpInputShape::channel_state:
    case OpInputShape::group_state_time:
    case OpInputShape::time_group_state: return c.k_dim;
    case OpInputShape::value: return c.v_dim;
    case OpInputShape::head_scalar:
    case OpInputShape::channel_time:
    case OpInputShape::per_head: return 1;
  }
  return 1;
}
// Weights (A, D, the dt bias): one value per head / channel shared by every step and sequence.
inline bool is_weight(OpInputShape shape) {
  return shape == OpInputShape::channel_state || shape == OpInputShape::per_head;
}
inline std::int64_t input_index(const OpCase& c, OpInputShape shape, std::int64_t b, std::int64_t t, std::int64_t h,
                                std::int64_t e) {
  const std::int64_t T = c.time, H = c.heads, K = c.k_dim, V = c.v_dim, G = c.groups, group = h / (H / G);
  switch (shape) {
    case OpInputShape::key: return ((b * T + t) * H + h) * K + e;
    case OpInputShape::value: return ((b * T + t) * H + h) * V + e;
    case OpInputShape::head_scalar: return (b * T + t) * H + h;
    case OpInputShape::channel_time: return (b * H + h) * T + t;
    case OpInputShape::channel_state: return h * K + e;
    case OpInputShape::per_head: return h;
    case OpInputShape::group_state_time: return ((b * G + group) * K + e) * T + t;  // [B, K, T] is G = 1
    case OpInputShape::time_group_state: return ((b * T + t) * G + group) * K + e;
  }
  return 0;
}

// mamba's softplus: x above 20 is x (torch's threshold, and the kernels').
template <class Real>
Real op_softplus(const Real& x) {
  using std::exp;
  using std::log;
  return x > Real(20) ? x : Real(log(Real(1) + exp(x)));
}

// One step's quantities: S_t = diag(d) S + b (aᵀ S) + k v̄ᵀ, o = (Sᵀ (scale q) + skip) ⊙ gate,
// and what the reverse loop needs of the op's own inputs to map cotangents back to them.
template <class Real>
struct OpStep {
  std::vector<Real> q, k, d, a, b, vv, skip, gate;
  std::vector<Real> q_raw, k_raw;     // before use_qk_l2norm_in_kernel
  Real q_norm = Real(1), k_norm = Real(1);
  std::vector<Real> v_raw;            // fla's v; mamba's input (u or x)
  std::vector<Real> z;                // mamba's z, when given
  Real beta = Real(0), decay = Real(1);   // the delta rules
  Real dt = Real(0), dt_pre = Real(0);    // mamba: Δ, and raw + bias before the softplus
  Real skip_weight = Real(0);             // mamba's D[h], when given
  std::vector<Real> A;                    // mamba: A of each state index
  OpStep(std::int64_t K, std::int64_t V)
      : q(K), k(K), d(K), a(K), b(K), vv(V), skip(V, Real(0)), gate(V, Real(1)), q_raw(K), k_raw(K), v_raw(V),
        z(V, Real(0)), A(K, Real(0)) {}
};

// The step of sequence `seq`, head h, time t (docs/ops/README.md's table of d, a, b, v̄).
template <class Real>
void prepare_op_step(const LiftedOp& l, const OpCase::Sequence& seq, std::int64_t h, std::int64_t t, OpStep<Real>& v) {
  using std::exp;
  using std::sqrt;
  const OpCase& c = *l.problem;
  const std::int64_t T = c.time, H = c.heads, K = c.k_dim, V = c.v_dim;
  const auto get = [&](const char* name) -> const std::vector<double>& { return l.in.at(name); };
  const auto has = [&](const char* name) { return l.in.contains(name); };
  const std::int64_t G = c.groups, group = h / (H / G);
  const std::int64_t row = (seq.b * T + t) * H + h;  // [B, T, H] index
  const auto key = [&](const char* name, std::vector<Real>& dst) {
    const std::vector<double>& src = get(name);
    for (std::int64_t i = 0; i < K; ++i) dst[i] = Real(src[static_cast<std::size_t>(row * K + i)]);
  };
  if (is_mamba(c)) {
    // selective_scan: channel h; ssd: head h (docs/ops/README.md). Δ = softplus(raw + bias).
    const bool ss = c.kind == OpKind::selective_scan;
    const std::size_t dt_at = static_cast<std::size_t>(ss ? (seq.b * H + h) * T + t : row);
    Real dt = Real(get(ss ? "delta" : "dt")[dt_at]);
    if (has(ss ? "delta_bias" : "dt_bias")) dt += Real(get(ss ? "delta_bias" : "dt_bias")[static_cast<std::size_t>(h)]);
    v.dt_pre = dt;
    if (c.softplus) dt = op_softplus(dt);
    v.dt = dt;
    const std::vector<double>& A = get("A");
    for (std::int64_t i = 0; i < K; ++i) {
      v.A[i] = Real(A[static_cast<std::size_t>(ss ? h * K + i : h)]);
      v.d[i] = exp(dt * v.A[i]);
      const std::size_t bc = static_cast<std::size_t>(ss ? ((seq.b * G + group) * K + i) * T + t
                                                         : ((seq.b * T + t) * G + group) * K + i);
      v.k[i] = Real(get("B")[bc]);
      v.q[i] = Real(get("C")[bc]);
    }
    if (has("D")) v.skip_weight = Real(get("D")[static_cast<std::size_t>(h)]);
    for (std::int64_t j = 0; j < V; ++j) {
      const std::size_t at = static_cast<std::size_t>(ss ? dt_at : row * V + j);
      const Real x = Real(get(ss ? "u" : "x")[at]);
      v.v_raw[j] = x;
      v.vv[j] = dt * x;
      v.skip[j] = has("D") ? v.skip_weight * x : Real(0);
      if (has("z")) {
        const Real z = Real(get("z")[at]);
        v.z[j] = z;
        v.gate[j] = z / (Real(1) + exp(-z));
      }
    }
  } else {
    const std::vector<double>& vsrc = get("v");
    for (std::int64_t j = 0; j < V; ++j) v.vv[j] = v.v_raw[j] = Real(vsrc[static_cast<std::size_t>(row * V + j)]);
    key(c.kind == OpKind::rwkv7 ? "r" : "q", v.q);
    key("k", v.k);
  }
  v.q_raw = v.q;
  v.k_raw = v.k;
  if (c.qk_l2norm) {
    const Real l2_eps = Real(1e-6);
    for (auto [x, norm] : {std::pair{&v.q, &v.q_norm}, std::pair{&v.k, &v.k_norm}}) {
      Real sum(0);
      for (const Real& e : *x) sum += e * e;
      *norm = sqrt(sum + l2_eps);
      for (Real& e : *x) e = e / *norm;
    }
  }
  switch (c.kind) {
    case OpKind::gla:
      key("g", v.d);
      for (Real& e : v.d) e = exp(e);
      break;
    case OpKind::simple_gla: {
      const Real e = exp(Real(get("g")[static_cast<std::size_t>(row)]));
      std::fill(v.d.begin(), v.d.end(), e);
      break;
    }
    case OpKind::delta_rule:
    case OpKind::gated_delta_rule: {
      v.beta = Real(get("beta")[static_cast<std::size_t>(row)]);
      v.decay = c.kind == OpKind::gated_delta_rule ? Real(exp(Real(get("g")[static_cast<std::size_t>(row)]))) : Real(1);
      std::fill(v.d.begin(), v.d.end(), v.decay);
      for (std::int64_t i = 0; i < K; ++i) {
        v.a[i] = v.k[i];
        v.b[i] = -(v.beta * v.decay) * v.k[i];
      }
      for (Real& e : v.vv) e = v.beta * e;
      break;
    }
    case OpKind::dplr_delta_rule:
    case OpKind::rwkv7:
      key(c.kind == OpKind::rwkv7 ? "w" : "gk", v.d);
      for (Real& e : v.d) e = exp(e);
      key("a", v.a);
      key("b", v.b);
      break;
    case OpKind::selective_scan:
    case OpKind::ssd: break;
  }
}

// S ← diag(d) S + b (aᵀ S) + k v̄ᵀ in place (u: V values of scratch).
template <class Real>
void apply_op_step(const OpCase& c, const OpStep<Real>& v, std::vector<Real>& S, std::vector<Real>& u) {
  const std::int64_t K = c.k_dim, V = c.v_dim;
  const bool low_rank = is_low_rank(c);
  if (low_rank) {
    std::fill(u.begin(), u.end(), Real(0));
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j) u[j] += v.a[i] * S[i * V + j];
  }
  for (std::int64_t i = 0; i < K; ++i)
    for (std::int64_t j = 0; j < V; ++j) {
      Real next = v.d[i] * S[i * V + j] + v.k[i] * v.vv[j];
      if (low_rank) next += v.b[i] * u[j];
      S[i * V + j] = next;
    }
}

// o_t's value j before the mamba skip and gate: Σ_i (scale q_i) S_ij.
template <class Real>
Real op_readout(const OpCase& c, const OpStep<Real>& v, const std::vector<Real>& S, std::int64_t j, const Real& scale) {
  Real acc(0);
  for (std::int64_t i = 0; i < c.k_dim; ++i) acc += (scale * v.q[i]) * S[i * c.v_dim + j];
  return acc;
}

// The chain's state at its start: initial_state[n, h] lifted, or zeros.
template <class Real>
std::vector<Real> op_initial_state(const LiftedOp& l, std::int64_t n, std::int64_t h) {
  const OpCase& c = *l.problem;
  std::vector<Real> S(static_cast<std::size_t>(c.k_dim * c.v_dim), Real(0));
  if (!l.h0.empty())
    for (std::int64_t i = 0; i < c.k_dim; ++i)
      for (std::int64_t j = 0; j < c.v_dim; ++j)
        S[i * c.v_dim + j] = Real(l.h0[static_cast<std::size_t>(state_index(c, n, h, i, j))]);
  return S;
}

template <class Real>
std::string op_type_name() {
  if constexpr (std::is_same_v<Real, double>) return "double";
  else if constexpr (std::is_same_v<Real, Float128>) return "float128";
  else return "cpp_bin_float_50";
}

// The chains to certify: all within the budget (counted in chain-steps times `cost`), else a
// seeded sample that fits, else a seeded part of one chain (at least one step; `steps` below the
// chain's length). Each entry: (chain = n·H + h, steps).
inline std::vector<std::pair<std::int64_t, std::int64_t>> op_certified_selection(const LiftedOp& l,
                                                                                 std::int64_t budget,
                                                                                 std::uint64_t seed,
                                                                                 std::int64_t cost, bool& all) {
  const OpCase& c = *l.problem;
  const std::int64_t chains = static_cast<std::int64_t>(l.sequences.size()) * c.heads;
  const auto length = [&](std::int64_t chain) {
    const OpCase::Sequence& s = l.sequences[static_cast<std::size_t>(chain / c.heads)];
    return s.t_end - s.t_begin;
  };
  std::vector<std::pair<std::int64_t, std::int64_t>> picked;
  all = false;
  if (budget <= 0) return picked;
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < chains; ++i) total += length(i) * cost;
  if (total <= budget) {
    for (std::int64_t i = 0; i < chains; ++i) picked.emplace_back(i, length(i));
    all = true;
    return picked;
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(chains));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::int64_t spent = 0;
  for (std::int64_t i : order)
    if (spent + length(i) * cost <= budget) {
      picked.emplace_back(i, length(i));
      spent += length(i) * cost;
    }
  if (picked.empty())
    picked.emplace_back(order.front(), std::clamp<std::int64_t>(budget / cost, 1, length(order.front())));
  return picked;
}

}  // namespace pararnn::reference::detail
