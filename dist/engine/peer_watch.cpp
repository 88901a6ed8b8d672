#include "dist/engine/peer_watch.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/log.h"

namespace gpumix::dist {
namespace {

constexpr int kHostInts = 16;                  // 64 bytes of hostname per rank
constexpr int kEntryInts = 2 + kHostInts;      // address, port, hostname
constexpr double kConnectTimeoutS = 30;        // all ranks are at the same point: seconds at most
constexpr double kCollectS = 1.0;              // after a first loss, wait this long for the rest
constexpr char kGoodbye = 'B', kAborting = 'A';

std::string errno_text() { return std::strerror(errno); }

// The IPv4 address this host's name resolves to (what its peers connect to), 0 if none.
uint32_t host_address(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return 0;
  const uint32_t a = ((sockaddr_in*)res->ai_addr)->sin_addr.s_addr;
  freeaddrinfo(res);
  return a;
}

void keepalive(int fd) {
  // A silent machine (no FIN, no RST) is noticed after 2 s idle + 3 probes 1 s apart.
  int on = 1, idle = 2, interval = 1, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

bool read_exact(int fd, void* buf, size_t n) {
  char* p = (char*)buf;
  while (n > 0) {
    const ssize_t got = recv(fd, p, n, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= (size_t)got;
  }
  return true;
}

// Collective: true when no rank found `error`. Otherwise watching is off on every rank (the
// run goes on: mpirun still ends the job when a node is lost, only without the naming), and
// the highest rank that found a problem says it on stderr.
bool all_ready(Comm& comm, const std::string& error) {
  const double worst = comm.all_reduce_max(error.empty() ? -1.0 : (double)comm.rank());
  if (worst < 0) return true;
  if ((int)worst == comm.rank())
    std::fprintf(stderr, "gpumix: warning: rank %d: %s; a lost node will not be named (peer watch off)\n",
                 comm.rank(), error.c_str());
  return false;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string peer_loss_message(int self, const std::vector<std::string>& hosts, const std::vector<bool>& lost,
                              const std::string& hint) {
  // Lost and remaining ranks per node, nodes in order of their first rank.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<int>, std::vector<int>>> by_host;
  for (int r = 0; r < (int)hosts.size(); ++r) {
    if (!by_host.count(hosts[r])) order.push_back(hosts[r]);
    auto& e = by_host[hosts[r]];
    (lost[r] ? e.first : e.second).push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& h : order) {
    const auto& [gone, left] = by_host[h];
    if (gone.empty()) continue;
    if (left.empty())
      parts.push_back("node " + h + " (rank" + (gone.size() > 1 ? "s " : " ") + join_ranks(gone) + ")");
    else
      parts.push_back("rank" + std::string(gone.size() > 1 ? "s " : " ") + join_ranks(gone) + " on node " + h +
                      " (its rank" + (left.size() > 1 ? "s " : " ") + join_ranks(left) + " still answer)");
  }
  std::string what;
  for (size_t i = 0; i < parts.size(); ++i) what += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  std::string msg = "rank " + std::to_string(self) + " (node " + hosts[self] + "): lost " + what +
                    ": their connections closed without a goodbye or stopped answering (the processes or the "
                    "machine are gone); the job cannot go on without them";
  if (!hint.empty()) msg += "; " + hint;
  return msg;
}

PeerWatch::PeerWatch(Comm& comm, std::string hint) : rank_(comm.rank()), hint_(std::move(hint)) {
  const int n = comm.size();
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  std::string host(name);
  if (host.size() > kHostInts * 4 - 1) host.resize(kHostInts * 4 - 1);
  if (n == 1) {
    hosts_ = {host};
    return;
  }
  if (n > kMaxWatchedRanks) {
    if (rank_ == 0)
      log_info("peer watch off: ", n, " ranks is more than ", kMaxWatchedRanks,
               " (a lost node is then noticed by mpirun alone)");
    return;
  }
  std::string error;  // this rank's setup problem, agreed on below so that all fail alike
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, (sockaddr*)&addr, sizeof addr) != 0 || listen(listener, n) != 0 ||
      getsockname(listener, (sockaddr*)&addr, &len) != 0)
    error = "peer watch: cannot listen on a TCP port: " + errno_text();
  const uint32_t ip = host_address(host);
  if (error.empty() && ip == 0)
    error = "peer watch: this node's name '" + host + "' does not resolve to an IPv4 address (getaddrinfo), "
            "so the other ranks cannot reach this one: give the node a name in DNS or /etc/hosts";

  std::vector<int32_t> mine(kEntryInts, 0);
  mine[0] = (int32_t)ip;
  mine[1] = ntohs(addr.sin_port);
  std::memcpy(&mine[2], host.data(), host.size());
  if (!all_ready(comm, error)) {
    if (listener >= 0) close(listener);
    return;
  }
  Tensor in = Tensor::from_vector(mine, {kEntryInts});
  Tensor all = Tensor::zeros({(int64_t)n * kEntryInts}, DType::i32);
  comm.all_gather_v(in, all, std::vector<int64_t>(n, kEntryInts));
  const int32_t* e = all.data<int32_t>();
  hosts_.resize(n);
  for (int r = 0; r < n; ++r) hosts_[r] = std::string((const char*)&e[r * kEntryInts + 2]).substr(0, kHostInts * 4);

  // Connect to the higher ranks (saying who we are), accept the lower ones.
  fds_.assign(n, -1);
  for (int r = rank_ + 1; r < n && error.empty(); ++r) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = (uint32_t)e[r * kEntryInts];
    to.sin_port = htons((uint16_t)e[r * kEntryInts + 1]);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int32_t me = rank_;
    if (fd < 0 || connect(fd, (sockaddr*)&to, sizeof to) != 0 || send(fd, &me, sizeof me, MSG_NOSIGNAL) != sizeof me) {
      char ipt[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &to.sin_addr, ipt, sizeof ipt);
      error = "peer watch: cannot connect to rank " + std::to_string(r) + " on node " + hosts_[r] + " at " + ipt +
              ":" + std::to_string(ntohs(to.sin_port)) + ": " + errno_text();
      if (fd >= 0) close(fd);
      break;
    }
    fds_[r] = fd;
  }
  for (int k = 0; k < rank_ && error.empty(); ++k) {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, (int)(kConnectTimeoutS * 1000)) != 1) {
      error = "peer watch: only " + std::to_string(k) + " of the " + std::to_string(rank_) +
              " lower ranks connected within " + std::to_string((int)kConnectTimeoutS) + " s";
      break;
    }
    const int fd = accept(listener, nullptr, nullptr);
    int32_t who = -1;
    if (fd < 0 || !read_exact(fd, &who, sizeof who) || who < 0 || who >= rank_ || fds_[who] != -1) {
      error = "peer watch: a bad greeting on rank " + std::to_string(rank_) + "'s port (rank " + std::to_string(who) +
              "): " + errno_text();
      if (fd >= 0) close(fd);
      break;
    }
    fds_[who] = fd;
  }
  if (listener >= 0) close(listener);
  if (!all_ready(comm, error)) {
    for (int& fd : fds_)
      if (fd >= 0) close(fd), fd = -1;
    return;
  }
  for (int fd : fds_)
    if (fd >= 0) keepalive(fd);
  thread_ = std::thread([this] { run(); });
}

void PeerWatch::say_goodbye(char what) {
  for (int fd : fds_)
    if (fd >= 0) send(fd, &what, 1, MSG_NOSIGNAL);
}

void PeerWatch::stand_down() {
  if (!thread_.joinable()) return;
  say_goodbye(kAborting);
  stop_ = true;
  thread_.join();
}

PeerWatch::~PeerWatch() {
  if (thread_.joinable()) {
    say_goodbye(kGoodbye);
    stop_ = true;
    thread_.join();
  }
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void PeerWatch::run() {
  const int n = (int)fds_.size();
  std::vector<pollfd> polls;
  std::vector<int> rank_of;
  for (int r = 0; r < n; ++r)
    if (fds_[r] >= 0) {
      polls.push_back({fds_[r], POLLIN, 0});
      rank_of.push_back(r);
    }
  std::vector<bool> lost(n, false);
  double first_loss = -1;
  while (!stop_) {
    const int ready = poll(polls.data(), polls.size(), 100);
    if (ready < 0 && errno != EINTR) return;  // cannot watch any more; MPI still ends the job
    for (size_t i = 0; i < polls.size() && ready > 0; ++i) {
      if (polls[i].fd < 0 || polls[i].revents == 0) continue;
      char c = 0;
      const ssize_t got = recv(polls[i].fd, &c, 1, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got != 1) {  // EOF without a goodbye, a reset, or keepalive gave up
        lost[rank_of[i]] = true;
        if (first_loss < 0) first_loss = detail::now_seconds();
      }
      polls[i].fd = -1;  // goodbye, abort, or lost: nothing more to hear from it
    }
    if (first_loss >= 0 && detail::seconds_since(first_loss) >= kCollectS) {
      if (stop_) return;  // this rank is ending in order itself
      const std::string msg = peer_loss_message(rank_, hosts_, lost, hint_);
      std::fprintf(stderr, "gpumix: error: %s\n", msg.c_str());
      std::fflush(stderr);
      std::_Exit(kPeerLostExitCode);
    }
  }
}

}  // namespace gpumix::dist
