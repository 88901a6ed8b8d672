// Knowing at once that a machine was lost (issue 23, item 4). Under MPI a rank whose peer
// dies waits in its next collective until mpirun notices and kills the job, and nothing of
// GPUMix says which node went and which ranks with it. PeerWatch keeps, beside MPI's own,
// one TCP connection from every rank to every other (tiny: nothing flows but a goodbye),
// with keepalive probes, and a thread that polls them. A peer's connection that closes
// without its goodbye (its process was killed: the kernel closes its sockets) or stops
// answering the probes (its machine went silent: ~5 s) means that peer is gone. The thread
// waits one second more to collect the peers lost with it, prints on stderr which node(s)
// and ranks were lost and how to resume, and ends this process (exit status 75): every
// surviving rank ends within seconds, with the error, whatever collective it is in.
//
// Where it cannot be set up (a node's name does not resolve, a port cannot be reached) it
// is off on every rank, said once on stderr, and the run goes on.
//
// Orderly ends say goodbye (the destructor; stand_down() before this rank aborts the job on
// its own error), so a finished or failing peer is never reported as lost. Watching needs
// N-1 sockets per rank: above kMaxWatchedRanks ranks it is off (said once on rank 0).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/comm/comm.h"

namespace gpumix::dist {

constexpr int kMaxWatchedRanks = 256;
constexpr int kPeerLostExitCode = 75;  // EX_TEMPFAIL: the job can be resumed elsewhere

// Who is lost, as the report names it. Pure, for tests: `hosts[r]` is rank r's node,
// `lost[r]` whether it is gone, `self` the reporting rank, `hint` the last sentence.
std::string peer_loss_message(int self, const std::vector<std::string>& hosts, const std::vector<bool>& lost,
                              const std::string& hint);

class PeerWatch {
 public:
  // Collective over `comm` (every rank constructs it at the same point); never throws for
  // a watch it cannot set up (see above). `hint`: what to
  // do next, appended to the report (e.g. how to resume the run).
  PeerWatch(Comm& comm, std::string hint);
  ~PeerWatch();  // says goodbye to every peer and stops the thread
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // This rank is about to end the job itself (MPI_Abort on its own error): tells the peers
  // not to report it as lost, and stops watching.
  void stand_down();

  // Every rank's node name, as each rank said it (gethostname).
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  void run();
  void say_goodbye(char what);

  int rank_ = 0;
  std::string hint_;
  std::vector<std::string> hosts_;
  std::vector<int> fds_;  // fds_[r]: the connection to rank r (-1: self, or not watched)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gpumix::dist
