#include "pararnn/core/tensor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

namespace pararnn {

namespace {

// Calls `f.template operator()<T>()` with the host element type of any dtype (floating and
// integer). `dispatch_float_dtype` is the project's switch for solver code; this one also covers
// the integer dtypes that only the storage layer moves around.
template <class F>
decltype(auto) dispatch_any_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::i32: return f.template operator()<std::int32_t>();
    case DType::i64: return f.template operator()<std::int64_t>();
    default: return dispatch_float_dtype(dtype, std::forward<F>(f));
  }
}

template <class T>
double to_double(T value) {
  return static_cast<double>(value);
}

// One rounding from double to the storage type; integers must be representable (no silent
// wrap-around, which would be undefined behaviour anyway).
template <class T>
T from_double(double value) {
  if constexpr (std::is_integral_v<T>) {
    const double rounded = std::nearbyint(value);
    // 2^31 and 2^63 are exact doubles; the representable range is [-2^k, 2^k).
    const double limit = -static_cast<double>(std::numeric_limits<T>::min());
    if (!(rounded >= -limit && rounded < limit)) {
      throw ContractViolation("value", fmt::format("must be representable in {}",
                                                   dtype_name(StorageTraits<T>::dtype)),
                              fmt::format("{}", value));
    }
    return static_cast<T>(rounded);
  } else {
    return round_to_storage<T>(value);
  }
}

// Element conversion for `Tensor::converted`, always with a single rounding: integers convert
// directly (double is inexact above 2^53), widening is exact, narrowing rounds once.
template <class Dst, class Src>
Dst convert_element(Src value) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return value;
  } else if constexpr (std::is_integral_v<Dst> && std::is_integral_v<Src>) {
    if (value < std::numeric_limits<Dst>::min() || value > std::numeric_limits<Dst>::max()) {
      throw ContractViolation("value", fmt::format("must be representable in {}",
                                                   dtype_name(StorageTraits<Dst>::dtype)),
                              fmt::format("{}", value));
    }
    return static_cast<Dst>(value);
  } else if constexpr (std::is_integral_v<Dst>) {
    return from_double<Dst>(to_double(value));  // half types and float widen exactly
  } else if constexpr (std::is_same_v<Dst, double>) {
    return static_cast<double>(value);
  } else if constexpr (std::is_same_v<Dst, float>) {
    return static_cast<float>(value);  // half types widen exactly; the rest rounds once
  } else if constexpr (std::is_same_v<Src, float> || std::is_same_v<Src, Eigen::half> ||
                       std::is_same_v<Src, Eigen::bfloat16>) {
    return Dst(static_cast<float>(value));  // exact float, then one rounding to nearest even
  } else {
    return round_to_storage<Dst>(static_cast<double>(value));
  }
}

std::byte* advance(void* data, std::int64_t elements, DType dtype) {
  return static_cast<std::byte*>(data) + elements * static_cast<std::int64_t>(dtype_size(dtype));
}

// Shape and strides with size-1 axes dropped and adjacent axes merged where memory allows,
// so a strided loop runs over as few and as long rows as possible.
struct Layout {
  Shape shape;
  Shape strides;
};

Layout coalesce(const Shape& shape, const Shape& strides) {
  Layout layout;
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    if (shape[axis] == 1) continue;
    if (!layout.shape.empty() &&
        layout.strides.back() == strides[axis] * shape[axis]) {
      layout.shape.back() *= shape[axis];
      layout.strides.back() = strides[axis];
    } else {
      layout.shape.push_back(shape[axis]);
      layout.strides.push_back(strides[axis]);
    }
  }
  if (layout.shape.empty()) {  // a scalar or all sizes one: one row of one element
    layout.shape.push_back(1);
    layout.strides.push_back(1);
  }
  return layout;
}

// Calls row(offset, count, stride) for every innermost row of the view in row-major order,
// `offset` in elements from the view's data. Nothing is called for an empty view.
template <class Row>
void for_each_row(const Shape& shape, const Shape& strides, Row&& row) {
  if (shape_numel(shape) == 0) return;
  const Layout layout = coalesce(shape, strides);
  const std::size_t outer_dims = layout.shape.size() - 1;
  const std::int64_t count = layout.shape.back();
  const std::int64_t stride = layout.strides.back();
  std::int64_t rows = 1;
  for (std::size_t axis = 0; axis < outer_dims; ++axis) rows *= layout.shape[axis];
  Shape index(outer_dims, 0);
  std::int64_t offset = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    row(offset, count, stride);
    // Odometer step over the outer axes, keeping the offset incrementally.
    for (std::size_t axis = outer_dims; axis-- > 0;) {
      offset += layout.strides[axis];
      if (++index[axis] < layout.shape[axis]) break;
      offset -= layout.strides[axis] * layout.shape[axis];
      index[axis] = 0;
    }
  }
}

// Same-dtype gather of a transposed view: the innermost axis is strided in the source but some
// outer axis has unit stride. Copies 32 x 32 tiles over (that axis, innermost axis) so that
// both the reads and the writes stay in cache. Answers false when the layout is not of that kind.
template <class T>
bool gather_transposed(const TensorView& view, T* dst) {
  if (view.numel() == 0) return false;
  const Layout layout = coalesce(view.shape(), view.strides());
  const std::size_t inner = layout.shape.size() - 1;
  if (layout.strides[inner] == 1) return false;
  std::size_t unit = inner;
  for (std::size_t axis = 0; axis < inner && unit == inner; ++axis) {
    if (layout.strides[axis] == 1) unit = axis;
  }
  if (unit == inner) return false;

  const Shape dst_strides = contiguous_strides(layout.shape);
  const std::int64_t rows = layout.shape[unit];
  const std::int64_t cols = layout.shape[inner];
  const std::int64_t src_col_stride = layout.strides[inner];
  const std::int64_t dst_row_stride = dst_strides[unit];
  std::vector<std::size_t> others;
  std::int64_t outer_count = 1;
  for (std::size_t axis = 0; axis < inner; ++axis) {
    if (axis == unit) continue;
    others.push_back(axis);
    outer_count *= layout.shape[axis];
  }
  constexpr std::int64_t kTile = 32;
  const T* src = view.data_as<T>();
  Shape index(others.size(), 0);
  std::int64_t src_base = 0;
  std::int64_t dst_base = 0;
  for (std::int64_t o = 0; o < outer_count; ++o) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const std::int64_t r1 = std::min(rows, r0 + kTile);
      for (std::int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const std::int64_t c1 = std::min(cols, c0 + kTile);
        for (std::int64_t r = r0; r < r1; ++r) {
          const T* from = src + src_base + r;
          T* to = dst + dst_base + r * dst_row_stride;
          for (std::int64_t c = c0; c < c1; ++c) to[c] = from[c * src_col_stride];
        }
      }
    }
    for (std::size_t k = others.size(); k-- > 0;) {
      const std::size_t axis = others[k];
      src_base += layout.strides[axis];
      dst_base += dst_strides[axis];
      if (++index[k] < layout.shape[axis]) break;
      src_base -= layout.strides[axis] * layout.shape[axis];
      dst_base -= dst_strides[axis] * layout.shape[axis];
      index[k] = 0;
    }
  }
  return true;
}

// Same-dtype strided gather into contiguous memory: a memcpy per unit-stride row, a tiled copy
// for transposes, otherwise a typed element loop (never a detour through double).
template <class T>
void gather_rows(const TensorView& view, T* dst) {
  if (gather_transposed(view, dst)) return;
  const T* src = view.data_as<T>();
  for_each_row(view.shape(), view.strides(),
               [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
                 const T* from = src + offset;
                 if (stride == 1) {
                   std::memcpy(dst, from, static_cast<std::size_t>(count) * sizeof(T));
                 } else {
                   for (std::int64_t i = 0; i < count; ++i) dst[i] = from[i * stride];
                 }
                 dst += count;
               });
}

void require_host(const TensorView& view, std::string_view argument) {
  if (view.device() != Device::cpu) {
    throw ContractViolation(argument, "must be a host (cpu) tensor", "cuda");
  }
}

void require_data(const TensorView& view, std::string_view argument) {
  if (view.data() == nullptr && view.numel() > 0) {
    throw ContractViolation(argument, "must point at data", "a null data pointer");
  }
}

void validate_shape(std::span<const std::int64_t> shape, std::string_view argument) {
  for (const std::int64_t extent : shape) {
    if (extent < 0) {
      throw ContractViolation(argument, "must have non-negative extents", shape_string(shape));
    }
  }
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t dim) {
  const std::int64_t normalized = axis < 0 ? axis + dim : axis;
  if (normalized < 0 || normalized >= dim) {
    throw ContractViolation("axis", fmt::format("must be in [{}, {})", -dim, dim),
                            std::to_string(axis));
  }
  return normalized;
}

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
  }
  throw ContractViolation("dtype", "must be one of f64, f32, f16, bf16, i32, i64",
                          std::to_string(static_cast<int>(dtype)));
}

}  // namespace

// ---------------------------------------------------------------------------------- shapes

std::string shape_string(std::span<const std::int64_t> shape) {
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::int64_t shape_numel(std::span<const std::int64_t> shape) {
  std::int64_t numel = 1;
  for (const std::int64_t extent : shape) numel *= extent;
  return numel;
}

Shape contiguous_strides(std::span<const std::int64_t> shape) {
  Shape strides(shape.size(), 1);
  std::int64_t stride = 1;
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    strides[axis] = stride;
    stride *= std::max<std::int64_t>(shape[axis], 1);
  }
  return strides;
}

// ------------------------------------------------------------------------------ TensorView

TensorView::TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device,
                       int device_id)
    : data_(data), dtype_(dtype), device_(device), device_id_(device_id),
      shape_(std::move(shape)), strides_(std::move(strides)) {
  (void)dtype_size(dtype_);  // refuses an out-of-range enum value
  validate_shape(shape_, "shape");
  if (strides_.empty() && !shape_.empty()) {
    strides_ = contiguous_strides(shape_);
  } else if (strides_.size() != shape_.size()) {
    throw ContractViolation("strides", fmt::format("must have one entry per axis ({})", dim()),
                            shape_string(strides_));
  }
  for (const std::int64_t stride : strides_) {
    if (stride < 0) {
      throw ContractViolation("strides", "must be non-negative", shape_string(strides_));
    }
  }
}

std::int64_t TensorView::size(std::int64_t axis) const {
  return shape_[static_cast<std::size_t>(normalize_axis(axis, dim()))];
}

bool TensorView::is_contiguous() const {
  if (numel() == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t axis = shape_.size(); axis-- > 0;) {
    if (shape_[axis] != 1 && strides_[axis] != expected) return false;
    expected *= shape_[axis];
  }
  return true;
}

std::int64_t TensorView::offset_of(std::span<const std::int64_t> index) const {
  if (static_cast<std::int64_t>(index.size()) != dim()) {
    throw ContractViolation("index", fmt::format("must have {} entries for shape {}", dim(),
                                                 shape_string(shape_)),
                            shape_string(index));
  }
  std::int64_t offset = 0;
  for (std::size_t axis = 0; axis < index.size(); ++axis) {
    if (index[axis] < 0 || index[axis] >= shape_[axis]) {
      throw ContractViolation("index", fmt::format("must lie inside shape {}", shape_string(shape_)),
                              shape_string(index));
    }
    offset += index[axis] * strides_[axis];
  }
  return offset;
}

double TensorView::load(std::span<const std::int64_t> index) const {
  require_host(*this, "tensor");
  const std::int64_t offset = offset_of(index);
  require_data(*this, "tensor");
  return dispatch_any_dtype(dtype_, [&]<class T>() { return to_double(data_as<T>()[offset]); });
}

void TensorView::store(std::span<const std::int64_t> index, double value) const {
  require_host(*this, "tensor");
  const std::int64_t offset = offset_of(index);
  require_data(*this, "tensor");
  dispatch_any_dtype(dtype_, [&]<class T>() { data_as<T>()[offset] = from_double<T>(value); });
}

TensorView TensorView::slice(std::int64_t axis, std::int64_t start, std::int64_t stop,
                             std::int64_t step) const {
  const auto a = static_cast<std::size_t>(normalize_axis(axis, dim()));
  const std::int64_t extent = shape_[a];
  if (step < 1) throw ContractViolation("step", "must be at least 1", std::to_string(step));
  const std::int64_t begin = start < 0 ? start + extent : start;
  const std::int64_t end = stop < 0 ? stop + extent : stop;
  if (begin < 0 || begin > extent) {
    throw ContractViolation("start", fmt::format("must be in [{}, {}]", -extent, extent),
                            std::to_string(start));
  }
  if (end < begin || end > extent) {
    throw ContractViolation("stop", fmt::format("must be in [start, {}]", extent),
                            std::to_string(stop));
  }
  TensorView out = *this;
  out.data_ = advance(data_, begin * strides_[a], dtype_);
  out.shape_[a] = (end - begin + step - 1) / step;
  out.strides_[a] = strides_[a] * step;
  return out;
}

TensorView TensorView::permute(std::span<const std::int64_t> order) const {
  std::vector<bool> seen(shape_.size(), false);
  bool valid = static_cast<std::int64_t>(order.size()) == dim();
  for (std::size_t i = 0; valid && i < order.size(); ++i) {
    const std::int64_t axis = order[i] < 0 ? order[i] + dim() : order[i];
    valid = axis >= 0 && axis < dim() && !seen[static_cast<std::size_t>(axis)];
    if (valid) seen[static_cast<std::size_t>(axis)] = true;
  }
  if (!valid) {
    throw ContractViolation("order", fmt::format("must be a permutation of the {} axes", dim()),
                            shape_string(order));
  }
  TensorView out = *this;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto axis = static_cast<std::size_t>(order[i] < 0 ? order[i] + dim() : order[i]);
    out.shape_[i] = shape_[axis];
    out.strides_[i] = strides_[axis];
  }
  return out;
}

TensorView TensorView::select(std::int64_t axis, std::int64_t index) const {
  const auto a = static_cast<std::size_t>(normalize_axis(axis, dim()));
  const std::int64_t extent = shape_[a];
  const std::int64_t i = index < 0 ? index + extent : index;
  if (i < 0 || i >= extent) {
    throw ContractViolation("index", fmt::format("must be in [{}, {})", -extent, extent),
                            std::to_string(index));
  }
  TensorView out = *this;
  out.data_ = advance(data_, i * strides_[a], dtype_);
  out.shape_.erase(out.shape_.begin() + static_cast<std::ptrdiff_t>(a));
  out.strides_.erase(out.strides_.begin() + static_cast<std::ptrdiff_t>(a));
  return out;
}

DLTensor TensorView::to_dlpack() const {
  DLTensor tensor{};
  tensor.data = data_;
  tensor.device = {device_ == Device::cuda ? kDLCUDA : kDLCPU, device_id_};
  tensor.ndim = static_cast<int>(shape_.size());
  tensor.dtype = dl_dtype(dtype_);
  tensor.shape = const_cast<std::int64_t*>(shape_.data());
  tensor.strides = const_cast<std::int64_t*>(strides_.data());
  tensor.byte_offset = 0;
  return tensor;
}

TensorView TensorView::from_dlpack(const DLTensor& tensor, std::string_view argument) {
  Device device = Device::cpu;
  switch (tensor.device.device_type) {
    case kDLCPU: device = Device::cpu; break;
    case kDLCUDA: device = Device::cuda; break;
    default:
      throw ContractViolation(argument, "must live on the cpu (kDLCPU) or a cuda device (kDLCUDA)",
                              fmt::format("DLPack device type {}",
                                          static_cast<int>(tensor.device.device_type)));
  }
  if (tensor.dtype.lanes != 1) {
    throw ContractViolation(argument, "must have one lane per element (no vector dtypes)",
                            fmt::format("{} lanes", tensor.dtype.lanes));
  }
  DType dtype{};
  const auto code = tensor.dtype.code;
  const auto bits = tensor.dtype.bits;
  if (code == kDLFloat && bits == 64) {
    dtype = DType::f64;
  } else if (code == kDLFloat && bits == 32) {
    dtype = DType::f32;
  } else if (code == kDLFloat && bits == 16) {
    dtype = DType::f16;
  } else if (code == kDLBfloat && bits == 16) {
    dtype = DType::bf16;
  } else if (code == kDLInt && bits == 32) {
    dtype = DType::i32;
  } else if (code == kDLInt && bits == 64) {
    dtype = DType::i64;
  } else {
    throw ContractViolation(argument,
                            "must have dtype float64, float32, float16, bfloat16, int32 or int64",
                            fmt::format("DLPack dtype code {} with {} bits", code, bits));
  }
  if (tensor.ndim < 0 || (tensor.ndim > 0 && tensor.shape == nullptr)) {
    throw ContractViolation(argument, "must have ndim >= 0 and a shape array",
                            fmt::format("ndim {}", tensor.ndim));
  }
  const auto ndim = static_cast<std::size_t>(tensor.ndim);
  Shape shape(tensor.shape, tensor.shape + ndim);
  validate_shape(shape, argument);
  Shape strides = tensor.strides == nullptr ? contiguous_strides(shape)
                                            : Shape(tensor.strides, tensor.strides + ndim);
  for (const std::int64_t stride : strides) {
    if (stride < 0) {
      throw ContractViolation(argument, "must have non-negative strides", shape_string(strides));
    }
  }
  if (tensor.data == nullptr && shape_numel(shape) > 0) {
    throw ContractViolation(argument, "must point at data", "a null data pointer");
  }
  void* data = tensor.data == nullptr
                   ? nullptr
                   : static_cast<std::byte*>(tensor.data) + tensor.byte_offset;
  return TensorView(data, dtype, std::move(shape), std::move(strides), device,
                    tensor.device.device_id);
}

// ---------------------------------------------------------------------------------- Tensor

Tensor::Tensor(DType dtype, Shape shape) {
  validate_shape(shape, "shape");
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  // One byte at least, so that a tensor with zero elements is still defined().
  storage_ = std::make_shared<std::byte[]>(std::max<std::size_t>(bytes, 1));
  view_ = TensorView(storage_.get(), dtype, std::move(shape));
}

Tensor Tensor::copy_of(const TensorView& view) {
  require_host(view, "view");
  require_data(view, "view");
  Tensor out(view.dtype(), view.shape());
  if (out.numel() == 0) return out;
  if (view.is_contiguous()) {
    std::memcpy(out.data(), view.data(), out.nbytes());
    return out;
  }
  dispatch_any_dtype(view.dtype(), [&]<class T>() { gather_rows<T>(view, out.data_as<T>()); });
  return out;
}

Tensor Tensor::converted(const TensorView& view, DType dtype) {
  if (dtype == view.dtype()) return copy_of(view);
  require_host(view, "view");
  require_data(view, "view");
  Tensor out(dtype, view.shape());
  dispatch_any_dtype(view.dtype(), [&]<class Src>() {
    dispatch_any_dtype(dtype, [&]<class Dst>() {
      const Src* src = view.data_as<Src>();
      Dst* dst = out.data_as<Dst>();
      for_each_row(view.shape(), view.strides(),
                   [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
                     const Src* from = src + offset;
                     for (std::int64_t i = 0; i < count; ++i) {
                       dst[i] = convert_element<Dst>(from[i * stride]);
                     }
                     dst += count;
                   });
    });
  });
  return out;
}

Tensor Tensor::from_values(DType dtype, Shape shape, std::span<const double> values) {
  Tensor out(dtype, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != out.numel()) {
    throw ContractViolation("values", fmt::format("must have one entry per element of shape {} ({})",
                                                  shape_string(out.shape()), out.numel()),
                            fmt::format("{} values", values.size()));
  }
  dispatch_any_dtype(dtype, [&]<class T>() {
    T* dst = out.data_as<T>();
    for (std::size_t i = 0; i < values.size(); ++i) dst[i] = from_double<T>(values[i]);
  });
  return out;
}

std::vector<double> Tensor::to_f64_vector() const {
  if (!defined()) return {};
  std::vector<double> values(static_cast<std::size_t>(numel()));
  dispatch_any_dtype(dtype(), [&]<class T>() {
    const T* src = data_as<T>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = to_double(src[i]);
  });
  return values;
}

Tensor Tensor::reshaped(Shape shape) const {
  validate_shape(shape, "shape");
  if (shape_numel(shape) != numel()) {
    throw ContractViolation("shape", fmt::format("must have {} elements like {}", numel(),
                                                 shape_string(this->shape())),
                            shape_string(shape));
  }
  Tensor out;
  out.storage_ = storage_;
  out.view_ = TensorView(view_.data(), dtype(), std::move(shape));
  return out;
}

namespace {

// Owns what a DLManagedTensor points at: a share of the storage and the shape/strides arrays.
struct ManagedContext {
  std::shared_ptr<std::byte[]> storage;
  Shape shape;
  Shape strides;
};

void delete_managed(DLManagedTensor* self) {
  if (self == nullptr) return;
  delete static_cast<ManagedContext*>(self->manager_ctx);
  delete self;
}

}  // namespace

DLManagedTensor* Tensor::to_dlpack_managed() const {
  if (!defined()) throw ContractViolation("tensor", "must be defined", "an empty Tensor");
  auto context = std::make_unique<ManagedContext>(
      ManagedContext{storage_, view_.shape(), view_.strides()});
  auto managed = std::make_unique<DLManagedTensor>();
  managed->dl_tensor = view_.to_dlpack();
  managed->dl_tensor.shape = context->shape.data();
  managed->dl_tensor.strides = context->strides.data();
  managed->manager_ctx = context.release();
  managed->deleter = &delete_managed;
  return managed.release();
}

void copy_into(const TensorView& dst, const TensorView& src, std::string_view argument) {
  require_host(dst, argument);
  require_host(src, "the source");
  if (dst.shape() != src.shape())
    throw ContractViolation(argument, "must have the shape " + shape_string(src.shape()), shape_string(dst.shape()));
  if (dst.dtype() != src.dtype())
    throw ContractViolation(argument, fmt::format("must have the dtype {}", dtype_name(src.dtype())),
                            dtype_name(dst.dtype()));
  if (dst.numel() == 0) return;
  require_data(dst, argument);
  require_data(src, "the source");
  const Tensor contiguous = src.is_contiguous() ? Tensor() : Tensor::copy_of(src);
  const std::byte* from = static_cast<const std::byte*>(contiguous.defined() ? contiguous.data() : src.data());
  if (dst.is_contiguous()) {
    std::memcpy(dst.data(), from, static_cast<std::size_t>(dst.numel()) * dtype_size(dst.dtype()));
    return;
  }
  dispatch_any_dtype(dst.dtype(), [&]<class T>() {
    const T* values = reinterpret_cast<const T*>(from);
    T* out = dst.data_as<T>();
    for_each_row(dst.shape(), dst.strides(), [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
      for (std::int64_t i = 0; i < count; ++i) out[offset + i * stride] = values[i];
      values += count;
    });
  });
}

bool elements_overlap(const TensorView& view) {
  // Sorted by |stride|, each axis of size > 1 must step past everything the smaller ones span.
  std::vector<std::pair<std::int64_t, std::int64_t>> axes;  // (|stride|, size)
  for (std::int64_t d = 0; d < view.dim(); ++d) {
    const std::int64_t size = view.shape()[static_cast<std::size_t>(d)];
    if (size == 0) return false;
    if (size > 1) axes.emplace_back(std::abs(view.strides()[static_cast<std::size_t>(d)]), size);
  }
  std::sort(axes.begin(), axes.end());
  std::int64_t span = 1;  // elements spanned by the axes so far, as a count of positions
  for (const auto& [stride, size] : axes) {
    if (stride < span) return true;
    span = stride * (size - 1) + span;
  }
  return false;
}

bool spans_overlap(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device() != b.device() ||
      (a.device() == Device::cuda && a.device_id() != b.device_id()))
    return false;
  auto span = [](const TensorView& v) {
    std::int64_t low = 0, high = 0;  // element offsets of the extreme elements
    for (std::int64_t d = 0; d < v.dim(); ++d) {
      const std::int64_t reach = (v.shape()[static_cast<std::size_t>(d)] - 1) * v.strides()[static_cast<std::size_t>(d)];
      (reach < 0 ? low : high) += reach;
    }
    const auto base = reinterpret_cast<std::intptr_t>(v.data());
    const auto element = static_cast<std::int64_t>(dtype_size(v.dtype()));
    return std::pair<std::intptr_t, std::intptr_t>(base + low * element, base + (high + 1) * element);
  };
  const auto [a_begin, a_end] = span(a);
  const auto [b_begin, b_end] = span(b);
  return a_begin < b_end && b_begin < a_end;
}

bool all_finite(const TensorView& view) {
  if (view.empty() || !is_floating(view.dtype()) || view.device() != Device::cpu) return true;
  if (!view.is_contiguous()) return !describe_first_non_finite(view, "tensor");
  const std::int64_t n = view.numel();
  bool finite = true;
  dispatch_any_dtype(view.dtype(), [&]<class T>() {
    const T* p = view.data_as<T>();
    for (std::int64_t i = 0; i < n && finite; ++i) finite = std::isfinite(to_double(p[i]));
  });
  return finite;
}

std::optional<std::string> describe_first_non_finite(const TensorView& view, std::string_view name) {
  if (view.empty() || !is_floating(view.dtype()) || view.device() != Device::cpu) return std::nullopt;
  if (view.is_contiguous() && all_finite(view)) return std::nullopt;  // the common case, one pass
  const std::int64_t n = view.numel();
  Shape index(view.shape().size(), 0);
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t rest = flat;
    for (std::size_t k = index.size(); k-- > 0;) {
      index[k] = rest % view.shape()[k];
      rest /= view.shape()[k];
    }
    const double v = view.load(index);
    if (!std::isfinite(v))
      return fmt::format("{} holds {} at index {}", name, v, shape_string(index));
  }
  return std::nullopt;
}

}  // namespace pararnn
