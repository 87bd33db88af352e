// The CPU backend of dense-Jacobian cells (JacobianClass::dense: ParaHopfield, ParaGRU
// mix='head'), forward only: App. A initial guess, Newton iterations whose linear step
// δ_t = J_t δ_{t−1} + F_t is a dense scan per chain (chains in parallel), the adaptive/fixed K
// loop, stats and sequential fallback of newton_loop.hpp, and the same-dtype sequential loop.
// One template per (dense-chain math, storage dtype); the math lives in cells/.
//
// A chain is (batch row, head) for GRU-head (N = d_head) and a batch row for Hopfield
// (N = d_h); chain q of row b owns channels [q N, (q + 1) N) of the trajectory [b][t][d_h].
// Internal layout: H and F [b][t][d_h] (the trajectory layout), J [b][q][t][N][N] ([out][in]),
// W_x x [b][t][gate_width] in the compute type (f32 for f32/f16/bf16, f64 for f64), computed
// once and reused by every iteration. Segment heads (packing) read h0 (or zeros) and act with
// J = 0 in the scan.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends.hpp"
#include "newton_loop.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn::detail {
namespace {

template <class DenseMath, class StorageT>
class DenseSolver {
 public:
  using ComputeT = ComputeOf<StorageT>;
  static constexpr DType kComputeDType = std::is_same_v<ComputeT, double> ? DType::f64 : DType::f32;

  DenseSolver(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout,
              std::int64_t scan_chunk = 0)
      : cell_(cell), L_(std::move(layout)), scan_chunk_(scan_chunk) {
    n_ = cell.chain_width();
    per_row_ = cell.chains_per_row();
    width_ = gate_width(cell);
    const std::vector<double> p = cell.dense_chain_parameters();
    params_.assign(p.begin(), p.end());
    wx_ = input_affine<ComputeT>(cell, x, L_);
    if (options.h0) {
      const Tensor h0 = Tensor::converted(*options.h0, kComputeDType);
      h0_.assign(h0.data_as<ComputeT>(), h0.data_as<ComputeT>() + h0.numel());
    }
  }

  std::int64_t chains() const { return L_.batch * per_row_; }
  std::int64_t row_elems() const { return L_.time * L_.d_h; }
  std::int64_t jac_elems() const { return L_.time * n_ * n_; }  // per chain

  // Runs `body(b, q)` over every chain in parallel.
  template <class Body>
  void parallel_chains(Body&& body) const {
    const std::int64_t total = chains();
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < total; ++i) body(i / per_row_, i % per_row_);
  }

  // The state (N values) entering step t of chain (b, q): h0 (or zeros) at heads; H[t − 1]
  // otherwise, or zeros when `H_row` is null (the App. A guess).
  void prev_state(const ComputeT* H_row, std::int64_t b, std::int64_t q, std::int64_t t,
                  ComputeT* out) const {
    const std::int64_t c0 = q * n_;
    if (L_.heads[static_cast<std::size_t>(t)]) {
      const std::int64_t row = L_.packed ? L_.state_index[static_cast<std::size_t>(t)] : b;
      for (std::int64_t i = 0; i < n_; ++i)
        out[i] = h0_.empty() ? ComputeT(0) : h0_[static_cast<std::size_t>(row * L_.d_h + c0 + i)];
      return;
    }
    for (std::int64_t i = 0; i < n_; ++i)
      out[i] = H_row == nullptr ? ComputeT(0) : H_row[(t - 1) * L_.d_h + c0 + i];
  }

  void step_at(std::int64_t b, std::int64_t q, std::int64_t t, const ComputeT* h_prev,
               ComputeT* h_new, ComputeT* jac, ComputeT* work) const {
    const ComputeT* wx_t = wx_.data() + (b * L_.time + t) * width_;
    const bool square = DenseMath::kSquareGates;
    const ComputeT* gates = square ? wx_t : wx_t + q * n_;
    const long long stride = square ? n_ * n_ : L_.d_h;
    const ComputeT* params = params_.data() + q * DenseMath::params_size(static_cast<int>(n_));
    DenseMath::step(static_cast<int>(n_), params, gates, stride, h_prev, h_new, jac, work);
  }

  struct Scratch {
    std::vector<ComputeT> hp, hn, work;
    explicit Scratch(std::int64_t n)
        : hp(static_cast<std::size_t>(n)), hn(static_cast<std::size_t>(n)),
          work(static_cast<std::size_t>(DenseMath::work_size(static_cast<int>(n)))) {}
  };

  // App. A: H_t = f(h̃_t, x_t), h̃ = 0 except the initial state at heads.
  std::vector<ComputeT> initial_guess() const {
    std::vector<ComputeT> H(static_cast<std::size_t>(L_.batch * row_elems()));
    parallel_chains([&](std::int64_t b, std::int64_t q) {
      Scratch s(n_);
      ComputeT* H_row = H.data() + b * row_elems();
      for (std::int64_t t = 0; t < L_.time; ++t) {
        prev_state(nullptr, b, q, t, s.hp.data());
        step_at(b, q, t, s.hp.data(), H_row + t * L_.d_h + q * n_, nullptr, s.work.data());
      }
    });
    return H;
  }

  // F = f(prepend(H)) − H and (optionally) J; returns max|F| (NaN if any is NaN); remembers
  // max|F| per chain for the sequential fallback.
  double residual(const std::vector<ComputeT>& H, std::vector<ComputeT>& F,
                  std::vector<ComputeT>* J) const {
    chain_residual_.assign(static_cast<std::size_t>(chains()), 0.0);
    parallel_chains([&](std::int64_t b, std::int64_t q) {
      Scratch s(n_);
      const ComputeT* H_row = H.data() + b * row_elems();
      ComputeT* F_row = F.data() + b * row_elems();
      ComputeT* J_chain = J ? J->data() + (b * per_row_ + q) * jac_elems() : nullptr;
      double local = 0.0;
      for (std::int64_t t = 0; t < L_.time; ++t) {
        prev_state(H_row, b, q, t, s.hp.data());
        step_at(b, q, t, s.hp.data(), s.hn.data(), J_chain ? J_chain + t * n_ * n_ : nullptr,
                s.work.data());
        for (std::int64_t i = 0; i < n_; ++i) {
          const std::int64_t at = t * L_.d_h + q * n_ + i;
          const ComputeT f = s.hn[static_cast<std::size_t>(i)] - H_row[at];
          F_row[at] = f;
          local = nan_max(local, std::abs(static_cast<double>(f)));
        }
      }
      chain_residual_[static_cast<std::size_t>(b * per_row_ + q)] = local;
    });
    double result = 0.0;
    for (double v : chain_residual_) result = nan_max(result, v);
    return result;
  }

  // δ from (J, F) in place on F by the dense scan of each chain, then H += ω δ.
  void update(std::vector<ComputeT>& H, const std::vector<ComputeT>& J, std::vector<ComputeT>& F,
              double omega) const {
    const ComputeT w = static_cast<ComputeT>(omega);
    parallel_chains([&](std::int64_t b, std::int64_t q) {
      ComputeT* F_chain = F.data() + b * row_elems() + q * n_;
      scan_dense<ComputeT>(J.data() + (b * per_row_ + q) * jac_elems(), F_chain,
                           DenseScanShape{.time = L_.time, .n = n_, .chunk_len = scan_chunk_,
                                          .r_stride = L_.d_h},
                           L_.heads);
      ComputeT* H_chain = H.data() + b * row_elems() + q * n_;
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (std::int64_t i = 0; i < n_; ++i) {
          const std::int64_t at = t * L_.d_h + i;
          H_chain[at] = omega == 1.0 ? H_chain[at] + F_chain[at] : H_chain[at] + w * F_chain[at];
        }
    });
  }

  Tensor to_storage(const std::vector<ComputeT>& H) const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    for (std::size_t i = 0; i < H.size(); ++i) dst[i] = static_cast<StorageT>(H[i]);
    return out;
  }

  std::vector<ComputeT> newton_trajectory(const NewtonConfig& config, NewtonStats& stats) const {
    const KResolution k = resolve_newton_iters(config, cell_.spec(), cell_.dtype(), L_.time);
    const std::optional<double> atol = resolved_residual_atol(config, cell_.dtype());
    stats = NewtonStats{};
    stats.k = k;
    stats.scan_backend = "cpu";
    std::vector<ComputeT> H = initial_guess();
    std::vector<ComputeT> F(H.size()), J(static_cast<std::size_t>(chains() * jac_elems()));
    run_newton_iterations(*this, cell_.name(), config, k, atol, L_.time, H, F, J, stats,
                          fmt::format("chain(s) of {} channels", n_));
    return H;
  }

  // The sequential recurrence of one chain, the state rounded to StoreT after every step.
  template <class StoreT>
  void sequential_chain(std::int64_t b, std::int64_t q, StoreT* row) const {
    Scratch s(n_);
    for (std::int64_t t = 0; t < L_.time; ++t) {
      if (L_.heads[static_cast<std::size_t>(t)]) {
        prev_state(nullptr, b, q, t, s.hp.data());
      } else {
        for (std::int64_t i = 0; i < n_; ++i)
          s.hp[static_cast<std::size_t>(i)] = static_cast<ComputeT>(row[(t - 1) * L_.d_h + q * n_ + i]);
      }
      step_at(b, q, t, s.hp.data(), s.hn.data(), nullptr, s.work.data());
      for (std::int64_t i = 0; i < n_; ++i)
        row[t * L_.d_h + q * n_ + i] = static_cast<StoreT>(s.hn[static_cast<std::size_t>(i)]);
    }
  }

  Tensor sequential() const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    parallel_chains([&](std::int64_t b, std::int64_t q) {
      sequential_chain<StorageT>(b, q, dst + b * row_elems());
    });
    return out;
  }

  // Replaces every chain whose residual is not below `atol` by its sequential solution in the
  // compute type; returns the number of chains replaced.
  std::int64_t sequential_fallback(std::vector<ComputeT>& H, double atol) const {
    std::vector<std::int64_t> todo;
    for (std::int64_t i = 0; i < chains(); ++i)
      if (!(chain_residual_[static_cast<std::size_t>(i)] < atol)) todo.push_back(i);
    const auto count = static_cast<std::int64_t>(todo.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t i = todo[static_cast<std::size_t>(k)];
      sequential_chain<ComputeT>(i / per_row_, i % per_row_, H.data() + (i / per_row_) * row_elems());
    }
    return count;
  }

  double residual_of(const TensorView& H_view) const {
    const Tensor Hc = Tensor::converted(H_view, kComputeDType);
    std::vector<ComputeT> H(Hc.data_as<ComputeT>(), Hc.data_as<ComputeT>() + Hc.numel());
    std::vector<ComputeT> F(H.size());
    return residual(H, F, nullptr);
  }

 private:
  const Cell& cell_;
  Layout L_;
  std::int64_t scan_chunk_ = 0;
  std::int64_t n_ = 0, per_row_ = 1, width_ = 0;
  std::vector<ComputeT> params_;  // [chain within a row][params_size(N)]
  std::vector<ComputeT> wx_;      // [b][t][width_]
  std::vector<ComputeT> h0_;      // [row][d_h]
  mutable std::vector<double> chain_residual_;  // max|F| per chain, last evaluation
};

template <class F>
decltype(auto) dispatch_dense_solver(const Cell& cell, F&& f) {
  return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() -> decltype(auto) {
    return dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() -> decltype(auto) {
      return f.template operator()<DenseMath, StorageT>();
    });
  });
}

}  // namespace

Tensor dense_newton_apply(const Cell& cell, const TensorView& x, const NewtonConfig& config,
                          const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  return dispatch_dense_solver(cell, [&]<class DenseMath, class StorageT>() {
    const DenseSolver<DenseMath, StorageT> solver(cell, x, options, std::move(layout));
    return solver.to_storage(solver.newton_trajectory(config, stats));
  });
}

Tensor dense_sequential_apply(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                              Layout layout) {
  return dispatch_dense_solver(cell, [&]<class DenseMath, class StorageT>() {
    return DenseSolver<DenseMath, StorageT>(cell, x, options, std::move(layout)).sequential();
  });
}

double dense_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                          const ApplyOptions& options, Layout layout) {
  return dispatch_dense_solver(cell, [&]<class DenseMath, class StorageT>() {
    return DenseSolver<DenseMath, StorageT>(cell, x, options, std::move(layout)).residual_of(H);
  });
}

}  // namespace pararnn::detail
