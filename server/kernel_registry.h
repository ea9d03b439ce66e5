#pragma once
// The user kernels peers registered (Session.kernelAdd), by op name, with
// their owners, and their copy in the state directory.
//
// Persistence: <state_dir>/kernels.json holds every kernel's name, owner,
// language, description and source (SPIR-V base64-encoded). It is rewritten
// whole after every change, as kernels.json.tmp, fsynced and renamed over the
// old file (and the directory fsynced), so it is always one complete set; a
// kill -9 loses nothing that was acknowledged. On start every kernel is
// rebuilt, which compiles nothing when the cache directory has its SPIR-V
// and pipelines; one that no longer builds is logged and dropped.
//
// Threads: the event-loop thread only. Kernels are shared_ptrs: a call holds
// its kernel until the device finished it, so removing or replacing a
// kernel while calls of it are queued is safe.

#include <kj/async.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/user_kernels.h"

namespace spdlog {
class logger;
}

namespace tensord::compute {
class Engine;
}

namespace tensord::server {

class FileWorker;

struct RegisteredKernel {
  std::shared_ptr<const compute::UserKernel> kernel;
  std::string owner;
  std::string sourceSha256;  // hex digest of the source as given
};

class KernelRegistry {
 public:
  // File name in the state directory.
  static constexpr const char* kStateFile = "kernels.json";

  const RegisteredKernel* find(std::string_view name) const;
  std::vector<const RegisteredKernel*> all() const;  // sorted by name
  void put(RegisteredKernel kernel);                 // adds or replaces
  bool remove(std::string_view name);

  // Writes the current set to <stateDir>/kernels.json off the loop. Writes
  // run one after another, each with the set as it is when it starts, so the
  // file ends up with the latest set whatever the order of changes.
  kj::Promise<void> persist(FileWorker& files, const std::filesystem::path& stateDir);

  // Reads <stateDir>/kernels.json (if any) and rebuilds every kernel. Blocks:
  // for startup, before the daemon listens.
  void load(compute::Engine& engine, const std::filesystem::path& stateDir, spdlog::logger& log);

 private:
  std::string serialize() const;

  std::map<std::string, RegisteredKernel, std::less<>> kernels_;
  kj::Promise<void> lastWrite_ = kj::READY_NOW;
};

// Hex SHA-256 of `bytes`.
std::string sha256Hex(std::string_view bytes);

}  // namespace tensord::server
