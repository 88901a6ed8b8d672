// Tensor: up to 4 dimensions, contiguous row-major strides, an element type, a device, and
// shared storage with an element offset, so that views (reshape, slice along the first
// dimension) cost no copy. Storage returns to its device's allocator when the last view
// goes. Gradients and the tape live in autograd/, not here.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace gpumix {

struct Shape {
  static constexpr int kMaxDims = 4;
  int ndim = 0;
  std::array<int64_t, kMaxDims> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  explicit Shape(const std::vector<int64_t>& d);
  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "(4, 128, 768)"
};

// Memory a tensor views: owned (returned to the allocator) or borrowed (e.g. a memory-
// mapped token file, whose owner outlives the tensor).
class Storage {
 public:
  Storage(Device device, int64_t bytes);                       // owned
  Storage(Device device, void* borrowed, int64_t bytes);       // borrowed
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool owned_ = true;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape,
                            Device device = Device::cpu());
  // A view of memory owned elsewhere; `data` must outlive every view of the result.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.ndim; }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t numel() const { return shape_.numel(); }
  int64_t nbytes() const { return numel() * (int64_t)dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t offset() const { return offset_; }  // elements into the storage
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Pointer to the first element, checked against T (float, bf16, int32_t).
  template <class T> T* data() const {
    check_dtype(dtype_of<T>(), "data");
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;

  // Views (no copy). view() takes one -1 dimension to be inferred.
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const { return view(shape); }
  // Rows [start, end) of the first dimension.
  Tensor slice(int64_t start, int64_t end) const;
  // Flat elements [start, start + count) as a 1-D view.
  Tensor flat_slice(int64_t start, int64_t count) const;

  // Copies, through ops::copy (which says how host <-> cuda copies are synchronous for the
  // caller: pinned staging buffers on the cuda device's compute stream).
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  void copy_from(const Tensor& src);  // same shape (numel) and dtype; any devices

  void fill_(float value);
  void zero_();

  std::vector<float> to_vector() const;          // any float dtype, converted to fp32
  std::vector<int32_t> to_int_vector() const;    // i32 only
  float item() const;                            // one-element tensors
  std::string str() const;                       // "Tensor(f32, (2, 3), cpu:0)"

  void check_dtype(DType expected, const char* what) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace gpumix
