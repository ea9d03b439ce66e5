#pragma once
// Child processes for the integration tests and the benchmark: spawn a binary
// with extra environment, read what it prints, wait for it with a timeout.
// Not thread-safe; one owner per object.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tensord::testing {

// Environment changes for a child: a value sets the variable, nullopt removes it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

// A running child whose stdout and stderr both go to one pipe (`outputFd`).
class Subprocess {
 public:
  // Starts argv[0] (a path) with argv; throws std::runtime_error if it cannot.
  Subprocess(const std::vector<std::string>& argv, const EnvChanges& env = {});
  ~Subprocess();  // kills (SIGKILL) and reaps a child still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  int outputFd() const { return outputFd_; }

  // Waits up to `timeout` for the child to exit; returns its wait status
  // (as waitpid reports it), nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);

 private:
  pid_t pid_ = -1;
  int outputFd_ = -1;
  bool reaped_ = false;
};

struct CommandResult {
  int exitCode = -1;  // -1 when killed by a signal or timed out
  bool timedOut = false;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a command to completion, collecting stdout and stderr separately.
CommandResult runCommand(const std::vector<std::string>& argv, const EnvChanges& env = {},
                         std::chrono::milliseconds timeout = std::chrono::seconds(120));

// Human-readable description of a wait status: "exit 0", "signal 9".
std::string describeStatus(int status);

}  // namespace tensord::testing
