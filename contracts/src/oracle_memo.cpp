// OracleMemo (oracle_memo.hpp).
#include "pararnn/contracts/oracle_memo.hpp"

#include "pararnn/contracts/compare.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {
namespace {

bool same_optional_bits(const std::optional<Tensor>& a, const std::optional<Tensor>& b) {
  return a.has_value() == b.has_value() && (!a || same_bits(*a, *b));
}

bool same_case(const Case& a, const Case& b) {
  if (a.cell != b.cell || a.metadata != b.metadata || a.parameters.size() != b.parameters.size()) return false;
  for (const auto& [name, t] : a.parameters) {
    const auto it = b.parameters.find(name);
    if (it == b.parameters.end() || !same_bits(t, it->second)) return false;
  }
  return same_bits(a.x, b.x) && same_optional_bits(a.h0, b.h0) && same_optional_bits(a.cu_seqlens, b.cu_seqlens) &&
         same_optional_bits(a.grad_H, b.grad_H);
}

// The case's tensors copied (a Case shares its tensors' storage with the caller's).
Case owned_copy(const Case& c) {
  Case out = c;
  for (auto& [name, t] : out.parameters) t = Tensor::copy_of(t.view());
  out.x = Tensor::copy_of(c.x.view());
  if (c.h0) out.h0 = Tensor::copy_of(c.h0->view());
  if (c.cu_seqlens) out.cu_seqlens = Tensor::copy_of(c.cu_seqlens->view());
  if (c.grad_H) out.grad_H = Tensor::copy_of(c.grad_H->view());
  return out;
}

}  // namespace

OracleMemo::Entry& OracleMemo::entry(const std::string& key, std::int64_t uses) {
  if (uses < 1) throw ContractViolation("oracle_uses", "must be >= 1", std::to_string(uses));
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    it = entries_.emplace(key, Entry{}).first;
    it->second.remaining = uses;
  }
  return it->second;
}

template <class Result, class Compute>
std::shared_ptr<const Result> OracleMemo::memoised(const std::string& key, std::int64_t uses,
                                                   Slot<Result> Entry::*slot, const Case& problem,
                                                   const reference::OracleOptions& options, Compute compute) {
  std::promise<std::shared_ptr<const Result>> promise;
  std::shared_future<std::shared_ptr<const Result>> result;
  bool first = false;
  {
    const std::lock_guard lock(mutex_);
    Slot<Result>& s = entry(key, uses).*slot;
    if (!s.bound) {
      s.bound = true;
      s.problem = owned_copy(problem);
      s.options = options;
      s.result = promise.get_future().share();
      first = true;
      ++computed_;
    } else {
      if (!same_case(s.problem, problem) || s.options.certify != options.certify ||
          s.options.certify_budget != options.certify_budget || s.options.seed != options.seed)
        throw Error("oracle memo: key '" + key + "' was bound to another case or other oracle options; "
                    "a memoised oracle is never reused for a different problem");
      ++reused_;
    }
    result = s.result;
  }
  if (first) {
    try {
      promise.set_value(std::make_shared<const Result>(compute()));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
  }
  return result.get();
}

std::shared_ptr<const reference::OracleResult> OracleMemo::trajectory(const std::string& key, std::int64_t uses,
                                                                      const Case& problem,
                                                                      const reference::OracleOptions& options) {
  return memoised(key, uses, &Entry::trajectory, problem, options,
                  [&] { return reference::oracle_sequential(problem, options); });
}

std::shared_ptr<const reference::OracleGradients> OracleMemo::gradients(const std::string& key, std::int64_t uses,
                                                                        const Case& problem,
                                                                        const reference::OracleOptions& options) {
  return memoised(key, uses, &Entry::gradients, problem, options,
                  [&] { return reference::oracle_gradients(problem, options); });
}

void OracleMemo::done(const std::string& key, std::int64_t uses) {
  const std::lock_guard lock(mutex_);
  Entry& e = entry(key, uses);
  if (--e.remaining <= 0) entries_.erase(key);
}

std::int64_t OracleMemo::computed() const {
  const std::lock_guard lock(mutex_);
  return computed_;
}

std::int64_t OracleMemo::reused() const {
  const std::lock_guard lock(mutex_);
  return reused_;
}

std::size_t OracleMemo::live() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace pararnn
