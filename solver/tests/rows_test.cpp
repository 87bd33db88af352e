// The solver's internal contracts of its families and rows (solver/src): what a Newton family is
// (newton/family.hpp, the NewtonFamily concept and its optional groups, taken whole) and what a
// FamilyBackend row serves (backends.hpp: declared capabilities, and the one refusal of a call a
// row cannot serve, naming the call, the row and the capability).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends.hpp"
#include "newton/family.hpp"

namespace pararnn {
namespace {

using detail::Capability;
using detail::FamilyBackend;

// The operations every family supplies, and nothing else.
struct MinimalFamily {
  SolveBackend backend() const { return SolveBackend::cpu; }
  std::string fallback_unit() const { return "unit"; }
  void zero_iterate() {}
  double evaluate(bool, bool) { return 0.0; }
  void iterate_from_residual() {}
  void update(double) {}
  void picard_guess(std::int64_t) {}
  std::int64_t sequential_fallback(double) { return 0; }
};
struct FusedFamily : MinimalFamily {
  bool fused() const { return true; }
  double evaluate_and_step(double) { return 0.0; }
  void commit_step() {}
};
// Half of the fused group: the driver would silently take the host-driven path.
struct HalfFusedFamily : MinimalFamily {
  bool fused() const { return true; }
};
struct NoFallbackFamily {
  SolveBackend backend() const { return SolveBackend::cpu; }
  std::string fallback_unit() const { return "unit"; }
  void zero_iterate() {}
  double evaluate(bool, bool) { return 0.0; }
  void iterate_from_residual() {}
  void update(double) {}
  void picard_guess(std::int64_t) {}
};
struct HalfOtherCoordinatesFamily : MinimalFamily {
  bool loop_residual_is_final() const { return false; }
};

static_assert(detail::NewtonFamily<MinimalFamily>);
static_assert(!detail::FusedStepFamily<MinimalFamily> && !detail::ResidualMaxFamily<MinimalFamily>);
static_assert(detail::NewtonFamily<FusedFamily> && detail::FusedStepFamily<FusedFamily>);
static_assert(!detail::NewtonFamily<HalfFusedFamily>);
static_assert(!detail::NewtonFamily<NoFallbackFamily>);
static_assert(!detail::NewtonFamily<HalfOtherCoordinatesFamily>);
static_assert(!detail::NewtonFamily<int>);

// Every CPU row serves the Newton solve, the sequential loop, training and max_residual, and no
// fused windowed launch (the CUDA per-channel row's alone).
TEST(FamilyRows, EveryCpuRowServesWhatItDeclares) {
  for (const JacobianClass family :
       {JacobianClass::per_channel, JacobianClass::dense, JacobianClass::linear_gu, JacobianClass::matrix_map}) {
    const FamilyBackend& row = detail::family_backend(family, detail::Backend::cpu);
    SCOPED_TRACE(row.name);
    for (const Capability c : {Capability::newton, Capability::sequential, Capability::training,
                               Capability::max_residual}) {
      EXPECT_TRUE(row.serves.has(c)) << detail::capability_name(c);
      EXPECT_NO_THROW(row.require(c, "the test"));
    }
    EXPECT_FALSE(row.serves.has(Capability::fused_windows));
  }
}

// A call a row does not serve is refused by one rule: UnsupportedPath naming the call, the row
// (its backend and family) and the capability, and what the row serves.
TEST(FamilyRows, ACallTheRowDoesNotServeIsRefusedNamingTheCallTheRowAndTheCapability) {
  const FamilyBackend row{.name = "cuda dense", .serves = {Capability::newton, Capability::training}};
  try {
    row.require(Capability::max_residual, "max_residual");
    FAIL() << "a row that does not serve max_residual must refuse it";
  } catch (const UnsupportedPath& e) {
    EXPECT_STREQ(e.what(), "max_residual: the cuda dense row does not serve max_residual (it serves: newton, training)");
  }
  const FamilyBackend none{.name = "cpu dense", .serves = {}};
  try {
    none.require(Capability::sequential, "sequential_apply");
    FAIL() << "a row that serves nothing must refuse";
  } catch (const UnsupportedPath& e) {
    EXPECT_STREQ(e.what(), "sequential_apply: the cpu dense row does not serve sequential (it serves: nothing)");
  }
}

}  // namespace
}  // namespace pararnn
