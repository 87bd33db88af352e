// make_plan: the options become the plan (docs/reports.md's plan table), what it leaves out, and
// the task list in the planned order. Pure: no solver, no file, no clock.
#include "pararnn/nightly/plan.hpp"

#include <fmt/format.h>

#include <cmath>

#include "pararnn/core/errors.hpp"

namespace pararnn::nightly {
namespace {

using Json = nlohmann::ordered_json;

// Why the GPU plan stops ParaSLSTM's dense-Jacobian mixes at T = 1024 (measured on the H200,
// 2026-12-02, `pararnn solve --backend cuda`, B 2, d_h 16 / 8, f32).
constexpr const char* kSlstmDenseLongT =
    "Newton does not reach residual_atol within k_max at T >= 16384 (f32), and the sLSTM Picard adapt "
    "ladder and the sequential fallback follow: one cuda solve takes 3.5 s (head) / 1.7 s (dense) at "
    "T = 16384 and 56 s / 54 s at T = 131072 on the H200 (one cpu solve of the head mix 77 s at T = 131072 "
    "on one core); the GPU plan cannot hold their long rows in its 10 minutes (--T runs them)";

constexpr std::int64_t kNoLimit = std::numeric_limits<std::int64_t>::max();

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

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

void resolve_variants(const CampaignOptions& options, Plan& plan) {
  if (options.variants.empty()) {
    for (const Variant& v : all_variants()) plan.variants.push_back(&v);
    return;
  }
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

void resolve_dtypes(const CampaignOptions& options, Plan& plan) {
  const std::vector<std::string> names =
      !options.dtypes.empty() ? options.dtypes
                              : (options.quick ? std::vector<std::string>{"f32"}
                                               : std::vector<std::string>{"f64", "f32", "f16", "bf16"});
  for (const std::string& d : names) {
    const DType dtype = parse_dtype(d, "--dtypes");
    if (!is_floating(dtype)) throw ContractViolation("--dtypes", "must be among f64, f32, f16, bf16", d);
    plan.dtypes.push_back(dtype);
  }
}

// cpu always runs; cuda only with a device (else skipped, with the reason). An external solver
// is the one backend of its rows.
void resolve_backends(const CampaignOptions& options, Plan& plan, Json& skipped) {
  if (options.external) {
    plan.backends = {"external"};
    return;
  }
  if (options.backends.empty()) throw ContractViolation("--backends", "needs at least one backend", "(empty)");
  for (const std::string& b : options.backends) {
    if (b != "cpu" && b != "cuda") throw ContractViolation("--backends", "must be among cpu, cuda", b);
    if (contains(plan.backends, b)) continue;
    if (b == "cuda" && !options.gpu_available) {
      skipped.push_back({{"what", "backend cuda"},
                         {"reason", fmt::format("no CUDA device (gpu: {}; cuda runtime {}, driver {})", options.build.gpu,
                                                options.build.cuda_runtime, options.build.cuda_driver)}});
      continue;
    }
    plan.backends.push_back(b);
  }
}

// The sizes and the ladder of the quick, CPU and GPU plans.
void choose_ladder(const CampaignOptions& options, Plan& plan) {
  const bool gpu = contains(plan.backends, "cuda");
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
    return;
  }
  plan.times = gpu ? std::vector<std::int64_t>{64, 1024, 16384, 131072} : std::vector<std::int64_t>{64, 1024, 8192};
  plan.classes = campaign_classes();
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

// --T, --classes, --max-iters, --seeds replace the plan's choice.
void apply_overrides(const CampaignOptions& options, Plan& plan) {
  if (!options.times.empty()) {
    for (auto t : options.times)
      if (t < 1) throw ContractViolation("--T", "lengths must be >= 1", std::to_string(t));
    plan.times = options.times;
    plan.class_at_t = [](const std::string&, std::int64_t, DType) { return true; };
    plan.cpu_max_t = kNoLimit;   // lengths asked for run on every backend
    plan.gpu_ladder = false;     // ... for every variant
    plan.one_seed_from_t = kNoLimit;
  }
  if (!options.classes.empty()) {
    for (const auto& c : options.classes)
      if (!contains(campaign_classes(), c))
        throw ContractViolation("--classes", "must be among init, hard, saturating, h0, packed", c);
    plan.classes = options.classes;
    plan.class_at_t = [](const std::string&, std::int64_t, DType) { return true; };
  }
  if (options.max_iters && *options.max_iters < 0)
    throw ContractViolation("--max-iters", "must be >= 0 or none", std::to_string(*options.max_iters));
  if (options.seeds) {
    if (*options.seeds < 1) throw ContractViolation("--seeds", "must be >= 1", std::to_string(*options.seeds));
    plan.seeds = *options.seeds;
    plan.one_seed_from_t = kNoLimit;  // the seeds asked for, at every T
  }
}

// What the plan leaves out, recorded once: the cpu backend's long rows, the lengths and seeds
// the GPU plan drops, the classes a variant cannot have.
void record_plan_skips(const Plan& plan, Json& skipped) {
  if (contains(plan.backends, "cpu"))
    for (std::int64_t t : plan.times)
      if (t > plan.cpu_max_t)
        skipped.push_back({{"what", fmt::format("backend cpu at T = {}", t)},
                           {"reason", fmt::format("the cpu backend's rows stop at T = {} when a GPU runs the long ones "
                                                  "(its solves there cost minutes; --T runs every backend)",
                                                  plan.cpu_max_t)}});
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
  for (const Variant* v : plan.variants)
    for (const std::string& cls : plan.classes) {
      std::string why;
      if (!class_applies(*v, cls, &why)) skipped.push_back({{"what", fmt::format("{} class {}", v->name, cls)}, {"reason", why}});
    }
}

// The tasks of one case: its rows on every backend (one task, so that the second row takes the
// case's oracle from the memo), then the equivalences that need the same case.
void plan_case_tasks(const Plan& plan, const CaseKey& key, std::vector<TaskSpec>& tasks) {
  const Variant& v = *key.variant;
  const std::vector<std::string> backends = plan.backends_at(key.time);
  const bool gradients = judges_gradients(plan, v, key.dtype, key.time, key.cls, key.seed_index);
  const double equivalence_cost = task_cost(v, key.dtype, key.time, false, false);
  tasks.push_back({.kind = TaskKind::rows, .label = case_id(key), .group = v.name,
                   .cost = static_cast<double>(backends.size()) * task_cost(v, key.dtype, key.time, true, gradients),
                   .key = key});
  const auto per_backend = [&](TaskKind kind, const char* name) {
    for (const std::string& backend : backends)
      tasks.push_back({.kind = kind, .label = fmt::format("{}.{}.{}", name, case_id(key), backend), .group = v.name,
                       .cost = equivalence_cost, .key = key, .backend = backend});
  };
  if (key.cls == "packed") per_backend(TaskKind::packed_vs_per_sequence, "packed_vs_per_sequence");
  if (plan.external) return;  // strided, recompute and GPU = CPU do not apply to a black box
  if (key.cls == "init") per_backend(TaskKind::strided_vs_contiguous, "strided_vs_contiguous");
  if (gradients) per_backend(TaskKind::recompute_vs_stored, "recompute_vs_stored");
  if (contains(plan.backends, "cuda") && key.time <= plan.cpu_max_t && contains(plan.gpu_cpu_classes, key.cls))
    tasks.push_back({.kind = TaskKind::gpu_vs_cpu, .label = "gpu_vs_cpu." + case_id(key), .group = v.name,
                     .cost = equivalence_cost, .key = key, .backend = "cuda"});
}

void plan_row_tasks(const Plan& plan, std::vector<TaskSpec>& tasks) {
  for (const Variant* vp : plan.variants)
    for (DType dtype : plan.dtypes)
      for (std::int64_t time : plan.times)
        for (const std::string& cls : plan.classes) {
          std::string why;
          if (!class_applies(*vp, cls, &why) || !plan.class_at_t(cls, time, dtype) || !plan.variant_runs_t(*vp, time))
            continue;
          for (std::int64_t s = 1; s <= plan.seeds_at(time); ++s)
            plan_case_tasks(plan,
                            {.variant = vp, .dtype = dtype, .time = time, .cls = cls, .seed_index = s,
                             .case_seed = static_cast<std::uint64_t>(1000 * time + s)},
                            tasks);
        }
}

// What does not apply to an external solver, recorded once (docs/external-solvers.md).
void record_external_skips(Json& skipped) {
  skipped.push_back({{"what", "equivalence strided_vs_contiguous (external solver)"},
                     {"reason", "not applicable: a black box does not expose how it reads a strided x"}});
  skipped.push_back({{"what", "equivalence recompute_vs_stored (external solver)"},
                     {"reason", "not applicable: a black box does not expose a recompute switch of its adjoint"}});
  skipped.push_back({{"what", "kstar (external solver)"},
                     {"reason", "not measured: K* needs control of the Newton iterations inside the solver"}});
}

// K*(T): one measurement per (variant, dtype, class) over the ladder up to kstar_max_t.
void plan_kstar_tasks(const Plan& plan, std::vector<TaskSpec>& tasks, Json& skipped) {
  if (plan.external) return record_external_skips(skipped);
  for (const Variant* vp : plan.variants)
    for (DType dtype : plan.dtypes)
      for (const std::string& cls : plan.kstar_classes) {
        std::string why;
        if (!contains(plan.classes, cls) || !class_applies(*vp, cls, &why)) continue;
        if (!vp->kstar) {
          skipped.push_back({{"what", fmt::format("kstar {} {} {}", vp->name, dtype_name(dtype), cls)},
                             {"reason", "measure_kstar has no gate_mix option"}});
          continue;
        }
        std::vector<std::int64_t> times;
        for (auto t : plan.times)
          if (t <= plan.kstar_max_t && plan.variant_runs_t(*vp, t)) times.push_back(t);
        if (times.empty()) continue;
        std::int64_t kstar_steps = 0;  // every K of the search, every seed, over the ladder (roughly)
        for (auto t : times) kstar_steps += 3 * plan.seeds * t;
        TaskSpec spec;
        spec.kind = TaskKind::kstar;
        spec.label = fmt::format("kstar.{}.{}.{}", vp->name, dtype_name(dtype), cls);
        spec.group = vp->name;
        spec.cost = task_cost(*vp, dtype, kstar_steps, true, false);
        spec.key.variant = vp;
        spec.key.dtype = dtype;
        spec.key.cls = cls;
        spec.kstar_times = std::move(times);
        tasks.push_back(std::move(spec));
      }
}

}  // namespace

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

const std::vector<std::string>& campaign_classes() {
  static const std::vector<std::string> classes = {"init", "hard", "saturating", "h0", "packed"};
  return classes;
}

std::vector<std::string> campaign_variants() {
  std::vector<std::string> names;
  for (const Variant& v : all_variants()) names.push_back(v.name);
  return names;
}

std::vector<std::string> Plan::backends_at(std::int64_t time) const {
  std::vector<std::string> out;
  for (const std::string& b : backends)
    if (b != "cpu" || time <= cpu_max_t) out.push_back(b);
  return out;
}

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

bool judges_gradients(const Plan& plan, const Variant& v, DType dtype, std::int64_t time, const std::string& cls,
                      std::int64_t seed_index) {
  const bool dense = spec_of(v).jacobian != JacobianClass::per_channel;
  const std::int64_t max_t = dtype == DType::f64 && dense ? std::min(plan.gradient_max_t, plan.gradient_max_t_f64_dense)
                                                          : plan.gradient_max_t;
  if (dense && time > plan.gradient_dense_sampled_above_t && (cls != "init" || seed_index != 1)) return false;
  return time <= max_t && contains(plan.gradient_classes, cls);
}

std::string case_id(const CaseKey& k) {
  return fmt::format("{}.{}.T{}.{}.s{}", k.variant->name, dtype_name(k.dtype), k.time, k.cls, k.seed_index);
}

CampaignPlan make_plan(const CampaignOptions& options, std::int64_t host_cpus) {
  if (options.time_budget_s && !(*options.time_budget_s > 0.0))
    throw ContractViolation("--time-budget", "must be > 0 seconds", fmt::format("{}", *options.time_budget_s));
  if (options.jobs && *options.jobs < 1)
    throw ContractViolation("--jobs", "must be >= 1 (tasks run at once)", fmt::format("{}", *options.jobs));
  CampaignPlan p;
  const std::int64_t cpus = std::max<std::int64_t>(1, host_cpus);
  p.jobs = options.jobs.value_or(cpus);
  p.threads_per_job = static_cast<int>(std::max<std::int64_t>(1, cpus / p.jobs));
  Plan& plan = p.plan;
  plan.quick = options.quick;
  plan.external = options.external.has_value();
  resolve_variants(options, plan);
  resolve_dtypes(options, plan);
  resolve_backends(options, plan, p.skipped);
  choose_ladder(options, plan);
  apply_overrides(options, plan);
  for (std::int64_t s = 1; s <= plan.seeds; ++s) p.seed_list.push_back(static_cast<std::uint64_t>(s));
  record_plan_skips(plan, p.skipped);
  if (options.kstar_only && plan.external)
    throw ContractViolation("--kstar-only", "measures our solver's K*; an external solver (--solver) exposes no Newton iterations",
                            options.external->name);
  if (!options.kstar_only) plan_row_tasks(plan, p.tasks);
  plan_kstar_tasks(plan, p.tasks, p.skipped);
  return p;
}

Json solver_json(const ExternalSolver& s) {
  return {{"name", s.name}, {"version", s.version ? Json(*s.version) : Json(nullptr)}, {"command", s.command},
          {"version_command", s.version_command}, {"timeout_s", s.timeout_s}};
}

Json plan_json(const CampaignOptions& options, const CampaignPlan& p) {
  const Plan& plan = p.plan;
  const auto limit = [](std::int64_t v) { return v == kNoLimit ? Json(nullptr) : Json(v); };
  Json variant_names = Json::array();
  for (const Variant* v : plan.variants) variant_names.push_back(v->name);
  Json dtypes_json = Json::array();
  for (DType d : plan.dtypes) dtypes_json.push_back(dtype_name(d));
  Json j;
  j["quick"] = plan.quick;
  j["kstar_only"] = options.kstar_only;
  j["variants"] = variant_names;
  j["dtypes"] = dtypes_json;
  j["backends"] = plan.backends;
  j["cpu_max_T"] = limit(plan.cpu_max_t);
  j["requested_backends"] = options.external ? Json::array({"external"}) : Json(options.backends);
  j["times"] = plan.times;
  j["classes"] = plan.classes;
  j["seeds"] = plan.seeds;
  j["max_iters"] = options.max_iters ? Json(*options.max_iters) : Json("none");
  j["batch"] = plan.batch;
  j["d_in"] = plan.d_in;
  j["d_h"] = plan.d_h;
  j["certify_budget"] = plan.certify_budget;
  j["certify_budget_f64"] = plan.certify_budget_for(DType::f64);
  j["gradient_classes"] = plan.gradient_classes;
  j["gradient_max_T"] = plan.gradient_max_t;
  j["gradient_max_T_f64_dense"] = std::min(plan.gradient_max_t, plan.gradient_max_t_f64_dense);
  j["gradient_dense_sampled_above_T"] = limit(plan.gradient_dense_sampled_above_t);  // beyond: init, seed 1 (null: never)
  j["one_seed_from_T"] = limit(plan.one_seed_from_t);  // rows from this T: seed 1 only (null: every T has every seed)
  j["kstar_classes"] = plan.kstar_classes;
  j["kstar_max_T"] = plan.kstar_max_t;
  j["timing_repeats"] = plan.timing_repeats;
  j["timing_repeat_max_ms"] = plan.timing_repeat_max_ms;
  j["time_budget_s"] = options.time_budget_s ? Json(*options.time_budget_s) : Json(nullptr);
  if (options.external) j["solver"] = solver_json(*options.external);
  j["jobs"] = p.jobs;  // the timings were taken with this many tasks at once
  j["threads_per_job"] = p.jobs == 1 ? Json("openmp default") : Json(p.threads_per_job);
  return j;
}

}  // namespace pararnn::nightly
