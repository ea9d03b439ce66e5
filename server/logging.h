#pragma once
// The daemon's logger. main() makes the one logger object and passes it
// down; nothing registers it globally.

#include <memory>
#include <string_view>

namespace spdlog {
class logger;
}

namespace tensord::server {

// True when stderr goes to the journal (systemd sets JOURNAL_STREAM).
bool stderrIsJournal();

// A thread-safe logger writing to stderr at `level` (trace|debug|info|warn|
// error). With `journal`, each line starts with its syslog priority ("<6>")
// and carries no timestamp, since journald records both itself.
std::shared_ptr<spdlog::logger> makeLogger(std::string_view level, bool journal);

}  // namespace tensord::server
