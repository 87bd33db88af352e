// The float128 working type (113-bit significand, libquadmath): the primary of f64 cases (full
// unroll and AD Jacobians) and the certifier of double primaries (its ChainRunner instance is
// used by oracle_certify.cpp).
#include <cmath>

#include "oracle_math.hpp"

namespace pararnn::reference::detail {

template class ChainRunner<Float128>;

void unroll_float128(const PreparedCase& problem, double* H, const std::function<void()>& poll) {
  unroll_rows<Float128>(problem, H, poll);
}

OracleStep step_with_jacobian_float128(const PreparedCase& problem, std::int64_t b,
                                       std::int64_t t, std::span<const double> h_prev) {
  return step_with_jacobian<Float128>(problem, b, t, h_prev);
}

std::vector<double> finite_difference_jacobian_float128(const PreparedCase& problem,
                                                        std::int64_t b, std::int64_t t,
                                                        std::span<const double> h_prev) {
  // ε = 2^-40: truncation ~ε² ≈ 1e-24 and rounding ~2^-113/ε ≈ 1e-22, both far below the
  // double the result is rounded to.
  return finite_difference_jacobian<Float128>(problem, b, t, h_prev,
                                              Float128(std::ldexp(1.0, -40)));
}

}  // namespace pararnn::reference::detail
