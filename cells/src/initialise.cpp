// Cell::initialise and the generated case inputs (cell.hpp): App. C.1 of the library, drawn
// from the project's portable stream (core/random.hpp).
#include "pararnn/cells/cell.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "pararnn/core/random.hpp"

namespace pararnn {

namespace {

// Gram-Schmidt (twice) on the columns of the rows x cols (rows >= cols) row-major Gaussian
// matrix q: the Q of q = Q R with a positive diagonal of R, as torch.nn.init.orthogonal_
// returns.
void orthonormalise_columns(std::vector<double>& q, std::int64_t rows, std::int64_t cols) {
  const auto at = [&](std::int64_t i, std::int64_t j) -> double& {
    return q[static_cast<std::size_t>(i * cols + j)];
  };
  for (std::int64_t j = 0; j < cols; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t k = 0; k < j; ++k) {
        double dot = 0.0;
        for (std::int64_t i = 0; i < rows; ++i) dot += at(i, k) * at(i, j);
        for (std::int64_t i = 0; i < rows; ++i) at(i, j) -= dot * at(i, k);
      }
    double norm = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) norm += at(i, j) * at(i, j);
    norm = std::sqrt(norm);
    for (std::int64_t i = 0; i < rows; ++i) at(i, j) = norm > 0.0 ? at(i, j) / norm : (i == j ? 1.0 : 0.0);
  }
}

}  // namespace

Tensor generated_case_input(DType dtype, std::int64_t batch, std::int64_t time, std::int64_t d_in,
                            std::uint64_t seed) {
  SplitMix64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  Tensor x(dtype, {batch, time, d_in});
  Tensor flat = x.reshaped({x.numel()});
  for (std::int64_t i = 0; i < x.numel(); ++i) flat.store({i}, rng.normal());
  return x;
}

Cell Cell::initialise(const CellOptions& options, DType dtype, std::uint64_t seed) {
  const CellSpec& spec = cell_spec(options.cell, options.mix, "cell", options.gate_mix);
  const CellOptions resolved = with_derived_d_h(spec, options);
  check_options(spec, resolved);
  Cell cell(spec, resolved.d_in, resolved.d_h, dtype, resolved.max_recurrent_norm, resolved);
  SplitMix64 rng(seed);
  for (const ParameterSpec& p : spec.parameters) {
    Tensor t(dtype, cell.parameter_shape(p));
    const std::int64_t n = t.numel();
    Tensor flat = t.reshaped({n});
    switch (p.init) {
      case ParameterInit::xavier_vec: {  // N(0, 1/numel), or the caller's recurrent std
        const double std = options.weight_std.value_or(1.0 / std::sqrt(static_cast<double>(n)));
        for (std::int64_t i = 0; i < n; ++i) flat.store({i}, rng.normal(0.0, std));
        break;
      }
      case ParameterInit::kaiming: {  // U(±1/√fan_in), PyTorch's default Linear init
        const double bound = 1.0 / std::sqrt(static_cast<double>(t.size(1)));
        for (std::int64_t i = 0; i < n; ++i) flat.store({i}, rng.uniform(-bound, bound));
        break;
      }
      case ParameterInit::constant:  // CfC's W_b.bias = time_bias_init
        for (std::int64_t i = 0; i < n; ++i) flat.store({i}, options.time_bias_init);
        break;
      case ParameterInit::orthogonal: {
        // Per (in, out) slice of a head-matrix tensor, or the whole (rows·d_h, d_h) matrix:
        // orthogonal(gain 0.25), or N(0, weight_std²).
        const std::int64_t cols = t.size(t.dim() - 1);
        const std::int64_t rows = p.shape == ParameterShape::stacked_square ? t.size(0) : cols;
        for (std::int64_t slice = 0; slice < n / (rows * cols); ++slice) {
          std::vector<double> q(static_cast<std::size_t>(rows * cols));
          for (double& v : q) v = rng.normal();
          if (options.weight_std) {
            for (double& v : q) v *= *options.weight_std;
          } else {
            orthonormalise_columns(q, rows, cols);
            for (double& v : q) v *= 0.25;
          }
          for (std::int64_t i = 0; i < rows * cols; ++i)
            flat.store({slice * rows * cols + i}, q[static_cast<std::size_t>(i)]);
        }
        break;
      }
      case ParameterInit::identity: {  // M2RNN's W; + N(0, weight_std²) noise for hard cases
        const bool noisy = options.weight_std && *options.weight_std > 0.0;
        for (std::int64_t i = 0; i < t.size(0); ++i)
          for (std::int64_t j = 0; j < t.size(1); ++j)
            t.store({i, j}, (i == j ? 1.0 : 0.0) + (noisy ? rng.normal(0.0, *options.weight_std) : 0.0));
        break;
      }
      case ParameterInit::xavier_uniform: {  // torch.nn.init.xavier_uniform_ (gain 1)
        const double bound = std::sqrt(6.0 / static_cast<double>(t.size(0) + t.size(1)));
        for (std::int64_t i = 0; i < n; ++i) flat.store({i}, rng.uniform(-bound, bound));
        break;
      }
      case ParameterInit::zeros:
        break;
    }
    cell.parameters_.emplace(std::string(p.name), t);
  }
  if (spec.kind == CellKind::titans) {  // the θ slice of the bias starts at −1 (softplus ≈ 0.31)
    Tensor& b = cell.parameters_.at("W_x.bias");
    for (std::int64_t c = options.d_h; c < 2 * options.d_h; ++c) b.store({c}, -1.0);
  }
  return cell;
}

}  // namespace pararnn
