// NewtonConfig validation and the K schedule (CONTRACT §4).
#include "pararnn/solver/newton_config.hpp"

#include <fmt/format.h>

#include <cmath>

namespace pararnn {

ScanBackend parse_scan_backend(std::string_view name) {
  if (name == "auto") return ScanBackend::auto_select;
  if (name == "eager") return ScanBackend::eager;
  if (name == "cpu") return ScanBackend::cpu;
  if (name == "cuda") return ScanBackend::cuda;
  throw ContractViolation("scan_backend", "must be one of auto, eager, cpu, cuda", name);
}

std::string_view scan_backend_name(ScanBackend backend) {
  switch (backend) {
    case ScanBackend::auto_select: return "auto";
    case ScanBackend::eager: return "eager";
    case ScanBackend::cpu: return "cpu";
    case ScanBackend::cuda: return "cuda";
  }
  return "?";
}

std::string_view solve_backend_name(SolveBackend backend) {
  switch (backend) {
    case SolveBackend::cpu: return "cpu";
    case SolveBackend::cuda: return "cuda";
    case SolveBackend::cpu_seq_parallel: return "cpu_seq_parallel";
    case SolveBackend::rwkv7_scan: return "rwkv7_scan";
    case SolveBackend::rwkv7_sequential: return "rwkv7_sequential";
    case SolveBackend::rwkv7_scan_cuda: return "rwkv7_scan_cuda";
  }
  return "?";
}

std::string_view solve_strategy_name(SolveStrategy strategy) {
  switch (strategy) {
    case SolveStrategy::host_driven: return "host_driven";
    case SolveStrategy::fused: return "fused";
    case SolveStrategy::sequential: return "sequential";
    case SolveStrategy::fused_windowed: return "fused_windowed";
    case SolveStrategy::mixed: return "mixed";
  }
  return "?";
}

std::string_view k_source_name(KSource source) {
  switch (source) {
    case KSource::max_iters: return "max_iters";
    case KSource::newton_iters_by_t: return "newton_iters_by_t";
    case KSource::table: return "table";
    case KSource::table_f64: return "table+2(f64)";
    case KSource::exact_scan: return "rwkv7 (linear: exact (G, U) scan, no Newton)";
  }
  return "?";
}

Coords parse_coords(std::string_view name) {
  if (name == "native") return Coords::native;
  if (name == "log") return Coords::log;
  throw ContractViolation("coords", "must be one of native, log", name);
}

std::string_view coords_name(Coords coords) { return coords == Coords::log ? "log" : "native"; }

double default_residual_atol(DType dtype) { return dtype == DType::f64 ? 1e-12 : 1e-5; }

std::optional<double> resolved_residual_atol(const NewtonConfig& config, DType dtype) {
  if (!config.residual_atol) return std::nullopt;
  if (*config.residual_atol == kDtypeDefaultAtol) return default_residual_atol(dtype);
  return config.residual_atol;
}

void validate(const NewtonConfig& config, const CellSpec& cell) {
  if (config.max_iters && *config.max_iters < 0)
    throw ContractViolation("max_iters", "must be >= 0 or unset (None)",
                            std::to_string(*config.max_iters));
  if (!(std::isfinite(config.omega) && config.omega > 0.0))
    throw ContractViolation("omega", "must be finite and > 0", fmt::format("{}", config.omega));
  if (config.residual_atol && *config.residual_atol != kDtypeDefaultAtol &&
      !(*config.residual_atol >= 0.0))
    throw ContractViolation("residual_atol", "must be >= 0 or unset",
                            fmt::format("{}", *config.residual_atol));
  if (config.residual_fail && !(*config.residual_fail >= 0.0))
    throw ContractViolation("residual_fail", "must be >= 0 or unset (None)",
                            fmt::format("{}", *config.residual_fail));
  if (config.k_max < 1)
    throw ContractViolation("k_max", "must be >= 1", std::to_string(config.k_max));
  if (config.picard_iters) {
    if (*config.picard_iters < 0)
      throw ContractViolation("picard_iters", "must be >= 0", std::to_string(*config.picard_iters));
    if (!cell.picard && cell.kind != CellKind::m2rnn)  // M2RNN: api.cpp refuses P >= 1
      throw ContractViolation("picard_iters", "is ParaSLSTM / ParaM2RNN only",
                              fmt::format("{} on {}", *config.picard_iters, cell.python_class));
  }
  if (config.picard_retry_atol && !(*config.picard_retry_atol >= 0.0))
    throw ContractViolation("picard_retry_atol", "must be >= 0 or unset (None)",
                            fmt::format("{}", *config.picard_retry_atol));
  if (config.picard_adapt.value_or(false) && !cell.picard)
    throw ContractViolation("picard_adapt", "is ParaSLSTM only (the cells with Picard passes)",
                            fmt::format("true on {}", cell.python_class));
  if (config.newton_backtrack && cell.kind != CellKind::m2rnn)
    throw ContractViolation("newton_backtrack", "is ParaM2RNN only",
                            fmt::format("true on {}", cell.python_class));
  if (config.coords == Coords::log && cell.kind != CellKind::slstm)
    throw ContractViolation("coords", "'log' is ParaSLSTM mix='diag' only",
                            fmt::format("log on {} mix='{}'", cell.python_class, cell.mix));
  if (!config.newton_iters_by_t.empty()) {
    if (config.max_iters)
      throw ContractViolation("newton_iters_by_t", "requires max_iters unset (None)",
                              fmt::format("max_iters={}", *config.max_iters));
    for (const auto& [t, k] : config.newton_iters_by_t) {
      if (t < 1)
        throw ContractViolation("newton_iters_by_t", "keys must be >= 1", std::to_string(t));
      if (k < 0)
        throw ContractViolation("newton_iters_by_t", "values must be >= 0",
                                fmt::format("{}: {}", t, k));
    }
  }
  if (config.window_len && *config.window_len < 1)
    throw ContractViolation("window_len", "must be >= 1 or unset", std::to_string(*config.window_len));
  if (config.chunk_len)
    throw ContractViolation("chunk_len", "was renamed window_len (NewtonConfig::window_len); set that instead",
                            std::to_string(*config.chunk_len));
}

bool picard_adapt_enabled(const NewtonConfig& config, const CellSpec& cell) {
  if (!cell.picard) return false;
  return config.picard_adapt.value_or(!config.picard_iters.has_value());
}

KResolution resolve_newton_iters(const NewtonConfig& config, const CellSpec& cell, DType dtype,
                                 std::int64_t time) {
  if (cell.jacobian == JacobianClass::linear_gu)  // RWKV-7: exact scan, no Newton (spec §1.10)
    return {0, false, KSource::exact_scan};
  if (config.max_iters) return {*config.max_iters, false, KSource::max_iters};
  if (!config.newton_iters_by_t.empty()) {
    // Left-step: the value at the largest key <= T; below every key, the smallest key's value.
    auto it = config.newton_iters_by_t.upper_bound(time);
    const std::int64_t k =
        it == config.newton_iters_by_t.begin() ? it->second : std::prev(it)->second;
    return {k, true, KSource::newton_iters_by_t};
  }
  std::int64_t table = cell.library_newton_iters;
  if (!cell.library_newton_table.empty()) {  // left-step, like newton_iters_by_t
    table = cell.library_newton_table.front().second;
    for (const auto& [t, k] : cell.library_newton_table)
      if (t <= time) table = k;
  }
  if (dtype == DType::f64) return {table + 2, true, KSource::table_f64};
  return {table, true, KSource::table};
}

}  // namespace pararnn
