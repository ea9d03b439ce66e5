// Connecting, authenticating and the per-thread event loop.

#include "client/connection.h"

#include <capnp/message.h>
#include <kj/compat/tls.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "client/wire.h"
#include "protocol/tls_stream.h"

namespace tensord::detail {

namespace {

// Reader limit for messages from the daemon. Bulk data moves in 1 MiB chunks,
// but op tables and tensor lists grow with the daemon; 256 MiB leaves room.
constexpr uint64_t kTraversalLimitWords = (uint64_t(256) << 20) / sizeof(capnp::word);
constexpr uint kDefaultPort = 7450;
constexpr std::string_view kTlsScheme = "tls://";

std::string readPem(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(Error::Kind::kFailed, "cannot read the " + std::string(what) + " " + path + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string tlsReason(const kj::Exception& e) {
  std::string text = errors::cleanMessage(e.getDescription().cStr());
  if (size_t at = text.find("reason = "); at != std::string::npos) return text.substr(at + 9);
  if (size_t at = text.find("message = "); at != std::string::npos) return text.substr(at + 10);
  return text;
}

// "tls://h:p" -> true, "h:p"; "[::1]:p" -> host "::1".
std::string hostOf(std::string_view address) {
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    return std::string(address.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  }
  return std::string(address.substr(0, address.rfind(':')));
}

}  // namespace

struct Connection::Tls {
  std::vector<kj::TlsCertificate> cas;
  std::optional<kj::TlsKeypair> keypair;
  kj::Own<kj::TlsContext> context;

  explicit Tls(const ConnectOptions& options) {
    kj::TlsContext::Options tlsOptions;
    tlsOptions.minVersion = kj::TlsVersion::TLS_1_2;
    if (!options.caFile.empty()) {
      const std::string pem = readPem(options.caFile, "CA file");
      constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
      for (size_t pos = 0;;) {
        size_t begin = pem.find("-----BEGIN CERTIFICATE-----", pos);
        size_t end = begin == std::string::npos ? begin : pem.find(kEnd, begin);
        if (end == std::string::npos) break;
        end += kEnd.size();
        std::string block = pem.substr(begin, end - begin) + "\n";
        try {
          cas.emplace_back(kj::StringPtr(block.c_str(), block.size()));
        } catch (const kj::Exception& e) {
          throw Error(Error::Kind::kFailed, "CA file " + options.caFile + ": not a PEM certificate: " + tlsReason(e));
        }
        pos = end;
      }
      if (cas.empty()) throw Error(Error::Kind::kFailed, "CA file " + options.caFile + " holds no PEM certificate");
      tlsOptions.useSystemTrustStore = false;
      tlsOptions.trustedCertificates = kj::ArrayPtr<const kj::TlsCertificate>(cas.data(), cas.size());
    }
    if (!options.certFile.empty() || !options.keyFile.empty()) {
      if (options.certFile.empty() || options.keyFile.empty()) {
        throw Error(Error::Kind::kFailed, "a client certificate needs both a certificate file and a key file");
      }
      const std::string chain = readPem(options.certFile, "client certificate");
      const std::string key = readPem(options.keyFile, "client key");
      try {
        keypair.emplace(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(key.c_str(), key.size())),
                                       kj::TlsCertificate(kj::StringPtr(chain.c_str(), chain.size()))});
      } catch (const kj::Exception& e) {
        throw Error(Error::Kind::kFailed, "cannot load the client certificate " + options.certFile + " / key " +
                                              options.keyFile + ": " + tlsReason(e));
      }
      tlsOptions.defaultKeypair = *keypair;
    }
    try {
      context = kj::heap<kj::TlsContext>(kj::mv(tlsOptions));
    } catch (const kj::Exception& e) {
      throw Error(Error::Kind::kFailed, "cannot set up TLS: " + tlsReason(e));
    }
  }
};

std::shared_ptr<kj::AsyncIoContext> threadIoContext() {
  thread_local std::weak_ptr<kj::AsyncIoContext> current;
  if (auto io = current.lock()) return io;
  auto io = std::make_shared<kj::AsyncIoContext>(kj::setupAsyncIo());
  current = io;
  return io;
}

Connection::Connection(const ConnectOptions& options) : io_(threadIoContext()), address_(options.address) {
  auto& ws = io_->waitScope;
  const bool tls = address_.starts_with(kTlsScheme);
  const std::string hostPort = tls ? address_.substr(kTlsScheme.size()) : address_;
  if (tls) {
    tls_ = std::make_unique<Tls>(options);
  } else if (!options.certFile.empty()) {
    throw Error(Error::Kind::kFailed, "a client certificate needs a TLS address (tls://" + address_ + ")");
  }
  try {
    auto addr = io_->provider->getNetwork().parseAddress(hostPort, kDefaultPort).wait(ws);
    stream_ = addr->connect().wait(ws);
  } catch (const kj::Exception& e) {
    throw Error(Error::Kind::kDisconnected,
                "cannot connect to tensord at " + address_ + ": " + errors::cleanMessage(e.getDescription().cStr()));
  }
  if (tls_) {
    const std::string host = hostOf(hostPort);
    try {
      stream_ = protocol::TlsStream::connect(*tls_->context, kj::mv(stream_), host).wait(ws);
    } catch (const kj::Exception& e) {
      const std::string description = e.getDescription().cStr();
      const bool refused = description.find("certificate is not trusted") != std::string::npos ||
                           description.find("provided no certificate") != std::string::npos;
      std::string reason = tlsReason(e);
      std::string hint;
      if (reason.find("not trusted") != std::string::npos || reason.find("issuer") != std::string::npos ||
          reason.find("self-signed") != std::string::npos || reason.find("self signed") != std::string::npos) {
        hint = "; is the daemon's CA given with --ca / TENSORD_CA?";
      } else if (reason.find("hostname mismatch") != std::string::npos ||
                 reason.find("IP address mismatch") != std::string::npos) {
        hint = "; the daemon's certificate is not valid for '" + host + "'";
      }
      // "Refused" only where the certificate was: a peer that hangs up or
      // does not speak TLS fails the handshake otherwise.
      throw Error(Error::Kind::kDisconnected,
                  "TLS handshake with tensord at " + address_ +
                      " failed: " + (refused ? "the daemon's certificate was refused: " : "") + reason + hint);
    }
  }
  const bool byCertificate = options.token.empty() && !options.certFile.empty();

  capnp::ReaderOptions readerOptions;
  readerOptions.traversalLimitInWords = kTraversalLimitWords;
  network_ = kj::heap<protocol::WindowedVatNetwork>(*stream_, capnp::rpc::twoparty::Side::CLIENT, readerOptions);
  rpc_ = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*network_));

  capnp::MallocMessageBuilder vatIdMessage(8);
  auto vatId = vatIdMessage.initRoot<capnp::rpc::twoparty::VatId>();
  vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
  daemon_ = rpc_->bootstrap(vatId).castAs<proto::Daemon>();

  // Authenticate and fetch the op table in one round trip (listOps rides on
  // the still-unresolved session).
  kj::Promise<kj::String> principal = nullptr;
  if (byCertificate) {
    auto auth = daemon_.authenticateWithCertificateRequest().send();
    session_ = auth.getSession();
    principal = auth.then([](auto response) { return kj::heapString(response.getPrincipal()); });
  } else {
    auto authRequest = daemon_.authenticateRequest();
    authRequest.setToken(options.token);
    auto auth = authRequest.send();
    session_ = auth.getSession();
    principal = auth.then([](auto response) { return kj::heapString(response.getPrincipal()); });
  }
  auto opsPromise = session_.listOpsRequest().send();
  try {
    principal_ = principal.wait(ws).cStr();
  } catch (const kj::Exception& e) {
    std::string message = errors::cleanMessage(e.getDescription().cStr());
    if (tls_ && message.find("alert") != std::string::npos) {
      // The daemon ended the handshake after verifying our certificate (TLS 1.3).
      throw Error(Error::Kind::kDisconnected, "TLS handshake with tensord at " + address_ +
                                                  " failed: the daemon refused the client certificate: " +
                                                  tlsReason(e));
    }
    if (e.getType() == kj::Exception::Type::DISCONNECTED) {
      // With TLS 1.3 the daemon checks a client certificate after our side of
      // the handshake finished; its alert may be lost when our write fails first.
      const std::string hint = tls_ && !options.certFile.empty()
                                   ? " (the daemon may have refused the client certificate " + options.certFile +
                                         ": expired, or not signed by its tls.client_ca_file)"
                                   : "";
      throw Error(Error::Kind::kDisconnected, "cannot connect to tensord at " + address_ +
                                                  " (connection closed during authentication): " + message + hint);
    }
    // The daemon's own message may already say "authentication failed: ...".
    constexpr std::string_view kSaid = "authentication failed: ";
    if (message.starts_with(kSaid)) message.erase(0, kSaid.size());
    throw Error(errors::kindOf(e), "authentication with tensord at " + address_ + " failed: " + message);
  }
  try {
    auto response = opsPromise.wait(ws);
    std::vector<OpInfo> ops;
    for (auto spec : response.getOps()) ops.push_back(wire::fromWire(spec));
    cacheOps(ops);
    prefetchedOps_ = std::move(ops);
  } catch (const kj::Exception&) {
    // Not fatal: ops() asks again and reports the error then.
  } catch (const Error&) {
  }
}

Connection::~Connection() = default;

void Connection::closeBatch() {
  if (batchDepth_ > 0 && --batchDepth_ == 0) sendHeld();
}

std::vector<std::shared_ptr<HeldOutput>> Connection::hold(HeldCall call, size_t outputs) {
  std::vector<std::shared_ptr<HeldOutput>> out;
  for (size_t i = 0; i < outputs; ++i) {
    auto output = std::make_shared<HeldOutput>();
    output->call = uint32_t(held_.size());
    output->output = uint32_t(i);
    call.outputs.push_back(output);
    out.push_back(std::move(output));
  }
  held_.push_back(std::move(call));
  ++stats.calls;
  if (held_.size() >= kMaxHeldCalls) sendHeld();
  return out;
}

void Connection::encodeCalls(capnp::List<proto::BatchCall>::Builder list, std::vector<HeldCall>& calls) {
  for (size_t c = 0; c < calls.size(); ++c) {
    auto call = list[uint32_t(c)];
    call.setOp(calls[c].op);
    auto inputs = call.initInputs(uint32_t(calls[c].inputs.size()));
    for (size_t i = 0; i < calls[c].inputs.size(); ++i) {
      HeldInput& input = calls[c].inputs[i];
      if (input.param) {
        inputs[uint32_t(i)].setParam(input.call);
      } else if (input.earlier) {
        auto earlier = inputs[uint32_t(i)].initEarlier();
        earlier.setCall(input.call);
        earlier.setOutput(input.output);
      } else {
        inputs[uint32_t(i)].setTensor(input.cap);
      }
    }
    wire::setAttrs(call, calls[c].attrs);
  }
}

void Connection::beginCapture() {
  sendHeld();  // what a batch holds is not part of the graph
  capturing_ = true;
  ++batchDepth_;
}

std::vector<HeldCall> Connection::endCapture() {
  capturing_ = false;
  --batchDepth_;
  std::vector<HeldCall> calls = std::move(held_);
  held_.clear();
  return calls;
}

void Connection::sendHeld() {
  if (held_.empty() || capturing_) return;
  std::vector<HeldCall> calls = std::move(held_);
  held_.clear();
  // The outputs someone still holds; the others are not asked for.
  std::vector<std::shared_ptr<HeldOutput>> kept;
  for (auto& call : calls) {
    for (auto& weak : call.outputs) {
      if (auto output = weak.lock()) kept.push_back(std::move(output));
    }
  }
  KJ_IF_MAYBE (error, kj::runCatchingExceptions([&] {
    auto request = session_.callBatchRequest();
    encodeCalls(request.initCalls(uint32_t(calls.size())), calls);
    auto keep = request.initKeep(uint32_t(kept.size()));
    for (size_t k = 0; k < kept.size(); ++k) {
      keep[uint32_t(k)].setCall(kept[k]->call);
      keep[uint32_t(k)].setOutput(kept[k]->output);
    }
    auto sent = request.send();
    // Each kept output pipelines on the batch's results, like a call's `output`.
    auto results = sent.getResults();
    for (size_t k = 0; k < kept.size(); ++k) {
      auto get = results.getRequest(capnp::MessageSize{4, 0});
      get.setIndex(uint32_t(k));
      kept[k]->cap = get.send().getTensor();
    }
    auto origin = std::make_shared<PendingCall>(sent.then([](capnp::Response<proto::Session::CallBatchResults>&&) {}));
    if (kept.empty()) addTask(origin->done.addBranch());  // runs on; a failure surfaces at the next blocking request
    for (auto& output : kept) {
      output->origin = origin;
      output->sent = true;
    }
  })) {
    for (auto& output : kept) {
      output->cap = proto::Tensor::Client(capnp::newBrokenCap(kj::cp(*error)));
      output->origin.reset();
      output->sent = true;
    }
    return;
  }
  flush();  // lets the event loop write the batch
}

void Connection::flush() {
  guard([&] { io_->waitScope.poll(); });
}

std::vector<OpInfo> Connection::ops() {
  if (prefetchedOps_) {
    std::vector<OpInfo> ops = std::move(*prefetchedOps_);
    prefetchedOps_.reset();
    return ops;
  }
  return fetchOps();
}

std::vector<OpInfo> Connection::fetchOps() {
  return guard([&] {
    auto response = session_.listOpsRequest().send().wait(io_->waitScope);
    std::vector<OpInfo> ops;
    for (auto spec : response.getOps()) ops.push_back(wire::fromWire(spec));
    cacheOps(ops);
    return ops;
  });
}

size_t Connection::outputCount(std::string_view op) {
  const OpInfo* info = opInfo(op);
  return info ? info->outputs.size() : 1;
}

const OpInfo* Connection::opInfo(std::string_view op) {
  auto it = opInfos_.find(op);
  if (it == opInfos_.end() && !askedAgain_.contains(op)) {
    // Maybe an op registered after we connected: ask once more for this name.
    // Unknown ops are not asked about again; the daemon rejects the call.
    askedAgain_.emplace(op);
    try {
      fetchOps();
    } catch (const Error&) {
    }
    it = opInfos_.find(op);
  }
  return it == opInfos_.end() ? nullptr : &it->second;
}

void Connection::forgetOps() {
  prefetchedOps_.reset();
  opInfos_.clear();
  askedAgain_.clear();
}

void Connection::cacheOps(const std::vector<OpInfo>& ops) {
  opInfos_.clear();
  for (const auto& op : ops) opInfos_[op.name] = op;
}

namespace {
thread_local const WaitCheckScope* gWaitCheck = nullptr;
}  // namespace

WaitCheckScope::WaitCheckScope(std::function<void()> check, std::chrono::milliseconds interval)
    : check_(std::move(check)), interval_(std::max(interval, std::chrono::milliseconds(1))), previous_(gWaitCheck) {
  gWaitCheck = this;
}

WaitCheckScope::~WaitCheckScope() { gWaitCheck = previous_; }

const WaitCheckScope* WaitCheckScope::current() { return gWaitCheck; }

bool Connection::waitSlice(kj::Promise<void> ready, std::chrono::milliseconds interval) {
  auto timeout = io_->provider->getTimer().afterDelay(interval.count() * kj::MILLISECONDS).then([] { return false; });
  return ready.then([] { return true; }).exclusiveJoin(kj::mv(timeout)).wait(io_->waitScope);
}

void Connection::addTask(kj::Promise<void> task) { tasks_.add(kj::mv(task)); }

void Connection::TaskErrors::taskFailed(kj::Exception&& exception) {
  if (!first) first.emplace(kj::mv(exception));
}

void Connection::throwTaskError() {
  if (!taskErrors_.first) return;
  kj::Exception e = *taskErrors_.first;
  taskErrors_.first.reset();
  kj::throwFatalException(kj::mv(e));
}

}  // namespace tensord::detail
