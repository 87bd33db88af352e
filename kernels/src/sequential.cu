// launch_sequential_apply (kernels/sequential.hpp): the kernel of sequential.cuh at the
// production prefetch distance, for every per-channel cell and storage dtype.
#include "sequential.cuh"

namespace pararnn::kernels {

using detail::kSequentialThreads;

template <class CellMath, class StorageT>
cudaError_t launch_sequential_apply(const SequentialArgs<StorageT>& a, cudaStream_t stream) {
  if (a.batch < 0 || a.time < 0 || a.channels < 0) return cudaErrorInvalidValue;
  if (a.batch == 0 || a.time == 0 || a.channels == 0) return cudaSuccess;
  if (a.wx == nullptr || a.recurrent == nullptr || a.H == nullptr) return cudaErrorInvalidValue;
  const std::int64_t blocks = (a.batch * a.channels + kSequentialThreads - 1) / kSequentialThreads;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  constexpr int kPrefetch = detail::sequential_prefetch(CellMath::kGates);
  // Two instantiations: the general one, and the plain recurrence from t = 0 (S1's case), whose
  // steps carry no head flag and no Picard branch.
  if (a.head != nullptr || a.h0_row != nullptr || a.frozen_hidden != nullptr || a.zero_hidden)
    detail::sequential_kernel<CellMath, StorageT, kPrefetch, true, true>
        <<<static_cast<unsigned>(blocks), kSequentialThreads, 0, stream>>>(a);
  else
    detail::sequential_kernel<CellMath, StorageT, kPrefetch, false, false>
        <<<static_cast<unsigned>(blocks), kSequentialThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

#define PARARNN_INSTANTIATE_SEQUENTIAL(CELL, STORAGE)              \
  template cudaError_t launch_sequential_apply<CELL, STORAGE>(     \
      const SequentialArgs<STORAGE>&, cudaStream_t);
#define PARARNN_INSTANTIATE_SEQUENTIAL_ALL(kind, Math, label, min_chains) \
  PARARNN_INSTANTIATE_SEQUENTIAL(cells::Math, float)         \
  PARARNN_INSTANTIATE_SEQUENTIAL(cells::Math, double)        \
  PARARNN_INSTANTIATE_SEQUENTIAL(cells::Math, __half)        \
  PARARNN_INSTANTIATE_SEQUENTIAL(cells::Math, __nv_bfloat16)
PARARNN_FOR_EACH_PER_CHANNEL_CELL(PARARNN_INSTANTIATE_SEQUENTIAL_ALL)
#undef PARARNN_INSTANTIATE_SEQUENTIAL_ALL
#undef PARARNN_INSTANTIATE_SEQUENTIAL

}  // namespace pararnn::kernels
