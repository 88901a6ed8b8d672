#include "nn/data/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace gpumix::data {

namespace {

std::runtime_error os_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

MappedFile::MappedFile(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw os_error("cannot open " + what, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::runtime_error error = os_error("cannot stat " + what, path);
    ::close(fd);
    throw error;
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::runtime_error error = os_error("cannot memory-map " + what, path);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    size_ = 0;
    throw error;
  }
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept : map_(other.map_), size_(other.size_) {
  other.map_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, size_);
    map_ = other.map_;
    size_ = other.size_;
    other.map_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw os_error("cannot open", path);
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw os_error("cannot read", path);
  return out;
}

AtomicWriter::AtomicWriter(const std::string& path)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) throw os_error("cannot create", tmp_);
}

AtomicWriter::~AtomicWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t w = ::write(fd_, p, size);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw os_error("cannot write", tmp_);
    }
    p += w;
    size -= static_cast<size_t>(w);
  }
}

void AtomicWriter::commit() {
  const bool synced = ::fsync(fd_) == 0;
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!synced || !closed) {
    const auto err = os_error("cannot flush", tmp_);
    ::unlink(tmp_.c_str());
    throw err;
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const auto err = os_error("cannot rename '" + tmp_ + "' to", path_);
    ::unlink(tmp_.c_str());
    throw err;
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicWriter out(path);
  out.write(data, size);
  out.commit();
}

}  // namespace gpumix::data
