// The CPU backend of ParaRWKV7 (JacobianClass::linear_gu). The recurrence is
// linear in the state, S_t = S_{t−1} G_t + U_t, so there is no Newton: `newton_apply` is an
// exact scan of the (G, U) elements and `sequential_apply` the factorized step loop
// (cells/rwkv7.hpp holds both pieces of math).
//
// The scan is the project's one dense affine scan (`scan_dense`, the monoid of
// cells/affine_monoid.hpp): row i of a head's S evolves as the row vector s′ = s G + u_i, i.e.
// the dense chain δ_t = J_t δ_{t−1} + r_t with J_t = G_tᵀ (shared by the d rows of the head)
// and r_t = row i of U_t; at t = 0 the element is applied to S0 (h0, or zeros), so r_0 = S_0.
// Composing those elements is compose((G_l, U_l), (G_r, U_r)) = (G_l G_r, U_l G_r + U_r) of
// the Python library, and the scan's result is S_t = S0 · Gpref_t + Upref_t.
//
// Layout: the trajectory [b][t][head][i][j] (B, T, H, d, d), which is also the scan's r (row i
// of head `head` at time t starts at ((b T + t) H + head) d² + i d; rows H d² apart in time);
// J per (row, head) chain [t][d][d]; W_x x [b][t][6 H d] in the compute type (f32 for
// f32/f16/bf16, f64 for f64). The scan runs in the compute type and rounds to storage once;
// the sequential loop rounds the state to storage after every step. Chains (b, head) run in
// parallel.
//
// Gradients: the recurrence is linear in S, so the adjoint is exact: per chain (b, head), in
// double, the reverse walk μ_t = g_t + μ_{t+1} G_{t+1}ᵀ with Rwkv7Math::vjp at every step
// (cells/rwkv7.hpp: the gates' closed-form VJP and dS_prev); the readout block r gets none.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends.hpp"
#include "cpu/family_row.hpp"
#include "cpu/input_affine.hpp"
#include "cpu/saved_trajectory.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn::detail {
namespace {

using cells::Rwkv7Math;

template <class StorageT>
class Rwkv7Solver {
 public:
  using ComputeT = ComputeOf<StorageT>;
  static constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;

  Rwkv7Solver(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout)
      : cell_(cell), L_(std::move(layout)), heads_(cell.n_heads()), d_(cell.head_dim()) {
    width_ = gate_width(cell);
    wx_ = input_affine<ComputeT>(cell, x, L_);
    h0_ = h0_values<ComputeT>(options);
  }

  std::int64_t head_elems() const { return d_ * d_; }
  std::int64_t step_elems() const { return heads_ * head_elems(); }  // one (b, t) state
  std::int64_t offset(std::int64_t b, std::int64_t t, std::int64_t head) const {
    return (b * L_.time + t) * step_elems() + head * head_elems();
  }

  // Runs `body(b, head)` over every (batch row, head) chain in parallel.
  template <class Body>
  void parallel_chains(Body&& body) const {
    const std::int64_t total = L_.batch * heads_;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < total; ++i) body(i / heads_, i % heads_);
  }

  // The gates of chain (b, head) at step t.
  void gates_at(std::int64_t b, std::int64_t head, std::int64_t t, ComputeT* g) const {
    const ComputeT* raw = wx_.data() + (b * L_.time + t) * width_ + head * d_;
    Rwkv7Math::gates(static_cast<int>(d_), raw, L_.d_h, g);
  }

  // S0 of chain (b, head): h0[b, head] or zeros.
  void initial_state(std::int64_t b, std::int64_t head, ComputeT* S) const {
    for (std::int64_t e = 0; e < head_elems(); ++e)
      S[e] = h0_.empty() ? ComputeT(0) : h0_[static_cast<std::size_t>(b * step_elems() + head * head_elems() + e)];
  }

  // The (G, U) scan in the compute type, [b][t][head][i][j].
  std::vector<ComputeT> scan() const {
    std::vector<ComputeT> S(static_cast<std::size_t>(L_.batch * L_.time * step_elems()));
    const int d = static_cast<int>(d_);
    parallel_chains([&](std::int64_t b, std::int64_t head) {
      std::vector<ComputeT> g(static_cast<std::size_t>(Rwkv7Math::gates_size(d)));
      std::vector<ComputeT> J(static_cast<std::size_t>(L_.time * head_elems()));
      std::vector<ComputeT> S0(static_cast<std::size_t>(head_elems()));
      initial_state(b, head, S0.data());
      for (std::int64_t t = 0; t < L_.time; ++t) {
        gates_at(b, head, t, g.data());
        ComputeT* S_t = S.data() + offset(b, t, head);
        if (t == 0) {  // the first element applied to S0: r_0 = S0 G_0 + U_0 = S_0
          Rwkv7Math::step(d, g.data(), S0.data(), S_t);
          continue;
        }
        Rwkv7Math::transition(d, g.data(), J.data() + t * head_elems());
        for (int i = 0; i < d; ++i) Rwkv7Math::drive_row(d, g.data(), i, S_t + i * d);
      }
      for (std::int64_t i = 0; i < d_; ++i)
        scan_dense<ComputeT>(J.data(), S.data() + offset(b, 0, head) + i * d_,
                             DenseScanShape{.time = L_.time, .n = d_, .r_stride = step_elems()});
    });
    return S;
  }

  Tensor to_compute_tensor(const std::vector<ComputeT>& S) const { return saved_trajectory(S, cell_.trajectory_shape(L_.batch, L_.time)); }
  // The sequential loop in the compute type (scan_backend=eager's trajectory, unrounded).
  std::vector<ComputeT> sequential_compute() const {
    std::vector<ComputeT> S(static_cast<std::size_t>(L_.batch * L_.time * step_elems()));
    const int d = static_cast<int>(d_);
    parallel_chains([&](std::int64_t b, std::int64_t head) {
      std::vector<ComputeT> g(static_cast<std::size_t>(Rwkv7Math::gates_size(d))), S0(static_cast<std::size_t>(head_elems()));
      initial_state(b, head, S0.data());
      for (std::int64_t t = 0; t < L_.time; ++t) {
        gates_at(b, head, t, g.data());
        Rwkv7Math::step(d, g.data(), t == 0 ? S0.data() : S.data() + offset(b, t - 1, head), S.data() + offset(b, t, head));
      }
    });
    return S;
  }

  // The exact adjoint at the trajectory S (compute type, [b][t][head][i][j]), in double.
  NewtonGradients backward(const std::vector<ComputeT>& S, const TensorView& grad_H, const TensorView& x,
                           const ApplyOptions& options) const {
    const std::int64_t d = d_, T = L_.time, D = L_.d_h;
    const Tensor g_tensor = Tensor::converted(grad_H, DType::f64);
    const double* g_all = g_tensor.data_as<double>();
    const std::vector<double> wx = input_affine<double>(cell_, x, L_);
    std::vector<double> h0;
    if (options.h0) h0 = Tensor::converted(*options.h0, DType::f64).to_f64_vector();
    std::vector<double> d_wx(wx.size(), 0.0), d_h0(h0.size(), 0.0);
    parallel_chains([&](std::int64_t b, std::int64_t head) {
      const auto n = static_cast<std::size_t>(d * d);
      std::vector<double> mu(n), carry(n, 0.0), prev(n), work(static_cast<std::size_t>(Rwkv7Math::vjp_work_size(static_cast<int>(d))));
      for (std::int64_t t = T - 1; t >= 0; --t) {
        const std::int64_t at = offset(b, t, head);
        for (std::size_t e = 0; e < n; ++e) {
          mu[e] = g_all[at + static_cast<std::int64_t>(e)] + carry[e];
          prev[e] = t == 0 ? (h0.empty() ? 0.0 : h0[static_cast<std::size_t>(b * step_elems() + head * head_elems()) + e])
                           : static_cast<double>(S[static_cast<std::size_t>(offset(b, t - 1, head)) + e]);
        }
        const std::int64_t row = (b * T + t) * width_ + head * d;
        Rwkv7Math::vjp(static_cast<int>(d), wx.data() + row, D, prev.data(), mu.data(), d_wx.data() + row, D, carry.data(),
                       work.data());
      }
      if (!d_h0.empty())
        std::copy(carry.begin(), carry.end(), d_h0.begin() + b * step_elems() + head * head_elems());
    });
    NewtonGradients out;
    const auto dx_all = input_affine_backward<double>(cell_, x, L_, d_wx, out.parameters);
    out.x = gradient_tensor(cell_, {L_.batch, T, L_.d_in}, std::span<const double>(dx_all.data(), dx_all.size()));
    if (options.h0) out.h0 = gradient_tensor(cell_, options.h0->shape(), d_h0);
    return out;
  }

  Tensor to_storage(const std::vector<ComputeT>& S) const {
    return storage_trajectory<StorageT>(S, cell_.trajectory_shape(L_.batch, L_.time));
  }

  // The factorized step loop, the state rounded to storage after every step.
  Tensor sequential() const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    const int d = static_cast<int>(d_);
    parallel_chains([&](std::int64_t b, std::int64_t head) {
      std::vector<ComputeT> g(static_cast<std::size_t>(Rwkv7Math::gates_size(d)));
      std::vector<ComputeT> prev(static_cast<std::size_t>(head_elems())), next(prev.size());
      initial_state(b, head, prev.data());
      for (std::int64_t t = 0; t < L_.time; ++t) {
        gates_at(b, head, t, g.data());
        Rwkv7Math::step(d, g.data(), prev.data(), next.data());
        StorageT* S_t = dst + offset(b, t, head);
        for (std::int64_t e = 0; e < head_elems(); ++e) {
          S_t[e] = static_cast<StorageT>(next[static_cast<std::size_t>(e)]);
          prev[static_cast<std::size_t>(e)] = static_cast<ComputeT>(S_t[e]);
        }
      }
    });
    return out;
  }

  // max|step(S_{t−1}) − S_t| over the trajectory (S_{−1} = S0), in the compute type.
  double residual_of(const TensorView& H_view) const {
    const Tensor Hc = Tensor::converted(H_view, kComputeDType);
    const ComputeT* S = Hc.data_as<ComputeT>();
    const int d = static_cast<int>(d_);
    std::vector<double> chain_max(static_cast<std::size_t>(L_.batch * heads_), 0.0);
    parallel_chains([&](std::int64_t b, std::int64_t head) {
      std::vector<ComputeT> g(static_cast<std::size_t>(Rwkv7Math::gates_size(d)));
      std::vector<ComputeT> S0(static_cast<std::size_t>(head_elems())), next(S0.size());
      initial_state(b, head, S0.data());
      double local = 0.0;
      for (std::int64_t t = 0; t < L_.time; ++t) {
        gates_at(b, head, t, g.data());
        Rwkv7Math::step(d, g.data(), t == 0 ? S0.data() : S + offset(b, t - 1, head), next.data());
        const ComputeT* S_t = S + offset(b, t, head);
        for (std::int64_t e = 0; e < head_elems(); ++e)
          local = nan_max(local, std::abs(static_cast<double>(next[static_cast<std::size_t>(e)] - S_t[e])));
      }
      chain_max[static_cast<std::size_t>(b * heads_ + head)] = local;
    });
    return nan_max_of(chain_max);
  }

 private:
  const Cell& cell_;
  Layout L_;
  std::int64_t heads_ = 1, d_ = 1, width_ = 0;
  std::vector<ComputeT> wx_;  // [b][t][width_]
  std::vector<ComputeT> h0_;  // [b][head][i][j]
};


// The "solve" of the exact linear family: the exact (G, U) scan, or the step loop for
// scan_backend=eager. There is no iteration to leave its basin; what the residual gate can catch
// is a non-finite state (a NaN input, or an overflow from finite input): max_residual = +inf.
Tensor rwkv7_apply(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                   const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  const bool use_scan = config.scan_backend != ScanBackend::eager;
  stats = NewtonStats{};
  stats.k = KResolution{0, false, KSource::exact_scan};
  stats.scan_backend = use_scan ? SolveBackend::rwkv7_scan : SolveBackend::rwkv7_sequential;
  stats.converged = true;
  Tensor H = dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() {
    const Rwkv7Solver<StorageT> solver(cell, x, options, std::move(layout));
    return use_scan ? solver.to_storage(solver.scan()) : solver.sequential();
  });
  if (!all_finite(H)) stats.max_residual = std::numeric_limits<double>::infinity();
  return deliver(std::move(H), out, "out");
}

NewtonForward rwkv7_newton_forward(const Cell& cell, const TensorView& x, const TensorView* H_out,
    const NewtonConfig& config, const ApplyOptions& options, Layout layout) {
  NewtonForward forward;
  forward.stats.k = KResolution{0, false, KSource::exact_scan};
  const bool use_scan = config.scan_backend != ScanBackend::eager;
  forward.stats.scan_backend = use_scan ? SolveBackend::rwkv7_scan : SolveBackend::rwkv7_sequential;
  forward.stats.converged = true;
  dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() {
    const Rwkv7Solver<StorageT> solver(cell, x, options, std::move(layout));
    const auto S = use_scan ? solver.scan() : solver.sequential_compute();
    forward.H = solver.to_storage(S);
    if (!config.recompute) forward.saved_trajectory = saved_on_host(solver.to_compute_tensor(S));
  });
  forward.H = deliver(std::move(forward.H), H_out, "H_out");
  return forward;
}

NewtonGradients rwkv7_newton_backward(const Cell& cell, const TensorView& x, const NewtonForward& forward,
    const TensorView& grad_H, const TensorView* grad_x, const NewtonConfig& config,
    const ApplyOptions& options, Layout layout) {
  NewtonGradients gradients = dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() {
    const Rwkv7Solver<StorageT> solver(cell, x, options, std::move(layout));
    if (forward.saved_trajectory) {
      const Tensor saved = forward.saved_trajectory->host();
      using ComputeT = ComputeOf<StorageT>;
      const std::vector<ComputeT> S(saved.data_as<ComputeT>(), saved.data_as<ComputeT>() + saved.numel());
      return solver.backward(S, grad_H, x, options);
    }
    // recompute: the same trajectory again (deterministic)
    return solver.backward(config.scan_backend != ScanBackend::eager ? solver.scan() : solver.sequential_compute(),
                           grad_H, x, options);
  });
  gradients.x = deliver(std::move(gradients.x), grad_x, "grad_x");
  return gradients;
}

// The entry points shared with the Newton families (cpu/family_row.hpp).
using SharedEntryPoints = CpuFamilyRow<SolverOfDtype<Rwkv7Solver>>;

}  // namespace

const FamilyBackend kCpuExactLinear{.name = "cpu linear_gu",
                                    .serves = {Capability::newton, Capability::sequential, Capability::training,
                                               Capability::max_residual},
                                    .supports = check_exact_linear_inputs,
                                    .newton = rwkv7_apply,
                                    .sequential = SharedEntryPoints::sequential,
                                    .forward = rwkv7_newton_forward,
                                    .backward = rwkv7_newton_backward,
                                    .max_residual = SharedEntryPoints::max_residual};

}  // namespace pararnn::detail
