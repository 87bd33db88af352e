// sLSTM's Newton in log coordinates on the CPU (NewtonConfig::coords = log, spec §1.4): the
// family of the one driver (newton/driver.hpp) whose iterate is (u, ℓ, m, h) = (c/n, ln n, m, h)
// (cells/slstm_log.hpp), over two CpuSolvers on the same inputs: `native` (SlstmDiagMath) and
// `log` (SlstmLogMath, its h0 encoded).
//
// Guarantees:
// - The guess is the native one (zero-hidden pass + Picard passes), encoded; the Newton steps
//   (residual, Jacobian, scan, update) run in log coordinates, and the loop's early stop judges
//   the log residual (the Newton system being solved).
// - Everything the contract reports or acts on is native: `residual_max` (stats.max_residual,
//   the residual gate, Picard adapt), the per-unit maxima of the fallback and the fallback
//   itself (the native sequential solution) use the decoded trajectory, which is also the result.
// - An adaptive solve ends with two Newton updates in native coordinates from the decoded
//   iterate (`polish`; NewtonStats::updates counts them), kept unless the native max|F| rose (a
//   NaN counts as rising), in which case the decoded log iterate stands. This happens before the
//   fallback, which then judges the polished iterate per unit: a solve that reached k_max keeps
//   its converged tiles at native accuracy too (RapidCheck: dyadic sLSTM f32, T 1193, whose log
//   step overshot from the guess; its converged tiles were 2.6x the f32 loop's error, outside the
//   quality bound, and are within it after the native updates). The log iterate converges to an
//   ulp of its own system, but decoding n = e^ℓ loses a factor of about ℓ in precision, and n and
//   m carry those per-step errors along chains whose Jacobian entries are near 1. Measured on 150
//   f32 cases, T 1000 … 3500 (error / the f32 sequential loop's error): without the native
//   updates mean 1.36, 18 cases above 2x, worst 9.2; one update mean 1.03, 2 above 2x; two updates
//   mean 0.99, none above 2x, worst 1.62; native Newton mean 1.04, worst 2.57.
// - Projection after every update: u into [−U, U] with U = max(4, max|u0|) and ℓ at most
//   ℓ_hi = max(80, 1 + ln(max n0 + T)); the true trajectory satisfies both (u is a convex
//   combination of u0 and values of tanh; n_t <= max n0 + t), so the projection never cuts the
//   solution. ℓ has no lower bound but the encoded guess's n = 0 is lifted to the smallest
//   normal number, so that every ℓ of the iterate is finite.
// Example (CpuSolver::log_coords_trajectory):
//   LogCoordsIterate<Native, Log, float> family(native, log, bounds, state_size, jacobian_size, d_h, unit);
//   solve_newton(family, cell.spec(), cell.dtype(), config, time, stats);
//   std::vector<float> H = std::move(family.result());   // native (c, n, m, h)
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "pararnn/cells/slstm_log.hpp"

namespace pararnn::detail {

// The projection bounds of one solve (see the header).
struct LogCoordsBounds {
  double u_max = 4.0;
  double l_max = 80.0;
};

template <class NativeSolver, class LogSolver, class ComputeT>
class LogCoordsIterate {
 public:
  LogCoordsIterate(const NativeSolver& native, const LogSolver& log, LogCoordsBounds bounds, std::size_t state_size,
                   std::size_t jacobian_size, std::int64_t d_h, std::string unit)
      : native_(native), log_(log), bounds_(bounds), F_(state_size), F_native_(state_size), J_(jacobian_size),
        d_h_(d_h), unit_(std::move(unit)) {}

  SolveBackend backend() const { return SolveBackend::cpu; }
  const std::string& fallback_unit() const { return unit_; }
  // sLSTM always starts from its Picard guess; the App. A operations do not exist here.
  void zero_iterate() { throw Error("coords=log: the App. A guess is not used (sLSTM starts from its Picard guess)"); }
  void iterate_from_residual() { zero_iterate(); }

  // jacobian: the Newton system in log coordinates (F, J, max|F|). Without it: the native
  // residual of the decoded iterate (the fallback's per-unit maxima).
  double evaluate(bool jacobian, bool /*reduce*/) {
    if (jacobian) return log_.residual(L_, F_, &J_);
    return residual_max();
  }
  double residual_max() {
    decode();
    return native_.residual(H_, F_native_, nullptr);
  }
  void update(double omega) {
    log_.update(L_, J_, F_, omega);
    project();
    native_current_ = false;
  }
  void picard_guess(std::int64_t passes) {
    H_ = native_.picard_guess(passes);
    encode_guess();
    native_current_ = true;
  }
  std::int64_t sequential_fallback(double atol) {
    decode();
    return native_.sequential_fallback(H_, atol);  // the native iterate is the result from here on
  }
  // The residual of the loop (log coordinates) is not the reported one (native).
  bool loop_residual_is_final() const { return false; }
  // After the loop (adaptive): kNativePolish Newton updates in native coordinates from the
  // decoded iterate (see the header), kept only if the native max|F| did not rise; returns the
  // updates kept (0 when reverted).
  std::int64_t polish(double omega) {
    decode();
    const std::vector<ComputeT> decoded = H_;
    // The loop's J is not read again (a Picard retry evaluates it afresh): the native J reuses it.
    double before = 0.0;
    for (int k = 0; k < kNativePolish; ++k) {
      const double r = native_.residual(H_, F_native_, &J_);
      if (k == 0) before = r;
      native_.update(H_, J_, F_native_, omega);
    }
    const double after = native_.residual(H_, F_native_, nullptr);
    if (after <= before) return kNativePolish;
    H_ = decoded;  // the native steps made it worse (or not finite): the log solution stands
    return 0;
  }

  std::vector<ComputeT>& result() {
    decode();
    return H_;
  }

 private:
  static constexpr int S = 4;
  static constexpr int kNativePolish = 2;
  // Visits every (row, t, channel) of a [b][t][s][c] trajectory with its slot stride d_h.
  template <class Body>
  void each_state(std::size_t size, Body&& body) {
    const auto states = static_cast<std::int64_t>(size) / (S * d_h_);
#pragma omp parallel for schedule(static)
    for (std::int64_t bt = 0; bt < states; ++bt)
      for (std::int64_t c = 0; c < d_h_; ++c) body(bt * S * d_h_ + c);
  }
  void decode() {
    if (native_current_) return;
    H_.resize(L_.size());
    each_state(L_.size(), [&](std::int64_t base) {
      ComputeT l[S], n[S];
      for (int s = 0; s < S; ++s) l[s] = L_[static_cast<std::size_t>(base + s * d_h_)];
      cells::SlstmLogMath::decode(l, n);
      for (int s = 0; s < S; ++s) H_[static_cast<std::size_t>(base + s * d_h_)] = n[s];
    });
    native_current_ = true;
  }
  void encode_guess() {
    L_.resize(H_.size());
    const ComputeT tiny = std::numeric_limits<ComputeT>::min();
    each_state(H_.size(), [&](std::int64_t base) {
      ComputeT n[S], l[S];
      for (int s = 0; s < S; ++s) n[s] = H_[static_cast<std::size_t>(base + s * d_h_)];
      if (!(n[1] > tiny) && n[1] >= ComputeT(0)) n[1] = tiny;  // an underflowed normalizer
      cells::SlstmLogMath::encode(n, l);
      for (int s = 0; s < S; ++s) L_[static_cast<std::size_t>(base + s * d_h_)] = l[s];
    });
    project();
  }
  void project() {
    const auto u_max = static_cast<ComputeT>(bounds_.u_max), l_max = static_cast<ComputeT>(bounds_.l_max);
    each_state(L_.size(), [&](std::int64_t base) {
      ComputeT& u = L_[static_cast<std::size_t>(base)];
      ComputeT& l = L_[static_cast<std::size_t>(base + d_h_)];
      u = std::clamp(u, -u_max, u_max);  // NaN stays NaN (the residual then reports it)
      if (l > l_max) l = l_max;
    });
  }

  const NativeSolver& native_;
  const LogSolver& log_;
  LogCoordsBounds bounds_;
  std::vector<ComputeT> L_, H_, F_, F_native_, J_;
  std::int64_t d_h_;
  std::string unit_;
  bool native_current_ = false;
};

}  // namespace pararnn::detail
