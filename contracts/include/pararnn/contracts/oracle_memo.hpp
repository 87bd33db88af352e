// OracleMemo: one oracle trajectory (and one set of oracle gradients) for several
// verify_agreement calls on the same case (the campaign's cpu and cuda rows of a case; the
// oracle is most of a long row's time). Pass it in VerifyOptions (oracle_memo, oracle_key,
// oracle_uses).
//
// Guarantees: per key each oracle is computed once (a caller arriving while it is computed waits
// for it); the first call binds the key to its case (cell, metadata, parameters, x, h0,
// cu_seqlens, and grad_H for the gradients, bit for bit) and its oracle options (certify,
// budget, seed), and a later call whose
// case or options differ throws pararnn::Error (a harness bug) instead of reusing a result; an
// entry is dropped once its `uses` users have called done() (verify_agreement does, on every
// path, whether or not it reached the oracle), so memory stays bounded by the cases in flight. A
// failed oracle computation is rethrown to every caller of that key. Thread-safe.
//   OracleMemo memo;
//   JudgeHooks hooks{.oracle_memo = &memo, .oracle_key = "gru.f32.T1024.init.s1", .oracle_uses = 2};
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "pararnn/core/case_file.hpp"
#include "pararnn/reference/oracle.hpp"

namespace pararnn {

class OracleMemo {
 public:
  std::shared_ptr<const reference::OracleResult> trajectory(const std::string& key, std::int64_t uses,
                                                            const Case& problem,
                                                            const reference::OracleOptions& options);
  std::shared_ptr<const reference::OracleGradients> gradients(const std::string& key, std::int64_t uses,
                                                              const Case& problem,
                                                              const reference::OracleOptions& options);
  // One user of `key` has finished (it may never have asked for an oracle).
  void done(const std::string& key, std::int64_t uses);
  std::int64_t computed() const;  // oracle runs so far (trajectories and gradients)
  std::int64_t reused() const;    // calls answered from the memo
  std::size_t live() const;       // entries held now

 private:
  template <class Result>
  struct Slot {
    bool bound = false;  // problem, options and result are set
    Case problem;
    reference::OracleOptions options;
    std::shared_future<std::shared_ptr<const Result>> result;
  };
  struct Entry {
    Slot<reference::OracleResult> trajectory;
    Slot<reference::OracleGradients> gradients;
    std::int64_t remaining = 0;
  };
  template <class Result, class Compute>
  std::shared_ptr<const Result> memoised(const std::string& key, std::int64_t uses, Slot<Result> Entry::*slot,
                                         const Case& problem, const reference::OracleOptions& options,
                                         Compute compute);
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
  Entry& entry(const std::string& key, std::int64_t uses);  // under mutex_
  std::int64_t computed_ = 0, reused_ = 0;
};

}  // namespace pararnn
