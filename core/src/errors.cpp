#include "pararnn/core/errors.hpp"

namespace pararnn {

namespace {

std::string contract_message(std::string_view argument, std::string_view rule,
                             std::string_view value) {
  std::string message;
  message.reserve(argument.size() + rule.size() + value.size() + 10);
  message.append(argument).append(": ").append(rule).append(" (got ").append(value).append(")");
  return message;
}

}  // namespace

ContractViolation::ContractViolation(std::string_view argument, std::string_view rule,
                                     std::string_view value)
    : Error(contract_message(argument, rule, value)),
      argument_(argument),
      rule_(rule),
      value_(value) {}

}  // namespace pararnn
