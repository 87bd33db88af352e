// The in-process communicator (communicator.hpp): a rendezvous of P threads. A collective fills
// the caller's slot, waits until every rank has filled its own, copies the slots out, and the
// last rank to leave opens the rendezvous for the next collective (so a fast rank never
// overwrites a slot another rank has not read yet).
#include "pararnn/solver/communicator.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "newton/family.hpp"
#include "pararnn/core/errors.hpp"

namespace pararnn {
namespace {
// Raised in a rank woken by another rank's failure (never the error run() rethrows when a rank
// failed on its own).
class GroupAborted : public Error {
 public:
  using Error::Error;
};
}  // namespace

struct InProcessGroup::State {
  explicit State(int n) : size(n), slots(static_cast<std::size_t>(n)) {}
  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::vector<std::byte>> slots;
  int inside = 0;         // ranks that have filled their slot in the current collective
  bool draining = false;  // every slot filled: ranks are copying out
  bool aborted = false;
  std::string reason;

  void throw_if_aborted() const {
    if (aborted) throw GroupAborted("in-process communicator: the group was aborted: " + reason);
  }

  void exchange(int rank, std::span<const std::byte> block, std::span<std::byte> out) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return aborted || !draining; });
    throw_if_aborted();
    slots[static_cast<std::size_t>(rank)].assign(block.begin(), block.end());
    if (++inside == size) {
      draining = true;
      changed.notify_all();
    } else {
      changed.wait(lock, [&] { return aborted || draining; });
      throw_if_aborted();
    }
    std::string mismatch;
    for (int q = 0; q < size && mismatch.empty(); ++q)
      if (slots[static_cast<std::size_t>(q)].size() != block.size())
        mismatch = fmt::format("rank {} gave {} bytes, rank {} gave {}", rank, block.size(), q,
                               slots[static_cast<std::size_t>(q)].size());
    if (mismatch.empty() && out.size() != block.size() * static_cast<std::size_t>(size))
      mismatch = fmt::format("out holds {} bytes, not {} ranks x {}", out.size(), size, block.size());
    if (mismatch.empty())
      for (int q = 0; q < size; ++q)
        std::copy(slots[static_cast<std::size_t>(q)].begin(), slots[static_cast<std::size_t>(q)].end(),
                  out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(q) * block.size()));
    if (--inside == 0) {
      draining = false;
      changed.notify_all();
    }
    if (!mismatch.empty())
      throw ContractViolation("block", "an allgather takes blocks of the same size on every rank", mismatch);
  }
};

namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup::State& state, int rank) : state_(state), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return state_.size; }
  std::string_view name() const override { return "in_process"; }
  void allgather(std::span<const std::byte> block, std::span<std::byte> out) override {
    state_.exchange(rank_, block, out);
  }
  double allreduce_max(double value) override {
    const std::vector<double> all = allgather_values(*this, std::span<const double>(&value, 1));
    double result = all.front();
    for (double v : all) result = detail::nan_max(result, v);
    return result;
  }

 private:
  InProcessGroup::State& state_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int size) {
  if (size < 1) throw ContractViolation("size", "an in-process group needs at least one rank", std::to_string(size));
  state_ = std::make_unique<State>(size);
  for (int r = 0; r < size; ++r) communicators_.push_back(std::make_unique<InProcessCommunicator>(*state_, r));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return state_->size; }

Communicator& InProcessGroup::communicator(int rank) {
  if (rank < 0 || rank >= state_->size)
    throw ContractViolation("rank", fmt::format("must be in [0, {})", state_->size), std::to_string(rank));
  return *communicators_[static_cast<std::size_t>(rank)];
}

void InProcessGroup::abort(const std::string& reason) {
  const std::lock_guard lock(state_->mutex);
  if (!state_->aborted) state_->reason = reason;
  state_->aborted = true;
  state_->changed.notify_all();
}

void InProcessGroup::run(const std::function<void(Communicator&)>& body) {
  const int n = state_->size;
  const int threads_per_rank = std::max(1, omp_get_max_threads() / n);
  std::vector<std::exception_ptr> own(static_cast<std::size_t>(n)), woken(static_cast<std::size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      omp_set_num_threads(threads_per_rank);
      try {
        body(communicator(r));
      } catch (const GroupAborted&) {
        woken[static_cast<std::size_t>(r)] = std::current_exception();
      } catch (const std::exception& e) {
        own[static_cast<std::size_t>(r)] = std::current_exception();
        abort(fmt::format("rank {} failed: {}", r, e.what()));
      } catch (...) {
        own[static_cast<std::size_t>(r)] = std::current_exception();
        abort(fmt::format("rank {} failed", r));
      }
    });
  for (std::thread& t : ranks) t.join();
  for (const auto& errors : {own, woken})
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
}

}  // namespace pararnn
