// The wrong code paths that some fault points of the CPU backend switch to (core/fault.hpp,
// property_tests/faults/catalog.json): each is a model of a bug a real solver has had, kept
// beside the backend so that the injection point in the production file stays one line. Only a
// faults build (PARARNN_FAULTS=ON) reaches them; in a production build the guarding condition is
// the constant false.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/solver/scan.hpp"

namespace pararnn::detail {

// Fault "bf16_scan_arithmetic": the affine scan of scan_affine (single chunk) with every
// product and sum rounded to the storage type `StorageT` instead of computed in ComputeT.
template <int S, class StorageT, class ComputeT>
void scan_affine_rounded(const ComputeT* J, ComputeT* r, const ScanShape& shape,
                         std::span<const std::uint8_t> heads) {
  const std::int64_t stride = shape.channel_stride > 0 ? shape.channel_stride : shape.channels;
  const auto round = [](ComputeT v) { return static_cast<ComputeT>(static_cast<StorageT>(v)); };
  for (std::int64_t t = 0; t < shape.time; ++t)
    for (std::int64_t c = 0; c < shape.channels; ++c) {
      const bool head = t == 0 || (!heads.empty() && heads[static_cast<std::size_t>(t)] != 0);
      ComputeT out[S];
      for (int s = 0; s < S; ++s) {
        ComputeT acc = round(r[(t * S + s) * stride + c]);
        if (!head)
          for (int k = 0; k < S; ++k)
            acc = round(acc + round(round(J[(t * S * S + s * S + k) * stride + c]) * r[((t - 1) * S + k) * stride + c]));
        out[s] = acc;
      }
      for (int s = 0; s < S; ++s) r[(t * S + s) * stride + c] = out[s];
    }
}

// Fault "clamp_skipped": Cell::channel_values without the App. C.1 clamp of the recurrent entries.
inline std::vector<double> unclamped_channel_values(const Cell& cell) {
  std::vector<double> out = cell.channel_values();
  const auto& entries = cell.spec().recurrent;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const Tensor& t = cell.parameter(std::string(entries[k].tensor));
    for (std::int64_t c = 0; c < cell.d_h(); ++c)
      out[k * static_cast<std::size_t>(cell.d_h()) + static_cast<std::size_t>(c)] =
          entries[k].row < 0 ? t.load({c}) : t.load({entries[k].row, c});
  }
  return out;
}

// Fault "stale_h0_recompute": the options of a re-solve that lost the caller's h0.
inline ApplyOptions without_h0(ApplyOptions options) {
  options.h0.reset();
  return options;
}

}  // namespace pararnn::detail
