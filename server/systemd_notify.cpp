#include "server/systemd_notify.h"

#include <cstdlib>
#include <string>

#ifdef TENSORD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace tensord::server {

void notifySystemd(std::string_view state) {
#ifdef TENSORD_HAVE_SYSTEMD
  sd_notify(0, std::string(state).c_str());
#else
  (void)state;
#endif
}

bool systemdNotifying() {
#ifdef TENSORD_HAVE_SYSTEMD
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && *socket != '\0';
#else
  return false;
#endif
}

std::optional<std::chrono::microseconds> systemdWatchdogInterval() {
#ifdef TENSORD_HAVE_SYSTEMD
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return std::chrono::microseconds(usec);
#endif
  return std::nullopt;
}

}  // namespace tensord::server
