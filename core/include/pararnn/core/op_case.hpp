// Op cases (issue 56): a case for a linear-recurrence op of another library
// (flash-linear-attention's GLA, simple GLA, DeltaNet, gated DeltaNet, DPLR / RWKV-7), carrying
// the op's own inputs under the library's argument names instead of a state_dict, and metadata
// naming the op, its variant and its arguments (docs/ops/README.md is the reference of each op).
//
// Guarantees: `op_case_from_file` accepts a file only when every tensor the op needs is present
// with the op's shape ([B, T, H, K] for q, k and the per-key gates; [B, T, H, V] for v; [B, T, H]
// for per-head scalars; [N, H, K, V] for initial_state, N = B or the packed sequence count), one
// floating dtype for all of them (the case's storage dtype), cu_seqlens by CONTRACT §6 (then
// B = 1), a finite positive scale, cotangents "grad.<output>" only of an output the case asks for
// and of its shape, and no other tensor the op does not read; anything else raises
// ContractViolation naming the argument, the rule and the value. Nothing is guessed: an op name
// that is not in `op_names()` is refused. Example:
//   OpCase c = read_op_case("gla.safetensors");   // metadata op=gla, tensors q, k, v, g
//   // c.batch, c.time, c.heads, c.k_dim, c.v_dim, c.scale (K^-0.5 unless metadata "scale")
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

// The op families. Each reads q-like inputs [B, T, H, K], v [B, T, H, V], per-head scalars
// [B, T, H], and writes o [B, T, H, V] and final_state [N, H, K, V] (fla's layout, K rows).
// mamba-ssm's selective scan (Mamba) and SSD (Mamba-2) have their own layouts (docs/ops/README.md):
// selective_scan u, delta, z [B, D, L], A [D, N], B and C [B, G, N, L] (or [B, N, L]), D and
// delta_bias [D], out [B, D, L], last_state [B, D, N]; ssd x, z [B, L, H, P], dt [B, L, H],
// A, dt_bias [H], D [H], B and C [B, L, G, N], initial_states and final_states [N, H, P, N_state].
enum class OpKind { gla, simple_gla, delta_rule, gated_delta_rule, dplr_delta_rule, rwkv7, selective_scan, ssd };

// How one input tensor of an op is shaped (B batch, T time, H heads, K key dim, V value dim;
// for selective_scan H is the channel count D, K the state size N, V = 1, G the groups of B and
// C; for ssd H the heads, K the state size N, V the head dim P).
enum class OpInputShape {
  key,               // [B, T, H, K]
  value,             // [B, T, H, V]
  head_scalar,       // [B, T, H]
  channel_time,      // [B, H, T]      (selective_scan u, delta, z)
  channel_state,     // [H, K]         (selective_scan A)
  per_head,          // [H]            (selective_scan D, delta_bias; ssd A, D, dt_bias)
  group_state_time,  // [B, G, K, T]   (selective_scan B, C; [B, K, T] is G = 1)
  time_group_state,  // [B, T, G, K]   (ssd B, C)
};

struct OpInputSpec {
  std::string_view name;  // the library's argument name
  OpInputShape shape;
  bool optional = false;   // may be absent (mamba's D, z, delta_bias / dt_bias)
  bool parameter = false;  // a weight the library keeps in f32: the case's dtype, f32 or f64
};

struct OpSpec {
  OpKind kind;
  std::string_view name;          // metadata "op"
  std::string_view library;       // "fla"
  std::vector<OpInputSpec> inputs;  // required, in the library's argument order
  bool takes_l2norm = false;      // use_qk_l2norm_in_kernel is an argument of the op
  bool unit_default_scale = false;  // scale None means 1 (fla's chunk_rwkv7), not K^-0.5
  std::string_view out_name = "o", state_name = "final_state", initial_name = "initial_state";
  bool takes_cu_seqlens = true;
};

const std::vector<OpSpec>& op_specs();
std::vector<std::string> op_names();
const OpSpec& op_spec(std::string_view name);  // ContractViolation naming "op" if unknown

struct OpCase {
  OpKind kind = OpKind::gla;
  std::string op;                               // metadata "op"
  std::map<std::string, std::string> metadata;  // every entry, "op" included
  std::map<std::string, Tensor> inputs;         // required inputs under their names
  std::optional<Tensor> initial_state;          // [N, H, K, V]
  std::optional<Tensor> cu_seqlens;             // (S + 1), int32/int64
  // Cotangents of the loss the gradients are of, under output names ("o", "final_state"; mamba
  // "out", "last_state" / "final_states"), from tensors "grad.<output>" of the file (as a cell
  // case carries "grad.H"), each of the output's shape and a floating dtype. Empty: the default
  // loss (op_default_loss_outputs); any given: L = Σ cotangent ⊙ output over those given only.
  std::map<std::string, Tensor> cotangents;
  std::int64_t batch = 0, time = 0, heads = 0, k_dim = 0, v_dim = 0;
  std::int64_t groups = 1;     // mamba: the groups of B and C (H % groups == 0)
  bool softplus = false;       // mamba: delta_softplus / dt_softplus
  double scale = 0.0;          // metadata "scale", default K^-0.5 (fla's default; RWKV-7: 1)
  bool qk_l2norm = false;      // metadata "use_qk_l2norm_in_kernel"
  bool output_final_state = true;
  std::string variant;         // metadata "variant": "chunk" or "fused_recurrent" (the adapter's mode)

  DType dtype() const;                           // of the first required input
  const Tensor& input(std::string_view name) const;
  // The independent sequences: (b, t_begin, t_end) for each batch row, or each packed segment.
  struct Sequence {
    std::int64_t b = 0, t_begin = 0, t_end = 0;
  };
  std::vector<Sequence> sequences() const;
  std::int64_t sequence_count() const;  // N: B, or the number of packed segments
  // Output shapes: o [B, T, H, V]; final_state [N, H, K, V] (selective_scan: out [B, D, L],
  // last_state [B, D, N]; ssd: out [B, L, H, P], final_states [N, H, P, N_state]).
  Shape o_shape() const;
  Shape final_state_shape() const;
};

// True when the file's metadata names an op ("op"): the command-line tool routes such a file to
// the op path, and a file with both "op" and "cell" is refused by op_case_from_file.
bool is_op_file(const SafetensorsFile& file);
OpCase op_case_from_file(const SafetensorsFile& file, const std::filesystem::path& path);
OpCase read_op_case(const std::filesystem::path& path);
void write_op_case(const std::filesystem::path& path, const OpCase& problem);

// A generated op case (make-case --op, the nightly's op rows), drawn like the libraries' own
// tests from SplitMix64(seed): q, k, v ~ N(0, 1); the delta rules' q and k l2-normalised (their
// recurrence is stable for β‖k‖² <= 2) unless use_qk_l2norm_in_kernel asks the op to do it;
// k times key_scale afterwards (large keys: a hard case); β = sigmoid(N(0, 1)); log gates
// g = logsigmoid(N(0, 1)) for decay "normal", logsigmoid(N(0, 1) + 8) (decays 0.9995..0.99999,
// near 1: states sum ~1/(1 − decay) terms) for "hard", 0 for "none"; DPLR / RWKV-7: a = −κ̂,
// b = κ̂ ⊙ sigmoid(N(0, 1)) with κ̂ = k/‖k‖ (the RWKV-7 form, |eigenvalues| <= 1); initial_state
// N(0, h0_std²) when h0_std is set; cu_seqlens (B must be 1). Values are rounded once to dtype.
struct OpGenerateOptions {
  std::string op = "gla";
  std::string variant;  // empty: the op's native mode (chunk; selective_scan fused_recurrent)
  DType dtype = DType::f32;
  std::int64_t batch = 1, time = 64, heads = 2, k_dim = 16, v_dim = 16;
  std::uint64_t seed = 1;
  std::string decay = "normal";  // normal | hard | none
  double key_scale = 1.0;
  std::optional<double> h0_std;
  std::optional<double> scale;   // metadata "scale"; default None (K^-0.5)
  bool qk_l2norm = false;
  std::vector<std::int64_t> cu_seqlens;  // empty: not packed
};
OpCase generate_op_case(const OpGenerateOptions& options);

// The outputs an answer to an op case must hold: the output ("o"; mamba "out"), and the state
// ("final_state"; selective_scan "last_state", ssd "final_states") when the case asks for it.
std::vector<std::string> op_output_names(const OpCase& problem);

// The inputs an answer may carry gradients of ("grad.<name>"), in the op's argument order: every
// floating input the case has (mamba's optional D, z and dt bias when present), then the initial
// state when the case has one. cu_seqlens is not differentiable.
std::vector<std::string> op_gradient_inputs(const OpCase& problem);

// The outputs the default loss sums (L = Σ of each, when the case carries no "grad.*"): what the
// adapters differentiate. fla: o and final_state (when output_final_state); mamba: out only
// (selective_scan_fn does not differentiate its last state; mamba.py sums out for both ops).
std::vector<std::string> op_default_loss_outputs(const OpCase& problem);

}  // namespace pararnn
