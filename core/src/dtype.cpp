#include "pararnn/core/dtype.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace pararnn {

namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  std::string_view safetensors_name;
  std::string_view long_name;  // numpy / torch spelling
};

constexpr std::array<DTypeInfo, 6> kDTypes{{
    {DType::f64, 8, "f64", "F64", "float64"},
    {DType::f32, 4, "f32", "F32", "float32"},
    {DType::f16, 2, "f16", "F16", "float16"},
    {DType::bf16, 2, "bf16", "BF16", "bfloat16"},
    {DType::i32, 4, "i32", "I32", "int32"},
    {DType::i64, 8, "i64", "I64", "int64"},
}};

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypes.size()) {
    throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16, i32, i64",
                            std::to_string(index));
  }
  return kDTypes[index];
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors_name; }

DType parse_dtype(std::string_view name, std::string_view argument) {
  for (const DTypeInfo& entry : kDTypes) {
    if (equal_ignoring_case(name, entry.name) || equal_ignoring_case(name, entry.long_name)) {
      return entry.dtype;
    }
  }
  throw ContractViolation(argument, "must be one of f64, f32, f16, bf16, i32, i64", name);
}

bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::f32:
    case DType::f16:
    case DType::bf16: return true;
    case DType::i32:
    case DType::i64: return false;
  }
  return false;
}

}  // namespace pararnn
