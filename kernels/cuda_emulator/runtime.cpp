// The emulated CUDA runtime: devices, memory, pools, streams, events, copies. See
// cuda_runtime_api.h for what is provided and emulator.h for the internal contract.
//
// Semantics followed (NVIDIA CUDA Runtime API documentation, section "API synchronization
// behavior", and the Programming Guide's "Streams" / "Events" sections):
// - cudaMemcpy (blocking, on the legacy default stream): pageable host -> device waits for
//   the stream, stages the source and returns (the copy itself may still be in flight);
//   pinned host -> device and device -> host return once the copy has completed;
//   device -> device performs no host-side synchronisation.
// - cudaMemcpyAsync: pageable host -> device returns once the source is staged;
//   device -> pageable host returns when the copy is done (a host synchronisation); with
//   pinned host memory both directions are fully asynchronous; device -> device too.
// - cudaMemset is asynchronous with respect to the host for device memory (the only kind
//   accepted here); cudaMemsetAsync likewise, on its stream.
// - A stream's work runs in order on its worker; streams are unordered except through
//   events (cudaEventRecord / cudaStreamWaitEvent). Only cudaStreamNonBlocking streams can
//   be created (GPUMix creates no other), so the legacy default stream never has to
//   synchronise with other streams; creating a blocking stream is refused.
// - cudaFree and cudaFreeHost wait for the device's (all devices') streams first, as the
//   real ones synchronise; they are not counted by host_sync_count (not a read).
// - An exception escaping stream work becomes the device's sticky error (printed at once),
//   returned by every later synchronising call and by cudaGetLastError.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda_runtime_api.h"
#include "emulator.h"

// Under ASan, device memory is ASan-poisoned outside live allocations: each allocation is
// followed by a redzone of at least kRedzone bytes and a freed block stays poisoned until
// it is handed out again, so a kernel's out-of-bounds index is an ASan report with its
// line. (Arena pages never handed out stay addressable: poisoning the whole arena would
// write shadow for all of its capacity.)
#if defined(__SANITIZE_ADDRESS__)
#define GPUMIX_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUMIX_EMU_ASAN 1
#endif
#endif
#if defined(GPUMIX_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#define EMU_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define EMU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define EMU_POISON(p, n) ((void)(p), (void)(n))
#define EMU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cuda_emulator {

[[noreturn]] void refuse(const std::string& what) {
  fprintf(stderr, "cuda_emulator: %s\n", what.c_str());
  fflush(stderr);
  abort();
}

namespace {

constexpr unsigned char kPoison = 0xFF;  // 0xFFFF.. is a NaN in fp32 and bf16
constexpr size_t kAlign = 256;           // cudaMalloc's documented alignment
constexpr size_t kRedzone = 256;         // after every allocation, never handed out

std::string hex(const void* p) {
  char b[32];
  snprintf(b, sizeof b, "%p", p);
  return b;
}

// ---- configuration ---------------------------------------------------------------------

struct GpuSpec {
  const char* key;
  const char* name;
  int major, minor, sms;
  int clock_khz, memory_clock_khz, bus_width_bits;
  int l2_bytes;
  size_t smem_optin;
  size_t memory;
};

// Datasheet figures (research/GPU-SPECS.md for memory and SMs; clocks, bus width, L2 and
// the opt-in shared memory from NVIDIA's architecture documentation; the emulator uses
// only the shared-memory limit and the memory size, the rest is reported).
const GpuSpec kGpus[] = {
    {"H200", "NVIDIA H200", 9, 0, 132, 1980000, 3201000, 6144, 50 << 20, 227 << 10,
     141000000000ull},
    {"A100", "NVIDIA A100-SXM4-40GB", 8, 0, 108, 1410000, 1215000, 5120, 40 << 20, 163 << 10,
     40000000000ull},
    {"L4", "NVIDIA L4", 8, 9, 58, 2040000, 6251000, 192, 48 << 20, 99 << 10, 24000000000ull},
};

// "2GiB", "512MiB", "1.5GB", "4096" (bytes); 0 when it does not parse.
size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const double v = strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || v <= 0) return 0;
  std::string unit(end);
  for (char& c : unit) c = (char)tolower((unsigned char)c);
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "kib") mul = 1024.0;
  else if (unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") mul = 1e3;
  else if (unit == "mb") mul = 1e6;
  else if (unit == "gb") mul = 1e9;
  else if (unit == "tb") mul = 1e12;
  else return 0;
  return (size_t)(v * mul);
}

struct Config {
  const GpuSpec* gpu = &kGpus[0];
  int count = 1;
  size_t memory = 0;
  int delay_us = 20;
  uint64_t seed = 1;
};

const Config& config() {
  static const Config c = [] {
    Config c;
    if (const char* e = getenv("GPUMIX_EMULATED_GPU")) {
      c.gpu = nullptr;
      for (const GpuSpec& g : kGpus)
        if (strcasecmp(e, g.key) == 0) c.gpu = &g;
      if (!c.gpu)
        refuse(std::string("GPUMIX_EMULATED_GPU=") + e + " is not an emulated GPU; use H200, A100 or L4");
    }
    c.memory = c.gpu->memory;
    if (const char* e = getenv("GPUMIX_EMULATED_GPU_COUNT")) {
      char* end = nullptr;
      const long n = strtol(e, &end, 10);
      if (*e == 0 || *end != 0 || n < 0 || n > 16)
        refuse(std::string("GPUMIX_EMULATED_GPU_COUNT=") + e + " is not a device count from 0 to 16");
      c.count = (int)n;
    }
    if (const char* e = getenv("GPUMIX_EMULATED_GPU_MEMORY")) {
      c.memory = parse_bytes(e);
      if (c.memory < (1u << 20))
        refuse(std::string("GPUMIX_EMULATED_GPU_MEMORY=") + e +
               " is not a memory size of at least 1MiB (e.g. 2GiB, 512MiB, 4000000000)");
    }
    if (const char* e = getenv("GPUMIX_EMULATED_STREAM_DELAY_US")) {
      c.delay_us = atoi(e);
      if (c.delay_us < 0 || c.delay_us > 1000000)
        refuse(std::string("GPUMIX_EMULATED_STREAM_DELAY_US=") + e + " is not 0 to 1000000");
    }
    if (const char* e = getenv("GPUMIX_EMULATED_SEED")) c.seed = strtoull(e, nullptr, 10);
    return c;
  }();
  return c;
}

// ---- errors ----------------------------------------------------------------------------

thread_local cudaError_t t_last_error = cudaSuccess;
std::atomic<int> g_sticky{cudaSuccess};  // the first error raised inside stream work
std::atomic<int64_t> g_host_syncs{0};

// Every entry point returns through ret(): a failure becomes the thread's last error.
cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}
// For synchronising calls: the sticky error of asynchronous work, else success.
cudaError_t sticky() { return ret((cudaError_t)g_sticky.load()); }

// ---- streams ---------------------------------------------------------------------------

struct Task {
  std::string what;
  std::function<void()> fn;
};

}  // namespace
}  // namespace cuda_emulator

struct CUstream_st {
  int device = 0;
  bool legacy = false;
  std::mutex mu;
  std::condition_variable cv;       // work arrived / stop
  std::condition_variable done_cv;  // a task completed
  std::deque<cuda_emulator::Task> queue;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::thread worker;
  std::mt19937_64 rng;
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;  // record sequence numbers
  std::chrono::steady_clock::time_point when;  // of the latest completed record
};

struct CUmemPoolHandle_st;

namespace cuda_emulator {
namespace {

// Registries; allocated once and never destroyed (worker threads may outlive static
// destruction at exit).
struct Live {
  size_t size;
  int device;
  CUmemPoolHandle_st* pool;  // null for cudaMalloc
};
std::shared_mutex g_mem_mutex;  // guards g_live and g_pinned
auto& g_live = *new std::map<uintptr_t, Live>();
auto& g_pinned = *new std::map<uintptr_t, size_t>();

std::mutex g_obj_mutex;  // guards the stream and event registries
auto& g_streams = *new std::set<CUstream_st*>();
auto& g_events = *new std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>>();
std::atomic<uint64_t> g_stream_serial{0};

thread_local int t_device = 0;

void run_worker(CUstream_st* s) {
  std::uniform_int_distribution<int> delay(-config().delay_us, config().delay_us);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return !s->queue.empty() || s->stop; });
      if (s->queue.empty()) return;  // stop, and drained
      task = std::move(s->queue.front());
      s->queue.pop_front();
    }
    // A seeded delay (half the tasks none) shifts this stream against the others and
    // against the host, so that a missing wait shows.
    const int d = delay(s->rng);
    if (d > 0) std::this_thread::sleep_for(std::chrono::microseconds(d));
    try {
      task.fn();
    } catch (const WorkError& e) {
      fprintf(stderr, "cuda_emulator: %s on stream %p (device %d) failed: %s\n",
              task.what.c_str(), (void*)s, s->device, e.what());
      int expected = cudaSuccess;
      g_sticky.compare_exchange_strong(expected, e.error);
    } catch (const std::exception& e) {
      fprintf(stderr, "cuda_emulator: %s on stream %p (device %d) failed: %s\n",
              task.what.c_str(), (void*)s, s->device, e.what());
      int expected = cudaSuccess;
      g_sticky.compare_exchange_strong(expected, (int)cudaErrorLaunchFailure);
    }
    {
      std::lock_guard<std::mutex> lock(s->mu);
      ++s->completed;
    }
    s->done_cv.notify_all();
  }
}

CUstream_st* new_stream(int device, bool legacy) {
  auto* s = new CUstream_st();
  s->device = device;
  s->legacy = legacy;
  s->rng.seed(config().seed * 1000003u + g_stream_serial.fetch_add(1));
  s->worker = std::thread(run_worker, s);
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  g_streams.insert(s);
  return s;
}

CUstream_st* legacy_stream(int device) {
  static std::mutex mu;
  static auto& legacy = *new std::map<int, CUstream_st*>();
  std::lock_guard<std::mutex> lock(mu);
  CUstream_st*& s = legacy[device];
  if (!s) s = new_stream(device, true);
  return s;
}

bool valid_device(int d) { return d >= 0 && d < config().count; }

// The stream a call names: nullptr is the current device's legacy stream.
CUstream_st* resolve(CUstream_st* s, const char* call) {
  if (s == nullptr) {
    if (!valid_device(t_device))
      refuse(std::string(call) + ": no emulated device (GPUMIX_EMULATED_GPU_COUNT=0)");
    return legacy_stream(t_device);
  }
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  if (!g_streams.count(s)) refuse(std::string(call) + ": stream " + hex(s) + " is not a live stream");
  return s;
}

// Enqueues and returns the task's sequence number on the stream.
uint64_t push(CUstream_st* s, std::string what, std::function<void()> fn) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->queue.push_back(Task{std::move(what), std::move(fn)});
    seq = ++s->enqueued;
  }
  s->cv.notify_one();
  return seq;
}

void wait_for(CUstream_st* s, uint64_t seq) {
  std::unique_lock<std::mutex> lock(s->mu);
  s->done_cv.wait(lock, [&] { return s->completed >= seq; });
}

void drain(CUstream_st* s) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    seq = s->enqueued;
  }
  wait_for(s, seq);
}

std::vector<CUstream_st*> streams_of(int device) {  // device < 0: all
  std::vector<CUstream_st*> out;
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  for (CUstream_st* s : g_streams)
    if (device < 0 || s->device == device) out.push_back(s);
  return out;
}

void drain_device(int device) {
  for (CUstream_st* s : streams_of(device)) drain(s);
}

// ---- device memory ---------------------------------------------------------------------

struct Arena {
  int ordinal = 0;
  size_t capacity = 0;
  char* base = nullptr;                 // mmap'd at the first allocation
  std::mutex mu;
  std::map<size_t, size_t> free_ranges;  // offset -> bytes, coalesced
  size_t used = 0;                      // bytes handed out (pools' reservations included)
  std::set<int> peers;                  // peer access enabled from this device
};

Arena& arena(int device) {
  static auto* arenas = [] {
    auto* a = new std::vector<std::unique_ptr<Arena>>();
    for (int i = 0; i < config().count; ++i) {
      a->push_back(std::make_unique<Arena>());
      a->back()->ordinal = i;
      a->back()->capacity = config().memory;
    }
    return a;
  }();
  return *(*arenas)[(size_t)device];
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Nullptr when the arena has no free range that large (the capacity counts).
size_t block_bytes(size_t user_bytes) { return round_up(user_bytes ? user_bytes : 1, kAlign) + kRedzone; }

// A block of block_bytes(user_bytes), filled with 0xFF; only [p, p + user_bytes) is
// addressable under ASan.
char* arena_alloc(Arena& a, size_t user_bytes) {
  const size_t bytes = block_bytes(user_bytes);
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(a.mu);
    if (!a.base) {
      // Address space only (MAP_NORESERVE): pages exist once touched, so a 141 GB device
      // costs what the program allocates.
      // Room beyond the capacity for the redzones (not counted as used).
      const size_t span = round_up(a.capacity + a.capacity / 4 + (64u << 20), 1 << 21);
      void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED)
        refuse("cannot reserve " + std::to_string(a.capacity) + " bytes of address space for "
               "emulated device " + std::to_string(a.ordinal) + ": " + strerror(errno) +
               "; set GPUMIX_EMULATED_GPU_MEMORY lower");
      a.base = (char*)m;
      a.free_ranges[0] = span;
    }
    const size_t counted = round_up(user_bytes ? user_bytes : 1, kAlign);  // redzone not counted
    if (a.used + counted > a.capacity) return nullptr;
    for (auto it = a.free_ranges.begin(); it != a.free_ranges.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t off = it->first, len = it->second;
      a.free_ranges.erase(it);
      if (len > bytes) a.free_ranges[off + bytes] = len - bytes;
      a.used += counted;
      p = a.base + off;
      break;
    }
  }
  if (p) {
    EMU_UNPOISON(p, bytes);
    memset(p, kPoison, bytes);
    EMU_POISON(p + user_bytes, bytes - user_bytes);
  }
  return p;
}

void arena_free(Arena& a, char* p, size_t user_bytes) {
  size_t bytes = block_bytes(user_bytes);
  EMU_UNPOISON(p, bytes);
  memset(p, kPoison, bytes);  // a read after free sees NaN
  EMU_POISON(p, bytes);
  std::lock_guard<std::mutex> lock(a.mu);
  size_t off = (size_t)(p - a.base);
  a.used -= round_up(user_bytes ? user_bytes : 1, kAlign);
  auto next = a.free_ranges.lower_bound(off);
  if (next != a.free_ranges.end() && next->first == off + bytes) {
    bytes += next->second;
    a.free_ranges.erase(next);
  }
  auto it = a.free_ranges.lower_bound(off);
  if (it != a.free_ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == off) {
      off = prev->first;
      bytes += prev->second;
      a.free_ranges.erase(prev);
    }
  }
  a.free_ranges[off] = bytes;
}

// The live allocation holding p (g_mem_mutex held), or null.
const std::pair<const uintptr_t, Live>* find_live(const void* p) {
  auto it = g_live.upper_bound((uintptr_t)p);
  if (it == g_live.begin()) return nullptr;
  --it;
  if ((uintptr_t)p >= it->first + it->second.size) return nullptr;
  return &*it;
}

bool find_pinned(const void* p) {
  auto it = g_pinned.upper_bound((uintptr_t)p);
  if (it == g_pinned.begin()) return false;
  --it;
  return (uintptr_t)p < it->first + it->second;
}

}  // namespace
}  // namespace cuda_emulator

// ---- pools -----------------------------------------------------------------------------

struct PoolBlock {
  char* p;
  size_t size;
  CUstream_st* freed_on;  // the stream whose order frees it
  bool done;              // the free has executed on that stream
};

struct CUmemPoolHandle_st {
  int device = 0;
  std::mutex mu;
  uint64_t release_threshold = 0;  // CUDA's default: release at every synchronisation
  std::vector<std::shared_ptr<PoolBlock>> free_blocks;
  std::unordered_map<char*, size_t> in_use;  // handed out: pointer -> block size
  size_t reserved = 0, reserved_high = 0, used = 0, used_high = 0;
};

namespace cuda_emulator {
namespace {

auto& g_pools = *new std::set<CUmemPoolHandle_st*>();  // under g_obj_mutex

// Gives blocks whose free has executed back to the arena while the pool reserves more
// than keep bytes (pool mutex held).
void pool_release(CUmemPoolHandle_st* pool, size_t keep) {
  auto& v = pool->free_blocks;
  for (size_t i = 0; i < v.size() && pool->reserved > keep;) {
    if (!v[i]->done) {
      ++i;
      continue;
    }
    arena_free(arena(pool->device), v[i]->p, v[i]->size);
    pool->reserved -= v[i]->size;
    v.erase(v.begin() + (long)i);
  }
}

// After a synchronising call: pools hold at most their release threshold (CUDA releases
// unused pool memory above it "at the next synchronisation").
void trim_pools(int device) {
  std::vector<CUmemPoolHandle_st*> pools;
  {
    std::lock_guard<std::mutex> lock(g_obj_mutex);
    for (CUmemPoolHandle_st* p : g_pools)
      if (device < 0 || p->device == device) pools.push_back(p);
  }
  for (CUmemPoolHandle_st* p : pools) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (p->reserved > p->release_threshold) pool_release(p, (size_t)p->release_threshold);
  }
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

const char* memory_name(Memory m) {
  return m == Memory::device ? "device memory"
                             : m == Memory::pinned_host ? "pinned host memory"
                                                        : "pageable host memory (or freed device memory)";
}

// The copy engine: one copy, checked against its direction, on stream s; blocking for
// cudaMemcpy. Returns the error to report.
cudaError_t copy(const char* call, void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                 CUstream_st* stream, bool blocking) {
  if (n == 0) return cudaSuccess;
  CUstream_st* s = resolve(stream, call);
  const Memory md = classify(dst), ms = classify(src);
  if (kind == cudaMemcpyDefault) {
    kind = ms == Memory::device ? (md == Memory::device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                : (md == Memory::device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  }
  const std::string where = std::string(call) + " (" + kind_name(kind) + ")";
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyHostToHost)
    refuse(where + ": host-to-host copies are not emulated (GPUMix makes none): dst and src are " +
           memory_name(md) + " and " + memory_name(ms));
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
    refuse(where + ": kind " + std::to_string((int)kind) + " is not a cudaMemcpyKind");
  if (dst_dev) require_device(dst, n, (where + " dst").c_str());
  if (src_dev) require_device(src, n, (where + " src").c_str());
  if (!dst_dev && md == Memory::device)
    refuse(where + ": dst " + hex(dst) + " is device memory but the kind says host; use " +
           (src_dev ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyHostToDevice"));
  if (!src_dev && ms == Memory::device)
    refuse(where + ": src " + hex(src) + " is device memory but the kind says host; use " +
           (dst_dev ? "cudaMemcpyDeviceToDevice" : "cudaMemcpyDeviceToHost"));

  const std::string what = where + " of " + std::to_string(n) + " bytes";
  if (kind == cudaMemcpyHostToDevice) {
    if (ms == Memory::pageable_host) {
      // Staged now: the caller may reuse src on return; the transfer itself is stream work.
      if (blocking) drain(s);
      auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + n);
      push(s, what, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
      if (blocking) g_host_syncs++;
      return cudaSuccess;
    }
    const uint64_t seq = push(s, what, [dst, src, n] { memcpy(dst, src, n); });
    if (blocking) {
      wait_for(s, seq);
      g_host_syncs++;
      return sticky();
    }
    return cudaSuccess;
  }
  const uint64_t seq = push(s, what, [dst, src, n] { memmove(dst, src, n); });
  if (kind == cudaMemcpyDeviceToHost && (blocking || md == Memory::pageable_host)) {
    wait_for(s, seq);
    g_host_syncs++;
    return sticky();
  }
  return cudaSuccess;
}

cudaError_t memset_on(const char* call, void* p, int value, size_t n, CUstream_st* stream) {
  if (n == 0) return cudaSuccess;
  CUstream_st* s = resolve(stream, call);
  require_device(p, n, (std::string(call) + " devPtr").c_str());
  push(s, std::string(call) + " of " + std::to_string(n) + " bytes",
       [p, value, n] { memset(p, value, n); });
  return cudaSuccess;
}

std::shared_ptr<CUevent_st> event_of(cudaEvent_t e, const char* call) {
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  auto it = g_events.find(e);
  if (it == g_events.end()) refuse(std::string(call) + ": event " + hex(e) + " is not a live event");
  return it->second;
}

}  // namespace

// ---- the contract (emulator.h) ----------------------------------------------------------

void enqueue(CUstream_st* stream, const char* what, std::function<void()> work) {
  push(resolve(stream, what), what, std::move(work));
}

Memory classify(const void* p, int* device_ordinal) {
  std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
  if (const auto* a = find_live(p)) {
    if (device_ordinal) *device_ordinal = a->second.device;
    return Memory::device;
  }
  return find_pinned(p) ? Memory::pinned_host : Memory::pageable_host;
}

void require_device(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  std::string why;
  {
    std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
    const auto* a = find_live(p);
    if (a && (uintptr_t)p + bytes <= a->first + a->second.size) return;
    if (a) {
      why = "it starts in the " + std::to_string(a->second.size) + "-byte allocation at " +
            hex((void*)a->first) + " on device " + std::to_string(a->second.device) + " but ends " +
            std::to_string((uintptr_t)p + bytes - a->first - a->second.size) + " bytes past it";
    } else {
      why = std::string("it is ") + (find_pinned(p) ? "pinned host memory" : "not device memory "
            "(pageable host memory, or device memory already freed)");
    }
  }
  refuse(std::string(what) + ": [" + hex(p) + ", +" + std::to_string(bytes) +
         " bytes) must lie in one live device allocation, but " + why);
}

int64_t host_sync_count() { return g_host_syncs.load(); }

void set_last_error(int cuda_error) { t_last_error = (cudaError_t)cuda_error; }

int stream_device(CUstream_st* s) { return resolve(s, "stream_device")->device; }

}  // namespace cuda_emulator

// ---- the runtime API ----------------------------------------------------------------------

using namespace cuda_emulator;

extern "C" {

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define GPUMIX_EMU_NAME(x) \
  case x: return #x;
    GPUMIX_EMU_NAME(cudaSuccess)
    GPUMIX_EMU_NAME(cudaErrorInvalidValue)
    GPUMIX_EMU_NAME(cudaErrorMemoryAllocation)
    GPUMIX_EMU_NAME(cudaErrorInitializationError)
    GPUMIX_EMU_NAME(cudaErrorInvalidConfiguration)
    GPUMIX_EMU_NAME(cudaErrorInvalidPitchValue)
    GPUMIX_EMU_NAME(cudaErrorInvalidSymbol)
    GPUMIX_EMU_NAME(cudaErrorInvalidDevicePointer)
    GPUMIX_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    GPUMIX_EMU_NAME(cudaErrorInsufficientDriver)
    GPUMIX_EMU_NAME(cudaErrorInvalidDeviceFunction)
    GPUMIX_EMU_NAME(cudaErrorNoDevice)
    GPUMIX_EMU_NAME(cudaErrorInvalidDevice)
    GPUMIX_EMU_NAME(cudaErrorPeerAccessUnsupported)
    GPUMIX_EMU_NAME(cudaErrorInvalidResourceHandle)
    GPUMIX_EMU_NAME(cudaErrorNotReady)
    GPUMIX_EMU_NAME(cudaErrorIllegalAddress)
    GPUMIX_EMU_NAME(cudaErrorLaunchOutOfResources)
    GPUMIX_EMU_NAME(cudaErrorPeerAccessAlreadyEnabled)
    GPUMIX_EMU_NAME(cudaErrorPeerAccessNotEnabled)
    GPUMIX_EMU_NAME(cudaErrorLaunchFailure)
    GPUMIX_EMU_NAME(cudaErrorNotPermitted)
    GPUMIX_EMU_NAME(cudaErrorNotSupported)
    GPUMIX_EMU_NAME(cudaErrorUnknown)
#undef GPUMIX_EMU_NAME
  }
  return "cudaErrorUnknown";
}

// The strings of the real runtime.
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetLastError(void) {
  const int s = g_sticky.load();
  if (s != cudaSuccess) return (cudaError_t)s;  // sticky: never reset
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  const int s = g_sticky.load();
  return s != cudaSuccess ? (cudaError_t)s : t_last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = config().count;
  return ret(config().count == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (config().count == 0) return ret(cudaErrorNoDevice);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  const GpuSpec& g = *config().gpu;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", g.name);
  p->totalGlobalMem = config().memory;
  p->sharedMemPerBlock = 48 << 10;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = g.major;
  p->minor = g.minor;
  p->multiProcessorCount = g.sms;
  p->memoryBusWidth = g.bus_width_bits;
  p->l2CacheSize = g.l2_bytes;
  p->sharedMemPerBlockOptin = g.smem_optin;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  const GpuSpec& g = *config().gpu;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrMaxBlockDimX: *value = 1024; break;
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrClockRate: *value = g.clock_khz; break;
    case cudaDevAttrMultiProcessorCount: *value = g.sms; break;
    case cudaDevAttrMemoryClockRate: *value = g.memory_clock_khz; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = g.bus_width_bits; break;
    case cudaDevAttrL2CacheSize: *value = g.l2_bytes; break;
    case cudaDevAttrComputeCapabilityMajor: *value = g.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = g.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)g.smem_optin; break;
    default:
      refuse("cudaDeviceGetAttribute: attribute " + std::to_string((int)attr) + " is not emulated");
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
  drain_device(t_device);
  g_host_syncs++;
  trim_pools(t_device);
  return sticky();
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  if (!valid_device(device) || !valid_device(peer_device)) return ret(cudaErrorInvalidDevice);
  *can_access = device != peer_device ? 1 : 0;  // a device is not its own peer
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags) {
  if (flags != 0) return ret(cudaErrorInvalidValue);  // "flags: reserved, must be 0"
  if (!valid_device(peer_device) || peer_device == t_device) return ret(cudaErrorInvalidDevice);
  Arena& a = arena(t_device);
  std::lock_guard<std::mutex> lock(a.mu);
  if (!a.peers.insert(peer_device).second) return ret(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
  Arena& a = arena(t_device);
  std::lock_guard<std::mutex> lock(a.mu);
  *free_bytes = a.capacity - a.used;
  *total_bytes = a.capacity;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
  if (size == 0) {  // the real one returns success and a null pointer
    *ptr = nullptr;
    return cudaSuccess;
  }
  char* p = arena_alloc(arena(t_device), size);
  if (!p) {
    *ptr = nullptr;
    return ret(cudaErrorMemoryAllocation);
  }
  std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
  g_live[(uintptr_t)p] = Live{size, t_device, nullptr};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Live live;
  {
    std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
    auto it = g_live.find((uintptr_t)ptr);
    if (it == g_live.end()) {
      const auto* inside = find_live(ptr);
      refuse("cudaFree(" + hex(ptr) + "): " +
             (inside ? "not the start of an allocation (it lies inside the one at " +
                           hex((void*)inside->first) + ")"
                     : std::string("not a live cudaMalloc allocation (a double free, or host memory)")));
    }
    live = it->second;
  }
  if (live.pool)
    refuse("cudaFree(" + hex(ptr) + "): memory from cudaMallocFromPoolAsync is freed with cudaFreeAsync here");
  drain_device(live.device);  // the real cudaFree synchronises: work still using ptr finishes
  {
    std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
    g_live.erase((uintptr_t)ptr);
  }
  arena_free(arena(live.device), (char*)ptr, live.size);
  return sticky();
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (flags & ~(unsigned)cudaHostAllocPortable)
    refuse("cudaHostAlloc: flags " + std::to_string(flags) + " (only cudaHostAllocDefault and "
           "cudaHostAllocPortable are emulated; cudaHostAllocMapped / WriteCombined are not)");
  const size_t bytes = round_up(size ? size : 1, 4096);
  void* p = aligned_alloc(4096, bytes);
  if (!p) return ret(cudaErrorMemoryAllocation);
  memset(p, kPoison, bytes);  // uninitialised on a GPU too: poison shows a read before the copy
  std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
  g_pinned[(uintptr_t)p] = size ? size : 1;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::shared_lock<std::shared_mutex> lock(g_mem_mutex);
    if (!g_pinned.count((uintptr_t)ptr))
      refuse("cudaFreeHost(" + hex(ptr) + "): not a live cudaHostAlloc / cudaMallocHost allocation");
  }
  drain_device(-1);  // copies in flight from or to it finish first, as the real one syncs
  {
    std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
    g_pinned.erase((uintptr_t)ptr);
  }
  free(ptr);
  return sticky();
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return ret(copy("cudaMemcpy", dst, src, count, kind, nullptr, true));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return ret(copy("cudaMemcpyAsync", dst, src, count, kind, stream, false));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream) {
  if (!valid_device(dst_device) || !valid_device(src_device)) return ret(cudaErrorInvalidDevice);
  if (count == 0) return cudaSuccess;
  require_device(dst, count, "cudaMemcpyPeerAsync dst");
  require_device(src, count, "cudaMemcpyPeerAsync src");
  int dd = -1, sd = -1;
  classify(dst, &dd);
  classify(src, &sd);
  if (dd != dst_device || sd != src_device)
    refuse("cudaMemcpyPeerAsync: dst lies on device " + std::to_string(dd) + " (dstDevice says " +
           std::to_string(dst_device) + "), src on device " + std::to_string(sd) +
           " (srcDevice says " + std::to_string(src_device) + ")");
  return ret(copy("cudaMemcpyPeerAsync", dst, src, count, cudaMemcpyDeviceToDevice, stream, false));
}

cudaError_t cudaMemset(void* p, int value, size_t count) {
  return ret(memset_on("cudaMemset", p, value, count, nullptr));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  return ret(memset_on("cudaMemsetAsync", p, value, count, stream));
}

// ---- pools ---------------------------------------------------------------------------------

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (props->allocType != cudaMemAllocationTypePinned)
    refuse("cudaMemPoolCreate: allocType " + std::to_string((int)props->allocType) +
           " (only cudaMemAllocationTypePinned is emulated)");
  if (props->handleTypes != cudaMemHandleTypeNone)
    refuse("cudaMemPoolCreate: handleTypes " + std::to_string((int)props->handleTypes) +
           " (only cudaMemHandleTypeNone is emulated)");
  if (props->location.type != cudaMemLocationTypeDevice)
    refuse("cudaMemPoolCreate: location.type " + std::to_string((int)props->location.type) +
           " (only cudaMemLocationTypeDevice is emulated)");
  if (props->maxSize != 0 || props->usage != 0 || props->win32SecurityAttributes)
    refuse("cudaMemPoolCreate: maxSize, usage and win32SecurityAttributes must be 0 (not emulated)");
  if (!valid_device(props->location.id)) return ret(cudaErrorInvalidDevice);
  auto* p = new CUmemPoolHandle_st();
  p->device = props->location.id;
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  g_pools.insert(p);
  *pool = p;
  return cudaSuccess;
}

static CUmemPoolHandle_st* pool_of(cudaMemPool_t pool, const char* call) {
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  if (!g_pools.count(pool)) refuse(std::string(call) + ": pool " + hex(pool) + " is not a live pool");
  return pool;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  CUmemPoolHandle_st* p = pool_of(pool, "cudaMemPoolDestroy");
  drain_device(p->device);
  {
    std::lock_guard<std::mutex> lock(p->mu);
    if (!p->in_use.empty())
      refuse("cudaMemPoolDestroy: " + std::to_string(p->in_use.size()) +
             " allocations of the pool are not freed yet");
    pool_release(p, 0);
  }
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  g_pools.erase(p);
  delete p;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  CUmemPoolHandle_st* p = pool_of(pool, "cudaMemPoolSetAttribute");
  if (attr != cudaMemPoolAttrReleaseThreshold)
    refuse("cudaMemPoolSetAttribute: attribute " + std::to_string((int)attr) +
           " (only cudaMemPoolAttrReleaseThreshold is emulated)");
  std::lock_guard<std::mutex> lock(p->mu);
  p->release_threshold = *(const uint64_t*)value;
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  CUmemPoolHandle_st* p = pool_of(pool, "cudaMemPoolGetAttribute");
  std::lock_guard<std::mutex> lock(p->mu);
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: v = p->release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: v = p->reserved; break;
    case cudaMemPoolAttrReservedMemHigh: v = p->reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: v = p->used; break;
    case cudaMemPoolAttrUsedMemHigh: v = p->used_high; break;
    default:
      refuse("cudaMemPoolGetAttribute: attribute " + std::to_string((int)attr) + " is not emulated");
  }
  *(uint64_t*)value = v;
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  CUmemPoolHandle_st* p = pool_of(pool, "cudaMemPoolTrimTo");
  std::lock_guard<std::mutex> lock(p->mu);
  pool_release(p, min_bytes_to_keep);
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  CUmemPoolHandle_st* p = pool_of(pool, "cudaMallocFromPoolAsync");
  CUstream_st* s = resolve(stream, "cudaMallocFromPoolAsync");
  const size_t bytes = round_up(size ? size : 1, kAlign);
  char* got = nullptr;
  size_t got_size = 0;
  {
    std::lock_guard<std::mutex> lock(p->mu);
    // Stream-ordered reuse: a block whose free has executed, or one freed on this same
    // stream (its free precedes this allocation's use in stream order). Best fit.
    auto& v = p->free_blocks;
    size_t best = v.size();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i]->size < bytes || !(v[i]->done || v[i]->freed_on == s)) continue;
      if (best == v.size() || v[i]->size < v[best]->size) best = i;
    }
    if (best < v.size()) {
      got = v[best]->p;
      got_size = v[best]->size;
      v.erase(v.begin() + (long)best);
    } else {
      got = arena_alloc(arena(p->device), bytes);
      if (!got) {  // give the pool's unused memory back and try once more
        pool_release(p, 0);
        got = arena_alloc(arena(p->device), bytes);
      }
      if (!got) {
        *ptr = nullptr;
        return ret(cudaErrorMemoryAllocation);
      }
      got_size = bytes;
      p->reserved += bytes;
      p->reserved_high = std::max(p->reserved_high, p->reserved);
    }
    p->in_use[got] = got_size;
    p->used += got_size;
    p->used_high = std::max(p->used_high, p->used);
  }
#if defined(GPUMIX_EMU_ASAN)
  // Addressable exactly [got, got + size), in stream order (a reused block's free may not
  // have run yet on this stream).
  push(s, "cudaMallocFromPoolAsync", [got, size, got_size] {
    EMU_UNPOISON(got, size ? size : 1);
    EMU_POISON(got + (size ? size : 1), got_size - (size ? size : 1));
  });
#endif
  std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
  g_live[(uintptr_t)got] = Live{size ? size : 1, p->device, p};
  *ptr = got;
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  CUstream_st* s = resolve(stream, "cudaFreeAsync");
  CUmemPoolHandle_st* pool = nullptr;
  {
    std::unique_lock<std::shared_mutex> lock(g_mem_mutex);
    auto it = g_live.find((uintptr_t)ptr);
    if (it == g_live.end() || !it->second.pool)
      refuse("cudaFreeAsync(" + hex(ptr) + "): not a live allocation from cudaMallocFromPoolAsync" +
             (it == g_live.end() ? " (a double free, or host memory)" : " (use cudaFree)"));
    pool = it->second.pool;
    g_live.erase(it);  // work launched from now on may not use it
  }
  auto block = std::make_shared<PoolBlock>();
  {
    std::lock_guard<std::mutex> lock(pool->mu);
    block->p = (char*)ptr;
    block->size = pool->in_use.at((char*)ptr);
    block->freed_on = s;
    block->done = false;
    pool->in_use.erase((char*)ptr);
    pool->used -= block->size;
    pool->free_blocks.push_back(block);
  }
  push(s, "cudaFreeAsync", [pool, block] {
    EMU_UNPOISON(block->p, block->size);
    memset(block->p, kPoison, block->size);  // work ordered after the free sees NaN
    EMU_POISON(block->p, block->size);
    std::lock_guard<std::mutex> lock(pool->mu);
    block->done = true;
  });
  return cudaSuccess;
}

// ---- streams and events -------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (flags != cudaStreamNonBlocking)
    refuse("cudaStreamCreateWithFlags: flags " + std::to_string(flags) +
           ": only cudaStreamNonBlocking streams are emulated (a blocking stream's implicit "
           "synchronisation with the legacy default stream is not modelled)");
  if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
  *stream = new_stream(t_device, false);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return ret(cudaErrorInvalidResourceHandle);
  CUstream_st* s = resolve(stream, "cudaStreamDestroy");
  {
    std::lock_guard<std::mutex> lock(g_obj_mutex);
    g_streams.erase(s);
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
  }
  s->cv.notify_one();
  s->worker.join();  // the real call returns at once and frees the stream once its work is
                     // done; waiting here is the same to the caller (no host read)
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream, "cudaStreamSynchronize");
  drain(s);
  g_host_syncs++;
  trim_pools(s->device);
  return sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming))
    refuse("cudaEventCreateWithFlags: flags " + std::to_string(flags) +
           " (cudaEventInterprocess is not emulated)");
  if (!valid_device(t_device)) return ret(cudaErrorNoDevice);
  auto e = std::make_shared<CUevent_st>();
  e->device = t_device;
  e->flags = flags;
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  g_events[e.get()] = e;
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(g_obj_mutex);
  // Pending records and waits hold their own reference: the event dies after them.
  if (g_events.erase(event) == 0) return ret(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::shared_ptr<CUevent_st> e = event_of(event, "cudaEventRecord");
  CUstream_st* s = resolve(stream, "cudaEventRecord");
  // "cudaEventRecord ... stream and event must be on the same device" (else the runtime
  // returns cudaErrorInvalidResourceHandle).
  if (s->device != e->device) return ret(cudaErrorInvalidResourceHandle);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    seq = ++e->recorded;
  }
  push(s, "cudaEventRecord", [e, seq] {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      e->completed = std::max(e->completed, seq);
      e->when = std::chrono::steady_clock::now();  // measured on the worker, in order
    }
    e->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> e = event_of(event, "cudaEventQuery");
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->completed < e->recorded) return ret(cudaErrorNotReady);
  return sticky();
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> e = event_of(event, "cudaEventSynchronize");
  {
    std::unique_lock<std::mutex> lock(e->mu);
    const uint64_t seq = e->recorded;  // the latest record at the time of the call
    e->cv.wait(lock, [&] { return e->completed >= seq; });
  }
  g_host_syncs++;
  trim_pools(e->device);
  return sticky();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::shared_ptr<CUevent_st> a = event_of(start, "cudaEventElapsedTime");
  std::shared_ptr<CUevent_st> b = event_of(end, "cudaEventElapsedTime");
  // Events created with cudaEventDisableTiming, or never recorded: invalid handle, as the
  // real runtime; not yet complete: not ready.
  if ((a->flags | b->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
  std::chrono::steady_clock::time_point ta, tb;
  {
    std::lock_guard<std::mutex> la(a->mu);
    if (a->recorded == 0) return ret(cudaErrorInvalidResourceHandle);
    if (a->completed < a->recorded) return ret(cudaErrorNotReady);
    ta = a->when;
  }
  {
    std::lock_guard<std::mutex> lb(b->mu);
    if (b->recorded == 0) return ret(cudaErrorInvalidResourceHandle);
    if (b->completed < b->recorded) return ret(cudaErrorNotReady);
    tb = b->when;
  }
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags != 0)
    refuse("cudaStreamWaitEvent: flags " + std::to_string(flags) + " (only cudaEventWaitDefault is emulated)");
  CUstream_st* s = resolve(stream, "cudaStreamWaitEvent");
  std::shared_ptr<CUevent_st> e = event_of(event, "cudaStreamWaitEvent");
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    seq = e->recorded;  // waits for the latest record; none yet: nothing to wait for
  }
  if (seq == 0) return cudaSuccess;
  push(s, "cudaStreamWaitEvent", [e, seq] {
    std::unique_lock<std::mutex> lock(e->mu);
    e->cv.wait(lock, [&] { return e->completed >= seq; });
  });
  return cudaSuccess;
}

}  // extern "C"
