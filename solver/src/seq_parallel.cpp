// Sequence-parallel Newton (seq_parallel.hpp, docs/seq_parallel.md): the one Newton driver over
// the CPU per-channel solver of one rank's chunk of the time axis. ChunkSolver supplies the
// family operations of HostIterate (newton/family.hpp) with the collectives the split needs:
// - residual: the last states of every rank's iterate are gathered (rank r reads rank r − 1's
//   as the state entering its step 0), then the local residual, then max|F| over the ranks;
// - update: the chunk aggregates of every chain (scan_aggregates), gathered, composed into the
//   carry entering this chunk (the exclusive scan of the affine monoid over the ranks), and the
//   local scan from that carry;
// - backward: the adjoint crosses the ranks from the last to the first, as the exclusive scan
//   (from the right) of the ranks' adjoint elements (adjoint_aggregates), and the parameter
//   sums are summed over the ranks before they are rounded;
// - sLSTM's Picard passes and the sequential fallback are sequential along the whole sequence:
//   a pipeline of P rounds, rank q working in round q from rank q − 1's last state, one
//   allgather of last states per round. The fallback's units are flagged by their maximum over
//   the ranks, so every rank replaces the same units and counts the same number.
#include "pararnn/solver/seq_parallel.hpp"

#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <functional>
#include <memory>

#include "cpu/per_channel_solver.hpp"
#include "pararnn/core/fault.hpp"
#include "pararnn/cells/affine_monoid.hpp"

namespace pararnn {
namespace detail {
namespace {

template <class T>
std::span<const T> one(const T& value) {
  return std::span<const T>(&value, 1);
}

std::uint64_t fnv1a(std::uint64_t hash, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ULL;
  return hash;
}
std::uint64_t fnv1a(std::uint64_t hash, std::string_view text) { return fnv1a(hash, text.data(), text.size()); }
constexpr std::uint64_t kFnvBasis = 14695981039346656037ULL;

// What the ranks must share: the cell (its kind, dtype, sizes and every parameter's bytes) ...
std::uint64_t cell_fingerprint(const Cell& cell) {
  std::uint64_t h = fnv1a(kFnvBasis, fmt::format("{}|{}|{}|{}|{}", cell.name(), cell.spec().mix,
                                                 static_cast<int>(cell.kind()), dtype_name(cell.dtype()), cell.d_h()));
  for (const auto& [name, tensor] : cell.parameters()) {
    h = fnv1a(h, name);
    const Tensor contiguous = Tensor::copy_of(tensor.view());
    h = fnv1a(h, contiguous.data(), contiguous.nbytes());
  }
  const std::vector<double> values = cell.channel_values();  // clamped recurrent values, eps
  return fnv1a(h, values.data(), values.size() * sizeof(double));
}

// ... and every NewtonConfig field that steers the solve.
std::uint64_t config_fingerprint(const NewtonConfig& c) {
  const auto opt = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("none"); };
  std::string table;
  for (const auto& [t, k] : c.newton_iters_by_t) table += fmt::format("{}:{},", t, k);
  return fnv1a(kFnvBasis, fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", opt(c.max_iters), c.omega,
                                      scan_backend_name(c.scan_backend), opt(c.residual_atol), opt(c.residual_fail),
                                      c.k_max, opt(c.picard_iters), opt(c.picard_adapt), opt(c.picard_retry_atol),
                                      c.newton_backtrack, table, opt(c.window_len), c.recompute, c.allow_sequential));
}

// One rank's view of its input, exchanged before any work so that every rank refuses together.
struct RankDescriptor {
  std::int32_t failed = 0;
  std::int64_t batch = 0, time = 0, d_in = 0;
  std::uint64_t cell = 0, config = 0;
  char message[480] = {};
};

}  // namespace

// A rank's chunk after the collective checks: the row that serves it (the plan's), its layout
// and the whole sequence's length.
struct ChunkPlacement {
  const FamilyBackend* row = nullptr;
  Layout layout;
  std::int64_t total_time = 0;
};

// The entry points of the CPU per-channel row's split (backends.hpp FamilyBackend::seq_parallel),
// after check_chunks.
struct SeqParallelRow {
  Tensor (*newton)(Communicator&, const Cell&, const TensorView& x_chunk, const NewtonConfig&, const ApplyOptions&,
                   const ChunkPlacement&, NewtonStats&);
  NewtonForward (*forward)(Communicator&, const Cell&, const TensorView& x_chunk, const NewtonConfig&,
                           const ApplyOptions&, const ChunkPlacement&);
  NewtonGradients (*backward)(Communicator&, const Cell&, const TensorView& x_chunk, const NewtonForward&,
                              const TensorView& grad_H_chunk, const NewtonConfig&, const ApplyOptions&,
                              const ChunkPlacement&);
};

namespace {

// The local rules (the chunk as newton_apply's input, and what the split does not build), then
// the rules across ranks; collective: every rank raises when any rank's input is refused.
ChunkPlacement check_chunks(Communicator& comm, const Cell& cell, const TensorView& x, const NewtonConfig& config,
                            const ApplyOptions& options, const char* who,
                            const std::function<void(const Layout&)>& more_checks = {}) {
  const int rank = comm.rank(), size = comm.size();
  RankDescriptor mine;
  ChunkPlacement placement;
  std::exception_ptr refused;
  try {
    if (x.dim() == 3 && x.size(1) < 1)
      throw ContractViolation("x_chunk",
                              fmt::format("every rank needs at least one step (rank {} of {} has none)", rank, size),
                              shape_string(x.shape()));
    if (options.cu_seqlens)
      throw ContractViolation("cu_seqlens",
                              fmt::format("is not accepted by {}: packed segments across ranks are not built; "
                                          "solve a rectangular batch", who),
                              shape_string(options.cu_seqlens->shape()));
    if (config.window_len)
      throw ContractViolation("window_len",
                              fmt::format("cannot be combined with {}: the time axis is already split across ranks", who),
                              std::to_string(*config.window_len));
    if (options.h0 && rank > 0)
      throw ContractViolation("h0",
                              fmt::format("is the state before the first step: only rank 0 takes it (this is rank {})", rank),
                              shape_string(options.h0->shape()));
    Plan plan = plan_solve(cell, x, &config, config.scan_backend, options, who);
    plan.row.require(Capability::seq_parallel, who);
    if (config.coords == Coords::log)
      throw UnsupportedPath(fmt::format("{}: coords=log is not built for the sequence-parallel solve (the ranks "
                                        "exchange native boundary states); use coords=native", who));
    placement.row = &plan.row;
    placement.layout = std::move(plan.layout);
    if (more_checks) more_checks(placement.layout);
    mine.batch = placement.layout.batch;
    mine.time = placement.layout.time;
    mine.d_in = placement.layout.d_in;
    mine.cell = cell_fingerprint(cell);
    mine.config = config_fingerprint(config);
  } catch (const std::exception& e) {
    mine.failed = 1;
    std::strncpy(mine.message, e.what(), sizeof(mine.message) - 1);
    refused = std::current_exception();
  }
  const std::vector<RankDescriptor> all = allgather_values(comm, one(mine));
  if (refused) std::rethrow_exception(refused);
  for (int q = 0; q < size; ++q)
    if (all[static_cast<std::size_t>(q)].failed)
      throw ContractViolation(fmt::format("rank {}", q), "refused its input, so every rank refuses",
                              all[static_cast<std::size_t>(q)].message);
  const RankDescriptor& first = all.front();
  for (int q = 1; q < size; ++q) {
    const RankDescriptor& other = all[static_cast<std::size_t>(q)];
    if (other.batch != first.batch)
      throw ContractViolation("x_chunk", fmt::format("must have the same batch size on every rank (rank 0: B = {})", first.batch),
                              fmt::format("rank {}: B = {}", q, other.batch));
    if (other.d_in != first.d_in)
      throw ContractViolation("x_chunk", fmt::format("must have the same input size on every rank (rank 0: d_in = {})", first.d_in),
                              fmt::format("rank {}: d_in = {}", q, other.d_in));
    if (other.cell != first.cell)
      throw ContractViolation("cell", "must be the same cell (kind, dtype, parameters) on every rank",
                              fmt::format("rank {} differs from rank 0", q));
    if (other.config != first.config)
      throw ContractViolation("config", "must be the same NewtonConfig on every rank",
                              fmt::format("rank {} differs from rank 0", q));
  }
  for (const RankDescriptor& d : all) placement.total_time += d.time;
  return placement;
}

// One rank's chunk as the solver of HostIterate (newton/family.hpp): the CPU per-channel solver
// of the chunk, with the collectives of the split.
template <class CellMath, class StorageT>
class ChunkSolver {
 public:
  using Local = CpuSolver<CellMath, StorageT>;
  using ComputeT = typename Local::ComputeT;
  using Vec = std::vector<ComputeT>;
  static constexpr int S = CellMath::kSlots;
  static constexpr int kElement = S * S + S;  // one aggregate: A [out][in], then b

  ChunkSolver(Communicator& comm, const Cell& cell, const TensorView& x, const ApplyOptions& options,
              const Layout& layout)
      : comm_(&comm), local_(cell, x, options, layout), L_(layout) {}

  const Local& local() const { return local_; }

  double residual(const Vec& H, Vec& F, Vec* J) const {
    exchange_last_states(H);
    return comm_->allreduce_max(local_.residual(H, F, J));
  }

  void update(Vec& H, const Vec& J, Vec& F, double omega) const {
    const std::int64_t D = L_.d_h, T = L_.time;
    Vec aggregates(static_cast<std::size_t>(L_.batch * D * kElement));
    const bool first_is_head = comm_->rank() == 0;
    local_.parallel_tiles([&](std::int64_t b, std::int64_t c0, std::int64_t c1) {
      scan_aggregates<S, ComputeT>(J.data() + b * T * S * S * D + c0, F.data() + b * local_.row_elems() + c0,
                                   ScanShape{.time = T, .channels = c1 - c0, .channel_stride = D}, first_is_head,
                                   aggregates.data() + (b * D + c0) * kElement);
    });
    const Vec all = allgather_values(*comm_, std::span<const ComputeT>(aggregates));
    if (comm_->rank() == 0 || PARARNN_FAULT_POINT("seq_parallel_carry_dropped")) return local_.update(H, J, F, omega);
    // The exclusive scan over the ranks: the δ entering this chunk is the composition of the
    // aggregates of every rank before it, applied to the zero δ entering rank 0.
    Vec carry(static_cast<std::size_t>(L_.batch * S * D));
    const std::int64_t chains = L_.batch * D;
    for (std::int64_t i = 0; i < chains; ++i) {
      ComputeT current[S] = {}, next[S];
      for (int q = 0; q < comm_->rank(); ++q) {
        const ComputeT* a = all.data() + (q * chains + i) * kElement;
        cells::apply_dense(S, a, a + S * S, current, next);
        std::copy(next, next + S, current);
      }
      const std::int64_t b = i / D, c = i % D;
      for (int s = 0; s < S; ++s) carry[static_cast<std::size_t>((b * S + s) * D + c)] = current[s];
    }
    local_.update(H, J, F, omega, carry.data());
  }

  // sLSTM: each pass is a recurrence along the whole sequence, so it runs as a pipeline; at
  // step 0 a continuing chunk reads the previous rank's (c, n, m) of this pass and its hidden
  // state of the previous pass.
  Vec picard_guess(std::int64_t passes) const {
    const std::int64_t block = S * L_.d_h;
    Vec current(static_cast<std::size_t>(L_.batch * local_.row_elems())), previous, gathered, gathered_before;
    for (std::int64_t pass = 0; pass <= passes; ++pass) {
      for (int q = 0; q < comm_->size(); ++q) {
        if (comm_->rank() == q) {
          if (q > 0) {
            Vec boundary(static_cast<std::size_t>(L_.batch * block));
            for (std::int64_t b = 0; b < L_.batch; ++b)
              for (int s = 0; s < S; ++s) {
                const Vec& source = s == S - 1 && pass > 0 ? gathered_before : gathered;
                std::copy_n(source.data() + ((q - 1) * L_.batch + b) * block + s * L_.d_h, L_.d_h,
                            boundary.data() + b * block + s * L_.d_h);
              }
            local_.set_boundary(std::move(boundary));
          }
          local_.picard_pass(current, pass == 0 ? nullptr : &previous);
        }
        const Vec last = local_.last_states(current);
        gathered = allgather_values(*comm_, std::span<const ComputeT>(last));
      }
      gathered_before = gathered;
      previous = current;
    }
    return current;
  }

  // The implicit adjoint across ranks: μ_t = g_t + J_{t+1}ᵀ μ_{t+1} runs from the last rank to
  // the first, so the carry entering this chunk's last step is the composition of the adjoint
  // elements of every later rank (adjoint_aggregates; an exclusive scan from the right), and the
  // parameter sums are summed over the ranks in rank order before they are rounded.
  NewtonGradients backward(const Vec& H, const TensorView& grad_H, const TensorView& x,
                           const ApplyOptions& options) const {
    exchange_last_states(H);
    const std::vector<double> mine = local_.adjoint_aggregates(H, grad_H);
    const std::vector<double> all = allgather_values(*comm_, std::span<const double>(mine));
    const std::int64_t D = L_.d_h, chains = L_.batch * D;
    const int rank = comm_->rank(), size = comm_->size();
    std::vector<double> carry(static_cast<std::size_t>(L_.batch * S * D));
    for (std::int64_t i = 0; i < chains; ++i) {
      double current[S] = {}, next[S];
      for (int q = size - 1; q > rank; --q) {
        const double* a = all.data() + (q * chains + i) * kElement;
        cells::apply_dense(S, a, a + S * S, current, next);
        std::copy(next, next + S, current);
      }
      const std::int64_t b = i / D, c = i % D;
      for (int s = 0; s < S; ++s) carry[static_cast<std::size_t>((b * S + s) * D + c)] = current[s];
    }
    const SumOverRanks sum_over_ranks = [&](std::span<double> sums) {
      const std::vector<double> every = allgather_values(*comm_, std::span<const double>(sums));
      for (std::size_t i = 0; i < sums.size(); ++i) {
        double total = 0.0;
        for (int q = 0; q < size; ++q) total += every[static_cast<std::size_t>(q) * sums.size() + i];
        sums[i] = total;
      }
    };
    const bool carried = rank + 1 < size && !PARARNN_FAULT_POINT("seq_parallel_adjoint_carry_dropped");
    return local_.backward(H, grad_H, x, options, carried ? carry.data() : nullptr, sum_over_ranks);
  }

  std::int64_t sequential_fallback(Vec& H, double atol) const {
    const std::vector<double>& mine = local_.unit_residuals();
    const std::vector<double> all = allgather_values(*comm_, std::span<const double>(mine));
    std::vector<double> global(mine.size(), 0.0);
    for (std::size_t i = 0; i < all.size(); ++i) global[i % mine.size()] = nan_max(global[i % mine.size()], all[i]);
    const auto flagged = std::count_if(global.begin(), global.end(), [&](double v) { return !(v < atol); });
    local_.set_unit_residuals(std::move(global));
    if (flagged == 0) return 0;
    // Round q: rank q re-solves its part of the flagged units from the state rank q − 1 left
    // (gathered at the end of round q − 1).
    for (int q = 0; q < comm_->size(); ++q) {
      if (comm_->rank() == q) (void)local_.sequential_fallback(H, atol);
      exchange_last_states(H);
    }
    return static_cast<std::int64_t>(flagged);
  }

 private:
  // Gathers every rank's last state of `H`; rank r > 0 takes rank r − 1's as its boundary.
  void exchange_last_states(const Vec& H) const {
    const Vec mine = local_.last_states(H);
    const Vec all = allgather_values(*comm_, std::span<const ComputeT>(mine));
    const auto r = static_cast<std::size_t>(comm_->rank());
    if (r > 0 && !PARARNN_FAULT_POINT("seq_parallel_boundary_stale")) local_.set_boundary(Vec(all.begin() + static_cast<std::ptrdiff_t>((r - 1) * mine.size()),
                                       all.begin() + static_cast<std::ptrdiff_t>(r * mine.size())));
  }

  Communicator* comm_;
  Local local_;
  Layout L_;
};

}  // namespace
}  // namespace detail

std::vector<std::int64_t> even_chunks(std::int64_t time, int ranks) {
  if (ranks < 1) throw ContractViolation("ranks", "must be >= 1", std::to_string(ranks));
  if (time < ranks)
    throw ContractViolation("ranks", fmt::format("must be at most the number of steps T = {} (every rank needs a step)", time),
                            std::to_string(ranks));
  std::vector<std::int64_t> out(static_cast<std::size_t>(ranks), time / ranks);
  for (std::int64_t r = 0; r < time % ranks; ++r) ++out[static_cast<std::size_t>(r)];
  return out;
}

namespace {

// The chunk's Newton solve (the one driver over HostIterate and the ChunkSolver): H* in the
// compute type.
template <class Solver>
typename Solver::Vec solve_chunk(const Solver& solver, const Cell& cell, const NewtonConfig& config,
                                 const detail::ChunkPlacement& placement, NewtonStats& stats) {
  const detail::Layout& L = placement.layout;
  constexpr int S = Solver::S;
  detail::HostIterate<Solver, typename Solver::Vec> family(
      solver, static_cast<std::size_t>(L.batch * L.time * S * L.d_h),
      static_cast<std::size_t>(L.batch * L.time * S * S * L.d_h),
      fmt::format("chain tile(s) of {} channels", detail::kChannelTile));
  static_assert(detail::NewtonFamily<decltype(family)>);
  detail::solve_newton(family, cell.spec(), cell.dtype(), config, placement.total_time, stats);
  stats.scan_backend = SolveBackend::cpu_seq_parallel;
  return std::move(family.iterate());
}

// `body(solver)` with the ChunkSolver of the cell's math and storage dtype.
template <class Body>
decltype(auto) with_chunk_solver(Communicator& comm, const Cell& cell, const TensorView& x, const ApplyOptions& options,
                                 const detail::ChunkPlacement& placement, Body&& body) {
  return detail::dispatch_solver(cell, [&]<class CellMath, class StorageT>() -> decltype(auto) {
    const detail::ChunkSolver<CellMath, StorageT> solver(comm, cell, x, options, placement.layout);
    return body(solver);
  });
}

}  // namespace

namespace detail {
namespace {

Tensor split_newton(Communicator& comm, const Cell& cell, const TensorView& x_chunk, const NewtonConfig& config,
                    const ApplyOptions& options, const ChunkPlacement& placement, NewtonStats& stats) {
  return with_chunk_solver(comm, cell, x_chunk, options, placement, [&](const auto& solver) {
    return solver.local().to_storage(solve_chunk(solver, cell, config, placement, stats));
  });
}

NewtonForward split_forward(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                            const NewtonConfig& config, const ApplyOptions& options, const ChunkPlacement& placement) {
  NewtonForward forward;
  with_chunk_solver(comm, cell, x_chunk, options, placement, [&](const auto& solver) {
    const auto H = solve_chunk(solver, cell, config, placement, forward.stats);
    forward.H = solver.local().to_storage(H);
    if (!config.recompute)
      forward.saved_trajectory = saved_on_host(solver.local().to_compute_tensor(H));
  });
  return forward;
}

NewtonGradients split_backward(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                               const NewtonForward& forward, const TensorView& grad_H_chunk, const NewtonConfig& config,
                               const ApplyOptions& options, const ChunkPlacement& placement) {
  return with_chunk_solver(comm, cell, x_chunk, options, placement, [&](const auto& solver) {
    if (forward.saved_trajectory)
      return solver.backward(solver.local().from_saved(forward.saved_trajectory->host()), grad_H_chunk, x_chunk, options);
    NewtonStats stats;  // recompute: the forward's solve again (bitwise the same H*)
    return solver.backward(solve_chunk(solver, cell, config, placement, stats), grad_H_chunk, x_chunk, options);
  });
}

}  // namespace

const SeqParallelRow kCpuSeqParallel{.newton = split_newton, .forward = split_forward, .backward = split_backward};

}  // namespace detail

Tensor seq_parallel_newton_apply(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                                 const NewtonConfig& config, const ApplyOptions& options, NewtonStats* stats) {
  const detail::ChunkPlacement placement =
      detail::check_chunks(comm, cell, x_chunk, config, options, "seq_parallel_newton_apply");
  NewtonStats local;
  NewtonStats& s = stats ? *stats : local;
  Tensor H = placement.row->seq_parallel->newton(comm, cell, x_chunk, config, options, placement, s);
  detail::residual_gate(cell, config, s, x_chunk, options);
  return H;
}

NewtonForward seq_parallel_newton_forward(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                                          const NewtonConfig& config, const ApplyOptions& options) {
  const detail::ChunkPlacement placement =
      detail::check_chunks(comm, cell, x_chunk, config, options, "seq_parallel_newton_forward");
  NewtonForward forward = placement.row->seq_parallel->forward(comm, cell, x_chunk, config, options, placement);
  detail::residual_gate(cell, config, forward.stats, x_chunk, options);
  return forward;
}

NewtonGradients seq_parallel_newton_backward(Communicator& comm, const Cell& cell, const TensorView& x_chunk,
                                             const NewtonForward& forward, const TensorView& grad_H_chunk,
                                             const NewtonConfig& config, const ApplyOptions& options) {
  const detail::ChunkPlacement placement = detail::check_chunks(
      comm, cell, x_chunk, config, options, "seq_parallel_newton_backward", [&](const detail::Layout& L) {
        const Shape trajectory = cell.trajectory_shape(L.batch, L.time);
        detail::check_cotangent(grad_H_chunk, trajectory, "grad_H_chunk");
        if (forward.H.shape() != trajectory)
          throw ContractViolation("forward", "must come from seq_parallel_newton_forward on this rank's x_chunk",
                                  shape_string(forward.H.shape()));
      });
  return placement.row->seq_parallel->backward(comm, cell, x_chunk, forward, grad_H_chunk, config, options, placement);
}

}  // namespace pararnn
