#pragma once
// Socket activation: the listening socket systemd passes to the daemon
// (LISTEN_FDS/LISTEN_PID, sd_listen_fds(3)), as tensord.socket sets up.
// Without a passed socket the daemon binds `listen` itself.

#include <optional>

#include "server/config.h"

namespace tensord::server {

struct PassedSocket {
  int fd = -1;       // listening, close-on-exec; the caller owns it
  HostPort address;  // where it is bound (numeric host)
};

// The socket systemd passed, or nullopt when none was passed to this process
// (no LISTEN_FDS, or LISTEN_PID names another process). The variables are
// removed from the environment either way, so children do not see them.
// Throws ConfigError when the passed descriptors are not exactly one
// listening TCP socket, or when tensord was built without libsystemd and
// LISTEN_FDS is set.
std::optional<PassedSocket> takePassedSocket();

}  // namespace tensord::server
