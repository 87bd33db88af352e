// The arguments of the fused adjoint (cell_adjoint_fused.cuh), host-compilable so that host
// code (the kernel tests) can fill them. Layouts as kernels/cell_vjp.hpp; d_rec_partials is
// [b][chunk][r][c] with the launch's chunk (steps × groups of its shape), set by the launch.
#pragma once

#include <cstdint>

namespace pararnn::kernels::detail {

template <class T>
struct FusedAdjointArgs {
  const T* wx = nullptr;
  const T* recurrent = nullptr;
  const T* h0 = nullptr;                 // optional
  const std::int64_t* h0_row = nullptr;  // optional (packed)
  const std::uint8_t* head = nullptr;    // optional (packed)
  const T* H = nullptr;                  // H*
  const T* grad_H = nullptr;
  T* d_wx = nullptr;
  double* d_h0 = nullptr;                // optional
  double* d_rec_partials = nullptr;      // [b][chunk][r][c]
  double* mu = nullptr;                  // the μ form only: μ_t, [b][t][s][c]
  std::int64_t batch = 0, time = 0, channels = 0, chunk = 0;
};

}  // namespace pararnn::kernels::detail
