// libFuzzer target: an op case file (read_op_case, the reader of `pararnn compare|oracle|solve`
// on op cases). Claims: a malformed case is refused with a typed error; an accepted case written
// with write_op_case and read again gives the same inputs, initial state, cu_seqlens and
// cotangents (names, shapes, dtypes, bytes) and metadata; and, on cases of at most 4096 input
// values, the judge of an all-zero answer returns a verdict (or a typed refusal), never Agree
// when an input holds a NaN (every input value reaches an output, so the oracle is not finite).
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "fuzz_input.hpp"
#include "pararnn/contracts/op_judge.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/op_case.hpp"

namespace {

bool same_tensor(const pararnn::Tensor& a, const pararnn::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  const auto path = fuzz::input_file(data, size, "op-case");
  OpCase problem;
  if (!fuzz::accepts([&] { problem = read_op_case(path); })) return 0;
  write_op_case(path, problem);
  const OpCase again = read_op_case(path);
  PARARNN_FUZZ_EXPECT(again.op == problem.op && again.metadata == problem.metadata, "metadata changed in a round trip");
  PARARNN_FUZZ_EXPECT(again.inputs.size() == problem.inputs.size(), "input count changed in a round trip");
  for (const auto& [name, tensor] : problem.inputs)
    PARARNN_FUZZ_EXPECT(again.inputs.contains(name) && same_tensor(again.inputs.at(name), tensor),
                        "input " + name + " changed in a round trip");
  const auto same_optional = [](const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
    return a.has_value() == b.has_value() && (!a || same_tensor(*a, *b));
  };
  PARARNN_FUZZ_EXPECT(same_optional(again.initial_state, problem.initial_state), "initial_state changed in a round trip");
  PARARNN_FUZZ_EXPECT(same_optional(again.cu_seqlens, problem.cu_seqlens), "cu_seqlens changed in a round trip");
  PARARNN_FUZZ_EXPECT(again.cotangents.size() == problem.cotangents.size(), "cotangent count changed in a round trip");
  for (const auto& [name, tensor] : problem.cotangents)
    PARARNN_FUZZ_EXPECT(again.cotangents.contains(name) && same_tensor(again.cotangents.at(name), tensor),
                        "cotangent grad." + name + " changed in a round trip");
  std::int64_t values = 0;
  bool nan_input = false;
  for (const auto& [name, tensor] : problem.inputs) {
    values += tensor.numel();
    if (values <= 4096)
      for (double v : tensor.to_f64_vector()) nan_input = nan_input || std::isnan(v);
  }
  if (problem.initial_state) {
    values += problem.initial_state->numel();
    if (values <= 4096)
      for (double v : problem.initial_state->to_f64_vector()) nan_input = nan_input || std::isnan(v);
  }
  if (values > 4096) return 0;
  std::map<std::string, Tensor> zeros;
  for (const std::string& name : op_output_names(problem)) {
    const Shape shape = name == op_output_names(problem).front() ? problem.o_shape() : problem.final_state_shape();
    zeros.emplace(name, Tensor(problem.dtype(), shape));  // zero-filled
  }
  OpReport report;
  if (!fuzz::accepts([&] { report = judge_op(problem, zeros, {.certify_budget = 64}); })) return 0;
  PARARNN_FUZZ_EXPECT(!nan_input || report.verdict != Verdict::agree, "a case with a NaN input judged Agree");
  return 0;
}
