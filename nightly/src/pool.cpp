// run_budgeted: `jobs` workers take the indices of `order` in turn under the budget.
#include "pararnn/nightly/pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <omp.h>

namespace pararnn::nightly {

std::vector<std::size_t> run_order(const std::vector<PoolItem>& items) {
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::size_t>> by_group;
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto [it, fresh] = by_group.try_emplace(items[i].group);
    if (fresh) groups.push_back(items[i].group);
    it->second.push_back(i);
  }
  for (auto& [group, list] : by_group)
    std::stable_sort(list.begin(), list.end(),
                     [&](std::size_t a, std::size_t b) { return items[a].cost > items[b].cost; });
  std::vector<std::size_t> order;
  order.reserve(items.size());
  for (std::size_t round = 0; order.size() < items.size(); ++round)
    for (const std::string& g : groups)
      if (round < by_group[g].size()) order.push_back(by_group[g][round]);
  return order;
}

namespace {

// The shared state of one run: counters, the first failure, the progress callback (all under mutex).
class PoolRun {
 public:
  PoolRun(const std::vector<PoolItem>& items, const std::vector<std::size_t>& order,
          const std::function<void(std::size_t)>& run, const std::function<void(std::size_t)>& discard,
          const PoolOptions& options)
      : items_(items), order_(order), run_(run), discard_(discard), options_(options) {
    result_.seconds.assign(items.size(), -1.0);
  }

  void work() {
    for (std::size_t i = next_++; i < order_.size(); i = next_++) {
      const std::size_t index = order_[i];
      if (!start(index)) {
        if (stopped()) return;
        continue;
      }
      try {
        const auto t0 = std::chrono::steady_clock::now();
        run_(index);
        result_.seconds[index] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } catch (const BudgetCut&) {
        discard_(index);  // nothing of a task cut short reaches the caller's results
        const std::lock_guard lock(mutex_);
        result_.budget_exhausted = true;
        ++result_.not_run;
        ++result_.cut;
        continue;
      } catch (...) {
        const std::lock_guard lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
        return;
      }
      const std::lock_guard lock(mutex_);
      ++result_.done;
      report("", items_[index].label, result_.seconds[index]);
    }
  }

  PoolResult finish() {
    if (failure_) std::rethrow_exception(failure_);
    const std::lock_guard lock(mutex_);
    report("");
    return result_;
  }

 private:
  // Whether the task at `index` starts (false: a failure elsewhere, or the budget is spent).
  bool start(std::size_t index) {
    const std::lock_guard lock(mutex_);
    if (failure_) return false;
    if (options_.budget->exhausted()) {
      result_.budget_exhausted = true;
      ++result_.not_run;
      return false;
    }
    report(items_[index].label);
    return true;
  }
  bool stopped() {
    const std::lock_guard lock(mutex_);
    return static_cast<bool>(failure_);
  }
  void report(const std::string& current, const std::string& finished = {}, double finished_s = 0.0) {  // under mutex
    if (!options_.progress) return;
    const double t = options_.budget->elapsed();
    const auto total = static_cast<std::int64_t>(items_.size());
    const std::int64_t done = result_.done;
    options_.progress({.done = done, .total = total, .elapsed_s = t,
                       .eta_s = done > 0 && !current.empty() ? t / static_cast<double>(done) * static_cast<double>(total - done) : 0.0,
                       .current = current, .finished = finished, .finished_s = finished_s});
  }

  const std::vector<PoolItem>& items_;
  const std::vector<std::size_t>& order_;
  const std::function<void(std::size_t)>& run_;
  const std::function<void(std::size_t)>& discard_;
  const PoolOptions& options_;
  PoolResult result_;
  std::mutex mutex_;
  std::exception_ptr failure_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace

PoolResult run_budgeted(const std::vector<PoolItem>& items, const std::vector<std::size_t>& order,
                        const std::function<void(std::size_t)>& run, const std::function<void(std::size_t)>& discard,
                        const PoolOptions& options) {
  const Budget unlimited;
  PoolOptions o = options;
  if (!o.budget) o.budget = &unlimited;
  PoolRun pool(items, order, run, discard, o);
  if (o.jobs <= 1) {
    pool.work();
  } else {
    std::vector<std::jthread> workers;
    for (std::int64_t w = 0; w < o.jobs; ++w)
      workers.emplace_back([&] {
        omp_set_num_threads(o.threads_per_job);
        pool.work();
      });
  }  // the workers join here
  return pool.finish();
}

}  // namespace pararnn::nightly
