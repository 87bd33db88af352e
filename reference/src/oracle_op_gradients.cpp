// The op oracle's gradients (op_oracle.hpp, oracle_op_gradients): an explicit adjoint loop
// through the sequential recurrence of each chain (sequence, head), written from the step's
// equations (docs/ops/README.md, oracle_op_math.hpp), never from a library's backward; the
// primary in double (f32/f16/bf16 cases) or float128 (f64 cases), certified by the same loop in
// float128 / cpp_bin_float_50, and the same loop in f32 (f64 for f64 cases) for the floor.
//
// The step S_t = diag(d) S_{t-1} + b uᵀ + k v̄ᵀ with u = S_{t-1}ᵀ a, o_t = (S_tᵀ (scale q) + skip) ⊙ gate
// has, for the cotangent S̄ of S_t (after adding o_t's, as o_t reads the updated state):
//   q̄ = scale S_t ō,  S̄ += scale q ōᵀ,  d̄_i = Σ_j S̄_ij S_{t-1,ij},  k̄ = S̄ v̄,  v̄̄ = S̄ᵀ k,
//   b̄ = S̄ u,  ū = S̄ᵀ b,  ā = S_{t-1} ū,  S̄_{t-1} = diag(d) S̄ + a ūᵀ;
// then each op's d, a, b, v̄ (and l2norm, softplus, silu(z), the D skip) map these back onto its
// inputs. The states are recomputed forward from checkpoints every ~√T steps (memory √T·K·V a
// chain). Chains are independent, so each writes its own gradients; the weights shared by chains
// (mamba's A, D, dt bias) and B, C shared by the heads of a group are summed over chains after
// (in double, chain order: deterministic).
//
// Certification (the mechanism of the cell gradients, oracle.hpp): the chains the budget allows
// (certify_budget / kGradientCertifyStepCost chain-steps, each step op_step_cost) are rerun in the
// certifier type and compared, for each, value by value: every per-step gradient, the chain's
// contribution to the weights and the cotangent of its initial state. When no whole chain fits,
// the last m steps of one seeded chain are rerun from the primary's own state at their start
// (lifted exactly): their per-step gradients are exactly the reported ones (the adjoint of a
// step depends only on later steps), named "…,t>=L-m".
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "oracle_op_math.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn::reference {
namespace {

using detail::Bin50;
using detail::Float128;
using detail::LiftedOp;
using detail::OpStep;

// The inputs of the op, in the spec's order; absent optional inputs have present = false.
struct GradientSlot {
  std::string name;
  OpInputShape shape{};
  std::int64_t width = 1;
  bool weight = false;
  bool present = false;
};

std::vector<GradientSlot> gradient_slots(const OpCase& c) {
  std::vector<GradientSlot> slots;
  for (const OpInputSpec& in : op_spec(c.op).inputs)
    slots.push_back({std::string(in.name), in.shape, detail::input_width(c, in.shape), detail::is_weight(in.shape),
                     c.inputs.contains(std::string(in.name))});
  return slots;
}

// The cotangents of L, lifted exactly: the case's "grad.<output>", or the default loss
// (op_default_loss_outputs: ones); an output without one gets zeros.
struct LossCotangents {
  std::vector<double> o, state;
};

LossCotangents loss_cotangents(const OpCase& c) {
  const OpSpec& spec = op_spec(c.op);
  const std::int64_t o_count = shape_numel(c.o_shape()), state_count = shape_numel(c.final_state_shape());
  LossCotangents out;
  const auto fill = [&](const std::string& name, std::int64_t count) {
    if (!c.cotangents.empty()) {
      const auto it = c.cotangents.find(name);
      return it == c.cotangents.end() ? std::vector<double>(static_cast<std::size_t>(count), 0.0)
                                      : Tensor::copy_of(it->second).to_f64_vector();
    }
    const std::vector<std::string> loss = op_default_loss_outputs(c);
    const bool in_loss = std::find(loss.begin(), loss.end(), name) != loss.end();
    return std::vector<double>(static_cast<std::size_t>(count), in_loss ? 1.0 : 0.0);
  };
  out.o = fill(std::string(spec.out_name), o_count);
  out.state = fill(std::string(spec.state_name), state_count);
  return out;
}

// One chain's gradients in the working type, from step `from` of the chain on.
template <class Real>
struct ChainGradient {
  std::int64_t from = 0;
  std::vector<std::vector<Real>> g;  // per slot: (steps - from)·width values, a weight's: width
  std::vector<Real> initial;         // K·V: cotangent of the chain's start state (from == 0)
};

template <class Real>
ChainGradient<Real> chain_gradient(const LiftedOp& l, const LossCotangents& cot, const std::vector<GradientSlot>& slots,
                                   std::int64_t n, std::int64_t h, std::int64_t from, const std::vector<Real>* start,
                                   const std::function<void()>& poll) {
  using std::exp;
  const OpCase& c = *l.problem;
  const std::int64_t K = c.k_dim, V = c.v_dim;
  const OpCase::Sequence seq = l.sequences[static_cast<std::size_t>(n)];
  const std::int64_t steps = seq.t_end - seq.t_begin - from;
  const bool mamba = detail::is_mamba(c), low_rank = detail::is_low_rank(c);
  const Real scale = Real(c.scale);
  ChainGradient<Real> out;
  out.from = from;
  out.g.resize(slots.size());
  const auto slot = [&](std::string_view name) -> std::int64_t {
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (slots[i].name == name && slots[i].present) return static_cast<std::int64_t>(i);
    return -1;
  };
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i].present)
      out.g[i].assign(static_cast<std::size_t>(slots[i].weight ? slots[i].width : steps * slots[i].width), Real(0));

  // Forward, keeping the state before every stride-th step.
  std::vector<Real> S = start ? *start : detail::op_initial_state<Real>(l, n, h);
  const std::int64_t stride = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(steps)))));
  std::vector<std::vector<Real>> checkpoints;
  std::vector<Real> u(V);
  OpStep<Real> v(K, V);
  const auto prepare = [&](std::int64_t s) { detail::prepare_op_step(l, seq, h, seq.t_begin + from + s, v); };
  for (std::int64_t s = 0; s < steps; ++s) {
    if (poll && s % 1024 == 1023) poll();
    if (s % stride == 0) checkpoints.push_back(S);
    prepare(s);
    detail::apply_op_step(c, v, S, u);
  }

  std::vector<Real> Sbar(static_cast<std::size_t>(K * V));
  for (std::int64_t i = 0; i < K; ++i)
    for (std::int64_t j = 0; j < V; ++j)
      Sbar[i * V + j] = Real(cot.state[static_cast<std::size_t>(detail::state_index(c, n, h, i, j))]);

  const std::int64_t iq = slot(c.kind == OpKind::rwkv7 ? "r" : mamba ? "C" : "q"), ik = slot(mamba ? "B" : "k");
  const std::int64_t iv = slot(mamba ? (c.kind == OpKind::ssd ? "x" : "u") : "v");
  const std::int64_t ig = slot(c.kind == OpKind::rwkv7 ? "w" : c.kind == OpKind::dplr_delta_rule ? "gk" : "g");
  const std::int64_t ibeta = slot("beta"), ia = slot("a"), ib = slot("b");
  const std::int64_t idt = slot(c.kind == OpKind::ssd ? "dt" : "delta"), iA = slot("A"), iD = slot("D"), iz = slot("z");
  const std::int64_t ibias = slot(c.kind == OpKind::ssd ? "dt_bias" : "delta_bias");
  std::vector<Real> obar(V), gatebar(V), qbar(K), kbar(K), dbar(K), abar(K), bbar(K), vvbar(V), ubar(V);
  const auto put = [&](std::int64_t i, std::int64_t s, std::int64_t e, const Real& value) {
    if (i < 0) return;
    const GradientSlot& sl = slots[static_cast<std::size_t>(i)];
    std::vector<Real>& dst = out.g[static_cast<std::size_t>(i)];
    if (sl.weight) dst[static_cast<std::size_t>(e)] += value;
    else dst[static_cast<std::size_t>(s * sl.width + e)] = value;
  };
  // The reverse of one step: S_prev before it, S_new after it; Sbar is S_new's cotangent on
  // entry (without o_t's) and S_prev's on exit.
  const auto backward = [&](std::int64_t s, const std::vector<Real>& S_prev, const std::vector<Real>& S_new) {
    const std::int64_t t = seq.t_begin + from + s;
    for (std::int64_t j = 0; j < V; ++j) {
      const Real go = Real(cot.o[static_cast<std::size_t>(detail::o_index(c, seq.b, t, h, j))]);
      if (mamba) {
        const Real pre = detail::op_readout(c, v, S_new, j, scale);
        obar[j] = go * v.gate[j];
        gatebar[j] = go * (pre + v.skip[j]);
      } else {
        obar[j] = go;
      }
    }
    for (std::int64_t i = 0; i < K; ++i) {
      Real acc(0);
      for (std::int64_t j = 0; j < V; ++j) acc += S_new[i * V + j] * obar[j];
      qbar[i] = scale * acc;
      const Real sq = scale * v.q[i];
      for (std::int64_t j = 0; j < V; ++j) Sbar[i * V + j] += sq * obar[j];
    }
    std::fill(vvbar.begin(), vvbar.end(), Real(0));
    std::fill(ubar.begin(), ubar.end(), Real(0));
    for (std::int64_t i = 0; i < K; ++i) {
      Real dd(0), kk(0);
      for (std::int64_t j = 0; j < V; ++j) {
        const Real sb = Sbar[i * V + j];
        dd += sb * S_prev[i * V + j];
        kk += sb * v.vv[j];
        vvbar[j] += v.k[i] * sb;
        if (low_rank) ubar[j] += v.b[i] * sb;
      }
      dbar[i] = dd;
      kbar[i] = kk;
    }
    if (low_rank) {
      std::fill(u.begin(), u.end(), Real(0));  // u = S_prevᵀ a
      for (std::int64_t r = 0; r < K; ++r)
        for (std::int64_t j = 0; j < V; ++j) u[j] += v.a[r] * S_prev[r * V + j];
      for (std::int64_t i = 0; i < K; ++i) {
        Real bb(0), aa(0);
        for (std::int64_t j = 0; j < V; ++j) {
          bb += Sbar[i * V + j] * u[j];
          aa += S_prev[i * V + j] * ubar[j];
        }
        bbar[i] = bb;
        abar[i] = aa;
      }
    }
    for (std::int64_t i = 0; i < K; ++i)
      for (std::int64_t j = 0; j < V; ++j) {
        Real prev = v.d[i] * Sbar[i * V + j];
        if (low_rank) prev += v.a[i] * ubar[j];
        Sbar[i * V + j] = prev;
      }
    if (mamba) {
      Real dtbar(0), abar_sum(0), dskip(0);
      for (std::int64_t i = 0; i < K; ++i) {
        const Real dd = dbar[i] * v.d[i];
        dtbar += dd * v.A[i];
        if (c.kind == OpKind::selective_scan) put(iA, s, i, dd * v.dt);
        else abar_sum += dd * v.dt;
      }
      if (c.kind == OpKind::ssd) put(iA, s, 0, abar_sum);
      for (std::int64_t j = 0; j < V; ++j) {
        dtbar += vvbar[j] * v.v_raw[j];
        put(iv, s, j, v.dt * vvbar[j] + (iD >= 0 ? v.skip_weight * obar[j] : Real(0)));
        dskip += obar[j] * v.v_raw[j];
        if (iz >= 0) {
          const Real sig = Real(1) / (Real(1) + exp(-v.z[j]));
          put(iz, s, j, gatebar[j] * (sig * (Real(1) + v.z[j] * (Real(1) - sig))));
        }
      }
      if (iD >= 0) put(iD, s, 0, dskip);
      const Real prebar = c.softplus && !(v.dt_pre > Real(20)) ? Real(dtbar / (Real(1) + exp(-v.dt_pre))) : dtbar;
      put(idt, s, 0, prebar);
      put(ibias, s, 0, prebar);
      for (std::int64_t i = 0; i < K; ++i) {
        put(ik, s, i, kbar[i]);
        put(iq, s, i, qbar[i]);
      }
      return;
    }
    switch (c.kind) {
      case OpKind::gla:
        for (std::int64_t i = 0; i < K; ++i) put(ig, s, i, dbar[i] * v.d[i]);
        break;
      case OpKind::simple_gla: {
        Real sum(0);
        for (std::int64_t i = 0; i < K; ++i) sum += dbar[i] * v.d[i];
        put(ig, s, 0, sum);
        break;
      }
      case OpKind::delta_rule:
      case OpKind::gated_delta_rule: {
        // a = k, b = −β·decay·k, v̄ = β v, d = decay.
        Real kb(0), dsum(0), vb(0);
        for (std::int64_t i = 0; i < K; ++i) {
          kb += v.k[i] * bbar[i];
          dsum += dbar[i];
          kbar[i] += abar[i] - (v.beta * v.decay) * bbar[i];
        }
        for (std::int64_t j = 0; j < V; ++j) {
          vb += v.v_raw[j] * vvbar[j];
          vvbar[j] = v.beta * vvbar[j];
        }
        put(ibeta, s, 0, vb - v.decay * kb);
        if (c.kind == OpKind::gated_delta_rule) put(ig, s, 0, (dsum - v.beta * kb) * v.decay);
        break;
      }
      case OpKind::dplr_delta_rule:
      case OpKind::rwkv7:
        for (std::int64_t i = 0; i < K; ++i) {
          put(ig, s, i, dbar[i] * v.d[i]);
          put(ia, s, i, abar[i]);
          put(ib, s, i, bbar[i]);
        }
        break;
      default: break;
    }
    if (c.qk_l2norm) {
      // x = x̃ / n, n = sqrt(Σ x̃² + eps): x̃̄ = (x̄ − x (x · x̄)) / n.
      for (auto [x, bar, norm] : {std::tuple{&v.q, &qbar, v.q_norm}, std::tuple{&v.k, &kbar, v.k_norm}}) {
        Real dot(0);
        for (std::int64_t i = 0; i < K; ++i) dot += (*x)[i] * (*bar)[i];
        for (std::int64_t i = 0; i < K; ++i) (*bar)[i] = ((*bar)[i] - (*x)[i] * dot) / norm;
      }
    }
    for (std::int64_t i = 0; i < K; ++i) {
      put(iq, s, i, qbar[i]);
      put(ik, s, i, kbar[i]);
    }
    for (std::int64_t j = 0; j < V; ++j) put(iv, s, j, vvbar[j]);
  };

  std::vector<std::vector<Real>> states;
  for (std::int64_t block = static_cast<std::int64_t>(checkpoints.size()) - 1; block >= 0; --block) {
    const std::int64_t s0 = block * stride, s1 = std::min(steps, s0 + stride);
    if (poll) poll();
    states.assign(1, checkpoints[static_cast<std::size_t>(block)]);
    S = states.front();
    for (std::int64_t s = s0; s < s1; ++s) {
      prepare(s);
      detail::apply_op_step(c, v, S, u);
      states.push_back(S);
    }
    for (std::int64_t s = s1 - 1; s >= s0; --s) {
      prepare(s);
      backward(s, states[static_cast<std::size_t>(s - s0)], states[static_cast<std::size_t>(s - s0 + 1)]);
    }
  }
  if (from == 0) out.initial = Sbar;
  return out;
}

// Every chain's gradients in Real, in chain order (n·H + h).
template <class Real>
std::vector<ChainGradient<Real>> all_chain_gradients(const LiftedOp& l, const LossCotangents& cot,
                                                     const std::vector<GradientSlot>& slots,
                                                     const std::function<void()>& poll) {
  const OpCase& c = *l.problem;
  const std::int64_t chains = static_cast<std::int64_t>(l.sequences.size()) * c.heads;
  std::vector<ChainGradient<Real>> out(static_cast<std::size_t>(chains));
  detail::parallel_for(chains, [&](std::int64_t chain) {
    out[static_cast<std::size_t>(chain)] = chain_gradient<Real>(l, cot, slots, chain / c.heads, chain % c.heads, 0, nullptr, poll);
  });
  return out;
}

// The chains' gradients summed into the inputs' layouts (double, chain order), keyed by input name.
template <class Real>
std::map<std::string, std::vector<double>> scatter(const LiftedOp& l, const std::vector<GradientSlot>& slots,
                                                   const std::vector<ChainGradient<Real>>& chains) {
  const OpCase& c = *l.problem;
  std::map<std::string, std::vector<double>> out;
  for (const GradientSlot& sl : slots)
    if (sl.present) out[sl.name].assign(l.in.at(sl.name).size(), 0.0);
  const OpSpec& spec = op_spec(c.op);
  if (c.initial_state) out[std::string(spec.initial_name)].assign(l.h0.size(), 0.0);
  for (std::size_t chain = 0; chain < chains.size(); ++chain) {
    const std::int64_t n = static_cast<std::int64_t>(chain) / c.heads, h = static_cast<std::int64_t>(chain) % c.heads;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    const ChainGradient<Real>& g = chains[chain];
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const GradientSlot& sl = slots[i];
      if (!sl.present) continue;
      std::vector<double>& dst = out.at(sl.name);
      const std::vector<Real>& src = g.g[i];
      if (sl.weight) {
        for (std::int64_t e = 0; e < sl.width; ++e)
          dst[static_cast<std::size_t>(detail::input_index(c, sl.shape, 0, 0, h, e))] += static_cast<double>(src[e]);
        continue;
      }
      const std::int64_t steps = static_cast<std::int64_t>(src.size()) / sl.width;
      for (std::int64_t s = 0; s < steps; ++s)
        for (std::int64_t e = 0; e < sl.width; ++e)
          dst[static_cast<std::size_t>(detail::input_index(c, sl.shape, seq.b, seq.t_begin + g.from + s, h, e))] +=
              static_cast<double>(src[static_cast<std::size_t>(s * sl.width + e)]);
    }
    if (c.initial_state)
      for (std::int64_t i = 0; i < c.k_dim; ++i)
        for (std::int64_t j = 0; j < c.v_dim; ++j)
          out.at(std::string(spec.initial_name))[static_cast<std::size_t>(detail::state_index(c, n, h, i, j))] =
              static_cast<double>(g.initial[static_cast<std::size_t>(i * c.v_dim + j)]);
  }
  return out;
}

const Tensor& input_tensor(const OpCase& c, const std::string& name) {
  if (c.initial_state && name == op_spec(c.op).initial_name) return *c.initial_state;
  return c.input(name);
}

template <class Primary, class Certifier>
OpOracleGradients gradients_in(const OpCase& c, const OracleOptions& options) {
  const LiftedOp l = detail::lift_op(c);
  const LossCotangents cot = loss_cotangents(c);
  const std::vector<GradientSlot> slots = gradient_slots(c);
  OpOracleGradients r;
  r.type = detail::op_type_name<Primary>();
  r.digits = std::numeric_limits<Primary>::digits;
  r.certifier_type = detail::op_type_name<Certifier>();
  r.certifier_digits = std::numeric_limits<Certifier>::digits;
  const std::vector<ChainGradient<Primary>> primary = all_chain_gradients<Primary>(l, cot, slots, options.poll);
  for (auto& [name, values] : scatter(l, slots, primary)) {
    r.finite = r.finite && std::all_of(values.begin(), values.end(), [](double x) { return std::isfinite(x); });
    const Tensor& in = input_tensor(c, name);
    r.tensors.emplace(name, Tensor::from_values(DType::f64, in.shape(), values));
  }
  if (!options.certify) return r;

  bool all = false;
  const auto picked = detail::op_certified_selection(l, options.certify_budget / kGradientCertifyStepCost, options.seed,
                                                     op_step_cost(c), all);
  r.certified_all_chains = all;
  const std::int64_t H = c.heads, K = c.k_dim, V = c.v_dim;
  std::vector<double> deltas(picked.size(), 0.0);
  detail::parallel_for(static_cast<std::int64_t>(picked.size()), [&](std::int64_t p) {
    const auto [chain, steps] = picked[static_cast<std::size_t>(p)];
    const std::int64_t n = chain / H, h = chain % H;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    const std::int64_t from = seq.t_end - seq.t_begin - steps;
    std::vector<Certifier> start;
    if (from > 0) {
      // The primary's own state before step `from`, lifted exactly.
      std::vector<Primary> S = detail::op_initial_state<Primary>(l, n, h);
      std::vector<Primary> u(V);
      OpStep<Primary> v(K, V);
      for (std::int64_t s = 0; s < from; ++s) {
        detail::prepare_op_step(l, seq, h, seq.t_begin + s, v);
        detail::apply_op_step(c, v, S, u);
      }
      for (const Primary& x : S) start.push_back(Certifier(x));
    }
    const ChainGradient<Certifier> cert =
        chain_gradient<Certifier>(l, cot, slots, n, h, from, from > 0 ? &start : nullptr, options.poll);
    const ChainGradient<Primary>& prim = primary[static_cast<std::size_t>(chain)];
    Certifier worst(0);
    bool nan = false;
    const auto add = [&](const Primary& a, const Certifier& b) {
      using std::abs;
      const Certifier d = abs(Certifier(a) - b);
      if (!(d == d)) nan = true;
      if (d > worst) worst = d;
    };
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (!slots[i].present) continue;
      const std::int64_t w = slots[i].width;
      if (slots[i].weight) {
        if (from == 0)
          for (std::int64_t e = 0; e < w; ++e) add(prim.g[i][static_cast<std::size_t>(e)], cert.g[i][static_cast<std::size_t>(e)]);
        continue;
      }
      for (std::int64_t s = 0; s < steps; ++s)
        for (std::int64_t e = 0; e < w; ++e)
          add(prim.g[i][static_cast<std::size_t>((from + s) * w + e)], cert.g[i][static_cast<std::size_t>(s * w + e)]);
    }
    if (from == 0)
      for (std::size_t e = 0; e < cert.initial.size(); ++e) add(prim.initial[e], cert.initial[e]);
    deltas[static_cast<std::size_t>(p)] = nan ? std::numeric_limits<double>::infinity() : static_cast<double>(worst);
  });
  for (std::size_t p = 0; p < picked.size(); ++p) {
    const auto [chain, steps] = picked[p];
    const std::int64_t n = chain / H, h = chain % H;
    const OpCase::Sequence& seq = l.sequences[static_cast<std::size_t>(n)];
    std::string name = c.cu_seqlens ? fmt::format("segment={},h={}", n, h) : fmt::format("b={},h={}", n, h);
    if (steps < seq.t_end - seq.t_begin) name += fmt::format(",t>={}", seq.t_end - seq.t_begin - steps);
    r.certified_chains.push_back(std::move(name));
    r.certified_chain_steps += steps;
    r.self_check_delta = std::max(r.self_check_delta, deltas[p]);
  }
  return r;
}

}  // namespace

OpOracleGradients oracle_op_gradients(const OpCase& problem, const OracleOptions& options) {
  if (options.certify_budget < 0)
    throw ContractViolation("certify_budget", "must be >= 0", std::to_string(options.certify_budget));
  if (problem.dtype() == DType::f64) return gradients_in<Float128, Bin50>(problem, options);
  return gradients_in<double, Float128>(problem, options);
}

std::map<std::string, Tensor> op_gradients_in_dtype(const OpCase& problem) {
  const LiftedOp l = detail::lift_op(problem);
  const LossCotangents cot = loss_cotangents(problem);
  const std::vector<GradientSlot> slots = gradient_slots(problem);
  const auto values = problem.dtype() == DType::f64 ? scatter(l, slots, all_chain_gradients<double>(l, cot, slots, {}))
                                                    : scatter(l, slots, all_chain_gradients<float>(l, cot, slots, {}));
  std::map<std::string, Tensor> out;
  for (const auto& [name, v] : values) {
    const Tensor& in = input_tensor(problem, name);
    out.emplace(name, Tensor::from_values(in.dtype(), in.shape(), v));
  }
  return out;
}

}  // namespace pararnn::reference
