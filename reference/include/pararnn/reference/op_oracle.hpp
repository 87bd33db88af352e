// The oracle of op cases (issue 56): the linear matrix-state recurrences of flash-linear-attention
// (GLA, simple GLA, DeltaNet, gated DeltaNet, DPLR / RWKV-7) and mamba-ssm (selective scan, SSD),
// unrolled sequentially in higher precision than the op, from the papers' and the libraries'
// equations (docs/ops/README.md), never from a library's kernels or from cells/.
//
// Every op is one member of the generalized delta rule, per (sequence, head), with the state S
// K x V (fla's layout, rows = key index):
//   S_t = diag(d_t) S_{t-1} + b_t (a_tᵀ S_{t-1}) + k_t v̄_tᵀ,     o_t = S_tᵀ (scale · q_t)
// (the transpose of S_t = S_{t-1}(D_t + a_t b_tᵀ) + v_t k_tᵀ), where the op decides d, a, b, v̄:
//   gla              d = exp(g_t) (per key),  no a b,          v̄ = v
//   simple_gla       d = exp(g_t) (per head), no a b,          v̄ = v
//   delta_rule       d = 1,        a = k, b = −β k,            v̄ = β v
//   gated_delta_rule d = exp(g_t), a = k, b = −β exp(g_t) k,   v̄ = β v
//   dplr_delta_rule  d = exp(gk),  a = a, b = b,               v̄ = v
//   rwkv7            d = exp(w),   a = a, b = b, q = r,        v̄ = v
//   selective_scan   d = exp(Δ A[ch]) (per state), k = B_t, q = C_t, v̄ = Δ u (V = 1), scale 1
//   ssd              d = exp(Δ A[h]) (per head),   k = B_t, q = C_t, v̄ = Δ x (V = P), scale 1
// (mamba: Δ = softplus(raw + bias) with the softplus flag; o ← (o + D·input) · silu(z)).
// (use_qk_l2norm_in_kernel: q and k are first divided by sqrt(Σ x² + 1e-6)). The state starts at
// initial_state[n] (zeros without one) at every sequence start (batch row, or packed segment),
// and the final state of each sequence is returned.
//
// Guarantees: inputs are read in the case's storage dtype and lifted exactly; the working type
// is double for f32/f16/bf16 cases and float128 for f64 cases, certified by a rerun of chains
// ((sequence, head) pairs) in float128 / cpp_bin_float_50: every chain when the case is within
// the budget, else a seeded sample, and at least a seeded prefix of one chain (named "n=0,h=1,
// t<4096"); `self_check_delta` is the largest difference over the certified values. Example:
//   const OpCase c = read_op_case("gla.safetensors");
//   const OpOracleResult r = oracle_op(c);
//   // r.outputs.at("o"): f64 [B, T, H, V]; r.outputs.at("final_state"): f64 [N, H, K, V]
//   // (mamba: "out" and "last_state" / "final_states" in the library's layouts, op_case.hpp)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pararnn/core/op_case.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {

struct OpOracleResult {
  std::map<std::string, Tensor> outputs;  // op_output_names (both always), f64
  std::string type;
  int digits = 0;
  std::string certifier_type;
  int certifier_digits = 0;
  double self_check_delta = 0.0;
  bool certified_all_chains = false;
  std::vector<std::string> certified_chains;
  std::int64_t certified_chain_steps = 0;
  bool finite = true;  // false if any output element is NaN or infinite
};

// What one chain-step of an op counts against OracleOptions::certify_budget: the state has K·V
// entries where a cell's chain-step has d_h, so a step counts K·V / 64 (at least 1).
std::int64_t op_step_cost(const OpCase& problem);

OpOracleResult oracle_op(const OpCase& problem, const OracleOptions& options = {});

// The same-dtype floor (CONTRACT §2 for ops): the same sequential loop with the inputs in the
// case's storage dtype, the state and arithmetic in the compute type (f32 for f32/f16/bf16, f64
// for f64) and each output rounded once to the storage dtype: what fla's own naive references
// compute (inputs .float(), outputs .to(dtype)), and what any implementation in that dtype pays.
// Outputs in the case's dtype, under the oracle's names. Also the reference adapter's answer
// (`pararnn solve` of an op case).
std::map<std::string, Tensor> op_sequential_in_dtype(const OpCase& problem);

// The oracle's gradients of L = Σ cotangent ⊙ output (the case's "grad.<output>" cotangents, or
// the default loss, op_default_loss_outputs: fla Σ o + Σ final_state, mamba Σ out) with respect
// to every input of op_gradient_inputs, by an explicit adjoint loop through the sequential
// recurrence (oracle_op_gradients.cpp: the step's reverse from docs/ops/README.md's equations,
// with the l2norm, softplus, silu(z) and D skip, per packed segment and from initial states), in
// the forward's working types, certified by the mechanism of the cell gradients: chains rerun in
// the certifier type within certify_budget / kGradientCertifyStepCost chain-steps (each counting
// op_step_cost), compared value by value; when no whole chain fits, the last steps of one
// seeded chain from the primary's state (named "b=0,h=1,t>=L-m"). Budget 0: nothing certified.
// Example:
//   const OpOracleGradients g = oracle_op_gradients(read_op_case("gla.safetensors"));
//   // g.tensors.at("q"): f64 [B, T, H, K]; g.tensors.at("initial_state") when the case has one
struct OpOracleGradients {
  std::map<std::string, Tensor> tensors;  // input name -> f64 gradient of the input's shape
  std::string type;
  int digits = 0;
  std::string certifier_type;
  int certifier_digits = 0;
  double self_check_delta = 0.0;  // max |primary - certifier| over the certified values
  bool certified_all_chains = false;
  std::vector<std::string> certified_chains;
  std::int64_t certified_chain_steps = 0;
  bool finite = true;  // false if any gradient element is NaN or infinite
};
OpOracleGradients oracle_op_gradients(const OpCase& problem, const OracleOptions& options = {});

// The same-dtype floor of the gradients: the same reverse loop with the inputs in the storage
// dtype and the arithmetic in f32 (f64 for f64 cases), each gradient rounded once to its input's
// dtype (the sums over chains of mamba's weights and grouped B, C in double before that rounding).
// Keys as oracle_op_gradients'. Also `pararnn solve --grad` of an op case.
std::map<std::string, Tensor> op_gradients_in_dtype(const OpCase& problem);

}  // namespace pararnn::reference
