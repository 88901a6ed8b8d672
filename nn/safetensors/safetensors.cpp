#include "nn/safetensors/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "kernels/half_types.h"
#include "nn/data/file_util.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian, as this host must be");

namespace gpumix::safetensors {

namespace {

using json = nlohmann::json;

constexpr const char* metadata_key = "__metadata__";

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry dtypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},     {DType::I8, "I8", 1},
    {DType::F8_E5M2, "F8_E5M2", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::I16, "I16", 2},
    {DType::U16, "U16", 2},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},   {DType::U32, "U32", 4},   {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::I64, "I64", 8},   {DType::U64, "U64", 8},
};

const DTypeEntry& entry_of(DType t) {
  for (const auto& e : dtypes)
    if (e.dtype == t) return e;
  throw std::logic_error("safetensors: unknown DType value " + std::to_string((int)t));
}

std::string range_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

const char* dtype_name(DType t) { return entry_of(t).name; }
size_t dtype_size(DType t) { return entry_of(t).size; }
bool converts_to_f32(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

int64_t TensorInfo::numel() const {
  // A zero dimension first: the other dimensions of an empty tensor are not bounded.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---- reading ------------------------------------------------------------------------------

Reader::Reader(const std::string& path) : path_(path) {
  const std::string where = "safetensors file '" + path + "'";
  const auto fail = [&](const std::string& problem) { return FormatError(where + ": " + problem); };
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + where + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(where + " is not a regular file");
  }
  size_ = (size_t)st.st_size;
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("cannot map " + where + ": " + err);
    }
    map_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  try {
    if (size_ < 8)
      throw fail("the file is " + std::to_string(size_) + " bytes, too short for the 8-byte header length");
    uint64_t n = 0;
    std::memcpy(&n, map_, 8);
    if (n > max_header_bytes)
      throw fail("the header length " + std::to_string(n) + " exceeds the limit of " +
                 std::to_string(max_header_bytes) + " bytes (not a safetensors file, or a damaged one)");
    if (8 + n > size_)
      throw fail("the header length " + std::to_string(n) + " runs past the end of the file (" +
                 std::to_string(size_) + " bytes): the file is truncated");
    data_begin_ = 8 + n;
    const uint64_t data_size = size_ - data_begin_;

    // Keys of the top-level object (depth 1) must be unique: JSON parsers keep the last.
    std::set<std::string> keys;
    std::string duplicate;
    const json::parser_callback_t no_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && !keys.insert(parsed.get<std::string>()).second &&
          duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    };
    json header;
    try {
      header = json::parse(map_ + 8, map_ + data_begin_, no_duplicates);
    } catch (const json::exception& e) {
      throw fail(std::string("the header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) throw fail("the header is JSON but not an object of tensors");
    if (!duplicate.empty()) throw fail("the header names tensor '" + duplicate + "' twice");

    for (const auto& [name, value] : header.items()) {
      if (name == metadata_key) {
        if (!value.is_object()) throw fail("__metadata__ must be an object of strings");
        for (const auto& [k, v] : value.items()) {
          if (!v.is_string()) throw fail("__metadata__ field '" + k + "' must be a string, got " + v.dump());
          metadata_[k] = v.get<std::string>();
        }
        continue;
      }
      const std::string tensor = "tensor '" + name + "'";
      if (!value.is_object()) throw fail(tensor + ": expected an object with dtype, shape and data_offsets");
      TensorInfo t;
      t.name = name;
      const auto dt = value.find("dtype");
      if (dt == value.end() || !dt->is_string()) throw fail(tensor + ": field 'dtype' is missing or not a string");
      const std::string dtype = dt->get<std::string>();
      const auto known = std::find_if(std::begin(dtypes), std::end(dtypes),
                                      [&](const DTypeEntry& e) { return dtype == e.name; });
      if (known == std::end(dtypes)) throw fail(tensor + ": unknown dtype '" + dtype + "'");
      t.dtype = known->dtype;
      const auto sh = value.find("shape");
      if (sh == value.end() || !sh->is_array()) throw fail(tensor + ": field 'shape' is missing or not an array");
      // Bytes = elements x dtype size, with overflow caught (a zero dimension still wins).
      uint64_t bytes = known->size;
      bool overflow = false, empty = false;
      for (const auto& d : *sh) {
        if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t)INT64_MAX)
          throw fail(tensor + ": field 'shape' must hold non-negative integers, got " + sh->dump());
        const uint64_t dim = d.get<uint64_t>();
        t.shape.push_back((int64_t)dim);
        empty |= dim == 0;
        overflow |= __builtin_mul_overflow(bytes, dim, &bytes);
      }
      if (empty) bytes = 0, overflow = false;
      const auto off = value.find("data_offsets");
      if (off == value.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
          !(*off)[1].is_number_unsigned())
        throw fail(tensor + ": field 'data_offsets' must be [begin, end], two non-negative integers");
      t.begin = (*off)[0].get<uint64_t>();
      t.end = (*off)[1].get<uint64_t>();
      if (t.begin > t.end)
        throw fail(tensor + ": data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                   "] end before they begin");
      if (t.end > data_size)
        throw fail(tensor + ": data_offsets " + range_str(t.begin, t.end) + " run past the data region (" +
                   std::to_string(data_size) + " bytes): the file is truncated or the header is wrong");
      if (overflow || bytes != t.end - t.begin)
        throw fail(tensor + ": shape " + shape_str(t.shape) + " of " + dtype + " is " +
                   (overflow ? "more than 2^64 bytes" : std::to_string(bytes) + " bytes") +
                   " but data_offsets " + range_str(t.begin, t.end) + " hold " + std::to_string(t.end - t.begin));
      tensors_.push_back(std::move(t));
    }
    // The tensors must tile the data region: in offset order, each begins where the last ended.
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.begin < covered)
        throw fail("tensors '" + tensors_[i - 1].name + "' " + range_str(tensors_[i - 1].begin, tensors_[i - 1].end) +
                   " and '" + t.name + "' " + range_str(t.begin, t.end) + " overlap in the data region");
      if (t.begin > covered)
        throw fail("bytes " + range_str(covered, t.begin) + " of the data region belong to no tensor (before '" +
                   t.name + "')");
      covered = t.end;
      index_[t.name] = i;
    }
    if (covered != data_size)
      throw fail("the data region is " + std::to_string(data_size) + " bytes but the tensors cover only " +
                 std::to_string(covered) + " (bytes " + range_str(covered, data_size) + " belong to no tensor)");
  } catch (...) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
    throw;
  }
}

Reader::~Reader() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

const TensorInfo* Reader::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void Reader::read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const {
  const TensorInfo* t = find(name);
  if (!t)
    throw FormatError("safetensors file '" + path_ + "' has no tensor '" + name + "' (it holds " +
                      std::to_string(tensors_.size()) + " tensors)");
  if (t->shape != shape)
    throw FormatError("safetensors file '" + path_ + "': tensor '" + name + "' has shape " + shape_str(t->shape) +
                      " but " + shape_str(shape) + " is expected");
  read_f32(*t, out);
}

void Reader::read_f32(const TensorInfo& t, float* out) const {
  if (!converts_to_f32(t.dtype))
    throw FormatError("safetensors file '" + path_ + "': tensor '" + t.name + "' is " + dtype_name(t.dtype) +
                      "; weights must be F32, BF16 or F16");
  const uint8_t* p = map_ + data_begin_ + t.begin;
  const int64_t n = t.numel();
  if (t.dtype == DType::F32) {
    std::memcpy(out, p, (size_t)n * 4);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {  // BF16 or F16
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = t.dtype == DType::BF16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);  // kernels/half_types.h
  }
}

// ---- writing ------------------------------------------------------------------------------

void write(const std::string& path, const std::vector<TensorSource>& tensors, DType dtype,
           const std::map<std::string, std::string>& metadata) {
  if (dtype != DType::F32 && dtype != DType::BF16)
    throw std::invalid_argument(std::string("safetensors: cannot write ") + dtype_name(dtype) +
                                " (F32 or BF16)");
  const size_t size = dtype_size(dtype);
  nlohmann::ordered_json header;
  if (!metadata.empty()) header[metadata_key] = metadata;
  uint64_t offset = 0;
  for (const TensorSource& t : tensors) {
    if (t.name.empty() || t.name == metadata_key || header.contains(t.name))
      throw std::invalid_argument("safetensors: cannot write tensor '" + t.name + "' to " + path +
                                  ": names must be distinct, non-empty and not __metadata__");
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw std::invalid_argument("safetensors: tensor '" + t.name + "' has shape " + shape_str(t.shape));
      n *= d;
    }
    header[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n * size}}};
    offset += (uint64_t)n * size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data region starts 8-byte aligned
  const uint64_t n = text.size();
  data::AtomicWriter out(path);
  out.write(&n, 8);
  out.write(text.data(), text.size());
  std::vector<float> values;
  std::vector<uint16_t> halves;
  for (const TensorSource& t : tensors) {
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    values.assign((size_t)count, 0.0f);
    t.fill(values.data());
    if (dtype == DType::F32) {
      out.write(values.data(), values.size() * 4);
    } else {
      halves.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i) halves[i] = f32_to_bf16_bits(values[i]);
      out.write(halves.data(), halves.size() * 2);
    }
  }
  out.commit();
}

}  // namespace gpumix::safetensors
