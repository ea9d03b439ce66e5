#pragma once
// tensord's configuration: the JSON format of config/tensord.json, parsed and
// validated. Every error is a ConfigError whose message starts with the key
// it is about ("limits.max_tensor_bytes: expected a non-negative integer,
// got \"abc\""). All keys are optional except auth.tokens, which must hold at
// least one entry; unknown keys are errors.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "acl/token_authenticator.h"

namespace tensord::server {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HostPort {
  std::string host;  // as written; IPv6 literals without brackets
  uint16_t port = 0;

  std::string str() const;  // "127.0.0.1:7450", "[::1]:7450"
  bool isLoopback() const;  // 127.0.0.0/8, ::1 or "localhost"
};

// Parses "HOST:PORT" (IPv6 as "[::1]:PORT"). `key` names the source in errors.
HostPort parseHostPort(std::string_view text, std::string_view key);

struct Limits {
  uint64_t memoryLimitBytes = 0;         // 0 = the device-local heap size
  uint64_t maxTensorBytes = 4294967296;  // largest single tensor
  uint64_t maxMessageBytes = 67108864;   // Cap'n Proto reader limit per message
  uint32_t maxInflightCallsPerConnection = 1024;
  uint32_t maxConnections = 1024;  // open connections in total; more are closed right after accept
};

struct StagingConfig {
  uint64_t slotBytes = 8388608;
  uint32_t slots = 8;
};

// files: where Session.loadFile/saveFile may read and write (tensorctl
// load/save). No directories: both are refused.
struct FilesConfig {
  std::vector<std::filesystem::path> dirs;  // absolute once resolveDirectories ran
};

// metrics: the Prometheus endpoint, plain HTTP on its own socket. It has no
// authentication and shows principals' names and use, so a non-loopback
// address needs allow_remote.
struct MetricsConfig {
  bool enabled = true;
  HostPort listen{"127.0.0.1", 9450};
  bool allowRemote = false;
  // Device time per op (tensord_op_device_seconds, user kernels' run-time
  // warnings) is measured on at most one batch per this many milliseconds;
  // 0 times every batch. Timestamps cost small ops a few microseconds each.
  uint32_t deviceTimeIntervalMs = 1;
};

// tls.client_auth: whether clients must present a certificate signed by
// tls.client_ca_file ("optional": verified when presented).
enum class ClientAuth { kNone, kOptional, kRequired };

// The `tls` object. With it the listener speaks only TLS (1.2 or later).
// Paths as configured until resolveDirectories makes them absolute.
struct TlsConfig {
  std::filesystem::path certFile;      // server certificate chain, PEM
  std::filesystem::path keyFile;       // its private key, PEM
  std::filesystem::path clientCaFile;  // CA(s) for client certificates; "" = none
  ClientAuth clientAuth = ClientAuth::kNone;
};

// auth.certificates: a verified client certificate whose subject CN or a
// DNS/email SAN equals `subject` authenticates as `principal`.
struct CertificateMapping {
  std::string subject;
  std::string principal;
};

// groups.node_credentials: how this daemon authenticates when it dials the
// other members of a group (a token, or a client certificate over TLS), and
// the CA that signed their server certificates (tls:// members).
struct NodeCredentials {
  std::string token;                   // "" = authenticate with the certificate
  std::filesystem::path certFile;      // client certificate chain, PEM; "" = none
  std::filesystem::path keyFile;       // its private key, PEM
  std::filesystem::path caFile;        // "" = the system's trust store
};

// groups.static[i]: a group formed at start (retrying until the peers are up).
struct StaticGroup {
  std::string name;
  std::vector<std::string> members;  // "HOST:PORT" or "tls://HOST:PORT", by rank
  uint32_t rank = 0;
};

// groups: collectives between daemons.
struct GroupsConfig {
  uint32_t timeoutMs = 30000;          // groupCreate and collectives, unless the request says otherwise
  uint32_t chunkBytes = 2u << 20;      // bytes per node-to-node data message
  std::optional<NodeCredentials> credentials;
  std::vector<StaticGroup> staticGroups;
};

// Checks a group name (groupCreate, groups.static); returns a problem or "".
std::string groupNameProblem(std::string_view name);

struct Config {
  HostPort listen{"127.0.0.1", 7450};
  bool allowRemotePlaintext = false;
  std::optional<TlsConfig> tls;
  uint32_t authTimeoutMs = 10000;  // unauthenticated connections are closed after this
  std::vector<CertificateMapping> certificates;
  std::string device;              // "" automatic; index; else name substring
  std::filesystem::path stateDir;  // as configured; "" until resolved
  std::filesystem::path cacheDir;
  std::string logLevel = "info";  // trace|debug|info|warn|error (the --log-level flag overrides it)
  // device_sharing: "fair" shares queued device work between principals
  // (compute::FairQueue); "fifo" runs it in arrival order.
  bool fairSharing = true;
  // matmul_f32: "tensor_cores" runs f32 products on bf16 tensor cores where
  // the device has them (compute::EngineOptions::f32ProductsOnTensorCores);
  // "fma" keeps them on f32 FMA kernels.
  bool f32ProductsOnTensorCores = true;
  Limits limits;
  StagingConfig staging;
  std::vector<acl::TokenEntry> tokens;
  std::filesystem::path policyFile;  // policy_file: "" = no policy (everything allowed)
  std::filesystem::path auditLog;    // audit_log: "" = the main log, logger "audit"
  FilesConfig files;
  MetricsConfig metrics;
  // kernels.max_dispatch_ms: a user kernel's call whose device time (or, while
  // it has not finished, its time since it was queued) exceeds this is
  // reported in the log (docs/kernels.md).
  uint32_t kernelMaxDispatchMs = 10000;
  GroupsConfig groups;
};

// Smallest max_message_bytes accepted: one 1 MiB data chunk plus framing.
inline constexpr uint64_t kMinMessageBytes = 2u << 20;
// Size of one upload/download chunk on the wire.
inline constexpr uint32_t kChunkBytes = 1u << 20;

// Parses and validates the JSON text (comments allowed). Directories are left
// as written; see resolveDirectories.
Config parseConfig(std::string_view jsonText);

// Reads and parses a file; errors are prefixed with nothing but the key, the
// caller adds the file name.
Config loadConfigFile(const std::filesystem::path& path);

// Replaces `listen` (the --listen flag); errors name "--listen".
void applyListenOverride(Config& config, std::string_view hostPort);

// Replaces `log_level` (the --log-level flag); errors name "--log-level".
void applyLogLevelOverride(Config& config, std::string_view level);

// Refuses plain TCP on a non-loopback address unless allow_remote_plaintext
// (TLS listeners may use any address).
void checkListenPolicy(const Config& config, std::string_view listenKey = "listen");

// Environment lookup, injectable for tests. Returns nullopt if unset or empty.
using GetEnv = std::function<std::optional<std::string>(const char* name)>;
std::optional<std::string> processEnv(const char* name);

// Fills empty state/cache dirs from the environment: state_dir ""
// -> $STATE_DIRECTORY (first entry), else $XDG_STATE_HOME/tensord, else
// ~/.local/state/tensord; cache_dir likewise with $CACHE_DIRECTORY,
// $XDG_CACHE_HOME and ~/.cache. A relative configured path is taken relative
// to `baseDir` (the config file's directory); so are the tls.* file paths
// and files.dirs.
void resolveDirectories(Config& config, const std::filesystem::path& baseDir, const GetEnv& getEnv = processEnv);

// Makes relative policy_file and audit_log paths relative to `baseDir` (the
// config file's directory). resolveDirectories does this too; SIGHUP reload
// uses it alone.
void resolvePolicyPaths(Config& config, const std::filesystem::path& baseDir);

// Creates the state and cache directories (mode 0700 when created).
void createDirectories(const Config& config);

}  // namespace tensord::server
