// The cases of the plan, built from their key: weights by Cell::initialise at the case seed, x by
// generated_case_input, and the class's twist (hard weights, saturating inputs, a random h0,
// cu_seqlens). Internal to pararnn::nightly.
#pragma once

#include <optional>
#include <string>

#include "pararnn/cells/cell.hpp"
#include "pararnn/core/case_file.hpp"
#include "pararnn/core/tensor.hpp"
#include "pararnn/nightly/plan.hpp"
#include "pararnn/solver/solver.hpp"

namespace pararnn::nightly::detail {

struct BuiltCase {
  Cell cell;
  Tensor x;
  std::optional<Tensor> h0, cu_seqlens;
  Case problem() const {
    Case c = cell.make_case(x, h0);
    c.cu_seqlens = cu_seqlens;
    return c;
  }
  ApplyOptions apply() const {
    ApplyOptions a;
    if (h0) a.h0 = h0->view();
    if (cu_seqlens) a.cu_seqlens = cu_seqlens->view();
    return a;
  }
};

BuiltCase build_case(const Plan& plan, const CaseKey& k);

NewtonConfig config_for(const std::string& backend, std::optional<std::int64_t> max_iters = std::nullopt);

// Whether the solver has gradients for this cell on this backend: a one-step probe, so that the
// reason recorded is the solver's own (UnsupportedPath), never a list kept here. Thread-safe;
// each (variant, dtype, backend) is probed once.
std::optional<std::string> gradient_unsupported(const Variant& v, DType dtype, const std::string& backend,
                                                const Plan& plan);

// A cotangent of ones, in the case's dtype and H's shape (L = Σ H).
Tensor ones_like_trajectory(const Cell& cell, const Tensor& H);

}  // namespace pararnn::nightly::detail
