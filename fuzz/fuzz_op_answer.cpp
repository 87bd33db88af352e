// libFuzzer target: another solver's answer to an op case, read as `pararnn compare` reads it on an
// op case (tools/src/op_commands.cpp: read_safetensors, then judge_op). The first byte picks the
// op (op_names() order) and so the fixed tiny case `pararnn make-case --op OP --batch 1 --time 4
// --n-heads 1 --k-dim 2 --v-dim 2 --seed 3` writes (V 1 for selective_scan), gradients of the
// default loss; the rest is the answer file. Claims: a malformed answer is refused with a typed
// error; an accepted one gets a verdict; Agree only when every output of op_output_names is
// present and every judged output and gradient is within τ; an answer holding a NaN or an
// infinity in any tensor (an accepted answer's tensors are all judged) is never Agree (these
// cases' oracle values are far inside f32's range, so no infinity stands for an unrepresentable
// value).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "pararnn/contracts/op_judge.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/op_case.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  if (size == 0) return 0;
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> out;
    for (const std::string& op : op_names())  // selective_scan's state per channel is N values: V 1
      out.push_back(generate_op_case({.op = op, .time = 4, .heads = 1, .k_dim = 2, .v_dim = op == "selective_scan" ? 1 : 2, .seed = 3}));
    return out;
  }();
  const OpCase& problem = cases[data[0] % cases.size()];
  const auto path = fuzz::input_file(data + 1, size - 1, "op-answer");
  SafetensorsFile file;
  if (!fuzz::accepts([&] { file = read_safetensors(path); })) return 0;
  OpReport report;
  if (!fuzz::accepts([&] { report = judge_op(problem, file.tensors, {.certify_budget = 64}); })) return 0;
  if (report.verdict != Verdict::agree) return 0;
  for (const std::string& name : op_output_names(problem))
    PARARNN_FUZZ_EXPECT(file.tensors.contains(name), "Agree without the output " + name);
  for (const auto& checks : {report.outputs, report.gradients})
    for (const OpOutputCheck& c : checks)
      PARARNN_FUZZ_EXPECT(c.present && c.finding == "within", "Agree with " + c.name + " " + c.finding);
  for (const auto& [name, tensor] : file.tensors)
    for (double v : tensor.to_f64_vector())
      PARARNN_FUZZ_EXPECT(std::isfinite(v), "an answer holding a non-finite value in " + name + " was judged Agree");
  return 0;
}
