// A generic budgeted pool: runs a list of tasks with N workers in a given order under a time
// budget, and says which ran, which were not started and which were cut. It knows nothing of
// campaigns: a task is an index, a label (progress) and a group and cost (the run order).
//
// Guarantees:
// - No task starts after the budget; a task that throws BudgetCut (from Budget::checkpoint at its
//   phase boundaries) is counted as cut and not run, and `discard(index)` removes what it made.
// - Any other exception stops the pool: the workers finish their current task, start no other,
//   and the first exception is rethrown after they have joined.
// - With one job the tasks run on the calling thread (its OpenMP default); with N, on N threads
//   whose OpenMP loops get `threads_per_job` threads each.
// Example:
//   const Budget budget(600.0);
//   const PoolResult r = run_budgeted(items, run_order(items), [&](std::size_t i) { work(i); },
//                                     [&](std::size_t i) { undo(i); }, {.jobs = 2, .budget = &budget});
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pararnn::nightly {

// A task cut short at the time budget: thrown at its phase boundaries, so a long task does not
// run past the budget by more than one phase. Not a std::exception: no task's own error handling
// turns it into a row; the pool counts the task as not run.
struct BudgetCut {};

// The wall clock of a run and its budget (none: never exhausted).
class Budget {
 public:
  explicit Budget(std::optional<double> seconds = std::nullopt)
      : start_(std::chrono::steady_clock::now()), seconds_(seconds) {}
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  bool exhausted() const { return seconds_ && elapsed() > *seconds_; }
  void checkpoint() const {
    if (exhausted()) throw BudgetCut{};
  }

 private:
  std::chrono::steady_clock::time_point start_;
  std::optional<double> seconds_;
};

struct PoolItem {
  std::string label;  // progress and the slowest tasks
  std::string group;  // the run order takes one task of each group in turn
  double cost = 1.0;  // a relative work estimate: a group's costly tasks start first
};

struct PoolProgress {
  std::int64_t done = 0, total = 0;
  double elapsed_s = 0.0, eta_s = 0.0;
  std::string current;   // the task being started; empty when a task has just finished
  std::string finished;  // the task that has just finished (its own call), with its wall seconds
  double finished_s = 0.0;
};

struct PoolOptions {
  std::int64_t jobs = 1;
  int threads_per_job = 1;
  const Budget* budget = nullptr;                       // required
  std::function<void(const PoolProgress&)> progress;    // at each start, each finish, and at the end
};

struct PoolResult {
  std::vector<double> seconds;  // wall seconds of each task, by index (-1: not run)
  std::int64_t done = 0, not_run = 0, cut = 0;  // cut: started, then stopped at the budget (also in not_run)
  bool budget_exhausted = false;
};

// The indices of `items` in run order: one task of each group in turn (groups in the order they
// first appear), each group's own tasks costliest first (ties in list order), so a budget cuts
// every group short instead of leaving the groups listed last unvisited, and with N jobs the long
// tasks start early.
std::vector<std::size_t> run_order(const std::vector<PoolItem>& items);

PoolResult run_budgeted(const std::vector<PoolItem>& items, const std::vector<std::size_t>& order,
                        const std::function<void(std::size_t)>& run, const std::function<void(std::size_t)>& discard,
                        const PoolOptions& options);

}  // namespace pararnn::nightly
