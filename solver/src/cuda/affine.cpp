// The input affine on the device (affine.hpp), forward and backward, in one file: W_x x + b by
// cuBLAS with cuBLASLt's bias epilogue in f32 (input_affine, input_affine_on,
// device_input_affine), h0 in the compute type (device_h0), and the backward: ∇W and ∇b by
// cuBLAS (f16/bf16 on bf16 tensor cores from bf16 terms), reduced over rows in double on
// the device and delivered into the caller's gradient targets or the host, ∇x.
#include "cuda/affine.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pararnn/kernels/bf16_split.hpp"
#include "pararnn/kernels/row_sum.hpp"

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
// The generation (resource_generation) in which this thread made the current device's context.
thread_local std::map<int, std::uint64_t> lt_made_in;
LtContext& lt_context() {
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  LtContext& made = per_device_resource<LtContext>(
      [] {
        LtContext c;
        PARARNN_CUBLAS_CHECK(cublasLtCreate(&c.handle));
        if (const cudaError_t e = cudaMalloc(&c.workspace, LtContext::kWorkspaceBytes); e != cudaSuccess) {
          (void)cublasLtDestroy(c.handle);
          check_cuda(e, "cudaMalloc(the cuBLASLt workspace)");
        }
        return c;
      },
      [](const LtContext& c) {
        (void)cudaFree(c.workspace);
        (void)cublasLtDestroy(c.handle);
      });
  lt_made_in[device] = resource_generation();
  return made;
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
  // Under capture only a context made before (a warm-up call, as CUDA graphs need anyway):
  // its workspace cannot be allocated while the stream is captured.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  PARARNN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  int device = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&device));
  const auto made = lt_made_in.find(device);
  const bool lt_ready = made != lt_made_in.end() && made->second == resource_generation();
  const bool lt_storage = storage == DType::f32 || storage == DType::f16 || storage == DType::bf16;
  if (lt_storage && covered == width && (capture == cudaStreamCaptureStatusNone || lt_ready) &&
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

// W_x x + b on the device, [b][t][gate_width(cell)] in the compute type: the bias row, then one
// GEMM per affine block onto its columns (first_gate times the block width, as cpu/input_affine.hpp's
// input_affine places them on the CPU).
DeviceBuffer device_input_affine(const Cell& cell, const TensorView& x, const Layout& L) {
  const DType compute = compute_dtype(cell.dtype());
  const std::int64_t width = gate_width(cell), rows = L.batch * L.time;
  DeviceBuffer x_buffer;
  const void* x_device = contiguous_on_device(x, x_buffer, "x");
  std::vector<double> bias_row(static_cast<std::size_t>(width), 0.0);
  std::vector<DeviceBuffer> weights;
  std::vector<DeviceAffine> blocks;
  for (const AffineBlock& block : cell.spec().affine) {
    const std::int64_t outputs = cell.affine_rows(block);
    const std::int64_t first = block.first_gate * (outputs / block.gates);
    const Tensor& weight = cell.parameter(std::string(block.weight));
    weights.push_back(upload_new(weight.data(), weight.nbytes(), "an input weight"));
    blocks.push_back({.weight = weights.back().get(), .first_column = first, .outputs = outputs,
                      .inputs = cell.affine_inputs(block)});
    const std::vector<double> b = cell.parameter(std::string(block.bias)).to_f64_vector();
    std::copy(b.begin(), b.end(), bias_row.begin() + first);
  }
  const Tensor bias = Tensor::from_values(compute, {width}, bias_row);
  const DeviceBuffer bias_device = upload_new(bias.data(), bias.nbytes(), "the input biases");
  DeviceBuffer wx(checked_bytes(rows * width, dtype_size(compute), "W_x x"), "W_x x");
  input_affine(cell.dtype(), rows, L.d_in, width, bias_device.get(), x_device, blocks, wx.get());
  // x, the weights and the bias row are freed at return while the GEMM may still read them: the
  // frees are stream-ordered and the host bias row was staged by its copy, so no wait is needed.
  return wx;
}

// h0 on the device in the compute type (empty without h0): a copy of its own (callers keep it
// beyond the view's life), converted on the device.
DeviceBuffer device_h0(const ApplyOptions& options, DType compute) {
  if (!options.h0) return {};
  DeviceBuffer converted;
  const void* h0 = on_device_as(*options.h0, compute, converted, "h0");
  if (converted.get() == h0) return converted;
  DeviceBuffer copy(checked_bytes(options.h0->numel(), dtype_size(compute), "h0"), "h0");
  if (copy.bytes() > 0) PARARNN_CUDA_CHECK(cudaMemcpyAsync(copy.get(), h0, copy.bytes(), cudaMemcpyDeviceToDevice, current_stream()));
  return copy;
}

template <class T>
DeviceBuffer sum_rows_device(const T* rows, std::int64_t count, std::int64_t n, const char* what) {
  DeviceBuffer sum(checked_bytes(n, sizeof(double), what), what);
  PARARNN_CUDA_CHECK(kernels::launch_row_sum<T>({.rows = rows, .out = sum.as<double>(), .count = count, .n = n}, current_stream()));
  return sum;
}

template <class T>
std::vector<double> sum_rows_on_device(const T* rows, std::int64_t count, std::int64_t n, const char* what) {
  return download_vector<double>(sum_rows_device(rows, count, n, what), n);
}

template DeviceBuffer sum_rows_device<float>(const float*, std::int64_t, std::int64_t, const char*);
template DeviceBuffer sum_rows_device<double>(const double*, std::int64_t, std::int64_t, const char*);
template std::vector<double> sum_rows_on_device<float>(const float*, std::int64_t, std::int64_t, const char*);
template std::vector<double> sum_rows_on_device<double>(const double*, std::int64_t, std::int64_t, const char*);

namespace {

// The caller's gradient target for `name` when it lives on the current device (else null: the
// gradient goes to the host and the caller of the backend writes a host target).
const TensorView* device_target(const ApplyOptions& options, const std::string& name) {
  const auto it = options.parameter_gradients.find(name);
  if (it == options.parameter_gradients.end() || it->second.device() != Device::cuda) return nullptr;
  int current = 0;
  PARARNN_CUDA_CHECK(cudaGetDevice(&current));
  if (it->second.device_id() != current)
    throw ContractViolation(fmt::format("parameter_gradients['{}']", name),
                            fmt::format("must be on the solve's device {}", current),
                            fmt::format("device {}", it->second.device_id()));
  return &it->second;
}

}  // namespace

void deliver_gradient(const Cell& cell, const ApplyOptions& options, const std::string& name, const Shape& shape,
                      const double* sums, NewtonGradients& out) {
  std::int64_t n = 1;
  for (const std::int64_t extent : shape) n *= extent;
  if (const TensorView* target = device_target(options, name)) {
    const kernels::GradientStoreArgs a{.src = sums, .dst = target->data(),
                                       .dst_type = store_type(cell.dtype()), .n = n};
    PARARNN_CUDA_CHECK(kernels::launch_gradient_store(a, current_stream()));
    out.written.insert(name);
    return;
  }
  std::vector<double> host(static_cast<std::size_t>(n));
  if (n > 0) copy_to_host(host.data(), sums, host.size() * sizeof(double));
  out.parameters.emplace(name, gradient_tensor(cell, shape, std::move(host)));
}

void deliver_recurrent_gradients(const Cell& cell, const ApplyOptions& options, const DeviceBuffer& sums,
                                 NewtonGradients& out) {
  const std::int64_t D = cell.d_h();
  const auto cap = cell.max_recurrent_norm();
  const auto& entries = cell.spec().recurrent;
  const std::size_t element = dtype_size(cell.dtype());
  bool any_on_host = false;
  std::map<std::string, Tensor> raw;  // the host path's clamp mask source where a view was read
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::string name(entries[k].tensor);
    if (device_target(options, name)) continue;
    any_on_host = true;
    if (cap && options.parameters.count(name) && !raw.count(name))
      raw.emplace(name, host_copy(parameter_view(cell, options, name), "a recurrent parameter"));
  }
  if (any_on_host) {
    std::map<std::string, Tensor> host =
        recurrent_gradients(cell, download_vector<double>(sums, static_cast<std::int64_t>(entries.size()) * D), raw);
    for (auto& [name, tensor] : host)
      if (!device_target(options, name)) out.parameters.emplace(name, std::move(tensor));
  }
  std::map<std::string, DeviceBuffer> raw_uploads;  // the Cell's values for a mask without a view
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const std::string name(entries[k].tensor);
    const TensorView* target = device_target(options, name);
    if (!target) continue;
    if (!out.written.count(name)) {  // positions no entry fills hold +0, as on the host
      if (target->numel() > 0)
        PARARNN_CUDA_CHECK(cudaMemsetAsync(target->data(), 0, static_cast<std::size_t>(target->numel()) * element,
                                           current_stream()));
      out.written.insert(name);
    }
    const std::int64_t first = entries[k].row < 0 ? 0 : entries[k].row * D;
    const void* raw_values = nullptr;
    if (cap) {
      const TensorView view = parameter_view(cell, options, name);
      if (view.device() == Device::cuda) {
        raw_values = view.data();
      } else {
        auto [it, fresh] = raw_uploads.try_emplace(name);
        if (fresh) it->second = upload_new(cell.parameter(name).data(), cell.parameter(name).nbytes(), "a recurrent parameter");
        raw_values = it->second.get();
      }
      raw_values = static_cast<const std::byte*>(raw_values) + static_cast<std::size_t>(first) * element;
    }
    const kernels::GradientStoreArgs a{
        .src = sums.as<double>() + static_cast<std::int64_t>(k) * D,
        .dst = static_cast<std::byte*>(target->data()) + static_cast<std::size_t>(first) * element,
        .dst_type = store_type(cell.dtype()), .n = D, .raw = raw_values, .raw_type = store_type(cell.dtype()),
        .cap = cap ? *cap : 0.0};
    PARARNN_CUDA_CHECK(kernels::launch_gradient_store(a, current_stream()));
  }
}

namespace {

// One strided-batched GEMM on bf16 tensor cores with f32 accumulation and output (column-major):
// C_i = op_a(A_i) op_b(B_i) + β C_i for i < batch.
void gemm_bf16(cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n, std::int64_t k, const void* A,
               std::int64_t lda, std::int64_t stride_a, const void* B, std::int64_t ldb, std::int64_t stride_b,
               float beta, float* C, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const float one = 1.0f;
  PARARNN_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
      cublas_handle(), op_a, op_b, m, n, k, &one, A, CUDA_R_16BF, lda, stride_a, B, CUDA_R_16BF, ldb,
      stride_b, &beta, C, CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// `count` f32 or f16 device values as `terms` bf16 planes of `plane` elements (kernels/bf16_split.hpp).
void split_to_bf16(const void* src, DType src_dtype, std::int64_t count, int terms, std::int64_t plane, void* dst) {
  const kernels::Bf16SplitArgs a{.src = src,
                                 .src_type = src_dtype == DType::f16 ? kernels::Bf16SplitSource::f16
                                                                     : kernels::Bf16SplitSource::f32,
                                 .dst = dst, .n = count, .terms = terms, .plane = plane};
  PARARNN_CUDA_CHECK(kernels::launch_bf16_split(a, current_stream()));
}

// The bf16 terms of d_wx held at once: batch rows are taken in groups whose terms fit this.
constexpr std::size_t kSplitTermBytes = std::size_t{1} << 30;

// d_wx's bf16 terms in the f16/bf16 backward: two carry 16 of its significand's bits (relative
// error ≤ 2^-16 per element, 2^-8 with one: an RWKV-7 bf16 ∇W_x left τ at TF32's 2^-11), a third
// would make the products exact at one more GEMM pair (∇W and ∇x) per block.
constexpr int kDwxTerms = 2;

// f16/bf16 cells: ∇W and ∇x on bf16 tensor cores from bf16 terms (runtime.hpp). Per group of
// batch rows: d_wx's rows split into kDwxTerms terms (and f16 x's into two, exact), then per block
// and term pair (i, j) with i + j ≤ 2 (x or W term i, d_wx term j) one GEMM of the group's rows
// into its own ∇W partial, and one into ∇x (accumulated). The partials [group][pair] are summed in
// double in that order.
void half_input_affine_backward(const Cell& cell, const Layout& L, const TensorView& x, const float* d_wx,
                                float* dx, NewtonGradients& out, const ApplyOptions& options, const DwxGiven& given) {
  const DType storage = cell.dtype();
  const std::int64_t B = L.batch, T = L.time, width = gate_width(cell), d_in = L.d_in;
  if (!d_wx && (!given.bf16_terms || !given.bias_sums))
    throw Error("input_affine_backward_into: without d W_x x's values, both its bf16 terms and ∇b's sums are needed");
  if (given.bf16_terms && given.plane < B * T * width)
    throw Error(fmt::format("input_affine_backward_into: d W_x x's bf16 planes hold {} elements, {} are needed",
                            given.plane, B * T * width));
  const int source_terms = storage == DType::f16 ? 2 : 1;  // of x and W: f16 needs two bf16
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < source_terms; ++i)
    for (int j = 0; j < kDwxTerms && i + j <= 2; ++j) pairs.emplace_back(i, j);
  const auto n_pairs = static_cast<std::int64_t>(pairs.size());
  const std::int64_t row_term_bytes = std::max<std::int64_t>(1, kDwxTerms * T * width * 2);
  const std::int64_t group = std::clamp<std::int64_t>(static_cast<std::int64_t>(kSplitTermBytes) / row_term_bytes, 1,
                                                      std::max<std::int64_t>(B, 1));
  const std::int64_t groups = (B + group - 1) / group;

  DeviceBuffer x_holder;
  const void* xs = on_device_as(x, storage, x_holder, "x");
  const std::vector<AffineBlock>& blocks = cell.spec().affine;
  const bool first_writes_all = !blocks.empty() && cell.affine_inputs(blocks.front()) == d_in;
  if (!first_writes_all && B * T * d_in > 0)
    PARARNN_CUDA_CHECK(cudaMemsetAsync(dx, 0, checked_bytes(B * T * d_in, sizeof(float), "∇x"), current_stream()));
  struct BlockTerms {
    std::int64_t inputs, rows, column;
    DeviceBuffer W;   // the weight's bf16 terms [source_terms][rows][inputs] (unless read in place)
    const void* W_terms = nullptr;  // W's, or a bf16 weight's own bytes (the Cell's upload or the caller's view)
    DeviceBuffer dW;  // ∇W partials [groups][pairs][rows][inputs], f32
  };
  std::vector<BlockTerms> terms;
  for (const AffineBlock& block : blocks) {
    BlockTerms b{.inputs = cell.affine_inputs(block), .rows = cell.affine_rows(block), .column = 0, .W = {},
                 .W_terms = nullptr, .dW = {}};
    b.column = block.first_gate * (b.rows / block.gates);
    const TensorView w = parameter_view(cell, options, std::string(block.weight));
    const std::int64_t count = b.rows * b.inputs;
    if (storage == DType::bf16) {
      b.W_terms = contiguous_on_device(w, b.W, "an input weight");
    } else {
      DeviceBuffer w16_holder;
      const void* w16 = contiguous_on_device(w, w16_holder, "an input weight");
      b.W = DeviceBuffer(checked_bytes(2 * count, 2, "an input weight's bf16 terms"), "an input weight's bf16 terms");
      split_to_bf16(w16, DType::f16, count, 2, count, b.W.get());
      b.W_terms = b.W.get();
    }
    b.dW = DeviceBuffer(checked_bytes(groups * n_pairs * count, sizeof(float), "∇W partials"), "∇W partials");
    terms.push_back(std::move(b));
  }
  const std::int64_t group_rows = group * T;
  // d_wx's terms: the VJP's, read in place (term j of the group at j · plane + its first row), or
  // split here group by group into d_terms (term j at j · group_rows · width).
  DeviceBuffer d_terms;
  if (!given.bf16_terms)
    d_terms = DeviceBuffer(checked_bytes(kDwxTerms * group_rows * width, 2, "d W_x x's bf16 terms"), "d W_x x's bf16 terms");
  DeviceBuffer x_terms;
  if (source_terms == 2) x_terms = DeviceBuffer(checked_bytes(2 * group_rows * d_in, 2, "x's bf16 terms"), "x's bf16 terms");
  const auto* x_bytes = static_cast<const unsigned char*>(xs);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t b0 = g * group, rows_g = std::min(group, B - b0) * T;
    if (rows_g == 0) continue;
    const std::uint16_t* terms_g = nullptr;
    std::int64_t term_plane = 0;
    if (given.bf16_terms) {
      terms_g = static_cast<const std::uint16_t*>(given.bf16_terms) + b0 * T * width;
      term_plane = given.plane;
    } else {
      split_to_bf16(d_wx + b0 * T * width, DType::f32, rows_g * width, kDwxTerms, group_rows * width, d_terms.get());
      terms_g = d_terms.as<std::uint16_t>();
      term_plane = group_rows * width;
    }
    const void* x_base = x_bytes + static_cast<std::size_t>(b0 * T * d_in) * 2;
    std::int64_t x_plane = 0;
    if (source_terms == 2) {
      split_to_bf16(x_base, DType::f16, rows_g * d_in, 2, group_rows * d_in, x_terms.get());
      x_base = x_terms.get();
      x_plane = group_rows * d_in;
    }
    float* dx_g = dx + b0 * T * d_in;
    for (BlockTerms& b : terms) {
      const std::int64_t w_plane = b.rows * b.inputs;
      for (std::int64_t p = 0; p < n_pairs; ++p) {
        const auto [i, j] = pairs[static_cast<std::size_t>(p)];
        const auto* d_term = terms_g + j * term_plane + b.column;
        // ∇W partial (inputs × rows, column-major) = x_termᵢ (inputs × rows_g, ld d_in) d_termⱼᵀ.
        gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, b.inputs, b.rows, rows_g,
                  static_cast<const std::uint16_t*>(x_base) + i * x_plane, d_in, 0, d_term, width, 0, 0.0f,
                  b.dW.as<float>() + (g * n_pairs + p) * w_plane, b.inputs, 0, 1);
        // ∇x (d_in × rows_g, column-major) += W_termᵢ (inputs × rows, ld inputs) d_termⱼ.
        const bool overwrite = first_writes_all && &b == &terms.front() && p == 0;
        if (b.inputs > 0)
          gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, b.inputs, rows_g, b.rows, static_cast<const std::uint16_t*>(b.W_terms) + i * w_plane, b.inputs, 0, d_term,
                    width, 0, overwrite ? 0.0f : 1.0f, dx_g, d_in, 0, 1);
      }
    }
  }
  DeviceBuffer ones;
  if (!given.bias_sums) ones = broadcast_on_device(1.0, DType::f32, T, "a ones vector");
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    const AffineBlock& block = blocks[k];
    const BlockTerms& b = terms[k];
    deliver_gradient(cell, options, std::string(block.weight), {b.rows, b.inputs},
                     sum_rows_device(b.dW.as<float>(), b.rows > 0 ? groups * n_pairs : 0, b.rows * b.inputs, "∇W"),
                     out);
    if (given.bias_sums) {
      deliver_gradient(cell, options, std::string(block.bias), {b.rows}, given.bias_sums + b.column, out);
      continue;
    }
    DeviceBuffer db(checked_bytes(B * b.rows, sizeof(float), "∇b per row"), "∇b per row");
    gemm_batched<float>(CUBLAS_OP_N, CUBLAS_OP_T, 1, b.rows, T, ones.as<float>(), 1, 0, d_wx + b.column, width,
                        T * width, 0.0f, db.as<float>(), 1, b.rows, B);
    deliver_gradient(cell, options, std::string(block.bias), {b.rows}, sum_rows_device(db.as<float>(), B, b.rows, "∇b"),
                     out);
  }
}

}  // namespace

int half_backward_dwx_terms() { return kDwxTerms; }

template <class ComputeT>
void input_affine_backward_into(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                ComputeT* dx, NewtonGradients& out, const ApplyOptions& options, const DwxGiven& given) {
  const DType compute = compute_dtype(cell.dtype());
  if constexpr (std::is_same_v<ComputeT, float>) {
    if (cell.dtype() == DType::f16 || cell.dtype() == DType::bf16) {
      half_input_affine_backward(cell, L, x, d_wx, dx, out, options, given);
      return;
    }
  }
  if (given.bf16_terms)
    throw Error("input_affine_backward_into: d W_x x's bf16 terms are read for f16 and bf16 cells only");
  DeviceBuffer x_holder;
  const auto* xc = static_cast<const ComputeT*>(on_device_as(x, compute, x_holder, "x (compute type)"));
  const std::int64_t B = L.batch, T = L.time, width = gate_width(cell), rows_bt = B * T;
  const std::vector<AffineBlock>& blocks = cell.spec().affine;
  // ∇x accumulates over the blocks; the first one overwrites it where it reads every column.
  const bool first_writes_all = !blocks.empty() && cell.affine_inputs(blocks.front()) == L.d_in;
  if (!first_writes_all && rows_bt * L.d_in > 0)
    PARARNN_CUDA_CHECK(cudaMemsetAsync(dx, 0, checked_bytes(rows_bt * L.d_in, sizeof(ComputeT), "∇x"), current_stream()));
  DeviceBuffer ones;
  if (!given.bias_sums) ones = broadcast_on_device(1.0, compute, T, "a ones vector");
  for (const AffineBlock& block : blocks) {
    const std::int64_t inputs = cell.affine_inputs(block), rows = cell.affine_rows(block);
    const ComputeT beta = first_writes_all && &block == &blocks.front() ? ComputeT(0) : ComputeT(1);
    const ComputeT* dwx_block = d_wx + block.first_gate * (rows / block.gates);
    DeviceBuffer W;
    const void* W_compute =
        on_device_as(parameter_view(cell, options, std::string(block.weight)), compute, W, "an input weight (compute type)");
    DeviceBuffer dW(checked_bytes(B * rows * inputs, sizeof(ComputeT), "∇W per row"), "∇W per row");
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_T, inputs, rows, T, xc, L.d_in, T * L.d_in, dwx_block, width,
                           T * width, ComputeT(0), dW.as<ComputeT>(), inputs, rows * inputs, B);
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_N, inputs, rows_bt, rows, static_cast<const ComputeT*>(W_compute), inputs, 0,
                           dwx_block, width, 0, beta, dx, L.d_in, 0, 1);
    deliver_gradient(cell, options, std::string(block.weight), {rows, inputs},
                     sum_rows_device(dW.as<ComputeT>(), B, rows * inputs, "∇W"), out);
    if (given.bias_sums) {
      deliver_gradient(cell, options, std::string(block.bias), {rows},
                       given.bias_sums + block.first_gate * (rows / block.gates), out);
      continue;
    }
    DeviceBuffer db(checked_bytes(B * rows, sizeof(ComputeT), "∇b per row"), "∇b per row");
    gemm_batched<ComputeT>(CUBLAS_OP_N, CUBLAS_OP_T, 1, rows, T, ones.as<ComputeT>(), 1, 0, dwx_block, width,
                           T * width, ComputeT(0), db.as<ComputeT>(), 1, rows, B);
    deliver_gradient(cell, options, std::string(block.bias), {rows}, sum_rows_device(db.as<ComputeT>(), B, rows, "∇b"),
                     out);
  }
}

template <class ComputeT>
DeviceBuffer input_affine_backward(const Cell& cell, const Layout& L, const TensorView& x, const ComputeT* d_wx,
                                   NewtonGradients& out) {
  DeviceBuffer dx(checked_bytes(L.batch * L.time * L.d_in, sizeof(ComputeT), "∇x"), "∇x");
  input_affine_backward_into<ComputeT>(cell, L, x, d_wx, dx.as<ComputeT>(), out, ApplyOptions{});
  return dx;
}

template void input_affine_backward_into<float>(const Cell&, const Layout&, const TensorView&, const float*, float*,
                                                NewtonGradients&, const ApplyOptions&, const DwxGiven&);
template void input_affine_backward_into<double>(const Cell&, const Layout&, const TensorView&, const double*,
                                                 double*, NewtonGradients&, const ApplyOptions&, const DwxGiven&);
template DeviceBuffer input_affine_backward<float>(const Cell&, const Layout&, const TensorView&, const float*,
                                                   NewtonGradients&);
template DeviceBuffer input_affine_backward<double>(const Cell&, const Layout&, const TensorView&, const double*,
                                                    NewtonGradients&);

}  // namespace pararnn::detail::cuda
