// The CPU per-channel solver of one (cell math, storage dtype): the input affine, the residual
// and Jacobian evaluation, the scan update, sLSTM's Picard passes, the sequential loop and
// fallback, and the implicit adjoint, on one batch of chains. cpu/per_channel.cpp runs the one
// Newton driver over it (newton_apply, training); seq_parallel.cpp runs the same solver on one
// rank's chunk of the time axis, where step 0 continues the previous rank's chunk
// (`set_boundary`) and the update takes the carry from the ranks before (`update`'s `carry`).
//
// Internal layout: every per-step quantity is [b][t][s][c] (the trajectory layout itself), the
// Jacobian [b][t][out][in][c]; the input affine W_x x is one GEMM per batch row, kept in the
// compute type (f32 for f32/f16/bf16, f64 for f64) and reused by every iteration.
#pragma once

#include <fmt/format.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "backends.hpp"
#include "cpu/fault_models.hpp"
#include "cpu/input_affine.hpp"
#include "cpu/log_coords.hpp"
#include "cpu/saved_trajectory.hpp"
#include "newton/driver.hpp"
#include "pararnn/cells/affine_monoid.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn::detail {

inline constexpr std::int64_t kChannelTile = kFallbackTileChannels;

template <class CellMath, class StorageT>
class CpuSolver {
 public:
  using ComputeT = ComputeOf<StorageT>;
  static constexpr int S = CellMath::kSlots;
  static constexpr int G = CellMath::kGates;
  static constexpr int R = CellMath::kRecurrent;
  static constexpr DType kComputeDType = StorageTraits<ComputeT>::dtype;

  static constexpr int RC = CellMath::kRecurrent + CellMath::kConstants;  // per-channel values

  CpuSolver(const Cell& cell, const TensorView& x, const ApplyOptions& options, Layout layout)
      : cell_(cell), L_(std::move(layout)) {
    const std::int64_t D = L_.d_h;
    // Recurrent values clamped once (App. C.1 clamp at use time; stored values are kept).
    const std::vector<double> values = PARARNN_FAULT_POINT("clamp_skipped") ? unclamped_channel_values(cell) : cell.channel_values();
    rec_.assign(values.begin(), values.end());
    // Input affines: one GEMM per block and batch row, in the compute type; Δt for CfC.
    wx_ = input_affine<ComputeT>(cell, x, L_);
    if (cell.spec().dt_gate >= 0) {
      const Tensor xc = Tensor::converted(x, kComputeDType);
      const std::int64_t g = cell.spec().dt_gate;
      for (std::int64_t bi = 0; bi < L_.batch; ++bi)
        for (std::int64_t t = 0; t < L_.time; ++t) {
          const ComputeT dt = std::max(xc.data_as<ComputeT>()[(bi * L_.time + t) * L_.d_in + L_.d_in - 1],
                                       static_cast<ComputeT>(cells::kCfcDtFloor));
          ComputeT* dst = wx_.data() + (bi * L_.time + t) * G * D + g * D;
          std::fill(dst, dst + D, dt);
        }
    }
    // Initial states at heads, [row][s][c].
    h0_ = h0_values<ComputeT>(options);
  }

  // The same inputs (clamped recurrent values, input affines, layout) under another cell math
  // of the same shape, with initial states `h0` ([row][s][c], the compute type): the log
  // coordinate solver of an sLSTM (log_coords.hpp).
  template <class OtherMath>
  CpuSolver(const CpuSolver<OtherMath, StorageT>& other, std::vector<ComputeT> h0)
      : cell_(other.cell_), L_(other.L_), rec_(other.rec_), wx_(other.wx_), h0_(std::move(h0)) {
    static_assert(OtherMath::kGates == G && OtherMath::kRecurrent + OtherMath::kConstants == RC);
  }

  std::int64_t row_elems() const { return L_.time * S * L_.d_h; }
  const Layout& layout() const { return L_; }

  // A chunk that continues a sequence (a sequence-parallel rank r > 0): the state entering its
  // step 0, [row][s][c] in the compute type, read there instead of h0 or zeros by every
  // evaluation, Picard pass and sequential solve. Empty (the default): step 0 is a head.
  void set_boundary(std::vector<ComputeT> boundary) const { boundary_ = std::move(boundary); }

  // The state after the chunk's last step of every row, [row][s][c], of a trajectory `H`.
  std::vector<ComputeT> last_states(const std::vector<ComputeT>& H) const {
    const std::int64_t block = S * L_.d_h;
    std::vector<ComputeT> out(static_cast<std::size_t>(L_.batch * block));
    for (std::int64_t b = 0; b < L_.batch; ++b)
      std::copy_n(H.data() + b * row_elems() + (L_.time - 1) * block, block, out.data() + b * block);
    return out;
  }

  // max|F| per fallback unit (row, channel tile) at the last evaluation; a sequence-parallel
  // solve replaces them by the maxima over every rank before its fallback.
  const std::vector<double>& unit_residuals() const { return tile_residual_; }
  void set_unit_residuals(std::vector<double> maxima) const { tile_residual_ = std::move(maxima); }

  // The state entering step t of row b, channel c, slot s, given the trajectory `H` (or none).
  ComputeT prev_state(const ComputeT* H_row, std::int64_t b, std::int64_t t, int s,
                      std::int64_t c) const {
    if (t == 0 && !boundary_.empty()) return boundary_[static_cast<std::size_t>((b * S + s) * L_.d_h + c)];
    if (L_.heads[static_cast<std::size_t>(t)]) {
      if (h0_.empty()) return ComputeT(0);
      const std::int64_t row = L_.packed ? L_.state_index[static_cast<std::size_t>(t)] : b;
      return h0_[static_cast<std::size_t>((row * S + s) * L_.d_h + c)];
    }
    if (H_row == nullptr) return ComputeT(0);  // App. A guess: zeros away from heads
    return H_row[((t - 1) * S + s) * L_.d_h + c];
  }

  void step_at(std::int64_t b, std::int64_t t, std::int64_t c, const ComputeT* h_prev,
               ComputeT* h_new, ComputeT* jac) const {
    const std::int64_t D = L_.d_h;
    ComputeT rec[RC], wx[G];
    for (int k = 0; k < RC; ++k) rec[k] = rec_[static_cast<std::size_t>(k * D + c)];
    const ComputeT* wx_t = wx_.data() + (b * L_.time + t) * G * D;
    for (int g = 0; g < G; ++g) wx[g] = wx_t[g * D + c];
    if constexpr (std::is_same_v<CellMath, cells::GruDiagMath>) if (PARARNN_FAULT_POINT("zr_gates_swapped")) std::swap(wx[0], wx[1]);
    CellMath::step(rec, wx, h_prev, h_new, jac);
  }

  // Runs `body(b, c0, c1)` over batch rows x channel tiles in parallel.
  template <class Body>
  void parallel_tiles(Body&& body) const {
    const std::int64_t tiles = (L_.d_h + kChannelTile - 1) / kChannelTile;
    const std::int64_t total = L_.batch * tiles;
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < total; ++i) {
      const std::int64_t b = i / tiles, tile = i % tiles;
      body(b, tile * kChannelTile, std::min(L_.d_h, (tile + 1) * kChannelTile));
    }
  }

  // sLSTM's guess: a zero-hidden pass (R h dropped; c, n, m run from h0) and then P Picard
  // passes, each a sequential recurrence of (c, n, m) with the hidden input frozen to the
  // previous pass (passes: picard_passes of newton/family.hpp).

  std::vector<ComputeT> picard_guess(std::int64_t passes) const {
    std::vector<ComputeT> current(static_cast<std::size_t>(L_.batch * row_elems()));
    std::vector<ComputeT> previous;
    for (std::int64_t pass = 0; pass <= passes; ++pass) {
      picard_pass(current, pass == 0 ? nullptr : &previous);
      previous = current;
    }
    return current;
  }

  // One pass into `current`: the zero-hidden pass without `previous`, else the hidden input
  // frozen to `previous` (at step 0 of a continuing chunk, to the boundary's hidden slot).
  void picard_pass(std::vector<ComputeT>& current, const std::vector<ComputeT>* previous) const {
    const std::int64_t D = L_.d_h;
    constexpr int hidden = S - 1;
    const bool zero_hidden = previous == nullptr;
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      ComputeT* row = current.data() + b * row_elems();
      const ComputeT* prev_row = zero_hidden ? nullptr : previous->data() + b * row_elems();
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (std::int64_t c = c0; c < c1; ++c) {
          ComputeT sp[S], sn[S];
          const bool head = L_.heads[static_cast<std::size_t>(t)];
          for (int s = 0; s < hidden; ++s)
            sp[s] = head ? prev_state(nullptr, b, t, s, c) : row[((t - 1) * S + s) * D + c];
          sp[hidden] = zero_hidden ? ComputeT(0)
                       : head      ? prev_state(nullptr, b, t, hidden, c)
                                   : prev_row[((t - 1) * S + hidden) * D + c];
          step_at(b, t, c, sp, sn, nullptr);
          for (int s = 0; s < S; ++s) row[(t * S + s) * D + c] = sn[s];
        }
    });
  }

  // F = f(prepend(H)) − H and (optionally) J; returns max|F| (NaN if any is NaN).
  double residual(const std::vector<ComputeT>& H, std::vector<ComputeT>& F,
                  std::vector<ComputeT>* J) const {
    const std::int64_t tiles = (L_.d_h + kChannelTile - 1) / kChannelTile;
    std::vector<double>& tile_max = tile_residual_;
    tile_max.assign(static_cast<std::size_t>(L_.batch * tiles), 0.0);
    const std::int64_t D = L_.d_h;
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      const ComputeT* H_row = H.data() + b * row_elems();
      ComputeT* F_row = F.data() + b * row_elems();
      ComputeT* J_row = J ? J->data() + b * L_.time * S * S * D : nullptr;
      double local = 0.0;
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (std::int64_t c = c0; c < c1; ++c) {
          ComputeT hp[S], hn[S], jac[S * S];
          for (int s = 0; s < S; ++s) hp[s] = prev_state(H_row, b, t, s, c);
          step_at(b, t, c, hp, hn, J_row ? jac : nullptr);
          for (int s = 0; s < S; ++s) {
            const ComputeT f = hn[s] - H_row[(t * S + s) * D + c];
            F_row[(t * S + s) * D + c] = f;
            local = nan_max(local, std::abs(static_cast<double>(f)));
          }
          if (J_row)
            for (int k = 0; k < S * S; ++k) J_row[(t * S * S + k) * D + c] = jac[k];
        }
      tile_max[static_cast<std::size_t>(b * tiles + c0 / kChannelTile)] = local;
    });
    return nan_max_of(tile_max);
  }

  // δ from (J, F) in place on F, then H += ω δ. With a `carry` ([row][s][c]: δ entering step 0,
  // of a chunk that continues a sequence) step 0 is δ_0 = J_0 carry + F_0, summed in the scan's
  // own order (F first, then J's columns), so a carry equal to the previous step's δ gives that
  // step's bits.
  void update(std::vector<ComputeT>& H, const std::vector<ComputeT>& J, std::vector<ComputeT>& F,
              double omega, const ComputeT* carry = nullptr) const {
    const std::int64_t D = L_.d_h;
    const ComputeT w = static_cast<ComputeT>(omega);
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      ComputeT* F_row = F.data() + b * row_elems();
      const ComputeT* J_row = J.data() + b * L_.time * S * S * D;
      if (carry != nullptr)
        for (std::int64_t c = c0; c < c1; ++c)
          for (int s = 0; s < S; ++s) {
            ComputeT acc = F_row[s * D + c];
            for (int k = 0; k < S; ++k) acc += J_row[(s * S + k) * D + c] * carry[(b * S + k) * D + c];
            F_row[s * D + c] = acc;
          }
      const ScanShape shape{.time = L_.time, .channels = c1 - c0, .channel_stride = D};
      if (std::is_same_v<StorageT, Eigen::bfloat16> && PARARNN_FAULT_POINT("bf16_scan_arithmetic"))
        scan_affine_rounded<S, StorageT>(J_row + c0, F_row + c0, shape, L_.heads);
      else
        scan_affine<S, ComputeT>(J_row + c0, F_row + c0, shape, L_.heads);
      ComputeT* H_row = H.data() + b * row_elems();
      for (std::int64_t t = 0; t < L_.time; ++t)
        for (int s = 0; s < S; ++s)
          for (std::int64_t c = c0; c < c1; ++c) {
            const std::int64_t i = (t * S + s) * D + c;
            H_row[i] = omega == 1.0 ? H_row[i] + F_row[i] : H_row[i] + w * F_row[i];
            if (PARARNN_FAULT_POINT("iterate_rounded_each_iteration")) H_row[i] = static_cast<ComputeT>(static_cast<StorageT>(H_row[i]));
          }
    });
  }

  Tensor to_storage(const std::vector<ComputeT>& H) const {
    return storage_trajectory<StorageT>(H, cell_.trajectory_shape(L_.batch, L_.time));
  }

  // iterate_growth.hpp's quantities along a trajectory H (compute type), one entry per (row,
  // chain, channel) in that order (a row's chains are its segments, split at the heads): the
  // steps, the exponent, the stretch over min(window, steps), the guess error, and `bad` naming
  // the first step whose growth or guess error is not finite (empty when all are).
  struct UnitGrowth {
    std::int64_t steps = 0;
    double exponent = 0.0, stretch = 0.0, guess_error = 0.0;
    std::string bad;
  };
  std::vector<UnitGrowth> growth(const std::vector<ComputeT>& H, std::int64_t window) const {
    const std::int64_t D = L_.d_h, T = L_.time;
    std::vector<std::int64_t> starts;
    for (std::int64_t t = 0; t < T; ++t)
      if (L_.heads[static_cast<std::size_t>(t)]) starts.push_back(t);
    starts.push_back(T);
    const auto chains = static_cast<std::int64_t>(starts.size()) - 1;
    std::vector<UnitGrowth> out(static_cast<std::size_t>(L_.batch * chains * D));
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      const ComputeT* H_row = H.data() + b * row_elems();
      std::vector<double> g;
      for (std::int64_t k = 0; k < chains; ++k) {
        const std::int64_t t0 = starts[static_cast<std::size_t>(k)], t1 = starts[static_cast<std::size_t>(k + 1)];
        for (std::int64_t c = c0; c < c1; ++c) {
          UnitGrowth& u = out[static_cast<std::size_t>((b * chains + k) * D + c)];
          u.steps = t1 - t0;
          g.assign(static_cast<std::size_t>(u.steps), 0.0);
          double v[S];
          for (int s = 0; s < S; ++s) v[s] = 1.0 / std::sqrt(static_cast<double>(S));
          for (std::int64_t t = t0; t < t1; ++t) {
            ComputeT hp[S], hn[S], jac[S * S], gp[S], gn[S];
            for (int s = 0; s < S; ++s) {
              hp[s] = prev_state(H_row, b, t, s, c);
              gp[s] = prev_state(nullptr, b, t, s, c);
            }
            step_at(b, t, c, hp, hn, jac);
            step_at(b, t, c, gp, gn, nullptr);
            for (int s = 0; s < S; ++s)
              u.guess_error = nan_max(u.guess_error, std::abs(static_cast<double>(gn[s]) -
                                                              static_cast<double>(H_row[(t * S + s) * D + c])));
            double growth = 0.0;
            if constexpr (S == 1) {
              growth = std::log(std::abs(static_cast<double>(jac[0])));
            } else {
              double w[S], norm = 0.0;
              for (int o = 0; o < S; ++o) {
                w[o] = 0.0;
                for (int i = 0; i < S; ++i) w[o] += static_cast<double>(jac[o * S + i]) * v[i];
                norm += w[o] * w[o];
              }
              norm = std::sqrt(norm);
              growth = std::log(norm);
              for (int o = 0; o < S; ++o) v[o] = w[o] / norm;
            }
            g[static_cast<std::size_t>(t - t0)] = growth;
            if (u.bad.empty() && !(std::isfinite(growth) && std::isfinite(u.guess_error)))
              u.bad = fmt::format("step {}: log growth {}, guess error {}", t, growth, u.guess_error);
          }
          long double sum = 0.0L;
          for (double x : g) sum += x;
          u.exponent = static_cast<double>(sum / static_cast<long double>(u.steps));
          const std::int64_t W = std::min(window, u.steps);
          long double in_window = 0.0L;
          for (std::int64_t j = 0; j < W; ++j) in_window += g[static_cast<std::size_t>(j)];
          long double best = in_window;
          for (std::int64_t j = W; j < u.steps; ++j) {
            in_window += g[static_cast<std::size_t>(j)] - g[static_cast<std::size_t>(j - W)];
            best = std::max(best, in_window);
          }
          u.stretch = static_cast<double>(best);
        }
      }
    });
    return out;
  }

  // The Newton solve (newton/driver.hpp), H* in the compute type.
  std::vector<ComputeT> newton_trajectory(const NewtonConfig& config, NewtonStats& stats) const {
    if constexpr (std::is_same_v<CellMath, cells::SlstmDiagMath>)
      if (config.coords == Coords::log) return log_coords_trajectory(config, stats);
    HostIterate<CpuSolver, std::vector<ComputeT>> family(
        *this, static_cast<std::size_t>(L_.batch * row_elems()),
        static_cast<std::size_t>(L_.batch * L_.time * S * S * L_.d_h),
        fmt::format("chain tile(s) of {} channels", kChannelTile));
    static_assert(NewtonFamily<decltype(family)>);
    solve_newton(family, cell_.spec(), cell_.dtype(), config, L_.time, stats);
    return std::move(family.iterate());
  }

  // sLSTM in log coordinates (cpu/log_coords.hpp): the driver over a LogCoordsIterate of this
  // solver and its log-coordinate twin; H* decoded to native coordinates. h0 is encoded: its
  // normalizer must be >= 0, and c = 0 where n = 0 (the ratio c/n is undefined otherwise).
  std::vector<ComputeT> log_coords_trajectory(const NewtonConfig& config, NewtonStats& stats) const {
    if (!boundary_.empty())
      throw UnsupportedPath("coords=log: a chunk that continues a sequence (sequence-parallel) is not built");
    LogCoordsBounds bounds;
    double n0_max = 0.0;
    const std::int64_t D = L_.d_h;
    std::vector<ComputeT> h0 = h0_;  // no h0: the zero state of every row (n = 0: ℓ = −∞)
    if (h0.empty()) {
      const std::int64_t rows = L_.packed ? 1 + *std::max_element(L_.state_index.begin(), L_.state_index.end()) : L_.batch;
      h0.assign(static_cast<std::size_t>(rows * S * D), ComputeT(0));
    }
    std::vector<ComputeT> h0_log(h0.size());
    for (std::size_t base = 0; base < h0.size(); base += static_cast<std::size_t>(S * D))
      for (std::int64_t c = 0; c < D; ++c) {
        ComputeT native[S], encoded[S];
        for (int s = 0; s < S; ++s) native[s] = h0[base + static_cast<std::size_t>(s * D + c)];
        const std::int64_t row = static_cast<std::int64_t>(base) / (S * D);
        if (!(native[1] >= ComputeT(0)) || (native[1] == ComputeT(0) && native[0] != ComputeT(0)))
          throw ContractViolation("h0", "coords=log needs a normalizer n >= 0, and c = 0 where n = 0 (c/n is the "
                                        "iterate)", fmt::format("c={} n={} at row {}, channel {}",
                                                                static_cast<double>(native[0]),
                                                                static_cast<double>(native[1]), row, c));
        cells::SlstmLogMath::encode(native, encoded);
        for (int s = 0; s < S; ++s) h0_log[base + static_cast<std::size_t>(s * D + c)] = encoded[s];
        bounds.u_max = std::max(bounds.u_max, std::abs(static_cast<double>(encoded[0])));
        n0_max = std::max(n0_max, static_cast<double>(native[1]));
      }
    bounds.l_max = std::max(bounds.l_max, 1.0 + std::log(n0_max + static_cast<double>(L_.time)));
    const CpuSolver<cells::SlstmLogMath, StorageT> log(*this, std::move(h0_log));
    LogCoordsIterate<CpuSolver, CpuSolver<cells::SlstmLogMath, StorageT>, ComputeT> family(
        *this, log, bounds, static_cast<std::size_t>(L_.batch * row_elems()),
        static_cast<std::size_t>(L_.batch * L_.time * S * S * L_.d_h), L_.d_h,
        fmt::format("chain tile(s) of {} channels", kChannelTile));
    static_assert(NewtonFamily<decltype(family)>);
    solve_newton(family, cell_.spec(), cell_.dtype(), config, L_.time, stats);
    return std::move(family.result());
  }

  // The implicit adjoint at H* (see training.hpp), one reverse walk per chain fused with the
  // VJP: μ_t = g_t + (J_{t+1}ᵀ μ_{t+1}), where J_{t+1}ᵀ μ_{t+1} is the VJP's d h_prev at t+1.
  // A sequence-parallel chunk passes `carry` ([row][s][c]: the ∂h_prev that the next chunk's
  // step 0 sends back into this chunk's last step) and `sum_over_ranks` (the parameter sums).
  NewtonGradients backward(const std::vector<ComputeT>& H, const TensorView& grad_H,
                           const TensorView& x, const ApplyOptions& options, const double* carry_in = nullptr,
                           const SumOverRanks& sum_over_ranks = {}) const {
    const std::int64_t D = L_.d_h, T = L_.time, B = L_.batch;  // grad_H checked by api.cpp
    const Tensor g = Tensor::converted(grad_H, kComputeDType);
    const ComputeT* g_all = g.data_as<ComputeT>();
    std::vector<ComputeT> d_wx(static_cast<std::size_t>(B * T * G * D));
    std::vector<double> d_rec_rows(static_cast<std::size_t>(B * R * D), 0.0);
    const std::int64_t states = options.h0 ? options.h0->size(0) : (L_.packed ? 0 : B);
    std::vector<ComputeT> d_h0(static_cast<std::size_t>(std::max<std::int64_t>(states, 0) * S * D));
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      const ComputeT* H_row = H.data() + b * row_elems();
      const ComputeT* g_row = g_all + b * row_elems();
      for (std::int64_t c = c0; c < c1; ++c) {
        // The reverse walk runs in double whatever the storage: the adjoint of long chains sums
        // large cotangents whose contributions cancel (sLSTM's stabiliser m cancels exactly in
        // h'), and f32 cancellation noise there exceeded the gradient band.
        using AdjointT = double;
        AdjointT carry[S] = {};
        if (carry_in != nullptr)
          for (int s = 0; s < S; ++s) carry[s] = carry_in[(b * S + s) * D + c];
        double acc[R] = {};
        for (std::int64_t t = T - 1; t >= 0; --t) {
          AdjointT cot[S], hp[S], rec[RC], wx[G], d_rec[RC] = {}, dwx[G], dhp[S];
          for (int s = 0; s < S; ++s) {
            cot[s] = static_cast<AdjointT>(g_row[(t * S + s) * D + c]) + carry[s];
            hp[s] = static_cast<AdjointT>(prev_state(H_row, b, t, s, c));
          }
          for (int k = 0; k < RC; ++k) rec[k] = static_cast<AdjointT>(rec_[static_cast<std::size_t>(k * D + c)]);
          const ComputeT* wx_t = wx_.data() + (b * T + t) * G * D;
          for (int k = 0; k < G; ++k) wx[k] = static_cast<AdjointT>(wx_t[k * D + c]);
          CellMath::vjp(rec, wx, hp, cot, d_rec, dwx, dhp);
          for (int k = 0; k < R; ++k) acc[k] += d_rec[k];
          ComputeT* dwx_t = d_wx.data() + (b * T + t) * G * D;
          for (int k = 0; k < G; ++k) dwx_t[k * D + c] = static_cast<ComputeT>(dwx[k]);
          if (L_.heads[static_cast<std::size_t>(t)]) {
            // A head reads h0 (or zeros): its d h_prev is ∇h0 and nothing flows further back.
            const std::int64_t row = L_.packed ? L_.state_index[static_cast<std::size_t>(t)] : b;
            if (!d_h0.empty())
              for (int s = 0; s < S; ++s)
                d_h0[static_cast<std::size_t>((row * S + s) * D + c)] = PARARNN_FAULT_POINT("grad_h0_dropped") ? ComputeT(0) : static_cast<ComputeT>(dhp[s]);
            const bool uncut = t > 0 && PARARNN_FAULT_POINT("adjoint_not_cut_at_segment_end");
            for (int s = 0; s < S; ++s) carry[s] = uncut ? dhp[s] : AdjointT(0);
          } else {
            for (int s = 0; s < S; ++s) carry[s] = dhp[s];
          }
        }
        for (int k = 0; k < R; ++k) d_rec_rows[static_cast<std::size_t>((b * R + k) * D + c)] = acc[k];
      }
    });

    NewtonGradients out;
    // Recurrent entries: Σ over batch rows in a fixed order, then the clamp mask.
    std::vector<double> d_rec(static_cast<std::size_t>(R * D), 0.0);
    for (int k = 0; k < R; ++k)
      for (std::int64_t c = 0; c < D; ++c)
        for (std::int64_t b = 0; b < B; ++b)
          d_rec[static_cast<std::size_t>(k * D + c)] += d_rec_rows[static_cast<std::size_t>((b * R + k) * D + c)];
    if (sum_over_ranks) sum_over_ranks(d_rec);
    out.parameters = recurrent_gradients(cell_, d_rec);
    // Input affines (and CfC's Δt): cpu/input_affine.hpp.
    const auto dx_all = input_affine_backward<ComputeT>(cell_, x, L_, d_wx, out.parameters, sum_over_ranks);
    Tensor dx(cell_.dtype(), {B, T, L_.d_in});
    for (std::int64_t i = 0; i < B * T * L_.d_in; ++i)
      dx.data_as<StorageT>()[i] = static_cast<StorageT>(dx_all.data()[i]);
    out.x = dx;
    if (options.h0) {
      Tensor dh0(cell_.dtype(), options.h0->shape());
      for (std::size_t i = 0; i < d_h0.size(); ++i) dh0.data_as<StorageT>()[i] = static_cast<StorageT>(d_h0[i]);
      out.h0 = dh0;
    }
    return out;
  }

  // Every chain's adjoint walk as one element of the monoid acting on the carry entering its
  // last step, in double: per step x ↦ J_tᵀ (x + g_t) (the walk's ∂h_prev), composed from the
  // last step to step 0; out[b·d_h + c][S·S + S]. A sequence-parallel backward composes the
  // later ranks' elements into the carry of each rank's walk.
  std::vector<double> adjoint_aggregates(const std::vector<ComputeT>& H, const TensorView& grad_H) const {
    const std::int64_t D = L_.d_h, T = L_.time;
    const Tensor g = Tensor::converted(grad_H, DType::f64);
    const double* g_all = g.data_as<double>();
    std::vector<double> out(static_cast<std::size_t>(L_.batch * D * (S * S + S)));
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      const ComputeT* H_row = H.data() + b * row_elems();
      const double* g_row = g_all + b * row_elems();
      for (std::int64_t c = c0; c < c1; ++c) {
        auto acc = cells::AffineElement<S, double>::identity();
        for (std::int64_t t = T - 1; t >= 0; --t) {
          double hp[S], hn[S], jac[S * S], rec[RC], wx[G];
          for (int s = 0; s < S; ++s) hp[s] = static_cast<double>(prev_state(H_row, b, t, s, c));
          for (int k = 0; k < RC; ++k) rec[k] = static_cast<double>(rec_[static_cast<std::size_t>(k * D + c)]);
          const ComputeT* wx_t = wx_.data() + (b * T + t) * G * D;
          for (int k = 0; k < G; ++k) wx[k] = static_cast<double>(wx_t[k * D + c]);
          CellMath::step(rec, wx, hp, hn, jac);
          cells::AffineElement<S, double> step;  // x ↦ Jᵀ x + Jᵀ g_t
          for (int o = 0; o < S; ++o) {
            step.r[o] = 0.0;
            for (int i = 0; i < S; ++i) {
              step.J[o * S + i] = jac[i * S + o];
              step.r[o] += jac[i * S + o] * g_row[(t * S + i) * D + c];
            }
          }
          acc = cells::compose(step, acc);
        }
        std::copy(acc.J, acc.J + S * S, out.data() + (b * D + c) * (S * S + S));
        std::copy(acc.r, acc.r + S, out.data() + (b * D + c) * (S * S + S) + S * S);
      }
    });
    return out;
  }

  std::vector<ComputeT> from_saved(const Tensor& saved) const { return from_saved_trajectory<ComputeT>(saved); }

  Tensor to_compute_tensor(const std::vector<ComputeT>& H) const { return saved_trajectory(H, cell_.trajectory_shape(L_.batch, L_.time)); }

  // The sequential recurrence on one tile, the state rounded to StoreT after every step.
  template <class StoreT>
  void sequential_tile(std::int64_t b, std::int64_t c0, std::int64_t c1, StoreT* row) const {
    const std::int64_t D = L_.d_h;
    for (std::int64_t t = 0; t < L_.time; ++t)
      for (std::int64_t c = c0; c < c1; ++c) {
        ComputeT hp[S], hn[S];
        for (int s = 0; s < S; ++s)
          hp[s] = L_.heads[static_cast<std::size_t>(t)]
                      ? prev_state(nullptr, b, t, s, c)
                      : static_cast<ComputeT>(row[((t - 1) * S + s) * D + c]);
        step_at(b, t, c, hp, hn, nullptr);
        for (int s = 0; s < S; ++s) row[(t * S + s) * D + c] = static_cast<StoreT>(hn[s]);
      }
  }

  Tensor sequential() const {
    Tensor out(cell_.dtype(), cell_.trajectory_shape(L_.batch, L_.time));
    StorageT* dst = out.data_as<StorageT>();
    parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      sequential_tile<StorageT>(b, c0, c1, dst + b * row_elems());
    });
    return out;
  }

  // Replaces every tile whose residual is not below `atol` by its sequential solution in the
  // compute type; returns the number of tiles replaced. Used when adaptive Newton did not
  // converge by k_max, so that the default path never returns a silently wrong trajectory.
  std::int64_t sequential_fallback(std::vector<ComputeT>& H, double atol) const {
    const std::int64_t tiles = (L_.d_h + kChannelTile - 1) / kChannelTile;
    return host_fallback_units(tile_residual_, atol, [&](std::int64_t unit) {
      const std::int64_t b = unit / tiles, c0 = (unit % tiles) * kChannelTile;
      sequential_tile<ComputeT>(b, c0, std::min(L_.d_h, c0 + kChannelTile), H.data() + b * row_elems());
    });
  }

  double residual_of(const TensorView& H_view) const { return host_residual_of<ComputeT>(*this, H_view); }

 private:
  template <class, class>
  friend class CpuSolver;
  const Cell& cell_;
  Layout L_;
  std::vector<ComputeT> rec_;  // [k][c], clamped
  std::vector<ComputeT> wx_;   // [b][t][g][c]
  std::vector<ComputeT> h0_;   // [row][s][c]
  mutable std::vector<double> tile_residual_;  // max|F| per (row, channel tile), last evaluation
  mutable std::vector<ComputeT> boundary_;     // [row][s][c] entering step 0 (set_boundary)
};

template <class F>
decltype(auto) dispatch_solver(const Cell& cell, F&& f) {
  return dispatch_cell(cell.kind(), [&]<class CellMath>() -> decltype(auto) {
    return dispatch_float_dtype(cell.dtype(), [&]<class StorageT>() -> decltype(auto) {
      return f.template operator()<CellMath, StorageT>();
    });
  });
}

}  // namespace pararnn::detail
