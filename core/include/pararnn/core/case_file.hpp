// safetensors files (the Hugging Face format) and the Case they carry.
//
// Guarantees: `read_safetensors` validates the whole file before returning anything: header
// length within the file, JSON header well formed, every tensor's dtype known, offsets in
// order, inside the data section, non-overlapping and matching shape x dtype size. Any problem
// raises CaseFileError naming the file, the tensor and the problem. `write_safetensors` writes
// to a temporary file in the same folder and renames it, so a failed write never leaves a
// partial file. Example:
//   write_safetensors("case.safetensors", {{"x", x}}, {{"cell", "gru"}});
//   SafetensorsFile f = read_safetensors("case.safetensors");
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string_view>
#include <map>
#include <optional>
#include <string>

#include "pararnn/core/tensor.hpp"

namespace pararnn {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" string map
};

SafetensorsFile read_safetensors(const std::filesystem::path& path);
// Tensors are written contiguous, in name order.
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Every output file of pararnn is written through here: `write` fills a temporary next to
// `path`, which is renamed onto `path` only when everything was written; on any failure the
// temporary is removed and nothing is left behind. A directory at `path` is refused.
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);
// Refuses, before any work is done, an output path that cannot be written: empty, a directory,
// or in a directory that does not exist (ContractViolation naming `argument` and the path).
void check_output_path(const std::filesystem::path& path, std::string_view argument);

// A problem for the solver and the oracle: which cell, its parameters (under the Python
// library's state_dict names), the input and the optional initial state, packing and cotangent.
// The storage dtype of the case is the dtype of `x`.
struct Case {
  std::string cell;                               // metadata "cell": gru, lstm, nlru, ...
  std::map<std::string, std::string> metadata;    // every metadata entry, "cell" included
  std::map<std::string, Tensor> parameters;       // state_dict name -> tensor
  Tensor x;                                       // (B, T, d_in)
  std::optional<Tensor> h0;                       // (B, slots, d_h) or (B, d_h)
  std::optional<Tensor> cu_seqlens;               // (S+1,) int32/int64
  std::optional<Tensor> grad_H;                   // cotangent of H ("grad.H")

  DType dtype() const { return x.dtype(); }
  // Typed metadata with clear errors naming the key. An entry "None", "none" or "" (what
  // str(None) gives a Python user) is absent, except for max_recurrent_norm, where "none" means
  // no clamp.
  std::optional<std::string> meta(const std::string& key) const;
  std::int64_t meta_int(const std::string& key, std::int64_t fallback) const;
  double meta_double(const std::string& key, double fallback) const;
  // "max_recurrent_norm": a number, or "none" -> nullopt; absent -> fallback.
  std::optional<double> meta_cap(std::optional<double> fallback) const;
  const Tensor& parameter(const std::string& name) const;  // CaseFileError if missing
};

// Splits a file into a Case: tensors "x", "h0", "cu_seqlens", "grad.H" are the problem, every
// other tensor is a parameter. Needs metadata "cell" and a 3-D floating "x". Completes cases as
// pararnn-torch writes them (docs/pararnn-torch-cases.md): a ParaCfC of 0.17.4 (no W_b) gets
// W_b = 0 and metadata "cell_version"; a ParaM2RNN without k_dim / v_dim gets them from W and
// W_x.weight.
Case case_from_file(const SafetensorsFile& file, const std::filesystem::path& path);
Case read_case(const std::filesystem::path& path);
void write_case(const std::filesystem::path& path, const Case& problem);

}  // namespace pararnn
