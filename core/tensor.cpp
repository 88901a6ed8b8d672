#include "core/tensor.h"

#include <cstring>

#include "core/ops.h"

namespace gpumix {

// ---- Shape ---------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> d) : Shape(std::vector<int64_t>(d)) {}

Shape::Shape(const std::vector<int64_t>& d) {
  GPUMIX_CHECK(d.size() <= (size_t)kMaxDims, "tensors have at most ", kMaxDims,
               " dimensions, got ", d.size());
  ndim = (int)d.size();
  for (int i = 0; i < ndim; ++i) dims[i] = d[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (ndim == 1 ? ",)" : ")");
}

// ---- Storage -------------------------------------------------------------------------------

Storage::Storage(Device device, int64_t bytes)
    : device_(device), data_(allocator(device).allocate(bytes)), bytes_(bytes) {}

Storage::Storage(Device device, void* borrowed, int64_t bytes)
    : device_(device), data_(borrowed), bytes_(bytes), owned_(false) {}

Storage::~Storage() {
  if (owned_) allocator(device_).release(data_, bytes_);
}

// ---- Tensor --------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int i = 0; i < shape.ndim; ++i)
    GPUMIX_CHECK(shape[i] >= 0, "negative dimension in shape ", shape.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, shape.numel() * (int64_t)dtype_size(dtype));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0f, dtype, device);
}

Tensor Tensor::full(const Shape& shape, float value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, Device device) {
  GPUMIX_CHECK((int64_t)values.size() == shape.numel(), "from_vector: ", values.size(),
               " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor host = borrow(const_cast<float*>(values.data()), shape, DType::f32);
  return host.to(device);
}

Tensor Tensor::from_vector(const std::vector<int32_t>& values, const Shape& shape, Device device) {
  GPUMIX_CHECK((int64_t)values.size() == shape.numel(), "from_vector: ", values.size(),
               " values for shape ", shape.str(), " (", shape.numel(), " elements)");
  Tensor host = borrow(const_cast<int32_t*>(values.data()), shape, DType::i32);
  return host.to(device);
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(device, data, shape.numel() * (int64_t)dtype_size(dtype));
  return t;
}

int64_t Tensor::size(int d) const {
  const int i = d < 0 ? d + shape_.ndim : d;
  GPUMIX_CHECK(i >= 0 && i < shape_.ndim, "dimension ", d, " out of range for shape ", shape_.str());
  return shape_[i];
}

void* Tensor::raw_data() const {
  GPUMIX_CHECK(defined(), "use of an undefined tensor");
  if (!storage_->data()) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * (int64_t)dtype_size(dtype_);
}

Tensor Tensor::view(const Shape& shape) const {
  GPUMIX_CHECK(defined(), "view of an undefined tensor");
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.ndim; ++i) {
    if (s.dims[i] == -1) {
      GPUMIX_CHECK(infer < 0, "view ", shape.str(), ": only one dimension may be -1");
      infer = i;
    } else {
      known *= s.dims[i];
    }
  }
  if (infer >= 0) {
    GPUMIX_CHECK(known > 0 && numel() % known == 0, "view ", shape.str(), " of ", shape_.str(),
                 ": ", numel(), " elements do not divide into the known dimensions");
    s.dims[infer] = numel() / known;
  }
  GPUMIX_CHECK(s.numel() == numel(), "view ", shape.str(), " of ", shape_.str(), ": element counts ",
               s.numel(), " and ", numel(), " differ");
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice(int64_t start, int64_t end) const {
  GPUMIX_CHECK(defined(), "slice of an undefined tensor");
  GPUMIX_CHECK(dim() >= 1, "slice of a 0-d tensor");
  GPUMIX_CHECK(0 <= start && start <= end && end <= shape_[0], "slice [", start, ", ", end,
               ") out of range for first dimension ", shape_[0], " of ", shape_.str());
  Tensor t = *this;
  t.shape_.dims[0] = end - start;
  t.offset_ += start * (shape_[0] ? numel() / shape_[0] : 0);
  return t;
}

Tensor Tensor::flat_slice(int64_t start, int64_t count) const {
  GPUMIX_CHECK(defined(), "flat_slice of an undefined tensor");
  GPUMIX_CHECK(0 <= start && count >= 0 && start + count <= numel(), "flat_slice [", start, ", ",
               start + count, ") out of range for ", numel(), " elements");
  Tensor t = *this;
  t.shape_ = Shape{count};
  t.offset_ += start;
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype, device_);
  ops::convert(t, *this);
  return t;
}

void Tensor::copy_from(const Tensor& src) { ops::copy(*this, src); }

void Tensor::fill_(float value) { ops::fill(*this, value); }

void Tensor::zero_() { ops::fill(*this, 0.0f); }

std::vector<float> Tensor::to_vector() const {
  GPUMIX_CHECK(dtype_ != DType::i32, "to_vector() of an i32 tensor: use to_int_vector()");
  std::vector<float> out(numel());
  Tensor host = borrow(out.data(), shape_, DType::f32);
  if (dtype_ == DType::f32)
    host.copy_from(*this);
  else
    ops::convert(host, to(Device::cpu()));
  return out;
}

std::vector<int32_t> Tensor::to_int_vector() const {
  check_dtype(DType::i32, "to_int_vector");
  std::vector<int32_t> out(numel());
  borrow(out.data(), shape_, DType::i32).copy_from(*this);
  return out;
}

float Tensor::item() const {
  GPUMIX_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements ", shape_.str());
  return dtype_ == DType::i32 ? (float)to_int_vector()[0] : to_vector()[0];
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return gpumix::str("Tensor(", dtype_name(dtype_), ", ", shape_.str(), ", ", device_.str(), ")");
}

void Tensor::check_dtype(DType expected, const char* what) const {
  GPUMIX_CHECK(defined(), what, ": undefined tensor");
  GPUMIX_CHECK(dtype_ == expected, what, ": expected a ", dtype_name(expected), " tensor, got ",
               dtype_name(dtype_), " ", shape_.str());
}

}  // namespace gpumix
