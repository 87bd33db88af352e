// libFuzzer target: the metadata (constructor arguments) of a case, on a valid tiny case of each
// cell. Input: byte 0 picks the cell, then NUL-separated key, value pairs that replace or add
// metadata entries. Claim: the typed readers (Case::meta_int, meta_double, meta_cap) and both
// case readings refuse with a typed error or accept, and the two readings agree.
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "pararnn/contracts/case_rules.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/solver.hpp"

namespace {

const std::vector<pararnn::Case>& base_cases() {
  static const std::vector<pararnn::Case> cases = [] {
    using namespace pararnn;
    std::vector<Case> out;
    for (const char* name : {"gru", "lstm", "nlru", "slstm", "cfc", "titans", "hopfield", "m2rnn", "rwkv7"}) {
      CellOptions options{.cell = name, .d_in = 3, .d_h = 4};
      if (std::string(name) == "m2rnn") options = {.cell = name, .d_in = 3, .d_h = 0, .k_dim = 2, .v_dim = 2};
      if (std::string(name) == "rwkv7") options.n_heads = 2;
      const Cell cell = Cell::initialise(options, DType::f32, 1);
      out.push_back(cell.make_case(Tensor(DType::f32, {1, 3, 3})));
    }
    return out;
  }();
  return cases;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  if (size < 1) return 0;
  Case problem = base_cases()[data[0] % base_cases().size()];
  std::vector<std::string> parts(1);
  for (std::size_t i = 1; i < size; ++i) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back() += static_cast<char>(data[i]);
  }
  for (std::size_t i = 0; i + 1 < parts.size(); i += 2) problem.metadata[parts[i]] = parts[i + 1];
  if (auto it = problem.metadata.find("cell"); it != problem.metadata.end()) problem.cell = it->second;
  for (const auto& entry : problem.metadata) {  // (clang 14 cannot capture a structured binding)
    const std::string& key = entry.first;
    (void)fuzz::accepts([&] { (void)problem.meta_int(key, 0); });
    (void)fuzz::accepts([&] { (void)problem.meta_double(key, 0.0); });
  }
  (void)fuzz::accepts([&] { (void)problem.meta_cap(std::nullopt); });
  std::string production_message, oracle_message;
  const bool production = fuzz::accepts([&] {
    const Cell cell = Cell::from_case(problem);
    validate_apply_inputs(cell, problem.x, {});
  }, &production_message);
  const bool oracle = fuzz::accepts([&] { (void)reference::oracle_state_shape(problem); }, &oracle_message);
  PARARNN_FUZZ_EXPECT(production == oracle, "production " + std::string(production ? "accepts" : "refuses: ") +
                                                production_message + " / oracle " +
                                                (oracle ? "accepts" : "refuses: ") + oracle_message);
  return 0;
}
