// The per-channel family's solve on the device, internal to the solver: its problem (the inputs
// in the compute type), its workspace and strategy (host-driven or fused steps, the auto rule's
// sequential solve), the Newton solve and the sequential kernel's solve (per_channel.cpp).
//
// Guarantees: `newton_solve` is the CPU backend's algorithm step for step (newton/driver.hpp over
// the CUDA per-channel family: App. A guess, K from resolve_schedule, the adaptive loop with
// residual_atol, k_max and one more update, the same NewtonStats) with the residual, the scan and
// H += ωδ on the device; in an adaptive solve that does not converge by k_max the CPU's
// fallback units (64-channel tiles of a batch row) still above residual_atol are replaced by the
// sequential kernel's solution, with the CPU's `newton_residual_high` warning; an adaptive solve
// past the auto rule's threshold (`sequential_min_chains`) is the sequential kernel's solution.
// Every strategy repeats bit for bit. Example: runtime.hpp's.
#pragma once

#include <cstdint>

#include "cuda/runtime.hpp"
#include "pararnn/kernels/scan.hpp"

namespace pararnn::detail::cuda {

// Inputs of one solve on the device, in the compute type; layouts of kernels/sequential.hpp.
struct DeviceProblem {
  const void* wx = nullptr;               // [b][t][g·D + c], W_x x + b
  const void* recurrent = nullptr;        // [k][c], clamped
  const void* h0 = nullptr;               // [row][s][c]; null: zeros
  const std::int64_t* h0_row = nullptr;   // [t], packed input only
  const std::uint8_t* head = nullptr;     // [t], packed input only (null: the only head is t = 0)
  std::int64_t batch = 0, time = 0, channels = 0;
};

// Scratch of the Newton loop for one shape: F, J, the scan's and the reduction's workspaces.
// Every strategy repeats bit for bit (the single-pass scan's look-back has a fixed association,
// kernels/src/scan.cuh), so training's recompute re-solves exactly the forward's H* on any of them.
//
// The strategy of the per-channel solve (newton/driver.hpp runs each): `host_driven`, one
// residual kernel, one scan and one axpy per iteration (F and J through memory); `fused_step`,
// one fused kernel per iteration (kernels/newton_step.hpp: F, J in registers, the single-pass
// scan, H' = H + ωδ into a second iterate buffer). `automatic` is fused_step; and for an adaptive
// solve (max_iters unset, NewtonConfig::allow_sequential) it is the sequential kernel in the
// compute type where `sequential_is_faster` says so (the auto rule, docs/cuda.md).
enum class NewtonStrategy { automatic, host_driven, fused_step };

// The auto rule (measured on the H200, bench/targets_bench.cpp "P6"): at equal tokens the
// sequential kernel's time grows with T (one step's latency per step, every chain in flight at
// once) and a Newton solve's with the token-channels (its passes over memory), so their ratio
// depends on the number of chains B·d alone; the sequential kernel is the faster from
// `sequential_min_chains(cell, sm_count)` chains on. sLSTM's Newton starts with P + 1 sequential
// passes (its Picard guess), so its threshold is the lowest.
std::int64_t sequential_min_chains(CellKind cell, int sm_count);
bool sequential_is_faster(CellKind cell, std::int64_t batch, std::int64_t channels);

class NewtonWorkspace {
 public:
  NewtonWorkspace(CellKind cell, DType storage, std::int64_t batch, std::int64_t time,
                  std::int64_t channels, NewtonStrategy strategy = NewtonStrategy::automatic);
  DeviceBuffer residual, jacobian, scan_workspace, residual_workspace, max_abs;
  // fused_step: the second iterate and the kernel's workspace, allocated on the first fused step.
  DeviceBuffer iterate, step_workspace;
  kernels::ScanTiling tiling;
  bool fused = false;
  bool sequential = false;  // automatic and sequential_is_faster: adaptive solves run sequentially
};

// The Newton solve; `H` (device, compute type, [b][t][s][c]) receives H*.
void newton_solve(const CellSpec& spec, DType storage, const DeviceProblem& problem,
                  const NewtonConfig& config, void* H, NewtonWorkspace& workspace,
                  NewtonStats& stats);

// max|F(H)| of a trajectory `H` (device, compute type, [b][t][s][c]): the residual kernel's
// reduction, NaN ranking above every number; one scalar read back.
double trajectory_max_residual(CellKind cell, DType storage, const DeviceProblem& problem, const void* H,
                               NewtonWorkspace& workspace);

// The sequential kernel, the state rounded to `output` every step; `H` is in that dtype (the
// storage dtype, or the compute dtype for the Newton fallback).
void sequential_solve(CellKind cell, DType output, const DeviceProblem& problem, void* H);

}  // namespace pararnn::detail::cuda
