#pragma once
// Listener: the accept loop and the connections it owns. Each connection gets
// its own two-party RPC system with the configured reader limits (traversal
// limit from limits.max_message_bytes), an incoming-call flow limit, and a
// DaemonImpl bootstrap bound to that connection's state. With a ServerTls
// every accepted socket first completes a TLS handshake (a failure is logged
// and the socket closed). A connection that has not authenticated within
// auth_timeout_ms of being accepted (handshake included) is closed. At most
// limits.max_connections sockets are open at once (handshakes included); one
// accepted beyond that is closed at once, logged and audited, and the open
// ones keep working.
//
// Threads: the event-loop thread only. ServerState must outlive the Listener.

#include <kj/async-io.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/server_state.h"

namespace tensord::server {

class ServerTls;
struct ConnectionAuth;

class Listener final : private kj::TaskSet::ErrorHandler {
 public:
  // `tls` (may be null: plain TCP) must outlive the Listener. Each accept
  // uses the TLS context in force at that moment (ServerTls::reload).
  Listener(ServerState& server, kj::Own<kj::ConnectionReceiver> receiver, ServerTls* tls = nullptr);
  ~Listener();

  // Starts accepting; runs until stopAccepting().
  void start();
  // Closes the listening socket; open connections keep working.
  void stopAccepting();
  // Open sockets, TLS handshakes in progress included.
  size_t connectionCount() const { return connectionCount_; }

 private:
  class Connection;
  class Slot;
  kj::Promise<void> acceptLoop();
  void addConnection(kj::AuthenticatedStream accepted);
  void startConnection(kj::Own<kj::AsyncIoStream> stream, std::string peer, std::shared_ptr<ConnectionAuth> auth,
                       kj::TimePoint deadline, kj::Own<Slot> slot);
  void taskFailed(kj::Exception&& exception) override;

  ServerState& server_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  ServerTls* tls_;
  kj::Maybe<kj::Promise<void>> accepting_;
  size_t connectionCount_ = 0;
  kj::TaskSet connections_{*this};  // last: connections go before the rest
};

}  // namespace tensord::server
