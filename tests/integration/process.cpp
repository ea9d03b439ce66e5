#include "tests/integration/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tensord::testing {
namespace {

std::runtime_error sysError(const std::string& what) { return std::runtime_error(what + ": " + std::strerror(errno)); }

std::vector<std::string> buildEnv(const EnvChanges& changes) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    if (changes.count(name) == 0) env.push_back(std::move(entry));
  }
  for (const auto& [name, value] : changes) {
    if (value) env.push_back(name + "=" + *value);
  }
  return env;
}

std::vector<char*> cStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Spawns argv with stdout -> outFd and stderr -> errFd (both in the child).
pid_t spawn(std::vector<std::string> argv, const EnvChanges& changes, int outFd, int errFd) {
  std::vector<std::string> env = buildEnv(changes);
  std::vector<char*> cArgv = cStrings(argv);
  std::vector<char*> cEnv = cStrings(env);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, outFd, 1);
  posix_spawn_file_actions_adddup2(&actions, errFd, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, cArgv[0], &actions, nullptr, cArgv.data(), cEnv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    errno = rc;
    throw sysError("cannot start " + argv[0]);
  }
  return pid;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const EnvChanges& env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw sysError("pipe2");
  try {
    pid_ = spawn(argv, env, fds[1], fds[1]);
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[1]);
  outputFd_ = fds[0];
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
  if (outputFd_ >= 0) close(outputFd_);
}

void Subprocess::signal(int sig) {
  if (!reaped_) ::kill(pid_, sig);
}

std::optional<int> Subprocess::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      return status;
    }
    if (r < 0 && errno != EINTR) throw sysError("waitpid");
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

CommandResult runCommand(const std::vector<std::string>& argv, const EnvChanges& env,
                         std::chrono::milliseconds timeout) {
  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0) throw sysError("pipe2");
  if (pipe2(errPipe, O_CLOEXEC) != 0) throw sysError("pipe2");
  pid_t pid;
  try {
    pid = spawn(argv, env, outPipe[1], errPipe[1]);
  } catch (...) {
    for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1]}) close(fd);
    throw;
  }
  close(outPipe[1]);
  close(errPipe[1]);

  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open = 2;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timedOut = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, int(left.count()));
    if (n < 0 && errno != EINTR) throw sysError("poll");
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, size_t(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) close(fd.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!result.timedOut && WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  return result;
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace tensord::testing
