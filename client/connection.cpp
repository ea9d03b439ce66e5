// Connecting, authenticating and the per-thread event loop.

#include "client/connection.h"

#include <capnp/message.h>

#include "client/wire.h"

namespace tensord::detail {

namespace {

// Reader limit for messages from the daemon. Bulk data moves in 1 MiB chunks,
// but op tables and tensor lists grow with the daemon; 256 MiB leaves room.
constexpr uint64_t kTraversalLimitWords = (uint64_t(256) << 20) / sizeof(capnp::word);
constexpr uint kDefaultPort = 7450;

}  // namespace

std::shared_ptr<kj::AsyncIoContext> threadIoContext() {
  thread_local std::weak_ptr<kj::AsyncIoContext> current;
  if (auto io = current.lock()) return io;
  auto io = std::make_shared<kj::AsyncIoContext>(kj::setupAsyncIo());
  current = io;
  return io;
}

Connection::Connection(std::string address, std::string_view token)
    : io_(threadIoContext()), address_(std::move(address)) {
  auto& ws = io_->waitScope;
  try {
    auto addr = io_->provider->getNetwork().parseAddress(address_, kDefaultPort).wait(ws);
    stream_ = addr->connect().wait(ws);
  } catch (const kj::Exception& e) {
    throw Error(Error::Kind::kDisconnected,
                "cannot connect to tensord at " + address_ + ": " + errors::cleanMessage(e.getDescription().cStr()));
  }

  capnp::ReaderOptions options;
  options.traversalLimitInWords = kTraversalLimitWords;
  network_ = kj::heap<capnp::TwoPartyVatNetwork>(*stream_, capnp::rpc::twoparty::Side::CLIENT, options);
  rpc_ = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*network_));

  capnp::MallocMessageBuilder vatIdMessage(8);
  auto vatId = vatIdMessage.initRoot<capnp::rpc::twoparty::VatId>();
  vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
  daemon_ = rpc_->bootstrap(vatId).castAs<proto::Daemon>();

  // Authenticate and fetch the op table in one round trip (listOps rides on
  // the still-unresolved session).
  auto authRequest = daemon_.authenticateRequest();
  authRequest.setToken(std::string(token));
  auto auth = authRequest.send();
  session_ = auth.getSession();
  auto opsPromise = session_.listOpsRequest().send();
  try {
    auto response = auth.wait(ws);
    principal_ = response.getPrincipal();
  } catch (const kj::Exception& e) {
    std::string message = errors::cleanMessage(e.getDescription().cStr());
    if (e.getType() == kj::Exception::Type::DISCONNECTED) {
      throw Error(Error::Kind::kDisconnected, "cannot connect to tensord at " + address_ +
                                                  " (connection closed during authentication): " + message);
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
  auto it = outputCounts_.find(op);
  if (it == outputCounts_.end() && !askedAgain_.contains(op)) {
    // Maybe an op registered after we connected: ask once more for this name.
    // Unknown ops are not asked about again; the daemon rejects the call.
    askedAgain_.emplace(op);
    try {
      fetchOps();
    } catch (const Error&) {
    }
    it = outputCounts_.find(op);
  }
  if (it == outputCounts_.end()) return 1;
  return it->second;
}

void Connection::cacheOps(const std::vector<OpInfo>& ops) {
  outputCounts_.clear();
  for (const auto& op : ops) outputCounts_[op.name] = std::max<size_t>(1, op.outputs.size());
}

}  // namespace tensord::detail
