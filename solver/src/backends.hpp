// Internal to the solver: the input checks and residual gate shared by every backend, and the
// FamilyBackend rows, one per (cell family, backend). The public functions (api.cpp) validate,
// resolve the row, check its refusals, call it and run the residual gate.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pararnn/solver/iterate_growth.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::detail {

// The arithmetic dtype of a storage dtype (core/dtype.hpp's ComputeOf at run time): f64 for f64,
// f32 for f32, f16 and bf16.
constexpr DType compute_dtype(DType storage) { return storage == DType::f64 ? DType::f64 : DType::f32; }

struct Layout {
  std::int64_t batch = 0, time = 0, d_h = 0, d_in = 0;
  std::vector<std::uint8_t> heads;           // [T]: 1 at t = 0 and at segment starts
  std::vector<std::int64_t> state_index;     // [T]: h0 row used at a head (-1: zeros / row b)
  bool packed = false;
};

Layout check_inputs(const Cell& cell, const TensorView& x, const ApplyOptions& options,
                    const char* who, Device required = Device::cpu);
// ApplyOptions::parameters' rules (solver.hpp), before any work: `reads_views` false (a row other
// than the CUDA per-channel family's) and a view given: UnsupportedPath naming `row`; a view that
// names no parameter of the cell, or has another shape, another dtype than the cell's, strides or
// a host address: ContractViolation naming "parameters['name']". (The device index is the
// solve's: cuda::parameter_view checks it where the solve's device is current.)
void check_parameter_views(const Cell& cell, const ApplyOptions& options, bool reads_views, const char* row,
                           const char* who);
// The value of parameter `name` a solve reads: the caller's view (ApplyOptions::parameters) when
// it names one, else the Cell's own tensor.
TensorView parameter_of(const Cell& cell, const ApplyOptions& options, const std::string& name);
// The residual gate (CONTRACT §3). When it fires, the message also names the first non-finite
// value of the inputs (x, h0, a parameter) when there is one, so a NaN input is not reported as
// a bare "diverged: nan".
void residual_gate(const Cell& cell, const NewtonConfig& config, const NewtonStats& stats,
                   const TensorView& x, const ApplyOptions& options);
// The rules of a cotangent (newton_backward's grad_H, a rank's grad_H_chunk), named
// `argument`: the trajectory's shape, floating, finite.
void check_cotangent(const TensorView& grad_H, const Shape& trajectory, const char* argument);
// " The input is not finite: x holds nan at index (0, 3, 2)." or "" (host tensors only).
std::string non_finite_input_note(const Cell& cell, const TensorView& x, const ApplyOptions& options);

// The training outputs every per-channel backend writes the same way (common.cpp): a gradient
// tensor from double sums, rounded once to the cell's compute dtype and then to its storage
// dtype; the recurrent tensors' gradients from per-(entry, channel) sums [R][d_h] (Σ over batch
// rows already taken), zero where |raw| > max_recurrent_norm (the clamp mask).
Tensor gradient_tensor(const Cell& cell, const Shape& shape, std::span<const double> values);
std::map<std::string, Tensor> recurrent_gradients(const Cell& cell, std::span<const double> sums);
// The same with the clamp mask taken from `raw` (name -> the recurrent tensor's values the solve
// read, host tensors: ApplyOptions::parameters' downloaded) where it holds the name.
std::map<std::string, Tensor> recurrent_gradients(const Cell& cell, std::span<const double> sums,
                                                  const std::map<std::string, Tensor>& raw);

// What a FamilyBackend row serves: each capability is one entry point of the row (training: its
// forward and backward). A row declares its capabilities (`serves`) and fills exactly those slots;
// it carries no slot for what it does not serve.
enum class Capability : unsigned {
  newton = 1u << 0,         // the Newton solve (newton_apply; the exact scan for the linear family)
  sequential = 1u << 1,     // the step-by-step loop in the storage dtype (sequential_apply)
  training = 1u << 2,       // newton_forward and newton_backward
  max_residual = 1u << 3,   // max|F(H)| of a given trajectory (the CPU rows, the CUDA per-channel row)
  fused_windows = 1u << 4,  // every window of window_len steps in one launch (the CUDA per-channel row)
  iterate_growth = 1u << 5, // the growth pass along a given trajectory (the CPU per-channel row)
  seq_parallel = 1u << 6,   // the sequence-parallel solve and training over ranks (the CPU per-channel row)
};
const char* capability_name(Capability capability);

// A set of capabilities, written as a list: {Capability::newton, Capability::sequential}.
struct Capabilities {
  unsigned bits = 0;
  constexpr Capabilities() = default;  // nothing
  constexpr Capabilities(std::initializer_list<Capability> list) {
    for (Capability c : list) bits |= static_cast<unsigned>(c);
  }
  constexpr bool has(Capability c) const { return (bits & static_cast<unsigned>(c)) != 0; }
};

// One implementation of a cell family on a backend: its refusals and its entry points. Each
// backend's files define their rows (kCpu* in cpu/, kCuda* in cuda/); family_backend (registry.cpp)
// is the one place that routes a solve to them, and a build without CUDA has no CUDA rows. The
// Newton algorithm itself is newton/driver.hpp, run by the rows.
//
// A call reaches an entry point only through `require` (or, for an optional one, `serves`): a call
// a row cannot serve is refused by that one rule, with one message naming the call, the row (its
// backend and family) and the capability. family_backend refuses a row whose declared
// capabilities and filled slots differ (an internal Error, at its first routing).
struct FamilyBackend {
  const char* name;  // "cuda dense": its backend and family, for messages
  Capabilities serves;
  // Throws UnsupportedPath or ContractViolation, naming the argument, the rule and the value, where
  // this implementation cannot run the cell with these options (and this configuration; null: the
  // inputs alone, as validate_apply_inputs and sequential_apply check them). Null: refuses nothing.
  void (*supports)(const Cell&, const NewtonConfig* config, const ApplyOptions&, const char* who) = nullptr;
  // newton: the Newton solve (the exact scan for the linear family). With `out` (newton_apply_into:
  // checked by the caller for shape, dtype and aliasing) H is written into it, on the host or on
  // the solve's device, and the tensor returned is empty.
  Tensor (*newton)(const Cell&, const TensorView& x, const TensorView* out, const NewtonConfig&,
                   const ApplyOptions&, Layout, NewtonStats&) = nullptr;
  // sequential: the step-by-step loop in the storage dtype (sequential_apply).
  Tensor (*sequential)(const Cell&, const TensorView& x, const ApplyOptions&, Layout) = nullptr;
  // training: H written into *H_out when given (forward.H then undefined), ∇x into *grad_x when
  // given (the gradients' x then undefined).
  NewtonForward (*forward)(const Cell&, const TensorView& x, const TensorView* H_out, const NewtonConfig&,
                           const ApplyOptions&, Layout) = nullptr;
  NewtonGradients (*backward)(const Cell&, const TensorView& x, const NewtonForward&, const TensorView& grad_H,
                              const TensorView* grad_x, const NewtonConfig&, const ApplyOptions&, Layout) = nullptr;
  // max_residual: max|F(H)| of a given trajectory, on the row's backend (H may be on the host or
  // the device for a CUDA row; on the host for a CPU row).
  double (*max_residual)(const Cell&, const TensorView& x, const TensorView& H, const ApplyOptions&,
                         Layout) = nullptr;
  // fused_windows, optional (the caller runs the window loop where the row does not serve it):
  // every window of window_len steps solved in one launch. nullopt, `stats` untouched, where it
  // does not apply or where the window loop would have stopped early in some window; the caller
  // then runs the window loop. With `out`, as newton's.
  std::optional<Tensor> (*fused_windows)(const Cell&, const TensorView& x, const NewtonConfig&,
                                         const ApplyOptions&, Layout, const TensorView* out, NewtonStats&) = nullptr;

  // iterate_growth (iterate_growth.hpp): the growth pass along H (host tensors, checked by the caller
  // for shape, dtype and device) with `window`.
  IterateGrowth (*iterate_growth)(const Cell&, const TensorView& x, const TensorView& H, const ApplyOptions&,
                                  std::int64_t window, Layout) = nullptr;
  // seq_parallel (seq_parallel.hpp): the entry points of the split over ranks, opaque here
  // (seq_parallel.cpp defines them and their collective checks).
  const struct SeqParallelRow* seq_parallel = nullptr;

  // The one rule of a call the row cannot serve: UnsupportedPath "`who`: the <name> row (backend
  // and family) does not serve <capability> (it serves: ...)". Returns where it serves it.
  void require(Capability capability, const char* who) const;
};

extern const FamilyBackend kCpuPerChannel, kCpuDense, kCpuExactLinear, kCpuMatrixState;
// The CPU per-channel row's growth pass (iterate_growth.cpp) and sequence-parallel entry points
// (seq_parallel.cpp).
IterateGrowth cpu_iterate_growth(const Cell& cell, const TensorView& x, const TensorView& H,
                                 const ApplyOptions& options, std::int64_t window, Layout layout);
extern const SeqParallelRow kCpuSeqParallel;
#ifdef PARARNN_SOLVER_CUDA
extern const FamilyBackend kCudaPerChannel, kCudaDense, kCudaExactLinear, kCudaMatrixState;
// A host tensor written into a device view of the same shape and dtype (any strides), on that
// view's device: one upload and one strided store (cuda/runtime.cpp) on `stream` (the caller's
// ApplyOptions::cuda_stream; unset: the per-thread default stream). Returns when done.
void cuda_write_view(const TensorView& out, const Tensor& value, const char* argument,
                     std::optional<void*> stream = std::nullopt);
// The device a CUDA solve of x runs on (x's, else h0's, else the current one; cuda/runtime.cpp).
int cuda_solve_device(const TensorView& x, const ApplyOptions& options);
#endif

enum class Backend { cpu, cuda };
// The row of (family, backend); UnsupportedPath naming both where this build has none.
const FamilyBackend& family_backend(JacobianClass family, Backend backend);

// A solve resolved once: the backend, the row that runs it and x's layout.
struct Plan {
  Backend backend;
  const FamilyBackend& row;
  Layout layout;
};
// The one set of rules every entry point applies before any work (api.cpp), in this order: the
// configuration's (validate, no windows with packing; `config` null: the inputs alone), the
// backend's resolution (auto = cuda for device tensors and cpu for host tensors, eager = cpu, an
// explicit backend that cannot run raises UnsupportedPath), the row of (the cell's family, that
// backend) and its refusals, the parameter views, x's layout. The public solves, max_residual,
// iterate_growth and the sequence-parallel entry points all plan through it; each then calls
// `row.require` for the capability it needs.
Plan plan_solve(const Cell& cell, const TensorView& x, const NewtonConfig* config, ScanBackend requested,
                const ApplyOptions& options, const char* who);

// Whether the CUDA backend can run here (built, and a device present), with the reason when not.
bool cuda_backend_available(std::string* why_not = nullptr);
// `value` returned where `out` is null; else written into *out (on the host, or on its device:
// one upload and one strided store on `stream`, the caller's ApplyOptions::cuda_stream) and an
// empty tensor returned. `argument` names out in errors.
Tensor deliver(Tensor value, const TensorView* out, const char* argument,
               std::optional<void*> stream = std::nullopt);

// The refusals more than one row shares (common.cpp): the options only the CPU rows implement
// (coords=log, newton_backtrack); ParaRWKV7's and ParaM2RNN's input rules (no packing, no
// windows; M2RNN: no Picard warm start).
void refuse_cpu_only_options(const NewtonConfig* config, const char* who);
void check_exact_linear_inputs(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                               const char* who);
void check_matrix_state_inputs(const Cell& cell, const NewtonConfig* config, const ApplyOptions& options,
                               const char* who);

// The CUDA rows' limits, which their supports() enforce: dense chains of N <= 32 (the dense residual
// and sequential kernels), RWKV-7 heads of d <= 64 (the dense scan and the step loop), M2RNN states
// whose walk, W and two K x V states in the compute type, fits one block's shared memory.
inline constexpr std::int64_t kCudaDenseMaxChainWidth = 32;
inline constexpr std::int64_t kCudaRwkv7MaxHeadDim = 64;
inline constexpr std::size_t kCudaM2rnnSharedBytes = 200 * 1024;
inline std::size_t cuda_m2rnn_shared_bytes(const Cell& cell) {
  const std::size_t k = static_cast<std::size_t>(cell.k_dim()), v = static_cast<std::size_t>(cell.v_dim());
  return (2 * k * v + v * v) * (cell.dtype() == DType::f64 ? 8 : 4);
}

}  // namespace pararnn::detail
