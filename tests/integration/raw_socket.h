#pragma once
// Raw TCP sockets for tests that talk to the daemon below the client library:
// connect, send bytes, and see whether the daemon closed its side.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>

namespace tensord::testing {

// Connects a raw TCP socket to "HOST:PORT" (IPv4); returns the fd, or -1.
inline int rawConnect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Writes all of `bytes`; false when the peer already closed (or reset) the
// connection, which for abuse tests is an acceptable outcome, not a failure.
inline bool sendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

// True when the peer closes `fd` within `timeout`: read returns 0 (EOF) or
// an error (reset). Whatever the peer sends before that is discarded.
inline bool closedWithin(int fd, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, int(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
  }
}

}  // namespace tensord::testing
