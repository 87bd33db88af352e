// safetensors reader and writer. The reader checks the whole header against the file before it
// allocates or reads any tensor, so a bad file yields one CaseFileError and nothing else.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "pararnn/core/case_file.hpp"

namespace pararnn {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; pararnn reads it in place");

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::string_view kMetadataKey = "__metadata__";

[[noreturn]] void file_error(const std::filesystem::path& path, std::string_view problem) {
  throw CaseFileError(fmt::format("{}: {}", path.string(), problem));
}

[[noreturn]] void tensor_error(const std::filesystem::path& path, std::string_view name,
                               std::string_view problem) {
  throw CaseFileError(fmt::format("{}: tensor '{}': {}", path.string(), name, problem));
}

std::string errno_text() { return std::strerror(errno); }

// A tensor entry of the header, checked against the data section.
struct Entry {
  std::string name;
  DType dtype{};
  Shape shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

std::optional<DType> safetensors_dtype(std::string_view name) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    if (name == dtype_safetensors_name(dtype)) return dtype;
  }
  return std::nullopt;
}

Entry parse_entry(const std::filesystem::path& path, const std::string& name,
                  const nlohmann::json& value, std::uint64_t data_bytes) {
  Entry entry;
  entry.name = name;
  if (!value.is_object()) tensor_error(path, name, "entry is not a JSON object");

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) tensor_error(path, name, "has no \"dtype\"");
  if (!dtype_it->is_string()) {
    tensor_error(path, name, fmt::format("\"dtype\" is not a string (got {})", dtype_it->dump()));
  }
  const auto dtype = safetensors_dtype(dtype_it->get_ref<const std::string&>());
  if (!dtype) {
    tensor_error(path, name, fmt::format("unsupported dtype {} (pararnn reads F64, F32, F16, "
                                         "BF16, I32, I64)",
                                         dtype_it->dump()));
  }
  entry.dtype = *dtype;

  const auto shape_it = value.find("shape");
  if (shape_it == value.end()) tensor_error(path, name, "has no \"shape\"");
  if (!shape_it->is_array()) {
    tensor_error(path, name, fmt::format("\"shape\" is not an array (got {})", shape_it->dump()));
  }
  std::uint64_t numel = 1;
  bool numel_overflows = false;
  for (const auto& extent : *shape_it) {
    if (!extent.is_number_unsigned() ||
        extent.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      tensor_error(path, name, fmt::format("\"shape\" must hold non-negative integers (got {})",
                                           shape_it->dump()));
    }
    const auto n = extent.get<std::uint64_t>();
    entry.shape.push_back(static_cast<std::int64_t>(n));
    numel_overflows = numel_overflows || __builtin_mul_overflow(numel, n, &numel);
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end()) tensor_error(path, name, "has no \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    tensor_error(path, name,
                 fmt::format("\"data_offsets\" must be two non-negative integers (got {})",
                             offsets_it->dump()));
  }
  entry.begin = (*offsets_it)[0].get<std::uint64_t>();
  entry.end = (*offsets_it)[1].get<std::uint64_t>();
  if (entry.begin > entry.end) {
    tensor_error(path, name, fmt::format("data_offsets [{}, {}] end before they begin",
                                         entry.begin, entry.end));
  }
  if (entry.end > data_bytes) {
    tensor_error(path, name,
                 fmt::format("data_offsets [{}, {}] run past the end of the data section "
                             "({} bytes; the file is truncated or the header is wrong)",
                             entry.begin, entry.end, data_bytes));
  }
  std::uint64_t expected = 0;
  if (numel_overflows || __builtin_mul_overflow(numel, dtype_size(entry.dtype), &expected) ||
      expected != entry.end - entry.begin) {
    tensor_error(path, name,
                 fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                             shape_string(entry.shape), dtype_safetensors_name(entry.dtype),
                             numel_overflows ? std::string("too many")
                                             : std::to_string(numel * dtype_size(entry.dtype)),
                             entry.begin, entry.end, entry.end - entry.begin));
  }
  return entry;
}

std::map<std::string, std::string> parse_metadata(const std::filesystem::path& path,
                                                  const nlohmann::json& value) {
  if (!value.is_object()) {
    file_error(path, fmt::format("\"__metadata__\" is not a JSON object (got {})",
                                 value.dump(-1, ' ', false,
                                            nlohmann::json::error_handler_t::replace)));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, entry] : value.items()) {
    if (!entry.is_string()) {
      file_error(path, fmt::format("metadata '{}' is not a string (got {}); safetensors "
                                   "metadata maps strings to strings",
                                   key, entry.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace)));
    }
    metadata.emplace(key, entry.get<std::string>());
  }
  return metadata;
}

}  // namespace

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file_error(path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) file_error(path, fmt::format("cannot open for reading ({})", errno_text()));
  const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) file_error(path, fmt::format("cannot read the file size ({})", ec.message()));

  if (file_bytes < 8) {
    file_error(path, fmt::format("file is {} bytes, shorter than the 8-byte header length; "
                                 "not a safetensors file or truncated",
                                 file_bytes));
  }
  std::array<unsigned char, 8> length_bytes{};
  if (!in.read(reinterpret_cast<char*>(length_bytes.data()), 8)) {
    file_error(path, "cannot read the 8-byte header length");
  }
  std::uint64_t header_bytes = 0;
  for (std::size_t i = 0; i < 8; ++i) header_bytes |= std::uint64_t{length_bytes[i]} << (8 * i);
  if (header_bytes > kMaxHeaderBytes) {
    file_error(path, fmt::format("header length {} is absurd (the limit is {} bytes); not a "
                                 "safetensors file or corrupt",
                                 header_bytes, kMaxHeaderBytes));
  }
  if (header_bytes > file_bytes - 8) {
    file_error(path, fmt::format("header length {} runs past the end of the file ({} bytes); "
                                 "truncated or corrupt",
                                 header_bytes, file_bytes));
  }
  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = file_bytes - data_start;

  std::string header_text(header_bytes, '\0');
  if (!in.read(header_text.data(), static_cast<std::streamsize>(header_bytes))) {
    file_error(path, "cannot read the JSON header (file shrank while reading?)");
  }
  // JSON leaves duplicated keys to the parser (nlohmann keeps the last); a header that names a
  // tensor or a metadata key twice is ambiguous, so it is refused.
  nlohmann::json header;
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  const nlohmann::json::parser_callback_t find_duplicates =
      [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (event == Event::object_start) {
          open_objects.emplace_back();
        } else if (event == Event::object_end) {
          if (!open_objects.empty()) open_objects.pop_back();
        } else if (event == Event::key && !open_objects.empty() && parsed.is_string()) {
          if (!open_objects.back().insert(parsed.get<std::string>()).second && !duplicate)
            duplicate = parsed.get<std::string>();
        }
        return true;
      };
  try {
    header = nlohmann::json::parse(header_text, find_duplicates);
  } catch (const nlohmann::json::exception& e) {
    file_error(path, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (duplicate) {
    file_error(path, fmt::format("header names key '{}' twice (a duplicated key is ambiguous; "
                                 "each tensor and metadata key must appear once)",
                                 *duplicate));
  }
  if (!header.is_object()) {
    file_error(path, fmt::format("header is a JSON {}, not an object", header.type_name()));
  }

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      file.metadata = parse_metadata(path, value);
    } else {
      entries.push_back(parse_entry(path, key, value, data_bytes));
    }
  }

  // Offsets may leave gaps (and trailing bytes) but must never overlap.
  std::vector<const Entry*> by_offset;
  by_offset.reserve(entries.size());
  for (const Entry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& prev = *by_offset[i - 1];
    const Entry& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      tensor_error(path, cur.name,
                   fmt::format("data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", cur.begin,
                               cur.end, prev.name, prev.begin, prev.end));
    }
  }

  // Everything is consistent: allocate and read, in file order.
  for (const Entry* entry : by_offset) {
    Tensor tensor(entry->dtype, entry->shape);
    const std::uint64_t bytes = entry->end - entry->begin;
    if (bytes > 0) {
      in.seekg(static_cast<std::streamoff>(data_start + entry->begin));
      if (!in.read(static_cast<char*>(tensor.data()), static_cast<std::streamsize>(bytes))) {
        tensor_error(path, entry->name, "cannot read its data (file shrank while reading?)");
      }
    }
    file.tensors.emplace(entry->name, std::move(tensor));
  }
  return file;
}

void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) tensor_error(path, name, "the name is reserved for metadata");
    if (!tensor.defined()) tensor_error(path, name, "is an undefined (empty) Tensor");
    const std::uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", std::string(dtype_safetensors_name(tensor.dtype()))},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    file_error(path, fmt::format("cannot encode the header ({})", e.what()));
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::array<char, 8> length_bytes{};
  for (std::size_t i = 0; i < 8; ++i) {
    length_bytes[i] = static_cast<char>((header_text.size() >> (8 * i)) & 0xff);
  }

  write_file_atomically(path, [&](std::ostream& out) {
    out.write(length_bytes.data(), 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const auto& [name, tensor] : tensors) {
      out.write(static_cast<const char*>(tensor.data()), static_cast<std::streamsize>(tensor.nbytes()));
    }
  });
}

void check_output_path(const std::filesystem::path& path, std::string_view argument) {
  if (path.empty()) throw ContractViolation(argument, "needs a file path", "(empty)");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ContractViolation(argument, "must name a file, not a directory", path.string());
  const std::filesystem::path parent = path.parent_path().empty() ? "." : path.parent_path();
  if (!std::filesystem::is_directory(parent, ec))
    throw ContractViolation(argument, "must be in an existing directory", path.string());
}

void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    file_error(path, "is a directory; an output must name a file");
  const std::filesystem::path temp = path.string() + ".tmp-" + std::to_string(::getpid());
  try {
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      if (!out) file_error(path, fmt::format("cannot open {} for writing ({})", temp.string(),
                                             errno_text()));
      write(out);
      out.close();
      if (!out) file_error(path, fmt::format("writing {} failed ({})", temp.string(),
                                             errno_text()));
    }
    std::filesystem::rename(temp, path, ec);
    if (ec) file_error(path, fmt::format("cannot rename {} into place ({})", temp.string(),
                                         ec.message()));
  } catch (...) {
    std::filesystem::remove(temp, ec);
    throw;
  }
}

}  // namespace pararnn
