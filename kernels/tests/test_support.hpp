// Helpers of the CUDA kernel tests (host code; the tests allocate all device memory here, the
// launchers never do).
//
// DeviceBuffer<T>: an owning cudaMalloc'd array with upload/download; PARARNN_CUDA_OK: asserts a
// cudaError_t is cudaSuccess and prints the runtime's message; test_seed: the seed of a random
// test, printed, and replaced by PARARNN_TEST_SEED when set, so one line replays it. Random
// draws come from the project's portable stream, pararnn::SplitMix64 (core/random.hpp).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pararnn/core/random.hpp"

namespace pararnn::kernels::test {

#define PARARNN_CUDA_OK(expr)                                                       \
  do {                                                                              \
    const cudaError_t pararnn_cuda_ok_e = (expr);                                   \
    ASSERT_EQ(pararnn_cuda_ok_e, cudaSuccess)                                       \
        << #expr << ": " << cudaGetErrorName(pararnn_cuda_ok_e) << " ("            \
        << cudaGetErrorString(pararnn_cuda_ok_e) << ")";                            \
  } while (0)

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count > 0) status_ = cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  cudaError_t status() const { return status_; }

  cudaError_t upload(const std::vector<T>& host) {
    if (status_ != cudaSuccess) return status_;
    if (host.size() != count_) return cudaErrorInvalidValue;
    if (count_ == 0) return cudaSuccess;
    return cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice);
  }
  cudaError_t download(std::vector<T>& host) const {
    if (status_ != cudaSuccess) return status_;
    host.resize(count_);
    if (count_ == 0) return cudaSuccess;
    return cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost);
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
  cudaError_t status_ = cudaSuccess;
};

inline std::uint64_t test_seed(std::uint64_t fallback) {
  std::uint64_t seed = fallback;
  if (const char* env = std::getenv("PARARNN_TEST_SEED"); env != nullptr && *env != '\0')
    seed = std::strtoull(env, nullptr, 0);
  std::printf("[seed] %llu (replay: PARARNN_TEST_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  return seed;
}

template <class T>
std::string hexfloat(T v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (%.17g)", static_cast<double>(v), static_cast<double>(v));
  return buf;
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace pararnn::kernels::test
