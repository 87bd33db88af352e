// Shared by the reports tests: the committed golden report and small file helpers.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "pararnn/reports/report_json.hpp"

namespace pararnn::reports::testing {

inline std::filesystem::path golden_dir() { return PARARNN_REPORTS_GOLDEN_DIR; }

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline nlohmann::ordered_json golden_report() { return load_report(golden_dir() / "nightly.json"); }

// A fresh folder under the test artifacts (or the temp dir), emptied first.
inline std::filesystem::path scratch(const std::string& name) {
  const char* artifacts = std::getenv("PARARNN_TEST_ARTIFACTS");
  const std::filesystem::path root = artifacts ? std::filesystem::path(artifacts) : std::filesystem::temp_directory_path();
  const auto dir = root / "reports" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pararnn::reports::testing
