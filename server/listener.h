#pragma once
// Listener: the accept loop and the connections it owns. Each connection gets
// its own two-party RPC system with the configured reader limits (traversal
// limit from limits.max_message_bytes), an incoming-call flow limit, and a
// DaemonImpl bootstrap bound to that connection's state.
//
// Threads: the event-loop thread only. ServerState must outlive the Listener.

#include <kj/async-io.h>

#include <cstddef>

#include "server/server_state.h"

namespace tensord::server {

class Listener final : private kj::TaskSet::ErrorHandler {
 public:
  Listener(ServerState& server, kj::Own<kj::ConnectionReceiver> receiver);
  ~Listener();

  // Starts accepting; runs until stopAccepting().
  void start();
  // Closes the listening socket; open connections keep working.
  void stopAccepting();
  size_t connectionCount() const { return connectionCount_; }

 private:
  class Connection;
  kj::Promise<void> acceptLoop();
  void addConnection(kj::Own<kj::AsyncIoStream> stream);
  void taskFailed(kj::Exception&& exception) override;

  ServerState& server_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Maybe<kj::Promise<void>> accepting_;
  size_t connectionCount_ = 0;
  kj::TaskSet connections_{*this};  // last: connections go before the rest
};

}  // namespace tensord::server
