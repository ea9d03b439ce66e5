#include "server/listener.h"

#include <arpa/inet.h>
#include <capnp/rpc-twoparty.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include "protocol/stream_window.h"
#include "server/batching_stream.h"
#include "server/daemon_impl.h"
#include "server/tls.h"

namespace tensord::server {
namespace {

std::string peerName(kj::AsyncIoStream& stream) {
  sockaddr_storage addr{};
  kj::uint length = sizeof(addr);
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&addr), &length);
  } catch (const kj::Exception&) {
    return "unknown peer";
  }
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "local peer";
}

capnp::ReaderOptions readerOptions(const Config& config) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = config.limits.maxMessageBytes / sizeof(capnp::word);
  return options;
}

}  // namespace

// One client connection: its socket, RPC system and state. Destroying it
// drops every capability the client held, which frees its unnamed tensors.
class Listener::Connection {
 public:
  Connection(Listener& listener, kj::Own<kj::AsyncIoStream> stream, std::string peer,
             std::shared_ptr<ConnectionAuth> auth)
      : listener_(listener),
        stream_(kj::mv(stream)),
        batching_(*stream_),
        network_(batching_, capnp::rpc::twoparty::Side::SERVER, readerOptions(listener.server_.config)),
        state_(std::make_shared<ConnectionState>(listener.server_, std::move(peer))),
        rpc_(capnp::makeRpcServer(network_, kj::heap<DaemonImpl>(state_, std::move(auth)))) {
    // Stop reading new calls while this many words of calls are unanswered.
    rpc_.setFlowLimit(listener.server_.config.limits.maxMessageBytes / sizeof(capnp::word));
    listener_.server_.log.debug("connection from {}", state_->peer);
  }
  ~Connection() { listener_.server_.log.debug("connection from {} closed", state_->peer); }

  kj::Promise<void> onDisconnect() { return network_.onDisconnect(); }

 private:
  Listener& listener_;
  kj::Own<kj::AsyncIoStream> stream_;
  BatchingStream batching_;  // many small messages per system call (batching_stream.h)
  protocol::WindowedVatNetwork network_;  // downloads go out with kStreamWindowBytes in flight
  std::shared_ptr<ConnectionState> state_;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc_;
};

// One accepted socket counted against limits.max_connections, from accept
// (before any TLS handshake) until the socket closes.
class Listener::Slot {
 public:
  explicit Slot(Listener& listener) : listener_(listener) {
    ++listener_.connectionCount_;
    ++listener_.server_.metrics.connectionsOpen;
    ++listener_.server_.metrics.connectionsAccepted;
  }
  ~Slot() {
    --listener_.connectionCount_;
    --listener_.server_.metrics.connectionsOpen;
  }
  KJ_DISALLOW_COPY(Slot);

 private:
  Listener& listener_;
};

Listener::Listener(ServerState& server, kj::Own<kj::ConnectionReceiver> receiver, ServerTls* tls)
    : server_(server), receiver_(kj::mv(receiver)), tls_(tls) {}

Listener::~Listener() { accepting_ = nullptr; }

void Listener::start() {
  accepting_ = acceptLoop().eagerlyEvaluate(
      [this](kj::Exception&& e) { server_.log.error("accept loop ended: {}", e.getDescription().cStr()); });
}

void Listener::stopAccepting() {
  accepting_ = nullptr;
  receiver_ = nullptr;
}

kj::Promise<void> Listener::acceptLoop() {
  return receiver_->acceptAuthenticated().then(
      [this](kj::AuthenticatedStream accepted) {
        addConnection(kj::mv(accepted));
        return acceptLoop();
      },
      [this](kj::Exception&& e) {
        // Typically out of file descriptors: back off instead of spinning.
        server_.log.warn("accept failed: {}; retrying in 100 ms", e.getDescription().cStr());
        return server_.timer.afterDelay(100 * kj::MILLISECONDS).then([this]() { return acceptLoop(); });
      });
}

void Listener::addConnection(kj::AuthenticatedStream accepted) {
  int one = 1;
  try {
    accepted.stream->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  } catch (const kj::Exception&) {
    // Not a TCP socket; nothing to tune.
  }
  std::string peer = peerName(*accepted.stream);
  const uint32_t cap = server_.config.limits.maxConnections;
  if (connectionCount_ >= cap) {
    // Accepting and closing (rather than not accepting) keeps the backlog from
    // filling with peers that would wait for nothing.
    server_.log.warn("closing the connection from {}: {} connections are open (limits.max_connections {})", peer,
                     connectionCount_, cap);
    server_.auditDenial("", peer, "connect", "",
                        "limits.max_connections (" + std::to_string(cap) + ") connections are open");
    ++server_.metrics.connectionsRefused;
    return;  // dropping the stream closes the socket
  }
  auto slot = kj::heap<Slot>(*this);
  const uint32_t timeoutMs = server_.config.authTimeoutMs;
  const kj::TimePoint deadline = server_.timer.now() + timeoutMs * kj::MILLISECONDS;
  auto auth = std::make_shared<ConnectionAuth>();
  if (tls_ == nullptr) {
    startConnection(kj::mv(accepted.stream), std::move(peer), std::move(auth), deadline, kj::mv(slot));
    return;
  }
  auth->tls = true;
  // The handshake runs beside the accept loop, bounded by the same deadline.
  auto handshake = server_.timer.timeoutAt(deadline, tls_->accept(kj::mv(accepted.stream)));
  // The slot rides on the handshake's continuation: it is held until the
  // handshake fails or the connection it becomes closes.
  connections_.add(handshake.then(
      [this, peer, auth, deadline, slot = kj::mv(slot)](TlsAccepted secured) mutable {
        auth->certificateNames = std::move(secured.certificateNames);
        if (!auth->certificateNames.empty()) {
          server_.log.debug("TLS client {} presented a verified certificate for '{}'", peer,
                            auth->certificateNames.front());
        }
        startConnection(kj::mv(secured.stream), std::move(peer), std::move(auth), deadline, kj::mv(slot));
      },
      [this, peer](kj::Exception&& e) {
        std::string reason = e.getDescription().cStr();
        // "OpenSSL error; message = error:0A000086:SSL routines::certificate verify failed"
        if (size_t at = reason.find("message = "); at != std::string::npos) reason.erase(0, at + 10);
        server_.log.warn("TLS handshake with {} failed: {}", peer, reason);
      }));
}

void Listener::startConnection(kj::Own<kj::AsyncIoStream> stream, std::string peer,
                               std::shared_ptr<ConnectionAuth> auth, kj::TimePoint deadline, kj::Own<Slot> slot) {
  auto connection = kj::heap<Connection>(*this, kj::mv(stream), peer, auth);
  auto disconnected = connection->onDisconnect();
  // Closes a connection that has not opened a session by the deadline.
  auto unauthenticated =
      server_.timer.atTime(deadline).then([this, auth, peer = std::move(peer)]() -> kj::Promise<void> {
        if (auth->authenticated) return kj::NEVER_DONE;
        server_.log.warn("closing the connection from {}: not authenticated within auth_timeout_ms ({} ms)", peer,
                         server_.config.authTimeoutMs);
        return kj::READY_NOW;
      });
  connections_.add(disconnected.exclusiveJoin(kj::mv(unauthenticated)).attach(kj::mv(connection), kj::mv(slot)));
}

void Listener::taskFailed(kj::Exception&& exception) {
  server_.log.debug("connection ended: {}", exception.getDescription().cStr());
}

}  // namespace tensord::server
