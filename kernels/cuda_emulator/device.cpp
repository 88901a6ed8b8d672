// The emulated CUDA device's execution of kernels: the launcher's checks, the block pool,
// the fibers that are a block's threads, barriers, warp shuffles and shared memory
// (launch.h says what is modelled and why).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
#include "ptx.h"

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

// ---- context switch ---------------------------------------------------------------------
// x86-64: a user-space switch of the callee-saved registers, the stack pointer, MXCSR and
// the x87 control word (what the SysV ABI says a call preserves); no signal mask system
// call, unlike swapcontext, which a fiber switch at every shuffle cannot afford. Elsewhere
// ucontext.
#if defined(__x86_64__)
extern "C" void gpumix_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl gpumix_emu_switch
  .type gpumix_emu_switch, @function
gpumix_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gpumix_emu_switch, .-gpumix_emu_switch
)");

struct Context {
  void* sp = nullptr;
};
// A fresh context that starts fn (which never returns) on [stack, stack + bytes).
void make_context(Context* c, char* stack, size_t bytes, void (*fn)()) {
  uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)top;
  *--sp = 0;               // fn's return address: none (ends unwinding)
  *--sp = (uint64_t)fn;    // where the first switch's ret goes
  for (int i = 0; i < 6; ++i) *--sp = 0;  // rbp, rbx, r12..r15
  uint32_t csr[2];
  csr[0] = __builtin_ia32_stmxcsr();
  uint16_t cw;
  asm volatile("fnstcw %0" : "=m"(cw));
  csr[1] = cw;
  --sp;
  memcpy(sp, csr, 8);
  c->sp = sp;
}
inline void switch_context(Context* from, Context* to) { gpumix_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
  Context() { getcontext(&uc); }
};
void make_context(Context* c, char* stack, size_t bytes, void (*fn)()) {
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
}
inline void switch_context(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

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

enum class FiberState { runnable, at_barrier, at_warp, exited };

// The warp-collective operations. A warp's waiting lanes are all at one of them at a time.
enum class WarpOp { shfl_bfly, shfl_idx, shfl_down, ballot, syncwarp, mma, ldmatrix };
// .aligned (mma, ldmatrix): every lane of the warp executes the same instruction; no mask.
bool aligned(WarpOp op) { return op == WarpOp::mma || op == WarpOp::ldmatrix; }
std::string warp_op_name(WarpOp op, int variant) {
  switch (op) {
    case WarpOp::shfl_bfly: return "__shfl_xor_sync";
    case WarpOp::shfl_idx: return "__shfl_sync";
    case WarpOp::shfl_down: return "__shfl_down_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::syncwarp: return "__syncwarp";
    case WarpOp::mma: return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
    case WarpOp::ldmatrix:
      return std::string("ldmatrix.sync.aligned.m8n8.x") + std::to_string(variant & 7) +
             (variant & 8 ? ".trans" : "") + ".shared.b16";
  }
  return "?";
}

// One cp.async in flight: the 16 bytes it read at the issue, and where they land.
struct AsyncCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  uintptr_t site;  // racecheck: where it was issued
};

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // usable bottom (above the guard page)
  unsigned tid = 0;
  uint3 idx{0, 0, 0};
  FiberState state = FiberState::runnable;
  const char* file = nullptr;  // where it waits
  int line = 0;
  // Its part in the pending warp operation: a shuffle's argument (lane mask, source lane or
  // delta), width, value and result; mma's and ldmatrix's operands (on the lane's own stack,
  // which lives while it waits).
  int warp_arg = 0, warp_width = 32;
  uint64_t warp_value = 0, warp_result = 0;
  const void* warp_operands = nullptr;
  // cp.async: issued and not yet committed; committed groups not yet waited for, oldest first.
  std::vector<AsyncCopy> cp_issued;
  std::deque<std::vector<AsyncCopy>> cp_groups;
#if defined(GPUMIX_EMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

// A warp operation some lanes wait in: the lanes of `want` with the same operation and
// mask (and, .aligned, call site) complete it together. Disjoint or nested groups may wait at
// once (independent thread scheduling: lanes 0..15 in a __ballot_sync(0xffff) while all 32 wait
// in a __syncwarp() after it).
std::string mask_str(unsigned mask) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%08x", mask);
  return buf;
}

struct WarpGroup {
  WarpOp op;
  int variant;
  unsigned want, arrived;
  const char* file;
  int line;
  std::string str() const {
    return warp_op_name(op, variant) + " at " + file + ":" + std::to_string(line) + " (mask " +
           mask_str(want) + ")";
  }
};

struct Warp {
  unsigned present = 0;  // lanes that exist in the block
  unsigned exited = 0;
  std::vector<WarpGroup> groups;
  // The group lane `lane` waits in, or null.
  const WarpGroup* waiting(unsigned lane) const {
    for (const WarpGroup& g : groups)
      if (g.arrived & (1u << lane)) return &g;
    return nullptr;
  }
};

struct SharedArray {
  const void* tag;
  void* ptr;
  size_t bytes;
  const char* name;
};

// ---- the shared-memory race detector's state (racecheck) --------------------------------
// One record per access kept: the thread (tid + 1; 0: none), how many __syncwarp() it had
// completed then, and where (a return address inside the kernel, or, with the top bit set,
// which no user-space address has, an interned "FILE:LINE (ldmatrix...)").
constexpr uintptr_t kInstructionSite = (uintptr_t)1 << 63;
struct Access {
  uint16_t tid1 = 0;
  uint32_t syncs = 0;
  uintptr_t site = 0;
};
// Per byte of the block's shared memory: the barrier interval (epoch) its writer and readers
// belong to (stale records of older intervals count as none), the last writer, up to two
// distinct readers, and a cp.async in flight into it (no epoch: until its thread's wait).
struct ByteShadow {
  uint32_t epoch = 0;
  Access w, r1, r2;
  Access pending;
};
// How the scheduler picks the next fiber of a block (GPUMIX_EMULATED_SCHEDULE):
//   fixed         first come, first served from a seeded shuffle (the default);
//   warp-ahead    per barrier interval one seeded warp runs as far as it can (to its next
//                 barrier, or its end) before any other, then the rest in order;
//   warp-shuffle  per barrier interval the warps run in a seeded order, each as far as it
//                 can before the next.
enum class Schedule { fixed, warp_ahead, warp_shuffle };

struct Runner;
// The runner whose fiber is running on this OS thread while racecheck is on, else null: the
// instrumented kernels' access hooks (end of file) return at once when it is null.
thread_local Runner* tl_race = nullptr;

bool racecheck_default() {
  static const bool on = env_u64("GPUMIX_EMULATED_RACECHECK", 1) != 0;
  return on;
}
std::atomic<int> g_racecheck{-1};  // -1: the environment's
bool racecheck_on() {
  const int v = g_racecheck.load(std::memory_order_relaxed);
  return v < 0 ? racecheck_default() : v != 0;
}

Schedule parse_schedule(const char* e, const char* source) {
  if (!e || !*e || strcmp(e, "fixed") == 0) return Schedule::fixed;
  if (strcmp(e, "warp-ahead") == 0) return Schedule::warp_ahead;
  if (strcmp(e, "warp-shuffle") == 0) return Schedule::warp_shuffle;
  fprintf(stderr,
          "cuda_emulator: %s '%s' is not a schedule: fixed (the default), warp-ahead or "
          "warp-shuffle\n",
          source, e);
  abort();
}
std::atomic<int> g_schedule{-1};  // -1: the environment's
Schedule schedule_from_env() {
  const int v = g_schedule.load(std::memory_order_relaxed);
  if (v >= 0) return (Schedule)v;
  static const Schedule s = parse_schedule(getenv("GPUMIX_EMULATED_SCHEDULE"),
                                           "GPUMIX_EMULATED_SCHEDULE=");
  return s;
}

// The state of the block running on this OS thread (one block at a time per OS thread).
struct Runner {
  std::vector<Fiber> fibers;
  char* stacks = nullptr;  // kMaxThreads stacks, each with a guard page below
  size_t stack_stride = 0;
  Context sched;
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
  // Warp-priority schedules: a run queue per warp and each warp's rank in this interval.
  Schedule schedule = Schedule::fixed;
  std::vector<std::deque<unsigned>> warp_runq;
  std::vector<unsigned> warp_rank_order;  // warps, highest priority first

  // racecheck (see ByteShadow): off when GPUMIX_EMULATED_RACECHECK=0.
  ByteShadow* shadow = nullptr;
  size_t smem_end = 0;      // accesses below this offset are shared memory
  uint32_t epoch = 0;       // this runner's barrier intervals, unique across its blocks
  const char* interval_file = nullptr;  // the barrier that opened this interval (null: start)
  int interval_line = 0;
  std::vector<uint32_t> syncs, last_full_sync;  // per thread: __syncwarp()s completed
  std::vector<std::array<uint32_t, 32>> last_sync_with;  // partial masks: per lane pair
  bool partial_syncwarp = false;
  std::unordered_map<uint64_t, uintptr_t> site_cache;

  Runner() {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    stack_stride = kStackBytes + page;
    stacks = (char*)mmap(nullptr, stack_stride * kMaxThreads, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) refuse("launch: mmap of the fiber stacks failed");
    for (unsigned i = 0; i < kMaxThreads; ++i)
      mprotect(stacks + i * stack_stride, page, PROT_NONE);  // the guard page
    fibers.resize(kMaxThreads);
    for (unsigned i = 0; i < kMaxThreads; ++i) fibers[i].stack = stacks + i * stack_stride + page;
    smem = (unsigned char*)aligned_alloc(4096, kSmemBuffer);
    void* sh = mmap(nullptr, sizeof(ByteShadow) * kSmemBuffer, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (sh == MAP_FAILED) refuse("launch: mmap of the race detector's shadow failed");
    shadow = static_cast<ByteShadow*>(sh);  // zero pages: every record none
    syncs.assign(kMaxThreads, 0);
    last_full_sync.assign(kMaxThreads, 0);
    last_sync_with.assign(kMaxThreads, std::array<uint32_t, 32>{});
  }
  ~Runner() {
    munmap(stacks, stack_stride * kMaxThreads);
    munmap(shadow, sizeof(ByteShadow) * kSmemBuffer);
    free(smem);
  }

  void next_epoch(const char* file, int line) {
    interval_file = file;
    interval_line = line;
    if (++epoch == 0) {  // wrapped (after 4G intervals): forget every record
      madvise(shadow, sizeof(ByteShadow) * kSmemBuffer, MADV_DONTNEED);
      epoch = 1;
    }
  }
  void race_access(unsigned tid, size_t off, size_t n, bool write, uintptr_t site);
  [[noreturn]] void race_fault(unsigned tid, size_t off, bool write, uintptr_t site,
                               const Access& other, const char* kind);
  std::string shared_str(size_t off) const;
  uintptr_t instruction_site(const char* what, int variant, const char* file, int line);
  void make_runnable(unsigned t) {
    if (schedule == Schedule::fixed)
      runq.push_back(t);
    else
      warp_runq[t / 32].push_back(t);
  }
  // The next fiber to run, or false.
  bool pick(unsigned* t) {
    if (schedule == Schedule::fixed) {
      if (runq.empty()) return false;
      *t = runq.front();
      runq.pop_front();
      return true;
    }
    for (unsigned w : warp_rank_order)
      if (!warp_runq[w].empty()) {
        *t = warp_runq[w].front();
        warp_runq[w].pop_front();
        return true;
      }
    return false;
  }
  void rank_warps() {
    if (schedule == Schedule::fixed) return;
    const unsigned nw = (unsigned)warps.size();
    warp_rank_order.resize(nw);
    for (unsigned w = 0; w < nw; ++w) warp_rank_order[w] = w;
    if (schedule == Schedule::warp_shuffle) {
      std::shuffle(warp_rank_order.begin(), warp_rank_order.end(), rng);
    } else {
      const unsigned lead = (unsigned)(rng() % nw);
      std::rotate(warp_rank_order.begin(), warp_rank_order.begin() + lead,
                  warp_rank_order.begin() + lead + 1);
    }
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
    if (racecheck_on()) tl_race = this;
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_start_switch_fiber(&sched_fake_stack, f.stack, kStackBytes);
#endif
    switch_context(&sched, &f.ctx);
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
    tl_race = nullptr;
    current = nullptr;
  }

  // From inside the running fiber back to the scheduler.
  void yield() {
    Fiber& f = *current;
#if defined(GPUMIX_EMU_ASAN)
    __sanitizer_start_switch_fiber(&f.fake_stack, sched_stack_bottom, sched_stack_size);
#endif
    switch_context(&f.ctx, &sched);
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


// ---- racecheck ----------------------------------------------------------------------------

// Where a recorded access was: an instruction site (low bit set: an interned string), or a PC
// in the kernel, as FILE:LINE (function) through addr2line on the module's line tables (the
// instrumented sources are built with them); the bare address where there are none.
std::string site_str_of(uintptr_t site) {
  if (site & kInstructionSite) return reinterpret_cast<const char*>(site & ~kInstructionSite);
  const uintptr_t pc = site - 1;  // inside the call instruction
  Dl_info info;
  char hexpc[32];
  snprintf(hexpc, sizeof hexpc, "pc %p", (void*)pc);
  if (!dladdr((void*)pc, &info) || !info.dli_fbase) return hexpc;
  const bool relative = reinterpret_cast<const ElfW(Ehdr)*>(info.dli_fbase)->e_type == ET_DYN;
  const uintptr_t addr = relative ? pc - (uintptr_t)info.dli_fbase : pc;
  std::string file = info.dli_fname && *info.dli_fname && access(info.dli_fname, R_OK) == 0
                         ? info.dli_fname : "/proc/self/exe";
  char cmd[4096 + 64];
  snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e '%s' 0x%lx 2>/dev/null", file.c_str(),
           (unsigned long)addr);
  std::vector<std::string> lines;
  if (FILE* p = popen(cmd, "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) {
      std::string l(buf);
      while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
      lines.push_back(l);
    }
    pclose(p);
  }
  auto strip = [](std::string l) {  // "DIR/x/../FILE:LINE (discriminator N)" -> "DIR/FILE:LINE"
    const size_t d = l.find(" (discriminator");
    if (d != std::string::npos) l = l.substr(0, d);
    for (size_t up; (up = l.find("/../")) != std::string::npos && up > 0;) {
      const size_t start = l.rfind('/', up - 1);
      if (start == std::string::npos) break;
      l.erase(start, up + 3 - start);
    }
    return l;
  };
  if (lines.size() < 2 || lines[1].rfind("??", 0) == 0)
    return std::string(hexpc) + (info.dli_sname ? std::string(" in ") + info.dli_sname : "");
  std::string out = strip(lines[1]) + " (in " + lines[0] + ")";
  if (lines.size() >= 4) out += ", inlined at " + strip(lines[3]) + " (in " + lines[2] + ")";
  return out;
}

uintptr_t Runner::instruction_site(const char* what, int variant, const char* file, int line) {
  const uint64_t key = (uint64_t)(uintptr_t)file * 1000003u ^ (uint64_t)line * 131u ^
                       (uint64_t)(uintptr_t)what ^ (uint64_t)variant << 56;
  auto it = site_cache.find(key);
  if (it != site_cache.end()) return it->second;
  const std::string text =
      std::string(file) + ":" + std::to_string(line) + " (" + what +
      (variant >= 0 ? std::string(".x") + std::to_string(variant & 7) + (variant & 8 ? ".trans" : "")
                    : std::string()) + ")";
  const uintptr_t site = (uintptr_t)intern(text) | kInstructionSite;
  site_cache.emplace(key, site);
  return site;
}

std::string Runner::shared_str(size_t off) const {
  char addr[32];
  snprintf(addr, sizeof addr, "%p", (void*)(smem + off));
  for (const SharedArray& a : statics) {
    const size_t start = (size_t)((unsigned char*)a.ptr - smem);
    if (off >= start && off < start + a.bytes)
      return std::string(addr) + " (byte " + std::to_string(off - start) + " of __shared__ " +
             a.name + ")";
  }
  return std::string(addr) + " (byte " + std::to_string(off) + " of the dynamic shared memory)";
}

void Runner::race_fault(unsigned tid, size_t off, bool write, uintptr_t site, const Access& other,
                        const char* kind) {
  const unsigned o = other.tid1 - 1u;
  const std::string interval =
      interval_file ? std::string("the __syncthreads() at ") + interval_file + ":" +
                          std::to_string(interval_line)
                    : std::string("the block's start");
  std::string what;
  if (strcmp(kind, "cp.async in flight") == 0) {
    what = std::string("shared-memory race (") + kind + "):" + thread_str(tid) + " " +
           (write ? "writes" : "reads") + " " + shared_str(off) + " at " + site_str_of(site) +
           ", the destination of a cp.async that" + thread_str(o) + " issued at " +
           site_str_of(other.site) +
           " and has not waited for (a cp.async's bytes are written until its thread's "
           "cp.async.wait_group; other threads read them after that wait and a __syncthreads())";
  } else {
    what = std::string("shared-memory race (") + kind + "):" + thread_str(tid) + " " +
           (write ? "writes" : "reads") + " " + shared_str(off) + " at " + site_str_of(site) +
           ";" + thread_str(o) + " " + (strcmp(kind, "read after write") == 0 ||
                                               strcmp(kind, "write after write") == 0
                                                   ? "wrote"
                                                   : "read") +
           " it at " + site_str_of(other.site) + " in the same barrier interval (since " +
           interval + ") with no __syncthreads()" +
           (o / 32 == tid / 32 ? " or __syncwarp() naming both lanes" : "") + " between them";
  }
  fault(tid, what);
}

void Runner::race_access(unsigned tid, size_t off, size_t n, bool write, uintptr_t site) {
  const uint16_t me = (uint16_t)(tid + 1);
  const unsigned warp = tid / 32, lane = tid % 32;
  // Whether a __syncwarp() of both orders `a` (another lane of this warp) before now.
  auto ordered = [&](const Access& a) {
    const unsigned t = a.tid1 - 1u;
    if (t / 32 != warp) return false;
    return std::max(last_full_sync[t], last_sync_with[t][lane]) > a.syncs;
  };
  auto conflicts = [&](const Access& a) { return a.tid1 != 0 && a.tid1 != me && !ordered(a); };
  const Access mine{me, syncs[tid], site};
  for (size_t i = 0; i < n && off + i < kSmemBuffer; ++i) {
    ByteShadow& b = shadow[off + i];
    if (b.pending.tid1 != 0) race_fault(tid, off + i, write, site, b.pending, "cp.async in flight");
    if (b.epoch != epoch) {
      b.epoch = epoch;
      b.w = b.r1 = b.r2 = Access{};
    }
    if (write) {
      if (conflicts(b.w)) race_fault(tid, off + i, true, site, b.w, "write after write");
      if (conflicts(b.r1)) race_fault(tid, off + i, true, site, b.r1, "write after read");
      if (conflicts(b.r2)) race_fault(tid, off + i, true, site, b.r2, "write after read");
      b.w = mine;
      b.r1 = b.r2 = Access{};
    } else {
      if (conflicts(b.w)) race_fault(tid, off + i, false, site, b.w, "read after write");
      if (b.r1.tid1 == 0 || b.r1.tid1 == me)
        b.r1 = mine;
      else if (b.r2.tid1 == 0 || b.r2.tid1 == me)
        b.r2 = mine;
    }
  }
}

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
  // Back to the scheduler for good: this fiber's stack is reused by the next thread.
#if defined(GPUMIX_EMU_ASAN)
  __sanitizer_start_switch_fiber(nullptr, r.sched_stack_bottom, r.sched_stack_size);
#endif
  switch_context(&f.ctx, &r.sched);
  abort();  // never resumed
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
  for (const WarpGroup& g : w.groups)
    if (g.want & bit)
      fault(f.tid, "returned while lanes of its warp wait in " + g.str() + " whose mask names it" +
                       (aligned(g.op) ? " (.aligned: every lane of the warp must execute it)" : ""));
  // Copies it never waited for land nowhere: nothing may read them (a wait is the only way).
  auto forget = [this](const std::vector<AsyncCopy>& copies) {
    for (const AsyncCopy& c : copies)
      for (size_t i = 0; i < 16; ++i) shadow[c.dst - smem + i].pending = Access{};
  };
  forget(f.cp_issued);
  for (const std::vector<AsyncCopy>& g : f.cp_groups) forget(g);
  f.cp_issued.clear();
  f.cp_groups.clear();
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
  next_epoch(bar_file, bar_line);
  rank_warps();
  for (unsigned t : woken) make_runnable(t);
  at_barrier = 0;
}

void Runner::deadlock() {
  std::string where;
  unsigned shown = 0;
  for (unsigned t = 0; t < nthreads && shown < 4; ++t) {
    const Fiber& f = fibers[t];
    if (f.state == FiberState::at_barrier || f.state == FiberState::at_warp) {
      const WarpGroup* g = warps[t / 32].waiting(t % 32);
      where += std::string(shown ? "; " : "") + "thread" + thread_str(t) +
               (f.state == FiberState::at_barrier || !g
                    ? std::string(" at __syncthreads() ") + f.file + ":" + std::to_string(f.line)
                    : " in " + g->str());
      ++shown;
    }
  }
  fault_block("deadlock: " + std::to_string(live) +
              " live thread(s) wait and none can proceed (threads at different barriers or "
              "warp operations): " +
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
  smem_end = g.dyn_smem;
  static_total = 0;
  statics.clear();
  next_epoch(nullptr, 0);
  if (partial_syncwarp) {
    for (unsigned t = 0; t < nthreads; ++t) last_sync_with[t].fill(0);
    partial_syncwarp = false;
  }
  std::fill(syncs.begin(), syncs.begin() + nthreads, 0);
  std::fill(last_full_sync.begin(), last_full_sync.begin() + nthreads, 0);
  schedule = schedule_from_env();
  if (schedule != Schedule::fixed) {
    warp_runq.assign(warps.size(), std::deque<unsigned>{});
    rank_warps();
  }

  runq.clear();
  std::vector<unsigned> order(nthreads);
  for (unsigned t = 0; t < nthreads; ++t) order[t] = t;
  std::shuffle(order.begin(), order.end(), rng);
  for (unsigned t = 0; t < nthreads; ++t) {
    Fiber& f = fibers[t];
    f.tid = t;
    f.idx = uint3{t % g.block.x, (t / g.block.x) % g.block.y, t / (g.block.x * g.block.y)};
    f.state = FiberState::runnable;
    f.cp_issued.clear();
    f.cp_groups.clear();
    make_context(&f.ctx, f.stack, kStackBytes, &Runner::entry);
  }
  for (unsigned t = 0; t < nthreads; ++t) make_runnable(order[t]);
  for (unsigned t; pick(&t);) resume(fibers[t]);
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

  // Workers hold a reference while they run blocks of a grid, so it outlives them.
  void run(const std::shared_ptr<Grid>& gp) {
    Grid& g = *gp;
    {
      std::lock_guard<std::mutex> lock(m_);
      grids_.push_back(gp);
    }
    cv_.notify_all();
    run_blocks(g);
    {
      std::unique_lock<std::mutex> lock(g.m);
      g.cv.wait(lock, [&] { return g.done.load() == g.total; });
    }
    std::lock_guard<std::mutex> lock(m_);
    grids_.erase(std::find(grids_.begin(), grids_.end(), gp));
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
      std::shared_ptr<Grid> g;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] {
          for (const std::shared_ptr<Grid>& x : grids_)
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
  std::vector<std::shared_ptr<Grid>> grids_;
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

// ---- warp operations ----------------------------------------------------------------------

namespace {

std::string site_str(const char* what, const char* file, int line) {
  return std::string(" (") + what + " at " + file + ":" + std::to_string(line) + ")";
}

// The calling lane arrives at a warp operation over the lanes of `mask`; it has put its part
// in its Fiber. Returns once every lane of the mask has arrived and the last to arrive has run
// deliver(first thread of the warp), which reads every lane's part and writes their results.
// Faults where the hardware fails or the behaviour is undefined (PTX ISA: shfl.sync, vote.sync,
// bar.warp.sync: "the executing thread waits until all non-exited threads of membermask have
// executed the same instruction with the same qualifiers and membermask"; mma and ldmatrix
// .sync.aligned: "all threads in the warp must execute the same instruction", undefined "if
// any thread in the warp has exited").
template <typename Deliver>
void warp_collective(WarpOp op, int variant, unsigned mask, const char* file, int line,
                     Deliver deliver) {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
  const unsigned lane = f.tid % 32;
  const unsigned bit = 1u << lane;
  Warp& w = r.warps[f.tid / 32];
  const std::string name = warp_op_name(op, variant);
  const std::string at = site_str(name.c_str(), file, line);
  if (aligned(op)) {
    if (w.present != 0xffffffffu)
      r.fault(f.tid, "the warp has " + std::to_string(__builtin_popcount(w.present)) +
                         " lanes (block of " + std::to_string(r.nthreads) +
                         " threads); .aligned needs all 32 lanes of the warp" + at);
    if (w.exited)
      r.fault(f.tid, "lanes of its warp have exited (lanes " + mask_str(w.exited) +
                         "); .aligned needs every lane of the warp to execute it" + at);
  } else {
    if (!(mask & bit))
      r.fault(f.tid, "the mask " + mask_str(mask) + " does not name the calling lane " +
                         std::to_string(lane) + at);
    if (mask & ~w.present)
      r.fault(f.tid, "the mask names lanes that do not exist in this block (block of " +
                         std::to_string(r.nthreads) + " threads)" + at);
    if (mask & w.exited) r.fault(f.tid, "the mask names lanes that have exited" + at);
  }
  WarpGroup* g = nullptr;
  for (WarpGroup& x : w.groups)
    if (x.op == op && x.variant == variant && x.want == mask &&
        (!aligned(op) || (line == x.line && strcmp(file, x.file) == 0)))
      g = &x;
  // A lane of our mask waiting in another group that needs us: neither can complete.
  for (const WarpGroup& x : w.groups) {
    if (&x == g || !(x.want & bit) || !(x.arrived & mask)) continue;
    const unsigned other = (unsigned)__builtin_ctz(x.arrived & mask);
    r.fault(f.tid, "divergent warp: lane " + std::to_string(other) + " waits in " + x.str() +
                       ", which needs this lane, while this lane reached " + name + " at " + file +
                       ":" + std::to_string(line) + " (mask " + mask_str(mask) +
                       "), which needs lane " + std::to_string(other) + ": neither completes" +
                       (aligned(op) || aligned(x.op)
                            ? " (.aligned: every lane of the warp must execute the same instruction)"
                            : " (shuffles, votes and __syncwarp of one mask: the same mask on every lane)"));
  }
  if (!g) {
    w.groups.push_back(WarpGroup{op, variant, mask, 0u, file, line});
    g = &w.groups.back();
  }
  f.file = file;
  f.line = line;
  g->arrived |= bit;
  if (g->arrived != g->want) {
    f.state = FiberState::at_warp;
    r.yield();
    return;
  }
  const unsigned base = f.tid - lane;
  deliver(base);
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l)) || base + l == f.tid) continue;
    r.fibers[base + l].state = FiberState::runnable;
    r.make_runnable(base + l);
  }
  w.groups.erase(w.groups.begin() + (g - w.groups.data()));
}

// Whether [p, p + bytes) lies in the running block's shared memory.
bool in_shared(const Runner& r, const void* p, size_t bytes) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const size_t end = std::max(r.smem_used, r.grid->dyn_smem);
  return c >= r.smem && c + bytes <= r.smem + end;
}

std::string hex(const void* p) {
  char buf[32];
  snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

uint64_t shfl(Shfl mode, unsigned mask, uint64_t bits, int arg, int width, const char* file,
              int line) {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
  const WarpOp op = mode == Shfl::bfly  ? WarpOp::shfl_bfly
                    : mode == Shfl::idx ? WarpOp::shfl_idx
                                        : WarpOp::shfl_down;
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    r.fault(f.tid, "width " + std::to_string(width) + " is not a power of two in [1, 32]" +
                       site_str(warp_op_name(op, 0).c_str(), file, line));
  f.warp_value = bits;
  f.warp_arg = arg;
  f.warp_width = width;
  warp_collective(op, 0, mask, file, line, [&r, op, mask](unsigned base) {
    // CUDA C++ Programming Guide, Warp Shuffle Functions: a lane reads from its own segment
    // of `width` lanes; a source outside the segment (xor, down) gives the lane's own value; a
    // source lane outside the mask is undefined: all-ones bits here (a NaN).
    for (unsigned l = 0; l < 32; ++l) {
      if (!(mask & (1u << l))) continue;
      Fiber& x = r.fibers[base + l];
      const unsigned w = (unsigned)x.warp_width;
      const unsigned seg = l & ~(w - 1);
      unsigned src = l;
      if (op == WarpOp::shfl_bfly) {
        src = l ^ (unsigned)x.warp_arg;
        if (src < seg || src >= seg + w) src = l;
      } else if (op == WarpOp::shfl_idx) {
        src = seg + ((unsigned)x.warp_arg & (w - 1));
      } else if ((l - seg) + (unsigned)x.warp_arg < w) {
        src = l + (unsigned)x.warp_arg;
      }
      x.warp_result = (mask & (1u << src)) ? r.fibers[base + src].warp_value : ~0ull;
    }
  });
  return f.warp_result;
}

unsigned ballot(unsigned mask, bool predicate, const char* file, int line) {
  Runner& r = *tl_runner;
  Fiber& f = *r.current;
  f.warp_value = predicate;
  warp_collective(WarpOp::ballot, 0, mask, file, line, [&r, mask](unsigned base) {
    unsigned votes = 0;  // lanes outside the mask vote 0
    for (unsigned l = 0; l < 32; ++l)
      if ((mask & (1u << l)) && r.fibers[base + l].warp_value) votes |= 1u << l;
    for (unsigned l = 0; l < 32; ++l)
      if (mask & (1u << l)) r.fibers[base + l].warp_result = votes;
  });
  return (unsigned)f.warp_result;
}

// __syncwarp(mask) orders the memory accesses of its lanes (CUDA C++ Programming Guide,
// "Synchronization Functions"): what a lane did before it happens before what every lane of
// the mask does after it. Shuffles, votes, mma and ldmatrix order nothing.
void syncwarp(unsigned mask, const char* file, int line) {
  Runner& r = *tl_runner;
  warp_collective(WarpOp::syncwarp, 0, mask, file, line, [&r, mask](unsigned base) {
    const bool full = mask == r.warps[base / 32].present;
    if (!full) r.partial_syncwarp = true;
    for (unsigned l = 0; l < 32; ++l) {
      if (!(mask & (1u << l))) continue;
      const unsigned t = base + l;
      const uint32_t n = ++r.syncs[t];
      if (full) {
        r.last_full_sync[t] = n;
      } else {
        for (unsigned x = 0; x < 32; ++x)
          if (mask & (1u << x)) r.last_sync_with[t][x] = n;
      }
    }
  });
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
  r.smem_end = std::max(r.smem_end, off + bytes);
  r.static_total = used_static;
  r.statics.push_back(SharedArray{tag, p, bytes, name});
  return p;
}

void* shared_dynamic() { return tl_runner->smem; }

void nanosleep_ns(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

}  // namespace detail

void set_racecheck(int on) { detail::g_racecheck.store(on < 0 ? -1 : on != 0); }
void set_schedule(const char* name) {
  detail::g_schedule.store(name ? (int)detail::parse_schedule(name, "set_schedule:") : -1);
}
bool racecheck_enabled() { return detail::racecheck_on(); }

namespace detail {

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

}  // namespace detail
}  // namespace cuda_emulator

// The start of each patchable_function_entry padding in the program (g++ and the linker make
// them; absent without any).
extern "C" const uintptr_t __start___patchable_function_entries[] __attribute__((weak));
extern "C" const uintptr_t __stop___patchable_function_entries[] __attribute__((weak));

namespace cuda_emulator {
namespace detail {

// A kernel's __launch_bounds__ max threads (device_language.h), or 0 for none: the length of
// the run of one-byte NOPs right before its entry that a padding entry starts.
unsigned launch_bound(const void* kernel) {
  static std::mutex m;
  static std::vector<uintptr_t>* starts = nullptr;
  {
    std::lock_guard<std::mutex> lock(m);
    if (!starts) {
      starts = new std::vector<uintptr_t>;
      if (__start___patchable_function_entries)
        starts->assign(__start___patchable_function_entries, __stop___patchable_function_entries);
      std::sort(starts->begin(), starts->end());
    }
  }
  const uintptr_t k = (uintptr_t)kernel;
  auto it = std::lower_bound(starts->begin(), starts->end(), k);
  if (it == starts->begin()) return 0;
  const uintptr_t p = *--it;
  if (k - p > kMaxThreads) return 0;
  for (uintptr_t a = p; a < k; ++a)
    if (*(const unsigned char*)a != 0x90) return 0;  // another function's body: no bound
  return (unsigned)(k - p);
}

cudaError_t check_launch(const LaunchSite& site, dim3 grid, dim3 block, size_t smem) {
  const DeviceLimits l = limits_of_current_device();
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > (unsigned)l.max_bx ||
      block.y > (unsigned)l.max_by || block.z > (unsigned)l.max_bz ||
      threads > (uint64_t)l.max_threads)
    return cudaErrorInvalidConfiguration;
  // CUDA C++ Programming Guide, "Launch Bounds": a launch of more threads per block than the
  // kernel's maxThreadsPerBlock fails (the driver: too many resources requested for launch).
  const unsigned bound = launch_bound(site.kernel);
  if (bound > 0 && threads > bound) {
    fprintf(stderr,
            "cuda_emulator: kernel %s launched at %s:%d with %llu threads per block, over its "
            "__launch_bounds__(%u): cudaErrorLaunchOutOfResources\n",
            site.name, site.file, site.line, (unsigned long long)threads, bound);
    return cudaErrorLaunchOutOfResources;
  }
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
    pool().run(g);
    const long long st = g->static_bytes.load();
    if (st >= 0) {
      std::lock_guard<std::mutex> lock(g_kernels_mutex);
      kernels()[g->site.kernel].static_bytes = st;
    }
  });
}

}  // namespace detail
}  // namespace cuda_emulator

// ---- PTX instructions (ptx.h) ----------------------------------------------------------

namespace cuda_emulator::ptx {

using detail::Fiber;
using detail::Runner;
using detail::WarpOp;

namespace {

struct MmaOperands {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

float lo_bf16(uint32_t r) { return __uint_as_float(r << 16); }
float hi_bf16(uint32_t r) { return __uint_as_float(r & 0xffff0000u); }

}  // namespace

// PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with floating point type" (.bf16):
// with g = %laneid >> 2 and t = %laneid % 4, the lower-index element in the lower 16 bits,
//   A (16 x 16, row):  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
//                      a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
//   B (16 x 8, col):   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8 f32): c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
// The products of bf16 are exact; the sum of the 16 products and c is taken in double and
// rounded once to fp32. Tensor cores align and truncate instead (not specified by the ISA):
// the two may differ in the last bits of fp32, which the tests' fp32 tolerance covers.
void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                       const char* file, int line) {
  Runner& r = *detail::tl_runner;
  Fiber& f = *r.current;
  const MmaOperands mine{d, a, b, c};
  f.warp_operands = &mine;
  detail::warp_collective(WarpOp::mma, 0, 0xffffffffu, file, line, [&r](unsigned base) {
    float A[16][16], B[16][8], C[16][8];
    for (unsigned l = 0; l < 32; ++l) {
      const MmaOperands& o = *static_cast<const MmaOperands*>(r.fibers[base + l].warp_operands);
      const unsigned g = l >> 2, t = l % 4;
      for (int i = 0; i < 4; ++i) {
        const unsigned row = g + (i & 1) * 8, col = 2 * t + (i >> 1) * 8;
        A[row][col] = lo_bf16(o.a[i]);
        A[row][col + 1] = hi_bf16(o.a[i]);
      }
      for (int i = 0; i < 2; ++i) {
        B[2 * t + i * 8][g] = lo_bf16(o.b[i]);
        B[2 * t + i * 8 + 1][g] = hi_bf16(o.b[i]);
      }
      for (int i = 0; i < 4; ++i) C[g + (i >> 1) * 8][2 * t + (i & 1)] = o.c[i];
    }
    // Every lane's operands are read before any result is written: d may be c.
    for (unsigned l = 0; l < 32; ++l) {
      const MmaOperands& o = *static_cast<const MmaOperands*>(r.fibers[base + l].warp_operands);
      const unsigned g = l >> 2, t = l % 4;
      for (int i = 0; i < 4; ++i) {
        const unsigned row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
        double s = C[row][col];
        for (int k = 0; k < 16; ++k) s += (double)A[row][k] * (double)B[k][col];
        o.d[i] = (float)s;
      }
    }
  });
}

// PTX ISA 9.7.14.5.15, "Warp-level matrix load instruction: ldmatrix" (.m8n8, .b16): matrix m
// (of num) has its 8 rows at the addresses of lanes 8m .. 8m+7, each row 8 contiguous b16 (16
// bytes) in shared memory; the other lanes' addresses are not read. Lane l receives register
// m = row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of matrix m (the lower in the lower 16
// bits); with .trans, elements [2 (l % 4)][l / 4] and [2 (l % 4) + 1][l / 4] (the transpose's
// row l / 4). A row address must be 16-byte aligned ("Addresses as Operands": the access
// size) and in .shared space (a generic address outside it is undefined).
void ldmatrix_m8n8(uint32_t* out, int num, bool trans, const void* row, const char* file,
                   int line) {
  Runner& r = *detail::tl_runner;
  Fiber& f = *r.current;
  if (num != 1 && num != 2 && num != 4)
    r.fault(f.tid, "ldmatrix .x" + std::to_string(num) + ": .num is x1, x2 or x4" +
                       detail::site_str("ldmatrix", file, line));
  f.warp_value = (uint64_t)(uintptr_t)row;
  f.warp_operands = out;
  const int variant = num | (trans ? 8 : 0);
  detail::warp_collective(WarpOp::ldmatrix, variant, 0xffffffffu, file, line,
                          [&r, num, trans, variant, file, line](unsigned base) {
    uint16_t M[4][8][8];
    for (int m = 0; m < num; ++m)
      for (int i = 0; i < 8; ++i) {
        const unsigned src = base + 8 * m + i;
        const void* p = (const void*)(uintptr_t)r.fibers[src].warp_value;
        const std::string at =
            detail::site_str(detail::warp_op_name(WarpOp::ldmatrix, variant).c_str(), file, line);
        if ((uintptr_t)p % 16 != 0)
          r.fault(src, "row address " + detail::hex(p) + " (matrix " + std::to_string(m) +
                           ", row " + std::to_string(i) + ") is not 16-byte aligned" + at);
        if (!detail::in_shared(r, p, 16))
          r.fault(src, "row address " + detail::hex(p) + " (matrix " + std::to_string(m) +
                           ", row " + std::to_string(i) +
                           ") is not in the block's shared memory" + at);
        if (detail::tl_race)
          r.race_access(src, (const unsigned char*)p - r.smem, 16, false,
                        r.instruction_site("ldmatrix", variant, file, line));
        memcpy(M[m][i], p, 16);
      }
    for (unsigned l = 0; l < 32; ++l) {
      uint32_t* o = static_cast<uint32_t*>(const_cast<void*>(r.fibers[base + l].warp_operands));
      const unsigned g = l >> 2, t = l % 4;
      for (int m = 0; m < num; ++m)
        o[m] = trans ? (uint32_t)M[m][2 * t][g] | (uint32_t)M[m][2 * t + 1][g] << 16
                     : (uint32_t)M[m][g][2 * t] | (uint32_t)M[m][g][2 * t + 1] << 16;
    }
  });
}

// PTX ISA, "Data Movement and Conversion Instructions: cp.async": a non-blocking copy of
// cp-size (16) bytes from .global src to .shared dst, src-size bytes read and the rest
// zero-filled; both addresses aligned to cp-size; complete only once a cp.async.wait_group /
// wait_all covers its group ("no other synchronization mechanism guarantees the completion").
// The source is read now, the destination poisoned until the wait.
void cp_async_16(void* dst, const void* src, int src_bytes, const char* file, int line) {
  Runner& r = *detail::tl_runner;
  Fiber& f = *r.current;
  const std::string at = detail::site_str("cp.async 16 bytes", file, line);
  if (src_bytes < 0 || src_bytes > 16)
    r.fault(f.tid, "src-size " + std::to_string(src_bytes) + " is not in [0, 16]" + at);
  if ((uintptr_t)dst % 16 != 0)
    r.fault(f.tid, "destination " + detail::hex(dst) + " is not 16-byte aligned" + at);
  if ((uintptr_t)src % 16 != 0)
    r.fault(f.tid, "source " + detail::hex(src) + " is not 16-byte aligned" + at);
  if (!detail::in_shared(r, dst, 16))
    r.fault(f.tid, "destination " + detail::hex(dst) + " is not in the block's shared memory" + at);
  if (src_bytes > 0 && (classify(src) != Memory::device ||
                        classify((const char*)src + src_bytes - 1) != Memory::device))
    r.fault(f.tid, "source [" + detail::hex(src) + ", +" + std::to_string(src_bytes) +
                       " bytes) is not in one live device allocation (global memory)" + at);
  detail::AsyncCopy c;
  c.dst = static_cast<unsigned char*>(dst);
  c.site = 0;
  if (detail::tl_race) {  // written from now until this thread's wait covers it
    const size_t off = c.dst - r.smem;
    c.site = r.instruction_site("cp.async", -1, file, line);
    r.race_access(f.tid, off, 16, true, c.site);
    for (size_t i = 0; i < 16; ++i)
      r.shadow[off + i].pending = detail::Access{(uint16_t)(f.tid + 1), r.syncs[f.tid], c.site};
  }
  memset(c.bytes, 0, sizeof c.bytes);
  if (src_bytes > 0) memcpy(c.bytes, src, (size_t)src_bytes);
  memset(dst, 0xff, 16);
  f.cp_issued.push_back(c);
}

void cp_async_commit_group(const char*, int) {
  Fiber& f = *detail::tl_runner->current;
  f.cp_groups.push_back(std::move(f.cp_issued));  // an empty group too, as PTX says
  f.cp_issued.clear();
}

void cp_async_wait_group(int n, const char* file, int line) {
  Runner& r = *detail::tl_runner;
  Fiber& f = *r.current;
  if (n < 0)
    r.fault(f.tid, "cp.async.wait_group " + std::to_string(n) + ": N must be >= 0" +
                       detail::site_str("cp.async.wait_group", file, line));
  while (f.cp_groups.size() > (size_t)n) {
    for (const detail::AsyncCopy& c : f.cp_groups.front()) {
      memcpy(c.dst, c.bytes, 16);
      if (c.site == 0) continue;  // issued with racecheck off
      // Landed: an ordinary write by this thread in this interval.
      for (size_t i = 0; i < 16; ++i) {
        detail::ByteShadow& b = r.shadow[c.dst - r.smem + i];
        b.pending = detail::Access{};
        b.epoch = r.epoch;
        b.w = detail::Access{(uint16_t)(f.tid + 1), r.syncs[f.tid], c.site};
        b.r1 = b.r2 = detail::Access{};
      }
    }
    f.cp_groups.pop_front();
  }
}

}  // namespace cuda_emulator::ptx

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

// ---- the access hooks of the instrumented kernel sources (racecheck) -----------------------
// The sources with device code are compiled with an instrumentation that calls a function at
// every load and store (kernels/cuda_emulator/meson.build: g++ -fsanitize=thread without its
// runtime, whose entry points are these; clang -fsanitize-coverage=trace-loads,trace-stores).
// Each returns at once unless a block's fiber is running and the address is in its shared
// memory. Atomics are done as the compiler would have done them (sequentially consistent);
// they take no part in the race detection.
namespace {
using cuda_emulator::detail::tl_race;
inline void note(const void* p, size_t n, bool write, uintptr_t pc) {
  cuda_emulator::detail::Runner* r = tl_race;
  if (__builtin_expect(r == nullptr, 1)) return;
  const size_t off = (size_t)((const unsigned char*)p - r->smem);
  if (off >= r->smem_end) return;
  r->race_access(r->current->tid, off, n, write, pc);
}
}  // namespace

#define GPUMIX_EMU_PC ((uintptr_t)__builtin_return_address(0))
extern "C" {
#define GPUMIX_EMU_HOOKS(N)                                                              \
  void __tsan_read##N(void* p) { note(p, N, false, GPUMIX_EMU_PC); }                      \
  void __tsan_write##N(void* p) { note(p, N, true, GPUMIX_EMU_PC); }                      \
  void __tsan_unaligned_read##N(void* p) { note(p, N, false, GPUMIX_EMU_PC); }            \
  void __tsan_unaligned_write##N(void* p) { note(p, N, true, GPUMIX_EMU_PC); }            \
  void __sanitizer_cov_load##N(void* p) { note(p, N, false, GPUMIX_EMU_PC); }             \
  void __sanitizer_cov_store##N(void* p) { note(p, N, true, GPUMIX_EMU_PC); }
GPUMIX_EMU_HOOKS(1)
GPUMIX_EMU_HOOKS(2)
GPUMIX_EMU_HOOKS(4)
GPUMIX_EMU_HOOKS(8)
GPUMIX_EMU_HOOKS(16)
#undef GPUMIX_EMU_HOOKS
void __tsan_read_range(void* p, unsigned long n) { note(p, n, false, GPUMIX_EMU_PC); }
void __tsan_write_range(void* p, unsigned long n) { note(p, n, true, GPUMIX_EMU_PC); }
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void** vptr, void* /*new_value*/) { note(vptr, sizeof *vptr, true, GPUMIX_EMU_PC); }
void __tsan_vptr_read(void** vptr) { note(vptr, sizeof *vptr, false, GPUMIX_EMU_PC); }

#define GPUMIX_EMU_ATOMICS(N, T)                                                             \
  T __tsan_atomic##N##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  void __tsan_atomic##N##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                   \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                      \
  }                                                                                          \
  T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {      \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);   \
  }                                                                                          \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {        \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
  }                                                                                          \
  T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {             \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);         \
    return c;                                                                                \
  }
GPUMIX_EMU_ATOMICS(8, char)
GPUMIX_EMU_ATOMICS(16, short)
GPUMIX_EMU_ATOMICS(32, int)
GPUMIX_EMU_ATOMICS(64, long long)
#undef GPUMIX_EMU_ATOMICS
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
}  // extern "C"
#undef GPUMIX_EMU_PC
