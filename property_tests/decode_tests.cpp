// Claims about decode_step (T = 1, inference) on the backend under test: one decode step equals
// the oracle's step from the same carry within the contract's decode band, for every cell the
// backend decodes and every storage dtype; repeated steps are the sequential trajectory; bad
// arguments are refused naming the argument. On cuda also: a CudaDecoder step captured in a CUDA
// graph and replayed (with new input in the same buffers) is bitwise the direct step, and
// in-place decoding works; every block shape of the decode kernel (one per batch class) and the
// step from precomputed gates (CudaDecoder::step_gates) equal the oracle's step. Tolerances come
// from the contract table (Metric::decode).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "backend.hpp"
#include "generators.hpp"
#include "pararnn/contracts/compare.hpp"
#include "pararnn/contracts/tolerance.hpp"
#include "pararnn/core/logging.hpp"
#include "pararnn/reference/oracle.hpp"
#include "pararnn/solver/decode.hpp"

#if PARARNN_TEST_ON_CUDA
#include <cuda_runtime_api.h>

#include "pararnn/kernels/decode.hpp"
#endif

namespace pararnn {
namespace {

using testing::GeneratedProblem;

// A (B, [S,] d_h) carry: N(0, 0.5) draws, sLSTM's normalizer slot made non-negative.
Tensor carry_for(const Cell& cell, std::int64_t batch, std::uint64_t seed) {
  GeneratedProblem g{.cell = std::string(cell.name()), .dtype = cell.dtype(), .batch = batch,
                     .d_h = cell.d_h(), .with_h0 = true, .seed = seed};
  Tensor h0 = *g.make_h0(cell.slots());
  if (cell.slots() == 1) h0 = h0.reshaped({batch, cell.d_h()});
  return h0;
}

// The oracle's step from `state`: a T = 1 case whose h0 is the carry.
Tensor oracle_step(const Cell& cell, const Tensor& state, const Tensor& x) {
  const std::int64_t B = state.size(0);
  Tensor h0 = state.reshaped({B, cell.slots(), cell.d_h()});
  const reference::OracleResult r =
      reference::oracle_sequential(cell.make_case(x.reshaped({B, 1, cell.d_in()}), h0), {.certify = false});
  return r.H.reshaped(state.shape());
}

#if PARARNN_TEST_ON_CUDA
// An owning device copy of a host tensor, viewed with the host tensor's shape.
class DeviceTensor {
 public:
  explicit DeviceTensor(const Tensor& host) : dtype_(host.dtype()), shape_(host.shape()) {
    bytes_ = host.nbytes();
    if (cudaMalloc(&data_, std::max<std::size_t>(bytes_, 1)) != cudaSuccess) throw Error("cudaMalloc");
    upload(host);
  }
  ~DeviceTensor() { (void)cudaFree(data_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  void upload(const Tensor& host) {
    if (cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice) != cudaSuccess) throw Error("upload");
  }
  TensorView view() const { return TensorView(data_, dtype_, shape_, {}, Device::cuda, 0); }
  Tensor download() const {
    Tensor out(dtype_, shape_);
    if (cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess) throw Error("download");
    return out;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  DType dtype_;
  Shape shape_;
};
#endif

// decode_step on the backend under test: host tensors, or device copies on cuda.
Tensor decode_on_backend(const Cell& cell, const Tensor& state, const Tensor& x) {
#if PARARNN_TEST_ON_CUDA
  const DeviceTensor d_state(state), d_x(x);
  DeviceTensor d_out(Tensor(state.dtype(), state.shape()));
  decode_step(cell, d_state.view(), d_x.view(), d_out.view());
  return d_out.download();
#else
  return decode_step(cell, state.view(), x.view());
#endif
}

// The cells (labels) the backend under test decodes: every cell on the host; the per-channel
// cells on cuda.
std::vector<std::string> decode_labels() {
  std::vector<std::string> labels = testing::kPerChannelCellLabels;
  if (!PARARNN_TEST_ON_CUDA)
    for (const std::string& dense : testing::labels_where([](const CellSpec& s) { return s.jacobian == JacobianClass::dense; }))
      labels.push_back(dense);
  return labels;
}

// A cell for a label: "name", "cfc:diag_h", or "name:mix" for the dense mixes.
Cell decode_cell(const std::string& label, DType dtype, std::int64_t d_in, std::int64_t d_h, std::uint64_t seed) {
  CellOptions options = testing::label_options(label);
  if (options.gate_mix == "head" || options.gate_mix == "dense") {
    options.mix = options.gate_mix;
    options.gate_mix = "input";
    if (options.mix == "head") options.n_heads = d_h % 2 == 0 ? 2 : 1;
  }
  if (options.cell == "hopfield") options.mix = "dense";
  options.d_in = std::max<std::int64_t>(d_in, cell_spec(options.cell).min_d_in);
  options.d_h = options.mix == "dense" && options.cell == "slstm" ? std::min<std::int64_t>(d_h, 8) : d_h;
  if (options.mix == "head" && options.cell == "gru") options.max_recurrent_norm = std::nullopt;
  return Cell::initialise(options, dtype, seed);
}

RC_GTEST_PROP(Decode, OneStepEqualsTheOracleStepFromTheSameCarry, ()) {
  QuietWarnings quiet;
  const std::string label = *rc::gen::elementOf(decode_labels());
  const DType dtype = *rc::gen::elementOf(testing::kNewtonDtypes);
  const std::int64_t batch = *rc::gen::inRange(1, 5);
  const std::int64_t d_h = *rc::gen::inRange(1, 17);
  const std::uint64_t seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
  const Cell cell = decode_cell(label, dtype, *rc::gen::inRange(1, 9), d_h, seed);
  const Tensor state = carry_for(cell, batch, seed + 1);
  const Tensor x = generated_case_input(dtype, batch, 1, cell.d_in(), seed + 2).reshaped({batch, cell.d_in()});
  const Tensor next = decode_on_backend(cell, state, x);
  RC_ASSERT(next.shape() == state.shape());
  const Tolerance tol = tolerance_for({.dtype = dtype, .metric = Metric::decode});
  const ComparisonResult c = compare(next.view(), oracle_step(cell, state, x).view(), tol);
  if (!c.ok()) RC_FAIL(fmt::format("{} {}: {}", label, dtype_name(dtype), c.describe()));
}

TEST(Decode, RepeatedStepsAreTheSequentialTrajectory) {
  QuietWarnings quiet;
  for (const std::string& label : decode_labels()) {
    SCOPED_TRACE(label);
    const Cell cell = decode_cell(label, DType::f32, 3, 6, 5);
    const std::int64_t B = 2, T = 12;
    const Tensor x = generated_case_input(DType::f32, B, T, cell.d_in(), 6);
    Tensor state = carry_for(cell, B, 7);
    const Tensor H = sequential_apply(cell, x, {.h0 = state.reshaped({B, cell.slots(), cell.d_h()}).view()});
    const Tolerance tol = tolerance_for({.dtype = DType::f32, .metric = Metric::decode});
    for (std::int64_t t = 0; t < T; ++t) {
      const Tensor x_t = Tensor::copy_of(x.view().slice(1, t, t + 1));
      state = decode_on_backend(cell, state, x_t);
      const Tensor expected = Tensor::copy_of(H.view().slice(1, t, t + 1)).reshaped(state.shape());
      if (!PARARNN_TEST_ON_CUDA) {
        ASSERT_EQ(std::memcmp(state.data(), expected.data(), state.nbytes()), 0) << "t=" << t;
      } else {
        const ComparisonResult c = compare(state.view(), expected.view(), tol);
        ASSERT_TRUE(c.ok()) << "t=" << t << ": " << c.describe();
      }
    }
  }
}

TEST(Decode, ArgumentsAreCheckedAndNamed) {
  const Cell lstm = Cell::initialise({.cell = "lstm", .d_in = 3, .d_h = 4}, DType::f32, 1);
  const Tensor state(DType::f32, {2, 2, 4}), x(DType::f32, {2, 3});
  const auto refused_argument = [&](const TensorView& s, const TensorView& xv, const TensorView& out) {
    try {
      decode_step(lstm, s, xv, out);
    } catch (const ContractViolation& e) {
      return std::string(e.argument());
    }
    return std::string("<accepted>");
  };
  Tensor out(DType::f32, {2, 2, 4});
  EXPECT_EQ(refused_argument(Tensor(DType::f32, {2, 4}).view(), x.view(), out.view()), "state");
  EXPECT_EQ(refused_argument(state.view(), Tensor(DType::f32, {3, 3}).view(), out.view()), "x");
  EXPECT_EQ(refused_argument(state.view(), Tensor(DType::f32, {2, 2, 3}).view(), out.view()), "x");
  EXPECT_EQ(refused_argument(state.view(), Tensor(DType::bf16, {2, 3}).view(), out.view()), "x");
  EXPECT_EQ(refused_argument(state.view(), x.view(), Tensor(DType::f32, {2, 2, 5}).view()), "out");
  const Tensor wide(DType::f32, {2, 2, 8});
  EXPECT_EQ(refused_argument(state.view(), x.view(), wide.view().slice(2, 0, 8, 2)), "out");
  EXPECT_EQ(refused_argument(state.view(), x.view(), out.view()), "<accepted>");
  // decode_gates reads host x of the cell's shape and dtype.
  const auto gates_refused = [&](const TensorView& xv) {
    try {
      (void)decode_gates(lstm, xv);
    } catch (const ContractViolation& e) {
      return std::string(e.argument());
    }
    return std::string("<accepted>");
  };
  EXPECT_EQ(gates_refused(x.view()), "<accepted>");
  EXPECT_EQ(decode_gates(lstm, x.view()).shape(), (Shape{2, lstm.spec().gates * 4}));
  EXPECT_EQ(gates_refused(Tensor(DType::f32, {2, 4}).view()), "x");
  EXPECT_EQ(gates_refused(Tensor(DType::f64, {2, 3}).view()), "x");
  {  // a dense-Jacobian cell's gates are not per-channel columns
    QuietWarnings quiet;
    const Cell hop = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 4}, DType::f32, 1);
    EXPECT_THROW((void)decode_gates(hop, Tensor(DType::f32, {2, 3}).view()), UnsupportedPath);
  }
  // out sharing memory with x, or overlapping state at another address.
  Tensor shared(DType::f32, {20});
  const TensorView over_out(shared.data(), DType::f32, {2, 2, 4});
  EXPECT_EQ(refused_argument(state.view(), TensorView(shared.data(), DType::f32, {2, 3}), over_out), "out");
  const TensorView shifted(static_cast<float*>(shared.data()) + 4, DType::f32, {2, 2, 4});
  EXPECT_EQ(refused_argument(over_out, x.view(), shifted), "out");
  // In place: out may be state itself.
  Tensor carry = carry_for(lstm, 2, 3);
  const Tensor expected = decode_step(lstm, carry.view(), x.view());
  decode_step(lstm, carry.view(), x.view(), carry.view());
  EXPECT_EQ(std::memcmp(carry.data(), expected.data(), carry.nbytes()), 0);
}

#if PARARNN_TEST_ON_CUDA
// A decoder step captured in a CUDA graph on a non-default stream and replayed: bitwise the
// direct step, again after new input is written into the same buffers, in place.
TEST(Decode, CudaDecoderStepReplaysFromACapturedGraph) {
  for (const std::string& label : testing::kPerChannelCellLabels) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(label + " " + std::string(dtype_name(dtype)));
      const Cell cell = decode_cell(label, dtype, 5, 64, 11);
      const std::int64_t B = 3;
      const Tensor state = carry_for(cell, B, 12);
      const Tensor x1 = generated_case_input(dtype, B, 1, cell.d_in(), 13).reshaped({B, cell.d_in()});
      const Tensor x2 = generated_case_input(dtype, B, 1, cell.d_in(), 14).reshaped({B, cell.d_in()});
      const CudaDecoder decoder(cell, B);
      DeviceTensor d_state(state), d_x(x1);
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      cudaGraph_t graph = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      decoder.step(d_state.view(), d_x.view(), d_state.view(), stream);  // in place
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (const Tensor* x : {&x1, &x2}) {
        // Direct step from the current carry, then the graph replay on the same carry.
        const Tensor before = d_state.download();
        DeviceTensor direct_state(before), direct_x(*x);
        DeviceTensor direct_out(Tensor(dtype, before.shape()));
        decoder.step(direct_state.view(), direct_x.view(), direct_out.view());
        decoder.synchronize();
        d_x.upload(*x);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const Tensor replayed = d_state.download(), direct = direct_out.download();
        EXPECT_EQ(std::memcmp(replayed.data(), direct.data(), direct.nbytes()), 0);
        // And the step is the one the oracle takes.
        const ComparisonResult c = compare(replayed.view(), oracle_step(cell, before, *x).view(),
                                           tolerance_for({.dtype = dtype, .metric = Metric::decode}));
        EXPECT_TRUE(c.ok()) << c.describe();
      }
      (void)cudaGraphExecDestroy(exec);
      (void)cudaGraphDestroy(graph);
      (void)cudaStreamDestroy(stream);
    }
  }
}

// The step from precomputed gates is the oracle's step from the same carry and x, in four dtypes;
// in place it writes the same bits.
TEST(Decode, CudaDecoderStepFromGatesEqualsTheOracleStep) {
  QuietWarnings quiet;
  for (const std::string& label : testing::kPerChannelCellLabels) {
    for (DType dtype : testing::kNewtonDtypes) {
      SCOPED_TRACE(label + " " + std::string(dtype_name(dtype)));
      const Cell cell = decode_cell(label, dtype, 5, 40, 21);
      const std::int64_t B = 3;
      const Tensor state = carry_for(cell, B, 22);
      const Tensor x = generated_case_input(dtype, B, 1, cell.d_in(), 23).reshaped({B, cell.d_in()});
      const CudaDecoder decoder(cell, B);
      const DeviceTensor d_state(state), d_gates(decode_gates(cell, x.view()));
      DeviceTensor d_out(Tensor(dtype, state.shape()));
      decoder.step_gates(d_state.view(), d_gates.view(), d_out.view());
      decoder.synchronize();
      const Tensor next = d_out.download();
      const ComparisonResult c = compare(next.view(), oracle_step(cell, state, x).view(),
                                         tolerance_for({.dtype = dtype, .metric = Metric::decode}));
      EXPECT_TRUE(c.ok()) << c.describe();
      DeviceTensor in_place(state);
      decoder.step_gates(in_place.view(), d_gates.view(), in_place.view());
      decoder.synchronize();
      const Tensor again = in_place.download();
      EXPECT_EQ(std::memcmp(again.data(), next.data(), next.nbytes()), 0);
    }
  }
}

// Every block shape of the decode kernel (the batch classes of kernels/decode.hpp, at their
// edges), with more x columns than one shared-memory chunk and a partial channel block, is the
// oracle's step.
TEST(Decode, CudaDecoderEveryBatchClassEqualsTheOracleStep) {
  QuietWarnings quiet;
  for (const std::int64_t B : {kernels::kDecodeClusterBatch, kernels::kDecodeClusterBatch + 1, std::int64_t{5},
                               kernels::kDecodeFewBatch, kernels::kDecodeFewBatch + 1, kernels::kDecodeSmallBatch,
                               kernels::kDecodeSmallBatch + 1, kernels::kDecodeSmallBatch + 19}) {
    for (const std::string& label : testing::kPerChannelCellLabels) {
      for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
        SCOPED_TRACE(label + " " + std::string(dtype_name(dtype)) + " B " + std::to_string(B));
        const Cell cell = decode_cell(label, dtype, 300, 40, 31);
        const Tensor state = carry_for(cell, B, 32);
        const Tensor x = generated_case_input(dtype, B, 1, cell.d_in(), 33).reshaped({B, cell.d_in()});
        const Tensor next = decode_on_backend(cell, state, x);
        const ComparisonResult c = compare(next.view(), oracle_step(cell, state, x).view(),
                                           tolerance_for({.dtype = dtype, .metric = Metric::decode}));
        EXPECT_TRUE(c.ok()) << c.describe();
      }
    }
  }
}

// Every shape class sums a row in the same order: the first rows of a large-class batch are bit
// for bit those of a batch of kDecodeClusterBatch (one row: the cluster), 2 and kDecodeFewBatch
// (the 2-row block shape) and kDecodeSmallBatch (the 4-row block shape) rows.
TEST(Decode, CudaDecoderRowsDoNotDependOnTheBatchSize) {
  QuietWarnings quiet;
  for (const std::string& label : testing::kPerChannelCellLabels) {
    for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
      const std::int64_t large = kernels::kDecodeSmallBatch + 1;
      const Cell cell = decode_cell(label, dtype, 300, 40, 41);
      const Tensor state = carry_for(cell, large, 42);
      const Tensor x = generated_case_input(dtype, large, 1, cell.d_in(), 43).reshaped({large, cell.d_in()});
      const Tensor all = decode_on_backend(cell, state, x);
      for (const std::int64_t small : {kernels::kDecodeClusterBatch, std::int64_t{2}, kernels::kDecodeFewBatch,
                                       kernels::kDecodeSmallBatch}) {
        SCOPED_TRACE(label + " " + std::string(dtype_name(dtype)) + " first " + std::to_string(small) + " rows");
        const Tensor first = decode_on_backend(cell, Tensor::copy_of(state.view().slice(0, 0, small)),
                                               Tensor::copy_of(x.view().slice(0, 0, small)));
        EXPECT_EQ(std::memcmp(first.data(), all.data(), first.nbytes()), 0);
      }
    }
  }
}

TEST(Decode, CudaDecoderStepFromGatesChecksItsArguments) {
  const Cell gru = Cell::initialise({.cell = "gru", .d_in = 3, .d_h = 4}, DType::bf16, 1);
  const CudaDecoder decoder(gru, 2);
  const DeviceTensor state(Tensor(DType::bf16, {2, 4})), gates(Tensor(DType::f32, {2, 12}));
  DeviceTensor out(Tensor(DType::bf16, {2, 4}));
  const auto refused_argument = [&](const TensorView& s, const TensorView& g, const TensorView& o) {
    try {
      decoder.step_gates(s, g, o);
    } catch (const ContractViolation& e) {
      return std::string(e.argument());
    }
    return std::string("<accepted>");
  };
  EXPECT_EQ(refused_argument(state.view(), gates.view(), out.view()), "<accepted>");
  const DeviceTensor narrow(Tensor(DType::bf16, {2, 12})), wide(Tensor(DType::f32, {2, 16}));
  EXPECT_EQ(refused_argument(state.view(), narrow.view(), out.view()), "gates");  // storage, not compute dtype
  EXPECT_EQ(refused_argument(state.view(), wide.view(), out.view()), "gates");
  const Tensor host_gates(DType::f32, {2, 12});
  EXPECT_EQ(refused_argument(state.view(), host_gates.view(), out.view()), "gates");
  const DeviceTensor three(Tensor(DType::bf16, {3, 4})), gates_three(Tensor(DType::f32, {3, 12}));
  EXPECT_EQ(refused_argument(three.view(), gates_three.view(), three.view()), "state");  // the decoder's batch is 2
  // out inside the gates' memory.
  EXPECT_EQ(refused_argument(state.view(), gates.view(), TensorView(gates.view().data(), DType::bf16, {2, 4}, {},
                                                                      Device::cuda, 0)),
            "out");
}

TEST(Decode, DenseCellsAreRefusedOnTheGpu) {
  QuietWarnings quiet;
  const Cell hop = Cell::initialise({.cell = "hopfield", .d_in = 3, .d_h = 4}, DType::f32, 1);
  EXPECT_THROW((void)CudaDecoder(hop, 2), UnsupportedPath);
}
#endif

}  // namespace
}  // namespace pararnn
