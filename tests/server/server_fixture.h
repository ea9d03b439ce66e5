#pragma once
// An in-process daemon for server tests: a real compute::Engine (lavapipe on
// machines without a GPU), ServerState and Listener on an ephemeral loopback
// port, and a Cap'n Proto client connected to it, all on the test thread's
// event loop.

#include <capnp/rpc-twoparty.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "compute/engine.h"
#include "protocol/tensord.capnp.h"
#include "server/config.h"
#include "server/listener.h"
#include "server/server_state.h"

namespace spdlog {
class logger;
}

namespace tensord::server::testing {

inline constexpr const char* kToken = "test-token";

// Collects what a download streams to it.
class CollectingSink final : public proto::ByteSink::Server {
 public:
  explicit CollectingSink(std::vector<std::byte>& out, bool& done) : out_(out), done_(done) {}

 protected:
  kj::Promise<void> write(WriteContext context) override;
  kj::Promise<void> done(DoneContext context) override;

 private:
  std::vector<std::byte>& out_;
  bool& done_;
};

class ServerFixture : public ::testing::Test {
 protected:
  ServerFixture();
  ~ServerFixture() noexcept override;

  // Small staging (2 slots of 64 KiB) so transfers span many slots.
  static Config testConfig();
  // Starts the daemon with `config` (tests may change it before calling).
  void start(Config config = testConfig());

  // A new connection's bootstrap capability.
  proto::Daemon::Client connect();
  proto::Session::Client authenticate(proto::Daemon::Client& daemon, const char* token = kToken);
  proto::Session::Client session();  // on the fixture's main connection

  proto::Tensor::Client upload(proto::Session::Client& session, compute::DType dtype, std::vector<int64_t> shape,
                               const std::vector<std::byte>& data, size_t chunk = 1 << 20);
  proto::Tensor::Client uploadFloats(proto::Session::Client& session, std::vector<int64_t> shape,
                                     const std::vector<float>& values);
  std::vector<std::byte> download(proto::Tensor::Client& tensor, uint64_t offset = 0, uint64_t length = 0);
  std::vector<float> downloadFloats(proto::Tensor::Client& tensor);
  struct Info {
    uint64_t tensorCount = 0, namedCount = 0, liveBytes = 0, opsExecuted = 0, maxTensorBytes = 0;
    uint32_t chunkBytes = 0;
  };
  Info info(proto::Session::Client& session);

  // The exception a promise rejects with; fails the test if it resolves.
  template <typename T>
  kj::Exception errorOf(kj::Promise<T>&& promise) {
    kj::Maybe<kj::Exception> error;
    promise.then([](auto&&...) {}, [&](kj::Exception&& e) { error = kj::mv(e); }).wait(io_.waitScope);
    KJ_IF_MAYBE (e, error) {
      return kj::mv(*e);
    }
    ADD_FAILURE() << "expected an error";
    return KJ_EXCEPTION(FAILED, "no error");
  }

  // Runs the loop until `done()` or ~5 s pass.
  template <typename F>
  bool waitFor(F&& done) {
    for (int i = 0; i < 500 && !done(); ++i)
      io_.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io_.waitScope);
    return done();
  }

  kj::AsyncIoContext io_;
  kj::WaitScope& waitScope() { return io_.waitScope; }
  std::shared_ptr<spdlog::logger> log_;
  Config config_;
  std::unique_ptr<compute::Engine> engine_;
  std::unique_ptr<ServerState> state_;
  std::unique_ptr<Listener> listener_;
  uint32_t port_ = 0;
  std::vector<kj::Own<capnp::TwoPartyClient>> clients_;
};

std::vector<std::byte> pattern(size_t n, uint32_t seed);

}  // namespace tensord::server::testing
