// Shared by the reports tests: the committed golden report and small file helpers.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
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

// A fresh folder under the test artifacts (or the temp dir), emptied first, one per test: ctest
// runs every test in its own process and in parallel, so a folder shared by the tests of a suite
// would be emptied by one while another writes into it.
inline std::filesystem::path scratch(const std::string& name) {
  const char* artifacts = std::getenv("PARARNN_TEST_ARTIFACTS");
  const std::filesystem::path root = artifacts ? std::filesystem::path(artifacts) : std::filesystem::temp_directory_path();
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto dir = root / "reports" / name /
                   (test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : std::string("outside-a-test"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace pararnn::reports::testing
