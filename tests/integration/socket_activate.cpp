// tensord_socket_activate: does for a test what systemd does for a socket
// unit. It binds and listens on HOST:PORT (port 0 picks a free one), makes
// that socket descriptor 3, sets LISTEN_FDS, LISTEN_PID (its own pid, which
// the program keeps across exec) and LISTEN_FDNAMES, prints
// "activation socket HOST:PORT", and execs the program.
//
//   tensord_socket_activate [--sockets N] [--other-pid] HOST:PORT PROGRAM ARGS...
//
// --sockets N passes N listening sockets (3, 4, ...), all on HOST with free
// ports; --other-pid sets LISTEN_PID to a pid that is not the program's, as
// when the variables were meant for another process.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "tensord_socket_activate: %s\n", what.c_str());
  std::exit(2);
}

// A listening TCP socket on host:port at descriptor `target`, inheritable.
std::string listenAt(const std::string& host, uint16_t port, int target) {
  sockaddr_storage addr{};
  socklen_t length = 0;
  int family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr) == 1) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr) == 1) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    length = sizeof(sockaddr_in6);
    family = AF_INET6;
  } else {
    die("expected a numeric host, got '" + host + "'");
  }
  int fd = ::socket(family, SOCK_STREAM, 0);
  if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0) die(std::string("bind: ") + std::strerror(errno));
  if (::listen(fd, 64) != 0) die(std::string("listen: ") + std::strerror(errno));
  if (fd != target) {
    if (::dup2(fd, target) < 0) die(std::string("dup2: ") + std::strerror(errno));
    ::close(fd);
  }
  ::fcntl(target, F_SETFD, 0);  // inherited across exec

  socklen_t got = sizeof addr;
  ::getsockname(target, reinterpret_cast<sockaddr*>(&addr), &got);
  const uint16_t bound = family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                                           : ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return (family == AF_INET6 ? "[" + host + "]" : host) + ":" + std::to_string(bound);
}

}  // namespace

int main(int argc, char** argv) {
  int sockets = 1;
  bool otherPid = false;
  int i = 1;
  for (; i < argc && std::strncmp(argv[i], "--", 2) == 0; ++i) {
    if (std::strcmp(argv[i], "--sockets") == 0 && i + 1 < argc) {
      sockets = std::atoi(argv[++i]);
      if (sockets < 1 || sockets > 8) die("--sockets: expected 1 to 8");
    } else if (std::strcmp(argv[i], "--other-pid") == 0) {
      otherPid = true;
    } else {
      die(std::string("unknown option ") + argv[i]);
    }
  }
  if (argc - i < 2) die("usage: tensord_socket_activate [--sockets N] [--other-pid] HOST:PORT PROGRAM ARGS...");
  const std::string where = argv[i++];
  std::string host = where.substr(0, where.rfind(':'));
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const int port = std::atoi(where.substr(where.rfind(':') + 1).c_str());

  // Descriptors 3.. may be taken by whatever we inherited; systemd's start at 3.
  std::vector<std::string> addresses;
  for (int n = 0; n < sockets; ++n) addresses.push_back(listenAt(host, n == 0 ? uint16_t(port) : 0, 3 + n));
  std::printf("activation socket %s\n", addresses.front().c_str());
  std::fflush(stdout);

  std::string names;
  for (int n = 0; n < sockets; ++n) names += n == 0 ? "tensord" : ":tensord";
  ::setenv("LISTEN_FDS", std::to_string(sockets).c_str(), 1);
  ::setenv("LISTEN_PID", std::to_string(otherPid ? ::getppid() : ::getpid()).c_str(), 1);
  ::setenv("LISTEN_FDNAMES", names.c_str(), 1);
  ::execv(argv[i], argv + i);
  die(std::string("cannot run ") + argv[i] + ": " + std::strerror(errno));
}
