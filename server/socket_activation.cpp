#include "server/socket_activation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef TENSORD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace tensord::server {
namespace {

[[maybe_unused]] HostPort boundAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    throw ConfigError(std::string("socket activation: getsockname on the passed socket failed: ") +
                      std::strerror(errno));
  }
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return {host, ntohs(in->sin_port)};
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
  return {host, ntohs(in6->sin6_port)};
}

}  // namespace

std::optional<PassedSocket> takePassedSocket() {
#ifdef TENSORD_HAVE_SYSTEMD
  // Checks LISTEN_PID against our pid, marks the descriptors close-on-exec
  // and unsets the variables.
  const int count = sd_listen_fds(1);
  if (count < 0) {
    throw ConfigError(std::string("socket activation: LISTEN_FDS cannot be used: ") + std::strerror(-count));
  }
  if (count == 0) return std::nullopt;
  if (count != 1) {
    for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + count; ++fd) ::close(fd);
    throw ConfigError("socket activation: systemd passed " + std::to_string(count) +
                      " sockets; tensord takes exactly one (one ListenStream= in tensord.socket)");
  }
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, /*listening=*/1, /*port=*/0) <= 0) {
    ::close(fd);
    throw ConfigError(
        "socket activation: the passed descriptor is not a listening TCP socket (tensord.socket needs "
        "ListenStream=HOST:PORT)");
  }
  PassedSocket passed{fd, {}};
  try {
    passed.address = boundAddress(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return passed;
#else
  const char* fds = std::getenv("LISTEN_FDS");
  const char* pid = std::getenv("LISTEN_PID");
  if (fds != nullptr && *fds != '\0' && pid != nullptr && std::to_string(::getpid()) == pid) {
    throw ConfigError("socket activation: LISTEN_FDS is set, but this tensord was built without libsystemd");
  }
  return std::nullopt;
#endif
}

}  // namespace tensord::server
