// Internal to the oracle: the chain unroller built on the cell equations (oracle_cell_math.hpp),
// generic on the working type: the input affine summed exactly, ChainRunner, the parallel unroll
// of every chain, and one step with its Jacobian by AD or by central differences.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "oracle_cell_math.hpp"
#include "oracle_internal.hpp"

namespace pararnn::reference::detail {

// The name of a working type in the results (OracleResult::type, ::certifier_type).
template <class Real>
constexpr const char* working_type_name() {
  if constexpr (std::is_same_v<Real, double>) {
    return "double";
  } else if constexpr (std::is_same_v<Real, Float128>) {
    return "float128";
  } else {
    return "cpp_bin_float_50";
  }
}

// Error-free sum of two doubles: a + b = sum + error exactly (Knuth's TwoSum).
inline void two_sum(double a, double b, double& sum, double& error) {
  sum = a + b;
  const double b_virtual = sum - a;
  error = (a - (sum - b_virtual)) + (b - b_virtual);
}

// Exact double terms summed in triple-double: two cascaded TwoSums, the third part rounded.
// The error is about n³·2^-159 of Σ|term| (2^-129 at n = 1024), below what summing in float128
// leaves (n·2^-113), at a dozen double operations a term instead of soft-float ones.
struct TripleDoubleSum {
  double hi = 0.0, mid = 0.0, lo = 0.0;
  void add(double term) {
    double e1 = 0.0, e2 = 0.0;
    two_sum(hi, term, hi, e1);
    two_sum(mid, e1, mid, e2);
    lo += e2;
  }
  template <class Real>
  Real rounded() const {
    return Real(hi) + (Real(mid) + Real(lo));
  }
};

// wx = W·feat_t + b (feat_t: x_t's first `features` columns) for the affine rows of one channel
// or all, as an explicit sum over k in order, so
// that the bits of one channel do not depend on which other rows are computed. Three ways, by
// what is exact where (every way is at least as accurate as summing in Real):
//  - f32, f16, bf16 storage: each product w·x is exact in double; the products and the bias are
//    summed in triple-double and rounded into Real.
//  - f64 storage, Real = float128 (the f64 primary): each product is split exactly into
//    w·x = p + fma(w, x, -p); both parts are summed in triple-double and rounded into float128.
//  - f64 storage, Real = cpp_bin_float_50 (the f64 certifier): products (exact in 166 bits)
//    and sums in Real, deliberately a different implementation from the primary's.
template <class Real>
struct InputAffine {
  enum class Mode : std::uint8_t { exact_double_products, split_products, in_real };
  Index rows = 0;      // affine rows: affine_gates * width
  Index features = 0;  // x columns read
  Mode mode = Mode::exact_double_products;
  RowMajorMatrix<double> w;  // lifted storage values
  Vec<double> bias_double;
  RowMajorMatrix<Real> w_real;
  Vec<Real> bias;

  InputAffine(const PreparedCase& problem, std::int64_t channel) {
    const Index width = channel < 0 ? problem.d_h : 1;
    rows = problem.kind == OracleCell::m2rnn ? problem.affine_rows() : problem.affine_gates * width;
    features = problem.features;
    if (!problem.products_exact_in_double) {
      mode = std::is_same_v<Real, Float128> ? Mode::split_products : Mode::in_real;
    }
    w.resize(rows, features);
    bias_double.resize(rows);
    for (int g = 0; g < problem.affine_gates && problem.kind != OracleCell::m2rnn; ++g) {
      for (Index j = 0; j < width; ++j) {
        const Index src = g * problem.d_h + (channel < 0 ? j : channel);
        const Index dst = g * width + j;
        for (Index k = 0; k < features; ++k) w(dst, k) = problem.w[src * features + k];
        bias_double(dst) = problem.bias[src];
      }
    }
    if (problem.kind == OracleCell::m2rnn) {  // one block, every row (the chain is a whole row)
      for (Index r = 0; r < rows; ++r) {
        for (Index k = 0; k < features; ++k) w(r, k) = problem.w[r * features + k];
        bias_double(r) = problem.bias[r];
      }
    }
    bias = bias_double.template cast<Real>();
    if (mode == Mode::in_real) w_real = w.template cast<Real>();
  }

  // The affine rows of wx (its first `rows` entries) from x_t (d_in values).
  void apply(const double* x_t, Vec<Real>& wx) const {
    for (Index r = 0; r < rows; ++r) {
      const double* w_row = w.data() + r * features;
      switch (mode) {
        case Mode::exact_double_products: {
          TripleDoubleSum sum{bias_double(r)};
          for (Index k = 0; k < features; ++k) sum.add(w_row[k] * x_t[k]);
          wx(r) = sum.template rounded<Real>();
          break;
        }
        case Mode::split_products: {
          TripleDoubleSum sum{bias_double(r)};
          for (Index k = 0; k < features; ++k) {
            const double p = w_row[k] * x_t[k];
            sum.add(p);
            sum.add(std::fma(w_row[k], x_t[k], -p));
          }
          wx(r) = sum.template rounded<Real>();
          break;
        }
        case Mode::in_real: {
          Real acc(0);
          for (Index k = 0; k < features; ++k) acc += w_real(r, k) * Real(x_t[k]);
          wx(r) = acc + bias(r);
          break;
        }
      }
    }
  }
};

// The gate inputs after the affine rows that are functions of x_t alone: CfC's Δt, the floored
// last channel of x_t, broadcast over the `width` channels of block time_gate.
template <class Real, class Column>
void fill_derived_gates(const PreparedCase& problem, Index width, const double* x_t,
                        Column&& wx) {
  if (problem.time_gate < 0) return;
  wx.segment(problem.time_gate * width, width)
      .setConstant(Real(PreparedCase::time_step(x_t[problem.d_in - 1])));
}

template <class Real>
Vec<Real> initial_state(const PreparedCase& problem, const RowChain& chain, std::int64_t channel) {
  const Index width = channel < 0 ? problem.d_h : 1;
  Vec<Real> s = Vec<Real>::Zero(problem.slots * width);
  if (chain.h0_row < 0 || problem.h0.empty()) return s;
  const double* row = problem.h0.data() + chain.h0_row * problem.state_size();
  for (int slot = 0; slot < problem.slots; ++slot) {
    for (Index j = 0; j < width; ++j) {
      s(slot * width + j) = Real(row[slot * problem.d_h + (channel < 0 ? j : channel)]);
    }
  }
  return s;
}

template <class Real>
struct ChainRunner<Real>::Impl {
  // Steps whose x (and, for double, whose wx by one GEMM) are lifted together.
  static constexpr std::int64_t kBlock = 64;

  const PreparedCase& problem;
  RowChain chain;
  std::int64_t channel;
  Index width;
  InputAffine<Real> affine;
  RecurrentDiagonals<Real> recurrent;
  StepWork<Real> work;
  Vec<Real> s, s_next, wx;
  std::vector<double> x_block;                         // (kBlock, d_in) row-major
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic> wx_block;  // double: (gates·width, kBlock)
  std::int64_t block_t0 = 0;
  std::int64_t block_count = 0;
  std::int64_t t_next;
  std::int64_t t_current = -1;

  Impl(const PreparedCase& p, ChainSpec spec)
      : problem(p),
        chain(p.chains.at(static_cast<std::size_t>(spec.chain))),
        channel(spec.channel),
        width(spec.channel < 0 ? p.d_h : 1),
        affine(p, spec.channel),
        recurrent(lift_recurrent<Real>(p, spec.channel)),
        work(width),
        s(initial_state<Real>(p, chain, spec.channel)),
        s_next(s.size()),
        wx(p.gate_inputs(width)),
        x_block(static_cast<std::size_t>(kBlock * p.d_in)),
        t_next(chain.t_begin) {
    if constexpr (std::is_same_v<Real, double>) wx_block.resize(p.gate_inputs(width), kBlock);
  }

  void load_block(std::int64_t t0) {
    block_t0 = t0;
    block_count = std::min(kBlock, chain.t_end - t0);
    lift_x(problem, chain.b, t0, block_count, x_block.data());
    if constexpr (std::is_same_v<Real, double>) {
      // The double primary computes W·X for the block as one GEMM (matrix form, fast).
      const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>> x(
          x_block.data(), problem.d_in, block_count);
      auto out = wx_block.topLeftCorner(affine.rows, block_count);
      out.noalias() = affine.w * x.topRows(affine.features);
      out.colwise() += affine.bias;
      for (std::int64_t i = 0; i < block_count; ++i) {
        fill_derived_gates<double>(problem, width, x_block.data() + i * problem.d_in,
                                   wx_block.col(i));
      }
    }
  }

  bool advance() {
    if (t_next >= chain.t_end) return false;
    if (t_next >= block_t0 + block_count) load_block(t_next);
    const std::int64_t i = t_next - block_t0;
    if constexpr (std::is_same_v<Real, double>) {
      cell_step(recurrent, wx_block.col(i), s, s_next, work);
    } else {
      const double* x_t = x_block.data() + i * problem.d_in;
      affine.apply(x_t, wx);
      fill_derived_gates<Real>(problem, width, x_t, wx);
      cell_step(recurrent, wx, s, s_next, work);
    }
    s.swap(s_next);
    t_current = t_next++;
    return true;
  }
};

template <class Real>
ChainRunner<Real>::ChainRunner(const PreparedCase& problem, ChainSpec spec)
    : impl_(std::make_unique<Impl>(problem, spec)) {}
template <class Real>
ChainRunner<Real>::~ChainRunner() = default;
template <class Real>
std::int64_t ChainRunner<Real>::width() const {
  return impl_->width;
}
template <class Real>
bool ChainRunner<Real>::advance() {
  return impl_->advance();
}
template <class Real>
std::int64_t ChainRunner<Real>::time() const {
  return impl_->t_current;
}
template <class Real>
const Real* ChainRunner<Real>::state() const {
  return impl_->s.data();
}

// Boost.Multiprecision (1.74) fills several std::numeric_limits of cpp_bin_float lazily and
// without synchronisation: `static pair<bool, number> value; if (!value.first) { value.first =
// true; value.second = 1; value.second = ldexp(value.second, 1 - digits); }` (epsilon, and
// likewise round_error, min, max, infinity, quiet_NaN). eval_log and eval_exp read
// numeric_limits<number<T, et_on>>::epsilon() as their series' stopping tolerance, so when the
// first cpp_bin_float_50 log ran on the OpenMP threads, a thread could read epsilon while
// another was filling it (1 or 0 instead of 2^-167): its series stopped after one term and the
// certifier's softplus (titans, cfc) came out wrong by ~1e-4, now and then. This fills them all
// once, on the calling thread, before any parallel region (oracle_certify.cpp, where the
// cpp_bin_float_50 working type lives).
void initialize_multiprecision_statics();

// Runs `body(i)` for i in [0, n) on the OpenMP threads; the first exception is rethrown here.
template <class Body>
void parallel_for(std::int64_t n, Body&& body) {
  initialize_multiprecision_statics();
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = 0; i < n; ++i) {
    try {
      body(i);
    } catch (...) {
#pragma omp critical(pararnn_oracle_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// The units of parallel work for running `specs`: for the wide types (whose channel runs
// reproduce the row's bits) each row spec is split into its channels, so that a few long rows
// still keep every core busy; double rows stay whole (one GEMM per block of the row).
template <class Real>
std::vector<ChainSpec> work_items(const PreparedCase& problem, const std::vector<ChainSpec>& specs) {
  if (std::is_same_v<Real, double> || !channels_independent(problem.kind) || problem.d_h == 1) {
    return specs;
  }
  std::vector<ChainSpec> items;
  for (const ChainSpec& spec : specs) {
    if (spec.channel >= 0) {
      items.push_back(spec);
      continue;
    }
    for (std::int64_t j = 0; j < problem.d_h; ++j) items.push_back({spec.chain, j});
  }
  return items;
}

// Every chain of the case in Real, rounded into H (f64, the trajectory layout).
// `poll` (OracleOptions::poll) runs every kPollSteps steps of each chain.
constexpr std::int64_t kPollSteps = 1024;
template <class Real>
void unroll_rows(const PreparedCase& problem, double* H, const std::function<void()>& poll) {
  std::vector<ChainSpec> rows;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(problem.chains.size()); ++i) {
    rows.push_back({i, -1});
  }
  const std::vector<ChainSpec> items = work_items<Real>(problem, rows);
  parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t i) {
    const ChainSpec& spec = items[static_cast<std::size_t>(i)];
    ChainRunner<Real> runner(problem, spec);
    const RowChain& chain = problem.chains[static_cast<std::size_t>(spec.chain)];
    const std::int64_t width = runner.width();
    const std::int64_t first_channel = spec.channel < 0 ? 0 : spec.channel;
    while (runner.advance()) {
      if (poll && runner.time() % kPollSteps == 0) poll();
      const Real* s = runner.state();
      for (std::int64_t slot = 0; slot < problem.slots; ++slot) {
        double* out = H + problem.h_offset(chain.b, runner.time(), slot, first_channel);
        for (std::int64_t j = 0; j < width; ++j) out[j] = to_double(s[slot * width + j]);
      }
    }
  });
}

template <class Real>
Vec<Real> input_affine_at(const PreparedCase& problem, std::int64_t b, std::int64_t t) {
  const InputAffine<Real> affine(problem, -1);
  std::vector<double> x(static_cast<std::size_t>(problem.d_in));
  lift_x(problem, b, t, 1, x.data());
  Vec<Real> wx(problem.gate_inputs(problem.d_h));
  affine.apply(x.data(), wx);
  fill_derived_gates<Real>(problem, problem.d_h, x.data(), wx);
  return wx;
}

// One step in Real with d h_new / d h_prev by forward-mode AD (AutoDiffScalar over Real).
template <class Real>
OracleStep step_with_jacobian(const PreparedCase& problem, std::int64_t b, std::int64_t t,
                              std::span<const double> h_prev) {
  using Ad = Eigen::AutoDiffScalar<Vec<Real>>;
  const Index n = problem.state_size();
  const RecurrentDiagonals<Ad> recurrent = lift_recurrent<Real>(problem, -1).template cast<Ad>();
  const Vec<Ad> wx = input_affine_at<Real>(problem, b, t).template cast<Ad>();
  Vec<Ad> s(n), s_new(n);
  for (Index i = 0; i < n; ++i) s(i) = Ad(Real(h_prev[static_cast<std::size_t>(i)]), n, i);
  StepWork<Ad> work(problem.d_h);
  cell_step(recurrent, wx, s, s_new, work);

  OracleStep out;
  out.h_new.resize(static_cast<std::size_t>(n));
  out.jacobian.assign(static_cast<std::size_t>(n * n), 0.0);
  for (Index i = 0; i < n; ++i) {
    out.h_new[static_cast<std::size_t>(i)] = to_double(s_new(i).value());
    const auto& derivatives = s_new(i).derivatives();
    for (Index k = 0; k < derivatives.size(); ++k) {
      out.jacobian[static_cast<std::size_t>(i * n + k)] = to_double(derivatives(k));
    }
  }
  return out;
}

// Central differences of the same step in Real: J[:, k] = (f(s + ε e_k) - f(s - ε e_k)) / 2ε.
template <class Real>
std::vector<double> finite_difference_jacobian(const PreparedCase& problem, std::int64_t b,
                                               std::int64_t t, std::span<const double> h_prev,
                                               const Real& epsilon) {
  const Index n = problem.state_size();
  const RecurrentDiagonals<Real> recurrent = lift_recurrent<Real>(problem, -1);
  const Vec<Real> wx = input_affine_at<Real>(problem, b, t);
  Vec<Real> s(n), plus(n), minus(n);
  for (Index i = 0; i < n; ++i) s(i) = Real(h_prev[static_cast<std::size_t>(i)]);
  StepWork<Real> work(problem.d_h);
  std::vector<double> jacobian(static_cast<std::size_t>(n * n), 0.0);
  for (Index k = 0; k < n; ++k) {
    Vec<Real> shifted = s;
    shifted(k) = s(k) + epsilon;
    cell_step(recurrent, wx, shifted, plus, work);
    shifted(k) = s(k) - epsilon;
    cell_step(recurrent, wx, shifted, minus, work);
    for (Index i = 0; i < n; ++i) {
      jacobian[static_cast<std::size_t>(i * n + k)] =
          to_double(Real((plus(i) - minus(i)) / (2 * epsilon)));
    }
  }
  return jacobian;
}

}  // namespace pararnn::reference::detail
