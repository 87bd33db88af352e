// DLPack: views go out and come back unchanged, foreign DLTensors (strided, with a byte
// offset, without strides) are read without copies, and what pararnn cannot read is refused
// with a ContractViolation naming the caller's argument.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <numeric>
#include <vector>

#include "pararnn/core/tensor.hpp"

namespace pararnn {
namespace {

struct DLTypeCase {
  DType dtype;
  std::uint8_t code;
  std::uint8_t bits;
};

constexpr std::array<DLTypeCase, 6> kDLTypes{{{DType::f64, kDLFloat, 64},
                                               {DType::f32, kDLFloat, 32},
                                               {DType::f16, kDLFloat, 16},
                                               {DType::bf16, kDLBfloat, 16},
                                               {DType::i32, kDLInt, 32},
                                               {DType::i64, kDLInt, 64}}};

Tensor iota(DType dtype, Shape shape) {
  std::vector<double> values(static_cast<std::size_t>(shape_numel(shape)));
  std::iota(values.begin(), values.end(), 0.0);
  return Tensor::from_values(dtype, std::move(shape), values);
}

TEST(DLPack, ToDlpackDescribesTheViewForEveryDtype) {
  for (const DLTypeCase& c : kDLTypes) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)));
    const Tensor t(c.dtype, {2, 5, 3});
    const TensorView view = t.view().slice(1, 1, 5, 2);
    const DLTensor dl = view.to_dlpack();
    EXPECT_EQ(dl.data, view.data());
    EXPECT_EQ(dl.device.device_type, kDLCPU);
    EXPECT_EQ(dl.device.device_id, 0);
    EXPECT_EQ(dl.ndim, 3);
    EXPECT_EQ(dl.dtype.code, c.code);
    EXPECT_EQ(dl.dtype.bits, c.bits);
    EXPECT_EQ(dl.dtype.lanes, 1);
    EXPECT_EQ(Shape(dl.shape, dl.shape + 3), (Shape{2, 2, 3}));
    EXPECT_EQ(Shape(dl.strides, dl.strides + 3), (Shape{15, 6, 1}));
    EXPECT_EQ(dl.byte_offset, 0u);
  }
}

TEST(DLPack, RoundTripPreservesDataDtypeShapeAndStrides) {
  for (const DLTypeCase& c : kDLTypes) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)));
    const Tensor t = iota(c.dtype, {3, 4});
    const TensorView view = t.view().permute({1, 0});
    const TensorView back = TensorView::from_dlpack(view.to_dlpack());
    EXPECT_EQ(back.data(), view.data());
    EXPECT_EQ(back.dtype(), c.dtype);
    EXPECT_EQ(back.device(), Device::cpu);
    EXPECT_EQ(back.shape(), view.shape());
    EXPECT_EQ(back.strides(), view.strides());
  }
}

TEST(DLPack, NullStridesMeanContiguous) {
  std::vector<float> data(24);
  std::iota(data.begin(), data.end(), 0.0f);
  std::array<std::int64_t, 3> shape{2, 3, 4};
  DLTensor dl{};
  dl.data = data.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 3;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape.data();
  dl.strides = nullptr;
  const TensorView view = TensorView::from_dlpack(dl);
  EXPECT_TRUE(view.is_contiguous());
  EXPECT_EQ(view.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(view.load({1, 2, 3}), 23.0);
}

TEST(DLPack, ByteOffsetIsFoldedIntoData) {
  std::vector<double> data(10);
  std::iota(data.begin(), data.end(), 0.0);
  std::array<std::int64_t, 1> shape{4};
  DLTensor dl{};
  dl.data = data.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = {kDLFloat, 64, 1};
  dl.shape = shape.data();
  dl.byte_offset = 3 * sizeof(double);
  const TensorView view = TensorView::from_dlpack(dl);
  EXPECT_EQ(view.data(), static_cast<void*>(data.data() + 3));
  EXPECT_EQ(Tensor::copy_of(view).to_f64_vector(), (std::vector<double>{3, 4, 5, 6}));
}

TEST(DLPack, StridedForeignTensorCopiesLikeElementwise) {
  // A (3, 4) int64 view of every other column of a (3, 8) buffer, transposed, after 2 elements.
  std::vector<std::int64_t> data(2 + 24);
  std::iota(data.begin(), data.end(), -2);
  std::array<std::int64_t, 2> shape{4, 3};
  std::array<std::int64_t, 2> strides{2, 8};
  DLTensor dl{};
  dl.data = data.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLInt, 64, 1};
  dl.shape = shape.data();
  dl.strides = strides.data();
  dl.byte_offset = 2 * sizeof(std::int64_t);
  const TensorView view = TensorView::from_dlpack(dl, "x");
  const Tensor copy = Tensor::copy_of(view);
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(copy.load({i, j}), static_cast<double>(2 * i + 8 * j));
      EXPECT_EQ(copy.load({i, j}), view.load({i, j}));
    }
  }
}

TEST(DLPack, CudaTensorBecomesACudaViewThatHostCopiesRefuse) {
  float fake_device_memory = 0;
  std::array<std::int64_t, 1> shape{1};
  DLTensor dl{};
  dl.data = &fake_device_memory;
  dl.device = {kDLCUDA, 1};
  dl.ndim = 1;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape.data();
  const TensorView view = TensorView::from_dlpack(dl);
  EXPECT_EQ(view.device(), Device::cuda);
  EXPECT_EQ(view.device_id(), 1);
  EXPECT_EQ(view.to_dlpack().device.device_type, kDLCUDA);
  EXPECT_THROW(Tensor::copy_of(view), ContractViolation);
}

DLTensor scalar_like(void* data) {
  static std::array<std::int64_t, 1> shape{1};
  DLTensor dl{};
  dl.data = data;
  dl.device = {kDLCPU, 0};
  dl.ndim = 1;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape.data();
  return dl;
}

void expect_refused(const DLTensor& dl, const std::string& what) {
  SCOPED_TRACE(what);
  try {
    (void)TensorView::from_dlpack(dl, "h0");
    ADD_FAILURE() << what << " was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "h0") << e.what();
  }
}

TEST(DLPack, UnreadableTensorsAreRefusedNamingTheArgument) {
  float value = 0;
  DLTensor lanes = scalar_like(&value);
  lanes.dtype.lanes = 4;
  expect_refused(lanes, "4 lanes");
  DLTensor uint8 = scalar_like(&value);
  uint8.dtype = {kDLUInt, 8, 1};
  expect_refused(uint8, "uint8");
  DLTensor complex = scalar_like(&value);
  complex.dtype = {kDLComplex, 64, 1};
  expect_refused(complex, "complex64");
  DLTensor f8 = scalar_like(&value);
  f8.dtype = {kDLFloat, 8, 1};
  expect_refused(f8, "8-bit float");
  DLTensor opencl = scalar_like(&value);
  opencl.device.device_type = kDLOpenCL;
  expect_refused(opencl, "OpenCL device");
  DLTensor negative = scalar_like(&value);
  std::array<std::int64_t, 1> bad_shape{-1};
  negative.shape = bad_shape.data();
  expect_refused(negative, "negative extent");
  DLTensor null_data = scalar_like(nullptr);
  expect_refused(null_data, "null data");
  DLTensor negative_ndim = scalar_like(&value);
  negative_ndim.ndim = -1;
  expect_refused(negative_ndim, "negative ndim");
}

TEST(DLPack, ManagedTensorKeepsStorageAliveUntilDeleted) {
  DLManagedTensor* managed = nullptr;
  {
    const Tensor t = iota(DType::f32, {2, 3});
    managed = t.to_dlpack_managed();
  }  // the Tensor is gone; the managed tensor still holds a share of the storage
  ASSERT_NE(managed, nullptr);
  ASSERT_NE(managed->deleter, nullptr);
  const DLTensor& dl = managed->dl_tensor;
  EXPECT_EQ(dl.ndim, 2);
  EXPECT_EQ(Shape(dl.shape, dl.shape + 2), (Shape{2, 3}));
  EXPECT_EQ(Shape(dl.strides, dl.strides + 2), (Shape{3, 1}));
  const TensorView view = TensorView::from_dlpack(dl);
  EXPECT_EQ(Tensor::copy_of(view).to_f64_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  managed->deleter(managed);
}

TEST(DLPack, ManagedTensorOfAnUndefinedTensorIsRefused) {
  EXPECT_THROW(Tensor().to_dlpack_managed(), ContractViolation);
}

}  // namespace
}  // namespace pararnn
