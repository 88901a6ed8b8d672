// The emulated CUDA device's execution of kernels: the launcher's checks, the block pool,
// the fibers that are a block's threads, barriers, warp shuffles and shared memory
// (launch.h says what is modelled and why).
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cub/device/device_radix_sort.cuh"
#include "launch.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUMIX_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GPUMIX_EMU_ASAN 1
#endif
#if defined(GPUMIX_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace cuda_emulator {

uint64_t global_timer_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace detail {

thread_local const uint3* tl_thread_idx = nullptr;
thread_local const uint3* tl_block_idx = nullptr;
thread_local const dim3* tl_block_dim = nullptr;
thread_local const dim3* tl_grid_dim = nullptr;

namespace {

constexpr unsigned kMaxThreads = 1024;
#if defined(GPUMIX_EMU_ASAN)
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kRedzone = 64;  // poisoned for ASan between static shared arrays
#else
constexpr size_t kStackBytes = 64 * 1024;
constexpr size_t kRedzone = 0;
#endif
constexpr size_t kSmemBuffer = 512 * 1024;  // > the largest opt-in limit plus redzones

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* s = getenv(name);
  if (!s || !*s) return dflt;
  char* end = nullptr;
  const unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0') {
    fprintf(stderr, "cuda_emulator: %s=%s is not a non-negative integer\n", name, s);
    abort();
  }
  return v;
}

std::string dim_str(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}
std::string dim_str(uint3 d) { return dim_str(dim3(d)); }

// Per-kernel state kept across launches: the attribute, the static shared bytes seen.
struct KernelRecord {
  long long max_dynamic = -1;  // cudaFuncAttributeMaxDynamicSharedMemorySize; -1: not set
  long long static_bytes = -1;  // -1: not run yet
};
std::mutex g_kernels_mutex;
std::unordered_map<const void*, KernelRecord>& kernels() {
  static auto* m = new std::unordered_map<const void*, KernelRecord>;
  return *m;
}

struct DeviceLimits {
  int max_threads, max_bx, max_by, max_bz, max_gx, max_gy, max_gz;
  size_t smem_default, smem_optin;
};
DeviceLimits query_limits(int dev) {
  auto attr = [dev](cudaDeviceAttr a, const char* name) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess)
      refuse(std::string("launch: cudaDeviceGetAttribute(") + name + ") failed");
    return v;
  };
  DeviceLimits l;
  l.max_threads = attr(cudaDevAttrMaxThreadsPerBlock, "cudaDevAttrMaxThreadsPerBlock");
  l.max_bx = attr(cudaDevAttrMaxBlockDimX, "cudaDevAttrMaxBlockDimX");
  l.max_by = attr(cudaDevAttrMaxBlockDimY, "cudaDevAttrMaxBlockDimY");
  l.max_bz = attr(cudaDevAttrMaxBlockDimZ, "cudaDevAttrMaxBlockDimZ");
  l.max_gx = attr(cudaDevAttrMaxGridDimX, "cudaDevAttrMaxGridDimX");
  l.max_gy = attr(cudaDevAttrMaxGridDimY, "cudaDevAttrMaxGridDimY");
  l.max_gz = attr(cudaDevAttrMaxGridDimZ, "cudaDevAttrMaxGridDimZ");
  l.smem_default =
      (size_t)attr(cudaDevAttrMaxSharedMemoryPerBlock, "cudaDevAttrMaxSharedMemoryPerBlock");
  l.smem_optin = (size_t)attr(cudaDevAttrMaxSharedMemoryPerBlockOptin,
                              "cudaDevAttrMaxSharedMemoryPerBlockOptin");
  return l;
}
// The limits of a device never change in a process: queried once per device.
DeviceLimits limits_of_current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) refuse("launch: cudaGetDevice failed");
  static std::mutex m;
  static std::unordered_map<int, DeviceLimits>* cache = new std::unordered_map<int, DeviceLimits>;
  std::lock_guard<std::mutex> lock(m);
  auto it = cache->find(dev);
  if (it == cache->end()) it = cache->emplace(dev, query_limits(dev)).first;
  return it->second;
}

// Names of enqueued work live as long as the process (the runtime may keep the pointer).
const char* intern(const std::string& s) {
  static std::mutex m;
  static std::unordered_map<std::string, const char*>* names =
      new std::unordered_map<std::string, const char*>;
  std::lock_guard<std::mutex> lock(m);
  auto it = names->find(s);
  if (it == names->end()) it = names->emplace(s, strdup(s.c_str())).first;
  return it->second;
}

// ---- one grid ---------------------------------------------------------------------------

struct Grid {
  LaunchSite site;
  dim3 grid, block;
  size_t dyn_smem;
  size_t smem_limit;  // static + dynamic bytes allowed per block
  std::function<void()> body;
  uint64_t total;
  uint64_t seed;
  // Block order: a seeded permutation (an explicit one when small, else an affine map).
  std::vector<uint32_t> order;
  uint64_t affine_a = 1, affine_b = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<long long> static_bytes{-1};
  std::mutex m;
  std::condition_variable cv;

  uint64_t block_at(uint64_t i) const {
    if (!order.empty()) return order[i];
    return (affine_a * i + affine_b) % total;
  }
};

[[noreturn]] void fault_at(const Grid& g, uint3 block, const std::string& thread,
                           const std::string& what) {
  fprintf(stderr,
          "cuda_emulator: device fault in kernel %s (launched at %s:%d), block %s%s: %s\n",
          g.site.name, g.site.file, g.site.line, dim_str(block).c_str(), thread.c_str(),
          what.c_str());
  fflush(stderr);
  abort();
}

// ---- fibers -----------------------------------------------------------------------------

enum class FiberState { runnable, at_barrier, at_shuffle, exited };

struct Fiber {
  ucontext_t ctx;
  char* stack = nullptr;  // usable bottom (above the guard page)
  unsigned tid = 0;
  uint3 idx{0, 0, 0};
  FiberState state = FiberState::runnable;
  const char* file = nullptr;  // where it waits
  int line = 0;
  // shuffle
  unsigned shfl_mask = 0;
  int shfl_lane_mask = 0, shfl_width = 32;
  uint64_t shfl_value = 0, shfl_result = 0;
#if defined(GPUMIX_EMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

struct Warp {
  unsigned present = 0;  // lanes that exist in the block
  unsigned exited = 0;
  unsigned arrived = 0;  // lanes waiting in the pending shuffle
  unsigned want = 0;     // its mask
  const char* file = nullptr;
  int line = 0;
};

struct SharedArray {
  const void* tag;
  void* ptr;
};

// The state of the block running on this OS thread (one block at a time per OS thread).
struct Runner {
  std::vector<Fiber> fibers;
  char* stacks = nullptr;  // kMaxThreads stacks, each with a guard page below
  size_t stack_stride = 0;
  ucontext_t sched;
#if defined(GPUMIX_EMU_ASAN)
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
  void* sched_fake_stack = nullptr;
#endif
  unsigned char* smem = nullptr;
  size_t smem_high = 0;  // bytes dirtied by earlier blocks
  size_t smem_used = 0;     // offset of the next static array
  size_t static_total = 0;  // bytes of the block's static arrays
  std::vector<SharedArray> statics;

  Grid* grid = nullptr;
  uint3 block_idx{0, 0, 0};
  unsigned nthreads = 0, live = 0;
  unsigned at_barrier = 0;
  const char* bar_file = nullptr;
  int bar_line = 0;
  unsigned bar_first = 0;
  bool some_exited = false;
  unsigned first_exited = 0;
  std::vector<Warp> warps;
  std::deque<unsigned> runq;
  Fiber* current = nullptr;
  std::mt19937_64 rng;

  Runner() {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_stride = kStackBytes + page;
    stacks = (char*)mmap(nullptr, stack_stride * kMaxThreads, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) refuse("launch: mmap of the fiber stacks failed");
    for (unsigned i = 0; i < kMaxThreads; ++i)
      mprotect(stacks + i * stack_stride, page, PROT_NONE);  // the guard page
    fibers.resize(kMaxThreads);
    for (unsigned i = 0; i < kMaxThreads; ++i) {
      fibers[i].stack = stacks + i * stack_stride + page;
      getcontext(&fibers[i].ctx);  // once: makecontext reuses it for every thread it runs
    }
    smem = (unsigned char*)aligned_alloc(4096, kSmemBuffer);
  }
  ~Runner() {
    munmap(stacks, stack_stride * kMaxThreads);
    free(smem);
  }

  std::string thread_str(unsigned tid) const {
    const Fiber& f = fibers[tid];
    return " thread " + dim_str(f.idx);
  }
  [[noreturn]] void fault(unsigned tid, const std::string& what) {
    fault_at(*grid, block_idx, thread_str(tid), what);
  }
  [[noreturn]] void fault_block(const std::string& what) {
    fault_at(*grid, block_idx, "", what);
  }

  void set_builtins(const Fiber& f) {
    tl_thread_idx = &f.idx;
  }

  // Switch from the scheduler into fiber f until it blocks or exits.
  void resume(Fiber& f) {
    current = &f;
    set_builtins(f);
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_start_switch_fiber(&sched_fake_stack, f.stack, kStackBytes);
#endif
    swapcontext(&sched, &f.ctx);
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
    current = nullptr;
  }

  // From inside the running fiber back to the scheduler.
  void yield() {
    Fiber& f = *current;
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_start_switch_fiber(&f.fake_stack, sched_stack_bottom, sched_stack_size);
#endif
    swapcontext(&f.ctx, &sched);
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
  }

  static void entry();
  void run_block(Grid& g, uint64_t linear);
  void on_exit(Fiber& f);
  void release_barrier();
  [[noreturn]] void deadlock();
};

thread_local Runner* tl_runner = nullptr;
thread_local std::unique_ptr<Runner> tl_runner_owner;

Runner& runner() {
  if (!tl_runner) {  // one per OS thread that runs blocks, kept while the thread lives
    tl_runner_owner.reset(new Runner);
    tl_runner = tl_runner_owner.get();
  }
  return *tl_runner;
}

void Runner::entry() {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
#if defined(GPUMIX_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &r.sched_stack_bottom, &r.sched_stack_size);
#endif
  r.grid->body();
  r.on_exit(f);
  // Back to the scheduler for good: this fiber's stack is reused by makecontext.
#if defined(GPUMIX_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, r.sched_stack_bottom, r.sched_stack_size);
#endif
  setcontext(&r.sched);
}

void Runner::on_exit(Fiber& f) {
  f.state = FiberState::exited;
  --live;
  if (!some_exited) {
    some_exited = true;
    first_exited = f.tid;
  }
  Warp& w = warps[f.tid / 32];
  const unsigned bit = 1u << (f.tid % 32);
  w.exited |= bit;
  if (at_barrier > 0)
    fault(f.tid, "returned while " + std::to_string(at_barrier) +
                     " thread(s) of the block wait at __syncthreads() at " + bar_file + ":" +
                     std::to_string(bar_line) + " (e.g. thread" + thread_str(bar_first) +
                     "): every thread of the block must reach each barrier");
  if (w.arrived != 0 && (w.want & bit))
    fault(f.tid, std::string("returned while lanes of its warp wait in a shuffle at ") + w.file +
                     ":" + std::to_string(w.line) + " whose mask names it");
}

void Runner::release_barrier() {
  std::vector<unsigned> woken;
  woken.reserve(nthreads);
  for (unsigned t = 0; t < nthreads; ++t)
    if (fibers[t].state == FiberState::at_barrier) {
      fibers[t].state = FiberState::runnable;
      woken.push_back(t);
    }
  std::shuffle(woken.begin(), woken.end(), rng);
  for (unsigned t : woken) runq.push_back(t);
  at_barrier = 0;
}

void Runner::deadlock() {
  std::string where;
  unsigned shown = 0;
  for (unsigned t = 0; t < nthreads && shown < 4; ++t) {
    const Fiber& f = fibers[t];
    if (f.state == FiberState::at_barrier || f.state == FiberState::at_shuffle) {
      where += std::string(shown ? "; " : "") + "thread" + thread_str(t) +
               (f.state == FiberState::at_barrier ? " at __syncthreads() " : " in a shuffle ") +
               f.file + ":" + std::to_string(f.line);
      ++shown;
    }
  }
  fault_block("deadlock: " + std::to_string(live) +
              " live thread(s) wait and none can proceed (threads at different barriers or "
              "shuffles): " +
              where);
}

void Runner::run_block(Grid& g, uint64_t linear) {
  grid = &g;
  block_idx = uint3{(unsigned)(linear % g.grid.x), (unsigned)((linear / g.grid.x) % g.grid.y),
                    (unsigned)(linear / ((uint64_t)g.grid.x * g.grid.y))};
  tl_block_idx = &block_idx;
  tl_block_dim = &g.block;
  tl_grid_dim = &g.grid;
  rng.seed(g.seed ^ (linear * 0x9e3779b97f4a7c15ull));
  nthreads = g.block.x * g.block.y * g.block.z;
  live = nthreads;
  at_barrier = 0;
  some_exited = false;
  warps.assign((nthreads + 31) / 32, Warp{});
  for (unsigned t = 0; t < nthreads; ++t) warps[t / 32].present |= 1u << (t % 32);
  // Shared memory: every byte earlier blocks touched, and the dynamic part, 0xff.
  const size_t poison = std::max(smem_high, g.dyn_smem);
#if defined(GPUMIX_EMU_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(smem, kSmemBuffer);
#endif
  memset(smem, 0xff, poison);
  smem_high = poison;
#if defined(GPUMIX_EMU_ASAN)
  ASAN_POISON_MEMORY_REGION(smem + g.dyn_smem, kSmemBuffer - g.dyn_smem);
#endif
  smem_used = (g.dyn_smem + 15) / 16 * 16 + kRedzone;
  static_total = 0;
  statics.clear();

  runq.clear();
  std::vector<unsigned> order(nthreads);
  for (unsigned t = 0; t < nthreads; ++t) order[t] = t;
  std::shuffle(order.begin(), order.end(), rng);
  for (unsigned t = 0; t < nthreads; ++t) {
    Fiber& f = fibers[t];
    f.tid = t;
    f.idx = uint3{t % g.block.x, (t / g.block.x) % g.block.y, t / (g.block.x * g.block.y)};
    f.state = FiberState::runnable;
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &Runner::entry, 0);
    runq.push_back(order[t]);
  }
  while (!runq.empty()) {
    const unsigned t = runq.front();
    runq.pop_front();
    resume(fibers[t]);
  }
  if (live > 0) deadlock();
  long long expected = -1;
  g.static_bytes.compare_exchange_strong(expected, (long long)static_total);
  smem_high = std::max(smem_high, std::min(smem_used, kSmemBuffer));
  tl_thread_idx = nullptr;
  tl_block_idx = nullptr;
  tl_block_dim = nullptr;
  tl_grid_dim = nullptr;
  grid = nullptr;
}

// ---- the block pool ---------------------------------------------------------------------

class Pool {
 public:
  Pool() {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const unsigned n = (unsigned)env_u64("GPUMIX_EMULATED_WORKERS", std::max(2u, std::min(hw, 16u)));
    if (n == 0) refuse("GPUMIX_EMULATED_WORKERS=0: at least one block worker is needed");
    // The stream worker that runs a grid helps, so n - 1 pool threads give n at once.
    for (unsigned i = 0; i + 1 < n; ++i) threads_.emplace_back([this] { work(); });
  }

  void run(Grid& g) {
    {
      std::lock_guard<std::mutex> lock(m_);
      grids_.push_back(&g);
    }
    cv_.notify_all();
    run_blocks(g);
    {
      std::unique_lock<std::mutex> lock(g.m);
      g.cv.wait(lock, [&] { return g.done.load() == g.total; });
    }
    std::lock_guard<std::mutex> lock(m_);
    grids_.erase(std::find(grids_.begin(), grids_.end(), &g));
  }

 private:
  static void run_blocks(Grid& g) {
    Runner& r = runner();
    for (;;) {
      const uint64_t i = g.next.fetch_add(1);
      if (i >= g.total) return;
      r.run_block(g, g.block_at(i));
      if (g.done.fetch_add(1) + 1 == g.total) {
        std::lock_guard<std::mutex> lock(g.m);
        g.cv.notify_all();
      }
    }
  }

  void work() {
    for (;;) {
      Grid* g = nullptr;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] {
          for (Grid* x : grids_)
            if (x->next.load() < x->total) {
              g = x;
              return true;
            }
          return false;
        });
      }
      run_blocks(*g);
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::vector<Grid*> grids_;
  std::vector<std::thread> threads_;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its threads live until the process ends
  return *p;
}

std::atomic<uint64_t> g_launches{0};

}  // namespace

// ---- device-side calls ------------------------------------------------------------------

void syncthreads(const char* file, int line) {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
  if (r.some_exited)
    r.fault(f.tid, std::string("reached __syncthreads() at ") + file + ":" + std::to_string(line) +
                       " after thread" + r.thread_str(r.first_exited) +
                       " returned: every thread of the block must reach each barrier");
  if (r.at_barrier == 0) {
    r.bar_file = file;
    r.bar_line = line;
    r.bar_first = f.tid;
  } else if (line != r.bar_line || strcmp(file, r.bar_file) != 0) {
    r.fault(f.tid, std::string("reached __syncthreads() at ") + file + ":" + std::to_string(line) +
                       " while thread" + r.thread_str(r.bar_first) + " waits at " + r.bar_file +
                       ":" + std::to_string(r.bar_line) +
                       ": threads at different barriers (a barrier in divergent code)");
  }
  f.state = FiberState::at_barrier;
  f.file = file;
  f.line = line;
  if (++r.at_barrier == r.live) r.release_barrier();
  r.yield();
}

uint64_t shfl_xor(unsigned mask, uint64_t bits, int lane_mask, int width, const char* file,
                  int line) {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
  const unsigned lane = f.tid % 32;
  const unsigned bit = 1u << lane;
  Warp& w = r.warps[f.tid / 32];
  const std::string at = std::string(" (__shfl_xor_sync at ") + file + ":" + std::to_string(line) + ")";
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    r.fault(f.tid, "width " + std::to_string(width) + " is not a power of two in [1, 32]" + at);
  if (!(mask & bit))
    r.fault(f.tid, "the mask " + std::to_string(mask) + " does not name the calling lane " +
                       std::to_string(lane) + at);
  if (mask & ~w.present)
    r.fault(f.tid, "the mask names lanes that do not exist in this block (block of " +
                       std::to_string(r.nthreads) + " threads)" + at);
  if (mask & w.exited)
    r.fault(f.tid, "the mask names lanes that have exited" + at);
  if (w.arrived == 0) {
    w.want = mask;
    w.file = file;
    w.line = line;
  } else if (w.want != mask) {
    r.fault(f.tid, "lanes of one warp shuffle with different masks at once (pending mask " +
                       std::to_string(w.want) + " at " + w.file + ":" + std::to_string(w.line) +
                       ", this one " + std::to_string(mask) + ")" + at);
  }
  f.shfl_mask = mask;
  f.shfl_value = bits;
  f.shfl_lane_mask = lane_mask;
  f.shfl_width = width;
  f.file = file;
  f.line = line;
  w.arrived |= bit;
  if (w.arrived != w.want) {
    f.state = FiberState::at_shuffle;
    r.yield();
    return f.shfl_result;
  }
  // The last lane to arrive delivers every lane's value.
  const unsigned base = f.tid - lane;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(w.want & (1u << l))) continue;
    Fiber& x = r.fibers[base + l];
    const unsigned seg = l & ~(unsigned)(x.shfl_width - 1);
    unsigned src = l ^ (unsigned)x.shfl_lane_mask;
    if (src < seg || src >= seg + (unsigned)x.shfl_width) src = l;  // outside the segment: own
    x.shfl_result = (w.want & (1u << src)) ? r.fibers[base + src].shfl_value : ~0ull;
    if (&x != &f) {
      x.state = FiberState::runnable;
      r.runq.push_back(base + l);
    }
  }
  w.arrived = 0;
  w.want = 0;
  return f.shfl_result;
}

void* shared_static(const void* tag, size_t bytes, size_t align, const char* name,
                    const char* file, int line) {
  Runner& r = *tl_runner;
  for (const SharedArray& a : r.statics)
    if (a.tag == tag) return a.ptr;
  align = std::max<size_t>(align, 16);
  const size_t off = (r.smem_used + align - 1) / align * align;
  const size_t used_static = r.static_total + bytes;
  if (used_static + r.grid->dyn_smem > r.grid->smem_limit || off + bytes + kRedzone > kSmemBuffer)
    r.fault(r.current->tid, std::string("__shared__ ") + name + " (" + file + ":" +
                                std::to_string(line) + ", " + std::to_string(bytes) +
                                " bytes) brings the block's shared memory to " +
                                std::to_string(used_static + r.grid->dyn_smem) +
                                " bytes (dynamic " + std::to_string(r.grid->dyn_smem) +
                                "), over its limit of " + std::to_string(r.grid->smem_limit) +
                                " bytes (48 KiB unless cudaFuncSetAttribute raised it)");
  void* p = r.smem + off;
#if defined(GPUMIX_EMU_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
  memset(p, 0xff, bytes);
  r.smem_used = off + bytes + kRedzone;
  r.static_total = used_static;
  r.statics.push_back(SharedArray{tag, p});
  return p;
}

void* shared_dynamic() { return tl_runner->smem; }

void nanosleep_ns(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

// ---- host-side: attributes, checks, enqueue ---------------------------------------------

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    refuse("cudaFuncSetAttribute: attribute " + std::to_string((int)attr) +
           (attr == cudaFuncAttributePreferredSharedMemoryCarveout
                ? " (cudaFuncAttributePreferredSharedMemoryCarveout)"
                : "") +
           " is not emulated");
  const DeviceLimits l = limits_of_current_device();
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  KernelRecord& k = kernels()[kernel];
  const long long st = k.static_bytes < 0 ? 0 : k.static_bytes;
  if (value < 0 || (size_t)(st + value) > l.smem_optin) return cudaErrorInvalidValue;
  k.max_dynamic = value;
  return cudaSuccess;
}

cudaError_t check_launch(const LaunchSite& site, dim3 grid, dim3 block, size_t smem) {
  (void)site;
  const DeviceLimits l = limits_of_current_device();
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > (unsigned)l.max_bx ||
      block.y > (unsigned)l.max_by || block.z > (unsigned)l.max_bz ||
      threads > (uint64_t)l.max_threads)
    return cudaErrorInvalidConfiguration;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > (unsigned)l.max_gx ||
      grid.y > (unsigned)l.max_gy || grid.z > (unsigned)l.max_gz)
    return cudaErrorInvalidConfiguration;
  std::lock_guard<std::mutex> lock(g_kernels_mutex);
  const KernelRecord& k = kernels()[site.kernel];
  const long long st = k.static_bytes < 0 ? 0 : k.static_bytes;
  const long long max_dyn = k.max_dynamic >= 0 ? k.max_dynamic : (long long)l.smem_default - st;
  if ((long long)smem > max_dyn || (size_t)st + smem > l.smem_optin) return cudaErrorInvalidValue;
  return cudaSuccess;
}

void check_pointer_arg(const LaunchSite& site, int index, const void* p) {
  if (p == nullptr) return;
  const Memory m = classify(p);
  if (m == Memory::device) return;
  char buf[32];
  snprintf(buf, sizeof buf, "%p", p);
  refuse(std::string("kernel ") + site.name + " launched at " + site.file + ":" +
         std::to_string(site.line) + ": argument " + std::to_string(index) + " (" + buf + ") is " +
         (m == Memory::pinned_host ? "pinned host memory" : "not device memory (pageable host memory, or freed device memory)") +
         "; a kernel's pointer arguments must be device memory (cudaMalloc, "
         "cudaMallocFromPoolAsync)");
}

void enqueue_grid(const LaunchSite& site, dim3 grid_dim, dim3 block, size_t smem,
                  cudaStream_t stream, std::function<void()> thread_body) {
  const DeviceLimits l = limits_of_current_device();
  long long max_dynamic;
  {
    std::lock_guard<std::mutex> lock(g_kernels_mutex);
    max_dynamic = kernels()[site.kernel].max_dynamic;
  }
  auto g = std::make_shared<Grid>();
  g->site = site;
  g->grid = grid_dim;
  g->block = block;
  g->dyn_smem = smem;
  g->smem_limit = max_dynamic >= 0 ? l.smem_optin : l.smem_default;
  g->body = std::move(thread_body);
  g->total = (uint64_t)grid_dim.x * grid_dim.y * grid_dim.z;
  static const uint64_t seed = env_u64("GPUMIX_EMULATED_SEED", 1);
  g->seed = std::mt19937_64(seed + 0x51ed270b2ull * g_launches.fetch_add(1))();
  std::mt19937_64 rng(g->seed);
  if (g->total <= (1u << 22)) {
    g->order.resize(g->total);
    for (uint64_t i = 0; i < g->total; ++i) g->order[i] = (uint32_t)i;
    std::shuffle(g->order.begin(), g->order.end(), rng);
  } else {
    // i -> (a i + b) mod n with a coprime to n: a permutation without a table.
    auto gcd = [](uint64_t a, uint64_t b) {
      while (b) {
        const uint64_t t = a % b;
        a = b;
        b = t;
      }
      return a;
    };
    uint64_t a = rng() % g->total;
    while (a == 0 || gcd(a, g->total) != 1) a = (a + 1) % g->total;
    g->affine_a = a;
    g->affine_b = rng() % g->total;
  }
  enqueue(stream, intern(std::string("kernel ") + site.name), [g] {
    pool().run(*g);
    const long long st = g->static_bytes.load();
    if (st >= 0) {
      std::lock_guard<std::mutex> lock(g_kernels_mutex);
      kernels()[g->site.kernel].static_bytes = st;
    }
  });
}

}  // namespace detail
}  // namespace cuda_emulator

// ---- cub::DeviceRadixSort::SortPairs ----------------------------------------------------

namespace cuda_emulator::detail {

cudaError_t radix_sort_pairs_i32(void* temp, size_t* temp_bytes, const int32_t* keys_in,
                                 int32_t* keys_out, const int32_t* values_in,
                                 int32_t* values_out, int num_items, int begin_bit, int end_bit,
                                 cudaStream_t stream) {
  if (num_items < 0 || begin_bit < 0 || end_bit > 32 || begin_bit >= end_bit)
    return cudaErrorInvalidValue;
  // As CUB: room for a copy of the keys and values plus a histogram (the size is ours).
  const size_t need = (size_t)num_items * 8 + 4096;
  if (temp == nullptr) {
    *temp_bytes = need;
    return cudaSuccess;
  }
  if (*temp_bytes < need) return cudaErrorInvalidValue;
  if (num_items == 0) return cudaSuccess;
  const size_t n = (size_t)num_items;
  require_device(temp, need, "cub::DeviceRadixSort::SortPairs d_temp_storage");
  require_device(keys_in, n * 4, "cub::DeviceRadixSort::SortPairs d_keys_in");
  require_device(keys_out, n * 4, "cub::DeviceRadixSort::SortPairs d_keys_out");
  require_device(values_in, n * 4, "cub::DeviceRadixSort::SortPairs d_values_in");
  require_device(values_out, n * 4, "cub::DeviceRadixSort::SortPairs d_values_out");
  enqueue(stream, "cub::DeviceRadixSort::SortPairs",
          [=] {
            // The sort works in the temporary storage, as CUB's passes do.
            uint32_t* idx = static_cast<uint32_t*>(temp);
            const uint32_t bits = end_bit - begin_bit;
            const uint32_t mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
            auto key = [&](uint32_t i) {
              const uint32_t k = (uint32_t)keys_in[i] ^ 0x80000000u;  // signed order
              return (k >> begin_bit) & mask;
            };
            for (uint32_t i = 0; i < n; ++i) idx[i] = i;
            std::stable_sort(idx, idx + n, [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
            for (size_t i = 0; i < n; ++i) {
              keys_out[i] = keys_in[idx[i]];
              values_out[i] = values_in[idx[i]];
            }
          });
  return cudaSuccess;
}

}  // namespace cuda_emulator::detail
