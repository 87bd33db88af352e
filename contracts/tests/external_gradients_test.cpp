// Claims about compare_trajectory with an external solver's gradients (`pararnn compare
// --gradients`): our own solver's gradients, handed in as an external answer, agree with the
// figures verify --grad gives them; one element moved beyond the contract's τ is Disagree; a
// tensor the cell needs and not given is named and never Agree; a NaN or an infinity is judged
// (Disagree); an extra, misnamed, mis-shaped or mistyped tensor is refused naming it. Tolerances
// come from the contract table (tolerance_for), never from literals here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

constexpr std::uint64_t kSeed = 41;

Tensor normal_tensor(DType dtype, Shape shape, std::uint64_t seed, double std = 1.0) {
  SplitMix64 rng(seed);
  Tensor t(dtype, shape);
  Tensor flat = t.reshaped({t.numel()});
  for (std::int64_t i = 0; i < t.numel(); ++i) flat.store({i}, rng.normal(0.0, std));
  return t;
}

// A case and an answer to it from our own solver: H and the gradients of Σ grad_H ⊙ H (the
// case's grad.H, or ones), under the names `pararnn solve --grad` writes.
struct Answer {
  Cell cell;
  Case problem;
  Tensor H;
  std::map<std::string, Tensor> gradients;  // "grad.x", "grad.h0", "grad.<parameter>"
};

Answer solved(const std::string& name, bool with_h0, bool with_cotangent = false) {
  const Cell cell = Cell::initialise({.cell = name, .d_in = 3, .d_h = 4}, DType::f32, kSeed);
  Tensor x = normal_tensor(DType::f32, {2, 48, 3}, kSeed + 1);
  if (name == "cfc")  // ParaCfC's last feature is the time step Δt >= 0
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t t = 0; t < 48; ++t) x.store({b, t, 2}, std::abs(x.load({b, t, 2})));
  std::optional<Tensor> h0;
  if (with_h0) {
    Shape shape = {2};
    for (std::int64_t extent : cell.state_shape()) shape.push_back(extent);
    h0 = normal_tensor(DType::f32, shape, kSeed + 2, 0.5);
  }
  Answer a{cell, cell.make_case(x, h0), Tensor(), {}};
  ApplyOptions apply;
  if (h0) apply.h0 = a.problem.h0->view();
  const NewtonForward forward = newton_forward(cell, x, NewtonConfig{}, apply);
  a.H = forward.H;
  Tensor g(DType::f32, forward.H.shape());
  if (with_cotangent) {
    g = normal_tensor(DType::f32, forward.H.shape(), kSeed + 3);
    a.problem.grad_H = g;
  } else {
    Tensor flat = g.reshaped({g.numel()});
    for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0);
  }
  const NewtonGradients grads = newton_backward(cell, x, forward, g, NewtonConfig{}, apply);
  a.gradients.emplace("grad.x", grads.x);
  if (grads.h0) a.gradients.emplace("grad.h0", *grads.h0);
  for (const auto& [parameter, grad] : grads.parameters) a.gradients.emplace("grad." + parameter, grad);
  return a;
}

ExternalGradients external(const std::map<std::string, Tensor>& tensors) {
  ExternalGradients e{.source = "theirs.safetensors"};
  for (const auto& [name, tensor] : tensors) e.tensors.emplace(name, tensor.view());
  return e;
}

AgreementReport judged(const Answer& a, const std::map<std::string, Tensor>& gradients) {
  return compare_trajectory(a.problem, a.H, {.seed = kSeed}, external(gradients));
}

const AgreementReport::GradientCheck& check_of(const AgreementReport& r, const std::string& name) {
  const auto it = std::find_if(r.gradients.begin(), r.gradients.end(), [&](const auto& g) { return g.name == name; });
  if (it == r.gradients.end()) throw std::runtime_error("no gradient check '" + name + "'");
  return *it;
}

// The contract's gradient τ for this cell (the table, as compare takes it).
Tolerance gradient_tau(const Answer& a) {
  return tolerance_for({.dtype = a.cell.dtype(), .metric = gradient_metric(a.cell), .cell = std::string(a.cell.name()),
                        .backend = "external"});
}

// One element of `tensor` moved by ten times the largest allowed difference anywhere in it.
Tensor planted(const Tensor& tensor, std::int64_t flat_index, const Tolerance& tau) {
  Tensor out = Tensor::copy_of(tensor);
  Tensor flat = out.reshaped({out.numel()});
  double largest = 0.0;
  for (std::int64_t i = 0; i < out.numel(); ++i) largest = std::max(largest, std::abs(flat.load({i})));
  flat.store({flat_index}, flat.load({flat_index}) + 10.0 * (tau.atol + tau.rtol * largest));
  return out;
}

TEST(CompareExternalGradients, OurOwnGradientsAgreeWithTheFiguresOfVerifyGrad) {
  const Answer a = solved("lstm", /*with_h0=*/true);
  const AgreementReport r = judged(a, a.gradients);
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  EXPECT_TRUE(r.gradients_missing.empty());
  ASSERT_EQ(r.gradients.size(), a.gradients.size());
  // verify --grad judges the same solver's gradients of the same loss: the same figures, by the
  // same judgement, at the same τ.
  const AgreementReport v = verify_agreement(a.cell, a.problem.x,
                                             {.h0 = a.problem.h0->view(), .seed = kSeed, .gradients = true});
  ASSERT_EQ(v.verdict, Verdict::agree) << v.failure_message();
  ASSERT_EQ(v.gradients.size(), r.gradients.size());
  for (std::size_t i = 0; i < v.gradients.size(); ++i) {
    EXPECT_EQ(r.gradients[i].name, v.gradients[i].name);
    EXPECT_EQ(r.gradients[i].comparison.max_abs, v.gradients[i].comparison.max_abs) << v.gradients[i].name;
    EXPECT_EQ(r.gradients[i].comparison.count, v.gradients[i].comparison.count) << v.gradients[i].name;
    EXPECT_EQ(r.gradients[i].comparison.tolerance.atol, v.gradients[i].comparison.tolerance.atol);
    EXPECT_EQ(r.gradients[i].comparison.tolerance.rtol, v.gradients[i].comparison.tolerance.rtol);
  }
  const auto json = r.to_json();
  for (const char* name : {"x", "h0", "W_x.weight", "a_f"}) EXPECT_TRUE(json["gradients"].contains(name)) << name;
  EXPECT_FALSE(json.contains("gradients_missing"));
}

TEST(CompareExternalGradients, OneElementBeyondTauIsDisagreeAtThatElement) {
  const Answer a = solved("gru", /*with_h0=*/false);
  std::map<std::string, Tensor> wrong = a.gradients;
  wrong["grad.W_x.weight"] = planted(a.gradients.at("grad.W_x.weight"), 5, gradient_tau(a));
  const AgreementReport r = judged(a, wrong);
  EXPECT_EQ(r.verdict, Verdict::disagree);
  EXPECT_FALSE(r.ok);
  const auto& w = check_of(r, "W_x.weight");
  EXPECT_EQ(w.comparison.mismatches, 1);
  const std::int64_t columns = a.gradients.at("grad.W_x.weight").size(1);
  EXPECT_EQ(w.comparison.worst_abs_index, (Shape{5 / columns, 5 % columns}));
  for (const auto& g : r.gradients)
    if (g.name != "W_x.weight") EXPECT_TRUE(g.comparison.ok()) << g.name;
  EXPECT_NE(r.failure_message().find("Gradient 'W_x.weight'"), std::string::npos);
}

TEST(CompareExternalGradients, TheLossIsTheCasesCotangent) {
  const Answer with = solved("gru", /*with_h0=*/true, /*with_cotangent=*/true);
  EXPECT_EQ(judged(with, with.gradients).verdict, Verdict::agree);
  // The gradients of Σ H (ones) are not those of Σ grad.H ⊙ H.
  const Answer ones = solved("gru", /*with_h0=*/true, /*with_cotangent=*/false);
  EXPECT_EQ(judged(with, ones.gradients).verdict, Verdict::disagree);
}

TEST(CompareExternalGradients, AMissingTensorIsNamedAndNeverAgree) {
  const Answer a = solved("lstm", /*with_h0=*/true);
  std::map<std::string, Tensor> partial = a.gradients;
  partial.erase("grad.h0");
  partial.erase("grad.a_f");
  const AgreementReport r = judged(a, partial);
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.gradients_missing, (std::vector<std::string>{"h0", "a_f"}));
  EXPECT_NE(r.inconclusive_reason.find("grad.h0"), std::string::npos) << r.inconclusive_reason;
  EXPECT_NE(r.inconclusive_reason.find("grad.a_f"), std::string::npos) << r.inconclusive_reason;
  EXPECT_EQ(r.to_json()["gradients_missing"], nlohmann::json({"h0", "a_f"}));
  EXPECT_NE(r.summary().find("MISSING"), std::string::npos);
  // Nothing given at all: every tensor missing, still never Agree.
  const AgreementReport none = judged(a, {});
  EXPECT_EQ(none.verdict, Verdict::inconclusive);
  EXPECT_EQ(none.gradients_missing.size(), a.gradients.size());
  // A Disagree elsewhere stays Disagree, the missing tensor still named.
  partial["grad.x"] = planted(a.gradients.at("grad.x"), 0, gradient_tau(a));
  const AgreementReport both = judged(a, partial);
  EXPECT_EQ(both.verdict, Verdict::disagree);
  EXPECT_EQ(both.gradients_missing, (std::vector<std::string>{"h0", "a_f"}));
}

TEST(CompareExternalGradients, NonFiniteValuesAreJudgedDisagree) {
  const Answer a = solved("gru", /*with_h0=*/false);
  for (const double bad : {std::nan(""), static_cast<double>(INFINITY)}) {
    std::map<std::string, Tensor> wrong = a.gradients;
    wrong["grad.x"] = Tensor::copy_of(a.gradients.at("grad.x"));
    wrong["grad.x"].store({1, 7, 2}, bad);
    const AgreementReport r = judged(a, wrong);
    EXPECT_EQ(r.verdict, Verdict::disagree) << bad;
    EXPECT_EQ(check_of(r, "x").comparison.mismatches, 1) << bad;
  }
}

// The refusal names the source and the tensor, and says the rule.
void expect_refused(const std::function<void()>& call, const std::vector<std::string>& says) {
  try {
    call();
    ADD_FAILURE() << "not refused";
  } catch (const ContractViolation& e) {
    for (const auto& text : says) EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(CompareExternalGradients, ExtraMisnamedMisshapedOrMistypedTensorsAreRefusedByName) {
  const Answer a = solved("gru", /*with_h0=*/false);
  const auto refused = [&](std::map<std::string, Tensor> gradients, std::vector<std::string> says) {
    says.push_back("theirs.safetensors");
    expect_refused([&] { (void)judged(a, gradients); }, says);
  };
  auto with = [&](const std::string& name, const Tensor& tensor) {
    std::map<std::string, Tensor> g = a.gradients;
    g.insert_or_assign(name, tensor);
    return g;
  };
  const Tensor& weight = a.gradients.at("grad.W_x.weight");
  refused(with("grad.W_x.wieght", weight), {"'grad.W_x.wieght'", "is not a gradient"});  // misnamed
  refused(with("H", a.H), {"'H'", "is not a gradient"});                                   // extra
  refused(with("grad.H", a.H), {"'grad.H'"});                                              // the cotangent
  refused(with("grad.h0", Tensor(DType::f32, {2, 4})), {"'grad.h0'"});                   // the case has no h0
  refused(with("grad.x", Tensor(DType::f32, {2, 47, 3})), {"'grad.x'", "shape", "(2, 48, 3)"});
  refused(with("grad.W_x.weight", Tensor::converted(weight, DType::f64)), {"'grad.W_x.weight'", "dtype f32", "f64"});
  refused(with("grad.a_z", Tensor::converted(a.gradients.at("grad.a_z"), DType::bf16)), {"'grad.a_z'", "bf16"});
}

// A 0.17.4 ParaCfC has no W_b: the case reader adds it as 0, so its gradient is not required.
TEST(CompareExternalGradients, AParameterTheReaderAddedIsNotRequired) {
  const Answer a = solved("cfc", /*with_h0=*/false);
  Case problem = a.problem;
  problem.metadata["cell_version"] = "pararnn-torch 0.17.4 (no W_b: read as W_b = 0)";
  std::map<std::string, Tensor> without = a.gradients;
  without.erase("grad.W_b.weight");
  without.erase("grad.W_b.bias");
  const std::vector<GradientName> names = gradient_names(problem);
  for (const auto& n : names) EXPECT_EQ(n.required, !n.report_name.starts_with("W_b.")) << n.file_name;
  const AgreementReport r = compare_trajectory(problem, a.H, {.seed = kSeed}, external(without));
  EXPECT_TRUE(r.gradients_missing.empty());
  EXPECT_EQ(r.verdict, Verdict::agree) << r.failure_message();
  // Without that metadata the same answer misses two tensors.
  EXPECT_EQ(judged(a, without).gradients_missing, (std::vector<std::string>{"W_b.bias", "W_b.weight"}));
}

}  // namespace
}  // namespace pararnn
