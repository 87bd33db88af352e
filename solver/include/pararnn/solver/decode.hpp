// Decode (inference, T = 1): one step of the recurrence for a batch of carries,
// out[b] = f(state[b], x[b]) — exactly the step `sequential_apply` takes at a sequence start
// whose h0 is state[b] (spec §6). Carries: (B, d_h) for one-slot cells, (B, slots, d_h)
// otherwise (LSTM [c, h], sLSTM [c, n, m, h]); x: (B, d_in) or (B, 1, d_in); the storage dtype
// of the cell throughout, arithmetic in f32 (f64 for f64), the App. C.1 clamp applied.
//
// Guarantees: every argument is checked before any work (ContractViolation naming it, the rule
// and the value); `out` has state's shape, dtype and device, is contiguous, and is either
// `state` itself (in place) or shares no memory with state, x (or gates). Host tensors run on the CPU for every cell; device tensors run on the GPU
// for the per-channel cells (the dense-Jacobian cells are refused there with UnsupportedPath).
// `CudaDecoder` is the CUDA-graph-safe form: everything it needs (the transposed input weights,
// the biases, the clamped recurrent values) is uploaded once at construction, and `step` queues
// one kernel on the caller's stream — W_x x + b and the cell step together (kernels/decode.hpp),
// no allocation, no synchronisation — so it can be captured and replayed; its sums have a fixed
// order, so a replay equals the direct step bit for bit. Example:
//   CudaDecoder decoder(cell, /*batch=*/8);
//   decoder.step(state_view, x_view, state_view, stream);   // device views, in place
//   Tensor next = decode_step(cell, host_state, host_x);     // host tensors
#pragma once

#include <cstdint>
#include <memory>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

// Writes one step into `out` (host or device views; see above).
void decode_step(const Cell& cell, const TensorView& state, const TensorView& x, const TensorView& out);

// Host tensors: returns the next carry (contiguous, state's shape and dtype).
[[nodiscard]] Tensor decode_step(const Cell& cell, const TensorView& state, const TensorView& x);

class CudaDecoder {
 public:
  // Uploads the cell for `batch` carries on CUDA device `device`. Throws UnsupportedPath without
  // a usable GPU or for a cell without CUDA decode (the dense-Jacobian cells).
  CudaDecoder(const Cell& cell, std::int64_t batch, int device = 0);
  ~CudaDecoder();
  CudaDecoder(CudaDecoder&&) noexcept;
  CudaDecoder& operator=(CudaDecoder&&) noexcept;

  // One step on `stream` (a cudaStream_t; null: the legacy default stream). state, x and out are
  // contiguous device views on the decoder's device, shapes as above for its batch.
  void step(const TensorView& state, const TensorView& x, const TensorView& out,
            void* stream = nullptr) const;
  // The same step from precomputed gate pre-activations instead of x (one kernel, no sum):
  // gates is (B, G·d_h) or (B, 1, G·d_h), G = cell().spec().gates, in the cell's compute dtype
  // (f64 for f64, else f32), laid out as the solver's W_x x: gates[b][g·d_h + c] = (W_x x + b) of
  // gate g at channel c; CfC's Δt gate column holds Δt itself, floored at 1e-4 as the x form
  // does. Contiguous, on the decoder's device, sharing no memory with out.
  void step_gates(const TensorView& state, const TensorView& gates, const TensorView& out,
                  void* stream = nullptr) const;
  // Waits for the decoder's device.
  void synchronize() const;

  const Cell& cell() const;
  std::int64_t batch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The gate pre-activations of host x (B, d_in) or (B, 1, d_in) as CudaDecoder::step_gates takes
// them: (B, G·d_h) in the cell's compute dtype, each affine block's W x + b summed in f64 at its
// gate columns and rounded once, CfC's Δt column x's last column (step_gates floors it).
// Throws ContractViolation ("x") for another shape, dtype or a device tensor, UnsupportedPath
// for a cell without a per-channel Jacobian (its gates are not per-channel columns;
// CudaDecoder refuses it too).
[[nodiscard]] Tensor decode_gates(const Cell& cell, const TensorView& x);

// Checks decode_step's arguments for `cell` (shapes, dtypes, devices, contiguity of out; out is
// state itself or shares no memory with it, and shares none with x); throws ContractViolation
// naming the argument. Returns the batch size.
std::int64_t check_decode_arguments(const Cell& cell, const TensorView& state, const TensorView& x,
                                    const TensorView& out);
// The same checks with CudaDecoder::step_gates's gates in x's place (shape (B, G·d_h) or
// (B, 1, G·d_h), the compute dtype, state's device, no memory shared with out).
std::int64_t check_decode_gates_arguments(const Cell& cell, const TensorView& state, const TensorView& gates,
                                          const TensorView& out);

}  // namespace pararnn
