#include "dist/engine/stop.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace gpumix::dist {
namespace {

std::atomic<int> pending{0};
std::atomic<bool> announce_signal{false};  // this process holds rank 0
std::atomic<bool> announce_wanted{false};  // announce_stop_signals
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

constexpr int kSignals[] = {SIGTERM, SIGINT};

void write_stderr(const char* text) {
  ssize_t unused = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)unused;
}

void on_signal(int signo) {
  int none = 0;
  if (pending.compare_exchange_strong(none, signo)) {
    if (announce_signal.load() && announce_wanted.load())
      write_stderr(signo == SIGINT ? "gpumix: SIGINT: stopping after the step in flight, with a checkpoint "
                                   "(again to stop at once)\n"
                                 : "gpumix: SIGTERM: stopping after the step in flight, with a checkpoint "
                                   "(again to stop at once)\n");
    return;
  }
  // The second signal: what it would have done without us.
  std::signal(signo, SIG_DFL);
  std::raise(signo);
}

// Nested trainings (thread ranks each run one) install once: the first in, the last out.
std::mutex install_mutex;
int installed = 0;
struct sigaction saved[2];
bool ours[2];

}  // namespace

StopOnSignals::StopOnSignals(bool announce) {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (announce) announce_signal.store(true);
  if (installed++ > 0) return;
  for (int i = 0; i < 2; ++i) {
    ours[i] = false;
    if (sigaction(kSignals[i], nullptr, &saved[i]) != 0) continue;
    // A host program's own handler (or an ignored signal) is left alone.
    if ((saved[i].sa_flags & SA_SIGINFO) || saved[i].sa_handler != SIG_DFL) continue;
    struct sigaction act {};
    act.sa_handler = on_signal;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    ours[i] = sigaction(kSignals[i], &act, nullptr) == 0;
  }
}

StopOnSignals::~StopOnSignals() {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (--installed > 0) return;
  announce_signal.store(false);
  for (int i = 0; i < 2; ++i)
    if (ours[i]) sigaction(kSignals[i], &saved[i], nullptr);
}

void announce_stop_signals(bool on) { announce_wanted.store(on); }

void request_stop(int signo) {
  int none = 0;
  pending.compare_exchange_strong(none, signo);
}

int stop_requested() { return pending.load(); }

void clear_stop_request() { pending.store(0); }

const char* signal_name(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a stop request";
  }
}

}  // namespace gpumix::dist
