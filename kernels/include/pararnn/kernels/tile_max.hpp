// Per-tile maxima of |F| over a per-channel array on the GPU: the fallback units of the
// per-channel Newton family (a batch row × `tile` channels, solver/src/newton/family.hpp) without
// bringing F to the host.
//
// F is [b][r][c] (r < rows, e.g. rows = T·slots; c < channels, fastest). Tile k of row b is the
// channels [k·tile, min((k+1)·tile, channels)); tiles = ceil(channels / tile), units = batch ×
// tiles. The rows are split into `chunks` consecutive ranges (chunk j: [j·rows/chunks,
// (j+1)·rows/chunks)), one block each, so that a few units still fill the GPU:
//   out[(b·tiles + k)·chunks + j] = max over the unit's channels and chunk j's rows of |F|,
// 0 for an empty range. The caller takes the max over j.
//
// Guarantees: NaN ranks above every number (one NaN in a unit makes its maxima NaN); the result
// is deterministic; never allocates. cudaErrorInvalidValue for negative sizes, tile outside
// [1, 256], chunks < 1, or null arrays with a non-empty problem. Example:
//   TileMaxArgs<float> a{.F = d_F, .batch = 8, .rows = T, .channels = 256, .tile = 64, .chunks = 32,
//                        .out = d_out};  // d_out: 8 × 4 × 32 floats
//   cudaError_t e = launch_tile_max_abs(a, stream);
#pragma once

#include <cstdint>

#include "pararnn/kernels/launch.hpp"

namespace pararnn::kernels {

template <class T>
struct TileMaxArgs {
  const T* F = nullptr;
  std::int64_t batch = 0, rows = 0, channels = 0, tile = 64;
  std::int64_t chunks = 1;
  T* out = nullptr;  // batch × tiles × chunks
};

// Instantiated for float and double.
template <class T>
cudaError_t launch_tile_max_abs(const TileMaxArgs<T>& args, cudaStream_t stream);

}  // namespace pararnn::kernels
