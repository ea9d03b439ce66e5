#include "bench/echo_floor.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/compat/tls.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "bench/echo.capnp.h"
#include "protocol/stream_window.h"
#include "protocol/tls_stream.h"

namespace tensord::bench {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Counts the bytes written into it.
class CountingSink final : public proto::Sink::Server {
 public:
  kj::Promise<void> write(WriteContext context) override {
    bytes_ += context.getParams().getData().size();
    return kj::READY_NOW;
  }
  kj::Promise<void> done(DoneContext context) override {
    context.getResults().setBytes(bytes_);
    return kj::READY_NOW;
  }

 private:
  uint64_t bytes_ = 0;
};

// Streams `left` bytes of `chunk` (repeated) into `sink`, then calls done().
kj::Promise<void> pump(proto::Sink::Client sink, kj::ArrayPtr<const kj::byte> chunk, uint64_t left) {
  if (left == 0) return sink.doneRequest().send().ignoreResult();
  size_t n = size_t(std::min<uint64_t>(left, chunk.size()));
  auto request = sink.writeRequest();
  request.setData(chunk.slice(0, n));
  return request.send().then([sink, chunk, left, n]() mutable { return pump(kj::mv(sink), chunk, left - n); });
}

class LinkImpl final : public proto::Link::Server {};

class EchoImpl final : public proto::Echo::Server {
 public:
  kj::Promise<void> ping(PingContext context) override {
    context.getResults().setValue(context.getParams().getValue());
    return kj::READY_NOW;
  }
  kj::Promise<void> upload(UploadContext context) override {
    context.getResults().setSink(kj::heap<CountingSink>());
    return kj::READY_NOW;
  }
  kj::Promise<void> download(DownloadContext context) override {
    auto params = context.getParams();
    uint32_t chunkBytes = std::max<uint32_t>(1, params.getChunkBytes());
    if (chunk_.size() != chunkBytes) {
      chunk_ = kj::heapArray<kj::byte>(chunkBytes);
      for (size_t i = 0; i < chunk_.size(); ++i) chunk_[i] = kj::byte(i * 131);
    }
    return pump(params.getSink(), chunk_.asPtr(), params.getBytes());
  }
  // As tensord finds an op's input tensors: the input resolved to a server
  // of this connection (getLocalServer waits for a pipelined one), then a
  // fresh result.
  kj::Promise<void> chain(ChainContext context) override {
    auto params = context.getParams();
    if (!params.hasInput()) {
      context.getResults().setOutput(links_.add(kj::heap<LinkImpl>()));
      return kj::READY_NOW;
    }
    proto::Link::Client cap = params.getInput();
    return links_.getLocalServer(cap).then([this, context](kj::Maybe<proto::Link::Server&> input) mutable {
      if (input == nullptr) throw std::runtime_error("echo chain: the input is not one of this server's links");
      context.getResults().setOutput(links_.add(kj::heap<LinkImpl>()));
    });
  }

 private:
  kj::Array<kj::byte> chunk_;
  capnp::CapabilityServerSet<proto::Link> links_;
};

// A connection's two-party network: with tensord's stream window, or
// Cap'n Proto's default.
kj::Own<capnp::TwoPartyVatNetwork> network(kj::AsyncIoStream& stream, capnp::rpc::twoparty::Side side,
                                           bool tensordWindow) {
  if (tensordWindow) return kj::heap<protocol::WindowedVatNetwork>(stream, side);
  return kj::heap<capnp::TwoPartyVatNetwork>(stream, side);
}

// The floor's TLS, set up as tensord's: a KJ TlsContext (TLS 1.2 or later)
// whose connections are protocol::TlsStream.
struct FloorTls {
  std::optional<kj::TlsCertificate> cert;
  std::optional<kj::TlsKeypair> keypair;
  kj::Own<kj::TlsContext> context;

  FloorTls(const FloorPlan& plan, bool server) {
    const std::string& certPem = plan.tlsCertPem;
    const std::string& keyPem = plan.tlsKeyPem;
    kj::TlsContext::Options options;
    options.minVersion = kj::TlsVersion::TLS_1_2;
    cert.emplace(kj::StringPtr(certPem.c_str(), certPem.size()));
    if (server) {
      keypair.emplace(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(keyPem.c_str(), keyPem.size())),
                                     kj::TlsCertificate(kj::StringPtr(certPem.c_str(), certPem.size()))});
      options.defaultKeypair = *keypair;
    } else {
      options.useSystemTrustStore = false;
      options.trustedCertificates = kj::arrayPtr(&*cert, 1);
    }
    context = kj::heap<kj::TlsContext>(kj::mv(options));
  }
};

bool usesTls(const FloorPlan& plan) { return !plan.tlsCertPem.empty(); }

// One accepted connection, serving an EchoImpl until the client hangs up.
struct EchoConnection {
  EchoConnection(kj::Own<kj::AsyncIoStream> s, bool tensordWindow)
      : stream(kj::mv(s)),
        net(network(*stream, capnp::rpc::twoparty::Side::SERVER, tensordWindow)),
        rpc(capnp::makeRpcServer(*net, kj::heap<EchoImpl>())) {}
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> net;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

kj::Promise<void> serve(kj::ConnectionReceiver& listener, kj::TaskSet& connections, bool tensordWindow,
                        FloorTls* tls) {
  return listener.accept().then([&listener, &connections, tensordWindow, tls](kj::Own<kj::AsyncIoStream> stream) {
    auto secured = !tls ? kj::Promise<kj::Own<kj::AsyncIoStream>>(kj::mv(stream))
                        : protocol::TlsStream::accept(*tls->context, kj::mv(stream))
                              .then([](kj::Own<protocol::TlsStream> s) -> kj::Own<kj::AsyncIoStream> { return kj::mv(s); });
    connections.add(secured.then([tensordWindow](kj::Own<kj::AsyncIoStream> stream) {
      auto connection = kj::heap<EchoConnection>(kj::mv(stream), tensordWindow);
      auto closed = connection->net->onDisconnect();
      return closed.attach(kj::mv(connection));
    }));
    return serve(listener, connections, tensordWindow, tls);
  });
}

class IgnoreErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&&) override {}
};

// The echo server on its own thread and event loop, listening on 127.0.0.1:0.
class EchoServer {
 public:
  explicit EchoServer(const FloorPlan& plan) : plan_(plan) {
    std::promise<uint16_t> ready;
    auto port = ready.get_future();
    thread_ = std::thread([this, &ready] { run(ready); });
    port_ = port.get();
  }
  ~EchoServer() {
    executor_->executeSync([this] { stop_->fulfill(); });
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  void run(std::promise<uint16_t>& ready) {
    try {
      auto io = kj::setupAsyncIo();
      std::optional<FloorTls> tls;
      if (usesTls(plan_)) tls.emplace(plan_, true);
      auto address = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
      auto listener = address->listen();
      IgnoreErrors ignore;
      kj::TaskSet connections(ignore);
      auto stop = kj::newPromiseAndFulfiller<void>();
      stop_ = kj::mv(stop.fulfiller);
      executor_ = kj::getCurrentThreadExecutor().addRef();
      ready.set_value(uint16_t(listener->getPort()));
      serve(*listener, connections, plan_.tensordWindow, tls ? &*tls : nullptr)
          .exclusiveJoin(kj::mv(stop.promise))
          .wait(io.waitScope);
    } catch (...) {
      try {
        ready.set_exception(std::current_exception());
      } catch (const std::future_error&) {
      }
    }
  }

  const FloorPlan& plan_;
  std::thread thread_;
  uint16_t port_ = 0;
  kj::Own<const kj::Executor> executor_;      // set on the server thread before `ready`
  kj::Own<kj::PromiseFulfiller<void>> stop_;  // used on the server thread only
};

}  // namespace

FloorResults measureFloor(const FloorPlan& plan) {
  EchoServer server(plan);
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  std::optional<FloorTls> tls;  // outlives the connection it wraps
  if (usesTls(plan)) tls.emplace(plan, false);
  auto address = io.provider->getNetwork().parseAddress("127.0.0.1", server.port()).wait(ws);
  auto connection = address->connect().wait(ws);
  if (tls) connection = protocol::TlsStream::connect(*tls->context, kj::mv(connection), "127.0.0.1").wait(ws);
  auto net = network(*connection, capnp::rpc::twoparty::Side::CLIENT, plan.tensordWindow);
  auto rpc = capnp::makeRpcClient(*net);
  capnp::MallocMessageBuilder vatIdMessage(8);
  auto vatId = vatIdMessage.initRoot<capnp::rpc::twoparty::VatId>();
  vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
  auto echo = rpc.bootstrap(vatId).castAs<proto::Echo>();

  FloorResults results;
  for (int i = 0; i < plan.pingWarmup + plan.pings; ++i) {
    auto start = Clock::now();
    auto request = echo.pingRequest();
    request.setValue(uint64_t(i));
    auto response = request.send().wait(ws);
    double seconds = since(start);
    if (response.getValue() != uint64_t(i)) throw std::runtime_error("echo ping returned the wrong value");
    if (i >= plan.pingWarmup) results.pingSeconds.push_back(seconds);
  }

  // Chains: each call's input is the result of the call before, still on
  // its way (promise pipelining); only the last is waited for. The first
  // chain warms up and is not timed.
  for (int c = plan.chains > 0 ? -1 : 0; c < plan.chains; ++c) {
    proto::Link::Client link = echo.chainRequest().send().wait(ws).getOutput();
    auto start = Clock::now();
    std::optional<capnp::RemotePromise<proto::Echo::ChainResults>> last;
    for (int i = 0; i < plan.chainLength; ++i) {
      auto request = echo.chainRequest();
      request.setInput(link);
      last.emplace(request.send());
      link = last->getOutput();
    }
    if (last) last->wait(ws);
    if (c >= 0) results.chainSeconds.push_back(since(start));
  }

  auto source = kj::arrayPtr(reinterpret_cast<const kj::byte*>(plan.source.data()), plan.source.size());
  for (size_t s = 0; s < plan.transferBytes.size(); ++s) {
    uint64_t bytes = plan.transferBytes[s];
    if (bytes > source.size()) throw std::invalid_argument("floor plan: source smaller than a transfer");
    auto& up = results.uploadSeconds.emplace_back();
    auto& down = results.downloadSeconds.emplace_back();
    for (int r = 0; r < plan.transferRepeats[s]; ++r) {
      // Upload: a server-side sink takes the bytes in chunks.
      auto start = Clock::now();
      proto::Sink::Client sink = echo.uploadRequest().send().getSink();
      for (uint64_t offset = 0; offset < bytes; offset += plan.chunkBytes) {
        size_t n = size_t(std::min<uint64_t>(plan.chunkBytes, bytes - offset));
        auto request = sink.writeRequest();
        request.setData(source.slice(offset, offset + n));
        request.send().wait(ws);  // returns at once while the flow window has room
      }
      uint64_t got = sink.doneRequest().send().wait(ws).getBytes();
      up.push_back(since(start));
      if (got != bytes) throw std::runtime_error("echo upload lost bytes");

      // Download: the server streams into a sink here.
      auto counter = kj::heap<CountingSink>();
      proto::Sink::Client local = kj::mv(counter);
      start = Clock::now();
      auto request = echo.downloadRequest();
      request.setSink(local);
      request.setBytes(bytes);
      request.setChunkBytes(plan.chunkBytes);
      request.send().wait(ws);
      down.push_back(since(start));
    }
  }
  return results;
}

}  // namespace tensord::bench
