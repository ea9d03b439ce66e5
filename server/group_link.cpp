#include "server/group_link.h"

#include <capnp/message.h>
#include <kj/compat/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <sstream>

#include "protocol/tls_stream.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

std::string readPem(const std::filesystem::path& path, std::string_view key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(std::string(key) + ": cannot open " + path.string() + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string reasonOf(const kj::Exception& e) {
  std::string text = e.getDescription().cStr();
  if (size_t at = text.find("message = "); at != std::string::npos) text = text.substr(at + 10);
  if (size_t at = text.find("remote exception: "); at != std::string::npos) text = text.substr(at + 18);
  return text;
}

// Adds `step` to an exception's message: "authenticate: unknown token".
kj::Exception during(const std::string& step, kj::Exception&& e) {
  return kj::Exception(e.getType(), __FILE__, __LINE__, kj::str(step, ": ", reasonOf(e).c_str()));
}

}  // namespace

MemberAddress parseMemberAddress(std::string_view text, std::string_view key) {
  MemberAddress out;
  out.text = std::string(text);
  std::string_view rest = text;
  if (rest.starts_with("tls://")) {
    out.tls = true;
    rest.remove_prefix(6);
  }
  out.hostPort = parseHostPort(rest, key);
  if (out.hostPort.port == 0) throw ConfigError(std::string(key) + ": port 0 is not a member's address");
  return out;
}

struct NodeDialer::Tls {
  std::vector<kj::TlsCertificate> cas;
  std::optional<kj::TlsKeypair> keypair;
  kj::Own<kj::TlsContext> context;
};

NodeDialer::NodeDialer(const GroupsConfig& config, kj::Network& network, uint64_t maxMessageBytes)
    : network_(network), maxMessageBytes_(maxMessageBytes) {
  kj::TlsContext::Options options;
  options.minVersion = kj::TlsVersion::TLS_1_2;
  tls_ = std::make_unique<Tls>();
  if (const auto& node = config.credentials) {
    haveCredentials_ = true;
    token_ = node->token;
    if (!node->caFile.empty()) {
      const std::string pem = readPem(node->caFile, "groups.node_credentials.ca_file");
      constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
      for (size_t pos = 0;;) {
        size_t begin = pem.find("-----BEGIN CERTIFICATE-----", pos);
        size_t end = begin == std::string::npos ? begin : pem.find(kEnd, begin);
        if (end == std::string::npos) break;
        end += kEnd.size();
        std::string block = pem.substr(begin, end - begin) + "\n";
        try {
          tls_->cas.emplace_back(kj::StringPtr(block.c_str(), block.size()));
        } catch (const kj::Exception& e) {
          throw ConfigError("groups.node_credentials.ca_file: " + node->caFile.string() +
                            ": not a PEM certificate: " + reasonOf(e));
        }
        pos = end;
      }
      if (tls_->cas.empty()) {
        throw ConfigError("groups.node_credentials.ca_file: " + node->caFile.string() + " holds no PEM certificate");
      }
      options.useSystemTrustStore = false;
      options.trustedCertificates = kj::ArrayPtr<const kj::TlsCertificate>(tls_->cas.data(), tls_->cas.size());
    }
    if (!node->certFile.empty()) {
      const std::string chain = readPem(node->certFile, "groups.node_credentials.cert_file");
      const std::string key = readPem(node->keyFile, "groups.node_credentials.key_file");
      try {
        tls_->keypair.emplace(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(key.c_str(), key.size())),
                                             kj::TlsCertificate(kj::StringPtr(chain.c_str(), chain.size()))});
      } catch (const kj::Exception& e) {
        throw ConfigError("groups.node_credentials: cannot load the certificate " + node->certFile.string() +
                          " / key " + node->keyFile.string() + ": " + reasonOf(e));
      }
      options.defaultKeypair = *tls_->keypair;
    }
  }
  try {
    tls_->context = kj::heap<kj::TlsContext>(kj::mv(options));
  } catch (const kj::Exception& e) {
    throw ConfigError("groups.node_credentials: cannot set up TLS: " + reasonOf(e));
  }
  // A member's certificate must verify for the handshake to complete.
  SSL_CTX_set_verify(protocol::sslContext(*tls_->context), SSL_VERIFY_PEER, nullptr);
}

NodeDialer::~NodeDialer() = default;

kj::Promise<kj::Own<PeerLink>> NodeDialer::dial(const MemberAddress& to, std::string group,
                                                std::vector<std::string> members, uint32_t rank, uint64_t nonce) {
  if (!haveCredentials_) {
    return KJ_EXCEPTION(FAILED, "this daemon has no groups.node_credentials to authenticate to its peers with");
  }
  if (!to.tls && !to.hostPort.isLoopback()) {
    return KJ_EXCEPTION(FAILED, kj::str("the plain-TCP member ", to.text.c_str(),
                                        " is not on loopback: node traffic off loopback must use TLS "
                                        "(write it as tls://",
                                        to.hostPort.str().c_str(), ")"));
  }
  auto link = kj::heap<PeerLink>();
  PeerLink& l = *link;
  const bool tls = to.tls;
  const std::string host = to.hostPort.host;
  auto connected =
      network_.parseAddress(to.hostPort.str())
          .then([](kj::Own<kj::NetworkAddress> address) { return address->connect().attach(kj::mv(address)); })
          .catch_([](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            return during("cannot connect", kj::mv(e));
          });
  return connected
      .then([this, tls, host](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        int one = 1;
        try {
          stream->setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        } catch (const kj::Exception&) {
        }
        if (!tls) return kj::mv(stream);
        return protocol::TlsStream::connect(*tls_->context, kj::mv(stream), host)
            .then(
                [](kj::Own<protocol::TlsStream> secured) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
                  return kj::Own<kj::AsyncIoStream>(kj::mv(secured));
                },
                [](kj::Exception&& e) {
                  return kj::Promise<kj::Own<kj::AsyncIoStream>>(during("TLS handshake failed", kj::mv(e)));
                });
      })
      .then([this, &l](kj::Own<kj::AsyncIoStream> stream) {
        l.stream = kj::mv(stream);
        capnp::ReaderOptions reader;
        reader.traversalLimitInWords = maxMessageBytes_ / sizeof(capnp::word);
        l.network = kj::heap<protocol::WindowedVatNetwork>(*l.stream, capnp::rpc::twoparty::Side::CLIENT, reader);
        l.rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*l.network));
        capnp::MallocMessageBuilder vatIdMessage(8);
        auto vatId = vatIdMessage.initRoot<capnp::rpc::twoparty::VatId>();
        vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
        auto daemon = l.rpc->bootstrap(vatId).castAs<proto::Daemon>();
        if (token_.empty()) {
          auto request = daemon.authenticateWithCertificateRequest();
          return request.send().then([&l](auto response) { l.session = response.getSession(); });
        }
        auto request = daemon.authenticateRequest();
        request.setToken(token_);
        return request.send().then([&l](auto response) { l.session = response.getSession(); });
      })
      .catch_([](kj::Exception&& e) -> kj::Promise<void> {
        // Errors already prefixed pass through; the rest are authentication's.
        std::string text = e.getDescription().cStr();
        if (text.starts_with("cannot connect") || text.starts_with("TLS handshake")) return kj::mv(e);
        return during("authenticating", kj::mv(e));
      })
      .then([&l, group = std::move(group), members = std::move(members), rank, nonce]() {
        auto request = l.session.groupConnectRequest();
        request.setGroup(group);
        auto list = request.initMembers(capnp::uint(members.size()));
        for (size_t i = 0; i < members.size(); ++i) list.set(capnp::uint(i), members[i]);
        request.setRank(rank);
        request.setNonce(nonce);
        return request.send()
            .then([&l](auto response) {
              l.peer = response.getPeer();
              l.remoteNonce = response.getNonce();
            })
            .catch_([](kj::Exception&& e) -> kj::Promise<void> { return during("groupConnect", kj::mv(e)); });
      })
      .then([link = kj::mv(link)]() mutable { return kj::mv(link); });
}

// ---------------------------------------------------------------- LinkThread

struct LinkThread::Inside {
  kj::AsyncIoContext& io;
  std::unique_ptr<NodeDialer> dialer;
  std::map<PeerLink*, kj::Own<PeerLink>> links;

  // The link, unless it was closed meanwhile.
  PeerLink* find(PeerLink* link) { return links.count(link) ? link : nullptr; }
};

LinkThread::LinkThread(const GroupsConfig& config, uint64_t maxMessageBytes) {
  std::promise<void> started;
  auto ready = started.get_future();
  thread_ = std::thread([this, &config, maxMessageBytes, &started] {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    Inside inside{io, nullptr, {}};
    try {
      inside.dialer = std::make_unique<NodeDialer>(config, io.provider->getNetwork(), maxMessageBytes);
    } catch (...) {
      started.set_exception(std::current_exception());
      return;
    }
    auto stop = kj::newPromiseAndCrossThreadFulfiller<void>();
    stop_ = kj::mv(stop.fulfiller);
    executor_ = kj::getCurrentThreadExecutor().addRef();
    inside_ = &inside;
    started.set_value();
    stop.promise.wait(io.waitScope);
    inside.links.clear();
    inside.dialer.reset();
  });
  try {
    ready.get();
  } catch (...) {
    thread_.join();
    throw;
  }
}

LinkThread::~LinkThread() {
  stop_->fulfill();
  thread_.join();
}

kj::Promise<kj::Own<RemoteLink>> LinkThread::dial(const MemberAddress& to, std::string group,
                                                  std::vector<std::string> members, uint32_t rank, uint64_t nonce) {
  Inside* inside = inside_;
  return executor_
      ->executeAsync([inside, to, group = std::move(group), members = std::move(members), rank, nonce]() mutable {
        return inside->dialer->dial(to, std::move(group), std::move(members), rank, nonce)
            .then([inside](kj::Own<PeerLink> link) {
              PeerLink* raw = link.get();
              inside->links.emplace(raw, kj::mv(link));
              return raw;
            });
      })
      .then([this, inside](PeerLink* link) { return kj::heap<RemoteLink>(executor_->addRef(), inside, link); });
}

// ---------------------------------------------------------------- RemoteLink

namespace {

kj::Exception linkClosed() { return KJ_EXCEPTION(DISCONNECTED, "the link was closed"); }

}  // namespace

RemoteLink::RemoteLink(kj::Own<const kj::Executor> executor, LinkThread::Inside* inside, PeerLink* link)
    : executor_(kj::mv(executor)), inside_(inside), link_(link) {}

RemoteLink::~RemoteLink() {
  // Once the link thread ended, its links are gone already (and this throws).
  try {
    executor_->executeSync([inside = inside_, link = link_]() { inside->links.erase(link); });
  } catch (const kj::Exception&) {
  }
}

kj::Promise<void> RemoteLink::header(CollectiveHeader header) {
  return executor_->executeAsync([inside = inside_, link = link_, h = std::move(header)]() -> kj::Promise<void> {
    PeerLink* l = inside->find(link);
    if (l == nullptr) return linkClosed();
    auto request = l->peer.headerRequest();
    auto wire = request.initHeader();
    wire.setSeq(h.seq);
    wire.setKind(h.kind);
    wire.setOp(h.op);
    wire.setRoot(h.root);
    auto inputs = wire.initInputs(capnp::uint(h.inputs.size()));
    for (size_t i = 0; i < h.inputs.size(); ++i) fillDesc(inputs[capnp::uint(i)], h.inputs[i]);
    // The answer also proves that every earlier message on the link was
    // written: the buffers earlier collectives sent from may go.
    const uint64_t mark = l->sentMark();
    return request.send().ignoreResult().then([inside, link, mark]() {
      if (PeerLink* l = inside->find(link)) l->releaseSentBefore(mark);
    });
  });
}

kj::Promise<void> RemoteLink::abort(uint64_t seq, std::string reason) {
  return executor_->executeAsync([inside = inside_, link = link_, seq, reason = std::move(reason)]() -> kj::Promise<void> {
    PeerLink* l = inside->find(link);
    if (l == nullptr) return linkClosed();
    auto request = l->peer.abortRequest();
    request.setSeq(seq);
    request.setReason(reason);
    return request.send().ignoreResult();
  });
}

kj::Promise<void> RemoteLink::formed() {
  return executor_->executeAsync([inside = inside_, link = link_]() -> kj::Promise<void> {
    PeerLink* l = inside->find(link);
    if (l == nullptr) return linkClosed();
    return l->peer.formedRequest().send().ignoreResult();
  });
}

kj::Promise<void> RemoteLink::data(uint64_t seq, uint32_t step, uint32_t chunk, kj::ArrayPtr<const kj::byte> bytes,
                                   std::shared_ptr<compute::Buffer> from) {
  // Bytes in a host buffer that outlives the message go without a copy
  // (Cap'n Proto needs them word-aligned). Others may be gone once this
  // returns: they are copied here, and into the message on the link thread
  // (which frees it once written).
  const bool external = from != nullptr && reinterpret_cast<uintptr_t>(bytes.begin()) % sizeof(capnp::word) == 0;
  kj::Array<kj::byte> copy = external ? nullptr : kj::heapArray(bytes);
  if (!external) from = nullptr;
  return executor_->executeAsync([inside = inside_, link = link_, seq, step, chunk, bytes, from = std::move(from),
                                  copy = kj::mv(copy)]() mutable -> kj::Promise<void> {
    PeerLink* l = inside->find(link);
    if (l == nullptr) return linkClosed();
    auto request = l->peer.dataRequest(capnp::MessageSize{from ? 16 : bytes.size() / 8 + 16, 0});
    request.setSeq(seq);
    request.setStep(step);
    request.setChunk(chunk);
    if (from) {
      request.adoptData(capnp::Orphanage::getForMessageContaining(
                            static_cast<proto::GroupPeer::DataParams::Builder>(request))
                            .referenceExternalData(bytes));
      l->holdSent(from);
    } else {
      request.setData(copy);
    }
    const uint64_t size = bytes.size();
    auto sent = l->dataTail
                    .then([inside, link]() -> kj::Promise<void> {
                      PeerLink* l = inside->find(link);
                      if (l == nullptr) return linkClosed();
                      return l->room();
                    })
                    .then([inside, link, size, request = kj::mv(request)]() mutable {
                      PeerLink* l = inside->find(link);
                      if (l == nullptr) kj::throwFatalException(linkClosed());
                      l->dataInFlight += size;
                      // The answer settles on this thread while the link is
                      // open: dataAnswers goes with it.
                      l->dataAnswers.add(request.send().ignoreResult().then(
                          [l, size]() { l->answered(size); },
                          [l, size](kj::Exception&& e) {
                            l->dataFailed(kj::mv(e));
                            l->answered(size);
                          }));
                    })
                    .fork();
    l->dataTail = sent.addBranch();
    return sent.addBranch();
  });
}

PeerLink::~PeerLink() {
  if (roomWaiter) roomWaiter->reject(linkClosed());
}

kj::Promise<void> PeerLink::room() {
  KJ_IF_MAYBE (e, dataFailure) return kj::cp(*e);
  if (dataInFlight < protocol::kStreamWindowBytes) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  roomWaiter = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

void PeerLink::answered(uint64_t bytes) {
  dataInFlight -= bytes;
  if (roomWaiter && dataInFlight < protocol::kStreamWindowBytes) {
    auto waiter = kj::mv(roomWaiter);
    waiter->fulfill();
  }
}

void PeerLink::dataFailed(kj::Exception&& error) {
  if (dataFailure == nullptr) dataFailure = kj::mv(error);
  if (roomWaiter) {
    auto waiter = kj::mv(roomWaiter);
    KJ_IF_MAYBE (e, dataFailure) waiter->reject(kj::cp(*e));
  }
}

kj::Promise<void> RemoteLink::onDisconnect() {
  return executor_->executeAsync([inside = inside_, link = link_]() -> kj::Promise<void> {
    PeerLink* l = inside->find(link);
    if (l == nullptr) return kj::READY_NOW;
    return l->network->onDisconnect();
  });
}

}  // namespace tensord::server
