// iterate_growth (iterate_growth.hpp): planned as a solve (backends.hpp plan_solve), served by the
// row that declares it (the CPU per-channel row: its solver's growth pass along a given
// trajectory, gathered into named units and summarised).
#include "pararnn/solver/iterate_growth.hpp"

#include <fmt/format.h>

#include "backends.hpp"
#include "cpu/per_channel_solver.hpp"

namespace pararnn {

IterateGrowth iterate_growth(const Cell& cell, const TensorView& x, const TensorView& H, const ApplyOptions& options,
                             std::int64_t window) {
  detail::Plan plan = detail::plan_solve(cell, x, nullptr, ScanBackend::auto_select, options, "iterate_growth");
  plan.row.require(detail::Capability::iterate_growth, "iterate_growth");
  if (window < 1) throw ContractViolation("window", "must be >= 1", std::to_string(window));
  const Shape trajectory = cell.trajectory_shape(plan.layout.batch, plan.layout.time);
  if (H.shape() != trajectory)
    throw ContractViolation("H", fmt::format("must have the trajectory shape {}", shape_string(trajectory)),
                            shape_string(H.shape()));
  if (H.dtype() != cell.dtype())
    throw ContractViolation("H", fmt::format("dtype must be the cell's, {}", dtype_name(cell.dtype())),
                            dtype_name(H.dtype()));
  if (H.device() != Device::cpu)
    throw ContractViolation("H", "must be a host tensor, as x is", "a CUDA tensor");
  return plan.row.iterate_growth(cell, x, H, options, window, std::move(plan.layout));
}

namespace detail {

IterateGrowth cpu_iterate_growth(const Cell& cell, const TensorView& x, const TensorView& H,
                                 const ApplyOptions& options, std::int64_t window, Layout layout) {
  return dispatch_solver(cell, [&]<class CellMath, class StorageT>() {
    using Solver = CpuSolver<CellMath, StorageT>;
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

}  // namespace detail
}  // namespace pararnn
