#pragma once
// Node-to-node links: how a daemon dials a fellow member of a group. A link
// is an ordinary client connection to the member's listener (TLS for a
// "tls://HOST:PORT" member), authenticated with the config's
// groups.node_credentials like any other peer, whose Session then hands out
// the member's GroupPeer capability (Session.groupConnect). So node traffic
// carries the same TLS, identity and ACL as every other connection.
//
// The links a daemon dialed, the ones it sends through, run on a thread of
// their own (LinkThread): writing a chunk into a socket costs a copy of
// every byte, as reading one does, and on the event loop's thread alone both
// directions of a collective would share one core. The event loop reaches
// them through RemoteLink; what it receives comes over the connections the
// members dialed here, on the event loop as before.
//
// Threads: NodeDialer and PeerLink on the link thread only; LinkThread and
// RemoteLink on the event-loop thread that made them. A PeerLink owns its
// socket, RPC system and capabilities.

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "compute/buffer.h"
#include "compute/dtype.h"
#include "protocol/stream_window.h"
#include "protocol/tensord.capnp.h"
#include "server/config.h"

namespace tensord::server {

// One member's announcement of a collective (wire: CollectiveHeader).
struct CollectiveHeader {
  uint64_t seq = 0;
  std::string kind;
  std::string op;
  uint32_t root = 0;
  std::vector<compute::TensorDesc> inputs;

  bool operator==(const CollectiveHeader&) const = default;
};

// One member of a group as written in `members`.
struct MemberAddress {
  bool tls = false;
  HostPort hostPort;
  std::string text;  // as given: "127.0.0.1:7450", "tls://node2:7450"
};

// Parses "HOST:PORT" or "tls://HOST:PORT"; throws ConfigError naming `key`.
MemberAddress parseMemberAddress(std::string_view text, std::string_view key);

// An open link to one member. Declaration order is teardown order,
// reversed: capabilities, then the RPC system, the network and the socket.
struct PeerLink {
  ~PeerLink();  // a call waiting for the window fails: the link was closed

  // Buffers that data messages queued here point into (sent without a copy,
  // capnp::Orphanage::referenceExternalData): they must live until those
  // messages were written. A later call's answer on this link proves that
  // (one connection writes in order); until then, and when the link goes,
  // they are released only after the connection below is gone.
  std::deque<std::pair<uint64_t, std::shared_ptr<compute::Buffer>>> sentFrom;  // (mark, buffer)
  uint64_t sentMarks = 0;
  void holdSent(const std::shared_ptr<compute::Buffer>& buffer) {
    if (sentFrom.empty() || sentFrom.back().second != buffer) sentFrom.emplace_back(sentMarks++, buffer);
  }
  uint64_t sentMark() const { return sentMarks; }
  // Drops the buffers held before `mark` (taken before a call that was answered).
  void releaseSentBefore(uint64_t mark) {
    while (!sentFrom.empty() && sentFrom.front().first < mark) sentFrom.pop_front();
  }

  // GroupPeer.data calls go out in the order queued, each once fewer than
  // kStreamWindowBytes of data calls are unanswered (the link's own flow
  // control: the receiver lands each chunk on a worker thread, so its calls
  // are not streaming calls, which it would take one at a time). The first
  // failed call fails every later one, as a failed stream would.
  kj::Promise<void> dataTail = kj::READY_NOW;  // the last call queued, once sent
  uint64_t dataInFlight = 0;                   // bytes of data calls sent and not yet answered
  kj::Own<kj::PromiseFulfiller<void>> roomWaiter;  // the next call, waiting for the window
  kj::Maybe<kj::Exception> dataFailure;
  kj::Promise<void> room();                // resolves once the next call may go
  void answered(uint64_t bytes);           // a data call of `bytes` was answered
  void dataFailed(kj::Exception&& error);  // ... or failed

  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<protocol::WindowedVatNetwork> network;  // streams with a window of kStreamWindowBytes
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  proto::Session::Client session = nullptr;
  proto::GroupPeer::Client peer = nullptr;
  uint64_t remoteNonce = 0;  // the member's formation of the group

  // The answers of data calls in flight (each ends in answered()); first to go.
  struct IgnoreErrors final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  } ignoreErrors;
  kj::TaskSet dataAnswers{ignoreErrors};
};

class NodeDialer {
 public:
  // Reads the credentials' PEM files; throws ConfigError naming the
  // groups.node_credentials key at fault. Without credentials every dial
  // fails with a message naming the missing key.
  NodeDialer(const GroupsConfig& config, kj::Network& network, uint64_t maxMessageBytes);
  ~NodeDialer();
  NodeDialer(const NodeDialer&) = delete;
  NodeDialer& operator=(const NodeDialer&) = delete;

  // Connects to `to`, authenticates and asks for its GroupPeer as member
  // `rank` of `group`. Rejects with a message saying which step failed.
  kj::Promise<kj::Own<PeerLink>> dial(const MemberAddress& to, std::string group, std::vector<std::string> members,
                                      uint32_t rank, uint64_t nonce);

 private:
  struct Tls;
  kj::Network& network_;
  std::string token_;
  bool haveCredentials_ = false;
  uint64_t maxMessageBytes_;
  std::unique_ptr<Tls> tls_;
};

class RemoteLink;

// The thread the dialed links run on, with an event loop of its own.
class LinkThread {
 public:
  // Starts the thread and its NodeDialer; throws ConfigError as NodeDialer does.
  LinkThread(const GroupsConfig& config, uint64_t maxMessageBytes);
  ~LinkThread();  // closes every link still open, then ends the thread
  LinkThread(const LinkThread&) = delete;
  LinkThread& operator=(const LinkThread&) = delete;

  // NodeDialer::dial on the link thread; resolves on the calling loop.
  kj::Promise<kj::Own<RemoteLink>> dial(const MemberAddress& to, std::string group, std::vector<std::string> members,
                                        uint32_t rank, uint64_t nonce);

  struct Inside;  // the link thread's dialer and links; touched on that thread only

 private:
  std::thread thread_;
  kj::Own<const kj::Executor> executor_;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop_;
  Inside* inside_ = nullptr;
};

// A link this daemon dialed, used from the event loop: each call runs on the
// link thread, in the order made, and its promise resolves here.
class RemoteLink {
 public:
  RemoteLink(kj::Own<const kj::Executor> executor, LinkThread::Inside* inside, PeerLink* link);
  ~RemoteLink();  // closes the link (nothing more is sent on it)
  RemoteLink(const RemoteLink&) = delete;
  RemoteLink& operator=(const RemoteLink&) = delete;

  // GroupPeer.header; resolves once answered, which also releases the
  // buffers data sent before it pointed into (see PeerLink::sentFrom).
  kj::Promise<void> header(CollectiveHeader header);
  kj::Promise<void> abort(uint64_t seq, std::string reason);
  kj::Promise<void> formed();  // GroupPeer.formed; resolves once answered
  // GroupPeer.data. With `from` (a host buffer `bytes` lie in, word-aligned)
  // the message points into it and the link holds `from`; otherwise the
  // bytes are copied before this returns. Resolves when the link took it.
  kj::Promise<void> data(uint64_t seq, uint32_t step, uint32_t chunk, kj::ArrayPtr<const kj::byte> bytes,
                         std::shared_ptr<compute::Buffer> from);
  // Resolves when the connection is gone.
  kj::Promise<void> onDisconnect();

 private:
  kj::Own<const kj::Executor> executor_;
  LinkThread::Inside* inside_;
  PeerLink* link_;
};

}  // namespace tensord::server
