// CPU affine scans (see scan.hpp). The single-chunk path is the solver's hot loop: time outer,
// channels inner, so it vectorises over channels. The chunked path exists for time parallelism
// and is tested bitwise against the single-chunk path on exact inputs.
#include "pararnn/solver/scan.hpp"

#include <algorithm>
#include <vector>

#include "pararnn/cells/affine_monoid.hpp"
#include "pararnn/core/fault.hpp"

namespace pararnn {
namespace {

template <int S, class ComputeT>
cells::AffineElement<S, ComputeT> element_at(const ComputeT* J, const ComputeT* r,
                                             std::int64_t t, std::int64_t c, std::int64_t stride,
                                             bool head) {
  cells::AffineElement<S, ComputeT> e;
  for (int o = 0; o < S; ++o) {
    for (int i = 0; i < S; ++i)
      e.J[o * S + i] = head ? ComputeT(0) : J[(t * S * S + o * S + i) * stride + c];
    e.r[o] = r[(t * S + o) * stride + c];
  }
  return e;
}

// Whether step t starts a chain (J = 0 there): t = 0, or a head of the packing.
bool starts_chain(std::int64_t t, std::span<const std::uint8_t> heads) {
  return t == 0 || (!heads.empty() && heads[t] != 0 && !PARARNN_FAULT_POINT("head_jacobian_nonzero"));
}

// The scan's chunk length: all of `time` unless a shorter positive chunk_len is asked for.
std::int64_t chunk_of(std::int64_t chunk_len, std::int64_t time) {
  return chunk_len <= 0 || chunk_len >= time ? time : chunk_len;
}

}  // namespace

template <int S, class ComputeT>
void scan_affine(const ComputeT* J, ComputeT* r, const ScanShape& shape,
                 std::span<const std::uint8_t> heads) {
  const std::int64_t time = shape.time;
  const std::int64_t channels = shape.channels;
  const std::int64_t stride = shape.channel_stride > 0 ? shape.channel_stride : channels;
  if (time <= 1 || channels <= 0) return;
  auto is_head = [&](std::int64_t t) { return starts_chain(t, heads); };
  const std::int64_t chunk = chunk_of(shape.chunk_len, time);

  if (chunk == time) {
    // Sequential substitution, vectorised over channels: δ_t = r_t + Σ_k J_t[s][k] δ_{t−1}[k].
    for (std::int64_t t = 1; t < time; ++t) {
      if (is_head(t)) continue;  // J = 0: δ_t = r_t
      ComputeT* rt = r + t * S * stride;
      const ComputeT* rp = r + (t - 1) * S * stride;
      const ComputeT* Jt = J + t * S * S * stride;
      for (std::int64_t c = 0; c < channels; ++c) {
        ComputeT prev[S];
        for (int k = 0; k < S; ++k) prev[k] = rp[k * stride + c];
        for (int s = 0; s < S; ++s) {
          ComputeT acc = rt[s * stride + c];
          for (int k = 0; k < S; ++k) acc += Jt[(s * S + k) * stride + c] * prev[k];
          rt[s * stride + c] = acc;
        }
      }
    }
    return;
  }

  // Three phases per channel: chunk aggregates, carries, re-run from the carry.
  const std::int64_t n_chunks = (time + chunk - 1) / chunk;
  std::vector<cells::AffineElement<S, ComputeT>> aggregates(static_cast<std::size_t>(n_chunks));
  std::vector<ComputeT> carries(static_cast<std::size_t>(n_chunks * S));
  for (std::int64_t c = 0; c < channels; ++c) {
    for (std::int64_t q = 0; q < n_chunks; ++q) {
      const std::int64_t begin = q * chunk, end = std::min(time, begin + chunk);
      const bool cut = is_head(begin) || (q > 0 && PARARNN_FAULT_POINT("block_boundary_jacobian_zero"));
      auto acc = element_at<S>(J, r, begin, c, stride, cut);
      for (std::int64_t t = begin + 1; t < end; ++t)
        acc = cells::compose(element_at<S>(J, r, t, c, stride, is_head(t)), acc);
      aggregates[static_cast<std::size_t>(q)] = acc;
    }
    // The first chunk starts at t = 0, a head: its carry is never read.
    for (int s = 0; s < S; ++s) carries[static_cast<std::size_t>(s)] = ComputeT(0);
    for (std::int64_t q = 0; q + 1 < n_chunks; ++q)
      cells::apply(aggregates[static_cast<std::size_t>(q)], &carries[static_cast<std::size_t>(q * S)],
                   &carries[static_cast<std::size_t>((q + 1) * S)]);
    for (std::int64_t q = 0; q < n_chunks; ++q) {
      const std::int64_t begin = q * chunk, end = std::min(time, begin + chunk);
      ComputeT prev[S];
      const std::int64_t from = q > 0 && PARARNN_FAULT_POINT("scan_carry_off_by_one") ? q - 1 : q;
      for (int s = 0; s < S; ++s) prev[s] = carries[static_cast<std::size_t>(from * S + s)];
      for (std::int64_t t = begin; t < end; ++t) {
        ComputeT out[S];
        if (is_head(t) || (t == begin && q > 0 && PARARNN_FAULT_POINT("block_boundary_jacobian_zero"))) {
          for (int s = 0; s < S; ++s) out[s] = r[(t * S + s) * stride + c];
        } else {
          cells::apply(element_at<S>(J, r, t, c, stride, false), prev, out);
        }
        for (int s = 0; s < S; ++s) {
          r[(t * S + s) * stride + c] = out[s];
          prev[s] = out[s];
        }
      }
    }
  }
}

template <int S, class ComputeT>
void scan_aggregates(const ComputeT* J, const ComputeT* r, const ScanShape& shape, bool first_is_head,
                     ComputeT* out) {
  const std::int64_t stride = shape.channel_stride > 0 ? shape.channel_stride : shape.channels;
  for (std::int64_t c = 0; c < shape.channels; ++c) {
    auto acc = element_at<S>(J, r, 0, c, stride, first_is_head);
    for (std::int64_t t = 1; t < shape.time; ++t) acc = cells::compose(element_at<S>(J, r, t, c, stride, false), acc);
    std::copy(acc.J, acc.J + S * S, out + c * (S * S + S));
    std::copy(acc.r, acc.r + S, out + c * (S * S + S) + S * S);
  }
}

template <class ComputeT>
void scan_dense(const ComputeT* J, ComputeT* r, const DenseScanShape& shape,
                std::span<const std::uint8_t> heads) {
  const std::int64_t time = shape.time;
  const int n = static_cast<int>(shape.n);
  const std::int64_t stride = shape.r_stride > 0 ? shape.r_stride : shape.n;
  if (time <= 1 || n <= 0) return;
  const std::int64_t nn = shape.n * shape.n;
  auto is_head = [&](std::int64_t t) { return starts_chain(t, heads); };
  const std::int64_t chunk = chunk_of(shape.chunk_len, time);
  if (chunk == time) {
    // Sequential substitution: δ_t = J_t δ_{t−1} + r_t, in place on r (J = 0 at heads).
    for (std::int64_t t = 1; t < time; ++t) {
      if (is_head(t)) continue;
      cells::apply_dense(n, J + t * nn, r + t * stride, r + (t - 1) * stride, r + t * stride);
    }
    return;
  }
  // Three phases: chunk aggregates (J = 0 at heads), carries, re-run of each chunk from its carry.
  const std::int64_t n_chunks = (time + chunk - 1) / chunk;
  std::vector<ComputeT> agg_J(static_cast<std::size_t>(n_chunks * nn));
  std::vector<ComputeT> agg_r(static_cast<std::size_t>(n_chunks * n));
  std::vector<ComputeT> tmp_J(static_cast<std::size_t>(nn)), tmp_r(static_cast<std::size_t>(n));
  const std::vector<ComputeT> zero_J(static_cast<std::size_t>(nn), ComputeT(0));
  auto J_at = [&](std::int64_t t) { return is_head(t) ? zero_J.data() : J + t * nn; };
  for (std::int64_t q = 0; q < n_chunks; ++q) {
    const std::int64_t begin = q * chunk, end = std::min(time, begin + chunk);
    ComputeT* aJ = agg_J.data() + q * nn;
    ComputeT* ar = agg_r.data() + q * n;
    const bool cut = q > 0 && PARARNN_FAULT_POINT("block_boundary_jacobian_zero");
    std::copy(cut ? zero_J.data() : J_at(begin), (cut ? zero_J.data() : J_at(begin)) + nn, aJ);
    std::copy(r + begin * stride, r + begin * stride + n, ar);
    for (std::int64_t t = begin + 1; t < end; ++t) {
      cells::compose_dense(n, J_at(t), r + t * stride, aJ, ar, tmp_J.data(), tmp_r.data());
      std::copy(tmp_J.begin(), tmp_J.end(), aJ);
      std::copy(tmp_r.begin(), tmp_r.end(), ar);
    }
  }
  // The first chunk starts at t = 0, a head: its carry is never read.
  std::vector<ComputeT> carries(static_cast<std::size_t>(n_chunks * n), ComputeT(0));
  for (std::int64_t q = 0; q + 1 < n_chunks; ++q)
    cells::apply_dense(n, agg_J.data() + q * nn, agg_r.data() + q * n, carries.data() + q * n,
                       carries.data() + (q + 1) * n);
  for (std::int64_t q = 0; q < n_chunks; ++q) {
    const std::int64_t begin = q * chunk, end = std::min(time, begin + chunk);
    const std::int64_t from = q > 0 && PARARNN_FAULT_POINT("scan_carry_off_by_one") ? q - 1 : q;
    const ComputeT* prev = carries.data() + from * n;
    for (std::int64_t t = begin; t < end; ++t) {
      const bool cut = t == begin && q > 0 && PARARNN_FAULT_POINT("block_boundary_jacobian_zero");
      if (!is_head(t) && !cut) cells::apply_dense(n, J + t * nn, r + t * stride, prev, r + t * stride);
      prev = r + t * stride;
    }
  }
}

template void scan_dense<float>(const float*, float*, const DenseScanShape&, std::span<const std::uint8_t>);
template void scan_dense<double>(const double*, double*, const DenseScanShape&, std::span<const std::uint8_t>);

#define PARARNN_INSTANTIATE_SCAN(S, T)                                                               \
  template void scan_affine<S, T>(const T*, T*, const ScanShape&, std::span<const std::uint8_t>); \
  template void scan_aggregates<S, T>(const T*, const T*, const ScanShape&, bool, T*);
PARARNN_INSTANTIATE_SCAN(1, float)
PARARNN_INSTANTIATE_SCAN(1, double)
PARARNN_INSTANTIATE_SCAN(2, float)
PARARNN_INSTANTIATE_SCAN(2, double)
PARARNN_INSTANTIATE_SCAN(4, float)
PARARNN_INSTANTIATE_SCAN(4, double)
#undef PARARNN_INSTANTIATE_SCAN

}  // namespace pararnn
