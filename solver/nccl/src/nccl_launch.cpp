// The torchrun-style launch of an NCCL rank from the environment (nccl_communicator.hpp); built
// with or without NCCL, so a launch is checked the same way everywhere.
#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>

#include "pararnn/core/errors.hpp"
#include "pararnn/solver/nccl_communicator.hpp"

namespace pararnn {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

int env_int(const char* name, std::optional<int> fallback, int min) {
  const auto text = env(name);
  if (!text) {
    if (fallback) return *fallback;
    throw ContractViolation(name, "must be set (the launcher's rank variables: RANK, WORLD_SIZE, LOCAL_RANK)", "unset");
  }
  int value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size() || value < min)
    throw ContractViolation(name, fmt::format("must be an integer >= {}", min), *text);
  return value;
}

}  // namespace

NcclLaunch nccl_launch_from_env() {
  NcclLaunch launch;
  launch.world_size = env_int("WORLD_SIZE", std::nullopt, 1);
  launch.rank = env_int("RANK", std::nullopt, 0);
  if (launch.rank >= launch.world_size)
    throw ContractViolation("RANK", fmt::format("must be below WORLD_SIZE = {}", launch.world_size),
                            std::to_string(launch.rank));
  launch.local_rank = env_int("LOCAL_RANK", launch.rank, 0);
  launch.id_file = env("PARARNN_NCCL_ID_FILE").value_or("");
  launch.id_hex = env("PARARNN_NCCL_UNIQUE_ID").value_or("");
  if (launch.id_file.empty() && launch.id_hex.empty())
    throw ContractViolation("PARARNN_NCCL_ID_FILE",
                            "must name a fresh file for the NCCL unique id (or set PARARNN_NCCL_UNIQUE_ID)", "unset");
  if (!launch.id_hex.empty() && launch.id_hex.size() != 256)
    throw ContractViolation("PARARNN_NCCL_UNIQUE_ID", "must be the 128 id bytes as 256 hex digits",
                            fmt::format("{} characters", launch.id_hex.size()));
  return launch;
}

}  // namespace pararnn
