// op_bench's cases through the daemon: the wall time of an op as a remote
// caller sees it (the protocol, the daemon's queues, the engine), next to
// the engine's own figure. Kept apart from op_bench.cpp, whose compute types
// share names with the client's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tensord::bench {

struct ClientCase {
  std::string op;
  // Each input's dtype ("f32", "f16", ...) and shape; made on the daemon by
  // randn before timing, so nothing large crosses the socket.
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs;
  std::vector<std::pair<std::string, std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                                                  std::vector<double>>>>
      attrs;
  int chain = 0;        // as op_bench's Case::chain
  int independent = 0;  // as op_bench's Case::independent
  std::optional<double> fillFirst;  // as op_bench's Case::fillFirst: made by full, not randn
};

class ClientTimer {
 public:
  // Starts `daemon` on 127.0.0.1:0 with a throwaway config and connects.
  explicit ClientTimer(const std::filesystem::path& daemon);
  ~ClientTimer();
  ClientTimer(const ClientTimer&) = delete;
  ClientTimer& operator=(const ClientTimer&) = delete;

  // Seconds per call through the client, timed as op_bench times the engine:
  // calls issued back to back (pipelined, each output dropped as the next
  // call goes out), one wait at the end for the last one's result on the
  // device (a read of one of its elements); at least `repeats` calls and
  // `minTrialMs` per trial, after a warm-up trial; the median of 5 trials.
  // Throws the daemon's error for a call it refuses.
  double secondsPerCall(const ClientCase& c, int repeats, double minTrialMs);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::bench
