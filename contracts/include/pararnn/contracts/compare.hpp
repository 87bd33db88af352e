// One comparison of an actual tensor against an expected one, returning a value (never a bool):
// counts, the worst absolute and relative differences with their multi-index, ULP distance in
// the actual's dtype, NaN/Inf counts, and the first and last mismatches. Test messages,
// AgreementReport and nightly reports are renderings of a ComparisonResult.
//
// Rule (CONTRACT §2): element i passes iff |actual − expected| <= atol + rtol·|expected|; NaN or
// a non-finite difference never passes. Example:
//   ComparisonResult c = compare(H_solver, H_oracle, tolerance_for({.dtype = DType::f32}));
//   if (!c.ok()) std::cout << c.describe();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {

struct Mismatch {
  Shape index;
  double actual = 0.0;
  double expected = 0.0;
  double allowed = 0.0;
};

struct ComparisonResult {
  Shape shape;
  DType dtype = DType::f32;  // of the actual tensor
  Tolerance tolerance;
  std::int64_t count = 0;
  std::int64_t mismatches = 0;
  std::int64_t nan_count = 0;  // NaN in actual or expected
  std::int64_t inf_count = 0;
  double max_abs = 0.0;
  double max_rel = 0.0;
  double mean_abs = 0.0;
  double max_ulps = 0.0;  // in the actual's dtype
  Shape worst_abs_index;
  Shape worst_rel_index;
  double worst_actual = 0.0, worst_expected = 0.0, worst_allowed = 0.0;
  std::vector<Mismatch> first_mismatches;  // up to 5
  std::vector<Mismatch> last_mismatches;   // up to 5

  bool ok() const { return mismatches == 0 && count > 0; }
  // Self-sufficient failure text: mismatched count and share, greatest abs/rel difference with
  // index and allowed value, expected and actual in full precision and hexfloat, dtype, shape.
  std::string describe() const;
};

// `actual` and `expected` must have the same shape (any dtypes, host).
ComparisonResult compare(const TensorView& actual, const TensorView& expected,
                         const Tolerance& tolerance);

// The same dtype, shape and bytes (contiguous host tensors): CONTRACT §5's bitwise equivalences
// and the oracle memo's "same case" test. NaN payloads and infinities compare as their bits.
bool same_bits(const Tensor& a, const Tensor& b);

// The elements no result in `actual`'s storage dtype can hold: `expected` (the oracle's value,
// finite) rounds to ±inf in that dtype and `actual` is that same infinity (f16 gradients beyond
// 65504). `actual` and `expected` are then f64 copies with those elements set to 0, so that
// compare() judges the others as usual; `count` is 0 (and the copies empty) when there are none,
// always for f64. An element whose expected value is representable, or whose actual value is
// anything else there (finite, NaN, the other infinity), is left in and judged.
struct Unrepresentable {
  std::int64_t count = 0;
  double largest = 0.0;  // the largest |expected| among them
  Tensor actual, expected;
};
Unrepresentable split_unrepresentable(const Tensor& actual, const Tensor& expected);
// The same where the answer claims to reproduce the dtype `claimed` (an op case's storage dtype, a
// gradient's input's): an element is left out only when its expected value is beyond the range of
// `claimed` too, so that an answer written in a dtype of narrower range than it claims (f16 for an
// f32 or bf16 case) never has a value that `claimed` holds excused as that infinity. `claimed`
// f64 or not floating: nothing is left out.
Unrepresentable split_unrepresentable(const Tensor& actual, const Tensor& expected, DType claimed);

}  // namespace pararnn
