// Tensor and TensorView: dtype names, views (slice, permute, select, zero strides), strided
// copies against an element-by-element twin, and rounding on store and conversion against a
// nearest-neighbour search that is written independently of the production rounding.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "pararnn/core/random.hpp"
#include "pararnn/core/tensor.hpp"

namespace pararnn {
namespace {

constexpr std::array<DType, 6> kAllDTypes{DType::f64, DType::f32, DType::f16,
                                          DType::bf16, DType::i32, DType::i64};

// A tensor whose element i holds i (small integers are exact in every dtype, bf16 up to 256).
Tensor iota(DType dtype, Shape shape) {
  Tensor t(dtype, std::move(shape));
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  std::iota(values.begin(), values.end(), 0.0);
  if (dtype == DType::bf16) {
    for (double& v : values) v = std::fmod(v, 256.0);
  }
  return Tensor::from_values(dtype, t.shape(), values);
}

// Visits every multi-index of `shape` in row-major order.
template <class F>
void for_each_index(const Shape& shape, F&& f) {
  if (shape_numel(shape) == 0) return;
  Shape index(shape.size(), 0);
  for (;;) {
    f(std::span<const std::int64_t>(index));
    std::size_t axis = shape.size();
    while (axis > 0) {
      --axis;
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
      if (axis == 0) return;
    }
    if (shape.empty()) return;
  }
}

// The slow twin of Tensor::copy_of: element-by-element through load/store.
Tensor copy_elementwise(const TensorView& view) {
  Tensor out(view.dtype(), view.shape());
  std::vector<double> values;
  for_each_index(view.shape(), [&](std::span<const std::int64_t> index) {
    values.push_back(view.load(index));
  });
  return Tensor::from_values(view.dtype(), view.shape(), values);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(ContractViolation, MessageNamesArgumentRuleAndValue) {
  const ContractViolation error("cu_seqlens", "must start at 0", "3");
  EXPECT_STREQ(error.what(), "cu_seqlens: must start at 0 (got 3)");
  EXPECT_EQ(error.argument(), "cu_seqlens");
  EXPECT_EQ(error.rule(), "must start at 0");
  EXPECT_EQ(error.value(), "3");
}

TEST(DType, NamesAndSizesAreConsistent) {
  const std::array<std::size_t, 6> sizes{8, 4, 2, 2, 4, 8};
  const std::array<std::string_view, 6> names{"f64", "f32", "f16", "bf16", "i32", "i64"};
  const std::array<std::string_view, 6> st_names{"F64", "F32", "F16", "BF16", "I32", "I64"};
  for (std::size_t i = 0; i < kAllDTypes.size(); ++i) {
    EXPECT_EQ(dtype_size(kAllDTypes[i]), sizes[i]);
    EXPECT_EQ(dtype_name(kAllDTypes[i]), names[i]);
    EXPECT_EQ(dtype_safetensors_name(kAllDTypes[i]), st_names[i]);
    EXPECT_EQ(parse_dtype(names[i]), kAllDTypes[i]);
    EXPECT_EQ(parse_dtype(st_names[i]), kAllDTypes[i]);
  }
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i32));
}

TEST(DType, ParseAcceptsLongNamesCaseInsensitively) {
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("Float64"), DType::f64);
  EXPECT_EQ(parse_dtype("FLOAT16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("Bf16"), DType::bf16);
}

TEST(DType, ParseRefusesUnknownNamesNamingTheArgument) {
  try {
    parse_dtype("f8", "--dtype");
    FAIL() << "f8 was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "--dtype");
    EXPECT_EQ(e.value(), "f8");
    EXPECT_STREQ(e.what(), "--dtype: must be one of f64, f32, f16, bf16, i32, i64 (got f8)");
  }
}

TEST(DType, DispatchRefusesIntegerDtypes) {
  EXPECT_THROW(dispatch_float_dtype(DType::i32, []<class T>() { return 0; }), ContractViolation);
  EXPECT_EQ(dispatch_float_dtype(DType::bf16, []<class T>() { return sizeof(T); }), 2u);
}

TEST(Tensor, NewTensorIsContiguousAndZeroFilled) {
  for (DType dtype : kAllDTypes) {
    const Tensor t(dtype, {2, 3, 4});
    EXPECT_TRUE(t.defined());
    EXPECT_TRUE(t.view().is_contiguous());
    EXPECT_EQ(t.view().strides(), (Shape{12, 4, 1}));
    EXPECT_EQ(t.nbytes(), 24 * dtype_size(dtype));
    for (double v : t.to_f64_vector()) EXPECT_EQ(v, 0.0);
  }
  EXPECT_FALSE(Tensor().defined());
  EXPECT_TRUE(Tensor(DType::f32, {0, 5}).defined());
}

TEST(Tensor, ShapeHelpersDescribeRowMajorLayout) {
  EXPECT_EQ(shape_string(Shape{2, 64, 8}), "(2, 64, 8)");
  EXPECT_EQ(shape_string(Shape{}), "()");
  EXPECT_EQ(shape_numel(Shape{2, 3, 4}), 24);
  EXPECT_EQ(shape_numel(Shape{}), 1);
  EXPECT_EQ(contiguous_strides(Shape{2, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_THROW(Tensor(DType::f32, {2, -1}), ContractViolation);
}

TEST(TensorView, SizeCountsNegativeAxesFromTheEnd) {
  const Tensor t(DType::f32, {2, 3, 4});
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_THROW(t.size(3), ContractViolation);
  EXPECT_THROW(t.size(-4), ContractViolation);
}

TEST(TensorView, SliceWithStepSelectsEveryOtherElement) {
  const Tensor t = iota(DType::f32, {2, 6, 3});
  const TensorView v = t.view().slice(1, 1, 6, 2);  // time steps 1, 3, 5
  EXPECT_EQ(v.shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(v.strides(), (Shape{18, 6, 1}));
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.load({1, 2, 1}), 18 + 5 * 3 + 1);
  EXPECT_EQ(t.view().slice(1, -2, 6).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(t.view().slice(1, 3, 3).numel(), 0);
  EXPECT_THROW(t.view().slice(1, 0, 7), ContractViolation);
  EXPECT_THROW(t.view().slice(1, 0, 6, 0), ContractViolation);
}

TEST(TensorView, PermuteReordersShapeAndStrides) {
  const Tensor t = iota(DType::f64, {2, 3, 4});
  const TensorView v = t.view().permute({2, 0, 1});
  EXPECT_EQ(v.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(v.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(v.load({3, 1, 2}), t.load({1, 2, 3}));
  EXPECT_THROW(t.view().permute({0, 0, 1}), ContractViolation);
  EXPECT_THROW(t.view().permute({0, 1}), ContractViolation);
}

TEST(TensorView, SelectDropsTheAxis) {
  const Tensor t = iota(DType::i64, {2, 3, 4});
  const TensorView v = t.view().select(1, 2);
  EXPECT_EQ(v.shape(), (Shape{2, 4}));
  EXPECT_EQ(v.load({1, 3}), t.load({1, 2, 3}));
  EXPECT_EQ(t.view().select(0, -1).load({0, 0}), 12);
  EXPECT_THROW(t.view().select(1, 3), ContractViolation);
}

TEST(TensorView, LoadAndStoreRefuseIndicesOutsideTheShape) {
  const Tensor t(DType::f32, {2, 3});
  EXPECT_THROW(t.load({2, 0}), ContractViolation);
  EXPECT_THROW(t.load({0}), ContractViolation);
  EXPECT_THROW(t.store({0, -1}, 1.0), ContractViolation);
  EXPECT_THROW(TensorView().load(std::span<const std::int64_t>()), ContractViolation);
}

TEST(TensorView, ZeroStrideViewRepeatsOneElement) {
  const Tensor t = Tensor::from_values(DType::f32, {3}, std::vector<double>{1, 2, 3});
  const TensorView broadcast(t.data(), DType::f32, {4, 3}, {0, 1});
  EXPECT_FALSE(broadcast.is_contiguous());
  const Tensor copy = Tensor::copy_of(broadcast);
  EXPECT_EQ(copy.shape(), (Shape{4, 3}));
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) EXPECT_EQ(copy.load({i, j}), j + 1);
  }
}

TEST(TensorView, SizeOneAxesDoNotBreakContiguity) {
  const Tensor t(DType::f32, {1, 5});
  const TensorView v(t.data(), DType::f32, {1, 5}, {999, 1});
  EXPECT_TRUE(v.is_contiguous());
}

TEST(TensorCopy, StridedCopyEqualsElementwise) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor t = iota(dtype, {3, 5, 4, 2});
    const std::vector<TensorView> views{
        t.view(),
        t.view().slice(1, 0, 5, 2),
        t.view().slice(2, 1, 4, 2).slice(0, 1, 3),
        t.view().permute({3, 1, 0, 2}),
        t.view().permute({0, 2, 1, 3}).slice(3, 1, 2),
        t.view().select(2, 3),
        t.view().select(0, 1).permute({2, 0, 1}),
        t.view().slice(1, 4, 4),
        t.view().select(0, 2).select(0, 4).select(0, 3).select(0, 1),  // 0-d
        TensorView(t.data(), dtype, {2, 3, 4}, {0, 8, 2}),
    };
    for (const TensorView& view : views) {
      SCOPED_TRACE(shape_string(view.shape()) + " strides " + shape_string(view.strides()));
      const Tensor fast = Tensor::copy_of(view);
      EXPECT_TRUE(fast.view().is_contiguous());
      EXPECT_TRUE(same_bytes(fast, copy_elementwise(view)));
    }
  }
}

TEST(TensorCopy, TransposedCopyEqualsElementwise) {
  // Sizes that are not multiples of the 32 x 32 tiles of the transposed path.
  for (DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Tensor t = iota(dtype, {3, 37, 45});
    const std::vector<TensorView> views{
        t.view().permute({0, 2, 1}),
        t.view().permute({2, 1, 0}),
        t.view().permute({1, 2, 0}).slice(1, 3, 44, 3),
        t.view().permute({2, 0, 1}).select(1, 2),
        TensorView(t.data(), dtype, {33, 5, 40}, {1, 0, 37}),
    };
    for (const TensorView& view : views) {
      SCOPED_TRACE(shape_string(view.shape()) + " strides " + shape_string(view.strides()));
      EXPECT_TRUE(same_bytes(Tensor::copy_of(view), copy_elementwise(view)));
    }
  }
}

TEST(TensorCopy, ContiguousCopyIsBitwiseEqualAndIndependent) {
  const Tensor t = Tensor::from_values(DType::f64, {2, 2}, std::vector<double>{NAN, -0.0, 1e-310, 3});
  const Tensor copy = Tensor::copy_of(t);
  EXPECT_TRUE(same_bytes(t, copy));
  EXPECT_NE(copy.data(), t.data());
  t.store({1, 1}, 7.0);
  EXPECT_EQ(copy.load({1, 1}), 3.0);
}

TEST(TensorCopy, CudaViewIsRefused) {
  float dummy = 0;
  const TensorView cuda_view(&dummy, DType::f32, {1}, {}, Device::cuda, 0);
  EXPECT_THROW(Tensor::copy_of(cuda_view), ContractViolation);
  EXPECT_THROW(Tensor::converted(cuda_view, DType::f64), ContractViolation);
  EXPECT_THROW(cuda_view.load({0}), ContractViolation);
}

TEST(TensorCopy, ReshapedSharesStorage) {
  const Tensor t = iota(DType::f32, {2, 6});
  const Tensor r = t.reshaped({3, 4});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  r.store({2, 3}, -1.0);
  EXPECT_EQ(t.load({1, 5}), -1.0);
  EXPECT_THROW(t.reshaped({5, 2}), ContractViolation);
}

TEST(TensorCopy, FromValuesRefusesAWrongCount) {
  EXPECT_THROW(Tensor::from_values(DType::f32, {2, 2}, std::vector<double>{1, 2, 3}),
               ContractViolation);
}

TEST(TensorCopy, ToF64VectorIsRowMajor) {
  const Tensor t = iota(DType::i32, {2, 3});
  EXPECT_EQ(t.to_f64_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

// ------------------------------------------------------------------------------- rounding

// The slow twin of one rounding to a half type: among all finite values of the type and the
// infinities, the one nearest to `value`, ties to the even bit pattern. Written from the
// definition, by search over the neighbours of a truncation, not from the production code.
template <class HalfT>
std::uint16_t nearest_bits(double value) {
  if (std::isnan(value)) return 0;  // not compared
  std::uint16_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  const auto as_double = [](std::uint16_t bits) {
    return static_cast<double>(static_cast<float>(std::bit_cast<HalfT>(bits)));
  };
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const std::uint16_t inf_bits = std::is_same_v<HalfT, Eigen::half> ? 0x7c00 : 0x7f80;
  const double max_finite = as_double(inf_bits - 1);
  const double magnitude = std::fabs(value);
  // Past max + half an ulp the value rounds to infinity (ties included: max has an odd pattern).
  const double overflow = max_finite + (max_finite - as_double(inf_bits - 2)) / 2;
  if (magnitude >= overflow) return static_cast<std::uint16_t>(sign | inf_bits);
  // Binary search the largest pattern whose magnitude <= |value|, then compare it and the next.
  std::uint16_t lo = 0;
  std::uint16_t hi = static_cast<std::uint16_t>(inf_bits - 1);
  while (lo < hi) {
    const auto mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (as_double(mid) <= magnitude) {
      lo = mid;
    } else {
      hi = static_cast<std::uint16_t>(mid - 1);
    }
  }
  for (std::uint16_t candidate : {lo, static_cast<std::uint16_t>(lo + 1)}) {
    const double distance = std::fabs(as_double(candidate) - magnitude);
    if (distance < best_distance || (distance == best_distance && (candidate & 1) == 0)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return static_cast<std::uint16_t>(sign | best);
}

template <class HalfT>
std::uint16_t stored_bits(DType dtype, double value) {
  Tensor t(dtype, {1});
  t.store({0}, value);
  return std::bit_cast<std::uint16_t>(t.data_as<HalfT>()[0]);
}

TEST(Rounding, StoreRoundsDoubleOnceNotThroughFloat) {
  // Through float, 1 + 2^-11 + 2^-40 becomes the tie 1 + 2^-11 and then 1; the nearest f16 is
  // 1 + 2^-10.
  const Tensor h = Tensor::from_values(DType::f16, {1}, std::vector<double>{1 + 0x1p-11 + 0x1p-40});
  EXPECT_EQ(h.load({0}), 1 + 0x1p-10);
  const Tensor b = Tensor::from_values(DType::bf16, {1}, std::vector<double>{1 + 0x1p-8 + 0x1p-30});
  EXPECT_EQ(b.load({0}), 1 + 0x1p-7);
}

TEST(Rounding, TiesGoToEven) {
  const Tensor b = Tensor::from_values(DType::bf16, {2},
                                       std::vector<double>{1 + 0x1p-8, 1 + 3 * 0x1p-8});
  EXPECT_EQ(b.load({0}), 1.0);
  EXPECT_EQ(b.load({1}), 1 + 0x1p-6);
  const Tensor h = Tensor::from_values(DType::f16, {2},
                                       std::vector<double>{1 + 0x1p-11, 1 + 3 * 0x1p-11});
  EXPECT_EQ(h.load({0}), 1.0);
  EXPECT_EQ(h.load({1}), 1 + 0x1p-9);
}

TEST(Rounding, StoreToHalfTypesEqualsNearestNeighbourSearch) {
  SplitMix64 rng(20240601);
  std::printf("seed 20240601\n");
  for (int i = 0; i < 20000; ++i) {
    double value = std::exp2(rng.uniform(-30.0, 20.0)) * (rng.below(2) ? -1 : 1);
    if (i % 3 != 0) {
      // On or next to a tie of bf16 (8 significant bits) or f16 (11): the hard cases.
      const int precision = i % 3 == 1 ? 8 : 11;
      const int e = std::ilogb(value);
      const double scaled = std::ldexp(value, precision - 1 - e);
      const double tie = std::ldexp(std::floor(scaled) + 0.5, e - precision + 1);
      value = tie + ((i / 3) % 3 - 1) * std::ldexp(std::fabs(tie), -45);
    }
    SCOPED_TRACE(value);
    EXPECT_EQ(stored_bits<Eigen::half>(DType::f16, value), nearest_bits<Eigen::half>(value));
    EXPECT_EQ(stored_bits<Eigen::bfloat16>(DType::bf16, value),
              nearest_bits<Eigen::bfloat16>(value));
  }
  for (double value : {0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e6, 0x1p-24, 0x1p-25, 0x1.8p-25,
                       3e38, 3.4e38, 1e300, 1e-300}) {
    SCOPED_TRACE(value);
    EXPECT_EQ(stored_bits<Eigen::half>(DType::f16, value), nearest_bits<Eigen::half>(value));
    EXPECT_EQ(stored_bits<Eigen::bfloat16>(DType::bf16, value),
              nearest_bits<Eigen::bfloat16>(value));
  }
}

TEST(Rounding, ConvertedEqualsStoreOfLoadForEveryDtypePair) {
  const std::vector<double> values{0, 1, -2, 3, 100, -128, 255, 7};
  for (DType from : kAllDTypes) {
    const Tensor source = Tensor::from_values(from, {2, 4}, values);
    const TensorView strided = source.view().permute({1, 0});
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      const Tensor converted = Tensor::converted(strided, to);
      EXPECT_EQ(converted.dtype(), to);
      Tensor expected(to, {4, 2});
      for_each_index(expected.shape(), [&](std::span<const std::int64_t> index) {
        expected.view().store(index, strided.load(index));
      });
      EXPECT_TRUE(same_bytes(converted, expected));
    }
  }
}

TEST(Rounding, ConvertedNarrowsF64ToBf16ToNearestEven) {
  const std::vector<double> values{1 + 0x1p-8, 1 + 3 * 0x1p-8, 1 + 0x1p-8 + 0x1p-30, -0.0,
                                   std::numeric_limits<double>::infinity(), 1e39};
  const Tensor source = Tensor::from_values(DType::f64, {6}, values);
  const Tensor bf = Tensor::converted(source, DType::bf16);
  EXPECT_EQ(bf.to_f64_vector(),
            (std::vector<double>{1.0, 1 + 0x1p-6, 1 + 0x1p-7, -0.0,
                                 std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::infinity()}));
  EXPECT_TRUE(std::signbit(bf.load({3})));
  const Tensor nan = Tensor::converted(
      Tensor::from_values(DType::f64, {1}, std::vector<double>{NAN}), DType::f16);
  EXPECT_TRUE(std::isnan(nan.load({0})));
}

TEST(Rounding, IntegerStoreRefusesUnrepresentableValues) {
  Tensor t(DType::i32, {1});
  t.store({0}, 2.5);
  EXPECT_EQ(t.load({0}), 2.0);  // to nearest even
  EXPECT_THROW(t.store({0}, 0x1p31), ContractViolation);
  EXPECT_THROW(t.store({0}, NAN), ContractViolation);
  t.store({0}, -0x1p31);
  EXPECT_EQ(t.load({0}), -0x1p31);
  const Tensor big = Tensor::from_values(DType::i64, {1}, std::vector<double>{0x1p40});
  EXPECT_THROW(Tensor::converted(big, DType::i32), ContractViolation);
}

TEST(NonFinite, FirstNonFiniteIsNamedWithItsIndexOnContiguousAndStridedViews) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    Tensor t(dtype, {2, 3, 4});
    EXPECT_TRUE(all_finite(t)) << dtype_name(dtype);
    EXPECT_EQ(describe_first_non_finite(t, "x"), std::nullopt);
    t.store({1, 2, 3}, std::numeric_limits<double>::infinity());
    t.store({1, 0, 1}, std::nan(""));
    EXPECT_FALSE(all_finite(t)) << dtype_name(dtype);
    EXPECT_EQ(describe_first_non_finite(t, "x"), "x holds nan at index (1, 0, 1)") << dtype_name(dtype);
    // A strided view that skips the NaN still sees the infinity, at its own index.
    const TensorView odd = t.view().slice(1, 2, 3);
    EXPECT_FALSE(all_finite(odd));
    EXPECT_EQ(describe_first_non_finite(odd, "v"), "v holds inf at index (1, 0, 3)");
  }
  EXPECT_TRUE(all_finite(Tensor(DType::i64, {3})));
}

// copy_into writes every element of a strided host view (permuted, skipping) and
// nothing else, and refuses what it cannot write.
TEST(Views, CopyIntoWritesExactlyTheViewsElements) {
  Tensor src(DType::f32, {3, 4, 5});
  for (std::int64_t i = 0; i < src.numel(); ++i) src.data_as<float>()[i] = static_cast<float>(i + 1);
  Tensor buffer(DType::f32, {4, 6, 5});  // (T, 2B, d): zeros outside the view stay zero
  // (B, T, d): batch every other row of the buffer's second axis, time the first.
  const TensorView view = buffer.view().permute({1, 0, 2}).slice(0, 1, 6, 2);
  ASSERT_EQ(view.shape(), src.shape());
  copy_into(view, src);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t t = 0; t < 4; ++t)
      for (std::int64_t c = 0; c < 5; ++c) EXPECT_EQ(view.load({b, t, c}), src.load({b, t, c}));
  double written = 0, total = 0;
  for (double v : buffer.to_f64_vector()) written += v != 0.0, total += v;
  EXPECT_EQ(written, src.numel());
  EXPECT_EQ(total, src.numel() * (src.numel() + 1) / 2.0);
  EXPECT_THROW(copy_into(Tensor(DType::f64, {3, 4, 5}), src, "out"), ContractViolation);
  EXPECT_THROW(copy_into(Tensor(DType::f32, {3, 4, 4}), src, "out"), ContractViolation);
  const TensorView on_device(buffer.data(), DType::f32, {3, 4, 5}, {}, Device::cuda, 0);
  EXPECT_THROW(copy_into(on_device, src, "out"), ContractViolation);
}

TEST(Views, RepeatedAddressesAndSharedSpansAreDetected) {
  Tensor t(DType::f32, {4, 6, 5});
  EXPECT_FALSE(elements_overlap(t));
  EXPECT_FALSE(elements_overlap(t.view().permute({2, 0, 1}).slice(2, 0, 6, 2)));  // permuted, skipping
  EXPECT_TRUE(elements_overlap(TensorView(t.data(), DType::f32, {2, 5}, {0, 1})));   // broadcast
  EXPECT_TRUE(elements_overlap(TensorView(t.data(), DType::f32, {3, 4}, {2, 1})));   // interleaved rows
  EXPECT_FALSE(elements_overlap(TensorView(t.data(), DType::f32, {1, 5}, {0, 1})));  // size-1 axis: any stride
  EXPECT_FALSE(elements_overlap(TensorView(t.data(), DType::f32, {0, 5}, {0, 1})));  // empty

  const TensorView all = t.view();
  EXPECT_TRUE(spans_overlap(all.select(0, 1), all.slice(0, 1, 3)));
  EXPECT_FALSE(spans_overlap(all.select(0, 0), all.select(0, 1)));  // adjacent rows
  // A permuted view's span runs from its first to its last element in memory.
  EXPECT_TRUE(spans_overlap(all.select(0, 3), all.permute({2, 1, 0}).slice(2, 0, 4, 3)));
  EXPECT_FALSE(spans_overlap(all.select(0, 3), all.permute({2, 1, 0}).slice(2, 0, 3)));
  EXPECT_FALSE(spans_overlap(all.select(0, 0), TensorView(t.data(), DType::f32, {6, 5}, {}, Device::cuda, 0)));
  EXPECT_FALSE(spans_overlap(all, all.slice(0, 0, 0)));  // empty
  // Bytes, not elements: an f64 view over the first 8 bytes meets the f32 element at offset 1.
  EXPECT_TRUE(spans_overlap(TensorView(t.data(), DType::f64, {1}), TensorView(t.data_as<float>() + 1, DType::f32, {1})));
  EXPECT_FALSE(spans_overlap(TensorView(t.data(), DType::f64, {1}), TensorView(t.data_as<float>() + 2, DType::f32, {1})));
}

}  // namespace
}  // namespace pararnn
