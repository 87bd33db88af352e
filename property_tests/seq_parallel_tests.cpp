// Claims of the sequence-parallel solve (seq_parallel.hpp, docs/seq_parallel.md) over the
// in-process communicator, for P ∈ {1, 2, 3, 4} ranks and every per-channel cell:
// - structure exactly: on exact cases (every gate saturated or exactly at σ(0) = ½, so every
//   value of the solve is a dyadic rational of few bits) P ranks return newton_apply's bits,
//   for even and uneven splits (a rank of one step included), f32 and f64, adaptive and fixed K;
// - numerics approximately: on generated problems P ranks agree with one rank within τ;
// - every rank reports the same NewtonStats; the fallback (forced by k_max = 1 on hard weights)
//   returns the sequential solution; a NaN on one rank reaches every rank (the gate raises, and
//   with the gate off the reassembled trajectory never compares as agreeing);
// - the communicator's own rules (rank order, NaN wins, a failing rank aborts the others) and
//   every refusal, named.
// Tolerances come from contracts/tolerance.hpp.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "generators.hpp"
#include "pararnn/contracts/agreement.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/core/random.hpp"
#include "pararnn/solver/seq_parallel.hpp"

namespace pararnn {
namespace {

using testing::GeneratedProblem;

const std::vector<std::string>& kCells = testing::kPerChannelCellLabels;

Tolerance tau(DType dtype, const std::string& cell) {
  return tolerance_for({.dtype = dtype, .metric = Metric::trajectory, .cell = cell, .backend = "cpu"});
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Stats that every rank must report identically (NaN residuals compared by their bits).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
std::string stats_difference(const NewtonStats& a, const NewtonStats& b) {
  if (!same_bits(a.max_residual, b.max_residual)) return fmt::format("max_residual {} vs {}", a.max_residual, b.max_residual);
  if (a.iters != b.iters) return fmt::format("iters {} vs {}", a.iters, b.iters);
  if (a.updates != b.updates) return fmt::format("updates {} vs {}", a.updates, b.updates);
  if (a.converged != b.converged) return "converged differs";
  if (a.fallback_tiles != b.fallback_tiles) return fmt::format("fallback_tiles {} vs {}", a.fallback_tiles, b.fallback_tiles);
  if (a.picard_iters != b.picard_iters || a.picard_retries != b.picard_retries) return "picard differs";
  if (a.k.k != b.k.k || a.k.source != b.k.source) return "K differs";
  if (a.strategy != b.strategy)
    return fmt::format("strategy {} vs {}", solve_strategy_name(a.strategy), solve_strategy_name(b.strategy));
  if (a.residual_history.size() != b.residual_history.size()) return "residual_history length differs";
  for (std::size_t i = 0; i < a.residual_history.size(); ++i)
    if (!same_bits(a.residual_history[i], b.residual_history[i])) return fmt::format("residual_history[{}] differs", i);
  return {};
}

struct SplitSolve {
  Tensor H;                        // the ranks' chunks reassembled, (B, T, ...)
  std::vector<NewtonStats> stats;  // per rank
};

// x split into chunks of `lengths` steps, solved by one in-process rank each; h0 at rank 0.
SplitSolve solve_split(const Cell& cell, const Tensor& x, const std::vector<std::int64_t>& lengths,
                       const NewtonConfig& config, const std::optional<Tensor>& h0 = std::nullopt) {
  const int ranks = static_cast<int>(lengths.size());
  std::vector<std::int64_t> starts(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) starts[r] = starts[r - 1] + lengths[r - 1];
  std::vector<Tensor> parts(lengths.size());
  SplitSolve out{.H = Tensor(cell.dtype(), cell.trajectory_shape(x.size(0), x.size(1))),
                 .stats = std::vector<NewtonStats>(lengths.size())};
  InProcessGroup group(ranks);
  group.run([&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    ApplyOptions options;
    if (h0 && r == 0) options.h0 = h0->view();
    const TensorView x_r = x.view().slice(1, starts[r], starts[r] + lengths[r]);
    parts[r] = seq_parallel_newton_apply(comm, cell, x_r, config, options, &out.stats[r]);
  });
  for (std::size_t r = 0; r < lengths.size(); ++r)
    for (std::int64_t b = 0; b < x.size(0); ++b) {
      const TensorView dst = out.H.view().select(0, b).slice(0, starts[r], starts[r] + lengths[r]);
      const TensorView src = parts[r].view().select(0, b);
      std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * dtype_size(out.H.dtype()));
    }
  return out;
}

// Even, first rank of one step, last rank of one step, and a seeded uneven split.
std::vector<std::vector<std::int64_t>> splits_of(std::int64_t time, int ranks, std::uint64_t seed) {
  std::vector<std::vector<std::int64_t>> out = {even_chunks(time, ranks)};
  if (ranks == 1) return out;
  std::vector<std::int64_t> first_one(static_cast<std::size_t>(ranks), 1), last_one;
  first_one.back() = time - (ranks - 1);
  out.push_back(first_one);
  last_one = first_one;
  std::swap(last_one.front(), last_one.back());
  out.push_back(last_one);
  SplitMix64 rng(seed);
  std::vector<std::int64_t> cuts = {0, time};
  while (static_cast<int>(cuts.size()) < ranks + 1) {
    const auto cut = static_cast<std::int64_t>(1 + rng.next() % static_cast<std::uint64_t>(time - 1));
    if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::int64_t> random;
  for (std::size_t i = 1; i < cuts.size(); ++i) random.push_back(cuts[i] - cuts[i - 1]);
  out.push_back(random);
  return out;
}

std::string split_name(const std::vector<std::int64_t>& lengths) {
  std::string out;
  for (std::int64_t n : lengths) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out;
}

// ---- Exact cases --------------------------------------------------------------------------
// A gate pre-activation is ±L (L = 2^10: σ = 0 or 1, tanh = ±1, exp of a gap of L underflows
// to 0, in f32 and f64, whatever the recurrent term |R h| ≤ a few adds), or, for gates that
// read no hidden state (or whose recurrent value is set to 0 here), also exactly 0 (σ = ½,
// exp = 1). Then every derivative factor σ(1−σ), 1 − tanh² is 0, the Jacobians are 0, ½ or 1
// (sLSTM: and the max's tie weights), the states are dyadic with at most one more bit per step,
// and with T ≤ 20 (f32; 40 in f64) every sum and product of the solve is exact in any order.
enum class Gate {
  saturated,  // ±L with the sign of x[..., 0] (never 0)
  with_zero,  // ±L or 0, from x[..., 1] ∈ {−1, 0, 1}
  negative,   // −L always (an output gate that silences h, a softplus that vanishes)
  derived,    // CfC's Δt = x[..., −1] = 1, not from an affine
};
constexpr double kSaturation = 1024.0;

struct ExactPlan {
  std::vector<Gate> gates;           // per gate block, in CellMath order
  std::vector<int> zero_recurrent;   // recurrent values (CellMath order) set to 0
};

ExactPlan exact_plan(const std::string& label) {
  using G = Gate;
  const std::string cell = label.substr(0, label.find(':'));
  if (cell == "gru") return {{G::with_zero, G::saturated, G::saturated}, {0}};  // z = ½ needs a_z = 0
  if (cell == "lstm") return {{G::saturated, G::saturated, G::negative}, {}};   // o = 0: h' = 0, J_h* = 0
  if (cell == "nlru") return {{G::with_zero, G::saturated}, {}};
  if (cell == "slstm") return {{G::with_zero, G::with_zero, G::saturated, G::negative}, {0, 1}};
  if (cell == "cfc") return {{G::negative, G::saturated, G::derived, G::with_zero}, {}};  // a = σ(−b)
  if (cell == "titans") return {{G::with_zero, G::negative, G::saturated, G::saturated, G::saturated}, {}};
  throw std::logic_error("exact_plan: no plan for cell label " + label);
}

struct ExactCase {
  Cell cell;
  Tensor x;
  std::optional<Tensor> h0;
  std::string describe;
};

ExactCase exact_case(const std::string& label, DType dtype, std::int64_t batch, std::int64_t time,
                     std::int64_t d_h, bool with_h0, std::uint64_t seed) {
  const CellOptions variant = testing::label_options(label);
  Cell cell = Cell::initialise({.cell = variant.cell, .d_in = 3, .d_h = d_h, .gate_mix = variant.gate_mix}, dtype, seed);
  const ExactPlan plan = exact_plan(label);
  const CellSpec& spec = cell.spec();
  SplitMix64 rng(seed * 977 + 5);
  const auto sign = [&] { return rng.next() % 2 ? 1.0 : -1.0; };
  for (const AffineBlock& block : spec.affine) {
    Tensor w = Tensor::copy_of(cell.parameter(std::string(block.weight)).view());
    Tensor bias = Tensor::copy_of(cell.parameter(std::string(block.bias)).view());
    const std::int64_t inputs = cell.affine_inputs(block);
    for (int g = 0; g < block.gates; ++g)
      for (std::int64_t c = 0; c < d_h; ++c) {
        const std::int64_t row = g * d_h + c;
        for (std::int64_t j = 0; j < inputs; ++j) w.store({row, j}, 0.0);
        bias.store({row}, 0.0);
        switch (plan.gates.at(static_cast<std::size_t>(block.first_gate + g))) {
          case Gate::saturated: w.store({row, 0}, sign() * kSaturation); break;
          case Gate::with_zero: w.store({row, 1}, sign() * kSaturation); break;
          case Gate::negative: bias.store({row}, -kSaturation); break;
          case Gate::derived: break;
        }
      }
    cell.set_parameter(std::string(block.weight), w);
    cell.set_parameter(std::string(block.bias), bias);
  }
  // Recurrent values in {±1/4, ±1/2} (inside the clamp), the plan's zeros at 0.
  for (std::size_t k = 0; k < spec.recurrent.size(); ++k) {
    const RecurrentEntry& e = spec.recurrent[k];
    Tensor t = Tensor::copy_of(cell.parameter(std::string(e.tensor)).view());
    const bool zero = std::find(plan.zero_recurrent.begin(), plan.zero_recurrent.end(), static_cast<int>(k)) !=
                      plan.zero_recurrent.end();
    for (std::int64_t c = 0; c < d_h; ++c) {
      const double v = zero ? 0.0 : sign() * (rng.next() % 2 ? 0.25 : 0.5);
      if (e.row < 0) t.store({c}, v); else t.store({e.row, c}, v);
    }
    cell.set_parameter(std::string(e.tensor), t);
  }
  Tensor x(dtype, {batch, time, 3});
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < time; ++t) {
      x.store({b, t, 0}, sign());
      x.store({b, t, 1}, static_cast<double>(static_cast<int>(rng.next() % 3) - 1));
      x.store({b, t, 2}, 1.0);
    }
  std::optional<Tensor> h0;
  if (with_h0) {
    Tensor h(dtype, {batch, cell.slots(), d_h});
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t s = 0; s < cell.slots(); ++s)
        for (std::int64_t c = 0; c < d_h; ++c) {
          double v = static_cast<double>(static_cast<int>(rng.next() % 9) - 4) / 4.0;  // quarters in [−1, 1]
          if (variant.cell == "slstm") v = s == 0 ? std::round(v) : s == 1 ? std::abs(std::round(v)) : 0.0;
          h.store({b, s, c}, v);
        }
    h0 = h;
  }
  return {cell, x, h0,
          fmt::format("exact case {} {} B={} T={} d_h={} h0={} seed={}", label, dtype_name(dtype), batch, time, d_h,
                      with_h0, seed)};
}

std::int64_t exact_max_time(DType dtype) { return dtype == DType::f64 ? 40 : 20; }

TEST(SeqParallel, PRanksEqualOneRankBitwiseOnExactCases) {
  const std::vector<NewtonConfig> configs = {NewtonConfig{}, NewtonConfig{.max_iters = 2, .residual_atol = std::nullopt}};
  std::uint64_t seed = 1;
  for (const std::string& label : kCells)
    for (DType dtype : {DType::f32, DType::f64})
      for (int ranks = 1; ranks <= 4; ++ranks)
        for (const NewtonConfig& config : configs) {
          ++seed;
          const std::int64_t time = ranks + static_cast<std::int64_t>(seed % static_cast<std::uint64_t>(exact_max_time(dtype) - ranks + 1));
          const ExactCase c = exact_case(label, dtype, 2, time, seed % 3 == 0 ? 70 : 5, seed % 2 == 0, seed);
          SCOPED_TRACE(c.describe + (config.max_iters ? " fixed K=2" : " adaptive"));
          ApplyOptions options;
          if (c.h0) options.h0 = c.h0->view();
          NewtonStats one_rank;
          const QuietWarnings quiet;  // a fixed K = 2 may leave a residual above the warning level
          const Tensor expected = newton_apply(c.cell, c.x, config, options, &one_rank);
          ASSERT_TRUE(all_finite(expected));
          // The case is exact: Newton's answer is the sequential loop's, every value equal (the
          // sign of a zero aside: LSTM's silenced h is o·tanh(c') = ±0 in the loop, and Newton's
          // H + δ turns −0 into +0).
          if (!config.max_iters) {
            const ComparisonResult exact = compare(expected, sequential_apply(c.cell, c.x, options), Tolerance{});
            ASSERT_TRUE(exact.ok()) << exact.describe();
          }
          for (const auto& lengths : splits_of(time, ranks, seed)) {
            SCOPED_TRACE("split " + split_name(lengths));
            const SplitSolve split = solve_split(c.cell, c.x, lengths, config, c.h0);
            EXPECT_EQ(std::memcmp(split.H.data(), expected.data(), expected.nbytes()), 0)
                << compare(split.H, expected, Tolerance{}).describe();
            for (const NewtonStats& s : split.stats) {
              EXPECT_EQ(stats_difference(s, one_rank), "");
              EXPECT_EQ(s.scan_backend, SolveBackend::cpu_seq_parallel);
            }
          }
        }
}

// Generated problems (library init, clamped std 0.5, unclamped std 0.7; every per-channel cell;
// f32 and f64): P ranks within τ of one rank, every rank the same stats.
RC_GTEST_PROP(SeqParallel, PRanksAgreeWithOneRankWithinTau, ()) {
  const GeneratedProblem p = *testing::gen_problem(300, kCells, {DType::f32, DType::f64});
  const int ranks = *rc::gen::inRange(1, static_cast<int>(std::min<std::int64_t>(4, p.time)) + 1);
  const auto lengths = *rc::gen::elementOf(splits_of(p.time, ranks, p.seed));
  RC_TAG(std::string(dtype_name(p.dtype)), ranks);
  RC_TAG(std::string(p.conditioning));
  const GeneratedProblem::Made made = p.make();
  const auto& [cell, x, h0] = made;
  const ApplyOptions options = made.options();
  const QuietWarnings quiet;
  const Tensor one_rank = newton_apply(cell, x, NewtonConfig{}, options);
  const SplitSolve split = solve_split(cell, x, lengths, NewtonConfig{}, h0);
  for (const NewtonStats& s : split.stats) RC_ASSERT(stats_difference(s, split.stats.front()) == "");
  const ComparisonResult c = compare(split.H, one_rank, tau(p.dtype, p.cell));
  if (!c.ok()) RC_FAIL(fmt::format("{} ranks (split {}) vs one rank, {}\n{}", ranks, split_name(lengths), p.describe(), c.describe()));
  // The same iterate, not only the same fixed point: after one fixed update (far from converged
  // on hard weights) P ranks hold one rank's iterate. An adaptive solve would converge even with
  // a wrong cross-rank carry, only later. An iterate the residual gate would refuse (max|F| above
  // the default residual_fail: Newton left its basin, |H| in the hundreds where τ is absolute)
  // is not compared: there the ranks' rounding alone exceeds an absolute τ.
  const NewtonConfig one_update{.max_iters = 1, .residual_atol = std::nullopt, .residual_fail = std::nullopt};
  NewtonStats one_rank_k1_stats;
  const Tensor one_rank_k1 = newton_apply(cell, x, one_update, options, &one_rank_k1_stats);
  const bool in_basin = one_rank_k1_stats.max_residual <= *NewtonConfig{}.residual_fail;
  RC_CLASSIFY(!in_basin, "K = 1 iterate outside the gate");
  const ComparisonResult k1 = compare(solve_split(cell, x, lengths, one_update, h0).H, one_rank_k1, tau(p.dtype, p.cell));
  if (!k1.ok() && in_basin)
    RC_FAIL(fmt::format("K = 1: {} ranks (split {}) vs one rank, {}\n{}", ranks, split_name(lengths), p.describe(), k1.describe()));
}

// Hard weights, k_max = 1: some tiles do not converge and are replaced by their sequential
// solution along the whole sequence (a pipeline over the ranks); the same tiles as one rank.
TEST(SeqParallel, FallbackReturnsTheSequentialSolutionOnEveryRank) {
  const Cell cell = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 160, .max_recurrent_norm = std::nullopt,
                                      .weight_std = 0.5},
                                     DType::f32, 5);
  const Tensor x = generated_case_input(DType::f32, 3, 512, 3, 6);
  const QuietWarnings quiet;
  NewtonConfig config{.residual_fail = std::nullopt};
  config.k_max = 1;
  NewtonStats one_rank;
  (void)newton_apply(cell, x, config, {}, &one_rank);
  ASSERT_GT(one_rank.fallback_tiles, 0) << "the case no longer falls back: the fallback is untested";
  ASSERT_LT(one_rank.fallback_tiles, 9) << "every tile falls back: the selection of tiles is untested";
  const Tensor sequential = sequential_apply(cell, x);
  for (int ranks : {2, 3, 4})
    for (const auto& lengths : splits_of(512, ranks, 40 + static_cast<std::uint64_t>(ranks))) {
      SCOPED_TRACE(split_name(lengths));
      const SplitSolve split = solve_split(cell, x, lengths, config);
      for (const NewtonStats& s : split.stats) {
        EXPECT_EQ(s.fallback_tiles, one_rank.fallback_tiles);
        EXPECT_EQ(stats_difference(s, split.stats.front()), "");
        EXPECT_FALSE(s.converged);
      }
      const ComparisonResult c = compare(split.H, sequential, tau(DType::f32, "gru"));
      EXPECT_TRUE(c.ok()) << c.describe();
    }
}

// sLSTM's guess is P Picard passes, each a recurrence along the whole sequence (a pipeline over
// the ranks): with K = 0 the guess itself is returned, and it is the one rank's.
TEST(SeqParallel, PicardGuessIsTheOneRankGuessAcrossRanks) {
  const GeneratedProblem p{.cell = "slstm", .dtype = DType::f64, .batch = 2, .time = 90, .d_in = 3, .d_h = 7,
                           .with_h0 = true, .seed = 8};
  const GeneratedProblem::Made made = p.make();
  const auto& [cell, x, h0] = made;
  const QuietWarnings quiet;
  for (std::int64_t passes : {0, 1, 3}) {
    const NewtonConfig config{.max_iters = 0, .residual_fail = std::nullopt, .picard_iters = passes};
    const Tensor expected = newton_apply(cell, x, config, made.options());
    for (int ranks : {2, 3, 4}) {
      SCOPED_TRACE(fmt::format("passes={} ranks={}", passes, ranks));
      const SplitSolve split = solve_split(cell, x, even_chunks(p.time, ranks), config, h0);
      // The passes are the same sequential loop split at the rank boundaries: the same bits.
      EXPECT_EQ(std::memcmp(split.H.data(), expected.data(), expected.nbytes()), 0)
          << compare(split.H, expected, Tolerance{}).describe();
    }
  }
}

// A NaN in one rank's x reaches every rank: each raises NewtonDivergenceError; with the gate
// off every rank reports a NaN residual and the reassembled trajectory never compares as
// agreeing with the one-rank answer.
TEST(SeqParallel, NanOnOneRankReachesEveryRank) {
  for (int nan_rank : {0, 2, 3}) {
    SCOPED_TRACE(fmt::format("NaN on rank {}", nan_rank));
    const GeneratedProblem p{.cell = "lstm", .dtype = DType::f32, .batch = 2, .time = 40, .d_in = 3, .d_h = 6, .seed = 3};
    const Cell cell = p.make_cell();
    Tensor x = p.make_input();
    const std::vector<std::int64_t> lengths = even_chunks(40, 4);
    x.store({1, nan_rank * 10 + 4, 2}, std::numeric_limits<double>::quiet_NaN());
    const QuietWarnings quiet;
    std::vector<std::string> outcome(4);
    InProcessGroup group(4);
    group.run([&](Communicator& comm) {
      const std::int64_t r = comm.rank();
      try {
        (void)seq_parallel_newton_apply(comm, cell, x.view().slice(1, r * 10, r * 10 + 10));
        outcome[static_cast<std::size_t>(r)] = "returned";
      } catch (const NewtonDivergenceError&) {
        outcome[static_cast<std::size_t>(r)] = "diverged";
      }
    });
    EXPECT_EQ(outcome, std::vector<std::string>(4, "diverged"));
    const NewtonConfig ungated{.residual_fail = std::nullopt};
    const SplitSolve split = solve_split(cell, x, lengths, ungated);
    for (const NewtonStats& s : split.stats) EXPECT_TRUE(std::isnan(s.max_residual));
    const Tensor clean = newton_apply(cell, p.make_input(), ungated);
    const ComparisonResult c = compare(split.H, clean, tau(DType::f32, "lstm"));
    EXPECT_FALSE(c.ok());
    EXPECT_GT(c.nan_count, 0);
  }
}

// ---- Gradients --------------------------------------------------------------------------------

struct SplitGradients {
  Tensor dx;                                            // the ranks' ∇x chunks reassembled
  std::optional<Tensor> dh0;                            // rank 0's
  std::vector<std::map<std::string, Tensor>> parameters;  // per rank
};

SplitGradients backward_split(const Cell& cell, const Tensor& x, const Tensor& grad_H,
                              const std::vector<std::int64_t>& lengths, const NewtonConfig& config,
                              const std::optional<Tensor>& h0) {
  std::vector<std::int64_t> starts(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) starts[r] = starts[r - 1] + lengths[r - 1];
  std::vector<NewtonGradients> grads(lengths.size());
  InProcessGroup group(static_cast<int>(lengths.size()));
  group.run([&](Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    ApplyOptions options;
    if (h0 && r == 0) options.h0 = h0->view();
    const TensorView x_r = x.view().slice(1, starts[r], starts[r] + lengths[r]);
    const NewtonForward forward = seq_parallel_newton_forward(comm, cell, x_r, config, options);
    grads[r] = seq_parallel_newton_backward(comm, cell, x_r, forward,
                                            grad_H.view().slice(1, starts[r], starts[r] + lengths[r]), config, options);
  });
  SplitGradients out{.dx = Tensor(cell.dtype(), x.shape()), .dh0 = grads.front().h0, .parameters = {}};
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    out.parameters.push_back(grads[r].parameters);
    for (std::int64_t b = 0; b < x.size(0); ++b) {
      const TensorView dst = out.dx.view().select(0, b).slice(0, starts[r], starts[r] + lengths[r]);
      const TensorView src = grads[r].x.view().select(0, b);
      std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(src.numel()) * dtype_size(out.dx.dtype()));
    }
  }
  return out;
}

Tensor normal_like(DType dtype, const Shape& shape, std::uint64_t seed) {
  Tensor t(dtype, shape);
  Tensor flat = t.reshaped({t.numel()});
  SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) flat.store({i}, rng.normal());
  return t;
}

// ∇x, ∇h0 and every parameter gradient of P ranks within the gradient tolerance of one rank's
// newton_backward on the whole sequence; every rank holds the same parameter gradients, bitwise.
TEST(SeqParallelGradients, PRanksEqualOneRankWithinTheGradientTolerance) {
  std::uint64_t seed = 100;
  for (const std::string& label : kCells)
    for (DType dtype : {DType::f32, DType::f64}) {
      const CellOptions variant = testing::label_options(label);
      const GeneratedProblem p{.cell = variant.cell, .gate_mix = variant.gate_mix, .dtype = dtype, .batch = 2,
                               .time = dtype == DType::f64 ? 23 : 57, .d_in = 3, .d_h = 6, .with_h0 = true,
                               .seed = ++seed};
      const GeneratedProblem::Made made = p.make();
      const Tensor grad_H = normal_like(dtype, made.cell.trajectory_shape(p.batch, p.time), seed);
      const NewtonForward forward = newton_forward(made.cell, made.x, {}, made.options());
      const NewtonGradients one = newton_backward(made.cell, made.x, forward, grad_H, {}, made.options());
      const Tolerance tol = tolerance_for({.dtype = dtype, .metric = gradient_metric(made.cell), .cell = p.cell});
      for (int ranks : {2, 3, 4}) {
        const auto splits = splits_of(p.time, ranks, seed);
        const auto& lengths = splits[static_cast<std::size_t>(ranks) % splits.size()];
        SCOPED_TRACE(p.describe() + " split " + split_name(lengths));
        const SplitGradients split = backward_split(made.cell, made.x, grad_H, lengths, {}, made.h0);
        const ComparisonResult dx = compare(split.dx, one.x, tol);
        EXPECT_TRUE(dx.ok()) << "grad x\n" << dx.describe();
        ASSERT_TRUE(split.dh0 && one.h0);
        const ComparisonResult dh0 = compare(*split.dh0, *one.h0, tol);
        EXPECT_TRUE(dh0.ok()) << "grad h0\n" << dh0.describe();
        for (const auto& [name, expected] : one.parameters) {
          const ComparisonResult c = compare(split.parameters.front().at(name), expected, tol);
          EXPECT_TRUE(c.ok()) << "grad " << name << "\n" << c.describe();
          for (const auto& rank_parameters : split.parameters)
            EXPECT_EQ(std::memcmp(rank_parameters.at(name).data(), split.parameters.front().at(name).data(),
                                  expected.nbytes()), 0) << name << " differs between ranks";
        }
      }
    }
}

// recompute = true keeps nothing of H* and re-solves it across the ranks: bitwise the gradients
// of the saved trajectory.
TEST(SeqParallelGradients, RecomputeIsBitwiseTheSavedBackward) {
  for (const std::string cell_name : {"gru", "slstm"}) {
    SCOPED_TRACE(cell_name);
    const GeneratedProblem p{.cell = cell_name, .dtype = DType::f32, .batch = 2, .time = 40, .d_in = 3, .d_h = 5,
                             .with_h0 = true, .seed = 31};
    const GeneratedProblem::Made made = p.make();
    const Tensor grad_H = normal_like(DType::f32, made.cell.trajectory_shape(p.batch, p.time), 32);
    const auto lengths = even_chunks(p.time, 3);
    const SplitGradients saved = backward_split(made.cell, made.x, grad_H, lengths, {}, made.h0);
    const SplitGradients recomputed = backward_split(made.cell, made.x, grad_H, lengths, {.recompute = true}, made.h0);
    EXPECT_EQ(std::memcmp(saved.dx.data(), recomputed.dx.data(), saved.dx.nbytes()), 0);
    for (const auto& [name, g] : saved.parameters.front())
      EXPECT_EQ(std::memcmp(g.data(), recomputed.parameters.front().at(name).data(), g.nbytes()), 0) << name;
  }
}

TEST(SeqParallelGradients, ACotangentOfTheWrongShapeIsRefusedOnEveryRank) {
  const GeneratedProblem p{.cell = "nlru", .dtype = DType::f32, .batch = 2, .time = 10, .d_in = 3, .d_h = 4, .seed = 5};
  const GeneratedProblem::Made made = p.make();
  std::vector<std::string> refused(2);
  InProcessGroup group(2);
  group.run([&](Communicator& comm) {
    const std::int64_t r = comm.rank();
    const TensorView x_r = made.x.view().slice(1, 5 * r, 5 * r + 5);
    const NewtonForward forward = seq_parallel_newton_forward(comm, made.cell, x_r);
    const Tensor grad_H(DType::f32, {2, r == 1 ? 4 : 5, 4});  // rank 1's is one step short
    try {
      (void)seq_parallel_newton_backward(comm, made.cell, x_r, forward, grad_H);
    } catch (const ContractViolation& e) {
      refused[static_cast<std::size_t>(r)] = e.what();
    }
  });
  EXPECT_TRUE(starts_with(refused[1], "grad_H_chunk: must have the trajectory's shape")) << refused[1];
  EXPECT_TRUE(starts_with(refused[0], "rank 1: refused its input")) << refused[0];
}

// ---- The communicator ------------------------------------------------------------------------

TEST(InProcessCommunicator, AllgatherPlacesEveryRanksBlockInRankOrder) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    InProcessGroup group(ranks);
    std::vector<std::vector<std::int64_t>> seen(static_cast<std::size_t>(ranks));
    group.run([&](Communicator& comm) {
      for (std::int64_t round = 0; round < 200; ++round) {  // many rounds: no slot is overwritten early
        const std::int64_t mine[2] = {round, comm.rank()};
        const auto all = allgather_values(comm, std::span<const std::int64_t>(mine));
        for (int q = 0; q < comm.size(); ++q)
          if (all[static_cast<std::size_t>(2 * q)] != round || all[static_cast<std::size_t>(2 * q + 1)] != q)
            throw Error(fmt::format("rank {} round {}: slot {} holds ({}, {})", comm.rank(), round, q,
                                    all[static_cast<std::size_t>(2 * q)], all[static_cast<std::size_t>(2 * q + 1)]));
      }
      seen[static_cast<std::size_t>(comm.rank())] = {comm.size()};
    });
    for (const auto& s : seen) EXPECT_EQ(s, std::vector<std::int64_t>{ranks});
  }
}

TEST(InProcessCommunicator, AllreduceMaxLetsNanWinOnEveryRank) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (int nan_rank = -1; nan_rank < 4; ++nan_rank) {
    InProcessGroup group(4);
    std::vector<double> result(4);
    group.run([&](Communicator& comm) {
      const double mine = comm.rank() == nan_rank ? nan : (comm.rank() == 1 ? inf : -static_cast<double>(comm.rank()));
      result[static_cast<std::size_t>(comm.rank())] = comm.allreduce_max(mine);
    });
    for (double v : result) {
      if (nan_rank >= 0) EXPECT_TRUE(std::isnan(v)) << "NaN on rank " << nan_rank;  // beats +inf too
      else EXPECT_EQ(v, inf);
    }
  }
}

TEST(InProcessCommunicator, AFailingRankAbortsTheOthersInsteadOfHangingThem) {
  InProcessGroup group(3);
  try {
    group.run([&](Communicator& comm) {
      if (comm.rank() == 1) throw ContractViolation("probe", "rank 1 fails before the collective", "1");
      (void)comm.allreduce_max(1.0);
    });
    FAIL() << "run returned although rank 1 failed";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "probe");  // the rank's own error, not the others' abort
  }
}

TEST(InProcessCommunicator, BlocksOfDifferentSizesAreRefusedOnEveryRank) {
  InProcessGroup group(2);
  std::vector<std::string> refused(2);
  group.run([&](Communicator& comm) {
    const std::vector<std::byte> mine(static_cast<std::size_t>(4 + comm.rank()));
    std::vector<std::byte> out(mine.size() * 2);
    try {
      comm.allgather(mine, out);
    } catch (const ContractViolation& e) {
      refused[static_cast<std::size_t>(comm.rank())] = e.argument();
    }
  });
  EXPECT_EQ(refused, (std::vector<std::string>{"block", "block"}));
}

// ---- Refusals ---------------------------------------------------------------------------------

// Runs one solve per rank with per-rank inputs; returns each rank's error (argument or message).
struct RankInput {
  TensorView x;
  NewtonConfig config;
  ApplyOptions options;
  const Cell* cell;
};
std::vector<std::string> refusals(const std::vector<RankInput>& inputs) {
  std::vector<std::string> out(inputs.size());
  InProcessGroup group(static_cast<int>(inputs.size()));
  group.run([&](Communicator& comm) {
    const RankInput& in = inputs[static_cast<std::size_t>(comm.rank())];
    std::string& mine = out[static_cast<std::size_t>(comm.rank())];
    try {
      (void)seq_parallel_newton_apply(comm, *in.cell, in.x, in.config, in.options);
      mine = "accepted";
    } catch (const ContractViolation& e) {
      mine = e.what();  // "<argument>: <rule> (got <value>)"
    } catch (const UnsupportedPath& e) {
      mine = std::string("unsupported: ") + e.what();
    }
  });
  return out;
}

TEST(SeqParallel, RefusesBadInputOnEveryRankNamingTheArgumentAndTheRank) {
  const GeneratedProblem p{.cell = "gru", .dtype = DType::f32, .batch = 2, .time = 12, .d_in = 3, .d_h = 4, .seed = 2};
  const Cell cell = p.make_cell();
  const Tensor x = p.make_input();
  const GeneratedProblem wider = [&] { GeneratedProblem w = p; w.batch = 3; return w; }();
  const Tensor x3 = wider.make_input();
  const auto chunk = [&](const Tensor& t, std::int64_t a, std::int64_t b) { return t.view().slice(1, a, b); };
  const Tensor h0(DType::f32, {2, 1, 4});
  {  // a rank with zero steps
    const auto r = refusals({{chunk(x, 0, 6), {}, {}, &cell}, {chunk(x, 6, 6), {}, {}, &cell}, {chunk(x, 6, 12), {}, {}, &cell}});
    EXPECT_TRUE(starts_with(r[1], "x_chunk: every rank needs at least one step (rank 1 of 3 has none)")) << r[1];
    EXPECT_TRUE(starts_with(r[0], "rank 1: refused its input")) << r[0];
    EXPECT_TRUE(starts_with(r[2], "rank 1: refused its input")) << r[2];
  }
  {  // ranks with different batch sizes
    const auto r = refusals({{chunk(x, 0, 6), {}, {}, &cell}, {chunk(x3, 6, 12), {}, {}, &cell}});
    for (const std::string& e : r) EXPECT_TRUE(starts_with(e, "x_chunk: must have the same batch size on every rank")) << e;
    EXPECT_NE(r[0].find("rank 1: B = 3"), std::string::npos) << r[0];
  }
  {  // h0 off rank 0
    const auto r = refusals({{chunk(x, 0, 6), {}, {}, &cell}, {chunk(x, 6, 12), {}, {.h0 = h0.view()}, &cell}});
    EXPECT_TRUE(starts_with(r[1], "h0: is the state before the first step: only rank 0 takes it")) << r[1];
    EXPECT_TRUE(starts_with(r[0], "rank 1:")) << r[0];
  }
  {  // different configurations
    const auto r = refusals({{chunk(x, 0, 6), {}, {}, &cell}, {chunk(x, 6, 12), {.k_max = 4}, {}, &cell}});
    for (const std::string& e : r) EXPECT_TRUE(starts_with(e, "config: must be the same NewtonConfig on every rank")) << e;
  }
  {  // different cells
    const Cell other = GeneratedProblem{.cell = "gru", .d_in = 3, .d_h = 4, .seed = 9}.make_cell();
    const auto r = refusals({{chunk(x, 0, 6), {}, {}, &cell}, {chunk(x, 6, 12), {}, {}, &other}});
    for (const std::string& e : r) EXPECT_TRUE(starts_with(e, "cell: must be the same cell")) << e;
  }
  {  // not built: packed sequences, windows, the CUDA backend, non-per-channel cells
    const Tensor cu = Tensor::from_values(DType::i64, {2}, std::vector<double>{0, 6});
    const Tensor x1 = GeneratedProblem{.cell = "gru", .batch = 1, .time = 6, .d_in = 3, .seed = 4}.make_input();
    EXPECT_TRUE(starts_with(refusals({{x1.view(), {}, {.cu_seqlens = cu.view()}, &cell}})[0], "cu_seqlens: is not accepted"));
    EXPECT_TRUE(starts_with(refusals({{chunk(x, 0, 12), {.window_len = 4}, {}, &cell}})[0], "window_len: cannot be combined"));
    // The CUDA backend: refused by the plan where no device can run, else by the CUDA row's one rule.
    const std::string on_cuda = refusals({{chunk(x, 0, 12), {.scan_backend = ScanBackend::cuda}, {}, &cell}})[0];
    EXPECT_TRUE(starts_with(on_cuda, "unsupported: scan_backend=cuda: ") ||
                starts_with(on_cuda, "unsupported: seq_parallel_newton_apply: the cuda per_channel row does not serve "
                                     "seq_parallel"))
        << on_cuda;
    // Parameter views: the CPU rows do not read them, so the plan refuses them (never ignored).
    const Tensor& weight = cell.parameters().begin()->second;
    EXPECT_TRUE(starts_with(refusals({{chunk(x, 0, 12), {}, {.parameters = {{cell.parameters().begin()->first,
                                                                                weight.view()}}}, &cell}})[0],
                            "unsupported: seq_parallel_newton_apply: ApplyOptions::parameters"));
    const Cell head = Cell::initialise({.cell = "gru", .mix = "head", .d_in = 3, .d_h = 4, .n_heads = 2}, DType::f32, 1);
    EXPECT_TRUE(starts_with(refusals({{chunk(x, 0, 12), {}, {}, &head}})[0],
                            "unsupported: seq_parallel_newton_apply: the cpu dense row does not serve seq_parallel"));
  }
  EXPECT_THROW((void)even_chunks(3, 4), ContractViolation);
  EXPECT_THROW((void)even_chunks(3, 0), ContractViolation);
  EXPECT_EQ(even_chunks(10, 4), (std::vector<std::int64_t>{3, 3, 2, 2}));
}

}  // namespace
}  // namespace pararnn
