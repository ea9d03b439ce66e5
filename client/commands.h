#pragma once
// tensorctl's subcommands. Each returns the process exit code on success and
// throws on failure; tensorctl.cpp maps exception types onto exit codes:
// tensord::Error 1, UsageError / AttrError 2, ConnectError 3, npy::NpyError and
// safetensors::FormatError 4.

#include <memory>
#include <stdexcept>

#include "client/cli_args.h"
#include "tensord/client.h"

namespace tensord::cli {

// The daemon could not be reached or refused the credential (exit code 3).
class ConnectError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Connects when a command first needs the daemon, so local checks (reading a
// .npy file, parsing) fail before any network traffic.
class Connector {
 public:
  explicit Connector(const Options& options) : options_(options) {}
  Client& client();  // throws ConnectError

 private:
  const Options& options_;
  std::unique_ptr<Client> client_;
};

int cmdInfo(const Options& options, Connector& connector);
int cmdWhoami(const Options& options, Connector& connector);
int cmdAdmin(const Options& options, Connector& connector);
int cmdOps(const Options& options, Connector& connector);
int cmdLs(const Options& options, Connector& connector);
int cmdRm(const Options& options, Connector& connector);
int cmdPut(const Options& options, Connector& connector);
int cmdGet(const Options& options, Connector& connector);
int cmdCall(const Options& options, Connector& connector);
// put/get of a .safetensors file (several tensors at once); commands_files.cpp.
int putSafetensors(const Options& options, Connector& connector);
int getSafetensors(const Options& options, Connector& connector);
int cmdLoad(const Options& options, Connector& connector);  // commands_files.cpp
int cmdSave(const Options& options, Connector& connector);  // commands_files.cpp
int cmdStat(const Options& options, Connector& connector);  // commands_stat.cpp
int cmdKernel(const Options& options, Connector& connector);  // kernel add/ls/show/rm; commands_kernel.cpp
int cmdGroup(const Options& options, Connector& connector);       // commands_group.cpp
int cmdCollective(const Options& options, Connector& connector);  // allreduce, broadcast, barrier; commands_group.cpp

}  // namespace tensord::cli
