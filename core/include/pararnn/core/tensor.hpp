// Tensor (owning, host memory) and TensorView (non-owning: data, dtype, device, shape, strides
// in elements, byte offset folded into data), with DLPack conversion so PyTorch, JAX and CuPy
// tensors pass in without copies.
//
// Guarantees: a Tensor is always contiguous (row-major) and zero-initialised; views may have
// any strides, including zero and permuted ones; `Tensor::copy_of(view)` reads any strided
// host view; element access by multi-index honours strides. Example:
//   Tensor x(DType::f32, {2, 64, 8});
//   TensorView every_other = x.view().slice(1, 0, 64, 2);   // time skip
//   Tensor packed = Tensor::copy_of(every_other);            // contiguous (2, 32, 8)
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pararnn/core/dtype.hpp"

namespace pararnn {

using Shape = std::vector<std::int64_t>;

enum class Device : std::uint8_t { cpu, cuda };

std::string shape_string(std::span<const std::int64_t> shape);  // "(2, 64, 8)"
std::int64_t shape_numel(std::span<const std::int64_t> shape);
Shape contiguous_strides(std::span<const std::int64_t> shape);

class TensorView {
 public:
  TensorView() = default;
  // `strides` in elements; an empty `strides` means contiguous.
  TensorView(void* data, DType dtype, Shape shape, Shape strides = {}, Device device = Device::cpu,
             int device_id = 0);

  void* data() const { return data_; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int device_id() const { return device_id_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t axis) const;  // negative axes count from the end
  std::int64_t numel() const { return shape_numel(shape_); }
  bool is_contiguous() const;
  bool empty() const { return data_ == nullptr && shape_.empty(); }

  // Element offset (in elements) of a multi-index.
  std::int64_t offset_of(std::span<const std::int64_t> index) const;
  // Reads one element as double (exact for every floating dtype and for integers < 2^53).
  double load(std::span<const std::int64_t> index) const;
  double load(std::initializer_list<std::int64_t> index) const {
    return load(std::span<const std::int64_t>(index.begin(), index.size()));
  }
  // Writes one element, rounding to nearest in the storage dtype.
  void store(std::span<const std::int64_t> index, double value) const;
  void store(std::initializer_list<std::int64_t> index, double value) const {
    store(std::span<const std::int64_t>(index.begin(), index.size()), value);
  }

  // Views (no copy): [start, stop) with step along `axis`; permutation of axes; one index.
  TensorView slice(std::int64_t axis, std::int64_t start, std::int64_t stop,
                   std::int64_t step = 1) const;
  TensorView permute(std::span<const std::int64_t> order) const;
  TensorView permute(std::initializer_list<std::int64_t> order) const {
    return permute(std::span<const std::int64_t>(order.begin(), order.size()));
  }
  TensorView select(std::int64_t axis, std::int64_t index) const;

  // A DLTensor that points into this view (valid while this view object lives; shape and
  // strides point at this object's members).
  DLTensor to_dlpack() const;
  // Wraps a DLTensor without a copy. Refuses unsupported dtypes/devices with ContractViolation
  // naming `argument`. Null strides mean contiguous (DLPack convention).
  static TensorView from_dlpack(const DLTensor& tensor, std::string_view argument = "tensor");

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  int device_id_ = 0;
  Shape shape_;
  Shape strides_;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // contiguous, zero-filled, host memory

  // Contiguous host copy of any strided host view.
  static Tensor copy_of(const TensorView& view);
  // Contiguous copy converted to `dtype` (rounding to nearest even when narrowing).
  static Tensor converted(const TensorView& view, DType dtype);
  static Tensor from_values(DType dtype, Shape shape, std::span<const double> values);

  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }  // NOLINT: a Tensor is usable as a view

  void* data() const { return view_.data(); }
  template <class T>
  T* data_as() const { return view_.data_as<T>(); }
  DType dtype() const { return view_.dtype(); }
  const Shape& shape() const { return view_.shape(); }
  std::int64_t dim() const { return view_.dim(); }
  std::int64_t size(std::int64_t axis) const { return view_.size(axis); }
  std::int64_t numel() const { return view_.numel(); }
  bool defined() const { return storage_ != nullptr; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }

  double load(std::span<const std::int64_t> index) const { return view_.load(index); }
  double load(std::initializer_list<std::int64_t> index) const { return view_.load(index); }
  void store(std::initializer_list<std::int64_t> index, double value) const {
    view_.store(index, value);
  }
  // All elements in row-major order as double.
  std::vector<double> to_f64_vector() const;
  // Same storage, new shape with the same element count.
  Tensor reshaped(Shape shape) const;

  // A DLManagedTensor that shares this tensor's storage; its deleter releases the share.
  DLManagedTensor* to_dlpack_managed() const;

 private:
  std::shared_ptr<std::byte[]> storage_;
  TensorView view_;
};

// Writes the elements of `src` into the host view `dst` (same shape and dtype; `dst` any strides,
// no two of its elements sharing an address: elements_overlap false), raw bits. Throws
// ContractViolation naming `argument` for a device view, a shape or dtype mismatch.
void copy_into(const TensorView& dst, const TensorView& src, std::string_view argument = "dst");
// Whether two elements of `view` share an address (a zero stride over an axis of size > 1, or
// strides that interleave): a view a result cannot be written into.
bool elements_overlap(const TensorView& view);
// Whether the byte ranges spanned by two views (on the same device) intersect; views on different
// devices or empty views never overlap.
bool spans_overlap(const TensorView& a, const TensorView& b);

// Where a host tensor holds its first non-finite element (row-major order), as a sentence naming
// `name`, the value and the index: "x holds nan at index (0, 3, 2)"; nothing when every element
// is finite (integer tensors always are). Error messages use it to say which input made a
// result non-finite (CONTRACT §3).
std::optional<std::string> describe_first_non_finite(const TensorView& view, std::string_view name);
// Whether every element of a host tensor is finite (one typed pass over contiguous data);
// integer tensors and device views count as finite (nothing here can read a device view).
bool all_finite(const TensorView& view);

}  // namespace pararnn
