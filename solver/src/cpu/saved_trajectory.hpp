// The forward's saved trajectory on the CPU (NewtonForward::saved_trajectory, training.hpp): the
// solver's converged iterate in the compute type, as a tensor of the family's shape, and back
// into the iterate the backward reads. One copy each way, bit for bit. And the solve's result in
// the storage dtype, for the solvers whose iterate is already in the trajectory's layout.
#pragma once

#include <algorithm>
#include <vector>

#include "pararnn/core/dtype.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn::detail {

template <class ComputeT>
Tensor saved_trajectory(const std::vector<ComputeT>& H, Shape shape) {
  Tensor out(StorageTraits<ComputeT>::dtype, std::move(shape));
  std::copy(H.begin(), H.end(), out.data_as<ComputeT>());
  return out;
}

// An iterate already in the trajectory's layout, rounded once per value to the storage type: the
// solve's result H of `shape`.
template <class StorageT, class ComputeT>
Tensor storage_trajectory(const std::vector<ComputeT>& H, Shape shape) {
  Tensor out(StorageTraits<StorageT>::dtype, std::move(shape));
  StorageT* dst = out.data_as<StorageT>();
  for (std::size_t i = 0; i < H.size(); ++i) dst[i] = static_cast<StorageT>(H[i]);
  return out;
}

template <class ComputeT>
std::vector<ComputeT> from_saved_trajectory(const Tensor& saved) {
  return std::vector<ComputeT>(saved.data_as<ComputeT>(), saved.data_as<ComputeT>() + saved.numel());
}

}  // namespace pararnn::detail
