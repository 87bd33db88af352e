// Internal to the oracle: back-propagation through time of one chain by automatic
// differentiation of the oracle's own step (`cell_step` of oracle_math.hpp), generic on the
// working type, and the linear algebra of the input affine's gradients. Instantiated for double
// (oracle_gradients.cpp), float128 (oracle_gradients_float128.cpp) and cpp_bin_float_50
// (oracle_gradients_bin50.cpp); the driver is oracle_gradients.cpp.
//
// The AD: forward mode over the few local directions of a channel, all channels at once.
// Every cell the oracle implements is diagonal: channel j of the new state depends only on
// channel j of the previous state, of the gate inputs wx and of the recurrent vectors. So ONE
// evaluation of `cell_step` over AutoDiffScalar<Matrix<Real, N, 1>>, with the N = slots + gates +
// n_rec directions seeded alike in every channel (direction `slot` on s[slot][j], `slots + g` on
// wx[g][j], `slots + gates + i` on a_i[j], for every j), leaves in the derivatives of
// s_new[slot][j] exactly ∂s_new[slot][j] / ∂(s[·][j], wx[·][j], a_·[j]): each channel's full local
// Jacobian (a column-compressed Jacobian; the colouring "same direction in every channel" is
// exact because channels never mix). The step's vector-Jacobian product with the state
// cotangent μ is then, per channel, Σ_slot μ[slot][j] · derivatives(s_new[slot][j]).
// N is 7 (GRU: 1 + 3 + 3), 10 (LSTM: 2 + 3 + 5), 4 (NLRU: 1 + 2 + 1), 12 (sLSTM: 4 + 4 + the
// 4 rows of R), 6 (CfC: 1 + 4 gate inputs f_pre, c_x, b, Δt + u) or 8 (Titans: 1 + 5 + 2), fixed
// at compile time, so derivatives live on the stack and a step costs about N + 1 plain steps. A tape-based reverse mode would cost a constant
// factor of the same order at these N and add a second AD implementation to trust; this one is
// the AutoDiffScalar the oracle's Jacobians already use. (Forward mode over every parameter
// would cost (gates·d_in + ...)·d_h directions a step; over the full state, n directions.)
// A cell whose channels mix would need another colouring: run_bptt refuses it.
//
// BPTT of one chain (a batch row or a packed segment; all channels, or one channel of it): the
// forward unroll stores the previous state and wx of every step ((slots + gates)·width·len
// values of Real), then the backward walk from the last step:
//   μ ← μ + g_t   (g_t: the cotangent of H[t], grad_H or ones)
//   (μ_prev, d_wx_t, d_a) = VJP of step t at (H[t−1], wx_t) with μ;  Σ_t d_a;  μ ← μ_prev
// and the final μ is the cotangent of the chain's initial state (∇h0 when h0 is given). The
// recurrent gradient is taken with respect to the clamped value and multiplied by the clamp
// mask (PreparedCase::recurrent_gradient_mask). The affines' gradients (W_x, and CfC's W_b) are
// linear in the gate-input cotangents d_wx of their rows: ∇W = Σ d_wx featᵀ, ∇b = Σ d_wx,
// ∇feat_t = Wᵀ d_wx_t, evaluated in the working type from the exactly lifted W and x
// (input_affine_gradients). CfC's Δt is a function of x's last channel, not of W: its d_h
// cotangents (one per channel: Δt is broadcast) are summed into ∇x[..., -1], times dΔt/draw
// (1 above the floor, 0 where the floor clamps it).
#pragma once

#include <boost/multiprecision/cpp_bin_float.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "oracle_math.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference::detail {

// cpp_bin_float_50 without expression templates, as oracle_certify.cpp spells it.
using Bin50 = boost::multiprecision::number<boost::multiprecision::cpp_bin_float<50>,
                                            boost::multiprecision::et_off>;

template <class Real>
using ColMajorMatrix = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic>;

// Where one work item (a chain, or one channel of it) writes its results. Entries are addressed
// as blocks of `stride` channels, the item's channel jj at `offset + jj` within each block:
//   d_wx:      step t, gate g at d_wx[t·gates·stride + g·stride + offset + jj]
//   state:     slot s at state[s·stride + offset + jj] (the cotangent of the initial state)
//   recurrent: vector i at recurrent[i·stride + offset + jj] (the chain's masked contribution)
// The primary writes every chain into case-wide arrays (stride d_h, offset = the channel);
// the certifier gives each item its own compact arrays (stride = width, offset 0).
template <class Real>
struct ChainGradientView {
  Real* d_wx = nullptr;
  Real* state = nullptr;
  Real* recurrent = nullptr;
  Index stride = 0;
  Index offset = 0;
};

template <class Real, int N>
void bptt_chain(const GradientCase& gc, const ChainSpec& spec, const ChainGradientView<Real>& out) {
  using Derivatives = Eigen::Matrix<Real, N, 1>;
  using Ad = Eigen::AutoDiffScalar<Derivatives>;
  const PreparedCase& problem = gc.problem;
  const RowChain& chain = problem.chains.at(static_cast<std::size_t>(spec.chain));
  const Index width = spec.channel < 0 ? problem.d_h : 1;
  const Index first = spec.channel < 0 ? 0 : spec.channel;
  const Index slots = problem.slots;
  const Index gates = problem.gates;
  const auto n_recurrent = static_cast<Index>(problem.recurrent.size());
  const Index n = slots * width;
  const Index rows = gates * width;
  const Index len = chain.length();
  const Index d_in = problem.d_in;

  // wx of every step, as the forward unroll forms it (ChainRunner): one GEMM for double, the
  // exactly summed InputAffine otherwise.
  std::vector<double> x(static_cast<std::size_t>(len * d_in));
  lift_x(problem, chain.b, chain.t_begin, len, x.data());
  const InputAffine<Real> affine(problem, spec.channel);
  ColMajorMatrix<Real> wx(rows, len);
  if constexpr (std::is_same_v<Real, double>) {
    const Eigen::Map<const ColMajorMatrix<double>> xs(x.data(), d_in, len);
    wx.topRows(affine.rows).noalias() = affine.w * xs.topRows(affine.features);
    wx.topRows(affine.rows).colwise() += affine.bias;
    for (Index t = 0; t < len; ++t) {
      fill_derived_gates<double>(problem, width, x.data() + t * d_in, wx.col(t));
    }
  } else {
    Vec<Real> column(rows);
    for (Index t = 0; t < len; ++t) {
      affine.apply(x.data() + t * d_in, column);
      fill_derived_gates<Real>(problem, width, x.data() + t * d_in, column);
      wx.col(t) = column;
    }
  }

  // Forward: the state before every step.
  const RecurrentDiagonals<Real> recurrent = lift_recurrent<Real>(problem, spec.channel);
  ColMajorMatrix<Real> before(n, len);
  {
    StepWork<Real> work(width);
    Vec<Real> s = initial_state<Real>(problem, chain, spec.channel);
    Vec<Real> s_next(n);
    for (Index t = 0; t < len; ++t) {
      before.col(t) = s;
      cell_step(recurrent, wx.col(t), s, s_next, work);
      s.swap(s_next);
    }
  }

  // The AD inputs: seeds fixed once, values set every step.
  RecurrentDiagonals<Ad> recurrent_ad{problem.kind, width, {}, problem.eps};
  for (Index i = 0; i < n_recurrent; ++i) {
    Vec<Ad> a(width);
    for (Index j = 0; j < width; ++j) {
      a(j) = Ad(recurrent.a[static_cast<std::size_t>(i)](j), N,
                static_cast<int>(slots + gates + i));
    }
    recurrent_ad.a.push_back(std::move(a));
  }
  Vec<Ad> s_ad(n), s_new_ad(n), wx_ad(rows);
  for (Index slot = 0; slot < slots; ++slot) {
    for (Index j = 0; j < width; ++j) s_ad(slot * width + j) = Ad(Real(0), N, static_cast<int>(slot));
  }
  for (Index g = 0; g < gates; ++g) {
    for (Index j = 0; j < width; ++j) {
      wx_ad(g * width + j) = Ad(Real(0), N, static_cast<int>(slots + g));
    }
  }
  StepWork<Ad> work_ad(width);

  // Backward.
  Vec<Real> mu = Vec<Real>::Zero(n);
  Vec<Real> mu_prev(n);
  Vec<Real> recurrent_sum = Vec<Real>::Zero(n_recurrent * width);
  Derivatives local;
  for (Index t = len - 1; t >= 0; --t) {
    const std::int64_t time = chain.t_begin + t;
    for (Index slot = 0; slot < slots; ++slot) {
      for (Index j = 0; j < width; ++j) {
        mu(slot * width + j) += Real(gc.cotangent_at(chain.b, time, slot, first + j));
      }
    }
    for (Index k = 0; k < n; ++k) s_ad(k).value() = before(k, t);
    for (Index r = 0; r < rows; ++r) wx_ad(r).value() = wx(r, t);
    cell_step(recurrent_ad, wx_ad, s_ad, s_new_ad, work_ad);
    Real* d_wx = out.d_wx + t * gates * out.stride + out.offset;
    for (Index j = 0; j < width; ++j) {
      local.setZero();
      for (Index slot = 0; slot < slots; ++slot) {
        local += mu(slot * width + j) * s_new_ad(slot * width + j).derivatives();
      }
      for (Index slot = 0; slot < slots; ++slot) mu_prev(slot * width + j) = local(slot);
      for (Index g = 0; g < gates; ++g) d_wx[g * out.stride + j] = local(slots + g);
      for (Index i = 0; i < n_recurrent; ++i) {
        recurrent_sum(i * width + j) += local(slots + gates + i);
      }
    }
    mu.swap(mu_prev);
  }
  for (Index slot = 0; slot < slots; ++slot) {
    for (Index j = 0; j < width; ++j) {
      out.state[slot * out.stride + out.offset + j] = mu(slot * width + j);
    }
  }
  for (Index i = 0; i < n_recurrent; ++i) {
    const std::vector<double>& mask =
        problem.recurrent_gradient_mask[static_cast<std::size_t>(i)];
    for (Index j = 0; j < width; ++j) {
      out.recurrent[i * out.stride + out.offset + j] =
          recurrent_sum(i * width + j) * Real(mask[static_cast<std::size_t>(first + j)]);
    }
  }
}

// Runs the BPTT of every item (chains, or channels of chains) on the OpenMP threads, item i
// writing through views[i].
template <class Real>
void run_bptt(const GradientCase& gc, const std::vector<ChainSpec>& items,
              const std::vector<ChainGradientView<Real>>& views) {
  const PreparedCase& problem = gc.problem;
  if (!channels_independent(problem.kind)) {
    throw std::logic_error("oracle_gradients: the colored AD needs a cell whose channels are "
                           "independent");
  }
  const auto directions =
      static_cast<int>(problem.slots + problem.gates + problem.recurrent.size());
  parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t i) {
    const auto at = static_cast<std::size_t>(i);
    // The AD's direction count is a template argument: one instance per count that a diagonal
    // row of the cell list has (gru 7, lstm 10, nlru 4, slstm 12, cfc 6, cfc diag_h 7, titans 8).
    switch (directions) {
      case 4: return bptt_chain<Real, 4>(gc, items[at], views[at]);
      case 6: return bptt_chain<Real, 6>(gc, items[at], views[at]);
      case 7: return bptt_chain<Real, 7>(gc, items[at], views[at]);
      case 8: return bptt_chain<Real, 8>(gc, items[at], views[at]);
      case 10: return bptt_chain<Real, 10>(gc, items[at], views[at]);
      case 12: return bptt_chain<Real, 12>(gc, items[at], views[at]);
      default: break;
    }
    throw std::logic_error("oracle_gradients: unexpected number of AD directions for the cell");
  });
}

// The affines' weights, (affine_gates·d_h, features), lifted exactly into Real.
template <class Real>
RowMajorMatrix<Real> lifted_weight(const PreparedCase& problem) {
  const Index rows = problem.affine_rows();
  RowMajorMatrix<Real> w(rows, problem.features);
  for (Index r = 0; r < rows; ++r) {
    for (Index k = 0; k < problem.features; ++k) {
      w(r, k) = Real(problem.w[static_cast<std::size_t>(r * problem.features + k)]);
    }
  }
  return w;
}

// ∇x of `count` steps, out (d_in × count, column-major), from their gate-input cotangents d_wx
// (gates·d_h × count, column-major), in Real: the feature rows Wᵀ · d_wx[affine rows]; for CfC
// the last row Σ_j d_wx[Δt block][j] · dΔt/draw, draw read from x (the same steps lifted,
// d_in × count, column-major).
template <class Real>
void input_gradient(const PreparedCase& problem, const RowMajorMatrix<Real>& w, const Real* d_wx,
                    const double* x, Index count, Real* out) {
  const Eigen::Map<const ColMajorMatrix<Real>> d(d_wx, problem.gates * problem.d_h, count);
  Eigen::Map<ColMajorMatrix<Real>> o(out, problem.d_in, count);
  o.topRows(problem.features).noalias() = w.transpose() * d.topRows(w.rows());
  if (problem.time_gate < 0) return;
  const Index last = problem.d_in - 1;
  for (Index t = 0; t < count; ++t) {
    const Real slope(PreparedCase::time_step_slope(x[t * problem.d_in + last]));
    o(last, t) = slope * d.col(t).segment(problem.time_gate * problem.d_h, problem.d_h).sum();
  }
}

template <class Real>
struct InputAffineGradients {
  RowMajorMatrix<Real> weight;  // (affine_gates·d_h, features): every affine, stacked
  Vec<Real> bias;               // (affine_gates·d_h)
  ColMajorMatrix<Real> x;       // (d_in, B·T): column b·T + t
};

// The gradients of the affines and x from the gate-input cotangents of every step (gates·d_h ×
// B·T, column b·T + t), in Real; a fixed partition of the work, so the bits do not depend on the
// number of threads.
template <class Real>
InputAffineGradients<Real> input_affine_gradients(const PreparedCase& problem,
                                                  const ColMajorMatrix<Real>& d_wx) {
  constexpr Index kColumnsPerItem = 256;
  constexpr Index kRowsPerItem = 8;
  const Index rows = problem.gates * problem.d_h;
  const Index affine_rows = problem.affine_rows();
  const Index columns = problem.batch * problem.time;
  const Index d_in = problem.d_in;
  ColMajorMatrix<double> x_double(d_in, columns);
  for (std::int64_t b = 0; b < problem.batch; ++b) {
    lift_x(problem, b, 0, problem.time, x_double.data() + b * problem.time * d_in);
  }
  const ColMajorMatrix<Real> features = x_double.topRows(problem.features).template cast<Real>();
  const RowMajorMatrix<Real> w = lifted_weight<Real>(problem);

  InputAffineGradients<Real> out;
  out.x.resize(d_in, columns);
  parallel_for((columns + kColumnsPerItem - 1) / kColumnsPerItem, [&](std::int64_t item) {
    const Index c0 = item * kColumnsPerItem;
    const Index count = std::min(kColumnsPerItem, columns - c0);
    input_gradient(problem, w, d_wx.data() + c0 * rows, x_double.data() + c0 * d_in, count,
                   out.x.data() + c0 * d_in);
  });
  out.weight.resize(affine_rows, problem.features);
  parallel_for((affine_rows + kRowsPerItem - 1) / kRowsPerItem, [&](std::int64_t item) {
    const Index r0 = item * kRowsPerItem;
    const Index count = std::min(kRowsPerItem, affine_rows - r0);
    out.weight.middleRows(r0, count).noalias() =
        d_wx.middleRows(r0, count) * features.transpose();
  });
  out.bias = d_wx.topRows(affine_rows).rowwise().sum();
  return out;
}

// Each working type's instances live in one translation unit (EXTERN: `extern` to declare them,
// empty to instantiate them). The linear algebra of every step is needed for the primaries only.
#define PARARNN_ORACLE_GRADIENT_TEMPLATES(EXTERN, Real)                                       \
  EXTERN template void run_bptt<Real>(const GradientCase&, const std::vector<ChainSpec>&,      \
                                      const std::vector<ChainGradientView<Real>>&);           \
  EXTERN template RowMajorMatrix<Real> lifted_weight<Real>(const PreparedCase&);              \
  EXTERN template void input_gradient<Real>(const PreparedCase&, const RowMajorMatrix<Real>&, \
                                            const Real*, const double*, Index, Real*);
#define PARARNN_ORACLE_PRIMARY_GRADIENT_TEMPLATES(EXTERN, Real) \
  EXTERN template InputAffineGradients<Real> input_affine_gradients<Real>( \
      const PreparedCase&, const ColMajorMatrix<Real>&);

// The cells whose channels mix (oracle_gradients_chain.cpp): BPTT of whole row chains by
// forward-mode AD over every state value, gate input and recurrent matrix entry.
OracleGradients oracle_gradients_whole_chains(const Case& problem, const GradientCase& gc,
                                              const OracleOptions& options);

PARARNN_ORACLE_GRADIENT_TEMPLATES(extern, double)
PARARNN_ORACLE_GRADIENT_TEMPLATES(extern, Float128)
PARARNN_ORACLE_GRADIENT_TEMPLATES(extern, Bin50)
PARARNN_ORACLE_PRIMARY_GRADIENT_TEMPLATES(extern, double)
PARARNN_ORACLE_PRIMARY_GRADIENT_TEMPLATES(extern, Float128)

}  // namespace pararnn::reference::detail
