// The archive step of every bundle (`pararnn bug-bundle`, and the bundles of an external
// solver's failing rows): the size cap over the files, the system tar (GNU tar, --sort=name,
// numeric owner 0), the listing checked to hold only <stem>/... entries, and the archive copied
// into place atomically. Internal to pararnn::nightly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace pararnn::nightly::detail {

struct ArchiveResult {
  std::vector<std::string> files;  // inside the folder
  std::int64_t bytes = 0;          // of the archive
};

// Archives `scratch`/`stem`/ (regular files only; a link or a special file is refused) into
// `out`. Over `max_bytes` (the files before compression, or the archive) nothing is written and
// the ContractViolation names the sizes and the three largest files.
ArchiveResult archive_bundle(const std::filesystem::path& scratch, const std::string& stem,
                             const std::filesystem::path& out, std::int64_t max_bytes);

}  // namespace pararnn::nightly::detail
