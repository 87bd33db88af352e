#include "cases.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <mutex>

#include "pararnn/core/random.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn::nightly::detail {
namespace {

constexpr double kSaturatingInputScale = 6.0;
constexpr double kInitialStateStd = 0.5;

// As make-case --h0-std draws it (sLSTM's normalizer n0 >= 0).
Tensor random_h0(const Cell& cell, DType dtype, std::int64_t batch, std::uint64_t case_seed) {
  SplitMix64 rng(case_seed ^ 0x5bd1e995ULL);
  Shape shape = {batch};
  for (std::int64_t e : cell.state_shape()) shape.push_back(e);
  Tensor h(dtype, shape);
  Tensor flat = h.reshaped({h.numel()});
  for (std::int64_t i = 0; i < flat.numel(); ++i) flat.store({i}, rng.normal(0.0, kInitialStateStd));
  if (cell.name() == "slstm")
    for (std::int64_t r = 0; r < batch; ++r)
      for (std::int64_t c = 0; c < cell.d_h(); ++c) h.store({r, 1, c}, std::abs(h.load({r, 1, c})));
  return h;
}

// Three segments of unequal length (one when T < 4).
Tensor three_segments(std::int64_t time) {
  std::vector<std::int64_t> bounds = {0};
  if (time >= 4) bounds.insert(bounds.end(), {time / 4, (3 * time) / 5});
  bounds.push_back(time);
  Tensor c(DType::i64, {static_cast<std::int64_t>(bounds.size())});
  for (std::size_t i = 0; i < bounds.size(); ++i) c.store({static_cast<std::int64_t>(i)}, static_cast<double>(bounds[i]));
  return c;
}

}  // namespace

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
  if (k.cls == "h0") b.h0 = random_h0(b.cell, k.dtype, batch, k.case_seed);
  if (k.cls == "packed") b.cu_seqlens = three_segments(k.time);
  return b;
}

NewtonConfig config_for(const std::string& backend, std::optional<std::int64_t> max_iters) {
  NewtonConfig config;
  config.scan_backend = parse_scan_backend(backend);
  config.max_iters = max_iters;
  return config;
}

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

Tensor ones_like_trajectory(const Cell& cell, const Tensor& H) {
  Tensor g(cell.dtype(), H.shape());
  Tensor flat = g.reshaped({g.numel()});
  for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0);
  return g;
}

}  // namespace pararnn::nightly::detail
