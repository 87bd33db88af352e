// The oracle's public API and the double working type (the primary of f32, f16 and bf16 cases).
// The reading of cases lives in oracle_case.cpp, float128 in oracle_float128.cpp, certification
// in oracle_certify.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "oracle_math.hpp"
#include "pararnn/core/dtype.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn::reference {
namespace detail {

template class ChainRunner<double>;

namespace {

// The working type of the oracle for a storage dtype: at least twice the significand bits of
// the solver's compute type (CONTRACT §2).
template <class StorageT>
using PrimaryOf = std::conditional_t<std::is_same_v<ComputeOf<StorageT>, double>, Float128, double>;

template <class StorageT>
double exact_double(StorageT v) {
  if constexpr (std::is_same_v<StorageT, double> || std::is_same_v<StorageT, float>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));  // half and bfloat16 widen exactly
  }
}

bool all_finite(const Tensor& t) {
  const double* p = t.data_as<double>();
  return std::all_of(p, p + t.numel(), [](double v) { return std::isfinite(v); });
}

}  // namespace

void lift_x(const PreparedCase& problem, std::int64_t b, std::int64_t t0, std::int64_t count,
            double* out) {
  // x is a contiguous Tensor (B, T, d_in); its storage values widen exactly to double.
  const std::int64_t begin = (b * problem.time + t0) * problem.d_in;
  const std::int64_t n = count * problem.d_in;
  dispatch_float_dtype(problem.x.dtype(), [&]<class StorageT>() {
    const StorageT* p = problem.x.data_as<StorageT>() + begin;
    for (std::int64_t i = 0; i < n; ++i) out[i] = exact_double(p[i]);
  });
}

std::string describe_chain(const PreparedCase& problem, const ChainSpec& spec) {
  const RowChain& chain = problem.chains.at(static_cast<std::size_t>(spec.chain));
  std::string out = chain.segment >= 0 ? fmt::format("segment={}", chain.segment)
                                       : fmt::format("b={}", chain.b);
  if (spec.channel >= 0) out += fmt::format(",channel={}", spec.channel);
  return out;
}

}  // namespace detail

OracleStateShape oracle_state_shape(const Case& problem) {
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  return OracleStateShape{prepared.slots, prepared.d_h};
}

OracleResult oracle_sequential(const Case& problem, const OracleOptions& options) {
  if (options.certify_budget < 0) {
    throw ContractViolation("certify_budget", "must be >= 0",
                            std::to_string(options.certify_budget));
  }
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  OracleResult result;
  result.H = Tensor(DType::f64, prepared.trajectory_shape());
  double* H = result.H.data_as<double>();
  dispatch_float_dtype(prepared.dtype, [&]<class StorageT>() {
    using Primary = detail::PrimaryOf<StorageT>;
    static_assert(std::numeric_limits<Primary>::digits >=
                      2 * std::numeric_limits<ComputeOf<StorageT>>::digits,
                  "the oracle needs twice the significand bits of the solver's compute type");
    if constexpr (std::is_same_v<Primary, double>) {
      detail::unroll_rows<double>(prepared, H, options.poll);
    } else {
      detail::unroll_float128(prepared, H, options.poll);
    }
    result.type = detail::working_type_name<Primary>();
    result.digits = std::numeric_limits<Primary>::digits;
  });
  result.finite = detail::all_finite(result.H);
  if (options.certify) {
    detail::Certification c = detail::certify(prepared, H, options);
    result.certifier_type = std::move(c.certifier_type);
    result.certifier_digits = c.certifier_digits;
    result.self_check_delta = c.self_check_delta;
    result.certified_all_chains = c.all_chains;
    result.certified_chains = std::move(c.chains);
    result.certified_chain_steps = c.chain_steps;
  }
  return result;
}

OracleStep oracle_step_with_jacobian(const Case& problem, std::int64_t b, std::int64_t t,
                                     std::span<const double> h_prev) {
  const detail::PreparedCase prepared = detail::prepare_case(problem);
  if (b < 0 || b >= prepared.batch) {
    throw ContractViolation("b", fmt::format("must be in [0, {})", prepared.batch),
                            std::to_string(b));
  }
  if (t < 0 || t >= prepared.time) {
    throw ContractViolation("t", fmt::format("must be in [0, {})", prepared.time),
                            std::to_string(t));
  }
  if (static_cast<std::int64_t>(h_prev.size()) != prepared.state_size()) {
    throw ContractViolation(
        "h_prev", fmt::format("must hold slots*d_h = {} values", prepared.state_size()),
        std::to_string(h_prev.size()));
  }
  if (prepared.dtype == DType::f64) {
    return detail::step_with_jacobian_float128(prepared, b, t, h_prev);
  }
  return detail::step_with_jacobian<double>(prepared, b, t, h_prev);
}

}  // namespace pararnn::reference
