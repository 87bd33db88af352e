// The NCCL communicator (communicator.hpp) for a sequence-parallel solve across GPUs: one process
// per GPU, launched the torchrun / mpirun way, the collectives on device buffers
// (ncclAllGather, ncclAllReduce). Library pararnn::nccl (solver/nccl/), built only with the CUDA
// backend and NCCL found (nccl.h, libnccl); without them make_nccl_communicator raises
// UnsupportedPath. NOT RUN by any test of this repository (there is no machine with two GPUs
// here): it compiles and links; docs/seq_parallel.md says what is untested.
//
// Launch (every variable read by nccl_launch_from_env, refused by name when missing or bad):
//   RANK, WORLD_SIZE         this process's rank and the number of ranks
//   LOCAL_RANK               the GPU of this process on its host (default: RANK)
//   PARARNN_NCCL_ID_FILE     where rank 0 writes the ncclGetUniqueId bytes (written to a
//                            temporary and renamed, so a reader never sees a partial id) and the
//                            other ranks poll for them; use a fresh path per launch
//   PARARNN_NCCL_UNIQUE_ID   instead of the file: the 128 id bytes as 256 hex digits, the same
//                            on every rank (rank 0 need not create it)
//   NCCL_NVLS_ENABLE         NVLink multicast: set to 0 when unset, refused when anything else
//                            (on the shared multi-GPU hosts it can take the GPUs out of service)
// Example (two GPUs of one host):
//   PARARNN_NCCL_ID_FILE=/tmp/job42.ncclid torchrun --nproc-per-node 2 pararnn seqpar case.safetensors --launcher env
#pragma once

#include <memory>
#include <string>

#include "pararnn/solver/communicator.hpp"

namespace pararnn {

struct NcclLaunch {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string id_file;      // PARARNN_NCCL_ID_FILE
  std::string id_hex;       // PARARNN_NCCL_UNIQUE_ID (wins over the file when set)
  double id_timeout_s = 300.0;  // how long ranks other than 0 poll for the id file
};

// The launch of this process from the environment (above); ContractViolation naming the variable.
NcclLaunch nccl_launch_from_env();

// Whether this build has the NCCL communicator (false with the reason otherwise).
bool nccl_available(std::string* why_not = nullptr);

// Joins the communicator of `launch` (cudaSetDevice(local_rank), the unique id exchange,
// ncclCommInitRank); UnsupportedPath without NCCL in the build, Error on a CUDA or NCCL failure.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclLaunch& launch);

}  // namespace pararnn
