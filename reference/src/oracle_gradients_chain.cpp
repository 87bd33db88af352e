// The oracle's gradients for the cells whose channels mix (gru and slstm mix 'head', slstm mix
// 'dense', hopfield, m2rnn, rwkv7): BPTT of each whole row chain by forward-mode automatic
// differentiation of the oracle's own step (`cell_step`, oracle_math.hpp) over
// AutoDiffScalar<Vec<Real>> with one direction per state value, per gate input of the step and
// per recurrent matrix entry (head matrices, M2RNN's W), the directions seeded once; the
// colouring of oracle_gradient_math.hpp does not apply (channels are not independent), so a step
// costs about n + rows + params plain steps: these cells are small (dense chains of n <= 32,
// M2RNN and RWKV-7 states of a few dozen values) and the cost is paid by the oracle only.
//
// The walk, per chain: the forward unroll stores the state before every step, then from the last
// step μ ← μ + g_t; (μ_prev, d_wx_t, d_θ) = μᵀ ∂f/∂(s, wx, θ); Σ_t d_θ; μ ← μ_prev; the final μ is
// the cotangent of the chain's initial state (∇h0). The affine: ∇W = Σ d_wx xᵀ, ∇b = Σ d_wx,
// ∇x_t = Wᵀ d_wx_t in the working type. Matrix gradients are taken with respect to the clamped
// value and multiplied by the clamp mask of their raw entry (PreparedCase::head_matrix_sources).
//
// Certification: the same walk, every chain, in the next wider type (float128 for a double
// primary, cpp_bin_float_50 for a float128 one); self_check_delta is the largest difference of
// any gradient element, both rounded to double.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "oracle_gradient_math.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference::detail {
namespace {

template <class Real>
std::map<std::string, Tensor> whole_chain_gradients(const GradientCase& gc) {
  using Ad = Eigen::AutoDiffScalar<Vec<Real>>;
  const PreparedCase& problem = gc.problem;
  const Index n = problem.state_size();
  const Index rows = problem.gate_inputs(problem.d_h);
  const Index affine_rows = problem.affine_rows();
  const auto n_matrix = static_cast<Index>(problem.head_matrices.size());
  const auto n_value = static_cast<Index>(problem.value_matrix.size());
  const Index params = n_matrix + n_value;
  const Index directions = n + rows + params;
  const Index d_in = problem.d_in;
  const auto chains = static_cast<std::int64_t>(problem.chains.size());

  ColMajorMatrix<Real> d_wx = ColMajorMatrix<Real>::Zero(rows, problem.batch * problem.time);
  ColMajorMatrix<Real> state = ColMajorMatrix<Real>::Zero(n, chains);
  ColMajorMatrix<Real> param_sums = ColMajorMatrix<Real>::Zero(std::max<Index>(params, 1), chains);
  const InputAffine<Real> affine(problem, -1);
  const RecurrentDiagonals<Real> recurrent = lift_recurrent<Real>(problem, -1);
  parallel_for(chains, [&](std::int64_t c) {
    const RowChain& chain = problem.chains[static_cast<std::size_t>(c)];
    const Index len = chain.length();
    std::vector<double> x(static_cast<std::size_t>(len * d_in));
    lift_x(problem, chain.b, chain.t_begin, len, x.data());
    ColMajorMatrix<Real> wx(rows, len), before(n, len);
    {
      Vec<Real> column(rows);
      for (Index t = 0; t < len; ++t) {
        affine.apply(x.data() + t * d_in, column);
        fill_derived_gates<Real>(problem, problem.d_h, x.data() + t * d_in, column);
        wx.col(t) = column;
      }
      StepWork<Real> work(problem.d_h);
      Vec<Real> s = initial_state<Real>(problem, chain, -1), s_next(n);
      for (Index t = 0; t < len; ++t) {
        before.col(t) = s;
        cell_step(recurrent, wx.col(t), s, s_next, work);
        s.swap(s_next);
      }
    }
    // The AD inputs, seeded once: state k, gate input r, matrix entry p.
    RecurrentDiagonals<Ad> recurrent_ad = recurrent.template cast<Ad>();
    Index direction = n + rows;
    for (auto& m : recurrent_ad.matrices) {  // head_matrices order: consecutive (m, m) blocks
      for (Index i = 0; i < m.rows(); ++i) {
        for (Index j = 0; j < m.cols(); ++j) {
          m(i, j) = Ad(m(i, j).value(), directions, direction++);
        }
      }
    }
    for (Index i = 0; i < recurrent_ad.value_matrix.rows(); ++i) {
      for (Index j = 0; j < recurrent_ad.value_matrix.cols(); ++j) {
        recurrent_ad.value_matrix(i, j) = Ad(recurrent_ad.value_matrix(i, j).value(), directions, direction++);
      }
    }
    Vec<Ad> s_ad(n), s_new_ad(n), wx_ad(rows);
    for (Index k = 0; k < n; ++k) s_ad(k) = Ad(Real(0), directions, k);
    for (Index r = 0; r < rows; ++r) wx_ad(r) = Ad(Real(0), directions, n + r);
    StepWork<Ad> work_ad(problem.d_h);
    Vec<Real> mu = Vec<Real>::Zero(n), local(directions);
    const Index column0 = chain.b * problem.time + chain.t_begin;
    for (Index t = len - 1; t >= 0; --t) {
      const std::int64_t time = chain.t_begin + t;
      for (Index k = 0; k < n; ++k) {
        mu(k) += Real(gc.cotangent_at(chain.b, time, k / problem.d_h, k % problem.d_h));
      }
      for (Index k = 0; k < n; ++k) s_ad(k).value() = before(k, t);
      for (Index r = 0; r < rows; ++r) wx_ad(r).value() = wx(r, t);
      cell_step(recurrent_ad, wx_ad, s_ad, s_new_ad, work_ad);
      local.setZero();
      for (Index i = 0; i < n; ++i) {
        if (s_new_ad(i).derivatives().size() == directions) local += mu(i) * s_new_ad(i).derivatives();
      }
      d_wx.col(column0 + t) = local.segment(n, rows);
      if (params > 0) param_sums.col(c) += local.segment(n + rows, params);
      mu = local.head(n);
    }
    state.col(c) = mu;
  });

  std::map<std::string, Tensor> out;
  const auto rounded = [](const Real& v) { return to_double(v); };
  // Affines (these cells have one): ∇W = Σ d_wx xᵀ, ∇b = Σ d_wx, ∇x = Wᵀ d_wx.
  ColMajorMatrix<double> x_all(d_in, problem.batch * problem.time);
  for (std::int64_t b = 0; b < problem.batch; ++b) {
    lift_x(problem, b, 0, problem.time, x_all.data() + b * problem.time * d_in);
  }
  const ColMajorMatrix<Real> features = x_all.topRows(problem.features).template cast<Real>();
  const RowMajorMatrix<Real> w = lifted_weight<Real>(problem);
  const ColMajorMatrix<Real> d_affine = d_wx.topRows(affine_rows);
  const RowMajorMatrix<Real> dW = d_affine * features.transpose();
  const Vec<Real> db = d_affine.rowwise().sum();
  const ColMajorMatrix<Real> dx = w.transpose() * d_affine;
  for (const AffineParameter& a : problem.affine_parameters) {
    Tensor wt(DType::f64, {affine_rows, problem.features});
    Tensor bt(DType::f64, {affine_rows});
    for (Index r = 0; r < affine_rows; ++r) {
      for (Index k = 0; k < problem.features; ++k) wt.data_as<double>()[r * problem.features + k] = rounded(dW(r, k));
      bt.data_as<double>()[r] = rounded(db(r));
    }
    out[a.weight] = std::move(wt);
    out[a.bias] = std::move(bt);
  }
  Tensor xt(DType::f64, {problem.batch, problem.time, d_in});
  for (Index col = 0; col < problem.batch * problem.time; ++col) {
    for (Index k = 0; k < d_in; ++k) xt.data_as<double>()[col * d_in + k] = rounded(dx(k, col));
  }
  out["x"] = std::move(xt);
  // Matrices: Σ over chains in order, then into their state_dict entries with the clamp mask.
  const Vec<Real> sums = param_sums.rowwise().sum();
  for (const auto& [name, shape] : problem.matrix_parameter_shapes) {
    Tensor t(DType::f64, shape);
    std::fill(t.data_as<double>(), t.data_as<double>() + t.numel(), 0.0);
    out[name] = std::move(t);
  }
  for (Index p = 0; p < n_matrix; ++p) {
    const auto& source = problem.head_matrix_sources[static_cast<std::size_t>(p)];
    out[source.tensor].data_as<double>()[source.flat] += rounded(sums(p)) * source.mask;
  }
  for (Index p = 0; p < n_value; ++p) out["W"].data_as<double>()[p] = rounded(sums(n_matrix + p));
  if (!problem.h0.empty()) {
    const std::int64_t h0_rows = static_cast<std::int64_t>(problem.h0.size()) / n;
    Tensor h0(DType::f64, {h0_rows, n});
    std::fill(h0.data_as<double>(), h0.data_as<double>() + h0.numel(), 0.0);
    for (std::int64_t c = 0; c < chains; ++c) {
      const std::int64_t row = problem.chains[static_cast<std::size_t>(c)].h0_row;
      for (Index k = 0; k < n; ++k) h0.data_as<double>()[row * n + k] = rounded(state(k, c));
    }
    out["h0"] = std::move(h0);
  }
  return out;
}

template <class Primary, class Certifier>
OracleGradients whole_chain_gradients_in(const Case& problem, const GradientCase& gc, const OracleOptions& options) {
  OracleGradients result;
  result.tensors = whole_chain_gradients<Primary>(gc);
  if (problem.h0) {  // the given h0's shape, (rows, slots, d_h) or (rows, d_h) or (B, K, V)
    Tensor& h0 = result.tensors.at("h0");
    h0 = h0.reshaped(problem.h0->shape());
  }
  result.type = working_type_name<Primary>();
  result.digits = std::numeric_limits<Primary>::digits;
  for (const auto& entry : result.tensors) {
    for (double v : entry.second.to_f64_vector()) result.finite = result.finite && std::isfinite(v);
  }
  if (options.certify) {
    const std::map<std::string, Tensor> check = whole_chain_gradients<Certifier>(gc);
    double delta = 0.0;
    for (const auto& entry : check) {
      const std::vector<double> p = result.tensors.at(entry.first).reshaped({entry.second.numel()}).to_f64_vector();
      const std::vector<double> t = entry.second.to_f64_vector();
      for (std::size_t i = 0; i < t.size(); ++i) {
        const double d = std::abs(p[i] - t[i]);
        delta = std::isnan(d) || std::isnan(delta) ? std::numeric_limits<double>::quiet_NaN() : std::max(delta, d);
      }
    }
    result.certifier_type = working_type_name<Certifier>();
    result.certifier_digits = std::numeric_limits<Certifier>::digits;
    result.self_check_delta = delta;
    result.certified_all_chains = true;
    for (const RowChain& chain : gc.problem.chains) {
      result.certified_chains.push_back(fmt::format("b={},t={}..{}", chain.b, chain.t_begin, chain.t_end));
      result.certified_chain_steps += chain.length() * gc.problem.state_size();
    }
  }
  return result;
}

}  // namespace

OracleGradients oracle_gradients_whole_chains(const Case& problem, const GradientCase& gc,
                                              const OracleOptions& options) {
  if (gc.problem.dtype == DType::f64) return whole_chain_gradients_in<Float128, Bin50>(problem, gc, options);
  return whole_chain_gradients_in<double, Float128>(problem, gc, options);
}

}  // namespace pararnn::reference::detail
