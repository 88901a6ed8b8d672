// The safetensors file format (https://github.com/huggingface/safetensors), as PyTorch,
// Hugging Face, candle and llama.cpp's converters exchange weights:
//
//   8 bytes     N, the header length, little-endian unsigned
//   N bytes     a JSON object: for each tensor "name": {"dtype": "F32", "shape": [2, 3],
//               "data_offsets": [begin, end]} (byte offsets into the data region), and an
//               optional "__metadata__": {string: string}; padded with spaces
//   the rest    the data region: every tensor's raw little-endian bytes, row-major
//
// The reader maps the file and checks everything before any value is used: the header's
// bounds (at most max_header_bytes, as the reference implementation), its JSON, every
// entry's fields, that dtype x shape equals the tensor's byte count, that the tensors tile
// the data region exactly (no overlap, no gap, nothing past its end), and that no name
// repeats. Values convert to fp32 from F32, BF16 and F16; the writer writes F32 or BF16
// (round to nearest even). Plain C++ over raw arrays: no tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpumix::safetensors {

// A file that is not valid safetensors, or lacks what the caller needs. what() names the
// file, the tensor or field, and the numbers.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr uint64_t max_header_bytes = 100'000'000;

// The format's dtypes (all are read and checked; F32, BF16 and F16 convert to fp32).
enum class DType : uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };
const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool converts_to_f32(DType t);  // F32, BF16, F16: what read_f32 reads

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data region
  int64_t numel() const;
};

// "[768, 2304]".
std::string shape_str(const std::vector<int64_t>& shape);

class Reader {
 public:
  // Maps and validates `path`; throws FormatError (or std::runtime_error when the file
  // cannot be opened) naming it.
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their offsets.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when there is no tensor of that name.
  const TensorInfo* find(const std::string& name) const;

  // The values of tensor `name`, which must exist with exactly `shape` and a float dtype,
  // as fp32 into `out` (numel values).
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The same for a tensor already found.
  void read_f32(const TensorInfo& t, float* out) const;

 private:
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  uint64_t data_begin_ = 0;  // file offset of the data region
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `fill` writes its numel() fp32 values (row-major) into the buffer
// it is given; they are converted to the file's dtype.
struct TensorSource {
  std::string name;
  std::vector<int64_t> shape;
  std::function<void(float* out)> fill;
};

// Writes `tensors` in this order as `dtype` (F32 or BF16), atomically (a temporary file
// renamed over `path`: on any error nothing is left at `path`). Names must be distinct.
void write(const std::string& path, const std::vector<TensorSource>& tensors, DType dtype,
           const std::map<std::string, std::string>& metadata = {});

}  // namespace gpumix::safetensors
