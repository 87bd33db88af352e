// The public CUDA API (solver.hpp's cuda_* functions, decode.hpp's CudaDecoder) in a build
// without CUDA: each refuses by name. The solver's routing needs nothing here: registry.cpp
// registers no CUDA row in such a build.
#include "backends.hpp"

namespace pararnn {

bool cuda_reads_parameter_views(const Cell&) { return false; }

std::int64_t cuda_sequential_min_chains(const Cell&, int) {
  throw UnsupportedPath("cuda_sequential_min_chains: the CUDA backend is not in this build");
}

CudaTransferBytes cuda_transfer_bytes() { return {}; }
void cuda_shutdown() {}

void cuda_release_cached_memory(int) {
  throw UnsupportedPath("cuda_release_cached_memory: the CUDA backend is not in this build");
}

std::size_t cuda_cached_memory(int) {
  throw UnsupportedPath("cuda_cached_memory: the CUDA backend is not in this build");
}

}  // namespace pararnn

// CudaDecoder in a build without CUDA: construction says why; the other members are unreachable.
#include "pararnn/solver/decode.hpp"

namespace pararnn {

struct CudaDecoder::Impl {};

CudaDecoder::CudaDecoder(const Cell&, std::int64_t, int) {
  throw UnsupportedPath("CudaDecoder: the CUDA backend is not in this build");
}
CudaDecoder::~CudaDecoder() = default;
CudaDecoder::CudaDecoder(CudaDecoder&&) noexcept = default;
CudaDecoder& CudaDecoder::operator=(CudaDecoder&&) noexcept = default;
void CudaDecoder::step(const TensorView&, const TensorView&, const TensorView&, void*) const {
  throw UnsupportedPath("CudaDecoder: the CUDA backend is not in this build");
}
void CudaDecoder::step_gates(const TensorView&, const TensorView&, const TensorView&, void*) const {
  throw UnsupportedPath("CudaDecoder: the CUDA backend is not in this build");
}
void CudaDecoder::synchronize() const {}
std::int64_t CudaDecoder::batch() const { return 0; }
const Cell& CudaDecoder::cell() const {
  throw UnsupportedPath("CudaDecoder: the CUDA backend is not in this build");
}

}  // namespace pararnn
