#include "bundle_archive.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/errors.hpp"
#include "pararnn/reports/process.hpp"

namespace pararnn::nightly::detail {
namespace {

// The size cap, over the files as they will be archived.
void check_size(const std::filesystem::path& dir, std::int64_t max_bytes) {
  std::int64_t total = 0;
  std::vector<std::pair<std::int64_t, std::string>> sizes;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_symlink() || (!entry.is_regular_file() && !entry.is_directory()))
      throw Error(fmt::format("bug-bundle: {} is not a regular file; refusing to archive it", entry.path().string()));
    if (!entry.is_regular_file()) continue;
    const auto size = static_cast<std::int64_t>(entry.file_size());
    total += size;
    sizes.emplace_back(size, std::filesystem::relative(entry.path(), dir).string());
  }
  if (total <= max_bytes) return;
  std::sort(sizes.rbegin(), sizes.rend());
  std::string largest;
  for (std::size_t i = 0; i < sizes.size() && i < 3; ++i)
    largest += fmt::format("{}{} ({} bytes)", i ? ", " : "", sizes[i].second, sizes[i].first);
  throw ContractViolation("--max-bytes",
                          fmt::format("the bundle's files must fit in {} bytes; largest: {}. Make the case smaller "
                                      "(fewer batch rows, a shorter T) or raise --max-bytes",
                                      max_bytes, largest),
                          fmt::format("{} bytes", total));
}

}  // namespace

ArchiveResult archive_bundle(const std::filesystem::path& scratch, const std::string& stem,
                             const std::filesystem::path& out, std::int64_t max_bytes) {
  check_size(scratch / stem, max_bytes);
  ArchiveResult result;
  const std::filesystem::path archive = scratch / "bundle.tar.gz";
  const auto tar = reports::run_process({"tar", "--create", "--gzip", "--file", archive.string(), "--directory",
                                         scratch.string(), "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
                                         "--", stem});
  if (tar.exit_code != 0) throw Error(fmt::format("tar failed (exit {}): {}", tar.exit_code, tar.stderr_text));
  std::ostringstream listing;
  const auto list = reports::run_process({"tar", "--list", "--gzip", "--file", archive.string()}, &listing);
  if (list.exit_code != 0) throw Error(fmt::format("tar --list failed (exit {}): {}", list.exit_code, list.stderr_text));
  std::istringstream lines(listing.str());
  for (std::string line; std::getline(lines, line);) {
    if (line != stem + "/" && (line.rfind(stem + "/", 0) != 0 || line.find("..") != std::string::npos))
      throw Error(fmt::format("bug-bundle: the archive holds '{}', outside its folder {}/; not written", line, stem));
    if (line != stem + "/") result.files.push_back(line.substr(stem.size() + 1));
  }
  result.bytes = static_cast<std::int64_t>(std::filesystem::file_size(archive));
  if (result.bytes > max_bytes)
    throw ContractViolation("--max-bytes", fmt::format("the archive must fit in {} bytes", max_bytes),
                            fmt::format("{} bytes", result.bytes));
  std::ifstream in(archive, std::ios::binary);
  write_file_atomically(out, [&](std::ostream& o) { o << in.rdbuf(); });
  return result;
}

}  // namespace pararnn::nightly::detail
