#include "bench/echo_floor.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/compat/tls.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
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

  FloorTls(const Floor::Options& options, bool server) {
    const std::string& certPem = options.tlsCertPem;
    const std::string& keyPem = options.tlsKeyPem;
    kj::TlsContext::Options tls;
    tls.minVersion = kj::TlsVersion::TLS_1_2;
    cert.emplace(kj::StringPtr(certPem.c_str(), certPem.size()));
    if (server) {
      keypair.emplace(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(keyPem.c_str(), keyPem.size())),
                                     kj::TlsCertificate(kj::StringPtr(certPem.c_str(), certPem.size()))});
      tls.defaultKeypair = *keypair;
    } else {
      tls.useSystemTrustStore = false;
      tls.trustedCertificates = kj::arrayPtr(&*cert, 1);
    }
    context = kj::heap<kj::TlsContext>(kj::mv(tls));
  }
};

bool usesTls(const Floor::Options& options) { return !options.tlsCertPem.empty(); }

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
  explicit EchoServer(const Floor::Options& options) : options_(options) {
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
      if (usesTls(options_)) tls.emplace(options_, true);
      auto address = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope);
      auto listener = address->listen();
      IgnoreErrors ignore;
      kj::TaskSet connections(ignore);
      auto stop = kj::newPromiseAndFulfiller<void>();
      stop_ = kj::mv(stop.fulfiller);
      executor_ = kj::getCurrentThreadExecutor().addRef();
      ready.set_value(uint16_t(listener->getPort()));
      serve(*listener, connections, options_.tensordWindow, tls ? &*tls : nullptr)
          .exclusiveJoin(kj::mv(stop.promise))
          .wait(io.waitScope);
    } catch (...) {
      try {
        ready.set_exception(std::current_exception());
      } catch (const std::future_error&) {
      }
    }
  }

  const Floor::Options options_;
  std::thread thread_;
  uint16_t port_ = 0;
  kj::Own<const kj::Executor> executor_;      // set on the server thread before `ready`
  kj::Own<kj::PromiseFulfiller<void>> stop_;  // used on the server thread only
};

// The client's side: a connection to the server and the Echo capability,
// on the thread that runs the jobs.
struct ClientSide {
  kj::WaitScope& ws;
  proto::Echo::Client echo;
  uint32_t chunkBytes;
};

}  // namespace

// The server on its thread; the client on another, which runs one job at a
// time for the caller, who waits for it.
struct Floor::Impl {
  explicit Impl(const Options& options) : options(options), server(options) {
    std::promise<void> ready;
    auto connected = ready.get_future();
    client = std::thread([this, &ready] { run(ready); });
    try {
      connected.get();
    } catch (...) {
      client.join();  // it returned after failing to connect
      throw;
    }
  }
  ~Impl() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    wake.notify_one();
    client.join();
  }

  // Runs `job` on the client's thread; returns (or throws) as it does.
  void call(std::function<void(ClientSide&)> job) {
    std::packaged_task<void(ClientSide&)> task(std::move(job));
    auto done = task.get_future();
    {
      std::lock_guard lock(mutex);
      pending = std::move(task);
    }
    wake.notify_one();
    done.get();
  }

  void run(std::promise<void>& ready) {
    try {
      auto io = kj::setupAsyncIo();
      auto& ws = io.waitScope;
      std::optional<FloorTls> tls;  // outlives the connection it wraps
      if (usesTls(options)) tls.emplace(options, false);
      auto address = io.provider->getNetwork().parseAddress("127.0.0.1", server.port()).wait(ws);
      auto connection = address->connect().wait(ws);
      if (tls) connection = protocol::TlsStream::connect(*tls->context, kj::mv(connection), "127.0.0.1").wait(ws);
      auto net = network(*connection, capnp::rpc::twoparty::Side::CLIENT, options.tensordWindow);
      auto rpc = capnp::makeRpcClient(*net);
      capnp::MallocMessageBuilder vatIdMessage(8);
      auto vatId = vatIdMessage.initRoot<capnp::rpc::twoparty::VatId>();
      vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
      ClientSide side{ws, rpc.bootstrap(vatId).castAs<proto::Echo>(), std::max<uint32_t>(1, options.chunkBytes)};
      ready.set_value();
      for (;;) {
        std::packaged_task<void(ClientSide&)> task;
        {
          std::unique_lock lock(mutex);
          wake.wait(lock, [this] { return stop || pending.valid(); });
          if (stop) return;
          task = std::move(pending);
        }
        task(side);  // an exception lands in the caller's future
      }
    } catch (...) {
      try {
        ready.set_exception(std::current_exception());
      } catch (const std::future_error&) {  // already connected: the job's caller gets it
      }
    }
  }

  const Options options;
  EchoServer server;
  std::thread client;
  std::mutex mutex;
  std::condition_variable wake;
  std::packaged_task<void(ClientSide&)> pending;  // guarded by mutex
  bool stop = false;                              // guarded by mutex
};

Floor::Floor(const Options& options) : impl_(std::make_unique<Impl>(options)) {}
Floor::~Floor() = default;

std::vector<double> Floor::pings(int count) {
  std::vector<double> seconds;
  impl_->call([&](ClientSide& c) {
    for (int i = 0; i < count; ++i) {
      auto start = Clock::now();
      auto request = c.echo.pingRequest();
      request.setValue(uint64_t(i));
      auto response = request.send().wait(c.ws);
      seconds.push_back(since(start));
      if (response.getValue() != uint64_t(i)) throw std::runtime_error("echo ping returned the wrong value");
    }
  });
  return seconds;
}

double Floor::chain(int length) {
  double seconds = 0;
  impl_->call([&](ClientSide& c) {
    proto::Link::Client link = c.echo.chainRequest().send().wait(c.ws).getOutput();
    auto start = Clock::now();
    std::optional<capnp::RemotePromise<proto::Echo::ChainResults>> last;
    for (int i = 0; i < length; ++i) {
      auto request = c.echo.chainRequest();
      request.setInput(link);
      last.emplace(request.send());
      link = last->getOutput();
    }
    if (last) last->wait(c.ws);
    seconds = since(start);
  });
  return seconds;
}

double Floor::upload(std::span<const std::byte> bytes) {
  double seconds = 0;
  impl_->call([&](ClientSide& c) {
    auto source = kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size());
    auto start = Clock::now();
    proto::Sink::Client sink = c.echo.uploadRequest().send().getSink();
    for (size_t offset = 0; offset < source.size(); offset += c.chunkBytes) {
      size_t n = std::min<size_t>(c.chunkBytes, source.size() - offset);
      auto request = sink.writeRequest();
      request.setData(source.slice(offset, offset + n));
      request.send().wait(c.ws);  // returns at once while the flow window has room
    }
    uint64_t got = sink.doneRequest().send().wait(c.ws).getBytes();
    seconds = since(start);
    if (got != source.size()) throw std::runtime_error("echo upload lost bytes");
  });
  return seconds;
}

double Floor::download(uint64_t bytes) {
  double seconds = 0;
  impl_->call([&](ClientSide& c) {
    proto::Sink::Client local = kj::heap<CountingSink>();
    auto start = Clock::now();
    auto request = c.echo.downloadRequest();
    request.setSink(local);
    request.setBytes(bytes);
    request.setChunkBytes(c.chunkBytes);
    request.send().wait(c.ws);
    seconds = since(start);
  });
  return seconds;
}

}  // namespace tensord::bench
