// protocol::TlsStream against a plain OpenSSL peer on the other end of a
// socket pair: bulk bytes both ways, a half-close, and a peer that floods key
// updates without reading the answers.

#include "protocol/tls_stream.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/self_signed.h"

namespace tensord::protocol {
namespace {

using testing::SelfSignedCertificate;

const SelfSignedCertificate& certificate() {
  static SelfSignedCertificate instance;
  return instance;
}

// The daemon's side: a kj::TlsContext with the certificate.
struct ServerContext {
  const std::string& certPem = certificate().certPem();
  const std::string& keyPem = certificate().keyPem();
  kj::TlsKeypair keypair{kj::TlsPrivateKey(kj::StringPtr(keyPem.c_str(), keyPem.size())),
                         kj::TlsCertificate(kj::StringPtr(certPem.c_str(), certPem.size()))};
  kj::Own<kj::TlsContext> context = [this] {
    kj::TlsContext::Options options;
    options.minVersion = kj::TlsVersion::TLS_1_2;
    options.defaultKeypair = keypair;
    return kj::heap<kj::TlsContext>(kj::mv(options));
  }();
};

// A blocking OpenSSL client on `fd` that trusts the certificate.
struct PlainClient {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = nullptr;
  explicit PlainClient(int fd) {
    SSL_CTX_load_verify_locations(ctx, certificate().certFile().c_str(), nullptr);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    SSL_set1_host(ssl, "localhost");
  }
  ~PlainClient() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
};

class TlsStreamTest : public ::testing::Test {
 protected:
  ~TlsStreamTest() noexcept override {}  // KJ's members may throw from theirs; gtest's may not
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    serverFd_ = fds[0];
    clientFd_ = fds[1];
  }
  void TearDown() override {
    if (clientFd_ >= 0) close(clientFd_);
  }
  // The server end as a TLS stream, once the client's handshake on another
  // thread completes it.
  kj::Own<TlsStream> accept() {
    return TlsStream::accept(*server_.context,
                             io_.lowLevelProvider->wrapSocketFd(serverFd_, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP))
        .wait(io_.waitScope);
  }

  // The client's side on a thread of its own: the handshake, then `body`,
  // which returns what went wrong ("" for nothing) into clientError_.
  std::thread startClient(std::function<std::string(SSL*)> body) {
    return std::thread([this, body = std::move(body)] {
      PlainClient peer(clientFd_);
      clientError_ = SSL_connect(peer.ssl) == 1 ? body(peer.ssl) : "handshake failed";
    });
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  ServerContext server_;
  int serverFd_ = -1, clientFd_ = -1;
  std::string clientError_;
};

TEST_F(TlsStreamTest, BulkBytesArriveWholeBothWaysAndAHalfCloseReadsAsTheEnd) {
  // 3 MiB + a tail: many records, slices of 256 KiB and a short last one.
  std::vector<unsigned char> sent((3u << 20) + 4567);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  std::vector<unsigned char> echoed;
  std::thread client = startClient([](SSL* ssl) -> std::string {
    // Echo everything back until the server's close_notify.
    std::vector<unsigned char> buffer(65536);
    for (;;) {
      const int n = SSL_read(ssl, buffer.data(), int(buffer.size()));
      if (n <= 0) break;
      for (int done = 0; done < n;) {
        const int w = SSL_write(ssl, buffer.data() + done, n - done);
        if (w <= 0) return "echo write failed";
        done += w;
      }
    }
    SSL_shutdown(ssl);
    return "";
  });
  auto stream = accept();
  ASSERT_EQ(stream->peerCertificate(), nullptr);  // the client sent none
  // Writing and reading at once: the echo comes back while the rest goes out.
  echoed.resize(sent.size() + 1);
  size_t got = 0;
  std::function<kj::Promise<void>()> readMore = [&]() -> kj::Promise<void> {
    return stream->tryRead(echoed.data() + got, 1, echoed.size() - got).then([&](size_t n) -> kj::Promise<void> {
      if (n == 0) return kj::READY_NOW;
      got += n;
      return readMore();
    });
  };
  auto writing =
      stream->write(sent.data(), sent.size()).then([&] { stream->shutdownWrite(); }).eagerlyEvaluate(nullptr);
  readMore().wait(io_.waitScope);
  writing.wait(io_.waitScope);
  client.join();
  EXPECT_EQ(clientError_, "");
  ASSERT_EQ(got, sent.size());
  echoed.resize(got);
  EXPECT_TRUE(echoed == sent);
}

TEST_F(TlsStreamTest, APeerThatFloodsKeyUpdatesWithoutReadingIsCutOff) {
  std::thread client = startClient([this](SSL* ssl) -> std::string {
    // Each asks for an answer; none is read. Ends when the server hangs up.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      if (SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) != 1 || SSL_do_handshake(ssl) != 1) return "";
    }
    shutdown(clientFd_, SHUT_RDWR);  // the server's read ends rather than waits
    return "the server still took key updates after 20 s";
  });
  auto stream = accept();
  std::string failure;
  try {
    unsigned char byte;
    while (stream->tryRead(&byte, 1, 1).wait(io_.waitScope) > 0) {
    }
    failure = "the stream ended without an error";
  } catch (const kj::Exception& e) {
    failure = e.getDescription().cStr();
  }
  EXPECT_NE(failure.find("keeps sending key updates without reading the answers"), std::string::npos) << failure;
  stream = nullptr;  // closes the socket: the client's next write fails
  client.join();
  EXPECT_EQ(clientError_, "");
}

}  // namespace
}  // namespace tensord::protocol
