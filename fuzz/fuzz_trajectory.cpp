// libFuzzer target: a trajectory file for `pararnn compare` (a safetensors file whose tensor "H"
// is judged against the oracle of a fixed tiny case, as tools/src/commands.cpp does). Claim: a
// malformed or mis-shaped trajectory is refused with a typed error; an accepted one gets a
// verdict, and a trajectory holding a non-finite value is never Agree.
#include <cmath>

#include "fuzz_input.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/core/case_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  static const Case problem = [] {
    const Cell cell = Cell::initialise({.cell = "lstm", .d_in = 2, .d_h = 3}, DType::f32, 5);
    Tensor x(DType::f32, {1, 4, 2});
    for (std::int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
    return cell.make_case(x);
  }();
  const auto path = fuzz::input_file(data, size, "trajectory");
  SafetensorsFile file;
  if (!fuzz::accepts([&] { file = read_safetensors(path); })) return 0;
  const auto it = file.tensors.find("H");
  if (it == file.tensors.end()) return 0;
  AgreementReport report;
  if (!fuzz::accepts([&] { report = compare_trajectory(problem, it->second.view(), {.certify_budget = 64}); })) return 0;
  bool finite = true;
  const std::vector<double> values = it->second.to_f64_vector();
  for (double v : values) finite = finite && std::isfinite(v);
  PARARNN_FUZZ_EXPECT(finite || report.verdict != Verdict::agree, "a non-finite trajectory was judged Agree");
  return 0;
}
