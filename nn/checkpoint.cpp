// Checkpoints: see checkpoint.h for the format, the protocol and the guarantees.
#include "nn/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <utility>

namespace gpumix {

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian fp32; add byte swapping for big-endian hosts"
#endif

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* format_name = "gpumix-checkpoint";
constexpr const char* slices_dir_name = ".slices";
constexpr size_t io_chunk_bytes = size_t(8) << 20;

// ---- small helpers -----------------------------------------------------------------------
std::string join_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// A folder as given, without trailing separators ("runs/a/" -> "runs/a").
fs::path folder_path(const std::string& dir) {
  fs::path p(dir);
  return p.has_filename() || p == p.root_path() ? p : p.parent_path();
}

std::string parent_of(const std::string& dir) {
  fs::path p = folder_path(dir).parent_path();
  return p.empty() ? "." : p.string();
}

std::string base_of(const std::string& dir) { return folder_path(dir).filename().string(); }

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

bool parse_hex16(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = (v << 4) | uint64_t(d);
  }
  *out = v;
  return true;
}

std::string human_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 100 || s[0] == '.') return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool valid_nonce(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string random_nonce() {
  // The device's randomness (when there is one), the process, the time and a stack address
  // (which differs between threads), mixed into 64 bits.
  uint64_t seed[4] = {0, uint64_t(::getpid()), uint64_t(std::time(nullptr)), 0};
  seed[3] = uint64_t(reinterpret_cast<uintptr_t>(&seed));
  try {
    std::random_device rd;
    seed[0] = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  } catch (...) {
  }
  return hex16(XXH64(seed, sizeof seed, 0));
}

const char* errno_hint(int e) {
  switch (e) {
    case ENOSPC:
      return "the disk is full: free space, keep fewer checkpoints, or write them to another folder";
    case EDQUOT:
      return "the disk quota is exhausted: free space or write the checkpoints to another folder";
    case EFBIG:
      return "the file exceeds the file size limit (see `ulimit -f`) or the file system's";
    case EACCES:
    case EPERM:
      return "check the folder's permissions";
    case EROFS:
      return "the file system is read-only: write the checkpoints to another folder";
    case EIO:
      return "the storage device reported an I/O error";
    default:
      return "check the folder and the disk";
  }
}

[[noreturn]] void throw_sys(const std::string& what, const std::string& path, int e) {
  throw CheckpointError(what + " " + path + " failed: " + std::strerror(e) + " (errno " +
                        std::to_string(e) + "); " + errno_hint(e));
}

// Closes on scope exit; close() checks the result where it matters (after writes).
class Fd {
 public:
  Fd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void close_checked() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_sys("closing", path_, errno);
  }

 private:
  int fd_;
  std::string path_;
};

Fd open_or_throw(const std::string& path, int flags, mode_t mode = 0644) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_sys("opening", path, errno);
  return Fd(fd, path);
}

void write_all_at(int fd, const std::string& path, const void* data, size_t size, int64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    size_t n = std::min(size, size_t(1) << 30);
    ssize_t w = ::pwrite(fd, p, n, off_t(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_sys("writing " + std::to_string(n) + " bytes at byte " + std::to_string(offset) + " of",
                path, errno);
    }
    if (w == 0) throw_sys("writing", path, ENOSPC);
    p += w;
    size -= size_t(w);
    offset += w;
  }
}

// Reads exactly `size` bytes; a short file is reported as such.
void read_all_at(int fd, const std::string& path, void* data, size_t size, int64_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    size_t n = std::min(size, size_t(1) << 30);
    ssize_t r = ::pread(fd, p, n, off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_sys("reading", path, errno);
    }
    if (r == 0) {
      throw CheckpointError("reading " + path + ": the file ends at byte " + std::to_string(offset) +
                            ", before the " + std::to_string(size) + " bytes still expected; " +
                            "the file is truncated");
    }
    p += r;
    size -= size_t(r);
    offset += r;
  }
}

void fsync_or_throw(int fd, const std::string& path) {
  while (::fsync(fd) != 0) {
    if (errno == EINTR) continue;
    if (errno == EINVAL || errno == EROFS) return;  // not supported (e.g. a directory on some FS)
    throw_sys("flushing (fsync)", path, errno);
  }
}

void fsync_dir(const std::string& dir) {
  Fd fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY);
  fsync_or_throw(fd.get(), dir);
}

// Creates a small file with `text`, flushed to disk.
void write_file_durable(const std::string& path, const std::string& text) {
  Fd fd = open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC);
  write_all_at(fd.get(), path, text.data(), text.size(), 0);
  fsync_or_throw(fd.get(), path);
  fd.close_checked();
}

bool read_small_file(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Fd f(fd, path);
  out->clear();
  char buf[4096];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    out->append(buf, size_t(r));
    if (out->size() > (size_t(64) << 20)) return false;
  }
  return true;
}

// The queries below answer false, and the listing is empty, on any error (a missing or
// unreadable path): callers report what they expected to find.
bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
bool exists_l(const std::string& p) {  // without following a symbolic link
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

void mkdir_p(const std::string& dir) {
  if (dir.empty() || is_dir(dir)) return;
  if (exists_l(dir)) throw CheckpointError(dir + " exists but is not a folder; choose another output folder");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_sys("creating the folder", dir, ec.value());
}

// Creates the folder `dir`, whose parent exists; false when it exists already.
bool make_folder(const std::string& dir) {
  std::error_code ec;
  if (fs::create_directory(dir, ec)) return true;
  if (ec) throw_sys("creating the folder", dir, ec.value());
  return false;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw_sys("renaming " + from + " to", to, ec.value());
}

// The names in `dir`, sorted; *ok tells whether it could be read.
std::vector<std::string> list_dir(const std::string& dir, bool* ok = nullptr) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ok) *ok = !ec;
  std::sort(names.begin(), names.end());
  return names;
}

// Best effort; true when the tree is gone.
bool remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  return !exists_l(path);
}

// Hashes a whole file: the XXH64 of all of it and of each block_bytes-sized block.
void hash_file(int fd, const std::string& path, int64_t size, int64_t block_bytes, uint64_t* whole,
               std::vector<uint64_t>* blocks) {
  std::vector<char> buf(size_t(std::min<int64_t>(std::max<int64_t>(size, 1), int64_t(io_chunk_bytes))));
  Xxh64 all;
  blocks->clear();
  int64_t pos = 0;
  while (pos < size) {
    int64_t block_end = std::min(size, (pos / block_bytes + 1) * block_bytes);
    Xxh64 blk;
    while (pos < block_end) {
      size_t n = size_t(std::min<int64_t>(block_end - pos, int64_t(buf.size())));
      read_all_at(fd, path, buf.data(), n, pos);
      all.update(buf.data(), n);
      blk.update(buf.data(), n);
      pos += int64_t(n);
    }
    blocks->push_back(blk.digest());
  }
  *whole = all.digest();
}

int64_t num_blocks(int64_t bytes, int64_t block_bytes) { return (bytes + block_bytes - 1) / block_bytes; }

bool parse_step_folder(const std::string& name, int64_t* step) {
  const std::string prefix = "ckpt-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.size() - prefix.size() > 18) return false;
  int64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

bool is_leftover(const std::string& name) {
  if (name.compare(0, 6, ".ckpt-") == 0 &&
      (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos))
    return true;
  return name.compare(0, 11, "latest.tmp-") == 0;
}

std::string join_list(const std::vector<std::string>& v, size_t max_items = 8) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > max_items) s += ", ... (" + std::to_string(v.size() - max_items) + " more)";
  return s;
}

// "{C=128, L=4, name=gpt-nano}" for a flat object; JSON otherwise.
std::string config_text(const nlohmann::json& j) {
  if (!j.is_object()) return j.dump();
  std::string s = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    s += (first ? "" : ", ") + it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
    first = false;
  }
  return s + "}";
}

std::string earlier_checkpoints_text(const std::string& dir) {
  std::string parent = parent_of(dir), self = base_of(dir);
  std::vector<std::string> others;
  for (const std::string& c : list_checkpoints(parent))
    if (base_of(c) != self) others.push_back(c);
  if (others.empty()) return "there is no other checkpoint in " + parent + ": start a new run";
  return "resume from an earlier one: " + join_list(others);
}

}  // namespace

// ---- XXH64 ---------------------------------------------------------------------------------
Xxh64::Xxh64() : state_(XXH64_createState()) {
  if (!state_ || XXH64_reset(state_, 0) != XXH_OK) throw std::bad_alloc();
}
Xxh64::~Xxh64() { XXH64_freeState(state_); }
void Xxh64::update(const void* data, size_t size) {
  if (size) XXH64_update(state_, data, size);  // cannot fail on a valid state and input
}
uint64_t Xxh64::digest() const { return XXH64_digest(state_); }

uint64_t checkpoint_xxh64(const void* data, size_t size) { return XXH64(data, size, 0); }

// ---- names -----------------------------------------------------------------------------------
std::string checkpoint_folder_name(int64_t step) {
  char b[40];
  std::snprintf(b, sizeof b, "ckpt-%06" PRId64, step);
  return b;
}

std::string checkpoint_temp_dir(const std::string& out_dir, int64_t step, const std::string& nonce) {
  return join_path(out_dir, "." + checkpoint_folder_name(step) + ".tmp-" + nonce);
}

// ---- writer ----------------------------------------------------------------------------------
CheckpointWriter::~CheckpointWriter() { abort(); }

void CheckpointWriter::abort() noexcept {
  if (!active_) return;
  active_ = false;
  remove_tree(tmp_dir_);
}

std::string CheckpointWriter::begin(const std::string& out_dir, int64_t step,
                                    const std::vector<CheckpointArraySpec>& arrays,
                                    const std::string& nonce, int64_t block_bytes) {
  if (active_)
    throw CheckpointError("CheckpointWriter::begin: a save into " + tmp_dir_ +
                          " is still open; commit() or abort() it first");
  if (out_dir.empty()) throw CheckpointError("CheckpointWriter::begin: the output folder is empty");
  if (step < 0) throw CheckpointError("CheckpointWriter::begin: step " + std::to_string(step) + " is negative");
  if (block_bytes <= 0 || block_bytes % 4 != 0)
    throw CheckpointError("CheckpointWriter::begin: block_bytes " + std::to_string(block_bytes) +
                          " must be a positive multiple of 4");
  std::string n = nonce.empty() ? random_nonce() : nonce;
  if (!valid_nonce(n))
    throw CheckpointError("CheckpointWriter::begin: nonce '" + n + "' must be 1 to 64 letters or digits");
  int64_t total_bytes = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    const CheckpointArraySpec& a = arrays[i];
    if (!valid_name(a.name))
      throw CheckpointError("CheckpointWriter::begin: array name '" + a.name +
                            "' must be 1 to 100 letters, digits, '_', '-' or '.', not starting with '.'");
    if (a.count < 0 || a.count > (int64_t(1) << 60) / 4)
      throw CheckpointError("CheckpointWriter::begin: array '" + a.name + "' has an invalid count " +
                            std::to_string(a.count));
    for (size_t j = 0; j < i; ++j)
      if (arrays[j].name == a.name)
        throw CheckpointError("CheckpointWriter::begin: array '" + a.name + "' is listed twice");
    total_bytes += a.count * 4;
  }

  mkdir_p(out_dir);
  std::error_code space_error;
  const fs::space_info space = fs::space(out_dir, space_error);
  if (!space_error) {
    int64_t avail = int64_t(space.available);
    if (avail < total_bytes)
      throw CheckpointError("not enough space for checkpoint step " + std::to_string(step) + " in " +
                            out_dir + ": it needs " + human_bytes(total_bytes) +
                            " but the file system has " + human_bytes(avail) +
                            " free; free space, keep fewer checkpoints, or write them to another folder");
  }

  std::string tmp = checkpoint_temp_dir(out_dir, step, n);
  if (!make_folder(tmp))
    throw CheckpointError("the temporary folder " + tmp +
                          " already exists: another save with the same nonce is running, or an "
                          "interrupted one left it; remove it or use another nonce");
  try {
    std::string slices = join_path(tmp, slices_dir_name);
    make_folder(slices);
    for (const CheckpointArraySpec& a : arrays) {
      std::string path = join_path(tmp, a.name + ".bin");
      Fd fd = open_or_throw(path, O_WRONLY | O_CREAT | O_EXCL);
      int64_t bytes = a.count * 4;
      if (bytes > 0) {
        int rc = ::fallocate(fd.get(), 0, 0, off_t(bytes));
        if (rc != 0) {
          int e = errno;
          if (e != EOPNOTSUPP && e != ENOSYS && e != EINVAL)
            throw_sys("reserving " + human_bytes(bytes) + " for", path, e);
          // The file system cannot reserve space: a sparse file; a full disk then shows at
          // write time.
          if (::ftruncate(fd.get(), off_t(bytes)) != 0) throw_sys("sizing", path, errno);
        }
      }
      fd.close_checked();
    }
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  out_dir_ = out_dir;
  tmp_dir_ = tmp;
  nonce_ = n;
  step_ = step;
  block_bytes_ = block_bytes;
  arrays_ = arrays;
  active_ = true;
  return tmp;
}

void CheckpointWriter::write_slice(const std::string& tmp_dir, const std::string& name, int64_t offset,
                                   const float* data, int64_t count) {
  if (!valid_name(name))
    throw CheckpointError("CheckpointWriter::write_slice: invalid array name '" + name + "'");
  std::string path = join_path(tmp_dir, name + ".bin");
  int fd_raw = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_raw < 0) {
    int e = errno;
    if (e == ENOENT) {
      std::vector<std::string> begun;
      bool ok = false;
      for (const std::string& f : list_dir(tmp_dir, &ok))
        if (f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0) begun.push_back(f.substr(0, f.size() - 4));
      if (!ok)
        throw CheckpointError("CheckpointWriter::write_slice: the temporary folder " + tmp_dir +
                              " does not exist: rank 0 must call begin() (and the ranks wait at a "
                              "barrier) before any rank writes, and every rank must use the folder "
                              "begin() returned");
      throw CheckpointError("CheckpointWriter::write_slice: array '" + name + "' is not part of the save in " +
                            tmp_dir + " (begun arrays: " + join_list(begun) + ")");
    }
    throw_sys("opening", path, e);
  }
  Fd fd(fd_raw, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw_sys("inspecting", path, errno);
  if (!S_ISREG(st.st_mode)) throw CheckpointError(path + " is not a regular file");
  int64_t n = int64_t(st.st_size) / 4;
  if (offset < 0 || count < 0 || offset > n || count > n - offset)
    throw CheckpointError("CheckpointWriter::write_slice: slice [" + std::to_string(offset) + ", " +
                          std::to_string(offset + count) + ") of array '" + name +
                          "' lies outside its " + std::to_string(n) +
                          " elements: the ranks disagree about the layout or the model");
  if (count == 0) return;
  if (!data)
    throw CheckpointError("CheckpointWriter::write_slice: null data for " + std::to_string(count) +
                          " elements of array '" + name + "'");
  write_all_at(fd.get(), path, data, size_t(count) * 4, offset * 4);
  fsync_or_throw(fd.get(), path);
  fd.close_checked();
  // Record the slice, for commit's coverage check.
  std::string marker = join_path(join_path(tmp_dir, slices_dir_name),
                                 name + "@" + std::to_string(offset) + "+" + std::to_string(count));
  Fd m = open_or_throw(marker, O_WRONLY | O_CREAT | O_TRUNC);
  m.close_checked();
}

std::string CheckpointWriter::commit(const CheckpointMeta& meta) {
  if (!active_) throw CheckpointError("CheckpointWriter::commit: no save was begun (or it was already committed)");
  std::string final_dir = join_path(out_dir_, checkpoint_folder_name(step_));
  const std::string where = "checkpoint step " + std::to_string(step_) + " in " + out_dir_;
  try {
    // 1. Every element of every array written exactly once.
    std::string slices = join_path(tmp_dir_, slices_dir_name);
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> written;
    for (const CheckpointArraySpec& a : arrays_) written[a.name];
    bool ok = false;
    for (const std::string& m : list_dir(slices, &ok)) {
      size_t at = m.rfind('@'), plus = m.rfind('+');
      if (at == std::string::npos || plus == std::string::npos || plus < at) continue;
      auto it = written.find(m.substr(0, at));
      if (it == written.end()) continue;
      it->second.emplace_back(std::stoll(m.substr(at + 1, plus - at - 1)), std::stoll(m.substr(plus + 1)));
    }
    if (!ok) throw CheckpointError(where + ": the temporary folder " + tmp_dir_ + " has gone (" + slices + ")");
    for (const CheckpointArraySpec& a : arrays_) {
      auto& v = written[a.name];
      std::sort(v.begin(), v.end());
      std::vector<std::string> listed;
      for (auto& s : v) listed.push_back(std::to_string(s.first) + "+" + std::to_string(s.second));
      std::string listing = " (slices written, offset+count: " + (listed.empty() ? "none" : join_list(listed)) + ")";
      int64_t pos = 0;
      for (auto& s : v) {
        if (s.first > pos)
          throw CheckpointError(where + ": elements [" + std::to_string(pos) + ", " + std::to_string(s.first) +
                                ") of array '" + a.name + "' were written by no rank" + listing +
                                "; every rank must write its slices before rank 0 commits");
        if (s.first < pos)
          throw CheckpointError(where + ": elements [" + std::to_string(s.first) + ", " +
                                std::to_string(std::min(pos, s.first + s.second)) + ") of array '" + a.name +
                                "' were written by more than one slice" + listing +
                                ": the ranks disagree about the layout");
        pos = s.first + s.second;
      }
      if (pos < a.count)
        throw CheckpointError(where + ": elements [" + std::to_string(pos) + ", " + std::to_string(a.count) +
                              ") of array '" + a.name + "' were written by no rank" + listing +
                              "; every rank must write its slices before rank 0 commits");
    }

    // 2. Hash what is on disk.
    ojson arrays = ojson::array();
    for (const CheckpointArraySpec& a : arrays_) {
      std::string path = join_path(tmp_dir_, a.name + ".bin");
      Fd fd = open_or_throw(path, O_RDONLY);
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) throw_sys("inspecting", path, errno);
      if (int64_t(st.st_size) != a.count * 4)
        throw CheckpointError(where + ": " + path + " has " + std::to_string(st.st_size) +
                              " bytes but should have " + std::to_string(a.count * 4) +
                              "; something else wrote into the temporary folder");
      uint64_t whole = 0;
      std::vector<uint64_t> blocks;
      hash_file(fd.get(), path, a.count * 4, block_bytes_, &whole, &blocks);
      fsync_or_throw(fd.get(), path);
      ojson b = ojson::array();
      for (uint64_t h : blocks) b.push_back(hex16(h));
      ojson e;
      e["name"] = a.name;
      e["file"] = a.name + ".bin";
      e["dtype"] = "f32";
      e["count"] = a.count;
      e["bytes"] = a.count * 4;
      e["xxh64"] = hex16(whole);
      e["block_xxh64"] = std::move(b);
      arrays.push_back(std::move(e));
    }
    remove_tree(slices);

    // 3. meta.json, last: its presence marks a complete folder.
    ojson m;
    m["format"] = format_name;
    m["version"] = checkpoint_format_version;
    m["step"] = step_;
    m["created_unix"] = int64_t(std::time(nullptr));
    try {
      m["model"] = ojson::parse(meta.model.dump());
      m["data_position"] = ojson::parse(meta.data_position.dump());
      m["rng"] = ojson::parse(meta.rng.dump());
      m["tokenizer_hash"] = hex16(meta.tokenizer_hash);
      m["plan"] = ojson::parse(meta.plan.dump());
      m["extra"] = ojson::parse(meta.extra.dump());
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(where + ": the caller's metadata cannot be written as JSON: " + e.what());
    }
    m["checksum"] = "xxh64";
    m["block_bytes"] = block_bytes_;
    m["arrays"] = std::move(arrays);
    write_file_durable(join_path(tmp_dir_, "meta.json"), m.dump(2) + "\n");
    fsync_dir(tmp_dir_);

    // 4. Rename into place; an existing folder of the same step goes only once the new one is
    // in its place.
    std::error_code ec;
    const fs::file_status final_status = fs::symlink_status(final_dir, ec);
    if (fs::exists(final_status)) {
      if (!fs::is_directory(final_status))
        throw CheckpointError(final_dir + " exists and is not a folder; move it away");
      bool swapped = false;
#ifdef RENAME_EXCHANGE
      if (::renameat2(AT_FDCWD, tmp_dir_.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
        swapped = true;  // tmp_dir_ now holds the old checkpoint
        active_ = false;
        fsync_dir(out_dir_);
        remove_tree(tmp_dir_);
      } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        throw_sys("exchanging " + tmp_dir_ + " with", final_dir, errno);
      }
#endif
      if (!swapped) {
        // No atomic exchange on this file system: old away, new in, old deleted. A crash in
        // between leaves the new folder under its temporary name and find_latest falls back
        // to the newest other complete checkpoint.
        std::string old_dir = join_path(out_dir_, "." + checkpoint_folder_name(step_) + ".old-" + nonce_);
        rename_or_throw(final_dir, old_dir);
        fs::rename(tmp_dir_, final_dir, ec);
        if (ec) {
          std::error_code ignored;
          fs::rename(old_dir, final_dir, ignored);
          throw_sys("renaming " + tmp_dir_ + " to", final_dir, ec.value());
        }
        active_ = false;
        fsync_dir(out_dir_);
        remove_tree(old_dir);
      }
    } else {
      rename_or_throw(tmp_dir_, final_dir);
      active_ = false;
      fsync_dir(out_dir_);
    }
  } catch (...) {
    abort();
    throw;
  }

  // 5. Point `latest` at it.
  std::string latest = join_path(out_dir_, "latest");
  std::string latest_tmp = join_path(out_dir_, "latest.tmp-" + nonce_);
  try {
    write_file_durable(latest_tmp, checkpoint_folder_name(step_) + "\n");
    rename_or_throw(latest_tmp, latest);
    fsync_dir(out_dir_);
  } catch (const CheckpointError& e) {
    std::error_code ignored;
    fs::remove(latest_tmp, ignored);
    throw CheckpointError(std::string(e.what()) + "; the checkpoint itself is complete in " + final_dir +
                          ": resume from it explicitly");
  }
  return final_dir;
}

std::string save_checkpoint(const std::string& out_dir, int64_t step, const CheckpointMeta& meta,
                            const std::vector<CheckpointArray>& arrays, int64_t block_bytes) {
  std::vector<CheckpointArraySpec> specs;
  for (const CheckpointArray& a : arrays) specs.push_back({a.name, a.count});
  CheckpointWriter w;
  std::string tmp = w.begin(out_dir, step, specs, "", block_bytes);
  for (const CheckpointArray& a : arrays) CheckpointWriter::write_slice(tmp, a.name, 0, a.data, a.count);
  return w.commit(meta);
}

// ---- finding checkpoints ---------------------------------------------------------------------
CheckpointScan scan_checkpoints(const std::string& out_dir) {
  CheckpointScan s;
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& n : list_dir(out_dir)) {
    int64_t step;
    std::string p = join_path(out_dir, n);
    if (parse_step_folder(n, &step)) {
      if (is_dir(p) && is_file(join_path(p, "meta.json"))) found.emplace_back(step, n);
    } else if (is_leftover(n)) {
      s.leftovers.push_back(p);
    }
  }
  std::sort(found.begin(), found.end());
  for (auto& f : found) {
    s.steps.push_back(f.first);
    s.complete.push_back(f.second);
  }
  std::string text;
  if (read_small_file(join_path(out_dir, "latest"), &text)) {
    size_t b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
    if (b != std::string::npos) s.latest_name = text.substr(b, e - b + 1);
  }
  return s;
}

std::vector<std::string> list_checkpoints(const std::string& out_dir) {
  CheckpointScan s = scan_checkpoints(out_dir);
  std::vector<std::string> r;
  for (size_t i = s.complete.size(); i-- > 0;) r.push_back(join_path(out_dir, s.complete[i]));
  return r;
}

std::optional<std::string> find_latest(const std::string& out_dir, std::string* note) {
  CheckpointScan s = scan_checkpoints(out_dir);
  std::string msg;
  std::optional<std::string> result;
  bool latest_ok = std::find(s.complete.begin(), s.complete.end(), s.latest_name) != s.complete.end();
  if (latest_ok) {
    result = join_path(out_dir, s.latest_name);
  } else if (!s.complete.empty()) {
    // `latest` is honoured when it is usable (it may deliberately name an older step, e.g.
    // after a run was restarted from there); otherwise the highest step wins.
    result = join_path(out_dir, s.complete.back());
    if (s.latest_name.empty())
      msg = join_path(out_dir, "latest") + " is missing or empty; ";
    else
      msg = join_path(out_dir, "latest") + " names " + s.latest_name + ", which is missing or incomplete; ";
    msg += "using the newest complete checkpoint, " + *result + ".";
  } else if (!s.latest_name.empty()) {
    msg = join_path(out_dir, "latest") + " names " + s.latest_name + ", which is missing or incomplete, and " +
          out_dir + " holds no complete checkpoint.";
  }
  if (!s.leftovers.empty()) {
    if (!msg.empty()) msg += " ";
    msg += std::to_string(s.leftovers.size()) + " leftover(s) of interrupted saves are ignored: " +
           join_list(s.leftovers) + "; remove them (remove_checkpoint_leftovers, or rm -r) when no save is running.";
  }
  if (note) *note = msg;
  return result;
}

std::vector<std::string> remove_checkpoint_leftovers(const std::string& out_dir) {
  std::vector<std::string> removed;
  for (const std::string& p : scan_checkpoints(out_dir).leftovers)
    if (remove_tree(p)) removed.push_back(p);
  return removed;
}

std::vector<std::string> prune_checkpoints(const std::string& out_dir, int keep) {
  if (keep < 1) throw CheckpointError("prune_checkpoints: keep " + std::to_string(keep) + " must be at least 1");
  const CheckpointScan s = scan_checkpoints(out_dir);
  std::vector<std::string> removed;
  const size_t surplus = s.complete.size() > size_t(keep) ? s.complete.size() - size_t(keep) : 0;
  for (size_t i = 0; i < surplus; ++i) {  // oldest first
    if (s.complete[i] == s.latest_name) continue;
    const std::string dir = join_path(out_dir, s.complete[i]);
    const std::string doomed = join_path(out_dir, "." + s.complete[i] + ".old-" + random_nonce());
    rename_or_throw(dir, doomed);
    remove_tree(doomed);
    removed.push_back(dir);
  }
  return removed;
}

void check_model_config(const std::string& dir, const nlohmann::json& saved, const nlohmann::json& current) {
  if (saved == current) return;
  std::string diff;
  if (saved.is_object() && current.is_object()) {
    std::map<std::string, int> keys;
    for (auto it = saved.begin(); it != saved.end(); ++it) keys[it.key()] = 1;
    for (auto it = current.begin(); it != current.end(); ++it) keys[it.key()] = 1;
    for (auto& k : keys) {
      auto a = saved.find(k.first), b = current.find(k.first);
      std::string av = a == saved.end() ? "absent" : (a->is_string() ? a->get<std::string>() : a->dump());
      std::string bv = b == current.end() ? "absent" : (b->is_string() ? b->get<std::string>() : b->dump());
      if (a == saved.end() || b == current.end() || *a != *b) diff += (diff.empty() ? "" : ", ") + k.first + ": " + av + " vs " + bv;
    }
  }
  throw CheckpointError("checkpoint " + dir + " was written for model " + config_text(saved) +
                        " but the current model is " + config_text(current) +
                        (diff.empty() ? "" : " (differs in " + diff + ")") +
                        "; use the same --model (or the same --init-from, for a run that started from one) or start a new run");
}

// ---- reader ----------------------------------------------------------------------------------
CheckpointReader::CheckpointReader(const std::string& dir) : dir_(folder_path(dir).string()) {
  if (!is_dir(dir_)) {
    std::vector<std::string> there = list_checkpoints(parent_of(dir_));
    throw CheckpointError("checkpoint folder " + dir_ + " does not exist; " +
                          (there.empty() ? "there is no checkpoint in " + parent_of(dir_)
                                         : "checkpoints there: " + join_list(there)));
  }
  std::string meta_path = join_path(dir_, "meta.json");
  std::string text;
  if (!is_file(meta_path) || !read_small_file(meta_path, &text))
    throw CheckpointError(meta_path + " is missing or unreadable: " + dir_ +
                          " is not a complete checkpoint (a save interrupted before its end writes none); " +
                          earlier_checkpoints_text(dir_));
  try {
    meta_ = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    corrupted(meta_path + " is not valid JSON (" + e.what() + ")");
  }
  auto field_error = [&](const std::string& field, const std::string& want) {
    corrupted(meta_path + ": field '" + field + "' is missing or not " + want);
  };
  if (!meta_.is_object()) corrupted(meta_path + " is not a JSON object");
  if (!meta_.contains("format") || meta_["format"] != format_name)
    corrupted(meta_path + ": field 'format' is not \"" + std::string(format_name) + "\"");
  if (!meta_.contains("version") || !meta_["version"].is_number_integer()) field_error("version", "an integer");
  int version = meta_["version"].get<int>();
  if (version != checkpoint_format_version)
    throw CheckpointError(meta_path + ": format version " + std::to_string(version) + " but this build reads version " +
                          std::to_string(checkpoint_format_version) +
                          (version > checkpoint_format_version ? "; use a newer GPUMix" : "; convert or start a new run"));
  if (!meta_.contains("step") || !meta_["step"].is_number_integer() || meta_["step"].get<int64_t>() < 0)
    field_error("step", "a non-negative integer");
  if (!meta_.contains("block_bytes") || !meta_["block_bytes"].is_number_integer() ||
      meta_["block_bytes"].get<int64_t>() <= 0 || meta_["block_bytes"].get<int64_t>() % 4 != 0 ||
      meta_["block_bytes"].get<int64_t>() > (int64_t(1) << 40))  // bounded: no overflow in num_blocks
    field_error("block_bytes", "a positive multiple of 4, at most 2^40");
  block_bytes_ = meta_["block_bytes"].get<int64_t>();
  if (meta_.contains("tokenizer_hash")) {
    uint64_t h;
    if (!meta_["tokenizer_hash"].is_string() || !parse_hex16(meta_["tokenizer_hash"].get<std::string>(), &h))
      field_error("tokenizer_hash", "16 hex digits");
  }
  for (const char* k : {"model", "data_position", "rng", "plan", "extra"})
    if (!meta_.contains(k)) meta_[k] = nullptr;
  if (!meta_.contains("arrays") || !meta_["arrays"].is_array()) field_error("arrays", "an array");
  const nlohmann::json& arrays = meta_["arrays"];
  for (size_t i = 0; i < arrays.size(); ++i) {
    const nlohmann::json& e = arrays[i];
    std::string f = "arrays[" + std::to_string(i) + "].";
    if (!e.is_object()) field_error("arrays[" + std::to_string(i) + "]", "an object");
    Array a;
    if (!e.contains("name") || !e["name"].is_string() || !valid_name(e["name"].get<std::string>()))
      field_error(f + "name", "a valid array name");
    a.name = e["name"].get<std::string>();
    if (has_array(a.name)) corrupted(meta_path + ": array '" + a.name + "' is listed twice");
    if (!e.contains("file") || !e["file"].is_string() || !valid_name(e["file"].get<std::string>()))
      field_error(f + "file", "a file name in the folder");
    a.file = join_path(dir_, e["file"].get<std::string>());
    if (!e.contains("dtype") || !e["dtype"].is_string()) field_error(f + "dtype", "a string");
    if (e["dtype"] != "f32")
      throw CheckpointError(meta_path + ": array '" + a.name + "' has dtype " + e["dtype"].dump() +
                            "; this build reads only \"f32\"");
    if (!e.contains("count") || !e["count"].is_number_integer() || e["count"].get<int64_t>() < 0 ||
        e["count"].get<int64_t>() > (int64_t(1) << 60))  // bounded: count * 4 must not overflow
      field_error(f + "count", "a non-negative integer, at most 2^60");
    a.count = e["count"].get<int64_t>();
    if (!e.contains("xxh64") || !e["xxh64"].is_string() || !parse_hex16(e["xxh64"].get<std::string>(), &a.xxh64))
      field_error(f + "xxh64", "16 hex digits");
    if (!e.contains("block_xxh64") || !e["block_xxh64"].is_array() ||
        int64_t(e["block_xxh64"].size()) != num_blocks(a.count * 4, block_bytes_))
      field_error(f + "block_xxh64", "an array of " + std::to_string(num_blocks(a.count * 4, block_bytes_)) + " hashes");
    for (const nlohmann::json& h : e["block_xxh64"]) {
      uint64_t v;
      if (!h.is_string() || !parse_hex16(h.get<std::string>(), &v)) field_error(f + "block_xxh64", "16-hex-digit hashes");
      a.blocks.push_back(v);
    }
    arrays_.push_back(std::move(a));
  }
  // The files: present, with the size meta.json implies.
  for (const Array& a : arrays_) {
    std::error_code ec;
    const int64_t size = is_file(a.file) ? int64_t(fs::file_size(a.file, ec)) : -1;
    if (size < 0 || ec)
      corrupted(a.file + " is missing (meta.json lists array '" + a.name + "' of " + std::to_string(a.count) +
                " elements)");
    if (size != a.count * 4)
      corrupted(a.file + " has " + std::to_string(size) + " bytes but meta.json expects " +
                std::to_string(a.count * 4) + " (" + std::to_string(a.count) + " fp32 elements): the file is " +
                (size < a.count * 4 ? "truncated" : "too long"));
  }
}

CheckpointReader CheckpointReader::open_latest(const std::string& out_dir) {
  std::optional<std::string> d = find_latest(out_dir);
  if (!d)
    throw CheckpointError("no checkpoint in " + out_dir +
                          " (no complete ckpt-<step> folder); check the folder or start a new run");
  return CheckpointReader(*d);
}

void CheckpointReader::corrupted(const std::string& what) const {
  throw CheckpointError(what + "; the checkpoint is corrupted; " + earlier_checkpoints_text(dir_));
}

int64_t CheckpointReader::step() const { return meta_.at("step").get<int64_t>(); }

uint64_t CheckpointReader::tokenizer_hash() const {
  uint64_t h = 0;
  if (meta_.contains("tokenizer_hash")) parse_hex16(meta_["tokenizer_hash"].get<std::string>(), &h);
  return h;
}

std::vector<std::string> CheckpointReader::array_names() const {
  std::vector<std::string> r;
  for (const Array& a : arrays_) r.push_back(a.name);
  return r;
}

bool CheckpointReader::has_array(const std::string& name) const {
  for (const Array& a : arrays_)
    if (a.name == name) return true;
  return false;
}

const CheckpointReader::Array& CheckpointReader::array(const std::string& name) const {
  for (const Array& a : arrays_)
    if (a.name == name) return a;
  throw CheckpointError("checkpoint " + dir_ + " has no array '" + name + "' (it has: " + join_list(array_names()) +
                        ")");
}

int64_t CheckpointReader::array_count(const std::string& name) const { return array(name).count; }

void CheckpointReader::read_slice(const std::string& name, int64_t offset, float* out, int64_t count) const {
  const Array& a = array(name);
  if (offset < 0 || count < 0 || offset > a.count || count > a.count - offset)
    throw CheckpointError("reading slice [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                          ") of array '" + name + "' from " + dir_ + ": the array has " + std::to_string(a.count) +
                          " elements; the model does not match the checkpoint");
  if (count == 0) return;
  Fd fd = open_or_throw(a.file, O_RDONLY);
  int64_t b0 = offset * 4, b1 = (offset + count) * 4;
  if (!verify_blocks_) {
    read_all_at(fd.get(), a.file, out, size_t(b1 - b0), b0);
    return;
  }
  int64_t size = a.count * 4;
  std::vector<char> buf(size_t(std::min(block_bytes_, size)));
  char* dst = reinterpret_cast<char*>(out);
  for (int64_t k = b0 / block_bytes_; k * block_bytes_ < b1; ++k) {
    int64_t s = k * block_bytes_, e = std::min(size, s + block_bytes_);
    try {
      read_all_at(fd.get(), a.file, buf.data(), size_t(e - s), s);
    } catch (const CheckpointError& err) {
      corrupted(err.what());
    }
    uint64_t h = checkpoint_xxh64(buf.data(), size_t(e - s));
    if (h != a.blocks[size_t(k)])
      corrupted(a.file + ": bytes [" + std::to_string(s) + ", " + std::to_string(e) + ") (block " + std::to_string(k) +
                ") have XXH64 " + hex16(h) + " but meta.json records " + hex16(a.blocks[size_t(k)]));
    int64_t cs = std::max(s, b0), ce = std::min(e, b1);
    std::memcpy(dst + (cs - b0), buf.data() + (cs - s), size_t(ce - cs));
  }
}

void CheckpointReader::verify() const {
  for (const Array& a : arrays_) {
    Fd fd = open_or_throw(a.file, O_RDONLY);
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) throw_sys("inspecting", a.file, errno);
    if (int64_t(st.st_size) != a.count * 4)
      corrupted(a.file + " has " + std::to_string(st.st_size) + " bytes but meta.json expects " +
                std::to_string(a.count * 4));
    uint64_t whole = 0;
    std::vector<uint64_t> blocks;
    try {
      hash_file(fd.get(), a.file, a.count * 4, block_bytes_, &whole, &blocks);
    } catch (const CheckpointError& err) {
      corrupted(err.what());
    }
    if (whole != a.xxh64 || blocks != a.blocks) {
      std::string where;
      for (size_t k = 0; k < blocks.size() && k < a.blocks.size(); ++k)
        if (blocks[k] != a.blocks[k]) {
          int64_t s = int64_t(k) * block_bytes_;
          where = " (first differing bytes in [" + std::to_string(s) + ", " +
                  std::to_string(std::min(a.count * 4, s + block_bytes_)) + "))";
          break;
        }
      corrupted(a.file + ": XXH64 is " + hex16(whole) + " but meta.json records " + hex16(a.xxh64) + where);
    }
  }
}

void CheckpointReader::check_model(const nlohmann::json& current) const { check_model_config(dir_, model(), current); }

}  // namespace gpumix
