// The sequential fallback of the CUDA families (newton/family.hpp: the same units as the CPU's),
// internal to the solver: which units are re-solved and how their sequential solution replaces
// them in the iterate.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/runtime.hpp"

namespace pararnn::detail::cuda {

// The sequential fallback of a CUDA family (newton/family.hpp: the same units as the CPU's).
// `unit_max` holds each of the units' max|F| at the last evaluation; units at or above `atol`
// (NaN included) are re-solved: `solve(target)` writes the sequential solution of the whole
// problem (`count` compute-type values) to `target`; it goes straight into H when every unit
// needs it, else into a scratch buffer from which `copy_unit(unit, scratch)` copies each flagged
// unit into H. Returns the number of units re-solved.
template <class ComputeT, class Solve, class CopyUnit>
std::int64_t replace_flagged_units(const std::vector<double>& unit_max, double atol, std::int64_t count,
                                   ComputeT* H, Solve&& solve, CopyUnit&& copy_unit) {
  const auto units = static_cast<std::int64_t>(unit_max.size());
  std::vector<std::int64_t> flagged;
  for (std::int64_t u = 0; u < units; ++u)
    if (!(unit_max[static_cast<std::size_t>(u)] < atol)) flagged.push_back(u);
  if (flagged.empty()) return 0;
  if (static_cast<std::int64_t>(flagged.size()) == units) {
    solve(H);
    return units;
  }
  DeviceBuffer scratch(checked_bytes(count, sizeof(ComputeT), "the fallback trajectory"), "the fallback trajectory");
  solve(scratch.as<ComputeT>());
  for (std::int64_t u : flagged) copy_unit(u, scratch.as<const ComputeT>());
  return static_cast<std::int64_t>(flagged.size());
}

// The same with the units' maxima taken on the host: `F` (the residual of the final iterate,
// `count` values on the device) is downloaded and `unit_of(i)` names element i's unit, of
// `units` in all (the dense and matrix-state families; the per-channel family reduces its tiles
// on the device, kernels/tile_max.hpp).
template <class ComputeT, class UnitOf, class Solve, class CopyUnit>
std::int64_t sequential_fallback_units(const DeviceBuffer& F, std::int64_t count, std::int64_t units,
                                       double atol, UnitOf&& unit_of, ComputeT* H, Solve&& solve,
                                       CopyUnit&& copy_unit) {
  std::vector<ComputeT> host(static_cast<std::size_t>(count));
  if (count > 0)
    copy_to_host(host.data(), F.get(), host.size() * sizeof(ComputeT));
  std::vector<double> unit_max(static_cast<std::size_t>(units), 0.0);
  for (std::int64_t i = 0; i < count; ++i) {
    double& m = unit_max[static_cast<std::size_t>(unit_of(i))];
    m = nan_max(m, std::abs(static_cast<double>(host[static_cast<std::size_t>(i)])));
  }
  return replace_flagged_units<ComputeT>(unit_max, atol, count, H, std::forward<Solve>(solve),
                                         std::forward<CopyUnit>(copy_unit));
}

}  // namespace pararnn::detail::cuda
