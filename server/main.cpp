// tensord: the daemon's entry point. Parses the command line, loads the
// config, makes the logger and hands over to runDaemon().

#include <spdlog/spdlog.h>
#ifdef TENSORD_HAVE_MIMALLOC
#include <mimalloc.h>
#else
#include <malloc.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/tensord.capnp.h"
#include "acl/policy_json.h"
#include "server/access.h"
#include "server/config.h"
#include "server/daemon.h"
#include "server/logging.h"

namespace {

constexpr std::string_view kUsage =
    "usage: tensord --config FILE [--listen HOST:PORT] [--log-level LEVEL] [--check-config] [--version]\n"
    "  --config FILE       JSON configuration (see config/tensord.json)\n"
    "  --listen HOST:PORT  listen here instead of the config's address; port 0 picks a free port\n"
    "                      (a socket passed by systemd, tensord.socket, wins over both)\n"
    "  --log-level LEVEL   trace, debug, info, warn or error instead of the config's log_level\n"
    "  --check-config      validate the configuration, print \"config OK\" and exit\n"
    "  --version           print the version and exit\n";

// The allocator the process runs on, for the startup log: mimalloc's only
// where malloc's blocks come from it.
std::string allocatorName() {
#ifdef TENSORD_HAVE_MIMALLOC
  const int v = mi_version();  // major * 100 + minor * 10 + patch
  const std::string name =
      "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10);
  void* probe = std::malloc(64);
  const bool routed = mi_is_in_heap_region(probe);
  std::free(probe);
  return routed ? name : "the system's malloc (" + name + " is linked, but malloc does not reach it)";
#else
  return "the system's malloc";
#endif
}

struct Flags {
  std::optional<std::string> config;
  std::optional<std::string> listen;
  std::optional<std::string> logLevel;
  bool checkConfig = false;
  bool version = false;
  bool help = false;
};

int usageError(const std::string& message) {
  std::fprintf(stderr, "tensord: %s\n%.*s", message.c_str(), int(kUsage.size()), kUsage.data());
  return 2;
}

// Returns an error message, or "" when the flags parsed.
std::string parseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string> inlineValue;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inlineValue = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    auto value = [&](std::optional<std::string>& out) -> std::string {
      if (out) return std::string(arg) + " given twice";
      if (inlineValue) {
        out = *inlineValue;
      } else if (i + 1 < argc) {
        out = argv[++i];
      } else {
        return std::string(arg) + " needs a value";
      }
      if (out->empty()) return std::string(arg) + " needs a non-empty value";
      return {};
    };
    auto flag = [&](bool& out) -> std::string {
      if (inlineValue) return std::string(arg) + " takes no value";
      out = true;
      return {};
    };
    std::string error;
    if (arg == "--config") {
      error = value(flags.config);
    } else if (arg == "--listen") {
      error = value(flags.listen);
    } else if (arg == "--log-level") {
      error = value(flags.logLevel);
    } else if (arg == "--check-config") {
      error = flag(flags.checkConfig);
    } else if (arg == "--version") {
      error = flag(flags.version);
    } else if (arg == "--help" || arg == "-h") {
      error = flag(flags.help);
    } else if (arg.starts_with("-")) {
      error = "unknown option '" + std::string(arg) + "'";
    } else {
      error = "unexpected argument '" + std::string(arg) + "'";
    }
    if (!error.empty()) return error;
  }
  return {};
}

// Keeps the memory of transfer messages in the heap for the next ones.
//
// Every chunk a download sends is a fresh 1 MiB Cap'n Proto message, and a
// download holds tens of them at once. glibc returns free memory at the
// heap's top to the kernel once it passes its trim threshold (by default
// twice a dynamic mmap threshold that starts at 128 KiB), so the messages
// kept faulting fresh pages in: measured on an H100 host during a 1 GiB
// download, page faults were 40% of the event loop, which was the limit
// (1.3 GB/s; 2.6 GB/s with these settings). Here blocks up to 32 MiB come
// from the heap, and up to 128 MiB free at its top stay there for reuse:
// what a few transfers hold at once. The cost: after a burst of transfers
// the daemon keeps up to that much more resident memory.
//
// mimalloc decommits freed memory soon after it is freed (2.0's default: 25
// ms); a second keeps it for the next transfer (on an H100 host, 64 MiB and
// 1 GiB transfers took about 40% fewer page faults than at 25 ms, and read
// about as fast as with glibc's allocator). The delay set in the
// environment, under any of its names, wins.
void keepTransferMemory() {
#ifdef TENSORD_HAVE_MIMALLOC
  for (const char* name : {"MIMALLOC_DECOMMIT_DELAY", "MIMALLOC_RESET_DELAY", "MIMALLOC_PURGE_DELAY"}) {
    if (std::getenv(name) != nullptr) return;
  }
  mi_option_set(mi_option_decommit_delay, 1000);
#else
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensord::server;
  keepTransferMemory();
  Flags flags;
  if (std::string error = parseFlags(argc, argv, flags); !error.empty()) return usageError(error);
  if (flags.help) {
    std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
    return 0;
  }
  if (flags.version) {
    std::printf("tensord %s (protocol %u)\n", TENSORD_VERSION, unsigned(tensord::proto::PROTOCOL_VERSION));
    return 0;
  }
  if (!flags.config) return usageError("--config FILE is required");

  const std::filesystem::path configPath = *flags.config;
  Config config;
  try {
    config = loadConfigFile(configPath);
    if (flags.listen) applyListenOverride(config, *flags.listen);
    if (flags.logLevel) applyLogLevelOverride(config, *flags.logLevel);
    resolveDirectories(config, std::filesystem::absolute(configPath).parent_path());
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "tensord: %s: %s\n", configPath.c_str(), e.what());
    return 1;
  }
  std::shared_ptr<const tensord::acl::Policy> policy;
  try {
    policy = loadPolicy(config);
  } catch (const tensord::acl::PolicyError& e) {
    std::fprintf(stderr, "tensord: %s: policy_file %s\n", configPath.c_str(), e.what());
    return 1;
  }
  if (flags.checkConfig) {
    std::printf("config OK\n");
    return 0;
  }

  auto log = makeLogger(config.logLevel, stderrIsJournal());
  log->info("tensord {} starting (config {}, state {}, cache {}, allocator {})", TENSORD_VERSION,
            configPath.string(), config.stateDir.string(), config.cacheDir.string(), allocatorName());
  log->info("{}", describePolicy(config, *policy));
  if (const char* dir = std::getenv("TENSORD_KERNEL_DIR"); dir != nullptr && *dir != '\0') {
    log->warn("TENSORD_KERNEL_DIR is set: kernel files in {} replace the built-in ones", dir);
  }
  return runDaemon(config, std::filesystem::absolute(configPath), log, std::move(policy));
}
