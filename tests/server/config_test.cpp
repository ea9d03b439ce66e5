#include "server/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "acl/token_authenticator.h"

namespace tensord::server {
namespace {

const std::string kHash = acl::sha256Hex("secret");
const std::string kAuth = R"("auth": {"tokens": [{"principal": "p", "token_sha256": ")" + kHash + R"("}]})";

// A config with `fields` (a JSON member list, may be empty) plus a valid auth block.
std::string withAuth(const std::string& fields) { return "{" + fields + (fields.empty() ? "" : ", ") + kAuth + "}"; }

// The ConfigError message `text` produces, or "" if it parses.
std::string errorOf(const std::string& text) {
  try {
    parseConfig(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(ConfigTest, DefaultsFillEveryOptionalKey) {
  Config c = parseConfig(withAuth(""));
  EXPECT_EQ(c.listen.host, "127.0.0.1");
  EXPECT_EQ(c.listen.port, 7450);
  EXPECT_FALSE(c.allowRemotePlaintext);
  EXPECT_EQ(c.device, "");
  EXPECT_TRUE(c.stateDir.empty());
  EXPECT_TRUE(c.cacheDir.empty());
  EXPECT_EQ(c.logLevel, "info");
  EXPECT_EQ(c.limits.memoryLimitBytes, 0u);
  EXPECT_EQ(c.limits.maxTensorBytes, 4294967296u);
  EXPECT_EQ(c.limits.maxMessageBytes, 67108864u);
  EXPECT_EQ(c.limits.maxInflightCallsPerConnection, 1024u);
  EXPECT_EQ(c.limits.maxConnections, 1024u);
  EXPECT_EQ(c.staging.slotBytes, 8388608u);
  EXPECT_EQ(c.staging.slots, 8u);
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].principal, "p");
  EXPECT_EQ(c.tokens[0].tokenSha256Hex, kHash);
}

TEST(ConfigTest, EveryKeyIsRead) {
  Config c = parseConfig(withAuth(R"(
    "listen": "[::1]:0", "allow_remote_plaintext": true, "device": "NVIDIA",
    "state_dir": "/s", "cache_dir": "/c", "log_level": "debug",
    "limits": {"memory_limit_bytes": 1000, "max_tensor_bytes": 12, "max_message_bytes": 4194304,
               "max_inflight_calls_per_connection": 3, "max_connections": 5},
    "staging": {"slot_bytes": 65536, "slots": 2}, "device_sharing": "fifo", "matmul_f32": "fma")"));
  EXPECT_EQ(c.listen.host, "::1");
  EXPECT_EQ(c.listen.port, 0);
  EXPECT_TRUE(c.allowRemotePlaintext);
  EXPECT_EQ(c.device, "NVIDIA");
  EXPECT_EQ(c.stateDir, "/s");
  EXPECT_EQ(c.cacheDir, "/c");
  EXPECT_EQ(c.logLevel, "debug");
  EXPECT_EQ(c.limits.memoryLimitBytes, 1000u);
  EXPECT_EQ(c.limits.maxTensorBytes, 12u);
  EXPECT_EQ(c.limits.maxMessageBytes, 4194304u);
  EXPECT_EQ(c.limits.maxInflightCallsPerConnection, 3u);
  EXPECT_EQ(c.limits.maxConnections, 5u);
  EXPECT_EQ(c.staging.slotBytes, 65536u);
  EXPECT_EQ(c.staging.slots, 2u);
  EXPECT_FALSE(c.fairSharing);
  EXPECT_FALSE(c.f32ProductsOnTensorCores);
}

TEST(ConfigTest, F32ProductsRunOnTensorCoresByDefault) {
  EXPECT_TRUE(parseConfig(withAuth(R"("log_level": "info")")).f32ProductsOnTensorCores);
  EXPECT_TRUE(parseConfig(withAuth(R"("matmul_f32": "tensor_cores")")).f32ProductsOnTensorCores);
}

TEST(ConfigTest, DeviceIndexMayBeANumber) { EXPECT_EQ(parseConfig(withAuth(R"("device": 1)")).device, "1"); }

TEST(ConfigTest, ShippedDefaultParsesAndUsesTheDocumentedToken) {
  Config c = loadConfigFile(std::filesystem::path(TENSORD_SOURCE_DIR) / "config" / "tensord.json");
  EXPECT_EQ(c.listen.str(), "127.0.0.1:7450");
  EXPECT_TRUE(c.listen.isLoopback());
  acl::TokenAuthenticator auth(c.tokens);
  auto principal = auth.authenticate("tensord-local");
  ASSERT_TRUE(principal.has_value());
  EXPECT_EQ(principal->name, "local");
}

TEST(ConfigTest, ExampleConfigParses) {
  Config c = loadConfigFile(std::filesystem::path(TENSORD_SOURCE_DIR) / "config" / "tensord.example.json");
  EXPECT_GE(c.tokens.size(), 2u);
}

TEST(ConfigTest, KernelsMaxDispatchMs) {
  EXPECT_EQ(parseConfig(withAuth("")).kernelMaxDispatchMs, 10000u);
  EXPECT_EQ(parseConfig(withAuth(R"("kernels": {"max_dispatch_ms": 250})")).kernelMaxDispatchMs, 250u);
  EXPECT_NE(errorOf(withAuth(R"("kernels": {"max_dispatch_ms": 0})")).find("kernels.max_dispatch_ms"),
            std::string::npos);
  EXPECT_NE(errorOf(withAuth(R"("kernels": {"timeout": 1})")).find("kernels.timeout: unknown key"), std::string::npos);
}

TEST(ConfigTest, GroupsAreReadAndChecked) {
  Config c = parseConfig(withAuth(R"("groups": {"timeout_ms": 500, "chunk_bytes": 65536,
      "node_credentials": {"token": "t", "ca_file": "ca.pem"},
      "static": [{"name": "g", "members": ["127.0.0.1:7001", "tls://node2:7002"], "rank": 1}]})"));
  EXPECT_EQ(c.groups.timeoutMs, 500u);
  EXPECT_EQ(c.groups.chunkBytes, 65536u);
  ASSERT_TRUE(c.groups.credentials.has_value());
  EXPECT_EQ(c.groups.credentials->token, "t");
  ASSERT_EQ(c.groups.staticGroups.size(), 1u);
  EXPECT_EQ(c.groups.staticGroups[0].members[1], "tls://node2:7002");
  EXPECT_EQ(c.groups.staticGroups[0].rank, 1u);
  resolveDirectories(c, "/etc/tensord", [](const char*) { return std::optional<std::string>("/x"); });
  EXPECT_EQ(c.groups.credentials->caFile, "/etc/tensord/ca.pem");
  EXPECT_EQ(parseConfig(withAuth("")).groups.timeoutMs, 30000u);

  EXPECT_EQ(errorOf(withAuth(R"("groups": {"static": [{"name": "g", "members": ["a:1"], "rank": 1}],
      "node_credentials": {"token": "t"}})")),
            "groups.static[0].rank: expected an integer from 0 to 0, got 1");
  EXPECT_EQ(errorOf(withAuth(R"("groups": {"static": [{"name": "g", "members": ["a:1"], "rank": 0}]})")),
            "groups.node_credentials: is required with groups.static (how this daemon authenticates to its peers)");
  EXPECT_EQ(errorOf(withAuth(R"("groups": {"node_credentials": {"cert_file": "c.pem"}})")),
            "groups.node_credentials: cert_file and key_file go together (a client certificate and its key)");
  EXPECT_EQ(errorOf(withAuth(R"("groups": {"static": [{"name": "g h", "members": ["a:1"], "rank": 0}],
      "node_credentials": {"token": "t"}})")),
            "groups.static[0].name: group name \"g h\" has the character ' '; expected letters, digits and _ - . /");
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("groups": {"static": [{"name": "g", "members": ["nohost"], "rank": 0}],
      "node_credentials": {"token": "t"}})")),
                         "groups.static[0].members[0]: expected HOST:PORT"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("groups": {"chunk_size": 1})")), "groups.chunk_size: unknown key"));
}

TEST(ConfigTest, CommentsAreAllowed) {
  Config c = parseConfig("// tensord\n{ /* where */ \"listen\": \"127.0.0.1:1\", " + kAuth + "}");
  EXPECT_EQ(c.listen.port, 1);
}

TEST(ConfigTest, EachValidationErrorNamesItsKey) {
  const std::map<std::string, std::string> cases = {
      {R"("limits": {"max_tensor_bytes": "abc"})",
       R"(limits.max_tensor_bytes: expected a non-negative integer, got "abc")"},
      {R"("limits": {"max_tensor_bytes": -1})", "limits.max_tensor_bytes: expected a non-negative integer, got -1"},
      {R"("limits": {"memory_limit_bytes": 1.5})", "limits.memory_limit_bytes: expected a non-negative integer"},
      {R"("limits": {"max_message_bytes": 1024})", "limits.max_message_bytes: must be at least 2097152"},
      {R"("limits": {"max_inflight_calls_per_connection": 0})",
       "limits.max_inflight_calls_per_connection: expected an integer from 1 to 4294967295, got 0"},
      {R"("limits": {"max_connections": 0})",
       "limits.max_connections: expected an integer from 1 to 4294967295, got 0"},
      {R"("limits": {"max_connections": "many"})",
       R"(limits.max_connections: expected a non-negative integer, got "many")"},
      {R"("limits": 5)", "limits: expected an object, got 5"},
      {R"("staging": {"slot_bytes": 5000})", "staging.slot_bytes: expected a multiple of 4096, got 5000"},
      {R"("staging": {"slot_bytes": 0})", "staging.slot_bytes: expected an integer from 4096"},
      {R"("staging": {"slots": 0})", "staging.slots: expected an integer from 1 to 1024, got 0"},
      {R"("staging": [])", "staging: expected an object"},
      {R"("listen": 7450)", "listen: expected a string, got 7450"},
      {R"("listen": "localhost")", "listen: expected HOST:PORT"},
      {R"("listen": "127.0.0.1:70000")", "listen: expected a port from 0 to 65535"},
      {R"("listen": "127.0.0.1:")", "listen: expected a port from 0 to 65535"},
      {R"("listen": ":7450")", "listen: the host is empty"},
      {R"("listen": "::1:7450")", "listen: an IPv6 address needs brackets"},
      {R"("allow_remote_plaintext": "yes")", R"(allow_remote_plaintext: expected true or false, got "yes")"},
      {R"("device": true)", "device: expected a string"},
      {R"("state_dir": 1)", "state_dir: expected a string, got 1"},
      {R"("cache_dir": null)", "cache_dir: expected a string, got null"},
      {R"("log_level": "verbose")", R"(log_level: expected one of trace, debug, info, warn, error, got "verbose")"},
      {R"("matmul_f32": "tf32")", R"(matmul_f32: expected "tensor_cores" or "fma", got "tf32")"},
      {R"("metrics": {"device_time_interval_ms": 60001})",
       "metrics.device_time_interval_ms: expected an integer from 0 to 60000, got 60001"},
      {R"("metrics": {"device_time_interval_ms": -1})",
       "metrics.device_time_interval_ms: expected a non-negative integer, got -1"},
  };
  for (const auto& [fields, expected] : cases) {
    const std::string message = errorOf(withAuth(fields));
    EXPECT_TRUE(startsWith(message, expected))
        << "config {" << fields << "}\n  got:      " << message << "\n  expected: " << expected;
  }
}

TEST(ConfigTest, AuthErrorsNameTheirKey) {
  const std::map<std::string, std::string> cases = {
      {"{}", "auth.tokens: at least one entry is required"},
      {R"({"auth": {}})", "auth.tokens: at least one entry is required"},
      {R"({"auth": {"tokens": []}})", "auth.tokens: at least one entry is required"},
      {R"({"auth": {"tokens": {}}})", "auth.tokens: expected a list"},
      {R"({"auth": {"tokens": [5]}})", "auth.tokens[0]: expected an object, got 5"},
      {R"({"auth": {"tokens": [{"token_sha256": ")" + kHash + R"("}]}})", "auth.tokens[0].principal: is required"},
      {R"({"auth": {"tokens": [{"principal": "p"}]}})", "auth.tokens[0].token_sha256: is required"},
      {R"({"auth": {"tokens": [{"principal": "", "token_sha256": ")" + kHash + R"("}]}})",
       "auth.tokens[0].principal: must not be empty"},
      {R"({"auth": {"tokens": [{"principal": "p", "token_sha256": "abc"}]}})",
       R"(auth.tokens[0].token_sha256: expected 64 hex digits (printf %s TOKEN | sha256sum), got "abc")"},
      {R"({"auth": {"tokens": [{"principal": "p", "token_sha256": ")" + kHash +
           R"("}, {"principal": "q", "token_sha256": ")" + kHash + R"("}]}})",
       "auth.tokens[1].token_sha256: the same token is already configured in auth.tokens[0]"},
      {R"({"auth": {"tokens": [{"principal": "p", "token": "secret", "token_sha256": ")" + kHash + R"("}]}})",
       "auth.tokens[0].token: unknown key"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = errorOf(text);
    EXPECT_TRUE(startsWith(message, expected)) << text << "\n  got:      " << message << "\n  expected: " << expected;
  }
}

TEST(ConfigTest, UnknownKeysAreRejectedByName) {
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("listne": "127.0.0.1:1")")), "listne: unknown key"))
      << errorOf(withAuth(R"("listne": "x")"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("limits": {"max_tensor": 1})")), "limits.max_tensor: unknown key"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("staging": {"slot": 1})")), "staging.slot: unknown key"));
  EXPECT_TRUE(startsWith(errorOf(R"({"auth": {"tokens": [], "policy": 1}})"), "auth.policy: unknown key"));
  // The message lists what would have been accepted.
  EXPECT_NE(errorOf(withAuth(R"("limits": {"max_tensor": 1})")).find("max_tensor_bytes"), std::string::npos);
}

TEST(ConfigTest, InvalidJsonSaysWhere) {
  const std::string message = errorOf("{\n  \"listen\": ,\n}");
  EXPECT_TRUE(startsWith(message, "config: invalid JSON: parse error at line 2")) << message;
  EXPECT_TRUE(startsWith(errorOf("[1, 2]"), "config: expected an object")) << errorOf("[1, 2]");
}

TEST(ConfigTest, RemotePlaintextIsRefusedUnlessAllowed) {
  for (const char* address : {"0.0.0.0:7450", "10.1.2.3:7450", "[::]:7450", "example.com:7450"}) {
    const std::string message = errorOf(withAuth(std::string(R"("listen": ")") + address + "\""));
    EXPECT_TRUE(startsWith(message, "listen: plain TCP on the non-loopback address")) << address << ": " << message;
    EXPECT_NE(message.find("allow_remote_plaintext"), std::string::npos);
    EXPECT_NO_THROW(
        parseConfig(withAuth(std::string(R"("allow_remote_plaintext": true, "listen": ")") + address + "\"")));
  }
  for (const char* address : {"127.0.0.1:7450", "127.8.9.10:1", "[::1]:7450", "localhost:7450"}) {
    EXPECT_NO_THROW(parseConfig(withAuth(std::string(R"("listen": ")") + address + "\""))) << address;
  }
}

TEST(ConfigTest, ListenOverride) {
  Config c = parseConfig(withAuth(""));
  applyListenOverride(c, "127.0.0.1:0");
  EXPECT_EQ(c.listen.str(), "127.0.0.1:0");
  applyListenOverride(c, "[::1]:9");
  EXPECT_EQ(c.listen.str(), "[::1]:9");
  try {
    applyListenOverride(c, "0.0.0.0:1");
    FAIL() << "remote plaintext accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(startsWith(e.what(), "--listen: plain TCP on the non-loopback address 0.0.0.0:1")) << e.what();
  }
  try {
    applyListenOverride(c, "nope");
    FAIL() << "bad address accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(startsWith(e.what(), "--listen: expected HOST:PORT")) << e.what();
  }
  Config open = parseConfig(withAuth(R"("allow_remote_plaintext": true)"));
  applyListenOverride(open, "0.0.0.0:0");
  EXPECT_EQ(open.listen.str(), "0.0.0.0:0");
}

TEST(ConfigTest, HostPortLoopbackDetection) {
  EXPECT_TRUE(parseHostPort("127.0.0.1:1", "k").isLoopback());
  EXPECT_TRUE(parseHostPort("[::ffff:127.0.0.1]:1", "k").isLoopback());
  EXPECT_FALSE(parseHostPort("128.0.0.1:1", "k").isLoopback());
  EXPECT_FALSE(parseHostPort("[::2]:1", "k").isLoopback());
}

using Env = std::map<std::string, std::string>;

GetEnv fakeEnv(Env env) {
  return [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigTest, DirectoriesFollowSystemdThenXdgThenHome) {
  Config c = parseConfig(withAuth(""));
  Config systemd = c;
  resolveDirectories(systemd, "/etc/tensord",
                     fakeEnv({{"STATE_DIRECTORY", "/var/lib/tensord:/var/lib/other"},
                              {"CACHE_DIRECTORY", "/var/cache/tensord"},
                              {"XDG_STATE_HOME", "/x/state"},
                              {"HOME", "/home/u"}}));
  EXPECT_EQ(systemd.stateDir, "/var/lib/tensord");
  EXPECT_EQ(systemd.cacheDir, "/var/cache/tensord");

  Config xdg = c;
  resolveDirectories(xdg, "/etc", fakeEnv({{"XDG_STATE_HOME", "/x/state"}, {"XDG_CACHE_HOME", "/x/cache"}}));
  EXPECT_EQ(xdg.stateDir, "/x/state/tensord");
  EXPECT_EQ(xdg.cacheDir, "/x/cache/tensord");

  Config home = c;
  resolveDirectories(home, "/etc", fakeEnv({{"XDG_STATE_HOME", "relative/ignored"}, {"HOME", "/home/u"}}));
  EXPECT_EQ(home.stateDir, "/home/u/.local/state/tensord");
  EXPECT_EQ(home.cacheDir, "/home/u/.cache/tensord");
}

TEST(ConfigTest, ConfiguredDirectoriesWinAndRelativeOnesFollowTheConfigFile) {
  Config c = parseConfig(withAuth(R"("state_dir": "/srv/state", "cache_dir": "cache")"));
  resolveDirectories(c, "/etc/tensord", fakeEnv({{"STATE_DIRECTORY", "/var/lib/tensord"}, {"HOME", "/home/u"}}));
  EXPECT_EQ(c.stateDir, "/srv/state");
  EXPECT_EQ(c.cacheDir, "/etc/tensord/cache");
}

TEST(ConfigTest, FilesDirsParseAndResolveAgainstTheConfigDirectory) {
  EXPECT_TRUE(parseConfig(withAuth("")).files.dirs.empty());  // no server-side files unless listed
  Config c = parseConfig(withAuth(R"("files": {"dirs": ["/srv/ckpt/", "models", "a/../b"]})"));
  resolveDirectories(c, "/etc/tensord", fakeEnv({{"HOME", "/home/u"}}));
  EXPECT_EQ(c.files.dirs, (std::vector<std::filesystem::path>{"/srv/ckpt/", "/etc/tensord/models", "/etc/tensord/b"}));
  EXPECT_EQ(errorOf(withAuth(R"("files": {"dirs": "/srv"})")), "files.dirs: expected a list of directories, got \"/srv\"");
  EXPECT_EQ(errorOf(withAuth(R"("files": {"dirs": [""]})")), "files.dirs[0]: must not be empty");
  EXPECT_EQ(errorOf(withAuth(R"("files": {"dirs": [3]})")), "files.dirs[0]: expected a string, got 3");
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("files": {"dir": []})")), "files.dir: unknown key (known keys here: dirs)"));

  // The daemon's own directories are out of clients' reach.
  Config own = parseConfig(withAuth(R"("state_dir": "/srv/tensord/state", "files": {"dirs": ["/tmp", "/srv/tensord/"]})"));
  try {
    resolveDirectories(own, "/etc/tensord", fakeEnv({{"HOME", "/home/u"}}));
    ADD_FAILURE() << "a files.dirs entry holding state_dir was accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "files.dirs[1]: /srv/tensord/ contains state_dir /srv/tensord/state; clients must not reach "
                           "the daemon's own files");
  }
}

TEST(ConfigTest, UnresolvableDirectoryNamesItsKey) {
  Config c = parseConfig(withAuth(""));
  try {
    resolveDirectories(c, "/etc", fakeEnv({}));
    FAIL() << "resolved without any environment";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(startsWith(e.what(), "state_dir: is empty and cannot be derived")) << e.what();
  }
}

TEST(ConfigTest, CreateDirectoriesMakesPrivateDirectories) {
  const auto base = std::filesystem::temp_directory_path() / ("tensord-config-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  Config c = parseConfig(withAuth(""));
  c.stateDir = base / "a" / "state";
  c.cacheDir = base / "cache";
  createDirectories(c);
  createDirectories(c);  // idempotent
  struct stat st {};
  ASSERT_EQ(::stat(c.stateDir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_TRUE(std::filesystem::is_directory(c.cacheDir));
  // A file in the way is reported against the key.
  c.cacheDir = base / "file";
  std::ofstream(c.cacheDir) << "x";
  try {
    createDirectories(c);
    FAIL() << "a file was accepted as cache_dir";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(startsWith(e.what(), "cache_dir: ")) << e.what();
  }
  std::filesystem::remove_all(base);
}

TEST(ConfigTest, MissingFileIsReported) {
  try {
    loadConfigFile("/nonexistent/tensord.json");
    FAIL() << "missing file accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(startsWith(e.what(), "cannot open config file")) << e.what();
  }
}

TEST(ConfigTest, TlsKeysParseAndResolveAgainstTheConfigDirectory) {
  Config c = parseConfig(withAuth(R"("listen": "0.0.0.0:7450", "auth_timeout_ms": 2500, "state_dir": "s", "cache_dir": "c",
      "tls": {"cert_file": "server.pem", "key_file": "/etc/tensord/server.key", "client_ca_file": "ca.pem"})"));
  ASSERT_TRUE(c.tls.has_value());
  EXPECT_EQ(c.tls->clientAuth, ClientAuth::kRequired);  // the default once client_ca_file is set
  EXPECT_EQ(c.authTimeoutMs, 2500u);
  resolveDirectories(c, "/srv/tensord", [](const char*) { return std::optional<std::string>(); });
  EXPECT_EQ(c.tls->certFile, "/srv/tensord/server.pem");
  EXPECT_EQ(c.tls->keyFile, "/etc/tensord/server.key");
  EXPECT_EQ(c.tls->clientCaFile, "/srv/tensord/ca.pem");

  Config defaults = parseConfig(withAuth(""));
  EXPECT_FALSE(defaults.tls.has_value());
  EXPECT_EQ(defaults.authTimeoutMs, 10000u);
  Config optional = parseConfig(withAuth(
      R"("tls": {"cert_file": "s.pem", "key_file": "s.key", "client_ca_file": "ca.pem", "client_auth": "optional"})"));
  EXPECT_EQ(optional.tls->clientAuth, ClientAuth::kOptional);
}

TEST(ConfigTest, TlsErrorsNameTheKey) {
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("tls": {"cert_file": "s.pem"})")), "tls.key_file: is required"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("tls": {"key_file": "s.key"})")), "tls.cert_file: is required"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("tls": {"cert_file": "s", "key_file": "k", "client_auth": "always"})")),
                         "tls.client_auth: expected one of none, optional, required"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("tls": {"cert_file": "s", "key_file": "k", "client_auth": "required"})")),
                         "tls.client_auth: \"required\" needs tls.client_ca_file"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("tls": {"cert_file": "s", "key_file": "k", "ciphers": "x"})")),
                         "tls.ciphers: unknown key"));
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("auth_timeout_ms": 0)")), "auth_timeout_ms: expected an integer from 1"));
}

TEST(ConfigTest, CertificateMappingsNeedMutualTls) {
  const std::string tls = R"("tls": {"cert_file": "s", "key_file": "k", "client_ca_file": "ca"}, )";
  const std::string mapping = R"("certificates": [{"subject": "alice", "principal": "a"}])";
  const std::string auth = R"("auth": {"tokens": [{"principal": "p", "token_sha256": ")" + kHash + R"("}], )";
  Config c = parseConfig("{" + tls + auth + mapping + "}}");
  ASSERT_EQ(c.certificates.size(), 1u);
  EXPECT_EQ(c.certificates[0].subject, "alice");
  EXPECT_EQ(c.certificates[0].principal, "a");
  EXPECT_TRUE(startsWith(errorOf("{" + auth + mapping + "}}"), "auth.certificates: needs tls.client_ca_file"));
  EXPECT_TRUE(startsWith(
      errorOf("{" + tls + auth + R"("certificates": [{"subject": "alice"}]}})"), "auth.certificates[0].principal: is required"));
  EXPECT_TRUE(startsWith(errorOf("{" + tls + auth +
                                 R"("certificates": [{"subject": "a", "principal": "x"}, {"subject": "a", "principal": "y"}]}})"),
                         "auth.certificates[1].subject: \"a\" is already mapped"));
}

TEST(ConfigTest, TlsAllowsANonLoopbackListenAddress) {
  EXPECT_EQ(errorOf(withAuth(R"("listen": "0.0.0.0:7450", "tls": {"cert_file": "s", "key_file": "k"})")), "");
  EXPECT_TRUE(startsWith(errorOf(withAuth(R"("listen": "0.0.0.0:7450")")), "listen: plain TCP"));
}

}  // namespace
}  // namespace tensord::server
