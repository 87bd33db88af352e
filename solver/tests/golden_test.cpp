// Refactors of the solver change no result: every cell and variant in every storage dtype, on
// the CPU backend, gives bit for bit the trajectories (default adaptive Newton, a fixed K, the
// sequential loop, a forced k_max fallback) and, for the cells that train, the gradients that
// were recorded in solver/tests/golden/ before the one-driver refactor, with the same iteration
// counts. The inputs (x, h0 and the parameters of both cells) are recorded beside the outputs
// and read back, so a change of the generators (Cell::initialise's stream, the input draws)
// moves no golden and the bits do not depend on the standard library. Set
// PARARNN_RECORD_GOLDEN=1 to re-record (only when a change of results is intended and explained
// in the commit).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pararnn/cells/registry.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/solver/solver.hpp"
#include "pararnn/solver/training.hpp"

namespace pararnn {
namespace {

namespace fs = std::filesystem;

fs::path golden_dir() { return fs::path(PARARNN_SOLVER_GOLDEN_DIR); }

// Every cell and variant of the registry (cells/registry.hpp) under its label: a spec added there
// has a golden to record.
std::vector<std::string> every_label() {
  std::vector<std::string> labels;
  for (const CellSpec& spec : cell_specs()) labels.push_back(cell_label(spec));
  return labels;
}
const std::vector<DType> kDtypes = {DType::f64, DType::f32, DType::f16, DType::bf16};

struct GoldenCase {
  Cell cell;
  Tensor x;
  std::optional<Tensor> h0;
};

// Recorded inputs are stored under this prefix (the hard cell's parameters under "input.hard.").
constexpr std::string_view kInput = "input.";

// The case of (label, dtype): generated, then, when `recorded` holds inputs, its x, h0 and
// parameters replaced by the recorded ones (`params` names the recorded parameter prefix).
GoldenCase make(const std::string& label, DType dtype, std::optional<double> weight_std,
                const SafetensorsFile* recorded, const std::string& params) {
  const auto colon = label.find(':');
  const std::string name = label.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : label.substr(colon + 1);
  CellOptions options{.cell = name, .d_in = 4, .d_h = 8, .weight_std = weight_std};
  if (name == "cfc" && !variant.empty()) options.gate_mix = variant;
  if (name != "cfc" && !variant.empty()) options.mix = variant;
  if (variant == "head" || name == "rwkv7") options.n_heads = 2;
  if (variant == "dense" || name == "hopfield") options.d_h = 4;
  if (weight_std) options.max_recurrent_norm = std::nullopt;
  if (name == "m2rnn") {
    options.d_h = 0;
    options.k_dim = 2;
    options.v_dim = 3;
  }
  Cell cell = Cell::initialise(options, dtype, 11);
  Tensor x = generated_case_input(dtype, 2, 48, 4, 12);
  if (name == "cfc")  // Δt channel: positive steps
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t t = 0; t < 48; ++t) x.store({b, t, 3}, 0.05 + 0.01 * static_cast<double>(t % 5));
  std::optional<Tensor> h0;
  if (name != "rwkv7") {  // one carry per row: (B, *state_shape)
    Shape shape = {2};
    for (std::int64_t extent : cell.state_shape()) shape.push_back(extent);
    Tensor h(dtype, shape);
    SplitMix64 rng(13);
    Tensor flat = h.reshaped({h.numel()});
    for (std::int64_t i = 0; i < h.numel(); ++i) flat.store({i}, std::abs(rng.normal(0.0, 0.3)));  // sLSTM n >= 0
    h0 = h;
  }
  if (recorded != nullptr && recorded->tensors.contains(std::string(kInput) + "x")) {
    const auto stored = [&](const std::string& name) -> const Tensor& {
      const auto it = recorded->tensors.find(name);
      if (it == recorded->tensors.end()) throw Error("golden file lacks the recorded input '" + name + "'");
      return it->second;
    };
    x = stored(std::string(kInput) + "x");
    if (h0) h0 = stored(std::string(kInput) + "h0");
    Case problem = cell.make_case(x, h0);
    for (auto& [name, tensor] : problem.parameters) tensor = stored(params + name);
    cell = Cell::from_case(problem);
  }
  return {std::move(cell), std::move(x), std::move(h0)};
}

// The inputs of a (label, dtype) as they are recorded: x, h0, both cells' parameters.
std::map<std::string, Tensor> inputs_of(const GoldenCase& easy, const GoldenCase& hard) {
  std::map<std::string, Tensor> in = {{std::string(kInput) + "x", easy.x}};
  if (easy.h0) in.emplace(std::string(kInput) + "h0", *easy.h0);
  for (const auto& [name, tensor] : easy.cell.parameters()) in.emplace(std::string(kInput) + "param." + name, tensor);
  for (const auto& [name, tensor] : hard.cell.parameters())
    in.emplace(std::string(kInput) + "hard.param." + name, tensor);
  return in;
}

// Every cell trains on the CPU since issue 16 (the dense, matrix-state and RWKV-7 gradients were
// recorded then).
bool trains(const Cell&) { return true; }

// Every recorded output of one (label, dtype), and the stats that must repeat.
// `recorded`: the golden file whose inputs to use (nullptr: generate them); `in` receives the
// inputs used.
std::map<std::string, Tensor> outputs(const std::string& label, DType dtype, const SafetensorsFile* recorded,
                                      std::map<std::string, std::string>& stats,
                                      std::map<std::string, Tensor>& in) {
  const QuietWarnings quiet;
  std::map<std::string, Tensor> out;
  const GoldenCase c = make(label, dtype, std::nullopt, recorded, std::string(kInput) + "param.");
  ApplyOptions apply;
  if (c.h0) apply.h0 = c.h0->view();
  const auto record = [&](const std::string& name, const NewtonStats& s) {
    stats[name + ".iters"] = std::to_string(s.iters);
    stats[name + ".updates"] = std::to_string(s.updates);
    stats[name + ".fallback_tiles"] = std::to_string(s.fallback_tiles);
    stats[name + ".picard_iters"] = std::to_string(s.picard_iters);
  };
  NewtonStats s;
  // Picard adapt off: the recorded bits predate it (issue 16); it has its own tests.
  out["newton"] = newton_apply(c.cell, c.x, {.scan_backend = ScanBackend::cpu, .picard_adapt = false}, apply, &s);
  record("newton", s);
  out["fixed2"] = newton_apply(c.cell, c.x, {.max_iters = 2, .scan_backend = ScanBackend::cpu, .picard_adapt = false},
                               apply, &s);
  record("fixed2", s);
  out["sequential"] = sequential_apply(c.cell, c.x, ScanBackend::cpu, apply);
  // Hard unclamped weights and k_max at the table's K: the adaptive path falls back.
  const GoldenCase hard = make(label, dtype, 0.9, recorded, std::string(kInput) + "hard.param.");
  in = inputs_of(c, hard);
  ApplyOptions hard_apply;
  if (hard.h0) hard_apply.h0 = hard.h0->view();
  NewtonConfig fallback{.scan_backend = ScanBackend::cpu, .residual_fail = std::nullopt, .picard_adapt = false};
  fallback.k_max = 1;
  out["fallback"] = newton_apply(hard.cell, hard.x, fallback, hard_apply, &s);
  record("fallback", s);
  if (trains(c.cell)) {
    const NewtonConfig train{.scan_backend = ScanBackend::cpu, .picard_adapt = false};
    const NewtonForward forward = newton_forward(c.cell, c.x, train, apply);
    Tensor g(dtype, forward.H.shape());
    Tensor flat = g.reshaped({g.numel()});
    for (std::int64_t i = 0; i < g.numel(); ++i) flat.store({i}, 1.0 + 0.01 * static_cast<double>(i % 7));
    const NewtonGradients grads = newton_backward(c.cell, c.x, forward, g, train, apply);
    out["grad.x"] = grads.x;
    if (grads.h0) out["grad.h0"] = *grads.h0;
    for (const auto& [name, grad] : grads.parameters) out["grad." + name] = grad;
  }
  return out;
}

std::string file_name(const std::string& label, DType dtype) {
  std::string stem = label;
  for (char& ch : stem)
    if (ch == ':') ch = '_';
  return stem + "_" + std::string(dtype_name(dtype)) + ".safetensors";
}

class SolverGolden : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(SolverGolden, OutputsEqualTheRecordedOnesBitwise) {
  const auto& [label, dtype] = GetParam();
  const fs::path path = golden_dir() / file_name(label, dtype);
  std::map<std::string, std::string> stats;
  std::map<std::string, Tensor> in;
  if (std::getenv("PARARNN_RECORD_GOLDEN")) {  // fresh inputs, unless recorded ones exist
    std::optional<SafetensorsFile> previous;
    if (fs::exists(path)) previous = read_safetensors(path);
    std::map<std::string, Tensor> now = outputs(label, dtype, previous ? &*previous : nullptr, stats, in);
    now.insert(in.begin(), in.end());
    fs::create_directories(golden_dir());
    write_safetensors(path, now, stats);
    GTEST_SKIP() << "recorded " << path;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing (record with PARARNN_RECORD_GOLDEN=1)";
  const SafetensorsFile recorded = read_safetensors(path);
  ASSERT_TRUE(recorded.tensors.contains(std::string(kInput) + "x")) << path << " holds no recorded inputs";
  const std::map<std::string, Tensor> now = outputs(label, dtype, &recorded, stats, in);
  EXPECT_EQ(recorded.metadata, stats);
  ASSERT_EQ(recorded.tensors.size(), now.size() + in.size());
  for (const auto& [name, tensor] : now) {
    const auto it = recorded.tensors.find(name);
    ASSERT_NE(it, recorded.tensors.end()) << name;
    ASSERT_EQ(it->second.dtype(), tensor.dtype()) << name;
    ASSERT_EQ(it->second.shape(), tensor.shape()) << name;
    EXPECT_EQ(std::memcmp(it->second.data(), tensor.data(), tensor.nbytes()), 0)
        << label << " " << dtype_name(dtype) << ": '" << name << "' differs from the recorded bits";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryCellAndDtype, SolverGolden,
                         ::testing::Combine(::testing::ValuesIn(every_label()), ::testing::ValuesIn(kDtypes)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" +
                                              std::string(dtype_name(std::get<1>(info.param)));
                           for (char& ch : name)
                             if (ch == ':') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace pararnn
