// Every result is bitwise independent of the thread count: the CPU solver's trajectory and
// gradients and the oracle's trajectory and gradients, computed with one thread and with four,
// are the same bits. (Eigen's threaded GEMM split its reductions by the thread count, so the CPU
// gradients and the oracle's affine gradients moved with the machine's cores; the project builds
// with EIGEN_DONT_PARALLELIZE and parallelises over chains only. The campaign's --jobs relies on
// it: its report must not depend on how many tasks share the CPUs.)
#include <gtest/gtest.h>
#include <omp.h>

#include "pararnn/cells/cell.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

// f() with OpenMP's thread count set to n for this thread, restored afterwards.
template <class F>
auto with_threads(int n, F f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(n);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

// A case whose reductions are long enough for a blocked GEMM to split them: B·T >= 512 terms in
// ∇W, d_in = 64 in W_x x (Hopfield, a dense cell whose oracle gradients cost d_h times more,
// shorter and narrower).
struct Problem {
  Cell cell;
  Tensor x;
};
Problem make_problem(const std::string& cell) {
  const bool dense = cell == "hopfield";
  return {Cell::initialise({.cell = cell, .d_in = 64, .d_h = dense ? 8 : 16}, DType::f32, 3),
          generated_case_input(DType::f32, 2, dense ? 256 : 1024, 64, 4)};
}

std::map<std::string, std::vector<double>> solver_outputs(const Problem& p) {
  const NewtonForward forward = newton_forward(p.cell, p.x);
  Tensor ones(forward.H.dtype(), forward.H.shape());
  Tensor flat = ones.reshaped({ones.numel()});
  for (std::int64_t i = 0; i < ones.numel(); ++i) flat.store({i}, 1.0);
  const NewtonGradients g = newton_backward(p.cell, p.x, forward, ones);
  std::map<std::string, std::vector<double>> out = {{"H", forward.H.to_f64_vector()}, {"grad.x", g.x.to_f64_vector()}};
  for (const auto& [name, t] : g.parameters) out["grad." + name] = t.to_f64_vector();
  return out;
}

std::map<std::string, std::vector<double>> oracle_outputs(const Problem& p) {
  const Case problem = p.cell.make_case(Tensor::copy_of(p.x.view()));
  std::map<std::string, std::vector<double>> out = {{"H", reference::oracle_sequential(problem).H.to_f64_vector()}};
  for (const auto& [name, t] : reference::oracle_gradients(problem).tensors) out["grad." + name] = t.to_f64_vector();
  return out;
}

// outputs(p) on one thread and on four: the same tensors, the same bits.
template <class Outputs>
void expect_the_same_bits_on_one_and_four_threads(const Problem& p, Outputs outputs) {
  const auto one = with_threads(1, [&] { return outputs(p); });
  const auto four = with_threads(4, [&] { return outputs(p); });
  ASSERT_EQ(one.size(), four.size());
  for (const auto& [name, values] : one) EXPECT_TRUE(values == four.at(name)) << name;
}

class ThreadCount : public ::testing::TestWithParam<std::string> {};

TEST_P(ThreadCount, SolverTrajectoryAndGradientsAreTheSameBitsOnOneAndFourThreads) {
  expect_the_same_bits_on_one_and_four_threads(make_problem(GetParam()), solver_outputs);
}

TEST_P(ThreadCount, OracleTrajectoryAndGradientsAreTheSameBitsOnOneAndFourThreads) {
  expect_the_same_bits_on_one_and_four_threads(make_problem(GetParam()), oracle_outputs);
}

INSTANTIATE_TEST_SUITE_P(Cells, ThreadCount, ::testing::Values("gru", "lstm", "cfc", "hopfield"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pararnn
