#pragma once
// DaemonCluster: N real tensord processes on ephemeral loopback ports, set up
// to form groups with each other (each accepts the others' node token and
// dials them with it). For the tests and the benchmarks of the client's
// group and collective API; no gtest inside.

#include <sys/wait.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tensord/client.h"
#include "tests/integration/daemon_process.h"

namespace tensord::testing {

struct ClusterOptions {
  std::string nodeToken = "cluster-node-token";  // what members authenticate to each other with
  uint32_t timeoutMs = 10000;                    // the config's groups.timeout_ms
  uint64_t chunkBytes = 0;                       // the config's groups.chunk_bytes; 0: the daemon's default
  nlohmann::json extra = nlohmann::json::object();  // merged into each member's config too
  std::filesystem::path binary;                     // "" = $TENSORD_BUILD_DIR/server/tensord
};

class DaemonCluster {
 public:
  // Starts `n` daemons at once; throws std::runtime_error when one does not start.
  explicit DaemonCluster(size_t n, ClusterOptions options = {}) {
    daemons_.resize(n);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        try {
          DaemonOptions d;
          d.binary = options.binary;
          d.extra = {
              {"auth",
               {{"tokens",
                 {{{"principal", d.principal}, {"token_sha256", sha256Hex(d.token)}},
                  {{"principal", "node"}, {"token_sha256", sha256Hex(options.nodeToken)}}}}}},
              {"groups", {{"timeout_ms", options.timeoutMs}, {"node_credentials", {{"token", options.nodeToken}}}}},
          };
          if (options.chunkBytes != 0) d.extra["groups"]["chunk_bytes"] = options.chunkBytes;
          d.extra.update(options.extra);
          daemons_[i] = std::make_unique<DaemonProcess>(d);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < n; ++i) {
      if (!errors[i].empty()) throw std::runtime_error("member " + std::to_string(i) + " did not start: " + errors[i]);
    }
  }

  size_t size() const { return daemons_.size(); }
  DaemonProcess& at(size_t i) { return *daemons_[i]; }
  // HOST:PORT of every member, by rank.
  std::vector<std::string> members() const {
    std::vector<std::string> out;
    for (const auto& d : daemons_) out.push_back(d->address());
    return out;
  }
  std::string membersList() const {  // "a,b,c"
    std::string out;
    for (const auto& d : daemons_) out += (out.empty() ? "" : ",") + d->address();
    return out;
  }
  ConnectOptions connect(size_t i) const { return {.address = daemons_[i]->address(), .token = daemons_[i]->token()}; }

  // SIGTERM to every member; the messages of those that did not exit with 0.
  std::string stopAll() {
    std::string problems;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (!daemons_[i]->running()) continue;
      auto status = daemons_[i]->stop();
      if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        problems += "member " + std::to_string(i) + " ended with " +
                    (status ? describeStatus(*status) : std::string("a timeout")) + "; its log:\n" +
                    daemons_[i]->log();
      }
    }
    return problems;
  }

  std::string logs() const {
    std::string out;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      out += "---- member " + std::to_string(i) + " ----\n" + daemons_[i]->log();
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<DaemonProcess>> daemons_;
};

}  // namespace tensord::testing
