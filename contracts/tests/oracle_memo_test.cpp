// OracleMemo: verify_agreement calls on one case share one oracle run and judge exactly as
// without the memo; a key is never reused for another case; entries go once their users are done.
#include <gtest/gtest.h>

#include <thread>

#include "pararnn/cells/cell.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/oracle_memo.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {
namespace {

struct Problem {
  Cell cell;
  Tensor x;
};
Problem make_problem(std::uint64_t seed) {
  return {Cell::initialise({.cell = "gru", .d_in = 4, .d_h = 8}, DType::f32, seed),
          generated_case_input(DType::f32, 2, 256, 4, seed + 1)};
}

const VerifyOptions kSeeded{.seed = 5};

JudgeHooks with_memo(OracleMemo& memo, const std::string& key, std::int64_t uses) {
  return {.oracle_memo = &memo, .oracle_key = key, .oracle_uses = uses};
}

TEST(OracleMemo, TwoCallsShareOneOracleRunAndJudgeAsWithoutIt) {
  const Problem p = make_problem(1);
  VerifyOptions plain;
  plain.seed = 5;
  const AgreementReport alone = verify_agreement(p.cell, p.x, plain);
  OracleMemo memo;
  const AgreementReport first = verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 2));
  EXPECT_EQ(memo.live(), 1u);  // one user still to come
  const AgreementReport second = verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 2));
  EXPECT_EQ(memo.computed(), 1);
  EXPECT_EQ(memo.reused(), 1);
  EXPECT_EQ(memo.live(), 0u);
  for (const AgreementReport* r : {&first, &second}) {
    EXPECT_EQ(r->verdict, alone.verdict);
    EXPECT_EQ(r->max_abs, alone.max_abs);
    EXPECT_EQ(r->sequential_max_abs, alone.sequential_max_abs);
    EXPECT_EQ(r->self_check_delta, alone.self_check_delta);
  }
}

TEST(OracleMemo, GradientsAreSharedTooAndJudgedAsWithoutIt) {
  const Problem p = make_problem(1);
  VerifyOptions plain;
  plain.seed = 5;
  plain.gradients = true;
  const AgreementReport alone = verify_agreement(p.cell, p.x, plain);
  OracleMemo memo;
  VerifyOptions vo = kSeeded;
  vo.gradients = true;
  const AgreementReport first = verify_agreement(p.cell, p.x, vo, with_memo(memo, "case", 2));
  const AgreementReport second = verify_agreement(p.cell, p.x, vo, with_memo(memo, "case", 2));
  EXPECT_EQ(memo.computed(), 2);  // the trajectory and the gradients, once each
  EXPECT_EQ(memo.reused(), 2);
  EXPECT_EQ(memo.live(), 0u);
  ASSERT_FALSE(alone.gradients.empty());
  for (const AgreementReport* r : {&first, &second}) {
    EXPECT_EQ(r->verdict, alone.verdict);
    EXPECT_EQ(r->gradient_self_check_delta, alone.gradient_self_check_delta);
    ASSERT_EQ(r->gradients.size(), alone.gradients.size());
    for (std::size_t i = 0; i < alone.gradients.size(); ++i) {
      EXPECT_EQ(r->gradients[i].name, alone.gradients[i].name);
      EXPECT_EQ(r->gradients[i].comparison.max_abs, alone.gradients[i].comparison.max_abs) << alone.gradients[i].name;
    }
  }
}

TEST(OracleMemo, AKeyBoundToOneCaseRefusesAnother) {
  const Problem a = make_problem(1), b = make_problem(2);
  OracleMemo memo;
  (void)verify_agreement(a.cell, a.x, kSeeded, with_memo(memo, "case", 2));
  EXPECT_THROW((void)verify_agreement(b.cell, b.x, kSeeded, with_memo(memo, "case", 2)), Error);
  // Same case, other oracle options: refused too.
  OracleMemo memo2;
  (void)verify_agreement(a.cell, a.x, kSeeded, with_memo(memo2, "case", 2));
  VerifyOptions other_seed = kSeeded;
  other_seed.seed = 6;
  EXPECT_THROW((void)verify_agreement(a.cell, a.x, other_seed, with_memo(memo2, "case", 2)), Error);
}

TEST(OracleMemo, ConcurrentCallsComputeOnce) {
  const Problem p = make_problem(3);
  OracleMemo memo;
  AgreementReport r1, r2;
  {
    std::jthread t1([&] { r1 = verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 2)); });
    std::jthread t2([&] { r2 = verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 2)); });
  }
  EXPECT_EQ(memo.computed(), 1);
  EXPECT_EQ(memo.reused(), 1);
  EXPECT_EQ(memo.live(), 0u);
  EXPECT_EQ(r1.max_abs, r2.max_abs);
}

TEST(OracleMemo, AUserThatStopsBeforeTheOracleStillReleasesTheEntry) {
  const Problem p = make_problem(4);
  OracleMemo memo;
  VerifyOptions refused = kSeeded;
  const Tensor wrong_h0(DType::f32, {3, 8});  // wrong batch: refused before any oracle
  refused.h0 = wrong_h0.view();
  EXPECT_THROW((void)verify_agreement(p.cell, p.x, refused, with_memo(memo, "case", 2)), ContractViolation);
  EXPECT_EQ(memo.live(), 1u);
  (void)verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 2));
  EXPECT_EQ(memo.live(), 0u);
  EXPECT_EQ(memo.computed(), 1);
}

TEST(OracleMemo, RefusesAMemoWithoutAKeyOrUses) {
  const Problem p = make_problem(1);
  OracleMemo memo;
  EXPECT_THROW((void)verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "", 2)), ContractViolation);
  EXPECT_THROW((void)verify_agreement(p.cell, p.x, kSeeded, with_memo(memo, "case", 0)), ContractViolation);
  EXPECT_EQ(memo.live(), 0u);
}

}  // namespace
}  // namespace pararnn
