// What every libFuzzer target of pararnn shares (docs/testing.md, "Fuzzing"): the readers take
// paths, so the input is written to a per-process file first; a refusal is a typed pararnn
// error (pararnn::Error: ContractViolation, CaseFileError, ...) and is the expected outcome of
// a malformed input; any other exception escaping a reader, a crash or a sanitizer report is a
// finding. `PARARNN_FUZZ_EXPECT(cond, what)` aborts with a message when a target's own claim
// (e.g. "refused by one reading => refused by the other") does not hold.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "pararnn/core/errors.hpp"

namespace pararnn::fuzz {

// The input bytes as a file in the temp folder (one per process: libFuzzer's -fork/-jobs workers).
inline std::filesystem::path input_file(const std::uint8_t* data, std::size_t size, const char* stem) {
  const auto path = std::filesystem::temp_directory_path() /
                    (std::string("pararnn-fuzz-") + stem + "-" + std::to_string(::getpid()) + ".safetensors");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "pararnn fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs `read`; true when it accepted the input, false on a typed refusal; anything else aborts.
template <class Read>
bool accepts(Read&& read, std::string* message = nullptr) {
  try {
    read();
    return true;
  } catch (const Error& e) {
    if (message) *message = e.what();
    return false;
  } catch (const std::exception& e) {
    finding(std::string("untyped exception escaped: ") + e.what());
  }
}

}  // namespace pararnn::fuzz

#define PARARNN_FUZZ_EXPECT(cond, what) \
  do {                                  \
    if (!(cond)) ::pararnn::fuzz::finding(what); \
  } while (0)
