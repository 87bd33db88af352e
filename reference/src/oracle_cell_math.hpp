// Internal to the oracle: the cell equations in matrix form, written once, generic on the scalar
// (double, float128, cpp_bin_float_50, and Eigen's AutoDiffScalar over either primary type); the
// chain unroller built on them is oracle_math.hpp. Written from the equations of the specification
// (shared/reference/pararnn-torch-spec.md §1.1, §1.3 to §1.7), never from cells/.
//
// For one batch row with state s (slots*d_h, slot-major):
//   wx = the gate inputs (PreparedCase): W·feat_t + bias split into d_h-wide gate blocks in the
//   pack order, then CfC's Δt block; diag(v) is the diagonal matrix of a clamped recurrent
//   vector v (ã = clamp(a, -cap, cap)).
//   GRU (diag), pack (z_x, r_x, n_x):
//     z = σ(diag(ã_z) h + z_x),  r = σ(diag(ã_r) h + r_x),  n = tanh(diag(ã_n) diag(r) h + n_x)
//     h' = diag(1 - z) h + diag(z) n
//   LSTM (CIFG, peepholes), state (c, h), pack (f_x, z_x, o_x):
//     f = σ(diag(ã_f) h + diag(c̃_f) c + f_x),  z = tanh(diag(ã_z) h + z_x)
//     c' = diag(f) c + diag(1 - f) z
//     o = σ(diag(ã_o) h + diag(c̃_o) c' + o_x)      (the output peephole reads the new cell)
//     h' = diag(o) tanh(c')
//   NLRU, pack (a_x, c_x):
//     a = σ(a_x),  n = tanh(c_x + diag(ũ) h),  h' = diag(a) h + diag(1 - a) n
//   sLSTM (mix diag), state (c, n, m, h), pack (i, f, z, o), R̃'s rows r_i, r_f, r_z, r_o:
//     z_g = g_x + diag(r_g) h  (g = i, f, z, o)
//     m' = max(z_f + m, z_i)   (at a tie the derivative is 1/2 to each side)
//     i = exp(z_i - m'),  f = exp(z_f + m - m'),  z = tanh(z_z),  o = σ(z_o)
//     n' = diag(f) n + i,  c' = diag(f) c + diag(i) z,  h' = diag(o) diag(n' + eps)⁻¹ c'
//   CfC (v0.17.5, gate_mix 'input'), gate inputs (f_pre, c_x, b, Δt):
//     a = σ(-(diag(Δt) softplus(f_pre) + b)),  n = tanh(c_x + diag(ũ) h)
//     h' = diag(a) h + diag(1 - a) n
//   Titans, pack (α_pre, θ_pre, k, v, n_pre):
//     α = σ(α_pre),  θ = softplus(θ_pre),  g = diag(k) (diag(k) h - v)
//     h' = diag(1 - α) h - diag(θ) g + diag(ũ) tanh(n_pre + diag(r̃) h)
//   GRU (mix head, §1.2), per head with column vector h_hd and A stored (in, out), i.e. the
//   row product h A is Aᵀ h; pack (z_x, r_x, n_x), each head's slice of d_head channels:
//     z = σ(A_zᵀ h + z_x),  r = σ(A_rᵀ h + r_x),  n = tanh(A_nᵀ diag(r) h + n_x)
//     h' = diag(1 - z) h + diag(z) n
//   Hopfield (§1.8), K and V the (d_h, d_h) row-major halves of the affine's output:
//     a = exp(β K h) / Σ exp(β K h),  h' = V a
//   (no shift by the largest logit: this is the definition, and the working types have range).
//   RWKV-7 (§1.10), per head with the (d, d) state S (rows: value index, columns: key index)
//   and the head's slices of the gate blocks (w_raw, a_raw, κ_raw, v, k, r):
//     w = σ(w_raw),  a = σ(a_raw),  κ̂ = κ_raw / max(‖κ_raw‖₂, 1e-6)
//     G = diag(w) − κ̂ (a ⊙ κ̂)ᵀ,  U = v kᵀ,  S' = S G + U      (r is the readout's, unused)
//   M2RNN (§1.9), state H (K, V) (the state vector read row-major), W (V, V), gate inputs
//   (k (K), v (V), f_logit):
//     f = σ(f_logit),  H' = f H + (1 - f) tanh(H W + k vᵀ)
//   These three mix channels: their chains are whole batch rows, never single channels.
// σ(v) = 1 / (1 + exp(-v)); softplus is PyTorch's (beta 1, threshold 20): v for v > 20, else
// log1p(exp(v)); exp, tanh and log1p are the scalar type's own (found by ADL). For the
// AutoDiffScalar, softplus is a primitive whose derivative is σ(v) (1 above the threshold), as
// Eigen's own exp and tanh are; every other derivative comes from the AD of these expressions.
#pragma once

#include <Eigen/Core>
#include <boost/multiprecision/eigen.hpp>
#include <boost/multiprecision/float128.hpp>
#include <unsupported/Eigen/AutoDiff>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "oracle_internal.hpp"

namespace pararnn::reference::detail {

using Float128 = boost::multiprecision::float128;

template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Eigen::Index;

template <class Scalar>
struct IsAutoDiff : std::false_type {};
template <class Derivatives>
struct IsAutoDiff<Eigen::AutoDiffScalar<Derivatives>> : std::true_type {};

template <class Scalar>
struct Sigmoid {
  Scalar operator()(const Scalar& v) const {
    using std::exp;
    return Scalar(1) / (Scalar(1) + exp(-v));
  }
};
template <class Scalar>
struct Tanh {
  Scalar operator()(const Scalar& v) const {
    using std::tanh;
    return tanh(v);
  }
};
template <class Scalar>
struct Exp {
  Scalar operator()(const Scalar& v) const {
    using std::exp;
    return exp(v);
  }
};

// log1p of the scalar type (boost's float128 overload does not compile: it returns the raw
// __float128 of log1pq without converting it, so float128 calls log1pq itself).
template <class Real>
Real log1p_of(const Real& v) {
  if constexpr (std::is_same_v<Real, Float128>) {
    return Real(log1pq(v.backend().value()));
  } else {
    using std::log1p;
    return log1p(v);
  }
}

// PyTorch's F.softplus (beta 1, threshold 20), on a plain scalar.
template <class Real>
Real softplus_value(const Real& v) {
  using std::exp;
  return v > Real(20) ? v : log1p_of(Real(exp(v)));
}
template <class Scalar>
struct Softplus {
  Scalar operator()(const Scalar& v) const {
    if constexpr (IsAutoDiff<Scalar>::value) {
      // A primitive of the AD: d softplus / dv = σ(v) below the threshold, 1 above it.
      using Real = std::decay_t<decltype(v.value())>;
      const Real& x = v.value();
      if (x > Real(20)) return v;
      return Scalar(softplus_value(x), v.derivatives() * Sigmoid<Real>()(x));
    } else {
      return softplus_value(v);
    }
  }
};
// max(left, right) with the sLSTM tie convention: at left == right the value is unchanged and
// the derivative is 1/2 to each side ((left + right) / 2 there); NaN propagates.
template <class Scalar>
struct TieMax {
  Scalar operator()(const Scalar& left, const Scalar& right) const {
    if (left > right) return left;
    if (right > left) return right;
    return (left + right) / Scalar(2);
  }
};

template <class Real>
double to_double(const Real& v) {
  return static_cast<double>(v);
}

// The clamped recurrent vectors of the cell as diagonals (one channel or all), and the cell's
// constants.
template <class Scalar>
struct RecurrentDiagonals {
  OracleCell kind = OracleCell::gru;
  Index d = 0;
  std::vector<Vec<Scalar>> a;
  double eps = 0.0;  // slstm
  std::vector<RowMajorMatrix<Scalar>> matrices;  // gru_head: [head·3 + gate], (in, out)
  double beta = 0.0;                             // hopfield
  Index heads = 1;                               // rwkv7
  Index k_dim = 0, v_dim = 0;                    // m2rnn: the state is (k_dim, v_dim)
  RowMajorMatrix<Scalar> value_matrix;           // m2rnn: W (v_dim, v_dim)

  template <class Other>
  RecurrentDiagonals<Other> cast() const {
    RecurrentDiagonals<Other> out{kind, d, {}, eps, {}, beta, heads, k_dim, v_dim, {}};
    for (const auto& v : a) out.a.push_back(v.template cast<Other>());
    for (const auto& m : matrices) out.matrices.push_back(m.template cast<Other>());
    out.value_matrix = value_matrix.template cast<Other>();
    return out;
  }
};

// channel = -1: every channel; else that channel alone (d = 1).
template <class Scalar>
RecurrentDiagonals<Scalar> lift_recurrent(const PreparedCase& problem, std::int64_t channel) {
  RecurrentDiagonals<Scalar> out;
  out.kind = problem.kind;
  out.d = channel < 0 ? problem.d_h : 1;
  out.eps = problem.eps;
  out.beta = problem.beta;
  out.k_dim = problem.k_dim;
  out.v_dim = problem.v_dim;
  if (problem.kind == OracleCell::m2rnn) {
    out.value_matrix.resize(problem.v_dim, problem.v_dim);
    for (Index i = 0; i < problem.v_dim; ++i) {
      for (Index j = 0; j < problem.v_dim; ++j) {
        out.value_matrix(i, j) = Scalar(problem.value_matrix[static_cast<std::size_t>(i * problem.v_dim + j)]);
      }
    }
  }
  out.heads = problem.n_heads;
  if (problem.kind == OracleCell::gru_head || problem.kind == OracleCell::slstm_head) {
    const Index m = problem.d_h / problem.n_heads;
    const auto count = static_cast<std::int64_t>(problem.head_matrices.size()) / (m * m);
    for (std::int64_t k = 0; k < count; ++k) {
      RowMajorMatrix<Scalar> a(m, m);
      for (Index i = 0; i < m; ++i) {
        for (Index j = 0; j < m; ++j) {
          a(i, j) = Scalar(problem.head_matrices[static_cast<std::size_t>((k * m + i) * m + j)]);
        }
      }
      out.matrices.push_back(std::move(a));
    }
  }
  for (const auto& values : problem.recurrent) {
    Vec<Scalar> v(out.d);
    for (Index j = 0; j < out.d; ++j) v(j) = Scalar(values[channel < 0 ? j : channel]);
    out.a.push_back(std::move(v));
  }
  return out;
}

// Work vectors of one step, allocated once per chain.
template <class Scalar>
struct StepWork {
  Vec<Scalar> g0, g1, g2, g3, ones;
  explicit StepWork(Index d) : g0(d), g1(d), g2(d), g3(d), ones(Vec<Scalar>::Ones(d)) {}
};

// One step of the cell: s_new = f(s, wx). s and s_new are distinct vectors of slots*d values.
template <class Scalar, class WxVector>
void cell_step(const RecurrentDiagonals<Scalar>& p, const Eigen::MatrixBase<WxVector>& wx,
               const Vec<Scalar>& s, Vec<Scalar>& s_new, StepWork<Scalar>& w) {
  const Index d = p.d;
  const auto gate = [&](int g) { return wx.derived().segment(g * d, d); };
  const auto diag = [&](int i) { return p.a[static_cast<std::size_t>(i)].asDiagonal(); };
  const Sigmoid<Scalar> sigmoid;
  const Tanh<Scalar> tanh_of;
  const Exp<Scalar> exp_of;
  const Softplus<Scalar> softplus;
  switch (p.kind) {
    case OracleCell::gru: {  // a: a_z, a_r, a_n
      const auto h = s.head(d);
      auto& z = w.g0;
      auto& r = w.g1;
      auto& n = w.g2;
      z = (diag(0) * h + gate(0)).unaryExpr(sigmoid);
      r = (diag(1) * h + gate(1)).unaryExpr(sigmoid);
      n = r.asDiagonal() * h;
      n = (diag(2) * n + gate(2)).unaryExpr(tanh_of);
      s_new.head(d) = (w.ones - z).asDiagonal() * h + z.asDiagonal() * n;
      return;
    }
    case OracleCell::lstm: {  // a: a_f, a_z, a_o, c_f, c_o; state (c, h)
      const auto c = s.head(d);
      const auto h = s.tail(d);
      auto& f = w.g0;
      auto& z = w.g1;
      auto& o = w.g2;
      f = (diag(0) * h + diag(3) * c + gate(0)).unaryExpr(sigmoid);
      z = (diag(1) * h + gate(1)).unaryExpr(tanh_of);
      auto c_new = s_new.head(d);
      c_new = f.asDiagonal() * c + (w.ones - f).asDiagonal() * z;
      o = (diag(2) * h + diag(4) * c_new + gate(2)).unaryExpr(sigmoid);
      s_new.tail(d) = o.asDiagonal() * c_new.unaryExpr(tanh_of);
      return;
    }
    case OracleCell::nlru: {  // a: u
      const auto h = s.head(d);
      auto& a = w.g0;
      auto& n = w.g1;
      a = gate(0).unaryExpr(sigmoid);
      n = (gate(1) + diag(0) * h).unaryExpr(tanh_of);
      s_new.head(d) = a.asDiagonal() * h + (w.ones - a).asDiagonal() * n;
      return;
    }
    case OracleCell::slstm: {  // a: r_i, r_f, r_z, r_o; state (c, n, m, h); pack (i, f, z, o)
      const auto c = s.segment(0, d);
      const auto n = s.segment(d, d);
      const auto m = s.segment(2 * d, d);
      const auto h = s.segment(3 * d, d);
      auto c_new = s_new.segment(0, d);
      auto n_new = s_new.segment(d, d);
      auto m_new = s_new.segment(2 * d, d);
      auto& f = w.g0;  // z_f + m, then f
      auto& i = w.g1;  // z_i, then i
      auto& z = w.g2;
      auto& o = w.g3;
      f = gate(1) + diag(1) * h + m;
      i = gate(0) + diag(0) * h;
      m_new = f.binaryExpr(i, TieMax<Scalar>());
      f = (f - m_new).unaryExpr(exp_of);
      i = (i - m_new).unaryExpr(exp_of);
      z = (gate(2) + diag(2) * h).unaryExpr(tanh_of);
      o = (gate(3) + diag(3) * h).unaryExpr(sigmoid);
      n_new = f.asDiagonal() * n + i;
      c_new = f.asDiagonal() * c + i.asDiagonal() * z;
      z = n_new + Scalar(p.eps) * w.ones;  // the denominator n' + eps
      s_new.segment(3 * d, d) = o.asDiagonal() * c_new.cwiseQuotient(z);
      return;
    }
    case OracleCell::cfc:         // a: u; gate inputs (f_pre, c_x, b, Δt)
    case OracleCell::cfc_diag_h: {  // a: u, v; softplus reads f_pre + v ⊙ h
      const auto h = s.head(d);
      auto& a = w.g0;
      auto& n = w.g1;
      if (p.kind == OracleCell::cfc_diag_h) {
        a = (gate(0) + diag(1) * h).unaryExpr(softplus);
      } else {
        a = gate(0).unaryExpr(softplus);
      }
      a = (-(gate(3).asDiagonal() * a + gate(2))).unaryExpr(sigmoid);
      n = (gate(1) + diag(0) * h).unaryExpr(tanh_of);
      s_new.head(d) = a.asDiagonal() * h + (w.ones - a).asDiagonal() * n;
      return;
    }
    case OracleCell::titans: {  // a: u, r; pack (α_pre, θ_pre, k, v, n_pre)
      const auto h = s.head(d);
      auto& alpha = w.g0;
      auto& theta = w.g1;
      auto& g = w.g2;
      auto& n = w.g3;
      alpha = gate(0).unaryExpr(sigmoid);
      theta = gate(1).unaryExpr(softplus);
      g = gate(2).asDiagonal() * h - gate(3);
      g = gate(2).asDiagonal() * g;
      n = (gate(4) + diag(1) * h).unaryExpr(tanh_of);
      s_new.head(d) = (w.ones - alpha).asDiagonal() * h - theta.asDiagonal() * g + diag(0) * n;
      return;
    }
    case OracleCell::gru_head: {  // matrices: per head A_z, A_r, A_n (in, out)
      const auto heads = static_cast<Index>(p.matrices.size() / 3);
      const Index m = d / heads;
      for (Index hd = 0; hd < heads; ++hd) {
        const auto& A_z = p.matrices[static_cast<std::size_t>(3 * hd)];
        const auto& A_r = p.matrices[static_cast<std::size_t>(3 * hd + 1)];
        const auto& A_n = p.matrices[static_cast<std::size_t>(3 * hd + 2)];
        const Vec<Scalar> h = s.segment(hd * m, m);
        const Vec<Scalar> z =
            (A_z.transpose() * h + wx.derived().segment(hd * m, m)).unaryExpr(sigmoid);
        const Vec<Scalar> r =
            (A_r.transpose() * h + wx.derived().segment(d + hd * m, m)).unaryExpr(sigmoid);
        const Vec<Scalar> hr = r.asDiagonal() * h;
        const Vec<Scalar> n =
            (A_n.transpose() * hr + wx.derived().segment(2 * d + hd * m, m)).unaryExpr(tanh_of);
        const Vec<Scalar> ones = Vec<Scalar>::Ones(m);
        s_new.segment(hd * m, m) = (ones - z).asDiagonal() * h + z.asDiagonal() * n;
      }
      return;
    }
    case OracleCell::slstm_head: {  // matrices: per head R_i, R_f, R_z, R_o (in, out)
      const auto heads = static_cast<Index>(p.matrices.size() / 4);
      const Index m = d / heads;
      const auto c = s.segment(0, d);
      const auto n = s.segment(d, d);
      const auto mm = s.segment(2 * d, d);
      const auto h = s.segment(3 * d, d);
      Vec<Scalar>* pre[4] = {&w.g1, &w.g0, &w.g2, &w.g3};  // i, f, z, o
      for (int g = 0; g < 4; ++g) {
        *pre[g] = gate(g);
        for (Index hd = 0; hd < heads; ++hd) {
          pre[g]->segment(hd * m, m) +=
              p.matrices[static_cast<std::size_t>(4 * hd + g)].transpose() * h.segment(hd * m, m);
        }
      }
      auto c_new = s_new.segment(0, d);
      auto n_new = s_new.segment(d, d);
      auto m_new = s_new.segment(2 * d, d);
      auto& f = w.g0;  // z_f, then z_f + m, then f
      auto& i = w.g1;  // z_i, then i
      auto& z = w.g2;
      auto& o = w.g3;
      f += mm;
      m_new = f.binaryExpr(i, TieMax<Scalar>());
      f = (f - m_new).unaryExpr(exp_of);
      i = (i - m_new).unaryExpr(exp_of);
      z = z.unaryExpr(tanh_of);
      o = o.unaryExpr(sigmoid);
      n_new = f.asDiagonal() * n + i;
      c_new = f.asDiagonal() * c + i.asDiagonal() * z;
      z = n_new + Scalar(p.eps) * w.ones;  // the denominator n' + eps
      s_new.segment(3 * d, d) = o.asDiagonal() * c_new.cwiseQuotient(z);
      return;
    }
    case OracleCell::hopfield: {  // K, V from the gate inputs; β
      RowMajorMatrix<Scalar> K(d, d), V(d, d);
      for (Index i = 0; i < d; ++i) {
        for (Index j = 0; j < d; ++j) {
          K(i, j) = wx.derived()(i * d + j);
          V(i, j) = wx.derived()(d * d + i * d + j);
        }
      }
      const Vec<Scalar> e = (Scalar(p.beta) * (K * s.head(d))).unaryExpr(exp_of);
      const Scalar total = e.sum();
      s_new.head(d) = V * (e / total);
      return;
    }
    case OracleCell::rwkv7: {  // gate blocks (w, a, κ, v, k, r) of d = H·m; state (H, m, m)
      using std::sqrt;
      const Index m = d / p.heads;
      const Scalar eps(1e-6);
      for (Index hd = 0; hd < p.heads; ++hd) {
        const auto head_gate = [&](int g) { return wx.derived().segment(g * d + hd * m, m); };
        const Vec<Scalar> w = head_gate(0).unaryExpr(sigmoid);
        const Vec<Scalar> a = head_gate(1).unaryExpr(sigmoid);
        const Vec<Scalar> kappa_raw = head_gate(2);
        const Scalar norm = sqrt(kappa_raw.squaredNorm());
        const Vec<Scalar> kappa = kappa_raw / (norm < eps ? eps : norm);
        const RowMajorMatrix<Scalar> G =
            RowMajorMatrix<Scalar>(w.asDiagonal()) - kappa * a.cwiseProduct(kappa).transpose();
        const RowMajorMatrix<Scalar> U = head_gate(3) * head_gate(4).transpose();
        const Eigen::Map<const RowMajorMatrix<Scalar>> S(s.data() + hd * m * m, m, m);
        Eigen::Map<RowMajorMatrix<Scalar>> S_new(s_new.data() + hd * m * m, m, m);
        S_new = S * G + U;
      }
      return;
    }
    case OracleCell::m2rnn: {  // value_matrix W; gate inputs (k, v, f_logit)
      const Index rows = p.k_dim, cols = p.v_dim;
      RowMajorMatrix<Scalar> H(rows, cols);
      for (Index i = 0; i < rows; ++i) {
        for (Index e = 0; e < cols; ++e) H(i, e) = s(i * cols + e);
      }
      const Vec<Scalar> k = wx.derived().segment(0, rows);
      const Vec<Scalar> v = wx.derived().segment(rows, cols);
      const Scalar f = sigmoid(Scalar(wx.derived()(rows + cols)));
      const RowMajorMatrix<Scalar> Z =
          (H * p.value_matrix + k * v.transpose()).unaryExpr(tanh_of);
      const RowMajorMatrix<Scalar> H_new = f * H + (Scalar(1) - f) * Z;
      for (Index i = 0; i < rows; ++i) {
        for (Index e = 0; e < cols; ++e) s_new(i * cols + e) = H_new(i, e);
      }
      return;
    }
  }
}

}  // namespace pararnn::reference::detail
