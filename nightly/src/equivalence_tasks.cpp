// The equivalences of CONTRACT §5 the campaign checks: packed = per sequence and GPU = CPU at
// the contract's τ, strided = contiguous and recompute = stored bitwise on the same backend.
#include <fmt/format.h>

#include <cmath>

#include "cases.hpp"
#include "pararnn/solver/training.hpp"
#include "tasks.hpp"

namespace pararnn::nightly::detail {
namespace {

using Json = nlohmann::ordered_json;

// CONTRACT §5: strided ≡ contiguous and recompute ≡ stored are bitwise on the same backend.
const Tolerance kBitwise{.atol = 0.0, .rtol = 0.0, .source = "bitwise (CONTRACT §5)"};

Tolerance trajectory_tau(const CaseKey& key, const std::string& backend) {
  return tolerance_for({.dtype = key.dtype, .metric = Metric::trajectory, .cell = key.variant->cell, .backend = backend});
}

// Each segment of a packed case solved alone from the zero state, laid out as the packed H
// (exact in f64), with the packed solve's Picard passes.
Tensor segments_alone(const BuiltCase& built, NewtonConfig config, const Tensor& packed, const NewtonStats& stats,
                      std::int64_t time) {
  // K and sLSTM's Picard passes resolve on the packed length N (CONTRACT §4).
  if (stats.picard_iters > 0) config.picard_iters = stats.picard_iters;
  std::vector<double> alone_values(static_cast<std::size_t>(packed.numel()));
  const std::int64_t per_step = packed.numel() / time;
  const TensorView cu = built.cu_seqlens->view();
  for (std::int64_t s = 0; s + 1 < cu.numel(); ++s) {
    const auto a = static_cast<std::int64_t>(cu.load({s})), z = static_cast<std::int64_t>(cu.load({s + 1}));
    const Tensor seg = newton_apply(built.cell, Tensor::copy_of(built.x.view().slice(1, a, z)), config);
    const std::vector<double> values = seg.to_f64_vector();
    std::copy(values.begin(), values.end(), alone_values.begin() + a * per_step);
  }
  return Tensor::from_values(DType::f64, packed.shape(), alone_values);
}

// x read through a time-skipping view of a tensor twice as long whose skipped steps are NaN.
Tensor with_nan_between_steps(const Tensor& x, DType dtype) {
  const Shape& shape = x.shape();
  Tensor wide(dtype, {shape[0], 2 * shape[1], shape[2]});
  for (std::int64_t b = 0; b < shape[0]; ++b)
    for (std::int64_t t = 0; t < shape[1]; ++t)
      for (std::int64_t i = 0; i < shape[2]; ++i) {
        wide.store({b, 2 * t, i}, x.load({b, t, i}));
        wide.store({b, 2 * t + 1, i}, NAN);  // never read: a strided read that strays shows
      }
  return wide;
}

}  // namespace

Json equivalence_header(const TaskSpec& spec, const std::string& name) {
  const CaseKey& key = spec.key;
  return {{"id", spec.label}, {"name", name}, {"variant", key.variant->name}, {"dtype", dtype_name(key.dtype)},
          {"backend", spec.backend}, {"T", key.time}, {"class", key.cls}, {"seed", key.seed_index}};
}

void record_comparison(Json& e, const ComparisonResult& c, const Tolerance& tau, bool identical_bytes) {
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
  e["worst_index"] = Json(c.worst_abs_index);
  e["tolerance_source"] = tau.source;
}

void record_error(Json& e, const std::exception& ex) {
  e["verdict"] = reports::kOutcomeError;
  e["max_abs"] = nullptr;
  e["atol"] = nullptr;
  e["error"] = ex.what();
}

void record_row_error(Json& row, const std::string& error_type, const std::string& message) {
  row["outcome"] = std::string(reports::kOutcomeError);
  row["error_type"] = error_type;
  row["error"] = message;
}

namespace {

// Appends the equivalence `name` of `spec` to `out`, its figures recorded by `judge(e)`. An
// exception is an Error entry, except UnsupportedPath when `unsupported_skips`: the path does not
// exist on this backend, so the equivalence is listed under skipped with the reason, never passed.
template <class Judge>
void run_equivalence(const TaskSpec& spec, const std::string& name, bool unsupported_skips, TaskOutput& out,
                     Judge&& judge) {
  Json e = equivalence_header(spec, name);
  try {
    judge(e);
  } catch (const UnsupportedPath& ex) {
    if (!unsupported_skips) {
      record_error(e, ex);
    } else {
      out.skipped.push_back({{"what", spec.label}, {"reason", ex.what()}});
      return;
    }
  } catch (const std::exception& ex) {
    record_error(e, ex);
  }
  out.equivalences.push_back(std::move(e));
}

// H and every gradient with recompute = true against false: the worst tensor, bitwise, and
// whether every tensor holds the same bytes with no NaN.
void compare_recompute(const BuiltCase& built, const NewtonConfig& stored, Json& e) {
  NewtonConfig recompute = stored;
  recompute.recompute = true;
  const NewtonForward fa = newton_forward(built.cell, built.x, stored, built.apply());
  const NewtonForward fb = newton_forward(built.cell, built.x, recompute, built.apply());
  const Tensor g = ones_like_trajectory(built.cell, fa.H);
  const NewtonGradients ga = newton_backward(built.cell, built.x, fa, g, stored, built.apply());
  const NewtonGradients gb = newton_backward(built.cell, built.x, fb, g, recompute, built.apply());
  ComparisonResult worst = compare(fb.H, fa.H, kBitwise);
  std::string worst_name = "H";
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
}

}  // namespace

void run_packed_vs_per_sequence(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const BuiltCase built = build_case(ctx.plan, spec.key);
  run_equivalence(spec, "packed_vs_per_sequence", /*unsupported_skips=*/false, out, [&](Json& e) {
    const NewtonConfig config = config_for(spec.backend, ctx.options.max_iters);
    NewtonStats stats;
    const Tensor packed = newton_apply(built.cell, built.x, config, built.apply(), &stats);
    const Tensor alone = segments_alone(built, config, packed, stats, spec.key.time);
    const Tolerance tau = trajectory_tau(spec.key, spec.backend);
    record_comparison(e, compare(packed, alone, tau), tau);
  });
}

void run_strided_vs_contiguous(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const BuiltCase built = build_case(ctx.plan, spec.key);
  run_equivalence(spec, "strided_vs_contiguous", /*unsupported_skips=*/true, out, [&](Json& e) {
    const Tensor wide = with_nan_between_steps(built.x, spec.key.dtype);
    const NewtonConfig config = config_for(spec.backend, ctx.options.max_iters);
    const Tensor strided = newton_apply(built.cell, wide.view().slice(1, 0, 2 * built.x.size(1), 2), config, built.apply());
    const Tensor contiguous = newton_apply(built.cell, built.x, config, built.apply());
    record_comparison(e, compare(strided, contiguous, kBitwise), kBitwise, same_bits(strided, contiguous));
  });
}

void run_recompute_vs_stored(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  if (gradient_unsupported(*spec.key.variant, spec.key.dtype, spec.backend, ctx.plan)) return;  // recorded on the row
  const BuiltCase built = build_case(ctx.plan, spec.key);
  run_equivalence(spec, "recompute_vs_stored", /*unsupported_skips=*/true, out, [&](Json& e) {
    compare_recompute(built, config_for(spec.backend, ctx.options.max_iters), e);
  });
}

void run_gpu_vs_cpu(const TaskSpec& spec, const TaskContext& ctx, TaskOutput& out) {
  const BuiltCase built = build_case(ctx.plan, spec.key);
  run_equivalence(spec, "gpu_vs_cpu", /*unsupported_skips=*/true, out, [&](Json& e) {
    const Tensor on_gpu = newton_apply(built.cell, built.x, config_for("cuda", ctx.options.max_iters), built.apply());
    const Tensor on_cpu = newton_apply(built.cell, built.x, config_for("cpu", ctx.options.max_iters), built.apply());
    const Tolerance tau = trajectory_tau(spec.key, "cuda");
    record_comparison(e, compare(on_gpu, on_cpu, tau), tau);
  });
}

}  // namespace pararnn::nightly::detail
