// One validation of a case: the production reading (Cell::from_case and the solver's input
// rules, as solve and verify apply them) and the independent oracle's own parser refuse exactly
// the same cases. Generated from every cell's valid case by one or two mutations of the kind
// hostile and real inputs showed (an extra tensor, a missing or reshaped parameter, a dtype
// mix, constructor arguments that are absent, "None", out of range, of another cell, or not
// numbers, a wrong h0, packing where the cell refuses it). A case accepted by one reading and
// refused by the other is how `compare` once said Agree on a case `verify` refused.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "generators.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn {
namespace {

struct Reading {
  bool refused = false;
  std::string message;
};

template <class Read>
Reading read_with(Read&& read) {
  try {
    read();
    return {};
  } catch (const ContractViolation& e) {
    return {true, e.what()};
  } catch (const CaseFileError& e) {
    return {true, e.what()};
  }
}

Reading production_reading(const Case& problem) {
  return read_with([&] {
    const Cell cell = Cell::from_case(problem);
    ApplyOptions apply;
    if (problem.h0) apply.h0 = problem.h0->view();
    if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
    validate_apply_inputs(cell, problem.x, apply);
  });
}

Reading oracle_reading(const Case& problem) {
  return read_with([&] { (void)reference::oracle_state_shape(problem); });
}

const std::vector<std::string>& kEveryCellLabel = testing::kEveryCellLabels;

// A valid case of the label's cell (d_h = 4, so head mixes have 2 heads of 2).
Case valid_case(const std::string& label, DType dtype, std::int64_t batch, std::int64_t time, bool with_h0,
                std::uint64_t seed) {
  const auto colon = label.find(':');
  const std::string cell_name = label.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : label.substr(colon + 1);
  CellOptions options{.cell = cell_name, .d_in = 3, .d_h = 4};
  if (cell_name == "cfc" && !variant.empty()) options.gate_mix = variant;
  if (cell_name != "cfc" && !variant.empty()) options.mix = variant;
  if (variant == "head" || cell_name == "rwkv7") options.n_heads = 2;
  if (cell_name == "m2rnn") {
    options.d_h = 0;
    options.k_dim = 2;
    options.v_dim = 2;
  }
  const Cell cell = Cell::initialise(options, dtype, seed);
  testing::GeneratedProblem p{.cell = cell_name, .dtype = dtype, .batch = batch, .time = time, .d_in = 3,
                              .d_h = cell.d_h(), .seed = seed};
  std::optional<Tensor> h0;
  if (with_h0) {
    Shape shape = {batch};
    for (std::int64_t extent : cell.state_shape()) shape.push_back(extent);
    h0 = Tensor(dtype, shape);
  }
  return cell.make_case(p.make_input(), h0);
}

// A copy of `t` with one more entry along axis 0 (or a (1,) tensor for a scalar).
Tensor grown(const Tensor& t) {
  Shape shape = t.shape();
  if (shape.empty()) shape = {1};
  shape[0] += 1;
  return Tensor(t.dtype(), shape);
}

DType other_dtype(DType dtype, int pick) {
  const std::vector<DType> all = {DType::f64, DType::f32, DType::f16, DType::bf16};
  DType out = all[static_cast<std::size_t>(pick) % all.size()];
  return out == dtype ? all[(static_cast<std::size_t>(pick) + 1) % all.size()] : out;
}

const std::vector<std::string> kArgumentKeys = {"eps",     "n_heads", "mix",   "max_recurrent_norm", "beta",
                                                "gate_mix", "k_dim",  "v_dim", "time_bias_init"};
const std::vector<std::string> kArgumentValues = {"None", "",     "0",    "-1",   "1",     "2",     "3",
                                                  "inf",  "nan",  "abc",  "1e-3", "0.5",   "diag",  "head",
                                                  "dense", "input", "diag_h", "rwkv7", "matrix", "4x"};

// One mutation, chosen by `kind` with parameters `a`, `b`; returns what it did.
std::string mutate(Case& problem, int kind, int a, int b) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : problem.parameters) names.push_back(name);
  const std::string& some = names[static_cast<std::size_t>(a) % names.size()];
  switch (kind) {
    case 0: {
      const std::vector<std::string> extra = {"foo", "H", "a_q", "W_x.extra", "W_b.weight", "v", "W"};
      const std::string name = extra[static_cast<std::size_t>(a) % extra.size()];
      if (problem.parameters.contains(name)) return "none (" + name + " exists)";
      problem.parameters.emplace(name, Tensor(problem.dtype(), {4}));
      return "extra tensor " + name;
    }
    case 1:
      problem.parameters.erase(some);
      return "dropped " + some;
    case 2:
      problem.parameters[some] = grown(problem.parameters.at(some));
      return "grew " + some;
    case 3:
      problem.parameters[some] = Tensor::converted(problem.parameters.at(some), other_dtype(problem.dtype(), b));
      return "dtype of " + some;
    case 4: {
      const std::string& key = kArgumentKeys[static_cast<std::size_t>(a) % kArgumentKeys.size()];
      const std::string& value = kArgumentValues[static_cast<std::size_t>(b) % kArgumentValues.size()];
      problem.metadata[key] = value;
      return "metadata " + key + "='" + value + "'";
    }
    case 5: {
      const std::string& key = kArgumentKeys[static_cast<std::size_t>(a) % kArgumentKeys.size()];
      problem.metadata.erase(key);
      return "erased metadata " + key;
    }
    case 6: {
      const Shape& s = problem.x.shape();
      problem.x = Tensor(problem.x.dtype(), {s[0], s[1], b % 2 == 0 ? s[2] + 1 : std::max<std::int64_t>(1, s[2] - 1)});
      return "x width";
    }
    case 7: {
      const std::int64_t rows = problem.cu_seqlens ? problem.cu_seqlens->numel() - 1 : problem.x.size(0);
      const std::vector<Shape> shapes = {{rows, 4}, {rows, 1, 4}, {rows, 4, 4}, {rows, 2, 2}, {rows, 2, 2, 2},
                                         {rows + 1, 4}, {rows, 5}, {rows, 2, 4}, {rows, 4, 2}};
      problem.h0 = Tensor(b % 5 == 0 ? other_dtype(problem.dtype(), a) : problem.dtype(),
                          shapes[static_cast<std::size_t>(a) % shapes.size()]);
      return "h0 " + shape_string(problem.h0->shape());
    }
    case 8: {
      const std::int64_t T = problem.x.size(1);
      const std::vector<std::vector<double>> lists = {{0, static_cast<double>(T)}, {0, 1, static_cast<double>(T)},
                                                      {1, static_cast<double>(T)}, {0, static_cast<double>(T + 1)},
                                                      {0, 0, static_cast<double>(T)}, {0}};
      const auto& values = lists[static_cast<std::size_t>(a) % lists.size()];
      problem.cu_seqlens = Tensor::from_values(b % 2 == 0 ? DType::i64 : DType::i32,
                                               {static_cast<std::int64_t>(values.size())}, values);
      return "cu_seqlens of " + std::to_string(values.size()) + " entries";
    }
    default:
      problem.x = Tensor::converted(problem.x, other_dtype(problem.dtype(), b));
      return "x dtype";
  }
}

RC_GTEST_PROP(CaseRules, ProductionAndOracleReadingsRefuseTheSameCases, ()) {
  const std::string label = *rc::gen::elementOf(kEveryCellLabel);
  const DType dtype = *rc::gen::elementOf(std::vector<DType>{DType::f64, DType::f32, DType::f16, DType::bf16});
  const int batch = *rc::gen::inRange(1, 3);
  const int time = *rc::gen::inRange(1, 6);
  const bool with_h0 = *rc::gen::arbitrary<bool>();
  Case problem = valid_case(label, dtype, batch, time, with_h0, 1);
  RC_ASSERT(!production_reading(problem).refused);  // the generator's starting point is valid
  RC_ASSERT(!oracle_reading(problem).refused);
  const int mutations = *rc::gen::inRange(1, 3);
  std::string applied;
  for (int i = 0; i < mutations; ++i) {
    const int kind = *rc::gen::inRange(0, 10);
    applied += (i ? "; " : "") + mutate(problem, kind, *rc::gen::inRange(0, 64), *rc::gen::inRange(0, 64));
  }
  const Reading production = production_reading(problem);
  const Reading oracle = oracle_reading(problem);
  RC_CLASSIFY(production.refused, "refused");
  RC_TAG(label);
  if (production.refused != oracle.refused)
    RC_FAIL(fmt::format("cell {} {} B={} T={} h0={} after [{}]: production {} ({}), oracle {} ({})", label,
                        dtype_name(dtype), batch, time, with_h0, applied,
                        production.refused ? "refuses" : "accepts", production.message,
                        oracle.refused ? "refuses" : "accepts", oracle.message));
}

// validate_apply_inputs is a solve's plan without its configuration (solver/src/api.cpp
// plan_solve): on every cell's case with its inputs mutated (x's width and dtype, h0's shape and
// dtype, packing where the cell refuses it), it refuses exactly the inputs newton_apply with the
// default configuration and sequential_apply refuse. A solve that accepts its inputs and then
// diverges has accepted them.
Reading solve_reading(const std::function<void()>& run) {
  try {
    run();
    return {};
  } catch (const ContractViolation& e) {
    return {true, e.what()};
  } catch (const UnsupportedPath& e) {
    return {true, e.what()};
  } catch (const NewtonDivergenceError&) {
    return {};
  }
}

RC_GTEST_PROP(CaseRules, ValidationRefusesExactlyTheInputsASolveRefuses, ()) {
  const std::string label = *rc::gen::elementOf(kEveryCellLabel);
  const DType dtype = *rc::gen::elementOf(std::vector<DType>{DType::f64, DType::f32, DType::f16, DType::bf16});
  const int batch = *rc::gen::inRange(1, 3);
  const int time = *rc::gen::inRange(1, 6);
  Case problem = valid_case(label, dtype, batch, time, *rc::gen::arbitrary<bool>(), 1);
  const int mutations = *rc::gen::inRange(0, 3);
  std::string applied;
  for (int i = 0; i < mutations; ++i)
    applied += (i ? "; " : "") + mutate(problem, *rc::gen::inRange(6, 10), *rc::gen::inRange(0, 64),
                                        *rc::gen::inRange(0, 64));
  std::optional<Cell> cell;
  try {
    cell = Cell::from_case(problem);
  } catch (const Error&) {
    RC_DISCARD("the mutation broke the cell's own reading");
  }
  ApplyOptions apply;
  if (problem.h0) apply.h0 = problem.h0->view();
  if (problem.cu_seqlens) apply.cu_seqlens = problem.cu_seqlens->view();
  const Reading validation = solve_reading([&] { validate_apply_inputs(*cell, problem.x, apply); });
  const Reading newton = solve_reading([&] { (void)newton_apply(*cell, problem.x, NewtonConfig{}, apply); });
  const Reading sequential = solve_reading([&] { (void)sequential_apply(*cell, problem.x, apply); });
  RC_CLASSIFY(validation.refused, "refused");
  RC_TAG(label);
  const auto verdict = [](const Reading& r) { return r.refused ? "refuses (" + r.message + ")" : std::string("accepts"); };
  if (validation.refused != newton.refused || validation.refused != sequential.refused)
    RC_FAIL(fmt::format("cell {} {} B={} T={} after [{}]: validate_apply_inputs {}, newton_apply {}, "
                        "sequential_apply {}",
                        label, dtype_name(dtype), batch, time, applied, verdict(validation), verdict(newton),
                        verdict(sequential)));
}

// Every single mutation of every cell's case (each kind over the whole range of its choices,
// with and without h0, batch 1 and 2), exhaustively: the property above covers pairs.
TEST(CaseRules, EverySingleMutationIsRefusedByBothReadingsOrByNeither) {
  int refused = 0, accepted = 0;
  for (const std::string& label : kEveryCellLabel)
    for (int batch : {1, 2})
      for (bool with_h0 : {false, true})
        for (int kind = 0; kind < 10; ++kind)
          for (int a = 0; a < 20; ++a)
            for (int b = 0; b < static_cast<int>(kArgumentValues.size()); ++b) {
              Case problem = valid_case(label, DType::f32, batch, 3, with_h0, 3);
              const std::string applied = mutate(problem, kind, a, b);
              const Reading production = production_reading(problem);
              const Reading oracle = oracle_reading(problem);
              ASSERT_EQ(production.refused, oracle.refused)
                  << label << " B=" << batch << " h0=" << with_h0 << " after [" << applied << "]: production '"
                  << production.message << "', oracle '" << oracle.message << "'";
              ++(production.refused ? refused : accepted);
            }
  EXPECT_GT(accepted, 0);  // both outcomes occur: the test can tell a refusal from an acceptance
  EXPECT_GT(refused, 0);
}

// checked_case, the rule of every command, is both readings: what either refuses, it refuses.
TEST(CaseRules, CheckedCaseRefusesWhatEitherReadingRefuses) {
  Case problem = valid_case("slstm", DType::f32, 1, 4, false, 2);
  EXPECT_NO_THROW((void)checked_case(problem));
  problem.metadata["eps"] = "0";
  EXPECT_THROW((void)checked_case(problem), ContractViolation);
}

}  // namespace
}  // namespace pararnn
