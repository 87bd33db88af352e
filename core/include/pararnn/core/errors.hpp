// Typed errors of pararnn. Every error that bad input can cause is a ContractViolation whose
// message names the argument, the rule and the offending value, so a user can fix the call
// without reading our source. Example:
//   throw ContractViolation("cu_seqlens", "must start at 0", fmt::format("{}", first));
//   -> "cu_seqlens: must start at 0 (got 3)"
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace pararnn {

// Base of every pararnn error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input: the message is "<argument>: <rule> (got <value>)".
class ContractViolation : public Error {
 public:
  ContractViolation(std::string_view argument, std::string_view rule, std::string_view value);
  const std::string& argument() const { return argument_; }
  const std::string& rule() const { return rule_; }
  const std::string& value() const { return value_; }

 private:
  std::string argument_;
  std::string rule_;
  std::string value_;
};

// A case or trajectory file that cannot be read or written: the message names the file, the
// tensor (when one is concerned) and the problem.
class CaseFileError : public Error {
 public:
  using Error::Error;
};

// The residual gate fired: the final max|F(H)| is non-finite or above residual_fail.
class NewtonDivergenceError : public Error {
 public:
  using Error::Error;
};

// verify_agreement(..., raise_on_fail) found the solver outside the agreement band.
class AgreementError : public Error {
 public:
  using Error::Error;
};

// An explicitly requested backend or path that cannot run this input (never silently remapped).
class UnsupportedPath : public Error {
 public:
  using Error::Error;
};

}  // namespace pararnn
