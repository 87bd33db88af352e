// The collectives a sequence-parallel solve needs (seq_parallel.hpp), behind one interface with
// two implementations: InProcessGroup (P threads of one process sharing a rendezvous: CPU tests,
// CI, users without GPUs) and NCCL (nccl_communicator.hpp: one process per GPU, launched the
// torchrun way).
//
// Guarantees (every implementation):
// - Every rank calls the same collectives in the same order; a collective returns on a rank only
//   after every rank has entered it.
// - `allgather(block, out)`: every rank gives a block of the same size n; `out` (size()·n bytes)
//   receives rank q's block at offset q·n, identical on every rank. Blocks of different sizes are
//   refused on every rank (ContractViolation naming `block`).
// - `allreduce_max(v)`: the maximum over ranks, identical on every rank; a NaN on any rank makes
//   the result NaN (a NaN residual must never look small).
// - InProcessGroup::run: a rank that throws aborts the group, so the others' collectives raise
//   instead of waiting forever; run rethrows the error of the lowest rank that failed on its own
//   (not woken by the abort), so P ranks refusing the same input give that refusal.
// Example:
//   InProcessGroup group(4);
//   group.run([&](Communicator& comm) {
//     const double worst = comm.allreduce_max(local_residual(comm.rank()));
//   });
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace pararnn {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;  // "in_process", "nccl"
  virtual void allgather(std::span<const std::byte> block, std::span<std::byte> out) = 0;
  virtual double allreduce_max(double value) = 0;
};

// Every rank's `mine` (the same count on every rank), rank q's values at q·mine.size().
template <class T>
std::vector<T> allgather_values(Communicator& comm, std::span<const T> mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> out(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.allgather(std::as_bytes(mine), std::as_writable_bytes(std::span<T>(out)));
  return out;
}

// P ranks as threads of this process. The group owns its communicators; communicator(r) may be
// handed to any thread, one thread per rank.
class InProcessGroup {
 public:
  explicit InProcessGroup(int size);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const;
  Communicator& communicator(int rank);
  // Wakes every rank waiting in a collective (and every later one) with pararnn::Error(reason).
  void abort(const std::string& reason);
  // Runs body(communicator(r)) on one thread per rank (each with its share of the OpenMP
  // threads), joins them, and rethrows the error of the lowest rank that failed on its own.
  void run(const std::function<void(Communicator&)>& body);

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> communicators_;
};

}  // namespace pararnn
