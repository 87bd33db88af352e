// The oracle: a sequential unroll of a Case in higher precision than any solver, written from the
// cell equations in matrix form, independently of the production cells (it never includes
// cells/). Jacobians come from automatic differentiation (Eigen AutoDiffScalar over the oracle
// scalar), never from hand-derived formulas.
//
// Guarantees (docs/numerics-contract.md): parameters and x are read in the case's storage dtype
// and lifted exactly; the working type has at least twice the significand bits of the solver's
// compute type: double for f32/f16/bf16 cases, float128 for f64 cases. Every result is certified
// by a second unroll in a >= 113-bit type (float128 for double; cpp_bin_float_50 for float128)
// on every chain of small cases and on a seeded sample of chains of large ones (a positive
// budget below one chain's cost still certifies one seeded shortest chain, or one channel of it
// for diagonal cells; a budget of 0 certifies nothing, which the contract's certification rule
// refuses); the largest difference is `self_check_delta`. Example:
//   OracleResult r = oracle_sequential(read_case("case.safetensors"));
//   // r.H: f64 (B, T, d_h), (B, T, slots, d_h), or (B, T, n_heads, d, d) for rwkv7
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "pararnn/core/case_file.hpp"

namespace pararnn::reference {

struct OracleOptions {
  bool certify = true;
  // Chain-steps the certifying unroll may spend in total; a case at most this size is certified
  // on every chain. oracle_gradients certifies within certify_budget / kGradientCertifyStepCost
  // chain-steps of its certifying BPTT (see there), so a budget sized for the unroll stays
  // affordable for the gradients.
  std::int64_t certify_budget = 4'000'000;
  std::uint64_t seed = 0;  // picks the sampled chains
  // Cancellation: oracle_sequential calls it every 1024 steps of each chain its unroll and its
  // certification run, on the OpenMP threads (so it must be thread-safe); an exception it throws
  // abandons the oracle and propagates out (a caller's time budget). Empty: never called.
  std::function<void()> poll;
};

struct OracleResult {
  Tensor H;  // f64, the solver's trajectory layout
  std::string type;              // "double" or "float128"
  int digits = 0;                // significand bits of `type`
  std::string certifier_type;    // "float128" or "cpp_bin_float_50"
  int certifier_digits = 0;
  double self_check_delta = 0.0;  // max |primary - certifier| over the certified chains
  bool certified_all_chains = false;
  std::vector<std::string> certified_chains;  // e.g. "b=3" or "b=3,channel=17"
  std::int64_t certified_chain_steps = 0;
  bool finite = true;  // false if any element of H is NaN or infinite
};

OracleResult oracle_sequential(const Case& problem, const OracleOptions& options = {});

// One step of the cell at batch row b, time t (x_t and that row's parameters), from the given
// previous state (flattened in the state layout: slot-major, slots*d_h values), in the primary
// working type, with the Jacobian d h_new / d h_prev by automatic differentiation, row-major
// [out][in] over the flattened state.
struct OracleStep {
  std::vector<double> h_new;
  std::vector<double> jacobian;
};
OracleStep oracle_step_with_jacobian(const Case& problem, std::int64_t b, std::int64_t t,
                                     std::span<const double> h_prev);

// The oracle's BPTT: gradients of L = Σ grad_H ⊙ H (grad_H = the case's "grad.H", or ones) through
// the sequential unroll in the primary working type, derivatives by automatic differentiation
// (never the production VJPs). Keys: "x", "h0" (when the case has h0), and every parameter under
// its state_dict name; all f64 tensors of the input's shape ("h0" in the shape h0 was given in;
// sLSTM's "R" (4, d_h); CfC's "W_b.weight" and "W_b.bias" too, and x's last channel, Δt, gets
// dL/dΔt where raw Δt >= 1e-4 and zero where the floor clamps it).
// The clamp is differentiated as the Python library's mask: zero gradient where |raw| > cap.
// grad_H must have the trajectory's shape ((B, T, 1, d_h) is accepted for one-slot cells) and a
// floating dtype (lifted exactly). Memory: the gate-input cotangents of every step (gates·d_h·B·T
// values of the working type) and, per thread, one chain's states and W·x + b. Example:
//   OracleGradients g = oracle_gradients(read_case("case.safetensors"));
//   // g.tensors.at("x"): f64 (B, T, d_in); g.tensors.at("a_z"): f64 (d_h)
// Certification reruns the BPTT of every chain (small cases) or of a seeded sample of chains or
// (chain, channel) pairs in the certifier type and compares, for each: the gate-input cotangent
// d(W·x_t + b) of every step, the cotangent of the initial state (∇h0), the chain's contribution
// to every recurrent gradient and, for whole chains, the chain's rows of ∇x (oracle_gradients.cpp
// says why W_x's gradients need nothing more). With a positive budget too small for even one
// (chain, channel) pair, one seeded pair of a shortest chain is certified anyway.
struct OracleGradients {
  std::map<std::string, Tensor> tensors;
  std::string type;
  int digits = 0;
  std::string certifier_type;
  int certifier_digits = 0;
  double self_check_delta = 0.0;  // max |primary - certifier| over the certified values
  bool certified_all_chains = false;
  std::vector<std::string> certified_chains;  // e.g. "b=3" or "b=3,channel=17"
  std::int64_t certified_chain_steps = 0;     // of the certifying BPTT, before the step cost
  bool finite = true;  // false if any gradient element is NaN or infinite
};
// What one chain-step of the certifying BPTT counts against OracleOptions::certify_budget. Such a
// step costs 2 to 6 chain-steps of the certifying unroll (by cell and type: a forward pass, then
// the AD pass carrying N + 1 values per scalar); 32 gives the gradients' certification about an
// eighth of the unroll's time for the same budget. Measured on 2 cores: the f32 case B=2,
// T=4096, d_h=64, d_in=16 at the budget 4'000'000 certifies 122'880 chain-steps (30 channel
// chains) in 0.8 to 1.5 s after a 0.1 s double BPTT; an f64 case B=2, T=256, d_h=16 at 100'000
// certifies 3'072 chain-steps of cpp_bin_float_50 in 0.1 s.
inline constexpr std::int64_t kGradientCertifyStepCost = 32;
OracleGradients oracle_gradients(const Case& problem, const OracleOptions& options = {});

// Number of state slots and the hidden size the oracle reads from the case (for tests).
struct OracleStateShape {
  std::int64_t slots = 1;
  std::int64_t d_h = 0;
};
OracleStateShape oracle_state_shape(const Case& problem);

}  // namespace pararnn::reference
