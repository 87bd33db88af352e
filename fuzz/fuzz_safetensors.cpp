// libFuzzer target: the safetensors reader (core/case_file.hpp) on arbitrary bytes. Claim: it
// accepts or refuses with a typed error, and an accepted file written and read again gives the
// same tensors (names, shapes, dtypes, bytes) and metadata back.
#include <cstring>

#include "fuzz_input.hpp"
#include "pararnn/core/case_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pararnn;
  const auto path = fuzz::input_file(data, size, "safetensors");
  SafetensorsFile file;
  if (!fuzz::accepts([&] { file = read_safetensors(path); })) return 0;
  write_safetensors(path, file.tensors, file.metadata);
  const SafetensorsFile again = read_safetensors(path);
  PARARNN_FUZZ_EXPECT(again.metadata == file.metadata, "metadata changed in a round trip");
  PARARNN_FUZZ_EXPECT(again.tensors.size() == file.tensors.size(), "tensor count changed in a round trip");
  for (const auto& [name, tensor] : file.tensors) {
    const Tensor& back = again.tensors.at(name);
    PARARNN_FUZZ_EXPECT(back.shape() == tensor.shape() && back.dtype() == tensor.dtype() &&
                            (tensor.nbytes() == 0 || std::memcmp(back.data(), tensor.data(), tensor.nbytes()) == 0),
                        "tensor " + name + " changed in a round trip");
  }
  return 0;
}
