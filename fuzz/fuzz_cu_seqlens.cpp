// libFuzzer target: cu_seqlens validation (solver.hpp validate_cu_seqlens) on arbitrary values.
// Input: byte 0 picks int32/int64 and the packed length N (byte 1), the rest are the entries.
// Claim: accepted lists are exactly those with entry 0 == 0, last == N, strictly increasing,
// at least two entries; the returned starts are the list without its last entry.
#include <cstring>
#include <vector>

#include "fuzz_input.hpp"
#include "pararnn/solver/solver.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  if (size < 2) return 0;
  const bool wide = data[0] & 1;
  const std::int64_t total = data[1];
  std::vector<std::int64_t> values;
  const std::size_t width = wide ? 8 : 4;
  for (std::size_t i = 2; i + width <= size; i += width) {
    if (wide) {
      std::int64_t v;
      std::memcpy(&v, data + i, 8);
      values.push_back(v);
    } else {
      std::int32_t v;
      std::memcpy(&v, data + i, 4);
      values.push_back(v);
    }
  }
  Tensor cu(wide ? DType::i64 : DType::i32, {static_cast<std::int64_t>(values.size())});
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (wide) cu.data_as<std::int64_t>()[i] = values[i];
    else cu.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(values[i]);
  }
  bool rule = values.size() >= 2 && values.front() == 0 && values.back() == total;
  for (std::size_t i = 1; rule && i < values.size(); ++i) rule = values[i] > values[i - 1];
  std::vector<std::int64_t> starts;
  const bool accepted = fuzz::accepts([&] { starts = validate_cu_seqlens(cu.view(), total); });
  PARARNN_FUZZ_EXPECT(accepted == rule, accepted ? "accepted a malformed cu_seqlens" : "refused a valid cu_seqlens");
  if (accepted)
    PARARNN_FUZZ_EXPECT(starts == std::vector<std::int64_t>(values.begin(), values.end() - 1), "wrong segment starts");
  return 0;
}
