// Seeded inputs and the reference loop of the host-side benchmarks (pararnn_bench_newton,
// pararnn_bench_targets): x uniform in [-1, 1) from SplitMix64 (the same bits on every machine)
// as a pararnn tensor, and GRU-diag's sequential loop on 16 chains in a chosen precision, against
// which a benchmark checks what it timed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pararnn/cells/gru_diag.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn::bench {

// x [B, T, d_in] in `dtype` (drawn in f32, then rounded), uniform in [-1, 1).
inline Tensor uniform_input(std::int64_t B, std::int64_t T, std::int64_t d_in, std::uint64_t seed,
                            DType dtype = DType::f32) {
  Tensor x(DType::f32, {B, T, d_in});
  SplitMix64 rng(seed);
  float* p = x.data_as<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(rng.next() >> 40) * 0x1.0p-23f - 1.0f;
  return dtype == DType::f32 ? x : Tensor::converted(x, dtype);
}

// GRU-diag's sequential loop in Real (the production step, the state carried in Real) on 16
// chains spread over batch rows and channels, from W_x x [b][t][3·D + c] and the clamped
// recurrent values [k][c] of a B × T × D problem: visit(i, h) at every step, i being the step's
// index in a [b][t][c] trajectory and h the loop's state. Returns the number of chains walked.
template <class Real, class Visit>
std::int64_t walk_gru_chains(const std::vector<float>& wx, const std::vector<float>& rec, std::int64_t B,
                             std::int64_t T, std::int64_t D, Visit&& visit) {
  using Gru = cells::GruDiagMath;
  constexpr int G = Gru::kGates, R = Gru::kRecurrent;
  const std::int64_t chains = B * D, step = std::max<std::int64_t>(1, chains / 16);
  std::int64_t walked = 0;
  for (std::int64_t chain = 0; chain < chains; chain += step, ++walked) {
    const std::int64_t b = chain / D, c = (chain * 7 + 3) % D;
    Real r[R];
    for (int k = 0; k < R; ++k) r[k] = rec[static_cast<std::size_t>(k * D + c)];
    Real h = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      Real w[G];
      for (int g = 0; g < G; ++g) w[g] = wx[static_cast<std::size_t>((b * T + t) * G * D + g * D + c)];
      Real h_new;
      Gru::step(r, w, &h, &h_new, static_cast<Real*>(nullptr));
      h = h_new;
      visit(static_cast<std::size_t>((b * T + t) * D + c), static_cast<double>(h));
    }
  }
  return walked;
}

}  // namespace pararnn::bench
