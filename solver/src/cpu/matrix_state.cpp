// The CPU backend of ParaM2RNN (JacobianClass::matrix_map): App. A initial guess,
// Newton iterations whose linear step δ_t = J_t[δ_{t−1}] + F_t is the sequential factorized walk
// of the seed library (not an associative scan: composing the maps would materialise K·V x K·V
// matrices), one walk per batch row with the rows in parallel, driven by the shared K loop of
// newton/driver.hpp (fixed K; adaptive K with the residual_atol early stop, one more update and
// the sequential fallback of unconverged rows; stats; newton_backtrack), the same-dtype
// sequential loop, and the implicit adjoint: per batch row the reverse walk
// μ_t = g_t + J_{t+1}ᵀ[μ_{t+1}] fused with the step's closed-form VJP (M2rnnMath::vjp, whose
// d h_prev is J_tᵀ[μ_t]), in double; ∇h0 = J_0ᵀ[μ_0].
// The math (step, J[Δ]) is cells/m2rnn.hpp; the entry points are cpu/family_row.hpp's.
//
// Layout: H and F [b][t][K·V] (the trajectory (B, T, K, V), row-major); the "Jacobian" a Newton
// iteration keeps is the gain G_t = (1 − f_t)(1 − Z_t²) [b][t][K·V] (J_t[Δ] = f_t Δ + G_t ⊙ (Δ W);
// f_t is read from the gate inputs); W_x x [b][t][K + V + 1] in the compute type (f32 for
// f32/f16/bf16, f64 for f64), computed once. Rectangular batches only (api.cpp refuses packing
// and windows), so the only head is t = 0, which reads h0 (or zeros).
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "backends.hpp"
#include "cpu/family_row.hpp"
#include "cpu/input_affine.hpp"
#include "cpu/saved_trajectory.hpp"
#include "newton/driver.hpp"

namespace pararnn::detail {
namespace {

using cells::M2rnnMath;

template <class StorageT>
class M2rnnSolver {
 public:
  using ComputeT = ComputeOf<StorageT>;
  static constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;

  M2rnnSolver(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout)
      : cell_(cell), L_(std::move(layout)), K_(static_cast<int>(cell.k_dim())),
        V_(static_cast<int>(cell.v_dim())), width_(gate_width(cell)) {
    const Tensor W = Tensor::converted(cell.parameter("W"), kComputeDType);
    W_.assign(W.data_as<ComputeT>(), W.data_as<ComputeT>() + W.numel());
    wx_ = input_affine<ComputeT>(cell, x, L_);
    h0_ = h0_values<ComputeT>(options);
  }

  std::int64_t row_elems() const { return L_.time * L_.d_h; }

  template <class Body>
  void parallel_rows(Body&& body) const {
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < L_.batch; ++b) body(b);
  }

  const ComputeT* raw_at(std::int64_t b, std::int64_t t) const {
    return wx_.data() + (b * L_.time + t) * width_;
  }

  // The state entering step t of row b: h0 (or zeros) at t = 0; H[t − 1] otherwise, or zeros
  // when `H_row` is null (the App. A guess).
  const ComputeT* prev_state(const ComputeT* H_row, std::int64_t b, std::int64_t t,
                             const std::vector<ComputeT>& zeros) const {
    if (t == 0) return h0_.empty() ? zeros.data() : h0_.data() + b * L_.d_h;
    return H_row == nullptr ? zeros.data() : H_row + (t - 1) * L_.d_h;
  }

  std::vector<ComputeT> zeros() const { return std::vector<ComputeT>(static_cast<std::size_t>(L_.d_h)); }

  // F = f(prepend(H)) − H and (optionally) the gains G of row b; returns the row's max|F| (NaN
  // if any is NaN).
  double row_residual(std::int64_t b, const ComputeT* H_row, ComputeT* F_row, ComputeT* G_row) const {
    const std::vector<ComputeT> zero = zeros();
    std::vector<ComputeT> h_new(static_cast<std::size_t>(L_.d_h));
    double local = 0.0;
    for (std::int64_t t = 0; t < L_.time; ++t) {
      M2rnnMath::step(K_, V_, W_.data(), raw_at(b, t), prev_state(H_row, b, t, zero), h_new.data(),
                      G_row ? G_row + t * L_.d_h : nullptr);
      for (std::int64_t i = 0; i < L_.d_h; ++i) {
        const std::int64_t at = t * L_.d_h + i;
        const ComputeT f = h_new[static_cast<std::size_t>(i)] - H_row[at];
        F_row[at] = f;
        local = nan_max(local, std::abs(static_cast<double>(f)));
      }
    }
    return local;
  }

  // F = f(prepend(H)) − H and (optionally) the gains G; returns max|F| (NaN if any is NaN);
  // remembers max|F| per row for the sequential fallback and the backtracking.
  double residual(const std::vector<ComputeT>& H, std::vector<ComputeT>& F,
                  std::vector<ComputeT>* G) const {
    row_residual_.assign(static_cast<std::size_t>(L_.batch), 0.0);
    parallel_rows([&](std::int64_t b) {
      row_residual_[static_cast<std::size_t>(b)] =
          row_residual(b, H.data() + b * row_elems(), F.data() + b * row_elems(),
                       G ? G->data() + b * row_elems() : nullptr);
    });
    return nan_max_of(row_residual_);
  }

  // δ in place on F by the sequential factorized walk δ_t = J_t[δ_{t−1}] + F_t (δ_{−1} = 0, so
  // δ_0 = F_0 and h0 stays fixed), then H += ω δ. With newton_backtrack, a row whose candidate
  // H + ωδ has a larger max|F| than H (the last evaluation) retries with ω halved, at most
  // kBacktrackHalvings times; the last candidate is then taken (a step along δ, never none,
  // so the loop cannot stall on one iterate).
  void update(std::vector<ComputeT>& H, const std::vector<ComputeT>& G, std::vector<ComputeT>& F,
              double omega) const {
    const ComputeT w = static_cast<ComputeT>(omega);
    parallel_rows([&](std::int64_t b) {
      std::vector<ComputeT> carried(static_cast<std::size_t>(L_.d_h));
      ComputeT* F_row = F.data() + b * row_elems();
      const ComputeT* G_row = G.data() + b * row_elems();
      for (std::int64_t t = 1; t < L_.time; ++t) {
        const ComputeT f = M2rnnMath::forget(K_, V_, raw_at(b, t));
        M2rnnMath::apply_jacobian(K_, V_, W_.data(), f, G_row + t * L_.d_h, F_row + (t - 1) * L_.d_h,
                                  carried.data());
        ComputeT* delta_t = F_row + t * L_.d_h;
        for (std::int64_t i = 0; i < L_.d_h; ++i) delta_t[i] += carried[static_cast<std::size_t>(i)];
      }
      ComputeT* H_row = H.data() + b * row_elems();
      if (!backtrack_) {
        for (std::int64_t i = 0; i < row_elems(); ++i)
          H_row[i] = omega == 1.0 ? H_row[i] + F_row[i] : H_row[i] + w * F_row[i];
        return;
      }
      const double before = row_residual_[static_cast<std::size_t>(b)];
      std::vector<ComputeT> candidate(static_cast<std::size_t>(row_elems())), scratch(candidate.size());
      ComputeT step = w;
      for (int halving = 0;; ++halving) {
        for (std::int64_t i = 0; i < row_elems(); ++i)
          candidate[static_cast<std::size_t>(i)] = H_row[i] + step * F_row[i];
        const double after = row_residual(b, candidate.data(), scratch.data(), nullptr);
        if (after <= before || !std::isfinite(before) || halving == kBacktrackHalvings) break;
        step /= ComputeT(2);
#pragma omp atomic
        ++backtracks_;
      }
      std::copy(candidate.begin(), candidate.end(), H_row);
    });
  }

  Tensor to_compute_tensor(const std::vector<ComputeT>& H) const { return saved_trajectory(H, cell_.trajectory_shape(L_.batch, L_.time)); }
  std::vector<ComputeT> from_saved(const Tensor& saved) const { return from_saved_trajectory<ComputeT>(saved); }

  // The implicit adjoint at H* (training.hpp), in double: rows in parallel, ∇W summed over rows
  // in a fixed order, then the input affine's backward.
  NewtonGradients backward(const std::vector<ComputeT>& H_star, const TensorView& grad_H, const TensorView& x,
                           const ApplyOptions& options) const {
    const std::int64_t T = L_.time, N = L_.d_h;
    const Tensor g_tensor = Tensor::converted(grad_H, DType::f64);
    const double* g_all = g_tensor.data_as<double>();
    const std::vector<double> wx = input_affine<double>(cell_, x, L_);
    const std::vector<double> W(W_.begin(), W_.end());
    std::vector<double> h0;
    if (options.h0) h0 = Tensor::converted(*options.h0, DType::f64).to_f64_vector();
    std::vector<double> d_wx(wx.size(), 0.0), dW_rows(static_cast<std::size_t>(L_.batch * V_ * V_), 0.0);
    std::vector<double> d_h0(h0.size(), 0.0);
    parallel_rows([&](std::int64_t b) {
      std::vector<double> mu(static_cast<std::size_t>(N)), carry(mu.size(), 0.0), hp(mu.size()), dA(mu.size());
      const ComputeT* H_row = H_star.data() + b * row_elems();
      for (std::int64_t t = T - 1; t >= 0; --t) {
        for (std::int64_t i = 0; i < N; ++i) {
          mu[static_cast<std::size_t>(i)] = g_all[(b * T + t) * N + i] + carry[static_cast<std::size_t>(i)];
          hp[static_cast<std::size_t>(i)] = t == 0 ? (h0.empty() ? 0.0 : h0[static_cast<std::size_t>(b * N + i)])
                                                   : static_cast<double>(H_row[(t - 1) * N + i]);
        }
        M2rnnMath::vjp(K_, V_, W.data(), wx.data() + (b * T + t) * width_, hp.data(), mu.data(),
                       d_wx.data() + (b * T + t) * width_, dW_rows.data() + b * V_ * V_, carry.data(), dA.data());
      }
      if (!d_h0.empty()) std::copy(carry.begin(), carry.end(), d_h0.begin() + b * N);
    });
    NewtonGradients out;
    std::vector<double> dW(static_cast<std::size_t>(V_ * V_), 0.0);
    for (std::int64_t b = 0; b < L_.batch; ++b)
      for (std::size_t k = 0; k < dW.size(); ++k) dW[k] += dW_rows[static_cast<std::size_t>(b * V_ * V_) + k];
    out.parameters.emplace("W", gradient_tensor(cell_, cell_.parameter("W").shape(), dW));
    const auto dx_all = input_affine_backward<double>(cell_, x, L_, d_wx, out.parameters);
    out.x = gradient_tensor(cell_, {L_.batch, T, L_.d_in}, std::span<const double>(dx_all.data(), dx_all.size()));
    if (options.h0) out.h0 = gradient_tensor(cell_, options.h0->shape(), d_h0);
    return out;
  }

  Tensor to_storage(const std::vector<ComputeT>& H) const {
    return storage_trajectory<StorageT>(H, cell_.trajectory_shape(L_.batch, L_.time));
  }

  // The Newton solve (newton/driver.hpp), H* in the compute type; the "Jacobian" is the gains.
  std::vector<ComputeT> newton_trajectory(const NewtonConfig& config, NewtonStats& stats) const {
    backtrack_ = config.newton_backtrack;
    backtracks_ = 0;
    const auto size = static_cast<std::size_t>(L_.batch * row_elems());
    HostIterate<M2rnnSolver, std::vector<ComputeT>> family(*this, size, size,
                                                            fmt::format("batch row(s) of {}x{} states", K_, V_));
    static_assert(NewtonFamily<decltype(family)>);
    solve_newton(family, cell_.spec(), cell_.dtype(), config, L_.time, stats);
    stats.backtracks = backtracks_;
    return std::move(family.iterate());
  }

  // The sequential recurrence of row b, the state rounded to StoreT after every step.
  template <class StoreT>
  void sequential_row(std::int64_t b, StoreT* row) const {
    const std::vector<ComputeT> zero = zeros();
    std::vector<ComputeT> h_prev(static_cast<std::size_t>(L_.d_h)), h_new(h_prev.size());
    for (std::int64_t t = 0; t < L_.time; ++t) {
      if (t == 0) {
        const ComputeT* start = prev_state(nullptr, b, 0, zero);
        h_prev.assign(start, start + L_.d_h);
      } else {
        for (std::int64_t i = 0; i < L_.d_h; ++i)
          h_prev[static_cast<std::size_t>(i)] = static_cast<ComputeT>(row[(t - 1) * L_.d_h + i]);
      }
      M2rnnMath::step(K_, V_, W_.data(), raw_at(b, t), h_prev.data(), h_new.data(),
                      static_cast<ComputeT*>(nullptr));
      for (std::int64_t i = 0; i < L_.d_h; ++i)
        row[t * L_.d_h + i] = static_cast<StoreT>(h_new[static_cast<std::size_t>(i)]);
    }
  }

  Tensor sequential() const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    parallel_rows([&](std::int64_t b) { sequential_row<StorageT>(b, dst + b * row_elems()); });
    return out;
  }

  // Replaces every row whose residual is not below `atol` by its sequential solution in the
  // compute type; returns the number of rows replaced.
  std::int64_t sequential_fallback(std::vector<ComputeT>& H, double atol) const {
    return host_fallback_units(row_residual_, atol,
                               [&](std::int64_t b) { sequential_row<ComputeT>(b, H.data() + b * row_elems()); });
  }

  double residual_of(const TensorView& H_view) const { return host_residual_of<ComputeT>(*this, H_view); }

 private:
  const Cell& cell_;
  Layout L_;
  int K_ = 0, V_ = 0;
  std::int64_t width_ = 0;
  std::vector<ComputeT> W_;   // (V, V) row-major
  std::vector<ComputeT> wx_;  // [b][t][K + V + 1]
  std::vector<ComputeT> h0_;  // [b][K·V]
  mutable std::vector<double> row_residual_;  // max|F| per row, last evaluation
  mutable bool backtrack_ = false;            // newton_backtrack of the solve under way
  mutable std::int64_t backtracks_ = 0;       // rejected (row, step) trials of that solve
};

}  // namespace

const FamilyBackend kCpuMatrixState =
    cpu_family_row<SolverOfDtype<M2rnnSolver>>("cpu matrix_map", check_matrix_state_inputs);

}  // namespace pararnn::detail
