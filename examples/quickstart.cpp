// The README's C++ example, compiled and run by ctest (test `readme_example`): make a cell and an
// input, solve with parallel Newton, and check the answer against the independent oracle.
#include <iostream>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/random.hpp"

int main() {
  using namespace pararnn;
  Cell cell = Cell::initialise({.cell = "gru", .d_in = 8, .d_h = 16}, DType::f32, /*seed=*/1);
  Tensor x(DType::f32, {2, 256, 8});
  SplitMix64 rng(7);
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal());

  NewtonStats stats;
  Tensor H = newton_apply(cell, x, NewtonConfig{}, {}, &stats);  // (2, 256, 16), f32
  AgreementReport report = verify_agreement(cell, x, {.seed = 1});
  std::cout << report.to_json().dump(2) << "\n";
  std::cout << "H " << shape_string(H.shape()) << " after " << stats.iters << " Newton iterations\n";
  return report.verdict == Verdict::agree ? 0 : 1;
}
