// iterate_growth (iterate_growth.hpp): the CPU per-channel solver's growth pass along a given
// trajectory, gathered into named units and summarised.
#include "pararnn/solver/iterate_growth.hpp"

#include <fmt/format.h>

#include "cpu/per_channel_solver.hpp"

namespace pararnn {
namespace {
const char* jacobian_kind(JacobianClass j) {
  switch (j) {
    case JacobianClass::per_channel: return "per-channel";
    case JacobianClass::dense: return "dense";
    case JacobianClass::linear_gu: return "linear (G, U)";
    case JacobianClass::matrix_map: return "matrix-map";
  }
  return "unknown";
}
}  // namespace

IterateGrowth iterate_growth(const Cell& cell, const TensorView& x, const TensorView& H, const ApplyOptions& options,
                             std::int64_t window) {
  if (cell.spec().jacobian != JacobianClass::per_channel)
    throw UnsupportedPath(fmt::format("iterate_growth covers the per-channel cells; cell '{}' has a {} Jacobian",
                                      cell.name(), jacobian_kind(cell.spec().jacobian)));
  if (x.device() != Device::cpu || H.device() != Device::cpu)
    throw UnsupportedPath("iterate_growth needs host tensors (x and H): copy them to the host first");
  if (window < 1) throw ContractViolation("window", "must be >= 1", std::to_string(window));
  const detail::Layout layout = detail::check_inputs(cell, x, options, "iterate_growth");
  const Shape trajectory = cell.trajectory_shape(layout.batch, layout.time);
  if (H.shape() != trajectory)
    throw ContractViolation("H", fmt::format("must have the trajectory shape {}", shape_string(trajectory)),
                            shape_string(H.shape()));
  if (H.dtype() != cell.dtype())
    throw ContractViolation("H", fmt::format("dtype must be the cell's, {}", dtype_name(cell.dtype())),
                            dtype_name(H.dtype()));
  return detail::dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    using Solver = detail::CpuSolver<CellMath, StorageT>;
    using ComputeT = typename Solver::ComputeT;
    const Solver solver(cell, x, options, layout);
    const Tensor Hc = Tensor::converted(H, Solver::kComputeDType);
    const std::vector<ComputeT> h(Hc.data_as<ComputeT>(), Hc.data_as<ComputeT>() + Hc.numel());
    const auto raw = solver.growth(h, window);
    IterateGrowth out;
    out.method = Solver::S == 1 ? "exact log|J| per channel" : "Benettin per channel block";
    out.block = Solver::S;
    out.window = window;
    const std::int64_t D = layout.d_h;
    const auto per_row = static_cast<std::int64_t>(raw.size()) / layout.batch / D;
    out.units.reserve(raw.size());
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(raw.size()); ++i) {
      const auto& r = raw[static_cast<std::size_t>(i)];
      const std::int64_t c = i % D, chain = (i / D) % per_row, b = i / D / per_row;
      IterateGrowthUnit u{.chain = (layout.packed ? fmt::format("segment={}", chain) : fmt::format("b={}", b)) +
                                   fmt::format(",channel={}", c),
                          .steps = r.steps,
                          .exponent = r.exponent,
                          .stretch = r.stretch,
                          .guess_error = r.guess_error};
      if (out.finite && !r.bad.empty()) {
        out.finite = false;
        out.reason = fmt::format("{}: {}", u.chain, r.bad);
      }
      if (out.units.empty() || u.exponent > out.max_exponent) out.max_exponent = u.exponent;
      if (out.units.empty() || u.stretch > out.max_stretch) {
        out.max_stretch = u.stretch;
        out.max_stretch_chain = u.chain;
      }
      out.max_guess_error = std::max(out.max_guess_error, u.guess_error);
      out.units.push_back(std::move(u));
    }
    if (!out.finite) out.max_exponent = out.max_stretch = out.max_guess_error = 0.0;
    return out;
  });
}

}  // namespace pararnn
