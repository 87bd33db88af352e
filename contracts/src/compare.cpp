// compare(): one pass over two tensors of the same shape, any strides and dtypes.
#include "pararnn/contracts/compare.hpp"
#include "pararnn/core/fault.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace pararnn {
namespace {

// Spacing of the actual's dtype at |v| (ULP), for the ULP column.
double ulp_of(DType dtype, double v) {
  const double a = std::abs(v);
  switch (dtype) {
    case DType::f64: return std::nextafter(a, INFINITY) - a;
    case DType::f32: {
      const float f = static_cast<float>(a);
      return static_cast<double>(std::nextafter(f, INFINITY) - f);
    }
    case DType::f16: return std::ldexp(1.0, std::max(std::ilogb(a == 0 ? 6.1e-5 : a), -14) - 10);
    case DType::bf16: return std::ldexp(1.0, std::ilogb(a == 0 ? 1.2e-38 : a) - 7);
    default: return 1.0;
  }
}

std::string hexfloat(double v) { return fmt::format("{:a}", v); }

}  // namespace

ComparisonResult compare(const TensorView& actual, const TensorView& expected,
                         const Tolerance& tolerance) {
  if (actual.shape() != expected.shape())
    throw ContractViolation("trajectory", "must have the shape " + shape_string(expected.shape()),
                            shape_string(actual.shape()));
  ComparisonResult r;
  r.shape = actual.shape();
  r.dtype = actual.dtype();
  r.tolerance = tolerance;
  const Tensor a = Tensor::converted(actual, DType::f64);
  const Tensor e = Tensor::converted(expected, DType::f64);
  const double* pa = a.data_as<double>();
  const double* pe = e.data_as<double>();
  const std::int64_t n = a.numel();
  const Shape strides = contiguous_strides(r.shape);
  auto unravel = [&](std::int64_t flat) {
    Shape index(r.shape.size());
    for (std::size_t d = 0; d < index.size(); ++d) {
      index[d] = flat / strides[d];
      flat %= strides[d];
    }
    return index;
  };
  double scale_floor = 0.0;  // RMS of the expected tensor, when the tolerance asks for it
  if (tolerance.relative_to_rms && n > 0) {
    double sum_sq = 0.0;
    for (std::int64_t i = 0; i < n; ++i)
      if (std::isfinite(pe[i])) sum_sq += pe[i] * pe[i];
    scale_floor = std::sqrt(sum_sq / static_cast<double>(n));
  }
  auto allowed_at = [&](double expected) {
    return tolerance.atol + tolerance.rtol * std::max(std::abs(expected), scale_floor);
  };
  std::int64_t worst_abs = -1, worst_rel = -1;
  double sum_abs = 0.0;
  std::vector<std::int64_t> last;
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = pa[i], y = pe[i];
    const double diff = std::abs(x - y);
    // Fault point (faults builds only): the band anchored on the judged value instead of the reference.
    const double allowed = allowed_at(PARARNN_FAULT_POINT("band_anchored_on_actual") ? x : y);
    ++r.count;
    if (std::isnan(x) || std::isnan(y)) ++r.nan_count;
    if (std::isinf(x) || std::isinf(y)) ++r.inf_count;
    const bool pass = std::isfinite(diff) && diff <= allowed;
    const double diff_or_inf = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
    if (worst_abs < 0 || diff_or_inf > r.max_abs) {
      r.max_abs = diff_or_inf;
      worst_abs = i;
    }
    const double rel = diff_or_inf / std::max(std::abs(y), std::numeric_limits<double>::min());
    if (worst_rel < 0 || rel > r.max_rel) {
      r.max_rel = rel;
      worst_rel = i;
    }
    if (std::isfinite(diff)) {
      sum_abs += diff;
      r.max_ulps = std::max(r.max_ulps, diff / ulp_of(r.dtype, y));
    }
    if (!pass) {
      ++r.mismatches;
      if (r.first_mismatches.size() < 5) r.first_mismatches.push_back({unravel(i), x, y, allowed});
      last.push_back(i);
      if (last.size() > 5) last.erase(last.begin());
    }
  }
  for (std::int64_t i : last)
    r.last_mismatches.push_back(
        {unravel(i), pa[i], pe[i], allowed_at(pe[i])});
  r.mean_abs = n > 0 ? sum_abs / static_cast<double>(n) : 0.0;
  if (worst_abs >= 0) {
    r.worst_abs_index = unravel(worst_abs);
    r.worst_actual = pa[worst_abs];
    r.worst_expected = pe[worst_abs];
    r.worst_allowed = allowed_at(pe[worst_abs]);
  }
  if (worst_rel >= 0) r.worst_rel_index = unravel(worst_rel);
  return r;
}

std::string ComparisonResult::describe() const {
  auto idx = [](const Shape& s) { return shape_string(s); };
  std::string out = fmt::format(
      "{} of {} elements ({:.4g}%) outside |actual - expected| <= {:g} + {:g}*{} "
      "(tolerance: {}).\n"
      "Greatest absolute difference: {:.9g} at index {} (allowed {:.9g}).\n"
      "Greatest relative difference: {:.9g} at index {}.\n"
      "  expected {:.17g} ({})\n  actual   {:.17g} ({})\n"
      "dtype {}, shape {}, NaN {}, Inf {}, max ULPs {:.4g}.",
      mismatches, count, count ? 100.0 * static_cast<double>(mismatches) / static_cast<double>(count) : 0.0,
      tolerance.atol, tolerance.rtol, tolerance.relative_to_rms ? "max(|expected|, rms(expected))" : "|expected|",
      tolerance.source, max_abs, idx(worst_abs_index),
      worst_allowed, max_rel, idx(worst_rel_index), worst_expected, hexfloat(worst_expected),
      worst_actual, hexfloat(worst_actual), dtype_name(dtype), idx(shape), nan_count, inf_count,
      max_ulps);
  if (!first_mismatches.empty()) {
    out += "\nFirst mismatches:";
    for (const auto& m : first_mismatches)
      out += fmt::format("\n  {} actual {:.9g} expected {:.9g} allowed {:.3g}", idx(m.index),
                         m.actual, m.expected, m.allowed);
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

Unrepresentable split_unrepresentable(const Tensor& actual, const Tensor& expected) {
  return split_unrepresentable(actual, expected, actual.dtype());
}

Unrepresentable split_unrepresentable(const Tensor& actual, const Tensor& expected, DType claimed) {
  Unrepresentable u;
  if (actual.dtype() == DType::f64 || !is_floating(actual.dtype()) || claimed == DType::f64 || !is_floating(claimed) ||
      actual.shape() != expected.shape())
    return u;
  const auto beyond_claimed = [claimed](double v) {
    return dispatch_float_dtype(claimed, [&]<class ClaimedT>() {
      return std::isinf(static_cast<double>(round_to_storage<ClaimedT>(v)));
    });
  };
  std::vector<double> a = actual.to_f64_vector(), e = expected.to_f64_vector();
  dispatch_float_dtype(actual.dtype(), [&]<class StorageT>() {
    for (std::size_t i = 0; i < e.size(); ++i) {
      if (!std::isfinite(e[i])) continue;  // a non-finite expected value is never excused here
      const double rounded = static_cast<double>(round_to_storage<StorageT>(e[i]));
      if (!std::isinf(rounded) || a[i] != rounded || !beyond_claimed(e[i])) continue;
      ++u.count;
      u.largest = std::max(u.largest, std::abs(e[i]));
      a[i] = e[i] = 0.0;
    }
  });
  if (u.count > 0) {
    u.actual = Tensor::from_values(DType::f64, actual.shape(), a);
    u.expected = Tensor::from_values(DType::f64, expected.shape(), e);
  }
  return u;
}

}  // namespace pararnn
