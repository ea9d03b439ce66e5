// TLS on the RPC listener and in the client: handshake and an op call over
// tls://, a wrong CA, an expired client certificate, certificate-to-principal
// mapping (CN and email SAN), client_auth required, the plain-TCP policy on a
// non-loopback address, auth_timeout_ms, tensorctl over tls://, and SIGHUP
// re-reading the certificate, key and client CA files.
//
// Certificates are made at run time with the openssl command-line tool.

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/integration/daemon_test.h"
#include "tests/integration/process.h"
#include "tests/integration/raw_socket.h"

namespace tensord::testing {
namespace {
namespace fs = std::filesystem;

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exitCode) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

// A CA, a server certificate for 127.0.0.1/localhost, client certificates.
class Certificates {
 public:
  Certificates() {
    std::string tmpl = (fs::temp_directory_path() / "tensord-tls-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    makeCa("ca", "tensord test CA");
    makeCa("other-ca", "unrelated CA");
    makeCert("server", "ca", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost", "30");
    makeCert("elsewhere", "ca", "/CN=elsewhere.example", "subjectAltName=DNS:elsewhere.example", "30");
    makeCert("alice", "ca", "/CN=alice", "", "30");
    makeCert("carol", "ca", "/CN=carol-laptop", "subjectAltName=email:carol@example.com", "30");
    makeCert("bob", "ca", "/CN=bob", "", "30");
    makeCert("expired", "ca", "/CN=alice", "", "-1");  // notAfter one day before now
    makeCert("stranger", "other-ca", "/CN=alice", "", "30");
    makeCert("server-b", "other-ca", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost", "30");
    makeCert("server-ip-cn", "ca", "/CN=127.0.0.1", "", "30");  // the address as its CN, no SANs
  }
  ~Certificates() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string pem(const std::string& name) const { return (dir_ / (name + ".pem")).string(); }
  std::string key(const std::string& name) const { return (dir_ / (name + ".key")).string(); }

 private:
  void run(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "/usr/bin/openssl");
    auto r = runCommand(argv, {}, std::chrono::seconds(60));
    if (r.exitCode != 0) throw std::runtime_error("openssl failed: " + describe(r));
  }
  void makeCa(const std::string& name, const std::string& cn) {
    run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key(name), "-out",
         pem(name), "-days", "30", "-subj", "/CN=" + cn});
  }
  void makeCert(const std::string& name, const std::string& ca, const std::string& subject, const std::string& ext,
                const std::string& days) {
    const std::string csr = (dir_ / (name + ".csr")).string();
    run({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key(name), "-out", csr,
         "-subj", subject});
    std::vector<std::string> argv = {
        "x509", "-req",    "-in",   csr, "-CA", pem(ca), "-CAkey", key(ca), "-CAcreateserial",
        "-out", pem(name), "-days", days};
    if (!ext.empty()) {
      const std::string extFile = (dir_ / (name + ".ext")).string();
      std::ofstream(extFile) << ext << "\n";
      argv.insert(argv.end(), {"-extfile", extFile});
    }
    run(argv);
  }

  fs::path dir_;
};

const Certificates& certs() {
  static Certificates instance;
  return instance;
}

nlohmann::json tlsConfig(const std::string& clientAuth) {
  return {{"cert_file", certs().pem("server")},
          {"key_file", certs().key("server")},
          {"client_ca_file", certs().pem("ca")},
          {"client_auth", clientAuth}};
}

DaemonOptions tlsDaemon(const std::string& clientAuth) {
  DaemonOptions options;
  options.extra = {
      {"tls", tlsConfig(clientAuth)},
      {"auth_timeout_ms", 1500},
      {"auth",
       {{"tokens", {{{"principal", options.principal}, {"token_sha256", sha256Hex(options.token)}}}},
        {"certificates",
         {{{"subject", "alice"}, {"principal", "alice-cert"}},
          {{"subject", "carol@example.com"}, {"principal", "carol"}}}}}},
  };
  return options;
}

class IntegrationTls : public DaemonTest {
 protected:
  DaemonOptions daemonOptions() override { return tlsDaemon("optional"); }

  std::string tlsAddress() { return "tls://" + daemon().address(); }
  ConnectOptions withToken() {
    return {.address = tlsAddress(), .token = daemon().token(), .caFile = certs().pem("ca")};
  }
  ConnectOptions withCertificate(const std::string& name) {
    return {.address = tlsAddress(),
            .token = "",
            .caFile = certs().pem("ca"),
            .certFile = certs().pem(name),
            .keyFile = certs().key(name)};
  }
  void expectStillServes() {
    Client client(withToken());
    auto x = client.upload(Shape{3}, std::vector<float>{-1.0f, 0.0f, 2.0f});
    EXPECT_EQ(relu(x).toHost(), (std::vector<float>{0.0f, 0.0f, 2.0f}));
  }
};

TEST_F(IntegrationTls, HandshakeAndOpCall) {
  Client client(withToken());
  EXPECT_EQ(client.whoami(), daemon().principal());
  auto a = client.upload(Shape{2, 2}, std::vector<float>{1, 2, 3, 4});
  auto b = client.upload(Shape{2, 2}, std::vector<float>{1, 0, 0, 1});
  EXPECT_EQ(matmul(a, b).toHost(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_GE(client.info().protocolVersion, 3u);
  EXPECT_NE(daemon().log().find("(TLS, client certificates optional)"), std::string::npos) << daemon().log();
}

// Bulk data goes through TLS in large reads and writes: many records per
// write and a tail that fills no record, on two connections at once.
TEST_F(IntegrationTls, LargeTransfersArriveWhole) {
  std::vector<std::byte> bytes((24u << 20) + 4 * 12345);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(uint8_t(i * 2654435761u >> 11));
  auto roundTrip = [&](std::string& failure) {
    try {
      Client client(withToken());
      Tensor t = client.upload(DType::U8, Shape{int64_t(bytes.size())}, bytes);
      if (t.bytes() != bytes) failure = "bytes() differs from what went up";
      std::vector<std::byte> back(bytes.size());
      t.bytesInto(back);
      if (back != bytes) failure = "bytesInto() differs from what went up";
    } catch (const std::exception& e) {
      failure = e.what();
    }
  };
  std::string first, second;
  std::thread other([&] { roundTrip(second); });
  roundTrip(first);
  other.join();
  EXPECT_EQ(first, "");
  EXPECT_EQ(second, "");
}

// Dialled by IP address, a certificate matches through its IP address SANs
// or, as older certificates do, a CN that spells the address.
TEST(IntegrationTlsHost, AnAddressInTheCommonNameMatchesAnIpHost) {
  DaemonOptions options;
  options.extra = {{"tls", {{"cert_file", certs().pem("server-ip-cn")}, {"key_file", certs().key("server-ip-cn")}}}};
  DaemonProcess daemon(options);
  Client client({.address = "tls://" + daemon.address(), .token = options.token, .caFile = certs().pem("ca")});
  EXPECT_EQ(client.whoami(), options.principal);
}

TEST_F(IntegrationTls, WrongCaIsRefusedWithAClearError) {
  auto options = withToken();
  options.caFile = certs().pem("other-ca");
  try {
    Client client(options);
    FAIL() << "connected although the daemon's certificate is from another CA";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kDisconnected);
    const std::string message = e.what();
    EXPECT_NE(message.find("TLS handshake with tensord at " + tlsAddress() + " failed"), std::string::npos) << message;
    EXPECT_NE(message.find("--ca"), std::string::npos) << message;
  }
  expectStillServes();
}

TEST_F(IntegrationTls, HostnameIsChecked) {
  // A daemon whose certificate (from the trusted CA) names elsewhere.example only.
  DaemonOptions options = tlsDaemon("optional");
  options.extra["tls"]["cert_file"] = certs().pem("elsewhere");
  options.extra["tls"]["key_file"] = certs().key("elsewhere");
  DaemonProcess elsewhere(options);
  try {
    Client client({.address = "tls://" + elsewhere.address(), .token = elsewhere.token(), .caFile = certs().pem("ca")});
    FAIL() << "connected although the certificate is not valid for 127.0.0.1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid for '127.0.0.1'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(elsewhere.stop(), std::optional<int>(0));
}

TEST_F(IntegrationTls, PlainClientOnTlsListenerFails) {
  EXPECT_THROW(Client({.address = daemon().address(), .token = daemon().token()}), Error);
  expectStillServes();
}

TEST_F(IntegrationTls, ExpiredClientCertificateIsRefused) {
  try {
    Client client(withCertificate("expired"));
    client.whoami();
    FAIL() << "an expired client certificate was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("certificate"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(waitUntil([&] { return daemon().log().find("TLS handshake with") != std::string::npos; },
                        std::chrono::seconds(10)))
      << daemon().log();
  expectStillServes();
}

TEST_F(IntegrationTls, CertificateFromAnotherCaIsRefused) {
  try {
    Client client(withCertificate("stranger"));
    client.whoami();
    FAIL() << "a client certificate from an unrelated CA was accepted";
  } catch (const Error&) {
  }
  expectStillServes();
}

TEST_F(IntegrationTls, CertificateMapsToPrincipal) {
  Client alice(withCertificate("alice"));
  EXPECT_EQ(alice.whoami(), "alice-cert");
  auto x = alice.upload(Shape{2}, std::vector<float>{-3, 3});
  EXPECT_EQ(relu(x).toHost(), (std::vector<float>{0, 3}));

  Client carol(withCertificate("carol"));  // mapped by its email SAN
  EXPECT_EQ(carol.whoami(), "carol");

  // A token still wins when given together with a certificate.
  auto both = withCertificate("alice");
  both.token = daemon().token();
  EXPECT_EQ(Client(both).whoami(), daemon().principal());
}

TEST_F(IntegrationTls, UnmappedCertificateIsRefused) {
  try {
    Client bob(withCertificate("bob"));
    FAIL() << "an unmapped certificate authenticated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not mapped to a principal"), std::string::npos) << e.what();
  }
}

TEST_F(IntegrationTls, TlsClientOnPlainListenerFails) {
  DaemonProcess plain;
  try {
    Client client({.address = "tls://" + plain.address(), .token = ""});
    FAIL() << "TLS handshake with a plain listener succeeded";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("TLS handshake with tensord at tls://" + plain.address() + " failed"), std::string::npos)
        << message;
    EXPECT_EQ(message.find("certificate was refused"), std::string::npos) << message;  // no certificate came
  }
  EXPECT_EQ(plain.stop(), std::optional<int>(0));
}

TEST_F(IntegrationTls, RequiredClientAuthRefusesAClientWithoutCertificate) {
  DaemonProcess required(tlsDaemon("required"));
  ConnectOptions options{
      .address = "tls://" + required.address(), .token = required.token(), .caFile = certs().pem("ca")};
  EXPECT_THROW(Client{options}, Error);
  options.certFile = certs().pem("alice");
  options.keyFile = certs().key("alice");
  options.token = "";
  EXPECT_EQ(Client(options).whoami(), "alice-cert");
  auto status = required.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << required.log();
}

TEST_F(IntegrationTls, UnauthenticatedConnectionIsClosedAfterAuthTimeout) {
  Client working(withToken());  // authenticated: must survive the timeout
  const auto start = std::chrono::steady_clock::now();
  int idle = rawConnect(daemon().address());  // never even starts the handshake
  ASSERT_GE(idle, 0);
  EXPECT_TRUE(closedWithin(idle, std::chrono::seconds(20)));
  close(idle);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1400));
  auto x = working.upload(Shape{2}, std::vector<float>{-1, 1});
  EXPECT_EQ(relu(x).toHost(), (std::vector<float>{0, 1}));
  EXPECT_EQ(working.whoami(), daemon().principal());
}

TEST(IntegrationTlsAuthTimeout, PlainTcpConnectionThatNeverAuthenticatesIsClosed) {
  DaemonOptions options;
  options.extra = {{"auth_timeout_ms", 1000}};
  DaemonProcess daemon(options);
  Client working({.address = daemon.address(), .token = daemon.token()});
  // Connects and sends nothing: no session.
  int idle = rawConnect(daemon.address());
  ASSERT_GE(idle, 0);
  EXPECT_TRUE(closedWithin(idle, std::chrono::seconds(20)));
  close(idle);
  EXPECT_TRUE(waitUntil([&] { return daemon.log().find("not authenticated within") != std::string::npos; },
                        std::chrono::seconds(5)))
      << daemon.log();
  auto x = working.upload(Shape{1}, std::vector<float>{5});
  EXPECT_EQ(relu(x).toHost(), (std::vector<float>{5}));
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

// `tensord --check-config` on a config written here.
CommandResult checkConfig(const nlohmann::json& config) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-tlscfg-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  const fs::path path = fs::path(tmpl) / "tensord.json";
  std::ofstream(path) << config.dump(2) << "\n";
  auto r = runCommand({(buildDir() / "server" / "tensord").string(), "--config", path.string(), "--check-config"});
  fs::remove_all(tmpl);
  return r;
}

nlohmann::json baseConfig() {
  return {{"auth", {{"tokens", {{{"principal", "p"}, {"token_sha256", sha256Hex("t")}}}}}}};
}

TEST(IntegrationTlsConfig, PlainTcpOnNonLoopbackNeedsTheFlag) {
  auto config = baseConfig();
  config["listen"] = "0.0.0.0:0";
  auto refused = checkConfig(config);
  EXPECT_EQ(refused.exitCode, 1) << describe(refused);
  EXPECT_NE(refused.err.find("listen: plain TCP on the non-loopback address 0.0.0.0:0 is refused"), std::string::npos)
      << describe(refused);
  EXPECT_NE(refused.err.find("allow_remote_plaintext"), std::string::npos) << describe(refused);

  config["tls"] = tlsConfig("none");
  auto withTls = checkConfig(config);
  EXPECT_EQ(withTls.exitCode, 0) << describe(withTls);

  config.erase("tls");
  config["tls"] = {{"cert_file", "server.pem"}};
  auto missingKey = checkConfig(config);
  EXPECT_EQ(missingKey.exitCode, 1) << describe(missingKey);
  EXPECT_NE(missingKey.err.find("tls.key_file: is required"), std::string::npos) << describe(missingKey);
}

TEST(IntegrationTlsConfig, PlainTcpOnNonLoopbackWithTheFlagWarns) {
  DaemonOptions options;
  options.listen = "0.0.0.0:0";
  options.extra = {{"allow_remote_plaintext", true}};
  DaemonProcess daemon(options);
  EXPECT_NE(daemon.log().find("plain TCP on the non-loopback address 0.0.0.0:0 (allow_remote_plaintext)"),
            std::string::npos)
      << daemon.log();
  EXPECT_NE(daemon.log().find("[warning]"), std::string::npos) << daemon.log();
  const std::string port = daemon.address().substr(daemon.address().rfind(':') + 1);
  Client client({.address = "127.0.0.1:" + port, .token = daemon.token()});
  EXPECT_EQ(client.whoami(), daemon.principal());
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

TEST_F(IntegrationTls, TensorctlOverTls) {
  const std::string ctl = (buildDir() / "client" / "tensorctl").string();
  const EnvChanges clean = {{"TENSORD_ADDR", std::nullopt},
                            {"TENSORD_TOKEN", std::nullopt},
                            {"TENSORD_CA", std::nullopt},
                            {"TENSORD_CERT", std::nullopt},
                            {"TENSORD_KEY", std::nullopt}};
  auto r = runCommand(
      {ctl, "--connect", tlsAddress(), "--ca", certs().pem("ca"), "--token", daemon().token(), "whoami"}, clean);
  EXPECT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_NE(r.out.find(daemon().principal()), std::string::npos) << describe(r);

  r = runCommand({ctl, "--connect", tlsAddress(), "--ca", certs().pem("ca"), "--cert", certs().pem("alice"), "--key",
                  certs().key("alice"), "whoami"},
                 clean);
  EXPECT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_NE(r.out.find("alice-cert"), std::string::npos) << describe(r);

  EnvChanges env = clean;
  env["TENSORD_ADDR"] = tlsAddress();
  env["TENSORD_CA"] = certs().pem("ca");
  env["TENSORD_CERT"] = certs().pem("carol");
  env["TENSORD_KEY"] = certs().key("carol");
  r = runCommand({ctl, "whoami"}, env);
  EXPECT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_NE(r.out.find("carol"), std::string::npos) << describe(r);

  r = runCommand({ctl, "--connect", tlsAddress(), "--ca", certs().pem("other-ca"), "--token", daemon().token(), "info"},
                 clean);
  EXPECT_EQ(r.exitCode, 3) << describe(r);
  EXPECT_NE(r.err.find("TLS handshake"), std::string::npos) << describe(r);
}

// How often `part` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// SIGHUP re-reads tls.cert_file, tls.key_file and tls.client_ca_file: new
// connections get the new certificate and client CAs, an open connection
// keeps its own; a broken or missing file is refused with a log line naming
// the key, and the last good files stay in use.
TEST(IntegrationTlsReload, SighupRereadsCertificateKeyAndClientCa) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-tlsreload-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  // Replaces dir/name with a copy of `from` in one rename, as deployment tools do.
  auto install = [&](const std::string& from, const std::string& name) {
    fs::copy_file(from, dir / (name + ".tmp"), fs::copy_options::overwrite_existing);
    fs::rename(dir / (name + ".tmp"), dir / name);
  };
  install(certs().pem("server"), "server.pem");
  install(certs().key("server"), "server.key");
  install(certs().pem("ca"), "client-ca.pem");
  DaemonOptions options = tlsDaemon("optional");
  options.extra["tls"] = {{"cert_file", (dir / "server.pem").string()},
                          {"key_file", (dir / "server.key").string()},
                          {"client_ca_file", (dir / "client-ca.pem").string()},
                          {"client_auth", "optional"}};
  DaemonProcess daemon(options);
  const std::string address = "tls://" + daemon.address();
  auto trusting = [&](const std::string& ca) {
    return ConnectOptions{.address = address, .token = daemon.token(), .caFile = certs().pem(ca)};
  };
  auto withCertificate = [&](const std::string& name, const std::string& ca) {
    return ConnectOptions{.address = address,
                          .token = "",
                          .caFile = certs().pem(ca),
                          .certFile = certs().pem(name),
                          .keyFile = certs().key(name)};
  };
  auto sighupAndWaitFor = [&](const std::string& line) {
    const size_t seen = occurrences(daemon.log(), line);
    daemon.signal(SIGHUP);
    return waitUntil([&] { return occurrences(daemon.log(), line) > seen; }, std::chrono::seconds(20));
  };

  Client before(trusting("ca"));
  EXPECT_EQ(before.whoami(), daemon.principal());
  EXPECT_EQ(Client(withCertificate("alice", "ca")).whoami(), "alice-cert");

  // Rotate to a certificate from another CA, which now also signs client certificates.
  install(certs().pem("server-b"), "server.pem");
  install(certs().key("server-b"), "server.key");
  install(certs().pem("other-ca"), "client-ca.pem");
  ASSERT_TRUE(sighupAndWaitFor("reloaded the TLS certificate " + (dir / "server.pem").string())) << daemon.log();
  EXPECT_EQ(Client(trusting("other-ca")).whoami(), daemon.principal());
  EXPECT_THROW(Client{trusting("ca")}, Error) << "a new connection was offered the old certificate";
  EXPECT_EQ(Client(withCertificate("stranger", "other-ca")).whoami(), "alice-cert");  // CN alice, from other-ca
  EXPECT_THROW(
      {
        Client alice(withCertificate("alice", "other-ca"));
        alice.whoami();
      },
      Error)
      << "a client certificate from the replaced client CA was accepted";
  // The connection opened before the reload keeps working.
  auto x = before.upload(Shape{2}, std::vector<float>{-1, 2});
  EXPECT_EQ(relu(x).toHost(), (std::vector<float>{0, 2}));

  // A certificate file that is not PEM: refused, the last good files stay.
  std::ofstream(dir / "server.pem.tmp") << "not a certificate\n";
  fs::rename(dir / "server.pem.tmp", dir / "server.pem");
  ASSERT_TRUE(sighupAndWaitFor("TLS reload failed")) << daemon.log();
  EXPECT_NE(daemon.log().find("TLS reload failed, new connections keep the previous certificate: tls.cert_file: " +
                              (dir / "server.pem").string()),
            std::string::npos)
      << daemon.log();
  EXPECT_EQ(Client(trusting("other-ca")).whoami(), daemon.principal());

  // A missing key file: the same.
  install(certs().pem("server-b"), "server.pem");
  fs::remove(dir / "server.key");
  ASSERT_TRUE(sighupAndWaitFor("TLS reload failed")) << daemon.log();
  EXPECT_NE(daemon.log().find("tls.key_file: cannot open " + (dir / "server.key").string()), std::string::npos)
      << daemon.log();
  EXPECT_EQ(Client(trusting("other-ca")).whoami(), daemon.principal());
  EXPECT_EQ(before.whoami(), daemon.principal());

  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tensord::testing
