#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

#include "pararnn/core/case_file.hpp"

namespace pararnn {

namespace {

// The tensors of a file that make up the problem; every other tensor is a parameter.
constexpr std::string_view kInput = "x";
constexpr std::string_view kInitialState = "h0";
constexpr std::string_view kSeqlens = "cu_seqlens";
constexpr std::string_view kCotangent = "grad.H";

[[noreturn]] void file_error(const std::filesystem::path& path, std::string_view problem) {
  throw CaseFileError(fmt::format("{}: {}", path.string(), problem));
}

[[noreturn]] void tensor_error(const std::filesystem::path& path, std::string_view name,
                               std::string_view problem) {
  throw CaseFileError(fmt::format("{}: tensor '{}': {}", path.string(), name, problem));
}

void require_case_dtype(const std::filesystem::path& path, const std::string& name,
                        const Tensor& tensor, DType case_dtype) {
  if (tensor.dtype() != case_dtype) {
    tensor_error(path, name,
                 fmt::format("dtype {} differs from the case dtype {} (the dtype of 'x'); a case "
                             "holds one storage dtype",
                             dtype_safetensors_name(tensor.dtype()),
                             dtype_safetensors_name(case_dtype)));
  }
}

std::string_view trimmed(std::string_view text) {
  const auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// Parses the whole of `text` as a T, or nothing.
template <class T>
std::optional<T> parse_number(std::string_view text) {
  text = trimmed(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string metadata_argument(const std::string& key) { return fmt::format("metadata '{}'", key); }

// What a Python user's metadata holds for an argument left at None: str(None), or nothing.
bool is_absent_word(std::string_view text) {
  const std::string_view word = trimmed(text);
  return word.empty() || word == "None" || word == "none";
}

// Packing as metadata "cu_seqlens" = "0,5,12": every item a plain integer (no spaces, signs,
// fractions or empty items), each within int64.
Tensor metadata_cu_seqlens(const std::filesystem::path& path, const std::string& text) {
  std::vector<double> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = std::string_view(text).substr(start, comma - start);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      const std::string why = ec == std::errc::result_out_of_range ? "is outside int64" : "is not an integer";
      throw CaseFileError(fmt::format("{}: metadata 'cu_seqlens': item {} '{}' {} (the value must be "
                                      "comma-separated integers, e.g. \"0,5,12\"; got '{}')",
                                      path.string(), values.size(), item, why, text));
    }
    if (std::abs(static_cast<double>(value)) > 9007199254740992.0) {  // 2^53: exact as double
      throw CaseFileError(fmt::format("{}: metadata 'cu_seqlens': item {} = {} is beyond 2^53",
                                      path.string(), values.size(), value));
    }
    values.push_back(static_cast<double>(value));
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return Tensor::from_values(DType::i64, {static_cast<std::int64_t>(values.size())}, values);
}

// Cases as pararnn-torch users dump them, completed so that every path reads the same problem:
// - ParaCfC of 0.17.4 had no W_b (gate a = σ(−softplus(f_pre)·Δt)); it is the 0.17.5 cell with
//   W_b ≡ 0, so zero W_b tensors are added and metadata "cell_version" records the version.
// - ParaM2RNN's k_dim and v_dim, when absent, follow from W (V, V) and W_x.weight (K + V + 1 rows).
void complete_pararnn_torch_case(Case& problem) {
  const auto weight = problem.parameters.find("W_x.weight");
  if (problem.cell == "cfc" && weight != problem.parameters.end() && weight->second.dim() == 2 &&
      weight->second.size(0) % 2 == 0 && !problem.parameters.contains("W_b.weight") &&
      !problem.parameters.contains("W_b.bias") && problem.meta("gate_mix").value_or("input") == "input") {
    const std::int64_t d_h = weight->second.size(0) / 2, features = weight->second.size(1);
    problem.parameters.emplace("W_b.weight", Tensor(weight->second.dtype(), {d_h, features}));
    problem.parameters.emplace("W_b.bias", Tensor(weight->second.dtype(), {d_h}));
    problem.metadata["cell_version"] = "pararnn-torch 0.17.4 (no W_b: read as W_b = 0)";
  }
  const auto value_matrix = problem.parameters.find("W");
  if (problem.cell == "m2rnn" && weight != problem.parameters.end() && weight->second.dim() == 2 &&
      value_matrix != problem.parameters.end() && value_matrix->second.dim() == 2 &&
      value_matrix->second.size(0) == value_matrix->second.size(1)) {
    const std::int64_t v_dim = value_matrix->second.size(0);
    const std::int64_t k_dim = weight->second.size(0) - v_dim - 1;
    if (!problem.meta("v_dim")) problem.metadata["v_dim"] = std::to_string(v_dim);
    if (!problem.meta("k_dim") && k_dim >= 1) problem.metadata["k_dim"] = std::to_string(k_dim);
  }
}

}  // namespace

std::optional<std::string> Case::meta(const std::string& key) const {
  const auto it = metadata.find(key);
  if (it == metadata.end() || is_absent_word(it->second)) return std::nullopt;
  return it->second;
}

std::int64_t Case::meta_int(const std::string& key, std::int64_t fallback) const {
  const auto text = meta(key);
  if (!text) return fallback;
  const auto value = parse_number<std::int64_t>(*text);
  if (!value) throw ContractViolation(metadata_argument(key), "must be an integer", *text);
  return *value;
}

double Case::meta_double(const std::string& key, double fallback) const {
  const auto text = meta(key);
  if (!text) return fallback;
  const auto value = parse_number<double>(*text);
  if (!value) throw ContractViolation(metadata_argument(key), "must be a number", *text);
  return *value;
}

std::optional<double> Case::meta_cap(std::optional<double> fallback) const {
  // Read raw: here "None" is a value (Python's max_recurrent_norm=None: no clamp), while an
  // empty entry is an absent one (the cell's default).
  static const std::string key = "max_recurrent_norm";
  const auto it = metadata.find(key);
  if (it == metadata.end() || trimmed(it->second).empty()) return fallback;
  const std::optional<std::string> text = it->second;
  const std::string_view word = trimmed(*text);
  if (word == "none" || word == "None" || word == "null" || word == "NONE") return std::nullopt;
  const auto value = parse_number<double>(word);
  if (!value) throw ContractViolation(metadata_argument(key), "must be a number or none", *text);
  return *value;
}

const Tensor& Case::parameter(const std::string& name) const {
  const auto it = parameters.find(name);
  if (it != parameters.end()) return it->second;
  std::string present;
  for (const auto& [key, tensor] : parameters) {
    present += present.empty() ? key : ", " + key;
  }
  throw CaseFileError(fmt::format("case for cell '{}': parameter '{}' is missing (the case "
                                  "holds: {})",
                                  cell, name, present.empty() ? "no parameters" : present));
}

Case case_from_file(const SafetensorsFile& file, const std::filesystem::path& path) {
  Case problem;
  problem.metadata = file.metadata;
  const auto cell = file.metadata.find("cell");
  if (cell == file.metadata.end()) {
    file_error(path, "metadata 'cell' is missing (it names the cell: gru, lstm, slstm, nlru, cfc, "
                     "titans, hopfield, m2rnn, rwkv7)");
  }
  if (trimmed(cell->second).empty()) file_error(path, "metadata 'cell' is empty");
  problem.cell = cell->second;

  const auto x = file.tensors.find(std::string(kInput));
  if (x == file.tensors.end()) file_error(path, "tensor 'x' is missing (the input, (B, T, d_in))");
  if (x->second.dim() != 3) {
    tensor_error(path, kInput, fmt::format("must be 3-D (B, T, d_in), got shape {}",
                                           shape_string(x->second.shape())));
  }
  if (!is_floating(x->second.dtype())) {
    tensor_error(path, kInput, fmt::format("must have a floating dtype (F64, F32, F16, BF16), "
                                           "got {}",
                                           dtype_safetensors_name(x->second.dtype())));
  }
  problem.x = x->second;
  const DType dtype = problem.x.dtype();

  for (const auto& [name, tensor] : file.tensors) {
    if (name == kInput) continue;
    if (name == kSeqlens) {
      if (tensor.dtype() != DType::i32 && tensor.dtype() != DType::i64) {
        tensor_error(path, name, fmt::format("must have dtype I32 or I64, got {}",
                                             dtype_safetensors_name(tensor.dtype())));
      }
      problem.cu_seqlens = tensor;
      continue;
    }
    require_case_dtype(path, name, tensor, dtype);
    if (name == kInitialState) {
      problem.h0 = tensor;
    } else if (name == kCotangent) {
      problem.grad_H = tensor;
    } else {
      problem.parameters.emplace(name, tensor);
    }
  }
  // Packing may also come as metadata "cu_seqlens" = "0,5,12" (a tensor wins when both exist).
  if (!problem.cu_seqlens) {
    if (auto it = problem.metadata.find(std::string(kSeqlens)); it != problem.metadata.end())
      problem.cu_seqlens = metadata_cu_seqlens(path, it->second);
  }
  complete_pararnn_torch_case(problem);
  return problem;
}

Case read_case(const std::filesystem::path& path) {
  return case_from_file(read_safetensors(path), path);
}

void write_case(const std::filesystem::path& path, const Case& problem) {
  if (problem.cell.empty()) file_error(path, "the case has no cell name");
  if (!problem.x.defined()) tensor_error(path, kInput, "is undefined; a case needs an input");
  std::map<std::string, Tensor> tensors;
  const auto add = [&](std::string_view name, const Tensor& tensor) {
    if (!tensors.emplace(std::string(name), tensor).second) {
      tensor_error(path, name, "appears twice (a parameter may not use a reserved name: x, h0, "
                               "cu_seqlens, grad.H)");
    }
  };
  for (const auto& [name, tensor] : problem.parameters) add(name, tensor);
  add(kInput, problem.x);
  if (problem.h0) add(kInitialState, *problem.h0);
  if (problem.cu_seqlens) add(kSeqlens, *problem.cu_seqlens);
  if (problem.grad_H) add(kCotangent, *problem.grad_H);
  std::map<std::string, std::string> metadata = problem.metadata;
  metadata["cell"] = problem.cell;
  write_safetensors(path, tensors, metadata);
}

}  // namespace pararnn
