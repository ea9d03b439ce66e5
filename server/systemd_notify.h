#pragma once
// sd_notify(3) for Type=notify units. Without libsystemd at build time, or
// when not started by systemd (no $NOTIFY_SOCKET), these do nothing.

#include <chrono>
#include <optional>
#include <string_view>

namespace tensord::server {

// Sends one state string, e.g. "READY=1\nSTATUS=listening on 127.0.0.1:7450".
void notifySystemd(std::string_view state);

// Whether notifications go anywhere: built with libsystemd and $NOTIFY_SOCKET set.
bool systemdNotifying();

// The interval at which the unit wants WATCHDOG=1, if WatchdogSec= is set.
std::optional<std::chrono::microseconds> systemdWatchdogInterval();

}  // namespace tensord::server
