// The NCCL communicator (nccl_communicator.hpp): host blocks staged through one device buffer,
// ncclAllGather / ncclAllReduce on a stream of this rank's GPU, synchronised before returning.
// NOT RUN here (no multi-GPU machine): compiled and linked only.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "pararnn/core/errors.hpp"
#include "pararnn/solver/nccl_communicator.hpp"

namespace pararnn {
namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(fmt::format("NCCL communicator: {} failed: {}", what, cudaGetErrorString(status)));
}
void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) throw Error(fmt::format("NCCL communicator: {} failed: {}", what, ncclGetErrorString(status)));
}

// NVLink multicast stays off (the rule for the shared hosts): set when unset, refused
// when set to anything else, before any NCCL communicator exists.
void require_nvls_off() {
  const char* value = std::getenv("NCCL_NVLS_ENABLE");
  if (value == nullptr) {
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);
    return;
  }
  if (std::string(value) != "0")
    throw UnsupportedPath(fmt::format("NCCL_NVLS_ENABLE={}: NVLink multicast must stay off (it can take the shared "
                                      "hosts' GPUs out of service); unset it or set it to 0", value));
}

ncclUniqueId id_from_hex(const std::string& hex) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    const std::string byte = hex.substr(static_cast<std::size_t>(2 * i), 2);
    char* end = nullptr;
    const long v = std::strtol(byte.c_str(), &end, 16);
    if (end != byte.c_str() + 2) throw ContractViolation("PARARNN_NCCL_UNIQUE_ID", "must be hex digits", byte);
    id.internal[i] = static_cast<char>(v);
  }
  return id;
}

// Rank 0 creates the id and publishes it (temporary + rename: never a partial file); the others
// poll until the file holds exactly the id's bytes.
ncclUniqueId exchange_id(const NcclLaunch& launch) {
  if (!launch.id_hex.empty()) return id_from_hex(launch.id_hex);
  namespace fs = std::filesystem;
  const fs::path path(launch.id_file);
  ncclUniqueId id;
  if (launch.rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, NCCL_UNIQUE_ID_BYTES);
      if (!out) throw Error(fmt::format("NCCL communicator: cannot write the unique id to {}", tmp.string()));
    }
    fs::rename(tmp, path);
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(launch.id_timeout_s);
  for (;;) {
    std::error_code ec;
    if (fs::file_size(path, ec) == NCCL_UNIQUE_ID_BYTES && !ec) {
      std::ifstream in(path, std::ios::binary);
      in.read(id.internal, NCCL_UNIQUE_ID_BYTES);
      if (in.gcount() == NCCL_UNIQUE_ID_BYTES) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw Error(fmt::format("NCCL communicator: rank {} waited {} s for the unique id in {} (PARARNN_NCCL_ID_FILE), "
                              "which rank 0 writes", launch.rank, launch.id_timeout_s, path.string()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const NcclLaunch& launch) : rank_(launch.rank), size_(launch.world_size) {
    require_nvls_off();
    check_cuda(cudaSetDevice(launch.local_rank), "cudaSetDevice(LOCAL_RANK)");
    const ncclUniqueId id = exchange_id(launch);
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    if (device_ != nullptr) cudaFree(device_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }

  void allgather(std::span<const std::byte> block, std::span<std::byte> out) override {
    // NCCL cannot see a size mismatch (it would hang or corrupt): the sizes go first.
    const std::uint64_t mine = block.size();
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(size_));
    gather_raw(&mine, sizeof mine, sizes.data());
    for (int q = 0; q < size_; ++q)
      if (sizes[static_cast<std::size_t>(q)] != mine)
        throw ContractViolation("block", "an allgather takes blocks of the same size on every rank",
                                fmt::format("rank {} gave {} bytes, rank {} gave {}", rank_, mine, q,
                                            sizes[static_cast<std::size_t>(q)]));
    if (out.size() != block.size() * static_cast<std::size_t>(size_))
      throw ContractViolation("out", "must hold size() blocks", fmt::format("{} bytes", out.size()));
    gather_raw(block.data(), block.size(), out.data());
  }

  // ncclMax's NaN rule is not documented: the NaN travels as a flag beside the value.
  double allreduce_max(double value) override {
    const double pair[2] = {std::isnan(value) ? -std::numeric_limits<double>::infinity() : value,
                            std::isnan(value) ? 1.0 : 0.0};
    double* d = static_cast<double*>(device(sizeof pair));
    check_cuda(cudaMemcpyAsync(d, pair, sizeof pair, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    check_nccl(ncclAllReduce(d, d, 2, ncclFloat64, ncclMax, comm_, stream_), "ncclAllReduce");
    double result[2];
    check_cuda(cudaMemcpyAsync(result, d, sizeof result, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return result[1] > 0.0 ? std::numeric_limits<double>::quiet_NaN() : result[0];
  }

 private:
  void* device(std::size_t bytes) {
    if (bytes > capacity_) {
      if (device_ != nullptr) check_cuda(cudaFree(device_), "cudaFree");
      device_ = nullptr;
      check_cuda(cudaMalloc(&device_, bytes), "cudaMalloc");
      capacity_ = bytes;
    }
    return device_;
  }

  // n bytes from every rank into `out` (size()·n bytes), through the device buffer.
  void gather_raw(const void* mine, std::size_t n, void* out) {
    if (n == 0) return;
    auto* d = static_cast<unsigned char*>(device(n * (static_cast<std::size_t>(size_) + 1)));
    unsigned char* send = d + n * static_cast<std::size_t>(size_);
    check_cuda(cudaMemcpyAsync(send, mine, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    check_nccl(ncclAllGather(send, d, n, ncclUint8, comm_, stream_), "ncclAllGather");
    check_cuda(cudaMemcpyAsync(out, d, n * static_cast<std::size_t>(size_), cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* device_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace

bool nccl_available(std::string* why_not) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    if (why_not) *why_not = "NCCL is built in, but no CUDA device is visible";
    return false;
  }
  return true;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclLaunch& launch) {
  return std::make_unique<NcclCommunicator>(launch);
}

}  // namespace pararnn
