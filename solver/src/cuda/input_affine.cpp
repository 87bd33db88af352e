// The input affines on the device (runtime.hpp's input_affine and input_affine_on): W_x x + b by
// cuBLAS, with cuBLASLt's bias epilogue in f32.
#include "cuda/runtime.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace pararnn::detail::cuda {

void input_affine(DType storage, std::int64_t rows, std::int64_t d_in, std::int64_t width,
                  const void* bias_row, const void* x, std::span<const DeviceAffine> blocks,
                  void* wx) {
  input_affine_on(current_stream(), cublas_handle(), storage, rows, d_in, width, bias_row, x, blocks, wx);
}

namespace {

// The largest power of two (at most 256) that divides the address: the alignment cuBLASLt may
// assume of an operand.
std::uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// One cuBLASLt handle and workspace per (thread, device), made at first use and released by
// shutdown_backend (as cublas_handle, for the same reason).
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
};
LtContext& lt_context() {
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  thread_local std::map<int, LtContext> contexts;
  thread_local std::uint64_t made_in = 0;
  if (made_in != resource_generation()) {
    contexts.clear();  // released by a shutdown since
    made_in = resource_generation();
  }
  auto it = contexts.find(device);
  if (it == contexts.end()) {
    LtContext c;
    PARARNN_CUBLAS_CHECK(cublasLtCreate(&c.handle));
    if (const cudaError_t e = cudaMalloc(&c.workspace, LtContext::kWorkspaceBytes); e != cudaSuccess) {
      (void)cublasLtDestroy(c.handle);
      check_cuda(e, "cudaMalloc(the cuBLASLt workspace)");
    }
    keep_until_shutdown([c, device] {
      if (cudaSetDevice(device) != cudaSuccess) return;
      (void)cudaFree(c.workspace);
      (void)cublasLtDestroy(c.handle);
    });
    it = contexts.emplace(device, c).first;
  }
  return it->second;
}

// Owns the cuBLASLt descriptors of one GEMM.
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtGemm() {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// f32, f16 and bf16 storage: each block's W x (x and W in the storage dtype, f32 accumulation:
// tensor cores for f16/bf16, plain f32 arithmetic for f32, no TF32) written in f32 with its
// bias slice (f32) added in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS): wx is written once (no
// bias fill of wx, no read of it). False when cuBLASLt offers no algorithm for a block (the
// caller then takes the fill-and-accumulate path for all of them).
bool input_affine_bias_epilogue(cudaStream_t stream, cudaDataType_t input_type, std::int64_t rows, std::int64_t d_in,
                                std::int64_t width, const float* bias_row, const void* x,
                                std::span<const DeviceAffine> blocks, float* wx) {
  LtContext& lt = lt_context();
  struct Planned {
    std::unique_ptr<LtGemm> gemm;
    cublasLtMatmulHeuristicResult_t heuristic{};
    const DeviceAffine* block = nullptr;
  };
  std::vector<Planned> plans;
  for (const DeviceAffine& block : blocks) {
    if (block.outputs == 0 || block.inputs == 0) continue;
    Planned plan{std::make_unique<LtGemm>(), {}, &block};
    LtGemm& g = *plan.gemm;
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_32F;
    const float* bias = bias_row + block.first_column;
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    PARARNN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    PARARNN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    // Column-major: A = the weight as stored (inputs × outputs, ld inputs), used transposed;
    // B = x (inputs × rows, ld d_in); D = wx's columns of the block (outputs × rows, ld width).
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.a, input_type, static_cast<std::uint64_t>(block.inputs),
                                                    static_cast<std::uint64_t>(block.outputs), block.inputs));
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.b, input_type, static_cast<std::uint64_t>(block.inputs),
                                                    static_cast<std::uint64_t>(rows), d_in));
    PARARNN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g.d, CUDA_R_32F, static_cast<std::uint64_t>(block.outputs),
                                                    static_cast<std::uint64_t>(rows), width));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&g.preference));
    const std::uint64_t ws_bytes = LtContext::kWorkspaceBytes;
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(g.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &ws_bytes, sizeof(ws_bytes)));
    float* out = wx + block.first_column;
    const std::uint32_t align_a = alignment_of(block.weight), align_b = alignment_of(x), align_d = alignment_of(out);
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    PARARNN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        g.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.handle, g.op, g.a, g.b, g.d, g.d, g.preference, 1,
                                                                 &plan.heuristic, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    plans.push_back(std::move(plan));
  }
  const float one = 1.0f, zero = 0.0f;
  for (const Planned& plan : plans) {
    float* out = wx + plan.block->first_column;
    PARARNN_CUBLAS_CHECK(cublasLtMatmul(lt.handle, plan.gemm->op, &one, plan.block->weight, plan.gemm->a, x,
                                        plan.gemm->b, &zero, out, plan.gemm->d, out, plan.gemm->d,
                                        &plan.heuristic.algo, lt.workspace, LtContext::kWorkspaceBytes, stream));
  }
  return true;
}

}  // namespace

void input_affine_on(cudaStream_t stream, cublasHandle_t handle, DType storage, std::int64_t rows,
                     std::int64_t d_in, std::int64_t width, const void* bias_row, const void* x,
                     std::span<const DeviceAffine> blocks, void* wx) {
  if (rows == 0 || width == 0) return;
  // f32/f16/bf16 with blocks covering every column, outside a graph capture (cuBLASLt's first
  // call allocates its workspace): the bias in the GEMM's epilogue (one write of wx).
  std::int64_t covered = 0;
  for (const DeviceAffine& block : blocks) covered += block.inputs > 0 ? block.outputs : 0;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PARARNN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool lt_storage = storage == DType::f32 || storage == DType::f16 || storage == DType::bf16;
  if (lt_storage && covered == width && capture == cudaStreamCaptureStatusNone &&
      input_affine_bias_epilogue(stream,
                                 storage == DType::f32   ? CUDA_R_32F
                                 : storage == DType::f16 ? CUDA_R_16F
                                                         : CUDA_R_16BF,
                                 rows, d_in, width, static_cast<const float*>(bias_row), x, blocks,
                                 static_cast<float*>(wx)))
    return;
  const DType compute = compute_dtype(storage);
  const std::size_t element = dtype_size(compute);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * element;
  // The bias row in every row (copies doubling the filled rows), then W x accumulated onto it.
  auto* out = static_cast<unsigned char*>(wx);
  PARARNN_CUDA_CHECK(cudaMemcpyAsync(out, bias_row, row_bytes, cudaMemcpyDeviceToDevice, stream));
  for (std::int64_t filled = 1; filled < rows; filled *= 2) {
    const std::int64_t n = std::min(filled, rows - filled);
    PARARNN_CUDA_CHECK(cudaMemcpyAsync(out + static_cast<std::size_t>(filled) * row_bytes, out,
                                       static_cast<std::size_t>(n) * row_bytes,
                                       cudaMemcpyDeviceToDevice, stream));
  }
  cudaDataType_t input_type = CUDA_R_32F, output_type = CUDA_R_32F;
  cublasComputeType_t compute_type = CUBLAS_COMPUTE_32F;
  const double one_f64 = 1.0;
  const float one_f32 = 1.0f;
  const void* one = &one_f32;
  switch (storage) {
    case DType::f64:
      input_type = output_type = CUDA_R_64F;
      compute_type = CUBLAS_COMPUTE_64F;
      one = &one_f64;
      break;
    case DType::f32: break;
    case DType::f16: input_type = CUDA_R_16F; break;
    case DType::bf16: input_type = CUDA_R_16BF; break;
    default:
      throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16", dtype_name(storage));
  }
  // Column-major view of block k: wx[:, cols] (outputs × rows, ld width) += Wᵀ-stored weight
  // (inputs × outputs, ld inputs) transposed, times x[:, :inputs] (inputs × rows, ld d_in).
  PARARNN_CUBLAS_CHECK(cublasSetStream(handle, stream));
  for (const DeviceAffine& block : blocks) {
    if (block.outputs == 0 || block.inputs == 0) continue;
    PARARNN_CUBLAS_CHECK(cublasGemmEx_64(
        handle, CUBLAS_OP_T, CUBLAS_OP_N, block.outputs, rows, block.inputs, one, block.weight,
        input_type, block.inputs, x, input_type, d_in, one,
        out + static_cast<std::size_t>(block.first_column) * element, output_type, width,
        compute_type, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace pararnn::detail::cuda
