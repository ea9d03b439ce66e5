// libFuzzer target: the daemon's config parser, fed arbitrary bytes as the
// config file text. A ConfigError is the expected answer to bad input;
// anything else escaping, a sanitizer report or a hang is a bug.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensord::server;
  try {
    Config config = parseConfig(std::string_view(reinterpret_cast<const char*>(data), size));
    // What the daemon does next with the parsed address, short of binding it.
    (void)config.listen.str();
    (void)config.listen.isLoopback();
  } catch (const ConfigError&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
