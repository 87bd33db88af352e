// The campaign's plan: a pure function of the options (make_plan). It resolves the variants,
// dtypes, backends, T ladder, classes and seeds of docs/reports.md's plan table, lists what it
// leaves out (`skipped`, with the reason) and every task to run (TaskSpec: plain data, no
// closures), in the planned order that report.json keeps. Nothing here runs a solver, touches
// the file system or reads a clock; bad options are refused (ContractViolation naming the flag,
// the rule and the value) before any work.
// Example:
//   const CampaignPlan p = make_plan({.quick = true}, /*host_cpus=*/2);
//   // p.tasks[0].label == "gru.f32.T64.init.s1"
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/nightly/campaign.hpp"

namespace pararnn::nightly {

// One cell variant of the campaign: a cell, its mix and constructor arguments, and the recurrent
// std of its hard class (|J| near 1, unclamped), chosen per parameter shape: 0.7 for the
// per-channel recurrent vectors (CONTRACT §4's hard weights); 0.7/sqrt(width) per entry of the
// dense head and R matrices, whose spectral radius is then about 0.7; 0.1 per entry of M2RNN's
// W = I + N(0, σ²) (0.5 is chaotic: docs/choices.md). Hopfield and RWKV-7 have no recurrent
// parameter, so no hard class.
struct Variant {
  std::string name;
  std::string cell;
  std::string mix = "diag";
  std::string gate_mix = "input";
  std::optional<std::int64_t> n_heads, k_dim, v_dim;
  std::optional<std::int64_t> d_h;   // a fixed width (sLSTM dense: at most 8); else the plan's
  std::optional<double> hard_std;
  bool kstar = true;                 // measure_kstar can build it (it has no gate_mix)
  // Why the saturating class does not apply, if it does not.
  std::string no_saturating = {};
  // The GPU plan's ladder stops at this T for the variant (an explicit --T runs every length),
  // with the measured reason recorded under `skipped`.
  std::optional<std::int64_t> gpu_plan_max_t = {};
  std::string gpu_plan_max_t_reason = {};
};

const std::vector<Variant>& all_variants();
const CellSpec& spec_of(const Variant& v);

// The conditioning classes (docs/reports.md): library init; hard (unclamped, |J| near 1);
// saturating (inputs x 6: gates at 0 or 1); h0 (a random initial state); packed (cu_seqlens).
const std::vector<std::string>& campaign_classes();

struct Plan {
  bool quick = false;
  bool external = false;              // rows solved by an external command (docs/external-solvers.md)
  std::vector<const Variant*> variants;
  std::vector<DType> dtypes;
  std::vector<std::string> backends;  // those that run
  std::vector<std::int64_t> times;
  std::vector<std::string> classes;
  std::int64_t seeds = 1;
  std::int64_t batch = 2, d_in = 8, d_h = 16;
  std::int64_t certify_budget = 0;
  std::int64_t gradient_max_t = 0;     // gradients judged on rows with T <= this
  // ... and f64 rows of a cell with a non-diagonal Jacobian only to this T: their certification
  // (one whole chain's BPTT in cpp_bin_float_50, the least it can certify) costs ~100 s at
  // T = 1024 (Hopfield, d_h 16) against ~6 s at T = 64.
  std::int64_t gradient_max_t_f64_dense = 64;
  // ... and beyond this T, gradients of a non-diagonal cell only on class init, seed 1 (GPU
  // plan): their oracle gradients certify every chain's BPTT in the certifier type (float128),
  // ~35 s a row at T = 1024 on one core here, ~60 s on the H200's; the plan held 60 such rows.
  std::int64_t gradient_dense_sampled_above_t = std::numeric_limits<std::int64_t>::max();
  // Rows at T >= this run seed 1 only (GPU plan): an oracle at T = 131072 is 8-25 s on one core.
  std::int64_t one_seed_from_t = std::numeric_limits<std::int64_t>::max();
  // The plan's own ladder (not --T): a variant's gpu_plan_max_t applies.
  bool gpu_ladder = false;
  std::int64_t kstar_max_t = 0;        // K* measured at T <= this
  std::int64_t kstar_k_limit = 12;
  // Rows of class init time newton_apply again this many times (newton_ms_repeats): the noise
  // band of `report diff` is measured from them.
  std::int64_t timing_repeats = 3;
  // ... when the judged solve took at most this: a slower solve (the CPU at T = 131072, ~3 s a
  // solve, a third of its row's time) is timed once per seed, its group's spread from the seeds.
  double timing_repeat_max_ms = 1000.0;
  std::vector<std::string> gradient_classes = {"init", "h0"};
  std::vector<std::string> kstar_classes = {"init", "hard"};
  std::vector<std::string> gpu_cpu_classes = {"init", "hard"};
  // The cpu backend's rows (and its equivalences, gpu_vs_cpu included) stop at this T; beyond,
  // only the cuda backend runs. With a GPU: 16384. Measured on one core here at T = 131072 (f32,
  // class init): a CPU solve of sLSTM takes 34 s (head mix 77 s, its strided twin 150 s), 701 s
  // for one row and one strided equivalence of every variant; the GPU plan holds 24 such sets.
  std::int64_t cpu_max_t = std::numeric_limits<std::int64_t>::max();
  // (class, T) pairs a quick run leaves out, to stay within 60 s.
  std::function<bool(const std::string&, std::int64_t, DType)> class_at_t = [](const std::string&, std::int64_t,
                                                                                   DType) { return true; };

  // The lengths a variant runs.
  bool variant_runs_t(const Variant& v, std::int64_t time) const {
    return !(gpu_ladder && v.gpu_plan_max_t && time > *v.gpu_plan_max_t);
  }
  std::int64_t seeds_at(std::int64_t time) const { return time >= one_seed_from_t ? 1 : seeds; }
  // The backends that run the rows of T.
  std::vector<std::string> backends_at(std::int64_t time) const;
  // f64 cases are certified in cpp_bin_float_50 (5-20 k chain-steps/s): a tenth of the budget.
  std::int64_t certify_budget_for(DType dtype) const {
    return dtype == DType::f64 ? std::max<std::int64_t>(1, certify_budget / 10) : certify_budget;
  }
};

// Whether `cls` applies to `v`; else `why` says why not.
bool class_applies(const Variant& v, const std::string& cls, std::string* why);

// Whether the rows of (variant, dtype, T, class, seed) judge gradients (also their recompute ≡ stored).
bool judges_gradients(const Plan& plan, const Variant& v, DType dtype, std::int64_t time, const std::string& cls,
                      std::int64_t seed_index);

// One case of the plan: (variant, dtype, T, class, seed), and the seed its weights and x are
// drawn from.
struct CaseKey {
  const Variant* variant = nullptr;
  DType dtype = DType::f32;
  std::int64_t time = 0;
  std::string cls;
  std::int64_t seed_index = 1;
  std::uint64_t case_seed = 0;
};

// "variant.dtype.T<T>.class.s<seed>"
std::string case_id(const CaseKey& k);

enum class TaskKind { rows, packed_vs_per_sequence, strided_vs_contiguous, recompute_vs_stored, gpu_vs_cpu, kstar };

// One task of the plan, as data: the case (rows, equivalences; for K*: variant, dtype, class),
// the backend of a per-backend equivalence, the ladder of a K* measurement.
struct TaskSpec {
  TaskKind kind = TaskKind::rows;
  std::string label;  // the task's id (progress, slowest_tasks)
  std::string group;  // the variant: the run order interleaves variants (run_order())
  double cost = 1.0;  // a relative work estimate (task_cost): a variant's costly tasks start first
  CaseKey key;
  std::string backend;                   // packed, strided, recompute: the backend compared on
  std::vector<std::int64_t> kstar_times;  // K*: the lengths measured
};

struct CampaignPlan {
  Plan plan;
  std::int64_t jobs = 1;
  int threads_per_job = 1;
  nlohmann::ordered_json skipped = nlohmann::ordered_json::array();  // what the plan leaves out
  std::vector<TaskSpec> tasks;                                       // in the planned order
  std::vector<std::uint64_t> seed_list;                              // 1..seeds (the context block)
};

// The plan of `options` on a host of `host_cpus` CPUs (the default of --jobs).
CampaignPlan make_plan(const CampaignOptions& options, std::int64_t host_cpus);

// The external solver as the report names it: name, version, command, version command, timeout.
nlohmann::ordered_json solver_json(const ExternalSolver& solver);

// The plan's part of report.json (`plan`).
nlohmann::ordered_json plan_json(const CampaignOptions& options, const CampaignPlan& p);

}  // namespace pararnn::nightly
