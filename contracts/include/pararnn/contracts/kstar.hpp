// K*(T): the smallest fixed Newton iteration count whose trajectory agrees with the oracle at τ,
// measured per seed (CONTRACT §4). The shipped K tables are measured K* + 1, nondecreasing in T.
// Example:
//   KstarTable t = measure_kstar({.cell = "gru", .times = {32, 1024}, .seeds = 3});
//   std::cout << t.to_json().dump(2);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pararnn/core/dtype.hpp"
#include "pararnn/solver/newton_config.hpp"

namespace pararnn {

struct KstarOptions {
  std::string cell = "gru";
  std::string mix = "diag";                         // head / dense mixes (GRU, sLSTM)
  std::optional<std::int64_t> n_heads;              // head mixes
  DType dtype = DType::f32;
  std::vector<std::int64_t> times = {32, 64, 128, 256, 512, 1024};
  std::int64_t seeds = 3;
  std::int64_t batch = 1, d_in = 16, d_h = 64;
  std::optional<std::int64_t> k_dim, v_dim;         // ParaM2RNN (then d_h = k_dim·v_dim)
  std::optional<double> weight_std;                 // recurrent std (hard cases); default init
  std::optional<double> max_recurrent_norm = 0.5;
  std::optional<std::int64_t> picard_iters;         // sLSTM P (NewtonConfig::picard_iters)
  std::optional<bool> picard_adapt;                 // NewtonConfig::picard_adapt (nullopt: default)
  bool newton_backtrack = false;                    // M2RNN (NewtonConfig::newton_backtrack)
  Coords coords = Coords::native;                   // sLSTM (NewtonConfig::coords)
  std::int64_t k_limit = 16;                        // give up above this K (K* reported as -1)
  std::function<void(const std::string&)> progress;  // optional progress lines
  std::function<void()> poll;  // cancellation inside each oracle unroll (reference::OracleOptions::poll)
};

struct KstarRow {
  std::int64_t time = 0;
  std::uint64_t seed = 0;
  std::int64_t kstar = -1;               // -1: no K <= k_limit agreed
  std::vector<double> max_abs_by_k;      // error vs the oracle for K = 0, 1, ...
  double sequential_max_abs = 0.0;       // same-dtype sequential vs oracle (floor of any solver)
  // One solve with the default adaptive K (max_iters unset, residual_atol of the dtype) and the
  // options' Picard / backtracking settings: did Newton converge, how many fallback units got
  // the sequential answer, Picard retries, updates, and its error vs the oracle.
  bool default_converged = false;
  std::int64_t default_fallback_units = 0, default_picard_retries = 0, default_updates = 0;
  std::int64_t default_picard_iters = 0;
  double default_max_abs = 0.0;
  // Before any solve (issue 45): λ̂ and the stretch along the oracle's trajectory, the App. A
  // guess's error, and the K the model of predicted_k.hpp predicts from them. nullopt: no finite
  // estimate (predicted_reason says why), a state of its own: 0.0 is a legitimate λ̂ (issue 58).
  std::optional<double> lambda_max, max_stretch, guess_error;
  std::optional<std::int64_t> predicted_k;
  std::string predicted_reason;  // why no number (empty when there is one)
  // The cheap form (predict_k_from_iterate): the same model along the default solve's own
  // trajectory (no oracle); its λ̂ max (nullopt when not finite) and K (empty: iterate_reason says why).
  std::optional<double> lambda_max_iterate;
  std::optional<std::int64_t> predicted_k_iterate;
  std::string iterate_reason;
};

struct KstarTable {
  KstarOptions options;
  double tau = 0.0;
  std::vector<KstarRow> rows;
  // Per T: the max over seeds of K*, and the K the shipped schedule uses (max_iters unset).
  std::vector<std::pair<std::int64_t, std::int64_t>> max_kstar_by_t, shipped_k_by_t;
  // Per T: the max over seeds of the predicted K (-1 when a seed has no number).
  std::vector<std::pair<std::int64_t, std::int64_t>> max_predicted_by_t;
  nlohmann::ordered_json to_json() const;
};

KstarTable measure_kstar(const KstarOptions& options);

}  // namespace pararnn
