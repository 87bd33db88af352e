// The CUDA backend's entry points in a build without CUDA: unavailable, with the reason.
#include "backends.hpp"

namespace pararnn::detail {

}  // namespace pararnn::detail

namespace pararnn {

std::int64_t cuda_sequential_min_chains(const Cell&, int) {
  throw UnsupportedPath("cuda_sequential_min_chains: the CUDA backend is not in this build");
}

CudaTransferBytes cuda_transfer_bytes() { return {}; }

void cuda_release_cached_memory(int) {
  throw UnsupportedPath("cuda_release_cached_memory: the CUDA backend is not in this build");
}

std::size_t cuda_cached_memory(int) {
  throw UnsupportedPath("cuda_cached_memory: the CUDA backend is not in this build");
}

}  // namespace pararnn

namespace pararnn::detail {

bool cuda_backend_available(std::string* why_not) {
  if (why_not) *why_not = "this build of pararnn has no CUDA backend (configured without nvcc)";
  return false;
}

Tensor cuda_newton_apply(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                         Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

std::optional<Tensor> cuda_windowed_newton_apply(const Cell&, const TensorView&, const NewtonConfig&,
                                                 const ApplyOptions&, Layout, const TensorView*, NewtonStats&) {
  return std::nullopt;  // the caller's window loop then names the missing backend
}

Tensor cuda_sequential_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_newton_forward(const Cell&, const TensorView&, const NewtonConfig&,
                                  const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_newton_backward(const Cell&, const TensorView&, const NewtonForward&,
                                     const TensorView&, const NewtonConfig&, const ApplyOptions&,
                                     Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

void cuda_newton_apply_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                            const ApplyOptions&, Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_newton_forward_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                                       const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_newton_backward_into(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                          const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

void cuda_write_view(const TensorView&, const Tensor&, const char* argument) {
  throw UnsupportedPath(std::string(argument) + ": is a CUDA tensor and the CUDA backend is not in this build");
}

Tensor cuda_dense_newton_apply(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                               Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_dense_sequential_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_dense_newton_forward(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                                        Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_dense_newton_backward(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                           const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_rwkv7_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_m2rnn_newton_apply(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                               Layout, NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_m2rnn_newton_forward(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                                        Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_m2rnn_newton_backward(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                           const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_m2rnn_sequential_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_rwkv7_newton_forward(const Cell&, const TensorView&, const NewtonConfig&, const ApplyOptions&,
                                        Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_rwkv7_newton_backward(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                           const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

Tensor cuda_rwkv7_sequential_apply(const Cell&, const TensorView&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

void cuda_dense_newton_apply_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout,
                                  NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_dense_newton_forward_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                                             const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_dense_newton_backward_into(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                                const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

void cuda_rwkv7_apply_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout,
                           NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_rwkv7_newton_forward_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                                             const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_rwkv7_newton_backward_into(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                                const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

void cuda_m2rnn_newton_apply_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout,
                                  NewtonStats&) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonForward cuda_m2rnn_newton_forward_into(const Cell&, const TensorView&, const TensorView&, const NewtonConfig&,
                                             const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

NewtonGradients cuda_m2rnn_newton_backward_into(const Cell&, const TensorView&, const NewtonForward&, const TensorView&,
                                                const TensorView&, const NewtonConfig&, const ApplyOptions&, Layout) {
  throw UnsupportedPath("the CUDA backend is not in this build");
}

}  // namespace pararnn::detail

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
