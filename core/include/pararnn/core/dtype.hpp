// Storage dtypes of pararnn and their compute types, in one place.
//
// Guarantees: f64 computes in double; f32, f16 and bf16 compute in float (f16/bf16 are storage
// only). Host half types are Eigen's (`Eigen::half`, `Eigen::bfloat16`), which round to nearest
// even on narrowing. `dispatch_float_dtype` is the one dtype switch of the project:
//   dispatch_float_dtype(t.dtype(), [&]<class StorageT>() { run<StorageT>(t); });
#pragma once

#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "pararnn/core/errors.hpp"

namespace pararnn {

enum class DType : std::uint8_t { f64, f32, f16, bf16, i32, i64 };

std::size_t dtype_size(DType dtype);
// Short name: "f64", "f32", "f16", "bf16", "i32", "i64".
std::string_view dtype_name(DType dtype);
// safetensors name: "F64", "F32", "F16", "BF16", "I32", "I64".
std::string_view dtype_safetensors_name(DType dtype);
// Accepts the short names and the safetensors names (case-insensitive); `argument` names the
// caller's argument in the ContractViolation raised for anything else.
DType parse_dtype(std::string_view name, std::string_view argument = "dtype");
bool is_floating(DType dtype);

template <class StorageT>
struct StorageTraits;
template <>
struct StorageTraits<double> {
  using compute_type = double;
  static constexpr DType dtype = DType::f64;
};
template <>
struct StorageTraits<float> {
  using compute_type = float;
  static constexpr DType dtype = DType::f32;
};
template <>
struct StorageTraits<Eigen::half> {
  using compute_type = float;
  static constexpr DType dtype = DType::f16;
};
template <>
struct StorageTraits<Eigen::bfloat16> {
  using compute_type = float;
  static constexpr DType dtype = DType::bf16;
};
template <>
struct StorageTraits<std::int32_t> {
  using compute_type = std::int64_t;
  static constexpr DType dtype = DType::i32;
};
template <>
struct StorageTraits<std::int64_t> {
  using compute_type = std::int64_t;
  static constexpr DType dtype = DType::i64;
};

template <class StorageT>
using ComputeOf = typename StorageTraits<StorageT>::compute_type;

// Rounds a double to a floating storage type once, to nearest even. Eigen's half(double) and
// bfloat16(double) narrow through float and can round twice (1 + 2^-11 + 2^-40 becomes 1 in
// f16 instead of 1 + 2^-10); rounding to float with round-to-odd first makes the second
// rounding exact, because float carries more than 2p + 2 bits of both half types.
inline float round_to_odd_float(double value) {
  float f = static_cast<float>(value);
  if (!std::isfinite(f) || static_cast<double>(f) == value) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

template <class StorageT>
StorageT round_to_storage(double value) {
  if constexpr (std::is_same_v<StorageT, Eigen::half> ||
                std::is_same_v<StorageT, Eigen::bfloat16>) {
    return StorageT(round_to_odd_float(value));
  } else {
    static_assert(std::is_floating_point_v<StorageT>, "round_to_storage: floating types only");
    return static_cast<StorageT>(value);
  }
}

// Calls `f.template operator()<StorageT>()` for the floating dtypes; refuses integer dtypes.
template <class F>
decltype(auto) dispatch_float_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f64: return f.template operator()<double>();
    case DType::f32: return f.template operator()<float>();
    case DType::f16: return f.template operator()<Eigen::half>();
    case DType::bf16: return f.template operator()<Eigen::bfloat16>();
    default: break;
  }
  throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(dtype));
}

}  // namespace pararnn
