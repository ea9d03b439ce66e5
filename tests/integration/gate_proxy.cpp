#include "tests/integration/gate_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tensord::testing {
namespace {

std::runtime_error sysError(const std::string& what) { return std::runtime_error(what + ": " + std::strerror(errno)); }

void setNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One direction of one proxied connection.
struct Flow {
  int from = -1;
  int to = -1;
  std::string pending;  // read from `from`, not yet written to `to`
  bool eof = false;     // `from` said EOF (or failed)
  bool shut = false;    // `to` was shut down for writing
};

struct Connection {
  Flow up;    // client -> upstream
  Flow down;  // upstream -> client
  int clientFd = -1;
  int upstreamFd = -1;
  ~Connection() {
    if (clientFd >= 0) close(clientFd);
    if (upstreamFd >= 0) close(upstreamFd);
  }
};

}  // namespace

std::pair<std::string, uint16_t> splitHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    throw std::invalid_argument("expected HOST:PORT, got '" + address + "'");
  }
  return {address.substr(0, colon), uint16_t(std::stoul(address.substr(colon + 1)))};
}

GateProxy::GateProxy(const std::string& upstream) {
  std::tie(upstreamHost_, upstreamPort_) = splitHostPort(upstream);
  listenFd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listenFd_ < 0) throw sysError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw sysError("bind");
  if (listen(listenFd_, 16) != 0) throw sysError("listen");
  socklen_t len = sizeof addr;
  getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  setNonBlocking(listenFd_);
  if (pipe2(wakePipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw sysError("pipe2");
  thread_ = std::thread([this] { run(); });
}

GateProxy::~GateProxy() {
  stop_ = true;
  wake();
  thread_.join();
  close(listenFd_);
  close(wakePipe_[0]);
  close(wakePipe_[1]);
}

std::string GateProxy::address() const { return "127.0.0.1:" + std::to_string(port_); }

void GateProxy::hold() {
  holding_ = true;
  const uint64_t asked = ++holdsAsked_;
  wake();
  while (holdsSeen_.load() < asked && !stop_) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

void GateProxy::release() {
  holding_ = false;
  wake();
}

void GateProxy::wake() {
  char c = 1;
  [[maybe_unused]] ssize_t n = write(wakePipe_[1], &c, 1);
}

void GateProxy::run() {
  std::vector<std::unique_ptr<Connection>> conns;
  while (!stop_) {
    // Every send of the passes before has been counted, and holding_ was set
    // before holdsAsked_ grew: from here on this thread sees the hold.
    holdsSeen_ = holdsAsked_.load();
    bool holding = holding_;
    std::vector<pollfd> fds = {{listenFd_, POLLIN, 0}, {wakePipe_[0], POLLIN, 0}};
    for (auto& c : conns) {
      for (Flow* f : {&c->up, &c->down}) {
        bool gated = f == &c->down && holding;
        // A negative fd is ignored by poll(): no busy loop on a hung-up socket.
        fds.push_back({f->eof ? -1 : f->from, POLLIN, 0});
        bool wantOut = !f->pending.empty() && !gated;
        fds.push_back({wantOut ? f->to : -1, POLLOUT, 0});
      }
    }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) {
      char buf[64];
      while (read(wakePipe_[0], buf, sizeof buf) > 0) {
      }
    }
    if (fds[0].revents & POLLIN) {
      int cfd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (cfd >= 0) {
        auto c = std::make_unique<Connection>();
        c->clientFd = cfd;
        c->upstreamFd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(upstreamPort_);
        inet_pton(AF_INET, upstreamHost_.c_str(), &addr.sin_addr);
        // Blocking connect on loopback, then non-blocking for the byte pump.
        if (connect(c->upstreamFd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
          setNonBlocking(c->upstreamFd);
          setNoDelay(c->upstreamFd);
          setNoDelay(c->clientFd);
          c->up.from = c->down.to = c->clientFd;
          c->up.to = c->down.from = c->upstreamFd;
          conns.push_back(std::move(c));
        }
      }
    }
    // Pump every flow: read what is there, write what may go.
    size_t i = 2;
    for (auto& c : conns) {
      for (Flow* f : {&c->up, &c->down}) {
        short rev = fds[i].revents;
        i += 2;
        if (!f->eof && (rev & (POLLIN | POLLHUP | POLLERR))) {
          char buf[1 << 16];
          ssize_t n = read(f->from, buf, sizeof buf);
          if (n > 0) {
            f->pending.append(buf, size_t(n));
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            f->eof = true;
          }
        }
        bool gated = f == &c->down && holding_;
        while (!f->pending.empty() && !gated) {
          ssize_t n = send(f->to, f->pending.data(), f->pending.size(), MSG_NOSIGNAL);
          if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
            f->pending.clear();  // the other side is gone
            f->eof = true;
            break;
          }
          (f == &c->up ? toUpstream_ : toClient_) += uint64_t(n);
          f->pending.erase(0, size_t(n));
        }
        if (f->eof && f->pending.empty() && !f->shut) {
          shutdown(f->to, SHUT_WR);
          f->shut = true;
        }
      }
    }
    uint64_t held = 0;
    for (auto& c : conns) held += c->down.pending.size();
    held_ = holding_ ? held : 0;
    std::erase_if(conns, [](const auto& c) { return c->up.shut && c->down.shut; });
  }
}

}  // namespace tensord::testing
