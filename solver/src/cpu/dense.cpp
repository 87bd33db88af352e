// The CPU backend of dense-Jacobian cells (JacobianClass::dense: ParaHopfield, ParaGRU and
// ParaSLSTM mix='head', ParaSLSTM mix='dense'): the initial guess (App. A, or
// sLSTM's zero-hidden pass plus Picard passes), Newton iterations whose linear step
// δ_t = J_t δ_{t−1} + F_t is a dense scan per chain (chains in parallel), the adaptive/fixed K
// loop, stats and sequential fallback of the one driver (newton/driver.hpp), and the same-dtype
// sequential loop; and the implicit adjoint (training.hpp): at H*, per chain, the reverse walk
// μ_t = g_t + J_{t+1}ᵀ μ_{t+1} (nothing across segment heads; ∇h0 = J_headᵀ μ_head) in double,
// with the cell's VJP with respect to its gate inputs and dense-chain parameters by the cell's
// reverse pass (DenseMath::vjp, the GPU backward's call: O(N²) per step).
// One template per (dense-chain math, storage dtype); the math lives in cells/, the entry points
// are cpu/family_row.hpp's.
//
// A chain is a batch row (Hopfield, sLSTM dense) or a (batch row, head) (head mixes) with
// N = Cell::chain_width() state values (all slots of its channels; element i of chain q is
// entry Cell::chain_element_offset(q, i) of a time step's state row). Internal layout: H and F
// chain-major [chain][t][N], J [chain][t][N][N] ([out][in]), W_x x [b][t][gate_width] in the
// compute type (f32 for f32/f16/bf16, f64 for f64), computed once and reused by every
// iteration; the trajectory [b][t][slot][d_h] is gathered or scattered at the edges. Segment
// heads (packing) read h0 (or zeros) and act with J = 0 in the scan.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends.hpp"
#include "cpu/family_row.hpp"
#include "cpu/input_affine.hpp"
#include "cpu/saved_trajectory.hpp"
#include "newton/driver.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn::detail {
namespace {

template <class DenseMath, class StorageT>
class DenseSolver {
 public:
  using ComputeT = ComputeOf<StorageT>;
  static constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;

  DenseSolver(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout,
              std::int64_t scan_chunk = 0)
      : cell_(cell), L_(std::move(layout)), scan_chunk_(scan_chunk) {
    n_ = cell.chain_width();
    per_row_ = cell.chains_per_row();
    slot_width_ = cell.chain_slot_width();
    state_row_ = cell.slots() * L_.d_h;
    width_ = gate_width(cell);
    const std::vector<double> p = cell.dense_chain_parameters();
    params_.assign(p.begin(), p.end());
    wx_ = input_affine<ComputeT>(cell, x, L_);
    h0_ = h0_values<ComputeT>(options);
    offsets_.resize(static_cast<std::size_t>(per_row_ * n_));
    for (std::int64_t q = 0; q < per_row_; ++q)
      for (std::int64_t i = 0; i < n_; ++i)
        offsets_[static_cast<std::size_t>(q * n_ + i)] = cell.chain_element_offset(q, i);
  }

  std::int64_t chains() const { return L_.batch * per_row_; }
  std::int64_t chain_elems() const { return L_.time * n_; }      // H, F per chain
  std::int64_t jac_elems() const { return L_.time * n_ * n_; }   // J per chain
  std::int64_t state_elems() const { return chains() * chain_elems(); }

  // Runs `body(chain)` over every chain in parallel; chain = b · per_row + q.
  template <class Body>
  void parallel_chains(Body&& body) const {
    const std::int64_t total = chains();
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < total; ++i) body(i);
  }

  // Entry of the trajectory [b][t][slot][d_h] holding element i of `chain` at time t.
  std::int64_t trajectory_index(std::int64_t chain, std::int64_t t, std::int64_t i) const {
    const std::int64_t b = chain / per_row_, q = chain % per_row_;
    return (b * L_.time + t) * state_row_ + offsets_[static_cast<std::size_t>(q * n_ + i)];
  }

  // The state (N values) entering step t of `chain`: h0 (or zeros) at heads; H[t − 1]
  // otherwise, or zeros when `H_chain` is null (the App. A guess).
  void prev_state(const ComputeT* H_chain, std::int64_t chain, std::int64_t t, ComputeT* out) const {
    if (L_.heads[static_cast<std::size_t>(t)]) {
      const std::int64_t b = chain / per_row_, q = chain % per_row_;
      const std::int64_t row = L_.packed ? L_.state_index[static_cast<std::size_t>(t)] : b;
      for (std::int64_t i = 0; i < n_; ++i)
        out[i] = h0_.empty() ? ComputeT(0)
                             : h0_[static_cast<std::size_t>(row * state_row_ + offsets_[static_cast<std::size_t>(q * n_ + i)])];
      return;
    }
    for (std::int64_t i = 0; i < n_; ++i) out[i] = H_chain == nullptr ? ComputeT(0) : H_chain[(t - 1) * n_ + i];
  }

  void step_at(std::int64_t chain, std::int64_t t, const ComputeT* h_prev, ComputeT* h_new,
               ComputeT* jac, ComputeT* work) const {
    const std::int64_t b = chain / per_row_, q = chain % per_row_;
    const ComputeT* wx_t = wx_.data() + (b * L_.time + t) * width_;
    const bool square = DenseMath::kSquareGates;
    const ComputeT* gates = square ? wx_t : wx_t + q * slot_width_;
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

  // sLSTM's guess (as the per-channel backend's): a zero-hidden pass (R h dropped: the hidden
  // slot entering each step is 0; c, n, m run from h0) and then `passes` Picard passes, each a
  // sequential recurrence of (c, n, m) with the hidden slot frozen to the previous pass.
  std::vector<ComputeT> picard_guess(std::int64_t passes) const {
    const std::int64_t hidden = (cell_.slots() - 1) * slot_width_;  // first hidden element
    std::vector<ComputeT> current(static_cast<std::size_t>(state_elems())), previous;
    for (std::int64_t pass = 0; pass <= passes; ++pass) {
      const bool zero_hidden = pass == 0;
      parallel_chains([&](std::int64_t chain) {
        Scratch s(n_);
        ComputeT* H_chain = current.data() + chain * chain_elems();
        const ComputeT* prev_chain = zero_hidden ? nullptr : previous.data() + chain * chain_elems();
        for (std::int64_t t = 0; t < L_.time; ++t) {
          const bool head = L_.heads[static_cast<std::size_t>(t)];
          prev_state(head ? nullptr : H_chain, chain, t, s.hp.data());
          for (std::int64_t i = hidden; i < n_; ++i)
            s.hp[static_cast<std::size_t>(i)] = zero_hidden ? ComputeT(0)
                                                : head      ? s.hp[static_cast<std::size_t>(i)]
                                                            : prev_chain[(t - 1) * n_ + i];
          step_at(chain, t, s.hp.data(), H_chain + t * n_, nullptr, s.work.data());
        }
      });
      previous = current;
    }
    return current;
  }

  // F = f(prepend(H)) − H and (optionally) J; returns max|F| (NaN if any is NaN); remembers
  // max|F| per chain for the sequential fallback.
  double residual(const std::vector<ComputeT>& H, std::vector<ComputeT>& F,
                  std::vector<ComputeT>* J) const {
    chain_residual_.assign(static_cast<std::size_t>(chains()), 0.0);
    parallel_chains([&](std::int64_t chain) {
      Scratch s(n_);
      const ComputeT* H_chain = H.data() + chain * chain_elems();
      ComputeT* F_chain = F.data() + chain * chain_elems();
      ComputeT* J_chain = J ? J->data() + chain * jac_elems() : nullptr;
      double local = 0.0;
      for (std::int64_t t = 0; t < L_.time; ++t) {
        prev_state(H_chain, chain, t, s.hp.data());
        step_at(chain, t, s.hp.data(), s.hn.data(), J_chain ? J_chain + t * n_ * n_ : nullptr,
                s.work.data());
        for (std::int64_t i = 0; i < n_; ++i) {
          const ComputeT f = s.hn[static_cast<std::size_t>(i)] - H_chain[t * n_ + i];
          F_chain[t * n_ + i] = f;
          local = nan_max(local, std::abs(static_cast<double>(f)));
        }
      }
      chain_residual_[static_cast<std::size_t>(chain)] = local;
    });
    return nan_max_of(chain_residual_);
  }

  // δ from (J, F) in place on F by the dense scan of each chain, then H += ω δ.
  void update(std::vector<ComputeT>& H, const std::vector<ComputeT>& J, std::vector<ComputeT>& F,
              double omega) const {
    const ComputeT w = static_cast<ComputeT>(omega);
    parallel_chains([&](std::int64_t chain) {
      ComputeT* F_chain = F.data() + chain * chain_elems();
      scan_dense<ComputeT>(J.data() + chain * jac_elems(), F_chain,
                           DenseScanShape{.time = L_.time, .n = n_, .chunk_len = scan_chunk_, .r_stride = n_},
                           L_.heads);
      ComputeT* H_chain = H.data() + chain * chain_elems();
      for (std::int64_t k = 0; k < chain_elems(); ++k)
        H_chain[k] = omega == 1.0 ? H_chain[k] + F_chain[k] : H_chain[k] + w * F_chain[k];
    });
  }

  Tensor to_storage(const std::vector<ComputeT>& H) const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    parallel_chains([&](std::int64_t chain) {
      const ComputeT* H_chain = H.data() + chain * chain_elems();
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (std::int64_t i = 0; i < n_; ++i)
          dst[trajectory_index(chain, t, i)] = static_cast<StorageT>(H_chain[t * n_ + i]);
    });
    return out;
  }

  // The Newton solve (newton/driver.hpp), H* chain-major in the compute type.
  std::vector<ComputeT> newton_trajectory(const NewtonConfig& config, NewtonStats& stats) const {
    HostIterate<DenseSolver, std::vector<ComputeT>> family(
        *this, static_cast<std::size_t>(state_elems()), static_cast<std::size_t>(chains() * jac_elems()),
        fmt::format("chain(s) of {} values", n_));
    static_assert(NewtonFamily<decltype(family)>);
    solve_newton(family, cell_.spec(), cell_.dtype(), config, L_.time, stats);
    return std::move(family.iterate());
  }

  // H* chain-major in the compute type, as a tensor (the forward's saved trajectory) and back.
  Tensor to_compute_tensor(const std::vector<ComputeT>& H) const { return saved_trajectory(H, {static_cast<std::int64_t>(H.size())}); }
  std::vector<ComputeT> from_saved(const Tensor& saved) const { return from_saved_trajectory<ComputeT>(saved); }

  // The implicit adjoint at H* (chain-major, the compute type), everything in double: the reverse
  // walk per chain (chains in parallel), the VJP of each step by the cell's reverse pass
  // (DenseMath::vjp: gate-input cotangents written into d_wx, parameter ones summed), then the
  // parameter sums over batch rows in a fixed order and the input affine's backward.
  NewtonGradients backward(const std::vector<ComputeT>& H_star, const TensorView& grad_H, const TensorView& x,
                           const ApplyOptions& options) const {
    const std::int64_t T = L_.time, n = n_;
    const bool square = DenseMath::kSquareGates;
    const std::int64_t param_count = DenseMath::params_size(static_cast<int>(n));
    const Tensor g_tensor = Tensor::converted(grad_H, DType::f64);
    const double* g_all = g_tensor.data_as<double>();
    const std::vector<double> wx = input_affine<double>(cell_, x, L_);
    const std::vector<double> params = cell_.dense_chain_parameters();
    std::vector<double> h0;
    if (options.h0) h0 = Tensor::converted(*options.h0, DType::f64).to_f64_vector();
    std::vector<double> d_wx(static_cast<std::size_t>(L_.batch * T * width_), 0.0);
    std::vector<double> d_params(static_cast<std::size_t>(chains() * param_count), 0.0);
    std::vector<double> d_h0(h0.size(), 0.0);
    // Fault "dense_vjp_at_new_state": each step's VJP evaluated at its output h_t instead of its
    // input h_{t-1} (a planted VJP error).
    const bool vjp_at_new_state = PARARNN_FAULT_POINT("dense_vjp_at_new_state");
    parallel_chains([&](std::int64_t chain) {
      const std::int64_t b = chain / per_row_, q = chain % per_row_;
      const auto offset = [&](std::int64_t i) { return offsets_[static_cast<std::size_t>(q * n + i)]; };
      const ComputeT* H_chain = H_star.data() + chain * chain_elems();
      const double* p = params.data() + q * param_count;
      std::vector<double> mu(static_cast<std::size_t>(n)), carry(mu.size(), 0.0), hp(mu.size()), hn(mu.size()),
          h_at(mu.size()), J(static_cast<std::size_t>(n * n)),
          work(static_cast<std::size_t>(DenseMath::work_size(static_cast<int>(n)))),
          vjp_work(static_cast<std::size_t>(DenseMath::vjp_work_size(static_cast<int>(n))));
      // The chain's gate blocks in W_x x (the layout of step_at).
      const std::int64_t first_column = square ? 0 : q * slot_width_, gate_stride = square ? n * n : L_.d_h;
      for (std::int64_t t = T - 1; t >= 0; --t) {
        const bool head = L_.heads[static_cast<std::size_t>(t)];
        const std::int64_t row = L_.packed ? L_.state_index[static_cast<std::size_t>(t)] : b;
        for (std::int64_t i = 0; i < n; ++i) {
          mu[static_cast<std::size_t>(i)] = g_all[(b * T + t) * state_row_ + offset(i)] + carry[static_cast<std::size_t>(i)];
          hp[static_cast<std::size_t>(i)] =
              head ? (h0.empty() ? 0.0 : h0[static_cast<std::size_t>(row * state_row_ + offset(i))])
                   : static_cast<double>(H_chain[(t - 1) * n + i]);
          h_at[static_cast<std::size_t>(i)] =
              vjp_at_new_state ? static_cast<double>(H_chain[t * n + i]) : hp[static_cast<std::size_t>(i)];
        }
        const double* gates_t = wx.data() + (b * T + t) * width_ + first_column;
        DenseMath::step(static_cast<int>(n), p, gates_t, gate_stride, hp.data(), hn.data(), J.data(), work.data());
        DenseMath::vjp(static_cast<int>(n), p, gates_t, gate_stride, h_at.data(), mu.data(),
                       d_params.data() + chain * param_count, d_wx.data() + (b * T + t) * width_ + first_column,
                       static_cast<double*>(nullptr), vjp_work.data());
        // d h_prev = J_tᵀ μ_t (J stored [out][in]).
        for (std::int64_t k = 0; k < n; ++k) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < n; ++i) acc += J[static_cast<std::size_t>(i * n + k)] * mu[static_cast<std::size_t>(i)];
          carry[static_cast<std::size_t>(k)] = acc;
        }
        if (head) {  // a head reads h0 (or zeros): its d h_prev is ∇h0, nothing flows further back
          if (!d_h0.empty())
            for (std::int64_t i = 0; i < n; ++i)
              d_h0[static_cast<std::size_t>(row * state_row_ + offset(i))] = carry[static_cast<std::size_t>(i)];
          std::fill(carry.begin(), carry.end(), 0.0);
        }
      }
    });
    NewtonGradients out;
    // Dense-chain parameters: per chain of a row, Σ over batch rows in a fixed order.
    std::vector<double> sums(static_cast<std::size_t>(per_row_ * param_count), 0.0);
    for (std::int64_t b = 0; b < L_.batch; ++b)
      for (std::int64_t k = 0; k < per_row_ * param_count; ++k)
        sums[static_cast<std::size_t>(k)] += d_params[static_cast<std::size_t>(b * per_row_ * param_count + k)];
    for (const auto& [name, values] : cell_.dense_chain_parameter_gradients(sums, param_count))
      out.parameters.emplace(name, gradient_tensor(cell_, cell_.parameter(name).shape(), values));
    const auto dx_all = input_affine_backward<double>(cell_, x, L_, d_wx, out.parameters);
    out.x = gradient_tensor(cell_, {L_.batch, T, L_.d_in}, std::span<const double>(dx_all.data(), dx_all.size()));
    if (options.h0) out.h0 = gradient_tensor(cell_, options.h0->shape(), d_h0);
    return out;
  }

  // The sequential recurrence of one chain; the state is rounded to StoreT after every step and
  // element i at time t goes to out[index(t, i)].
  template <class StoreT, class Index>
  void sequential_chain(std::int64_t chain, StoreT* out, Index&& index) const {
    Scratch s(n_);
    for (std::int64_t t = 0; t < L_.time; ++t) {
      if (L_.heads[static_cast<std::size_t>(t)]) prev_state(nullptr, chain, t, s.hp.data());
      step_at(chain, t, s.hp.data(), s.hn.data(), nullptr, s.work.data());
      for (std::int64_t i = 0; i < n_; ++i) {
        const StoreT rounded = static_cast<StoreT>(s.hn[static_cast<std::size_t>(i)]);
        out[index(t, i)] = rounded;
        s.hp[static_cast<std::size_t>(i)] = static_cast<ComputeT>(rounded);
      }
    }
  }

  Tensor sequential() const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    parallel_chains([&](std::int64_t chain) {
      sequential_chain<StorageT>(chain, dst, [&](std::int64_t t, std::int64_t i) {
        return trajectory_index(chain, t, i);
      });
    });
    return out;
  }

  // Replaces every chain whose residual is not below `atol` by its sequential solution in the
  // compute type; returns the number of chains replaced.
  std::int64_t sequential_fallback(std::vector<ComputeT>& H, double atol) const {
    return host_fallback_units(chain_residual_, atol, [&](std::int64_t chain) {
      sequential_chain<ComputeT>(chain, H.data() + chain * chain_elems(),
                                 [&](std::int64_t t, std::int64_t i) { return t * n_ + i; });
    });
  }

  double residual_of(const TensorView& H_view) const {
    const Tensor Hc = Tensor::converted(H_view, kComputeDType);
    const ComputeT* src = Hc.data_as<ComputeT>();
    std::vector<ComputeT> H(static_cast<std::size_t>(state_elems())), F(H.size());
    parallel_chains([&](std::int64_t chain) {
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (std::int64_t i = 0; i < n_; ++i)
          H[static_cast<std::size_t>(chain * chain_elems() + t * n_ + i)] = src[trajectory_index(chain, t, i)];
    });
    return residual(H, F, nullptr);
  }

 private:
  const Cell& cell_;
  Layout L_;
  std::int64_t scan_chunk_ = 0;
  std::int64_t n_ = 0, per_row_ = 1, slot_width_ = 0, state_row_ = 0, width_ = 0;
  std::vector<ComputeT> params_;         // [chain within a row][params_size(N)]
  std::vector<ComputeT> wx_;             // [b][t][width_]
  std::vector<ComputeT> h0_;             // [row][slot][d_h]
  std::vector<std::int64_t> offsets_;    // [q][i]: chain_element_offset(q, i)
  mutable std::vector<double> chain_residual_;  // max|F| per chain, last evaluation
};

struct DenseFamily {
  template <class Body>
  static decltype(auto) with_solver(const Cell& cell, Body&& body) {
    return dispatch_dense_cell(cell.kind(), [&]<class DenseMath>() -> decltype(auto) {
      return dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() -> decltype(auto) {
        return body.template operator()<DenseSolver<DenseMath, StorageT>>();
      });
    });
  }
};

}  // namespace

const FamilyBackend kCpuDense = cpu_family_row<DenseFamily>("cpu dense", nullptr);

}  // namespace pararnn::detail
