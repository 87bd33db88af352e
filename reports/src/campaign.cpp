// run_campaign: the plan (variants x dtypes x backends x T x classes x seeds) becomes a list of
// tasks (agreement rows, equivalences, K* measurements), taken in the interleaved order by
// --jobs workers under the time budget; report.json is assembled from their outputs in that
// order (whatever the number of workers) and written once.
#include "pararnn/core/random.hpp"
#include "pararnn/reports/campaign.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <atomic>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <omp.h>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/kstar.hpp"
#include "pararnn/contracts/oracle_memo.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/reports/error_profile.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"
#include "process.hpp"

namespace pararnn::reports {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

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

// Why the GPU plan stops ParaSLSTM's dense-Jacobian mixes at T = 1024 (measured on the H200,
// 2026-12-02, `pararnn solve --backend cuda`, B 2, d_h 16 / 8, f32).
constexpr const char* kSlstmDenseLongT =
    "Newton does not reach residual_atol within k_max at T >= 16384 (f32), and the sLSTM Picard adapt "
    "ladder and the sequential fallback follow: one cuda solve takes 3.5 s (head) / 1.7 s (dense) at "
    "T = 16384 and 56 s / 54 s at T = 131072 on the H200 (one cpu solve of the head mix 77 s at T = 131072 "
    "on one core); the GPU plan cannot hold their long rows in its 10 minutes (--T runs them)";

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> v = {
      {.name = "gru", .cell = "gru", .hard_std = 0.7},
      {.name = "gru-head", .cell = "gru", .mix = "head", .n_heads = 2, .hard_std = 0.7 / std::sqrt(8.0)},
      {.name = "lstm", .cell = "lstm", .hard_std = 0.7},
      {.name = "nlru", .cell = "nlru", .hard_std = 0.7},
      {.name = "slstm", .cell = "slstm", .hard_std = 0.7},
      {.name = "slstm-head", .cell = "slstm", .mix = "head", .n_heads = 2, .hard_std = 0.7 / std::sqrt(8.0),
       .gpu_plan_max_t = 1024, .gpu_plan_max_t_reason = kSlstmDenseLongT},
      {.name = "slstm-dense", .cell = "slstm", .mix = "dense", .d_h = 8, .hard_std = 0.7 / std::sqrt(8.0),
       .gpu_plan_max_t = 1024, .gpu_plan_max_t_reason = kSlstmDenseLongT},
      {.name = "cfc", .cell = "cfc", .hard_std = 0.7},
      {.name = "cfc-diag-h", .cell = "cfc", .gate_mix = "diag_h", .hard_std = 0.7, .kstar = false},
      {.name = "titans", .cell = "titans", .hard_std = 0.7,
       .no_saturating = "ParaTitans' memory is not squashed: inputs x 6 make it grow without bound (|H| ~ 1e30 at "
                        "T = 64), beyond what any dtype can be judged on"},
      {.name = "hopfield", .cell = "hopfield", .mix = "dense"},
      {.name = "m2rnn", .cell = "m2rnn", .mix = "matrix", .k_dim = 4, .v_dim = 4, .hard_std = 0.1},
      {.name = "rwkv7", .cell = "rwkv7", .mix = "rwkv7", .n_heads = 2},
  };
  return v;
}

const CellSpec& spec_of(const Variant& v) { return cell_spec(v.cell, v.mix, "cell", v.gate_mix); }

// The conditioning classes (docs/reports.md): library init; hard (unclamped, |J| near 1);
// saturating (inputs x 6: gates at 0 or 1); h0 (a random initial state); packed (cu_seqlens).
const std::vector<std::string> kClasses = {"init", "hard", "saturating", "h0", "packed"};
constexpr double kSaturatingInputScale = 6.0;
constexpr double kInitialStateStd = 0.5;

struct Plan {
  bool quick = false;
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
  // The lengths a variant runs.
  bool variant_runs_t(const Variant& v, std::int64_t time) const {
    return !(gpu_ladder && v.gpu_plan_max_t && time > *v.gpu_plan_max_t);
  }
  std::int64_t seeds_at(std::int64_t time) const { return time >= one_seed_from_t ? 1 : seeds; }
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
  // The backends that run the rows of T.
  std::vector<std::string> backends_at(std::int64_t time) const {
    std::vector<std::string> out;
    for (const std::string& b : backends)
      if (b != "cpu" || time <= cpu_max_t) out.push_back(b);
    return out;
  }
  // (class, T) pairs a quick run leaves out, to stay within 60 s.
  std::function<bool(const std::string&, std::int64_t, DType)> class_at_t = [](const std::string&, std::int64_t,
                                                                                   DType) { return true; };
  // f64 cases are certified in cpp_bin_float_50 (5-20 k chain-steps/s): a tenth of the budget.
  std::int64_t certify_budget_for(DType dtype) const {
    return dtype == DType::f64 ? std::max<std::int64_t>(1, certify_budget / 10) : certify_budget;
  }
};

bool class_applies(const Variant& v, const std::string& cls, std::string* why) {
  const CellSpec& spec = spec_of(v);
  if (cls == "hard" && !v.hard_std) {
    *why = fmt::format("{} has no recurrent parameter to make hard", spec.python_class);
    return false;
  }
  if (cls == "saturating" && !v.no_saturating.empty()) {
    *why = v.no_saturating;
    return false;
  }
  if (cls == "packed" && (spec.kind == CellKind::m2rnn || spec.kind == CellKind::rwkv7)) {
    *why = fmt::format("{} refuses packing (CONTRACT §6)", spec.python_class);
    return false;
  }
  return true;
}

struct CaseKey {
  const Variant* variant = nullptr;
  DType dtype = DType::f32;
  std::int64_t time = 0;
  std::string cls;
  std::int64_t seed_index = 1;
  std::uint64_t case_seed = 0;
};

std::string case_id(const CaseKey& k) {
  return fmt::format("{}.{}.T{}.{}.s{}", k.variant->name, dtype_name(k.dtype), k.time, k.cls, k.seed_index);
}

struct BuiltCase {
  Cell cell;
  Tensor x;
  std::optional<Tensor> h0, cu_seqlens;
  Case problem() const {
    Case c = cell.make_case(x, h0);
    c.cu_seqlens = cu_seqlens;
    return c;
  }
  ApplyOptions apply() const {
    ApplyOptions a;
    if (h0) a.h0 = h0->view();
    if (cu_seqlens) a.cu_seqlens = cu_seqlens->view();
    return a;
  }
};

BuiltCase build_case(const Plan& plan, const CaseKey& k) {
  const Variant& v = *k.variant;
  const CellSpec& spec = spec_of(v);
  const bool hard = k.cls == "hard";
  CellOptions o{.cell = v.cell,
                .mix = v.mix,
                .d_in = plan.d_in,
                .d_h = spec.kind == CellKind::m2rnn ? 0 : v.d_h.value_or(plan.d_h),
                .n_heads = v.n_heads,
                .max_recurrent_norm = hard ? std::nullopt : spec.default_cap,
                .weight_std = hard ? v.hard_std : std::nullopt,
                .gate_mix = v.gate_mix,
                .k_dim = v.k_dim,
                .v_dim = v.v_dim};
  BuiltCase b{Cell::initialise(o, k.dtype, k.case_seed), Tensor(), std::nullopt, std::nullopt};
  const std::int64_t batch = k.cls == "packed" ? 1 : plan.batch;
  b.x = generated_case_input(k.dtype, batch, k.time, plan.d_in, k.case_seed);
  if (k.cls == "saturating") {
    Tensor flat = b.x.reshaped({b.x.numel()});
    for (std::int64_t i = 0; i < flat.numel(); ++i) flat.store({i}, kSaturatingInputScale * flat.load({i}));
  }
  if (k.cls == "h0") {  // as make-case --h0-std draws it (sLSTM's normalizer n0 >= 0)
    SplitMix64 rng(k.case_seed ^ 0x5bd1e995ULL);
    Shape shape = {batch};
    for (std::int64_t e : b.cell.state_shape()) shape.push_back(e);
    Tensor h(k.dtype, shape);
    Tensor flat = h.reshaped({h.numel()});
    for (std::int64_t i = 0; i < flat.numel(); ++i) flat.store({i}, rng.normal(0.0, kInitialStateStd));
    if (b.cell.name() == "slstm")
      for (std::int64_t r = 0; r < batch; ++r)
        for (std::int64_t c = 0; c < b.cell.d_h(); ++c) h.store({r, 1, c}, std::abs(h.load({r, 1, c})));
    b.h0 = h;
  }
  if (k.cls == "packed") {  // three segments of unequal length (one when T < 4)
    std::vector<std::int64_t> bounds = {0};
    if (k.time >= 4) bounds.insert(bounds.end(), {k.time / 4, (3 * k.time) / 5});
    bounds.push_back(k.time);
    Tensor c(DType::i64, {static_cast<std::int64_t>(bounds.size())});
    for (std::size_t i = 0; i < bounds.size(); ++i) c.store({static_cast<std::int64_t>(i)}, static_cast<double>(bounds[i]));
    b.cu_seqlens = c;
  }
  return b;
}

NewtonConfig config_for(const std::string& backend, std::optional<std::int64_t> max_iters = std::nullopt) {
  NewtonConfig config;
  config.scan_backend = parse_scan_backend(backend);
  config.max_iters = max_iters;
  return config;
}

// Whether the solver has gradients for this cell on this backend: a one-step probe, so that the
// reason recorded is the solver's own (UnsupportedPath), never a list kept here.
std::optional<std::string> gradient_unsupported(const Variant& v, DType dtype, const std::string& backend,
                                                const Plan& plan) {
  static std::mutex mutex;  // the tasks run on --jobs workers; a probe runs once per key
  static std::map<std::string, std::optional<std::string>> cache;
  const std::lock_guard lock(mutex);
  const std::string key = fmt::format("{}/{}/{}", v.name, dtype_name(dtype), backend);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const CaseKey k{.variant = &v, .dtype = dtype, .time = 2, .cls = "init", .case_seed = 7};
  const BuiltCase b = build_case(plan, k);
  std::optional<std::string> why;
  try {
    const NewtonConfig config = config_for(backend);
    const NewtonForward forward = newton_forward(b.cell, b.x, config);
    Tensor g(dtype, forward.H.shape());
    (void)newton_backward(b.cell, b.x, forward, g, config);
  } catch (const UnsupportedPath& e) {
    why = e.what();
  }
  cache[key] = why;
  return why;
}


// What one task adds to the report; the report concatenates them in the planned task order, so
// report.json does not depend on which worker ran what (--jobs).
struct TaskOutput {
  Json rows = Json::array(), equivalences = Json::array(), kstar_rows = Json::array(), skipped = Json::array();
  std::vector<std::filesystem::path> case_files;  // written under the staging folder (removed if the task is cut)
};

struct Task {
  std::string label;
  std::function<void(TaskOutput&)> run;
  std::string group;  // the variant: the run order interleaves variants (interleaved())
  double cost = 1.0;  // a relative work estimate (task_cost): a variant's costly tasks start first
};

// A relative work estimate, for the run order only (never in the report): the oracle dominates,
// and its cost grows with T, with f64 (a float128 primary, a cpp_bin_float_50 certifier), with a
// dense Jacobian (d_h times the per-channel work per step) and most with gradients of a dense
// cell (measured on 2 cores: a Hopfield f64 T = 1024 gradient row ~110 s, a per-channel one ~1 s).
double task_cost(const Variant& v, DType dtype, std::int64_t time, bool oracle, bool gradients) {
  const bool dense = spec_of(v).jacobian != JacobianClass::per_channel;
  double cost = static_cast<double>(time) * (dtype == DType::f64 ? 3.0 : 1.0) * (dense ? 4.0 : 1.0);
  if (!oracle) cost *= 0.3;
  if (gradients) cost *= dense ? 100.0 : 4.0;
  return cost;
}

// The tasks in run order: one task of each variant in turn, each variant's own tasks costliest
// first, so a time budget cuts every variant short instead of leaving the variants planned last
// unvisited.
std::vector<const Task*> interleaved(const std::vector<Task>& tasks) {
  std::vector<std::string> groups;
  std::map<std::string, std::vector<const Task*>> by_group;
  for (const Task& t : tasks) {
    auto [it, fresh] = by_group.try_emplace(t.group);
    if (fresh) groups.push_back(t.group);
    it->second.push_back(&t);
  }
  // Within a variant, the costliest first (ties in plan order): with --jobs the long tasks start
  // early instead of finishing last on one thread while the other workers idle.
  for (auto& [group, list] : by_group)
    std::stable_sort(list.begin(), list.end(), [](const Task* a, const Task* b) { return a->cost > b->cost; });
  std::vector<const Task*> order;
  order.reserve(tasks.size());
  for (std::size_t round = 0; order.size() < tasks.size(); ++round)
    for (const std::string& g : groups)
      if (round < by_group[g].size()) order.push_back(by_group[g][round]);
  return order;
}

// Whether the rows of (variant, dtype, T, class, seed) judge gradients (also their recompute ≡ stored).
bool judges_gradients(const Plan& plan, const Variant& v, DType dtype, std::int64_t time, const std::string& cls,
                      std::int64_t seed_index) {
  const bool dense = spec_of(v).jacobian != JacobianClass::per_channel;
  const std::int64_t max_t = dtype == DType::f64 && dense ? std::min(plan.gradient_max_t, plan.gradient_max_t_f64_dense)
                                                          : plan.gradient_max_t;
  if (dense && time > plan.gradient_dense_sampled_above_t && (cls != "init" || seed_index != 1)) return false;
  return time <= max_t &&
         std::find(plan.gradient_classes.begin(), plan.gradient_classes.end(), cls) != plan.gradient_classes.end();
}

Json worst_index_json(const Shape& index) { return Json(index); }

// CONTRACT §5: strided ≡ contiguous and recompute ≡ stored are bitwise on the same backend.
const Tolerance kBitwise{.atol = 0.0, .rtol = 0.0, .source = "bitwise (CONTRACT §5)"};

// A comparison holding NaN or infinities (e.g. f16 sLSTM gradients beyond 65504, docs/choices.md)
// is Inconclusive: compare() never passes a non-finite element, and the row of the same case
// already reports the overflow. A bitwise equivalence whose two sides are the same bytes with no
// NaN (`identical_bytes`) is Agree: its infinities repeat bit for bit, which is what it asks.
void record_comparison(Json& e, const ComparisonResult& c, const Tolerance& tau, bool identical_bytes = false) {
  const bool non_finite = c.nan_count + c.inf_count > 0;
  const bool repeated = identical_bytes && c.nan_count == 0;
  e["verdict"] = c.ok() || repeated ? "Agree" : (non_finite ? "Inconclusive" : "Disagree");
  if (non_finite && !repeated)
    e["reason"] = fmt::format("{} NaN and {} infinite values: not judged", c.nan_count, c.inf_count);
  if (repeated && c.inf_count > 0)
    e["note"] = fmt::format("{} infinite values, the same bits on both sides", c.inf_count);
  e["max_abs"] = repeated ? 0.0 : c.max_abs;
  e["atol"] = tau.atol;
  e["rtol"] = tau.rtol;
  e["mismatches"] = repeated ? 0 : c.mismatches;
  e["count"] = c.count;
  e["worst_index"] = worst_index_json(c.worst_abs_index);
  e["tolerance_source"] = tau.source;
}

Tensor ones_like_trajectory(const Cell& cell, const Tensor& H) {
  Tensor g(cell.dtype(), H.shape());
  Tensor flat = g.reshaped({g.numel()});
  for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0);
  return g;
}

}  // namespace

std::vector<std::string> campaign_variants() {
  std::vector<std::string> names;
  for (const Variant& v : all_variants()) names.push_back(v.name);
  return names;
}

CampaignResult run_campaign(const CampaignOptions& options) {
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  if (options.out_dir.empty()) throw ContractViolation("--out", "needs a directory", "(empty)");
  std::error_code ec;
  if (std::filesystem::exists(options.out_dir, ec) && !std::filesystem::is_directory(options.out_dir, ec))
    throw ContractViolation("--out", "must be a directory (the report folder)", options.out_dir.string());
  if (options.time_budget_s && !(*options.time_budget_s > 0.0))
    throw ContractViolation("--time-budget", "must be > 0 seconds", fmt::format("{}", *options.time_budget_s));

  if (options.jobs && *options.jobs < 1)
    throw ContractViolation("--jobs", "must be >= 1 (tasks run at once)", fmt::format("{}", *options.jobs));
  const std::int64_t cpus = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()));
  const std::int64_t jobs = options.jobs.value_or(cpus);
  const int threads_per_job = static_cast<int>(std::max<std::int64_t>(1, cpus / jobs));

  Plan plan;
  plan.quick = options.quick;
  // Variants.
  if (options.variants.empty()) {
    for (const Variant& v : all_variants()) plan.variants.push_back(&v);
  } else {
    for (const std::string& name : options.variants) {
      const auto it = std::find_if(all_variants().begin(), all_variants().end(),
                                   [&](const Variant& v) { return v.name == name; });
      if (it == all_variants().end()) {
        std::string known;
        for (const auto& n : campaign_variants()) known += (known.empty() ? "" : ", ") + n;
        throw ContractViolation("--cells", "must name variants among " + known, name);
      }
      plan.variants.push_back(&*it);
    }
  }
  // Dtypes.
  const std::vector<std::string> dtype_names =
      !options.dtypes.empty() ? options.dtypes
                              : (options.quick ? std::vector<std::string>{"f32"}
                                               : std::vector<std::string>{"f64", "f32", "f16", "bf16"});
  for (const std::string& d : dtype_names) {
    const DType dtype = parse_dtype(d, "--dtypes");
    if (!is_floating(dtype)) throw ContractViolation("--dtypes", "must be among f64, f32, f16, bf16", d);
    plan.dtypes.push_back(dtype);
  }
  // Backends: cpu always runs; cuda only with a device (else skipped, with the reason).
  Json skipped = Json::array();
  if (options.backends.empty()) throw ContractViolation("--backends", "needs at least one backend", "(empty)");
  for (const std::string& b : options.backends) {
    if (b != "cpu" && b != "cuda") throw ContractViolation("--backends", "must be among cpu, cuda", b);
    if (std::find(plan.backends.begin(), plan.backends.end(), b) != plan.backends.end()) continue;
    if (b == "cuda" && !options.gpu_available) {
      skipped.push_back({{"what", "backend cuda"},
                         {"reason", fmt::format("no CUDA device (gpu: {}; cuda runtime {}, driver {})", options.build.gpu,
                                                options.build.cuda_runtime, options.build.cuda_driver)}});
      continue;
    }
    plan.backends.push_back(b);
  }
  const bool gpu = std::find(plan.backends.begin(), plan.backends.end(), "cuda") != plan.backends.end();
  // Sizes and ladder.
  if (options.quick) {
    plan.times = {64, 1024};
    plan.classes = {"init", "hard", "saturating", "h0", "packed"};
    plan.seeds = 1;
    plan.certify_budget = 40'000;
    plan.gradient_max_t = 64;
    plan.kstar_max_t = 1024;
    plan.kstar_classes = {"init"};
    plan.class_at_t = [](const std::string& cls, std::int64_t t, DType) {
      return cls == "init" || (cls == "hard" && t == 1024) || ((cls == "h0" || cls == "saturating") && t == 64) ||
             (cls == "packed" && t == 1024);
    };
  } else {
    plan.times = gpu ? std::vector<std::int64_t>{64, 1024, 16384, 131072}
                     : std::vector<std::int64_t>{64, 1024, 8192};
    plan.classes = kClasses;
    plan.seeds = 2;
    plan.certify_budget = 100'000;
    plan.gradient_max_t = 8192;
    plan.kstar_max_t = gpu ? 16384 : 8192;
    if (gpu) {
      plan.cpu_max_t = 16384;
      plan.gpu_ladder = true;
      plan.one_seed_from_t = 16384;
      plan.gradient_dense_sampled_above_t = 64;
    }
    // Beyond T = 8192 the oracle's unroll dominates (it runs on the CPU, float128 for f64): the long
    // rows are classes init and hard in f32, f16 and bf16.
    plan.class_at_t = [](const std::string& cls, std::int64_t t, DType dtype) {
      return t <= 8192 || ((cls == "init" || cls == "hard") && dtype != DType::f64);
    };
  }
  if (!options.times.empty()) {
    for (auto t : options.times)
      if (t < 1) throw ContractViolation("--T", "lengths must be >= 1", std::to_string(t));
    plan.times = options.times;
    plan.class_at_t = [](const std::string&, std::int64_t, DType) { return true; };
    plan.cpu_max_t = std::numeric_limits<std::int64_t>::max();  // lengths asked for run on every backend
    plan.gpu_ladder = false;                                      // ... for every variant
    plan.one_seed_from_t = std::numeric_limits<std::int64_t>::max();
  }
  if (!options.classes.empty()) {
    for (const auto& c : options.classes)
      if (std::find(kClasses.begin(), kClasses.end(), c) == kClasses.end())
        throw ContractViolation("--classes", "must be among init, hard, saturating, h0, packed", c);
    plan.classes = options.classes;
    plan.class_at_t = [](const std::string&, std::int64_t, DType) { return true; };
  }
  if (options.max_iters && *options.max_iters < 0)
    throw ContractViolation("--max-iters", "must be >= 0 or none", std::to_string(*options.max_iters));
  if (options.seeds) {
    if (*options.seeds < 1) throw ContractViolation("--seeds", "must be >= 1", std::to_string(*options.seeds));
    plan.seeds = *options.seeds;
    plan.one_seed_from_t = std::numeric_limits<std::int64_t>::max();  // the seeds asked for, at every T
  }
  std::vector<std::uint64_t> seed_list;
  for (std::int64_t s = 1; s <= plan.seeds; ++s) seed_list.push_back(static_cast<std::uint64_t>(s));

  std::filesystem::create_directories(options.out_dir);
  // This run's cases are written to a staging folder that replaces <out>/cases only when the
  // report is written, so cases/ never mixes runs and a failed run leaves the previous one whole.
  const detail::ScratchDirectory staging(options.out_dir, ".cases-");
  const std::filesystem::path report_path = options.out_dir / "report.json";
  check_output_path(report_path, "--out");

  const QuietWarnings quiet;  // fixed-K and hard rows warn on purpose; the report keeps the figures
  Json rows = Json::array(), equivalences = Json::array(), kstar_rows = Json::array();
  std::vector<Task> tasks;
  OracleMemo oracle_memo;
  // A task cut short at the time budget: thrown at its phase boundaries (verify_agreement's
  // phases, K*'s (T, seed) steps), so a long task does not run the campaign past --time-budget
  // by more than one phase. Not a std::exception: no task's own error handling turns it into a
  // row; the workers count the task as not run.
  struct BudgetCut {};
  const auto checkpoint = [&] {
    if (options.time_budget_s && elapsed() > *options.time_budget_s) throw BudgetCut{};
  };

  // The cpu backend's long rows left to the GPU: recorded once.
  if (std::find(plan.backends.begin(), plan.backends.end(), "cpu") != plan.backends.end())
    for (std::int64_t t : plan.times)
      if (t > plan.cpu_max_t)
        skipped.push_back({{"what", fmt::format("backend cpu at T = {}", t)},
                           {"reason", fmt::format("the cpu backend's rows stop at T = {} when a GPU runs the long ones "
                                                  "(its solves there cost minutes; --T runs every backend)",
                                                  plan.cpu_max_t)}});
  // Lengths the GPU plan leaves out for a variant, and the seeds it drops at long T: recorded once.
  for (const Variant* v : plan.variants)
    for (std::int64_t t : plan.times)
      if (!plan.variant_runs_t(*v, t))
        skipped.push_back({{"what", fmt::format("{} at T = {}", v->name, t)}, {"reason", v->gpu_plan_max_t_reason}});
  for (std::int64_t t : plan.times)
    if (plan.seeds_at(t) < plan.seeds)
      skipped.push_back({{"what", plan.seeds == 2 ? fmt::format("seed 2 at T = {}", t)
                                                  : fmt::format("seeds 2..{} at T = {}", plan.seeds, t)},
                         {"reason", fmt::format("the GPU plan runs seed 1 only from T = {} (its oracles cost 1-25 s "
                                                "a row on one core; --seeds runs every seed at every T)",
                                                plan.one_seed_from_t)}});
  // Classes a variant cannot have: recorded once.
  for (const Variant* v : plan.variants)
    for (const std::string& cls : plan.classes) {
      std::string why;
      if (!class_applies(*v, cls, &why)) skipped.push_back({{"what", fmt::format("{} class {}", v->name, cls)}, {"reason", why}});
    }

  // Agreement rows (and the equivalences that need the same case).
  for (const Variant* vp : plan.variants)
    for (DType dtype : plan.dtypes)
      for (std::int64_t time : plan.times)
        for (const std::string& cls : plan.classes) {
          std::string why;
          if (!class_applies(*vp, cls, &why) || !plan.class_at_t(cls, time, dtype) || !plan.variant_runs_t(*vp, time))
            continue;
          for (std::int64_t s = 1; s <= plan.seeds_at(time); ++s) {
            const bool gradient_class = judges_gradients(plan, *vp, dtype, time, cls, s);
            const CaseKey key{.variant = vp, .dtype = dtype, .time = time, .cls = cls, .seed_index = s,
                              .case_seed = static_cast<std::uint64_t>(1000 * time + s)};
            // One task per case: its rows on every backend one after another, so the second
            // takes the case's oracle from the memo instead of holding a worker while another
            // computes it.
            tasks.push_back({case_id(key), [&, key](TaskOutput& out) {
              for (const std::string& backend : plan.backends_at(key.time)) {
                const std::string id = case_id(key) + "." + backend;
                const Variant& v = *key.variant;
                const BuiltCase built = build_case(plan, key);
                Json row;
                row["id"] = id;
                row["variant"] = v.name;
                row["cell"] = v.cell;
                row["mix"] = v.mix;
                row["dtype"] = dtype_name(key.dtype);
                row["backend"] = backend;
                row["T"] = key.time;
                row["batch"] = built.x.size(0);
                row["d_in"] = built.cell.d_in();
                row["d_h"] = built.cell.d_h();
                row["class"] = key.cls;
                row["seed"] = key.seed_index;
                row["case_seed"] = key.case_seed;
                const bool wants_gradients = judges_gradients(plan, v, key.dtype, key.time, key.cls, key.seed_index);
                std::optional<std::string> no_gradients;
                if (wants_gradients) no_gradients = gradient_unsupported(v, key.dtype, backend, plan);
                const bool gradients = wants_gradients && !no_gradients;
                row["gradients"] = gradients ? "judged" : (wants_gradients ? "not_applicable" : "not_requested");
                if (no_gradients) row["gradients_reason"] = *no_gradients;
                const std::string case_rel = "cases/" + id + ".safetensors";
                const std::string k_text = options.max_iters ? std::to_string(*options.max_iters) : "none";
                const std::string repro = fmt::format(
                    "pararnn verify {} --backend {} --max-iters {} --seed {} --certify-budget {}{}", case_rel, backend,
                    k_text, key.case_seed, plan.certify_budget_for(key.dtype), gradients ? " --grad" : "");
                VerifyOptions vo;
                vo.config = config_for(backend, options.max_iters);
                if (built.h0) vo.h0 = built.h0->view();
                if (built.cu_seqlens) vo.cu_seqlens = built.cu_seqlens->view();
                vo.seed = key.case_seed;
                vo.certify_budget = plan.certify_budget_for(key.dtype);
                vo.gradients = gradients;
                vo.repro_command = repro;
                // The case's rows on every backend share one oracle trajectory.
                vo.oracle_memo = &oracle_memo;
                vo.oracle_key = case_id(key);
                vo.oracle_uses = static_cast<std::int64_t>(plan.backends_at(key.time).size());
                vo.progress = [&](std::string_view) { checkpoint(); };
                vo.poll = checkpoint;
                std::string outcome;
                try {
                  const AgreementReport r = verify_agreement(built.cell, built.x, vo);
                  outcome = std::string(verdict_name(r.verdict));
                  row["outcome"] = outcome;
                  row["agreement"] = r.to_json();
                } catch (const UnsupportedPath& e) {
                  out.skipped.push_back({{"what", "row " + id}, {"reason", e.what()}});
                  continue;
                } catch (const NewtonDivergenceError& e) {
                  // The residual gate: the solver did not produce the sequential answer (`pararnn
                  // verify` exits 1 on it); no AgreementReport exists, so the outcome is Error.
                  outcome = std::string(kOutcomeError);
                  row["outcome"] = outcome;
                  row["error_type"] = "NewtonDivergenceError";
                  row["error"] = e.what();
                } catch (const std::exception& e) {
                  outcome = std::string(kOutcomeError);
                  row["outcome"] = outcome;
                  row["error_type"] = "exception";
                  row["error"] = e.what();
                }
                if (outcome != "Agree") {
                  out.case_files.push_back(staging.path() / (id + ".safetensors"));
                  write_case(out.case_files.back(), built.problem());
                  row["case_file"] = case_rel;
                  row["repro"] = repro;
                  row["bug_bundle"] = fmt::format(
                      "pararnn bug-bundle {} --backend {} --max-iters {} --seed {} --certify-budget {}{} --out {}.bundle.tar.gz",
                      case_rel, backend, k_text, key.case_seed, plan.certify_budget_for(key.dtype),
                      gradients ? " --grad" : "", id);
                  try {
                    row["error_along_t"] = error_along_t(built.cell, built.problem(), config_for(backend, options.max_iters), 128);
                  } catch (const std::exception& e) {
                    row["error_along_t"] = {{"error", e.what()}};
                  }
                }
                if (key.cls == "init" && row.contains("agreement") &&
                    number_or_nan(row["agreement"]["timings_ms"].value("newton", Json(nullptr))) <=
                        plan.timing_repeat_max_ms) {
                  Json repeats = Json::array();
                  for (std::int64_t r = 0; r < plan.timing_repeats; ++r) {
                    const auto t0 = Clock::now();
                    try {
                      (void)newton_apply(built.cell, built.x, vo.config, built.apply());
                    } catch (const std::exception&) {
                      break;  // the verdict above already says what happened
                    }
                    repeats.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                  }
                  row["newton_ms_repeats"] = repeats;
                }
                out.rows.push_back(std::move(row));
              }
            }, key.variant->name,
               static_cast<double>(plan.backends_at(time).size()) * task_cost(*vp, dtype, time, true, gradient_class)});
            // Packed = each segment alone, per backend.
            if (cls == "packed")
              for (const std::string& backend : plan.backends_at(time)) {
                const std::string id = "packed_vs_per_sequence." + case_id(key) + "." + backend;
                tasks.push_back({id, [&, key, backend, id](TaskOutput& out) {
                  const BuiltCase built = build_case(plan, key);
                  Json e = {{"id", id}, {"name", "packed_vs_per_sequence"}, {"variant", key.variant->name},
                            {"dtype", dtype_name(key.dtype)}, {"backend", backend}, {"T", key.time},
                            {"class", key.cls}, {"seed", key.seed_index}};
                  try {
                    NewtonConfig config = config_for(backend, options.max_iters);
                    NewtonStats stats;
                    const Tensor packed = newton_apply(built.cell, built.x, config, built.apply(), &stats);
                    // K and sLSTM's Picard passes resolve on the packed length N (CONTRACT §4):
                    // each segment alone is solved with the packed solve's passes.
                    if (stats.picard_iters > 0) config.picard_iters = stats.picard_iters;
                    // Each segment solved alone from the zero state, laid out as the packed H (exact in f64).
                    std::vector<double> alone_values(static_cast<std::size_t>(packed.numel()));
                    const std::int64_t per_step = packed.numel() / key.time;
                    const TensorView cu = built.cu_seqlens->view();
                    for (std::int64_t s = 0; s + 1 < cu.numel(); ++s) {
                      const auto a = static_cast<std::int64_t>(cu.load({s})), z = static_cast<std::int64_t>(cu.load({s + 1}));
                      const Tensor seg = newton_apply(built.cell, Tensor::copy_of(built.x.view().slice(1, a, z)), config);
                      const std::vector<double> values = seg.to_f64_vector();
                      std::copy(values.begin(), values.end(), alone_values.begin() + a * per_step);
                    }
                    const Tensor alone = Tensor::from_values(DType::f64, packed.shape(), alone_values);
                    const Tolerance tau = tolerance_for({.dtype = key.dtype, .metric = Metric::trajectory,
                                                         .cell = key.variant->cell, .backend = backend});
                    const ComparisonResult c = compare(packed, alone, tau);
                    record_comparison(e, c, tau);
                  } catch (const std::exception& ex) {
                    e["verdict"] = kOutcomeError;
                    e["max_abs"] = nullptr;
                    e["atol"] = nullptr;
                    e["error"] = ex.what();
                  }
                  out.equivalences.push_back(std::move(e));
                }, key.variant->name, task_cost(*vp, dtype, time, false, false)});
              }
            // Strided ≡ contiguous (class init): x read through a time-skipping view.
            if (cls == "init")
              for (const std::string& backend : plan.backends_at(time)) {
                const std::string id = "strided_vs_contiguous." + case_id(key) + "." + backend;
                tasks.push_back({id, [&, key, backend, id](TaskOutput& out) {
                  const BuiltCase built = build_case(plan, key);
                  Json e = {{"id", id}, {"name", "strided_vs_contiguous"}, {"variant", key.variant->name},
                            {"dtype", dtype_name(key.dtype)}, {"backend", backend}, {"T", key.time},
                            {"class", key.cls}, {"seed", key.seed_index}};
                  try {
                    const Shape& shape = built.x.shape();
                    Tensor wide(key.dtype, {shape[0], 2 * shape[1], shape[2]});
                    for (std::int64_t b = 0; b < shape[0]; ++b)
                      for (std::int64_t t = 0; t < shape[1]; ++t)
                        for (std::int64_t i = 0; i < shape[2]; ++i) {
                          wide.store({b, 2 * t, i}, built.x.load({b, t, i}));
                          wide.store({b, 2 * t + 1, i}, NAN);  // never read: a strided read that strays shows
                        }
                    const NewtonConfig config = config_for(backend, options.max_iters);
                    const Tensor strided = newton_apply(built.cell, wide.view().slice(1, 0, 2 * shape[1], 2), config,
                                                        built.apply());
                    const Tensor contiguous = newton_apply(built.cell, built.x, config, built.apply());
                    record_comparison(e, compare(strided, contiguous, kBitwise), kBitwise, same_bits(strided, contiguous));
                  } catch (const UnsupportedPath& ex) {
                    out.skipped.push_back({{"what", id}, {"reason", ex.what()}});
                    return;
                  } catch (const std::exception& ex) {
                    e["verdict"] = kOutcomeError;
                    e["max_abs"] = nullptr;
                    e["atol"] = nullptr;
                    e["error"] = ex.what();
                  }
                  out.equivalences.push_back(std::move(e));
                }, key.variant->name, task_cost(*vp, dtype, time, false, false)});
              }
            // Recompute ≡ stored (rows whose gradients are judged): outputs and every gradient.
            if (gradient_class)
              for (const std::string& backend : plan.backends_at(time)) {
                const std::string id = "recompute_vs_stored." + case_id(key) + "." + backend;
                tasks.push_back({id, [&, key, backend, id](TaskOutput& out) {
                  if (gradient_unsupported(*key.variant, key.dtype, backend, plan)) return;  // recorded on the row
                  const BuiltCase built = build_case(plan, key);
                  Json e = {{"id", id}, {"name", "recompute_vs_stored"}, {"variant", key.variant->name},
                            {"dtype", dtype_name(key.dtype)}, {"backend", backend}, {"T", key.time},
                            {"class", key.cls}, {"seed", key.seed_index}};
                  try {
                    NewtonConfig stored = config_for(backend, options.max_iters), recompute = stored;
                    recompute.recompute = true;
                    const NewtonForward fa = newton_forward(built.cell, built.x, stored, built.apply());
                    const NewtonForward fb = newton_forward(built.cell, built.x, recompute, built.apply());
                    const Tensor g = ones_like_trajectory(built.cell, fa.H);
                    const NewtonGradients ga = newton_backward(built.cell, built.x, fa, g, stored, built.apply());
                    const NewtonGradients gb = newton_backward(built.cell, built.x, fb, g, recompute, built.apply());
                    // The worst of H and every gradient tensor, bitwise.
                    ComparisonResult worst = compare(fb.H, fa.H, kBitwise);
                    std::string worst_name = "H";
                    // The same bytes in every tensor and no NaN anywhere: the equivalence holds.
                    bool identical = same_bits(fb.H, fa.H) && worst.nan_count == 0;
                    const auto consider = [&](const std::string& name, const Tensor& b, const Tensor& a) {
                      const ComparisonResult c = compare(b, a, kBitwise);
                      identical = identical && same_bits(b, a) && c.nan_count == 0;
                      if (c.mismatches > worst.mismatches || (worst.ok() && !c.ok())) {
                        worst = c;
                        worst_name = name;
                      }
                    };
                    consider("grad.x", gb.x, ga.x);
                    if (ga.h0 && gb.h0) consider("grad.h0", *gb.h0, *ga.h0);
                    for (const auto& [name, grad] : ga.parameters) consider("grad." + name, gb.parameters.at(name), grad);
                    record_comparison(e, worst, kBitwise, identical);
                    e["worst_tensor"] = worst_name;
                  } catch (const UnsupportedPath& ex) {
                    out.skipped.push_back({{"what", id}, {"reason", ex.what()}});
                    return;
                  } catch (const std::exception& ex) {
                    e["verdict"] = kOutcomeError;
                    e["max_abs"] = nullptr;
                    e["atol"] = nullptr;
                    e["error"] = ex.what();
                  }
                  out.equivalences.push_back(std::move(e));
                }, key.variant->name, task_cost(*vp, dtype, time, false, false)});
              }
            // GPU = CPU.
            if (gpu && time <= plan.cpu_max_t &&
                std::find(plan.gpu_cpu_classes.begin(), plan.gpu_cpu_classes.end(), cls) != plan.gpu_cpu_classes.end()) {
              const std::string id = "gpu_vs_cpu." + case_id(key);
              tasks.push_back({id, [&, key, id](TaskOutput& out) {
                const BuiltCase built = build_case(plan, key);
                Json e = {{"id", id}, {"name", "gpu_vs_cpu"}, {"variant", key.variant->name},
                          {"dtype", dtype_name(key.dtype)}, {"backend", "cuda"}, {"T", key.time},
                          {"class", key.cls}, {"seed", key.seed_index}};
                try {
                  const Tensor on_gpu = newton_apply(built.cell, built.x, config_for("cuda", options.max_iters), built.apply());
                  const Tensor on_cpu = newton_apply(built.cell, built.x, config_for("cpu", options.max_iters), built.apply());
                  const Tolerance tau = tolerance_for({.dtype = key.dtype, .metric = Metric::trajectory,
                                                       .cell = key.variant->cell, .backend = "cuda"});
                  const ComparisonResult c = compare(on_gpu, on_cpu, tau);
                  record_comparison(e, c, tau);
                } catch (const UnsupportedPath& ex) {
                  out.skipped.push_back({{"what", id}, {"reason", ex.what()}});
                  return;
                } catch (const std::exception& ex) {
                  e["verdict"] = kOutcomeError;
                  e["max_abs"] = nullptr;
                  e["atol"] = nullptr;
                  e["error"] = ex.what();
                }
                out.equivalences.push_back(std::move(e));
              }, key.variant->name, task_cost(*vp, dtype, time, false, false)});
            }
          }
        }

  // K*(T): one measurement per (variant, dtype, class) over the ladder up to kstar_max_t.
  for (const Variant* vp : plan.variants)
    for (DType dtype : plan.dtypes)
      for (const std::string& cls : plan.kstar_classes) {
        std::string why;
        if (std::find(plan.classes.begin(), plan.classes.end(), cls) == plan.classes.end()) continue;
        if (!class_applies(*vp, cls, &why)) continue;
        if (!vp->kstar) {
          skipped.push_back({{"what", fmt::format("kstar {} {} {}", vp->name, dtype_name(dtype), cls)},
                             {"reason", "measure_kstar has no gate_mix option"}});
          continue;
        }
        std::vector<std::int64_t> times;
        for (auto t : plan.times)
          if (t <= plan.kstar_max_t && plan.variant_runs_t(*vp, t)) times.push_back(t);
        if (times.empty()) continue;
        const std::string id = fmt::format("kstar.{}.{}.{}", vp->name, dtype_name(dtype), cls);
        std::int64_t kstar_steps = 0;  // every K of the search, every seed, over the ladder (roughly)
        for (auto t : times) kstar_steps += 3 * plan.seeds * t;
        tasks.push_back({id, [&, vp, dtype, cls, times](TaskOutput& out) {
          const Variant& v = *vp;
          const CellSpec& spec = spec_of(v);
          KstarOptions ko;
          ko.cell = v.cell;
          ko.mix = v.mix;
          ko.n_heads = v.n_heads;
          ko.dtype = dtype;
          ko.times = times;
          ko.seeds = plan.seeds;
          ko.batch = plan.batch;
          ko.d_in = plan.d_in;
          ko.d_h = v.d_h.value_or(plan.d_h);
          ko.k_dim = v.k_dim;
          ko.v_dim = v.v_dim;
          ko.k_limit = plan.kstar_k_limit;
          ko.weight_std = cls == "hard" ? v.hard_std : std::nullopt;
          ko.max_recurrent_norm = cls == "hard" ? std::nullopt : spec.default_cap;
          ko.progress = [&](const std::string&) { checkpoint(); };
          ko.poll = checkpoint;
          try {
            const KstarTable table = measure_kstar(ko);
            for (std::size_t i = 0; i < table.max_kstar_by_t.size(); ++i) {
              const std::int64_t t = table.max_kstar_by_t[i].first;
              Json by_seed = Json::array();
              double floor = 0.0;
              for (const KstarRow& r : table.rows)
                if (r.time == t) {
                  by_seed.push_back(r.kstar);
                  floor = std::max(floor, r.sequential_max_abs);
                }
              out.kstar_rows.push_back({{"variant", v.name}, {"cell", v.cell}, {"mix", v.mix},
                                    {"dtype", dtype_name(dtype)}, {"class", cls}, {"T", t},
                                    {"kstar_by_seed", by_seed}, {"max_kstar", table.max_kstar_by_t[i].second},
                                    {"shipped_k", table.shipped_k_by_t[i].second}, {"k_limit", ko.k_limit},
                                    {"sequential_max_abs", floor}, {"tau", table.tau}});
            }
          } catch (const std::exception& e) {
            out.skipped.push_back({{"what", fmt::format("kstar {} {} {}", v.name, dtype_name(dtype), cls)},
                               {"reason", std::string("measure_kstar failed: ") + e.what()}});
          }
        }, vp->name, task_cost(*vp, dtype, kstar_steps, true, false)});
      }

  // Run, under the budget: `jobs` workers take the tasks in the interleaved order; each task's
  // OpenMP loops get cpus / jobs threads (one worker: the calling thread, its OpenMP default).
  const std::vector<const Task*> order = interleaved(tasks);
  std::vector<TaskOutput> outputs(tasks.size());
  std::vector<double> task_seconds(tasks.size(), -1.0);  // wall seconds of each task run (-1: not run)
  std::int64_t done = 0, not_run = 0, cut = 0;  // cut: started, then stopped at the budget
  bool budget_exhausted = false;
  std::mutex mutex;  // done, not_run, cut, budget_exhausted, failure, the progress callback
  std::exception_ptr failure;
  std::atomic<std::size_t> next{0};
  const auto report_progress = [&](const std::string& current, const std::string& finished = {},
                                   double finished_s = 0.0) {  // under mutex
    if (!options.progress) return;
    const double t = elapsed();
    const auto total = static_cast<std::int64_t>(tasks.size());
    options.progress({.done = done, .total = total, .elapsed_s = t,
                      .eta_s = done > 0 && !current.empty() ? t / static_cast<double>(done) * static_cast<double>(total - done) : 0.0,
                      .current = current, .finished = finished, .finished_s = finished_s});
  };
  const auto work = [&] {
    for (std::size_t i = next++; i < order.size(); i = next++) {
      const Task& task = *order[i];
      {
        const std::lock_guard lock(mutex);
        if (failure) return;
        if (options.time_budget_s && elapsed() > *options.time_budget_s) {
          budget_exhausted = true;
          ++not_run;
          continue;
        }
        report_progress(task.label);
      }
      const auto index = static_cast<std::size_t>(&task - tasks.data());
      try {
        const auto t0 = Clock::now();
        task.run(outputs[index]);
        task_seconds[index] = std::chrono::duration<double>(Clock::now() - t0).count();
      } catch (const BudgetCut&) {
        // Nothing of a task cut short reaches the report or cases/ (its cpu row may have written
        // a case before its cuda row was cut).
        for (const auto& f : outputs[index].case_files) {
          std::error_code ignored;
          std::filesystem::remove(f, ignored);
        }
        outputs[index] = TaskOutput{};
        const std::lock_guard lock(mutex);
        budget_exhausted = true;
        ++not_run;
        ++cut;
        continue;
      } catch (...) {
        const std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        return;
      }
      const std::lock_guard lock(mutex);
      ++done;
      report_progress("", task.label, task_seconds[index]);
    }
  };
  if (jobs == 1) {
    work();
  } else {
    std::vector<std::jthread> workers;
    for (std::int64_t w = 0; w < jobs; ++w)
      workers.emplace_back([&] {
        omp_set_num_threads(threads_per_job);
        work();
      });
  }  // the workers join here
  if (failure) std::rethrow_exception(failure);
  {
    const std::lock_guard lock(mutex);
    report_progress("");
  }
  const auto append = [](Json& to, Json& from) {
    for (Json& j : from) to.push_back(std::move(j));
  };
  for (const Task* task : order) {
    TaskOutput& o = outputs[static_cast<std::size_t>(task - tasks.data())];
    append(rows, o.rows);
    append(equivalences, o.equivalences);
    append(kstar_rows, o.kstar_rows);
    append(skipped, o.skipped);
  }

  // Summary.
  std::map<std::string, std::int64_t> by_outcome = {{"Agree", 0}, {"Disagree", 0}, {"Inconclusive", 0}, {"Error", 0}};
  std::map<std::string, std::int64_t> eq_by = {{"Agree", 0}, {"Disagree", 0}, {"Inconclusive", 0}, {"Error", 0}};
  std::map<std::string, std::int64_t> gradient_counts = {{"judged", 0}, {"not_applicable", 0}, {"not_requested", 0}};
  Json failures = Json::array();
  std::vector<std::pair<double, std::string>> ranked;
  for (const Json& row : rows) {
    const std::string outcome = row["outcome"].get<std::string>();
    ++by_outcome[outcome];
    ++gradient_counts[row["gradients"].get<std::string>()];
    if (outcome != "Agree") failures.push_back(row["id"]);
    if (row.contains("agreement")) {
      const double max_abs = number_or_nan(row["agreement"]["max_abs"]);
      const double atol = number_or_nan(row["agreement"]["atol"]);
      ranked.emplace_back(std::isnan(max_abs) ? INFINITY : max_abs / atol, row["id"].get<std::string>());
    }
  }
  for (const Json& e : equivalences) ++eq_by[e["verdict"].get<std::string>()];
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  Json worst = Json::array();
  for (std::size_t i = 0; i < ranked.size() && i < 5; ++i) worst.push_back(ranked[i].second);
  std::int64_t kstar_over_shipped = 0;
  for (const Json& k : kstar_rows) {
    const auto m = k["max_kstar"].get<std::int64_t>();
    if (m < 0 || m > k["shipped_k"].get<std::int64_t>()) ++kstar_over_shipped;
  }

  Json plan_json;
  Json variant_names = Json::array();
  for (const Variant* v : plan.variants) variant_names.push_back(v->name);
  Json dtypes_json = Json::array();
  for (DType d : plan.dtypes) dtypes_json.push_back(dtype_name(d));
  plan_json["quick"] = plan.quick;
  plan_json["variants"] = variant_names;
  plan_json["dtypes"] = dtypes_json;
  plan_json["backends"] = plan.backends;
  plan_json["cpu_max_T"] = plan.cpu_max_t == std::numeric_limits<std::int64_t>::max() ? Json(nullptr) : Json(plan.cpu_max_t);
  plan_json["requested_backends"] = options.backends;
  plan_json["times"] = plan.times;
  plan_json["classes"] = plan.classes;
  plan_json["seeds"] = plan.seeds;
  plan_json["max_iters"] = options.max_iters ? Json(*options.max_iters) : Json("none");
  plan_json["batch"] = plan.batch;
  plan_json["d_in"] = plan.d_in;
  plan_json["d_h"] = plan.d_h;
  plan_json["certify_budget"] = plan.certify_budget;
  plan_json["certify_budget_f64"] = plan.certify_budget_for(DType::f64);
  plan_json["gradient_classes"] = plan.gradient_classes;
  plan_json["gradient_max_T"] = plan.gradient_max_t;
  plan_json["gradient_max_T_f64_dense"] = std::min(plan.gradient_max_t, plan.gradient_max_t_f64_dense);
  plan_json["gradient_dense_sampled_above_T"] =  // beyond it: class init, seed 1 (null: never)
      plan.gradient_dense_sampled_above_t == std::numeric_limits<std::int64_t>::max()
          ? Json(nullptr) : Json(plan.gradient_dense_sampled_above_t);
  plan_json["one_seed_from_T"] =  // rows from this T: seed 1 only (null: every T has every seed)
      plan.one_seed_from_t == std::numeric_limits<std::int64_t>::max() ? Json(nullptr) : Json(plan.one_seed_from_t);
  plan_json["kstar_classes"] = plan.kstar_classes;
  plan_json["kstar_max_T"] = plan.kstar_max_t;
  plan_json["timing_repeats"] = plan.timing_repeats;
  plan_json["timing_repeat_max_ms"] = plan.timing_repeat_max_ms;
  plan_json["time_budget_s"] = options.time_budget_s ? Json(*options.time_budget_s) : Json(nullptr);
  plan_json["jobs"] = jobs;  // the timings were taken with this many tasks at once
  plan_json["threads_per_job"] = jobs == 1 ? Json("openmp default") : Json(threads_per_job);

  Json summary;
  summary["rows"] = rows.size();
  summary["by_outcome"] = by_outcome;
  summary["equivalences"] = eq_by;
  summary["gradients"] = gradient_counts;
  summary["kstar_measurements"] = kstar_rows.size();
  summary["kstar_above_shipped"] = kstar_over_shipped;
  summary["failures"] = failures;
  summary["worst"] = worst;
  summary["skipped"] = skipped.size();
  summary["tasks"] = tasks.size();
  summary["rows_not_run"] = not_run;
  summary["tasks_cut_at_budget"] = cut;
  summary["budget_exhausted"] = budget_exhausted;
  summary["duration_s"] = std::round(elapsed() * 10.0) / 10.0;
  // Where the time went: the tasks' summed wall seconds (the work to spread over --jobs) and the
  // slowest tasks (the stragglers that bound a run's length).
  {
    std::vector<std::pair<double, std::string>> timed;
    double total = 0.0;
    for (std::size_t i = 0; i < tasks.size(); ++i)
      if (task_seconds[i] >= 0.0) {
        timed.emplace_back(task_seconds[i], tasks[i].label);
        total += task_seconds[i];
      }
    std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    Json slowest = Json::array();
    for (std::size_t i = 0; i < timed.size() && i < 10; ++i)
      slowest.push_back({{"task", timed[i].second}, {"seconds", std::round(timed[i].first * 100.0) / 100.0}});
    summary["task_seconds_total"] = std::round(total * 10.0) / 10.0;
    summary["oracle_runs"] = {{"computed", oracle_memo.computed()}, {"shared", oracle_memo.reused()}};
    summary["slowest_tasks"] = slowest;
  }

  Json report;
  report["format"] = kReportFormat;
  report["schema_version"] = kNightlySchemaVersion;
  report["context"] = context_block(options.build, options.argv, seed_list);
  report["plan"] = plan_json;
  report["skipped"] = skipped;
  report["rows"] = rows;
  report["equivalences"] = equivalences;
  report["kstar"] = kstar_rows;
  report["summary"] = summary;
  if (options.performance) {
    report["performance"] = *options.performance;
    if (options.performance->contains("peer_versions") && (*options.performance)["peer_versions"].is_object())
      for (const auto& [peer, version] : (*options.performance)["peer_versions"].items())
        report["context"]["peers"][peer] = version;
  }
  validate_report(report, report_path.string());  // never write what render would refuse
  const std::filesystem::path cases = options.out_dir / "cases", old_cases = options.out_dir / ".cases-previous";
  std::filesystem::remove_all(old_cases);
  if (std::filesystem::exists(cases)) std::filesystem::rename(cases, old_cases);
  std::filesystem::rename(staging.path(), cases);
  using std::filesystem::perms;  // mkdtemp made it 0700; cases/ is an ordinary folder of the report
  std::filesystem::permissions(cases, perms::owner_all | perms::group_read | perms::group_exec | perms::others_read |
                                          perms::others_exec);
  std::filesystem::remove_all(old_cases);
  write_json_file(report_path, report);

  CampaignResult result{report, report_path, 0};
  const bool failed = by_outcome["Disagree"] + by_outcome["Error"] + eq_by["Disagree"] + eq_by["Error"] > 0;
  // A run cut by its time budget did not judge its whole plan: never exit 0 (2, as Inconclusive).
  result.exit_code = failed ? 1 : (by_outcome["Inconclusive"] + eq_by["Inconclusive"] > 0 || budget_exhausted ? 2 : 0);
  return result;
}

}  // namespace pararnn::reports
