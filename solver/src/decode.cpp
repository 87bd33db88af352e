// decode_step and its argument checks (decode.hpp). On the host a decode step is the
// same-dtype sequential loop over T = 1 with h0 = state, so it is the sequential step by
// construction for every cell; device views go through a CudaDecoder.
#include "pararnn/solver/decode.hpp"

#include <fmt/format.h>

#include <cstring>

#include "backends.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {
namespace {

std::string device_name(const TensorView& v) {
  return v.device() == Device::cpu ? "cpu" : fmt::format("cuda:{}", v.device_id());
}

// Whether `v` is (rows, n) or (rows, 1, n); rows < 0 takes any leading size.
bool is_rows_of(const TensorView& v, std::int64_t rows, std::int64_t n) {
  return (v.dim() == 2 || (v.dim() == 3 && v.size(1) == 1)) && (rows < 0 || v.size(0) == rows) &&
         v.size(v.dim() - 1) == n;
}

// x as a (B, 1, d_in) view (x is (B, d_in) or (B, 1, d_in)).
TensorView with_one_step(const TensorView& x) {
  if (x.dim() == 3) return x;
  return TensorView(x.data(), x.dtype(), {x.size(0), 1, x.size(1)},
                    {x.strides()[0], x.strides()[0], x.strides()[1]}, x.device(), x.device_id());
}

// state and out: the rules every decode form shares. Returns the batch size.
std::int64_t check_decode_carry(const Cell& cell, const TensorView& state, const TensorView& out) {
  // (B, *state_shape), or (B, 1, d_h) for one-slot cells.
  const Shape carry = cell.state_shape();
  Shape wanted = {state.dim() > 0 ? state.size(0) : 0};
  wanted.insert(wanted.end(), carry.begin(), carry.end());
  const bool one_slot_3d = cell.slots() == 1 && carry.size() == 1 && state.dim() == 3 &&
                           state.size(1) == 1 && state.size(2) == cell.d_h();
  if (state.dim() == 0 || (state.shape() != wanted && !one_slot_3d))
    throw ContractViolation("state", "must be (B, " + shape_string(carry).substr(1),
                            shape_string(state.shape()));
  for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"state", &state}, {"out", &out}})
    if (view->dtype() != cell.dtype())
      throw ContractViolation(name, fmt::format("must have the cell's dtype {}", dtype_name(cell.dtype())),
                              dtype_name(view->dtype()));
  if (out.shape() != state.shape())
    throw ContractViolation("out", "must have state's shape " + shape_string(state.shape()),
                            shape_string(out.shape()));
  if (!out.is_contiguous())
    throw ContractViolation("out", "must be contiguous", shape_string(out.shape()));
  if (out.device() != state.device() || out.device_id() != state.device_id())
    throw ContractViolation("out", "must be on state's device " + device_name(state), device_name(out));
  // The GPU step reads a row's carry in one thread per channel but its inputs from several blocks.
  if (spans_overlap(out, state) && out.data() != state.data())
    throw ContractViolation("out", "must be state itself (in place) or share no memory with it",
                            "a view overlapping state at another address");
  return state.size(0);
}

}  // namespace

std::int64_t check_decode_arguments(const Cell& cell, const TensorView& state, const TensorView& x,
                                    const TensorView& out) {
  const std::int64_t B = check_decode_carry(cell, state, out);
  if (!is_rows_of(x, B, cell.d_in()))
    throw ContractViolation("x", fmt::format("must be ({0}, {1}) or ({0}, 1, {1}) (B, d_in)", B, cell.d_in()),
                            shape_string(x.shape()));
  if (x.dtype() != cell.dtype())
    throw ContractViolation("x", fmt::format("must have the cell's dtype {}", dtype_name(cell.dtype())),
                            dtype_name(x.dtype()));
  if (x.device() != state.device() || x.device_id() != state.device_id())
    throw ContractViolation("x", "must be on state's device " + device_name(state), device_name(x));
  if (spans_overlap(out, x)) throw ContractViolation("out", "must share no memory with x", "overlapping views");
  return B;
}

std::int64_t check_decode_gates_arguments(const Cell& cell, const TensorView& state, const TensorView& gates,
                                          const TensorView& out) {
  const std::int64_t B = check_decode_carry(cell, state, out), width = cell.spec().gates * cell.d_h();
  if (!is_rows_of(gates, B, width))
    throw ContractViolation("gates", fmt::format("must be ({0}, {1}) or ({0}, 1, {1}) (B, gates·d_h)", B, width),
                            shape_string(gates.shape()));
  const DType compute = detail::compute_dtype(cell.dtype());
  if (gates.dtype() != compute)
    throw ContractViolation("gates", fmt::format("must have the cell's compute dtype {}", dtype_name(compute)),
                            dtype_name(gates.dtype()));
  if (gates.device() != state.device() || gates.device_id() != state.device_id())
    throw ContractViolation("gates", "must be on state's device " + device_name(state), device_name(gates));
  if (spans_overlap(out, gates)) throw ContractViolation("out", "must share no memory with gates", "overlapping views");
  return B;
}

void decode_step(const Cell& cell, const TensorView& state, const TensorView& x, const TensorView& out) {
  const std::int64_t batch = check_decode_arguments(cell, state, x, out);
  if (state.device() == Device::cuda) {
    for (const auto& [name, view] : {std::pair<const char*, const TensorView*>{"state", &state}, {"x", &x}})
      if (!view->is_contiguous())
        throw ContractViolation(name, "must be contiguous for a device decode_step", shape_string(view->shape()));
    const CudaDecoder decoder(cell, batch, state.device_id());
    decoder.step(state, x, out);
    decoder.synchronize();
    return;
  }
  if (batch == 0) return;
  const Tensor next = sequential_apply(cell, with_one_step(x), ScanBackend::cpu, {.h0 = state});
  std::memcpy(out.data(), next.data(), next.nbytes());  // (B, 1, [S,] d_h): out's elements in order
}

Tensor decode_gates(const Cell& cell, const TensorView& x) {
  if (cell.spec().jacobian != JacobianClass::per_channel)
    throw UnsupportedPath(fmt::format("decode_gates: cell '{}' (mix '{}') has no per-channel Jacobian; its gates are "
                                      "not per-channel columns (CudaDecoder refuses it too)",
                                      cell.name(), cell.spec().mix));
  const std::int64_t B = x.dim() > 0 ? x.size(0) : 0, D = cell.d_h(), d_in = cell.d_in();
  if (!is_rows_of(x, -1, d_in))
    throw ContractViolation("x", fmt::format("must be (B, {0}) or (B, 1, {0}) (B, d_in)", d_in), shape_string(x.shape()));
  if (x.dtype() != cell.dtype())
    throw ContractViolation("x", fmt::format("must have the cell's dtype {}", dtype_name(cell.dtype())),
                            dtype_name(x.dtype()));
  if (x.device() != Device::cpu) throw ContractViolation("x", "must be a host tensor", device_name(x));
  const std::int64_t width = cell.spec().gates * D;
  const std::vector<double> xv = Tensor::copy_of(x).to_f64_vector();
  std::vector<double> gates(static_cast<std::size_t>(B * width), 0.0);
  for (const AffineBlock& block : cell.spec().affine) {
    const std::vector<double> w = cell.parameter(std::string(block.weight)).to_f64_vector();
    const std::vector<double> bias = cell.parameter(std::string(block.bias)).to_f64_vector();
    const std::int64_t first = block.first_gate * D, outputs = cell.affine_rows(block);
    const std::int64_t inputs = cell.affine_inputs(block);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t o = 0; o < outputs; ++o) {
        double sum = bias[static_cast<std::size_t>(o)];
        for (std::int64_t k = 0; k < inputs; ++k)
          sum += w[static_cast<std::size_t>(o * inputs + k)] * xv[static_cast<std::size_t>(b * d_in + k)];
        gates[static_cast<std::size_t>(b * width + first + o)] = sum;
      }
  }
  if (const int g = cell.spec().dt_gate; g >= 0)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < D; ++c)
        gates[static_cast<std::size_t>(b * width + g * D + c)] = xv[static_cast<std::size_t>(b * d_in + d_in - 1)];
  return Tensor::from_values(detail::compute_dtype(cell.dtype()), {B, width}, gates);
}

Tensor decode_step(const Cell& cell, const TensorView& state, const TensorView& x) {
  if (state.device() != Device::cpu)
    throw ContractViolation("state", "must be a host tensor for the returning form; pass `out` for "
                                     "device tensors", device_name(state));
  Tensor out(cell.dtype(), state.shape());
  decode_step(cell, state, x, out.view());
  return out;
}

}  // namespace pararnn
