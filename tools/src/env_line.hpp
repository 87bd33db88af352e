// This build and machine: pararnn version and git sha, compiler, CUDA runtime and driver, GPU
// (or "cpu"). `env_line()` is the one line `pararnn env` prints; `build_context()` is the same
// facts as the context block of a nightly report.
#pragma once
#include <string>

#include "pararnn/reports/report_json.hpp"

namespace pararnn::tools {
std::string env_line();
reports::BuildContext build_context();  // env_line included
bool cuda_device_available();
}
