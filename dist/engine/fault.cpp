#include "dist/engine/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/log.h"

namespace gpumix::dist {

namespace {

struct Fault {
  int rank = -1;
  std::string point;
  int64_t step = -1;
  std::string arg;
};

const char* const kPoints[] = {"forward", "backward", "collective", "optimizer", "checkpoint", "prune",
                               "nan_loss", "nan_grad", "inf_grad", "slow"};

std::vector<Fault> parse(const char* text) {
  std::vector<Fault> faults;
  std::stringstream all(text);
  std::string item;
  while (std::getline(all, item, ',')) {
    if (item.empty()) continue;
    std::vector<std::string> parts;
    std::stringstream one(item);
    std::string p;
    while (std::getline(one, p, ':')) parts.push_back(p);
    bool known = false;
    for (const char* k : kPoints) known = known || (parts.size() >= 2 && parts[1] == k);
    Fault f;
    try {
      if (parts.size() < 3 || parts.size() > 4 || !known) throw std::invalid_argument("shape");
      f.rank = std::stoi(parts[0]);
      f.point = parts[1];
      f.step = std::stoll(parts[2]);
      if (parts.size() == 4) f.arg = parts[3];
    } catch (const std::exception&) {
      throw std::invalid_argument("GPUMIX_FAULT: cannot read '" + item +
                                  "' (expected RANK:POINT:STEP[:ARG], POINT one of forward, backward, "
                                  "collective, optimizer, checkpoint, prune, nan_loss, nan_grad, inf_grad, slow)");
    }
    faults.push_back(f);
  }
  return faults;
}

// The one place that reads the variable.
const std::vector<Fault>& faults() {
  static const std::vector<Fault> f = [] {
    const char* text = std::getenv("GPUMIX_FAULT");
    return text && *text ? parse(text) : std::vector<Fault>{};
  }();
  return f;
}

thread_local int64_t current_step = -1;

const Fault* find(int rank, const char* point) {
  for (const Fault& f : faults())
    if (f.rank == rank && f.step == current_step && f.point == point) return &f;
  return nullptr;
}

}  // namespace

bool faults_enabled() { return !faults().empty(); }

void fault_set_step(int64_t step) { current_step = step; }

void fault_point(int rank, const char* point) {
  if (!faults_enabled()) return;
  const Fault* f = find(rank, point);
  if (!f) return;
  const std::string what = "injected fault (GPUMIX_FAULT) on rank " + std::to_string(rank) + " at " + point +
                           " of step " + std::to_string(current_step);
  if (f->arg == "exit" || f->arg == "kill") {
    log_error(what, ": ", f->arg == "exit" ? "_exit(86)" : "SIGKILL");
    if (f->arg == "kill") ::kill(::getpid(), SIGKILL);
    ::_exit(86);
  }
  throw std::runtime_error(what);
}

bool fault_inject(int rank, const char* point, int* arg) {
  if (!faults_enabled()) return false;
  const Fault* f = find(rank, point);
  if (!f) return false;
  if (arg) *arg = f->arg.empty() ? -1 : std::atoi(f->arg.c_str());
  return true;
}

}  // namespace gpumix::dist
