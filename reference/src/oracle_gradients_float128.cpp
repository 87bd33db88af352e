// The float128 instances of the oracle's BPTT (oracle_gradient_math.hpp): the primary of f64
// cases and the certifier of double primaries; and the float128 central differences of the
// loss that the tests compare the gradients with.
#include "oracle_gradient_math.hpp"

namespace pararnn::reference::detail {

extern template class ChainRunner<Float128>;  // instantiated in oracle_float128.cpp

PARARNN_ORACLE_GRADIENT_TEMPLATES(, Float128)
PARARNN_ORACLE_PRIMARY_GRADIENT_TEMPLATES(, Float128)

namespace {

Float128 loss_float128(const PreparedCase& problem, std::span<const double> cotangent) {
  Float128 sum(0);
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(problem.chains.size()); ++c) {
    const RowChain& chain = problem.chains[static_cast<std::size_t>(c)];
    ChainRunner<Float128> runner(problem, {c, -1});
    while (runner.advance()) {
      const Float128* s = runner.state();
      for (std::int64_t slot = 0; slot < problem.slots; ++slot) {
        for (std::int64_t j = 0; j < problem.d_h; ++j) {
          const double g =
              cotangent.empty()
                  ? 1.0
                  : cotangent[static_cast<std::size_t>(problem.h_offset(chain.b, runner.time(), slot, j))];
          sum += Float128(g) * s[slot * problem.d_h + j];
        }
      }
    }
  }
  return sum;
}

}  // namespace

double central_difference_float128(const PreparedCase& plus, const PreparedCase& minus,
                                   std::span<const double> cotangent, double step) {
  return to_double(Float128((loss_float128(plus, cotangent) - loss_float128(minus, cotangent)) /
                            Float128(step)));
}

}  // namespace pararnn::reference::detail
