#include "nn/data/file_util.h"

#include <fcntl.h>
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

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw os_error("cannot create", tmp);
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      const auto err = os_error("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw err;
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    const auto err = os_error("cannot flush", tmp);
    ::unlink(tmp.c_str());
    throw err;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const auto err = os_error("cannot rename '" + tmp + "' to", path);
    ::unlink(tmp.c_str());
    throw err;
  }
}

}  // namespace gpumix::data
