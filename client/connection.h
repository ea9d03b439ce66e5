#pragma once
// An authenticated Cap'n Proto connection to one daemon. Internal.
//
// Lifetime: shared (std::shared_ptr) by the Client that opened it and by every
// Tensor made through it, so capabilities are always dropped while the RPC
// system and the event loop still exist, whatever order the user destroys
// things in. Thread: only the thread that created it (KJ's event loop is per
// thread; every Client of one thread shares that thread's loop).

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "client/errors.h"
#include "protocol/stream_window.h"
#include "protocol/tensord.capnp.h"
#include "tensord/client.h"

namespace tensord::detail {

struct GradNode;
struct PendingCall;

// The calling thread's KJ async-io context, created on first use and kept
// while any connection of the thread holds it.
std::shared_ptr<kj::AsyncIoContext> threadIoContext();

// While one exists, the calling thread's long waits on the daemon
// (Connection::wait: downloads, Tensor info/wait/save, upload chunks,
// loadFile/saveFile) wait in slices of `interval` and run `check` between
// them. An exception `check` throws abandons the wait (the request is
// cancelled, its answer dropped) and reaches the caller; the connection
// stays usable. For an embedding that must notice signals while it waits
// (the Python binding's Ctrl-C). Scopes nest; the innermost one applies.
class WaitCheckScope {
 public:
  explicit WaitCheckScope(std::function<void()> check,
                          std::chrono::milliseconds interval = std::chrono::milliseconds(50));
  ~WaitCheckScope();
  WaitCheckScope(const WaitCheckScope&) = delete;
  WaitCheckScope& operator=(const WaitCheckScope&) = delete;

  const std::function<void()>& check() const { return check_; }
  std::chrono::milliseconds interval() const { return interval_; }

  // The calling thread's innermost scope, or null.
  static const WaitCheckScope* current();

 private:
  std::function<void()> check_;
  std::chrono::milliseconds interval_;
  const WaitCheckScope* previous_;
};

// An output of a call held for a batch (tensord::Batch). Shared by every
// handle to it; the held call keeps a weak reference, so an output nobody
// holds when the batch is sent is not asked for.
struct HeldOutput {
  static constexpr uint32_t kParam = ~0u;  // `call` of a graph input placeholder (Client::capture)
  uint32_t call = 0;    // index among the held calls
  uint32_t output = 0;  // index among that call's outputs
  bool sent = false;    // once sent: the capability and the batch's completion
  proto::Tensor::Client cap = nullptr;
  std::shared_ptr<PendingCall> origin;
};

// One input of a held call: a tensor's capability, or an earlier held
// call's output.
struct HeldInput {
  bool earlier = false;
  bool param = false;                   // a graph's input `call` (Client::capture)
  proto::Tensor::Client cap = nullptr;  // when not `earlier`
  uint32_t call = 0;
  uint32_t output = 0;
};

struct HeldCall {
  std::string op;
  std::vector<HeldInput> inputs;
  Attrs attrs;
  std::vector<std::weak_ptr<HeldOutput>> outputs;
};

class Connection {
 public:
  // Connects to options.address (HOST:PORT, or tls://HOST:PORT with a TLS
  // handshake first) and authenticates with the token, or with the client
  // certificate when the token is "" and certFile is set; throws Error
  // (kDisconnected when the daemon cannot be reached or the handshake fails).
  // Blocks for one round trip, which also prefetches the op table.
  explicit Connection(const ConnectOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  kj::WaitScope& waitScope() { return io_->waitScope; }

  // promise.wait(waitScope()), in slices that run the thread's
  // WaitCheckScope check when there is one.
  template <typename P>
  auto wait(P&& promise) -> decltype(promise.wait(std::declval<kj::WaitScope&>()));
  // The session, for a request sent now: what a batch holds goes first, so
  // the daemon sees requests in the order they were made.
  proto::Session::Client& session() {
    sendHeld();
    return session_;
  }
  const std::string& address() const { return address_; }
  const std::string& principal() const { return principal_; }

  // Runs `body`, turning KJ exceptions into tensord::Error. For requests
  // that do not wait (pipelined calls): an error of an earlier call without
  // outputs is not thrown here, even when it arrived while `body` let the
  // loop run, but by the next blocking request.
  template <typename F>
  auto guard(F&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const kj::Exception& e) {
      throw errors::toError(e, address_);
    }
  }

  // guard() for a request the caller waits for: counted as a round trip, and
  // it throws the first error of the calls without outputs before it.
  template <typename F>
  auto blocking(F&& body) -> decltype(body()) {
    ++stats.roundTrips;
    try {
      sendHeld();
      if constexpr (std::is_void_v<decltype(body())>) {
        body();
        throwTaskError();
      } else {
        auto result = body();
        throwTaskError();
        return result;
      }
    } catch (const kj::Exception& e) {
      throw errors::toError(e, address_);
    }
  }

  // What this connection did (Client::stats).
  CallStats stats;

  // Lets the event loop send what pipelined calls queued, without blocking.
  void flush();

  // The daemon's op table. The first call returns the table prefetched while
  // connecting; later calls ask the daemon again.
  std::vector<OpInfo> ops();

  // How many outputs `op` has, from the cached op table (asked again once when
  // the op is not in it); 1 for an op the daemon does not list.
  size_t outputCount(std::string_view op);
  // The op's entry in the cached op table (asked again once when the op is
  // not in it); nullptr for an op the daemon does not list.
  const OpInfo* opInfo(std::string_view op);
  // Drops the cached op table (after this client registered or removed a
  // kernel): the next ops() or opInfo() asks the daemon.
  void forgetOps();

  // Batches (tensord::Batch). While one is open, calls with outputs are
  // held (Connection::hold) and go to the daemon together as one
  // Session.callBatch: when the outermost batch closes, when anything else
  // is sent or waited for, or every kMaxHeldCalls calls.
  static constexpr size_t kMaxHeldCalls = 256;
  void openBatch() { ++batchDepth_; }
  void closeBatch();
  bool batching() const { return batchDepth_ > 0; }
  // Holds a call; returns its outputs' handles.
  std::vector<std::shared_ptr<HeldOutput>> hold(HeldCall call, size_t outputs);
  // Sends the held calls now (nothing when none are held, or while
  // capturing). Never throws: a batch that cannot be sent breaks its
  // outputs with the error.
  void sendHeld();
  // Writes held calls into a callBatch or graphCreate request.
  static void encodeCalls(capnp::List<proto::BatchCall>::Builder list, std::vector<HeldCall>& calls);

  // Client::capture: while capturing, calls are held like a batch's but
  // never sent; endCapture() hands them over.
  void beginCapture();
  std::vector<HeldCall> endCapture();
  bool capturing() const { return capturing_; }

  // Calls with no outputs (optimizer steps, zero_) run on as tasks; the
  // first error among them is thrown by the next blocking request.
  void addTask(kj::Promise<void> task);

  // The Client facade that owns this connection; null once it is destroyed.
  Client* owner = nullptr;

 private:
  std::vector<OpInfo> fetchOps();  // asks the daemon; refreshes the cache
  // Waits until `ready` resolves (true) or `interval` passes (false).
  bool waitSlice(kj::Promise<void> ready, std::chrono::milliseconds interval);
  void throwTaskError();
  void cacheOps(const std::vector<OpInfo>& ops);

  // Declaration order is teardown order (reversed): capabilities first, then
  // the RPC system, the network, the socket and last the event loop.
  struct Tls;
  std::shared_ptr<kj::AsyncIoContext> io_;
  std::unique_ptr<Tls> tls_;  // null for plain TCP
  kj::Own<kj::AsyncIoStream> stream_;
  kj::Own<protocol::WindowedVatNetwork> network_;  // uploads go out with kStreamWindowBytes in flight
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc_;
  proto::Daemon::Client daemon_ = nullptr;
  proto::Session::Client session_ = nullptr;

  std::string address_;
  std::string principal_;
  std::optional<std::vector<OpInfo>> prefetchedOps_;
  std::map<std::string, OpInfo, std::less<>> opInfos_;
  struct TaskErrors : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& exception) override;
    std::optional<kj::Exception> first;
  };
  TaskErrors taskErrors_;
  kj::TaskSet tasks_{taskErrors_};
  std::set<std::string, std::less<>> askedAgain_;
  int batchDepth_ = 0;
  bool capturing_ = false;
  std::vector<HeldCall> held_;
};

template <typename P>
auto Connection::wait(P&& promise) -> decltype(promise.wait(std::declval<kj::WaitScope&>())) {
  using T = decltype(promise.wait(std::declval<kj::WaitScope&>()));
  const WaitCheckScope* scope = WaitCheckScope::current();
  if (scope == nullptr) return promise.wait(waitScope());
  // `done` is destroyed before `result` (declaration order), so an abandoned
  // wait never writes into a dead result.
  if constexpr (std::is_void_v<T>) {
    kj::ForkedPromise<void> done = kj::Promise<void>(kj::fwd<P>(promise)).fork();
    while (!waitSlice(done.addBranch(), scope->interval())) scope->check()();
    done.addBranch().wait(waitScope());
  } else {
    std::optional<T> result;
    kj::ForkedPromise<void> done =
        kj::Promise<T>(kj::fwd<P>(promise)).then([&result](T&& value) { result.emplace(kj::mv(value)); }).fork();
    while (!waitSlice(done.addBranch(), scope->interval())) scope->check()();
    done.addBranch().wait(waitScope());  // throws the request's error
    return kj::mv(*result);
  }
}

// Holds the calls made through `conn` while it exists: tensord::Batch for
// the library's own use (backward()).
class HeldCalls {
 public:
  explicit HeldCalls(std::shared_ptr<Connection> conn) : conn_(std::move(conn)) { conn_->openBatch(); }
  ~HeldCalls() { conn_->closeBatch(); }
  HeldCalls(const HeldCalls&) = delete;
  HeldCalls& operator=(const HeldCalls&) = delete;

 private:
  std::shared_ptr<Connection> conn_;
};

// The response of the call that made one or more tensors (all outputs of one
// call share it). Kept so that wait() can observe the call's completion and
// its error; the pipelined capabilities stay valid either way.
struct PendingCall {
  explicit PendingCall(kj::Promise<void> done) : done(done.fork()) {}
  kj::ForkedPromise<void> done;
};

}  // namespace tensord::detail

namespace tensord {

// Members are declared so that the capability and the pending call are
// destroyed before the connection (and so the event loop) they need.
struct Tensor::Impl {
  std::shared_ptr<detail::Connection> conn;
  std::shared_ptr<detail::PendingCall> origin;
  proto::Tensor::Client cap = nullptr;  // null while `held` is unsent
  std::shared_ptr<detail::HeldOutput> held;  // an output of a held call, until capOf() took its capability

  // Autograd (client/autograd.cpp): a leaf has requiresGrad and collects
  // grad; a recorded call's output has the call's node and its index there.
  bool requiresGrad = false;
  Tensor grad;
  std::shared_ptr<detail::GradNode> gradFn;
  size_t outputIndex = 0;
  std::function<void(Tensor&)> gradReady;  // a leaf's hook (Tensor::setGradReadyHook)
};

struct Client::Impl {
  std::shared_ptr<detail::Connection> conn;

  // Bridges for code outside Client that builds or opens Tensor handles.
  static Tensor wrap(std::shared_ptr<Tensor::Impl> impl) { return Tensor(std::move(impl)); }
  static const std::shared_ptr<Tensor::Impl>& unwrap(const Tensor& tensor) { return tensor.impl_; }
};

namespace detail {

// Makes a handle for `cap`, produced by the call whose completion is `origin`.
Tensor makeTensor(const std::shared_ptr<Connection>& conn, std::shared_ptr<PendingCall> origin,
                  proto::Tensor::Client cap);

// Records a call for autograd when grad mode is on and an input needs a
// gradient (client/autograd.cpp).
void recordCall(const std::shared_ptr<Connection>& conn, std::string_view op, const std::vector<Tensor>& inputs,
                const Attrs& attrs, const std::vector<Tensor>& outputs);

// The implementation of a handle; throws Error for a null Tensor, naming `what`.
Tensor::Impl& implOf(const Tensor& tensor, std::string_view what);

// The handle's capability, for a request: an output of a held call sends
// its batch first.
proto::Tensor::Client& capOf(Tensor::Impl& impl);

// The same daemon tensor under a second handle, without autograd history.
std::shared_ptr<Tensor::Impl> shareHandle(Tensor::Impl& impl);

// Session.call, pipelined: returns the first `count` outputs before the daemon answers.
std::vector<Tensor> callOp(const std::shared_ptr<Connection>& conn, std::string_view op,
                           const std::vector<Tensor>& inputs, const Attrs& attrs, size_t count);

}  // namespace detail
}  // namespace tensord
