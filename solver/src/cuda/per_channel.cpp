// The CUDA backend's per-channel family (host orchestration; the kernels live in
// pararnn::kernels): inputs brought to the device once (per_channel.hpp's DeviceInputs), then the
// one Newton driver (newton/driver.hpp) over the per-channel family on the device: by default the
// fused step (kernels/newton_step.hpp: F, J, the scan and H += ωδ in one kernel), or
// (NewtonStrategy::host_driven) the residual kernel, the scan and an axpy; an adaptive solve
// reads max|F| back once per iteration, a fixed K on the fused step is decided on the device and
// read back once (fixed_loop, kernels/newton_loop.hpp); an adaptive solve with B·d at or above
// the auto rule's threshold (the cell list's column, sequential_min_chains) runs the sequential
// kernel instead. Returns host tensors
// in the storage dtype, or writes into the caller's view.
//
// Dtypes: f64 computes in f64, f32/f16/bf16 in f32. Newton runs for all four (the f16/bf16
// trajectory lives in f32 on the device, as the CPU backend keeps it in f32, and is rounded to
// the storage dtype once at the end); the same-dtype sequential loop rounds its state to the
// storage dtype every step (__half / __nv_bfloat16 kernels for f16 / bf16), as the CPU's does.
// Cells: every per-channel cell (kernels/newton_cells.hpp; CfC's Δt gate is filled on the device,
// sLSTM's Picard guess runs the sequential kernel with the hidden slot frozen); the dense,
// RWKV-7 and M2RNN cells run in cuda/dense.cpp, cuda/exact_linear.cpp and cuda/matrix_state.cpp.
// Training is per_channel_training.cpp, the windowed launch windowed.cpp, CudaDecoder decoder.cpp.
#include "cuda/per_channel.hpp"
#include "newton/driver.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "pararnn/core/fault.hpp"
#include "pararnn/kernels/cell_residual.hpp"
#include "pararnn/kernels/newton_loop.hpp"
#include "pararnn/kernels/newton_step.hpp"
#include "pararnn/kernels/scan.hpp"
#include "pararnn/kernels/sequential.hpp"
#include "pararnn/kernels/tile_max.hpp"

namespace pararnn::detail {
namespace cuda {
namespace {

// How the hidden slot enters the steps of a sequential pass: carried (the recurrence), or, for
// sLSTM's Picard guess, zero or frozen to a previous pass (kernels/sequential.hpp).
template <class ComputeT>
struct HiddenInput {
  bool zero = false;
  const ComputeT* frozen = nullptr;
  unsigned int* non_finite = nullptr;  // SequentialArgs::non_finite
};

// The sequential kernel over the whole problem, the state stored in T (the storage or the
// compute type).
template <class CellMath, class T>
void run_sequential(const DeviceProblem& p, T* H, HiddenInput<kernels::ComputeOf<T>> hidden = {}) {
  using ComputeT = kernels::ComputeOf<T>;
  kernels::SequentialArgs<T> a{.wx = static_cast<const ComputeT*>(p.wx),
                               .recurrent = static_cast<const ComputeT*>(p.recurrent),
                               .h0 = static_cast<const ComputeT*>(p.h0),
                               .h0_row = p.h0_row,
                               .head = p.head,
                               .H = H,
                               .batch = p.batch,
                               .time = p.time,
                               .channels = p.channels,
                               .frozen_hidden = hidden.frozen,
                               .zero_hidden = hidden.zero,
                               .non_finite = hidden.non_finite};
  PARARNN_CUDA_CHECK((kernels::launch_sequential_apply<CellMath, T>(a, current_stream())));
}

// The per-channel family on the device (newton/family.hpp): the residual kernel for F, J and
// max|F|, the affine scan and cuBLAS axpy for the update, the sequential kernel for the Picard
// guess and the fallback; the iterate H [b][t][s][c] in the compute type.
template <class CellMath, class ComputeT>
class CudaPerChannelFamily {
 public:
  static constexpr int S = CellMath::kSlots;

  CudaPerChannelFamily(const DeviceProblem& problem, NewtonWorkspace& workspace, ComputeT* H)
      : p_(problem), ws_(workspace), out_(H), H_(H),
        n_(problem.batch * problem.time * S * problem.channels) {}

  // The fused strategy (NewtonWorkspace::fused): one kernel evaluates max|F| of H and computes
  // the candidate H + ωδ into the other iterate buffer; the driver commits it or, on the seed's
  // early stop, keeps H. The App. A guess is deferred into the first step (`from_guess`: no pass
  // of its own) and written out only if a later operation needs it as H; the buffers alternate
  // so that `expected_updates` commits end in the caller's buffer (no final copy).
  bool fused() const { return ws_.fused; }
  bool defer_guess(std::int64_t expected_updates) {
    if (!ws_.fused) return false;
    guess_pending_ = true;
    expected_updates_ = expected_updates;
    steps_ = 0;
    result_known_ = false;
    H_ = expected_updates % 2 == 1 ? second_iterate() : out_;
    return true;
  }
  // From the step expected to be the last on, the step also reduces max|F| of its result but at
  // the chunk starts (NewtonStepArgs::max_abs_result), so that the final residual is a pass over
  // 1/L of the steps (residual_max) instead of all of them.
  double evaluate_and_step(double omega) {
    ComputeT* next = H_ == out_ ? second_iterate() : out_;
    const bool want_result = expected_updates_ > 0 && steps_ + 1 >= expected_updates_;
    launch_step(guess_pending_ ? nullptr : H_, next, want_result, omega, nullptr);
    candidate_ = next;
    ComputeT values[2] = {0, 0};
    copy_to_host(values, ws_.max_abs.get(), (want_result ? 2 : 1) * sizeof(ComputeT));
    candidate_result_ = want_result ? std::optional<double>(static_cast<double>(values[1])) : std::nullopt;
    return static_cast<double>(values[0]);
  }
  // The fixed-K loop decided on the device (family.hpp DeviceLoopFamily, kernels/newton_loop.hpp):
  // the `steps` fused steps of evaluate_and_step, each followed by the rule's decision kernel and
  // skipped once the loop has stopped; the buffers alternate as commits would make them, so the
  // iterate after c commits is buffers[c % 2]; then the final residual pass (the chunk starts
  // after a step that reduced its result, as residual_max) and one read of the loop's state.
  // A K above kStepsPerRead (a cap the early stop usually undercuts) reads the stop flag after
  // each kStepsPerRead steps queued and queues no more once it is set: at most that many
  // launches are wasted, at one more read per kStepsPerRead steps.
  // On a stream being captured into a CUDA graph, or with sync_free, nothing is read
  // (FixedLoopOutcome::on_device):
  // every step is queued, the iterate is delivered into the caller's buffer on the device (a
  // deferred guess no step replaced is written out there, under the state's kGuessSkip), and
  // the residual gate sets it to NaN when it fires (launch_newton_loop_deliver).
  static constexpr std::int64_t kStepsPerRead = 8;
  FixedLoopOutcome fixed_loop(std::int64_t steps, std::optional<double> stop_atol, double omega,
                              std::optional<double> residual_fail) {
    const bool unread = outcome_unread();
    DeviceBuffer state(checked_bytes(kernels::kLoopHeader + steps, sizeof(double), "the fixed-K loop's state"),
                       "the fixed-K loop's state");
    PARARNN_CUDA_CHECK(cudaMemsetAsync(state.get(), 0, state.bytes(), current_stream()));
    const double* stopped = state.as<double>() + kernels::kStopped;
    const bool from_guess = guess_pending_;
    ComputeT* const buffers[2] = {H_, steps == 0 ? nullptr : H_ == out_ ? second_iterate() : out_};
    const auto with_result = [&](std::int64_t step) { return expected_updates_ > 0 && steps_ + step + 1 >= expected_updates_; };
    for (std::int64_t i = 0; i < steps; ++i) {
      launch_step(from_guess && i == 0 ? nullptr : buffers[i % 2], buffers[(i + 1) % 2], with_result(i), omega, stopped);
      const kernels::NewtonLoopDecisionArgs<ComputeT> d{.max_abs = ws_.max_abs.as<ComputeT>(),
                                                        .state = state.as<double>(),
                                                        .step = i,
                                                        .stop = stop_atol.has_value(),
                                                        .stop_atol = stop_atol.value_or(0.0),
                                                        .with_result = with_result(i)};
      PARARNN_CUDA_CHECK(kernels::launch_newton_loop_decision(d, current_stream()));
      if (!unread && (i + 1) % kStepsPerRead == 0 && i + 1 < steps) {
        double flag = 0.0;
        copy_to_host(&flag, stopped, sizeof flag);
        if (flag != 0.0) break;
      }
    }
    // The final residual of buffers[steps % 2], the iterate when no step stopped the loop.
    const bool partial = steps > 0 && with_result(steps - 1);
    guess_pending_ = false;
    H_ = buffers[steps % 2];
    if (steps == 0) {
      guess_pending_ = from_guess;
      materialize_guess();
    }
    (void)residual_pass(false, true, false, partial ? kernels::newton_step_chunk<CellMath, ComputeT>() : 1, stopped,
                        /*read=*/false);
    const kernels::NewtonLoopFinalArgs<ComputeT> f{.residual = ws_.max_abs.as<ComputeT>(),
                                                   .state = state.as<double>(),
                                                   .partial = partial,
                                                   .guess_pending = from_guess && steps > 0};
    PARARNN_CUDA_CHECK(kernels::launch_newton_loop_final(f, current_stream()));
    if (unread) return deliver_on_device(state, buffers, from_guess && steps > 0, residual_fail);
    std::vector<double> host(static_cast<std::size_t>(kernels::kLoopHeader + steps));
    copy_to_host(host.data(), state.get(), state.bytes());

    FixedLoopOutcome r;
    r.committed = static_cast<std::int64_t>(host[kernels::kCommitted]);
    r.stopped = host[kernels::kStopped] != 0.0;
    r.converged = host[kernels::kConverged] != 0.0;
    r.final_residual = host[kernels::kFinal];
    const std::int64_t ran = r.stopped ? r.committed + 1 : steps;
    r.history.assign(host.begin() + kernels::kLoopHeader, host.begin() + kernels::kLoopHeader + ran);
    // The iterate after the committed steps, as commit_step would have left it.
    H_ = buffers[r.committed % 2];
    guess_pending_ = from_guess && steps > 0 && r.committed == 0;  // step 0 stopped: the guess, not written
    result_known_ = r.committed > 0 && with_result(r.committed - 1);
    result_partial_ = host[kernels::kResultPartial];
    steps_ += r.committed;
    return r;
  }
  // fixed_loop's end when its state cannot be read: the iterate into out_ on the device. A
  // deferred guess that no step replaced (kGuessSkip 0) is written straight into out_ as the host
  // path writes it (the residual of the zero iterate, here the buffer that is not out_: the same
  // kernel on the same inputs, so the same bits); otherwise buffers[c % 2] is copied unless it is
  // out_; then the gate.
  FixedLoopOutcome deliver_on_device(const DeviceBuffer& state, ComputeT* const (&buffers)[2], bool guess_pending,
                                     std::optional<double> residual_fail) {
    const double* s = state.as<double>();
    if (guess_pending) {
      ComputeT* zero = buffers[0] == out_ ? buffers[1] : buffers[0];
      PARARNN_CUDA_CHECK(kernels::launch_newton_loop_guess_zero(s, zero, n_, current_stream()));
      const kernels::CellResidualArgs<ComputeT> a{.wx = static_cast<const ComputeT*>(p_.wx),
                                                  .recurrent = static_cast<const ComputeT*>(p_.recurrent),
                                                  .h0 = static_cast<const ComputeT*>(p_.h0),
                                                  .h0_row = p_.h0_row,
                                                  .head = p_.head,
                                                  .H = zero,
                                                  .residual = out_,
                                                  .batch = p_.batch,
                                                  .time = p_.time,
                                                  .channels = p_.channels,
                                                  .skip = s + kernels::kGuessSkip};
      PARARNN_CUDA_CHECK((kernels::launch_cell_residual<CellMath, ComputeT>(
          a, ws_.residual_workspace.get(), ws_.residual_workspace.bytes(), current_stream())));
    }
    const kernels::NewtonLoopDeliverArgs<ComputeT> d{.state = s,
                                                     .buffers = {buffers[0], buffers[1]},
                                                     .out = out_,
                                                     .n = n_,
                                                     .gate = residual_fail.has_value(),
                                                     .residual_fail = residual_fail.value_or(0.0)};
    PARARNN_CUDA_CHECK(kernels::launch_newton_loop_deliver(d, current_stream()));
    H_ = out_;
    guess_pending_ = false;
    result_known_ = false;
    FixedLoopOutcome r;
    r.on_device = true;
    return r;
  }
  void commit_step() {
    H_ = candidate_;
    guess_pending_ = false;
    ++steps_;
    result_known_ = candidate_result_.has_value();
    result_partial_ = candidate_result_.value_or(0.0);
  }
  // The solve's result belongs in the caller's buffer.
  void finish() {
    materialize_guess();
    if (H_ != out_) {
      PARARNN_CUDA_CHECK(cudaMemcpyAsync(out_, H_, bytes(), cudaMemcpyDeviceToDevice, current_stream()));
      H_ = out_;
    }
  }

  // The auto rule's sequential strategy (NewtonWorkspace::sequential): the sequential kernel in
  // the compute type into the caller's buffer. Its residual (driver.hpp): 0, the solution being
  // the recurrence evaluated step by step, or +inf when a state value is not finite (the
  // kernel's flag, in the max|F| buffer).
  bool prefer_sequential() const { return ws_.sequential; }
  double solve_sequential() {
    guess_pending_ = false;
    result_known_ = false;
    H_ = out_;
    auto* flag = ws_.max_abs.as<unsigned int>();
    PARARNN_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(unsigned int), current_stream()));
    DeviceProblem rows = p_;
    if (PARARNN_FAULT_POINT("cuda_auto_rule_skips_last_row") && rows.batch > 1) --rows.batch;
    run_sequential<CellMath, ComputeT>(rows, H_, {.non_finite = flag});
    unsigned int non_finite = 0;
    copy_to_host(&non_finite, flag, sizeof non_finite);
    if (PARARNN_FAULT_POINT("cuda_sequential_flag_dropped")) non_finite = 0;
    return non_finite != 0 ? std::numeric_limits<double>::infinity() : 0.0;
  }
  SolveStrategy strategy() const { return ws_.fused ? SolveStrategy::fused : SolveStrategy::host_driven; }

  SolveBackend backend() const { return SolveBackend::cuda; }
  std::string fallback_unit() const {
    return fmt::format("chain tile(s) of {} channels", kFallbackTileChannels);
  }
  void zero_iterate() {
    result_known_ = false;
    PARARNN_CUDA_CHECK(cudaMemsetAsync(H_, 0, bytes(), current_stream()));
  }
  void iterate_from_residual() {
    result_known_ = false;
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(H_, residual(), bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  }

  // F = f(prepend(H)) − H, J when asked, and max|F| read back when asked (else 0).
  double evaluate(bool with_jacobian, bool reduce) { return residual_pass(with_jacobian, reduce, true); }
  // max|F| of H without writing F (the final residual of a solve).
  // After a committed step that reduced its result's max|F| (evaluate_and_step), only the chunk
  // starts are left: the residual kernel at time_stride L, and the larger of the two (NaN wins).
  double residual_max() {
    if (!result_known_) return residual_pass(false, true, false);
    const double starts = residual_pass(false, true, false, kernels::newton_step_chunk<CellMath, ComputeT>());
    return nan_max(result_partial_, starts);
  }

  // sLSTM's guess (the CPU family's picard_guess): a zero-hidden pass, then `passes` Picard
  // passes, each the sequential kernel with the hidden slot frozen to the previous pass. The
  // passes alternate between H and the residual buffer (free until the first evaluation) so that
  // the last one lands in H.
  void picard_guess(std::int64_t passes) {
    result_known_ = false;
    ComputeT* buffers[2] = {H_, residual()};
    const ComputeT* previous = nullptr;
    for (std::int64_t pass = 0; pass <= passes; ++pass) {
      ComputeT* target = buffers[(passes - pass) % 2];
      run_sequential<CellMath, ComputeT>(p_, target, {.zero = pass == 0, .frozen = previous});
      previous = target;
    }
  }

  // δ from (J, F) in place on F, then H += ω δ.
  void update(double omega) {
    result_known_ = false;
    kernels::ScanArgs<ComputeT> s{.jac = ws_.jacobian.as<ComputeT>(),
                                  .delta = residual(),
                                  .head = p_.head,
                                  .batch = p_.batch,
                                  .time = p_.time,
                                  .channels = p_.channels,
                                  .tiling = ws_.tiling};
    PARARNN_CUDA_CHECK((kernels::launch_scan_affine<S, ComputeT>(
        s, ws_.scan_workspace.get(), ws_.scan_workspace.bytes(), current_stream())));
    const ComputeT w = static_cast<ComputeT>(omega);
    cublasHandle_t handle = cublas_handle();
    if constexpr (std::is_same_v<ComputeT, double>) {
      PARARNN_CUBLAS_CHECK(cublasDaxpy_64(handle, n_, &w, residual(), 1, H_, 1));
    } else {
      PARARNN_CUBLAS_CHECK(cublasSaxpy_64(handle, n_, &w, residual(), 1, H_, 1));
    }
  }

  // The tiles (batch row, 64 channels) still at or above atol get the sequential solution; the
  // tiles' max|F| are reduced on the device (kernels/tile_max.hpp), only they reach the host.
  std::int64_t sequential_fallback(double atol) {
    const std::int64_t C = p_.channels, tiles = (C + kFallbackTileChannels - 1) / kFallbackTileChannels;
    const std::int64_t row = p_.time * S * C;
    materialize_guess();
    (void)residual();
    result_known_ = false;
    const std::int64_t units = p_.batch * tiles;
    // Enough (unit, row range) blocks to fill the GPU even for a few units.
    const std::int64_t chunks = std::clamp<std::int64_t>((2048 + units - 1) / std::max<std::int64_t>(units, 1), 1,
                                                         std::max<std::int64_t>(p_.time * S, 1));
    std::vector<double> unit_max(static_cast<std::size_t>(units), 0.0);
    if (units > 0) {
      DeviceBuffer partials(checked_bytes(units * chunks, sizeof(ComputeT), "the tiles' max|F|"), "the tiles' max|F|");
      const kernels::TileMaxArgs<ComputeT> a{.F = residual(), .batch = p_.batch, .rows = p_.time * S, .channels = C,
                                             .tile = kFallbackTileChannels, .chunks = chunks,
                                             .out = partials.as<ComputeT>()};
      PARARNN_CUDA_CHECK(kernels::launch_tile_max_abs(a, current_stream()));
      std::vector<ComputeT> host(static_cast<std::size_t>(units * chunks));
      copy_to_host(host.data(), partials.get(), partials.bytes());
      for (std::int64_t u = 0; u < units; ++u)
        for (std::int64_t j = 0; j < chunks; ++j)
          unit_max[static_cast<std::size_t>(u)] =
              nan_max(unit_max[static_cast<std::size_t>(u)], static_cast<double>(host[static_cast<std::size_t>(u * chunks + j)]));
    }
    return replace_flagged_units<ComputeT>(
        unit_max, atol, n_, H_,
        [&](ComputeT* target) { run_sequential<CellMath, ComputeT>(p_, target); },
        [&](std::int64_t unit, const ComputeT* scratch) {
          const std::int64_t b = unit / tiles, c0 = (unit % tiles) * kFallbackTileChannels;
          const std::int64_t width = std::min(C, c0 + kFallbackTileChannels) - c0;
          const std::size_t pitch = static_cast<std::size_t>(C) * sizeof(ComputeT);
          PARARNN_CUDA_CHECK(cudaMemcpy2DAsync(H_ + b * row + c0, pitch, scratch + b * row + c0, pitch,
                                               static_cast<std::size_t>(width) * sizeof(ComputeT),
                                               static_cast<std::size_t>(p_.time * S), cudaMemcpyDeviceToDevice,
                                               current_stream()));
        });
  }

 private:
  std::size_t bytes() const { return static_cast<std::size_t>(n_) * sizeof(ComputeT); }
  // One fused step from `in` (null: the deferred App. A guess) into `next`: max|F| of `in` into
  // max_abs[0], with `want_result` also max|F| of the result but the chunk starts into
  // max_abs[1]; `skip`: the loop state's stop flag (nothing done once it is set).
  void launch_step(const ComputeT* in, ComputeT* next, bool want_result, double omega, const double* skip) {
    if (ws_.step_workspace.bytes() == 0)
      ws_.step_workspace = DeviceBuffer(kernels::newton_step_workspace_bytes<CellMath, ComputeT>(p_.batch, p_.time, p_.channels),
                                        "the fused Newton step workspace");
    const kernels::NewtonStepArgs<ComputeT> a{.wx = static_cast<const ComputeT*>(p_.wx),
                                              .recurrent = static_cast<const ComputeT*>(p_.recurrent),
                                              .h0 = PARARNN_FAULT_POINT("cuda_fused_step_ignores_h0")
                                                        ? nullptr
                                                        : static_cast<const ComputeT*>(p_.h0),
                                              .h0_row = p_.h0_row,
                                              .head = PARARNN_FAULT_POINT("cuda_scan_heads_dropped") ? nullptr : p_.head,
                                              .H_in = in,
                                              .H_out = next,
                                              .max_abs_residual = ws_.max_abs.as<ComputeT>(),
                                              .max_abs_result = want_result ? ws_.max_abs.as<ComputeT>() + 1 : nullptr,
                                              .from_guess = in == nullptr,
                                              .skip = skip,
                                              .batch = p_.batch,
                                              .time = p_.time,
                                              .channels = p_.channels,
                                              .omega = omega};
    PARARNN_CUDA_CHECK((kernels::launch_newton_step<CellMath, ComputeT>(
        a, ws_.step_workspace.get(), ws_.step_workspace.bytes(), current_stream())));
  }
  // The fused strategy's second iterate, allocated on first use.
  ComputeT* second_iterate() {
    if (ws_.iterate.bytes() == 0) ws_.iterate = DeviceBuffer(bytes(), "the second iterate H'");
    return ws_.iterate.as<ComputeT>();
  }
  // F's buffer, allocated on first use (the fused strategy needs it only to write out a
  // deferred guess, for sLSTM's Picard guess or for the fallback).
  ComputeT* residual() {
    if (ws_.residual.bytes() == 0) ws_.residual = DeviceBuffer(bytes(), "the residual F");
    return ws_.residual.as<ComputeT>();
  }
  double read_max_abs() {
    ComputeT max_abs = 0;
    copy_to_host(&max_abs, ws_.max_abs.get(), sizeof(ComputeT));
    return static_cast<double>(max_abs);
  }
  // The App. A guess into H_ when it was deferred and something other than a fused step needs
  // the iterate (the early stop at the guess, the final residual, the fallback).
  void materialize_guess() {
    if (!guess_pending_) return;
    guess_pending_ = false;
    zero_iterate();
    (void)residual_pass(false, false, true);
    iterate_from_residual();
  }
  // `skip`: NewtonStepArgs::skip's flag; `read`: max|F| read back (else left in max_abs[0]).
  double residual_pass(bool with_jacobian, bool reduce, bool write_residual, std::int64_t time_stride = 1,
                       const double* skip = nullptr, bool read = true) {
    materialize_guess();
    kernels::CellResidualArgs<ComputeT> a{
        .wx = static_cast<const ComputeT*>(p_.wx),
        .recurrent = static_cast<const ComputeT*>(p_.recurrent),
        .h0 = static_cast<const ComputeT*>(p_.h0),
        .h0_row = p_.h0_row,
        .head = p_.head,
        .H = H_,
        .residual = write_residual ? residual() : nullptr,
        .jac = with_jacobian ? ws_.jacobian.as<ComputeT>() : nullptr,
        .max_abs_residual = reduce ? ws_.max_abs.as<ComputeT>() : nullptr,
        .batch = p_.batch,
        .time = p_.time,
        .channels = p_.channels,
        .time_stride = time_stride,
        .skip = skip};
    PARARNN_CUDA_CHECK((kernels::launch_cell_residual<CellMath, ComputeT>(
        a, ws_.residual_workspace.get(), ws_.residual_workspace.bytes(), current_stream())));
    return reduce && read ? read_max_abs() : 0.0;
  }

  const DeviceProblem& p_;
  NewtonWorkspace& ws_;
  ComputeT* out_;                  // the caller's buffer
  ComputeT* H_;                    // the current iterate: out_, or the workspace's second iterate
  ComputeT* candidate_ = nullptr;  // fused: the iterate the last step computed
  bool guess_pending_ = false;     // fused: H_ is the App. A guess, not yet written
  std::int64_t expected_updates_ = 0, steps_ = 0;  // fused: the updates the driver expects, those committed
  std::optional<double> candidate_result_;          // the last step's max|F| of its result but the chunk starts
  bool result_known_ = false;                       // H_ is that result, unchanged since
  double result_partial_ = 0.0;
  std::int64_t n_;
};

}  // namespace

// Chains per SM from which the sequential kernel beats the fused Newton solve at equal tokens:
// the per-channel cell list's column (cells/cell_list.hpp, where the measurement is cited); a
// cell outside the list has no sequential kernel and never takes the rule.
std::int64_t sequential_min_chains(CellKind cell, int sm_count) {
  std::int64_t per_sm = 0;
  switch (cell) {
#define PARARNN_MIN_CHAINS_CASE(kind, Math, label, min_chains) \
  case CellKind::kind: per_sm = min_chains; break;
    PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_MIN_CHAINS_CASE)
#undef PARARNN_MIN_CHAINS_CASE
    default: return std::numeric_limits<std::int64_t>::max();  // not a per-channel cell
  }
  return per_sm * std::max(sm_count, 1);
}

bool sequential_is_faster(CellKind cell, std::int64_t batch, std::int64_t channels) {
  int device = 0, sm_count = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  PARARNN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return batch * channels >= sequential_min_chains(cell, sm_count);
}

NewtonWorkspace::NewtonWorkspace(CellKind cell, DType storage, std::int64_t batch,
                                 std::int64_t time, std::int64_t channels, NewtonStrategy strategy)
    : tiling{.algorithm = kernels::ScanAlgorithm::single_pass},
      fused(strategy == NewtonStrategy::fused_step || strategy == NewtonStrategy::automatic),
      sequential(strategy == NewtonStrategy::automatic && sequential_is_faster(cell, batch, channels)) {
  dispatch_cuda_cell(cell, [&]<class CellMath>() {
    dispatch_compute(compute_dtype(storage), [&]<class ComputeT>() {
      constexpr int S = CellMath::kSlots;
      const std::int64_t n = batch * time * S * channels;
      const std::size_t iterate_bytes = checked_bytes(n, sizeof(ComputeT), "H");
      // Fused: F on first use, H' and the step's workspace on the first step (a solve that the
      // auto rule makes sequential allocates neither).
      if (!fused) {
        residual = DeviceBuffer(iterate_bytes, "the residual F");
        jacobian = DeviceBuffer(checked_bytes(n * S, sizeof(ComputeT), "J"), "the Jacobian J");
        scan_workspace = DeviceBuffer(
            kernels::scan_affine_workspace_bytes<S, ComputeT>(batch, time, channels, tiling),
            "the scan workspace");
      }
      residual_workspace =
          DeviceBuffer(kernels::cell_residual_workspace_bytes<ComputeT>(), "the max|F| partials");
      max_abs = DeviceBuffer(2 * sizeof(ComputeT), "max|F| (and of a fused step's result)");
    });
  });
}

void newton_solve(const CellSpec& spec, DType storage, const DeviceProblem& problem,
                  const NewtonConfig& config, void* H, NewtonWorkspace& workspace,
                  NewtonStats& stats) {
  dispatch_cuda_cell(spec.kind, [&]<class CellMath>() {
    dispatch_compute(compute_dtype(storage), [&]<class ComputeT>() {
      CudaPerChannelFamily<CellMath, ComputeT> family(problem, workspace, static_cast<ComputeT*>(H));
      static_assert(NewtonFamily<decltype(family)> && FusedStepFamily<decltype(family)> &&
                    DeviceLoopFamily<decltype(family)>);
      solve_newton(family, spec, storage, config, problem.time, stats);
    });
  });
}

double trajectory_max_residual(CellKind cell, DType storage, const DeviceProblem& problem, const void* H,
                               NewtonWorkspace& workspace) {
  return dispatch_cuda_cell(cell, [&]<class CellMath>() {
    return dispatch_compute(compute_dtype(storage), [&]<class ComputeT>() {
      kernels::CellResidualArgs<ComputeT> a{.wx = static_cast<const ComputeT*>(problem.wx),
                                            .recurrent = static_cast<const ComputeT*>(problem.recurrent),
                                            .h0 = static_cast<const ComputeT*>(problem.h0),
                                            .h0_row = problem.h0_row,
                                            .head = problem.head,
                                            .H = static_cast<const ComputeT*>(H),
                                            .max_abs_residual = workspace.max_abs.as<ComputeT>(),
                                            .batch = problem.batch,
                                            .time = problem.time,
                                            .channels = problem.channels};
      PARARNN_CUDA_CHECK((kernels::launch_cell_residual<CellMath, ComputeT>(
          a, workspace.residual_workspace.get(), workspace.residual_workspace.bytes(), current_stream())));
      ComputeT max_abs = 0;
      copy_to_host(&max_abs, workspace.max_abs.get(), sizeof(ComputeT));
      return static_cast<double>(max_abs);
    });
  });
}

void sequential_solve(CellKind cell, DType output, const DeviceProblem& problem, void* H) {
  dispatch_cuda_cell(cell, [&]<class CellMath>() {
    auto run = [&]<class T>() { run_sequential<CellMath, T>(problem, static_cast<T*>(H)); };
    switch (output) {
      case DType::f64: return run.template operator()<double>();
      case DType::f32: return run.template operator()<float>();
      case DType::f16: return run.template operator()<__half>();
      case DType::bf16: return run.template operator()<__nv_bfloat16>();
      default: break;
    }
    throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(output));
  });
}

}  // namespace cuda

namespace {

// newton_apply / newton_apply_into: H returned as a new host tensor (out null) or stored into
// *out. The solve writes straight into `out` when it is a contiguous view of the compute type on
// the solve's device (f32 and f64 storage); otherwise into a buffer, stored into `out` after.
Tensor per_channel_apply(const Cell& cell, const TensorView& x, const TensorView* out, const NewtonConfig& config,
                         const ApplyOptions& options, Layout layout, NewtonStats& stats) {
  cuda::PerChannelSolve solve(cell, x, options, layout, out, "newton_apply on the CUDA backend", "out");
  const cuda::DeviceInputs& inputs = solve.inputs();
  const bool in_place =
      out && out->device() == Device::cuda && out->is_contiguous() && out->dtype() == inputs.compute();
  cuda::DeviceBuffer H;
  if (!in_place) H = cuda::DeviceBuffer(cuda::checked_bytes(solve.elements(), dtype_size(inputs.compute()), "H"), "H");
  void* target = in_place ? out->data() : H.get();
  cuda::newton_solve(cell.spec(), cell.dtype(), inputs.problem(), config, target, solve.workspace(), stats);
  if (out == nullptr)
    return cuda::download_trajectory(H, inputs.compute(), cell, cell.trajectory_shape(layout.batch, layout.time));
  cuda::store_into(target, inputs.compute(), *out, "out");
  return Tensor();
}

Tensor per_channel_sequential(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                             Layout layout) {
  cuda::require_available("sequential_apply on the CUDA backend");
  cuda::require_cuda_cell(cell.kind());
  cuda::SolveScope scope(x, options);
  const cuda::DeviceInputs inputs(cell, x, options, layout);
  const std::int64_t n = layout.batch * layout.time * cell.slots() * layout.d_h;
  cuda::DeviceBuffer H(cuda::checked_bytes(n, dtype_size(cell.dtype()), "H"), "H");
  cuda::sequential_solve(cell.kind(), cell.dtype(), inputs.problem(), H.get());
  return cuda::download_trajectory(H, cell.dtype(), cell,
                                   cell.trajectory_shape(layout.batch, layout.time));
}

// max_residual on the CUDA backend: H (host or device, any floating dtype) in the compute type on
// the solve's device, then the residual kernel's max|F| (NaN ranks above every number).
double per_channel_max_residual(const Cell& cell, const TensorView& x, const TensorView& H,
                                const ApplyOptions& options, Layout layout) {
  cuda::PerChannelSolve solve(cell, x, options, layout, nullptr, "max_residual on the CUDA backend", "H");
  const cuda::DeviceInputs& inputs = solve.inputs();
  cuda::DeviceBuffer holder;
  const void* H_device = cuda::on_device_as(H, inputs.compute(), holder, "H");
  return cuda::trajectory_max_residual(cell.kind(), cell.dtype(), inputs.problem(), H_device, solve.workspace());
}

// Cells with CUDA Newton kernels; the options the CUDA kernels implement.
void supports_per_channel_on_device(const Cell& cell, const NewtonConfig* config, const ApplyOptions&,
                                    const char* who) {
  cuda::require_cuda_cell(cell.kind());
  refuse_cpu_only_options(config, who);
}

}  // namespace

const FamilyBackend kCudaPerChannel{.name = "cuda per_channel",
                                    .serves = {Capability::newton, Capability::sequential, Capability::training,
                                               Capability::max_residual, Capability::fused_windows},
                                    .supports = supports_per_channel_on_device,
                                    .newton = per_channel_apply,
                                    .sequential = per_channel_sequential,
                                    .forward = cuda::per_channel_forward,
                                    .backward = cuda::per_channel_backward,
                                    .max_residual = per_channel_max_residual,
                                    .fused_windows = cuda::per_channel_fused_windows};

}  // namespace pararnn::detail

namespace pararnn {

bool cuda_reads_parameter_views(const Cell& cell) {
  if (!detail::cuda_backend_available(nullptr) || cell.spec().jacobian != JacobianClass::per_channel) return false;
  return dispatch_cell(cell.kind(), []<class CellMath>() { return kernels::kHasNewtonKernels<CellMath>; });
}

std::int64_t cuda_sequential_min_chains(const Cell& cell, int device) {
  using namespace detail::cuda;
  require_device_index(device, "cuda_sequential_min_chains");
  if (cell.spec().jacobian != JacobianClass::per_channel) return std::numeric_limits<std::int64_t>::max();
  int sm_count = 0;
  PARARNN_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return sequential_min_chains(cell.kind(), sm_count);
}

}  // namespace pararnn
