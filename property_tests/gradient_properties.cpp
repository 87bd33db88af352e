// The training claim: the production adjoint agrees with the oracle's BPTT (automatic
// differentiation through the high-precision sequential unroll) within the contract's gradient
// tolerances, for every cell and dtype, over shapes, seeds, weight scales and initial states, on
// the backend under test (backend.hpp).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <limits>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/agreement.hpp"

namespace pararnn {
namespace {

using testing::gen_problem;

constexpr std::int64_t kCertifyBudget = 20'000;  // a property run makes hundreds of cases

RC_GTEST_PROP(Gradients, AdjointAgreesWithOracleBptt, ()) {
  const auto p = *gen_problem(400, testing::backend_cells(testing::kPerChannelCellLabels),
                              {DType::f64, DType::f32, DType::f16, DType::bf16});
  RC_TAG(std::string(dtype_name(p.dtype)));
  RC_CLASSIFY(p.weight_std && !p.clamped, "hard weights");
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const auto h0 = p.make_h0(cell.slots());
  VerifyOptions options{.seed = p.seed, .certify_budget = kCertifyBudget, .gradients = true};
  options.config.scan_backend = testing::kTestBackend;
  if (h0) options.h0 = h0->view();
  const AgreementReport r = verify_agreement(cell, x, options);
  // A true gradient beyond the storage dtype's range (f16 max 65504; Σ over T of an sLSTM's
  // growing slots reaches it) cannot be represented by any implementation: not a claim to test.
  const double max_finite = p.dtype == DType::f16 ? 65504.0 : std::numeric_limits<double>::max();
  for (const auto& gc : r.gradients)
    if (std::abs(gc.comparison.worst_expected) > max_finite) RC_DISCARD("gradient beyond the dtype's range");
  if (r.verdict != Verdict::agree)
    RC_FAIL(p.describe() + "\n" + r.failure_message() +
            testing::save_failure_artifacts(p, "gradients", NewtonConfig{}) + " --grad");
  RC_ASSERT(r.gradients.size() >= cell.parameters().size() + 1);
}

TEST(Gradients, CustomCotangentIsHonoured) {
  // A cotangent on one element only: the oracle and the adjoint must agree on that loss too.
  const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4}, DType::f32, 2);
  testing::GeneratedProblem p{.cell = "lstm", .dtype = DType::f32, .batch = 2, .time = 30, .d_in = 3, .d_h = 4, .seed = 9};
  const Tensor x = p.make_input();
  Tensor g(DType::f32, cell.trajectory_shape(2, 30));
  g.store({1, 17, 1, 2}, 1.0);
  VerifyOptions options{.gradients = true, .grad_H = g.view()};
  options.config.scan_backend = testing::kTestBackend;
  const AgreementReport r = verify_agreement(cell, x, options);
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
}

}  // namespace
}  // namespace pararnn
