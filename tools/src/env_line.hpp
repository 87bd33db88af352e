// One line: pararnn version and git sha, compiler, CUDA runtime and driver, GPU (or "cpu").
#pragma once
#include <string>
namespace pararnn::tools {
std::string env_line();
}
