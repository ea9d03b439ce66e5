#include "server/config.h"

#include "acl/json_text.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tensord::server {
namespace {

using nlohmann::json;

// The value as JSON text, shortened so a huge value does not drown the message.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void fail(std::string_view key, std::string_view problem) {
  throw ConfigError(std::string(key) + ": " + std::string(problem));
}

std::string join(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
}

void requireObject(const json& value, std::string_view key) {
  if (!value.is_object()) fail(key.empty() ? "config" : key, "expected an object, got " + shown(value));
}

void rejectUnknownKeys(const json& object, std::string_view parent, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == key;
    if (found) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    fail(join(parent, key), "unknown key (known keys here: " + list + ")");
  }
}

uint64_t readUint(const json& value, std::string_view key) {
  // nlohmann stores every non-negative integer literal as unsigned.
  if (!value.is_number_unsigned()) {
    fail(key, "expected a non-negative integer, got " + shown(value));
  }
  return value.get<uint64_t>();
}

uint64_t readUintInRange(const json& value, std::string_view key, uint64_t lo, uint64_t hi) {
  const uint64_t v = readUint(value, key);
  if (v < lo || v > hi) {
    fail(key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + shown(value));
  }
  return v;
}

std::string readString(const json& value, std::string_view key) {
  if (!value.is_string()) fail(key, "expected a string, got " + shown(value));
  return value.get<std::string>();
}

bool readBool(const json& value, std::string_view key) {
  if (!value.is_boolean()) fail(key, "expected true or false, got " + shown(value));
  return value.get<bool>();
}

void parseLimits(const json& object, Limits& limits) {
  requireObject(object, "limits");
  rejectUnknownKeys(
      object, "limits",
      {"memory_limit_bytes", "max_tensor_bytes", "max_message_bytes", "max_inflight_calls_per_connection",
       "max_connections"});
  if (object.contains("memory_limit_bytes")) {
    limits.memoryLimitBytes = readUint(object["memory_limit_bytes"], "limits.memory_limit_bytes");
  }
  if (object.contains("max_tensor_bytes")) {
    limits.maxTensorBytes = readUint(object["max_tensor_bytes"], "limits.max_tensor_bytes");
  }
  if (object.contains("max_message_bytes")) {
    const json& v = object["max_message_bytes"];
    limits.maxMessageBytes = readUint(v, "limits.max_message_bytes");
    if (limits.maxMessageBytes < kMinMessageBytes) {
      fail("limits.max_message_bytes", "must be at least " + std::to_string(kMinMessageBytes) +
                                           " (one 1 MiB data chunk plus framing), got " + shown(v));
    }
  }
  if (object.contains("max_inflight_calls_per_connection")) {
    limits.maxInflightCallsPerConnection =
        uint32_t(readUintInRange(object["max_inflight_calls_per_connection"],
                                 "limits.max_inflight_calls_per_connection", 1, std::numeric_limits<uint32_t>::max()));
  }
  if (object.contains("max_connections")) {
    limits.maxConnections = uint32_t(
        readUintInRange(object["max_connections"], "limits.max_connections", 1, std::numeric_limits<uint32_t>::max()));
  }
}

void parseStaging(const json& object, StagingConfig& staging) {
  requireObject(object, "staging");
  rejectUnknownKeys(object, "staging", {"slot_bytes", "slots"});
  if (object.contains("slot_bytes")) {
    const json& v = object["slot_bytes"];
    staging.slotBytes = readUintInRange(v, "staging.slot_bytes", 4096, uint64_t(1) << 30);
    if (staging.slotBytes % 4096 != 0) fail("staging.slot_bytes", "expected a multiple of 4096, got " + shown(v));
  }
  if (object.contains("slots")) staging.slots = uint32_t(readUintInRange(object["slots"], "staging.slots", 1, 1024));
}

void parseCertificates(const json& list, std::vector<CertificateMapping>& certificates) {
  if (!list.is_array()) {
    fail("auth.certificates", "expected a list of {\"subject\", \"principal\"}, got " + shown(list));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = "auth.certificates[" + std::to_string(i) + "]";
    const json& entry = list[i];
    requireObject(entry, key);
    rejectUnknownKeys(entry, key, {"subject", "principal"});
    if (!entry.contains("subject")) fail(key + ".subject", "is required");
    if (!entry.contains("principal")) fail(key + ".principal", "is required");
    CertificateMapping mapping;
    mapping.subject = readString(entry["subject"], key + ".subject");
    if (mapping.subject.empty()) fail(key + ".subject", "must not be empty");
    mapping.principal = readString(entry["principal"], key + ".principal");
    if (mapping.principal.empty()) fail(key + ".principal", "must not be empty");
    for (size_t j = 0; j < certificates.size(); ++j) {
      if (certificates[j].subject == mapping.subject) {
        fail(key + ".subject", "\"" + mapping.subject + "\" is already mapped in auth.certificates[" +
                                   std::to_string(j) + "]");
      }
    }
    certificates.push_back(std::move(mapping));
  }
}

void parseTls(const json& object, TlsConfig& tls) {
  requireObject(object, "tls");
  rejectUnknownKeys(object, "tls", {"cert_file", "key_file", "client_ca_file", "client_auth"});
  for (const char* key : {"cert_file", "key_file"}) {
    if (!object.contains(key)) fail(join("tls", key), "is required when tls is set");
  }
  tls.certFile = readString(object["cert_file"], "tls.cert_file");
  if (tls.certFile.empty()) fail("tls.cert_file", "must not be empty");
  tls.keyFile = readString(object["key_file"], "tls.key_file");
  if (tls.keyFile.empty()) fail("tls.key_file", "must not be empty");
  if (object.contains("client_ca_file")) {
    tls.clientCaFile = readString(object["client_ca_file"], "tls.client_ca_file");
    if (tls.clientCaFile.empty()) fail("tls.client_ca_file", "must not be empty");
    tls.clientAuth = ClientAuth::kRequired;  // the default once a client CA is given
  }
  if (object.contains("client_auth")) {
    const json& v = object["client_auth"];
    const std::string mode = readString(v, "tls.client_auth");
    if (mode == "none") {
      tls.clientAuth = ClientAuth::kNone;
    } else if (mode == "optional") {
      tls.clientAuth = ClientAuth::kOptional;
    } else if (mode == "required") {
      tls.clientAuth = ClientAuth::kRequired;
    } else {
      fail("tls.client_auth", "expected one of none, optional, required, got " + shown(v));
    }
    if (tls.clientAuth != ClientAuth::kNone && tls.clientCaFile.empty()) {
      fail("tls.client_auth", "\"" + mode + "\" needs tls.client_ca_file (the CA that signs client certificates)");
    }
  }
}

void parseAuth(const json& object, std::vector<acl::TokenEntry>& tokens,
               std::vector<CertificateMapping>& certificates) {
  requireObject(object, "auth");
  rejectUnknownKeys(object, "auth", {"tokens", "certificates"});
  if (object.contains("certificates")) parseCertificates(object["certificates"], certificates);
  if (!object.contains("tokens")) fail("auth.tokens", "at least one entry is required");
  const json& list = object["tokens"];
  if (!list.is_array()) fail("auth.tokens", "expected a list of {\"principal\", \"token_sha256\"}, got " + shown(list));
  if (list.empty()) fail("auth.tokens", "at least one entry is required");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = "auth.tokens[" + std::to_string(i) + "]";
    const json& entry = list[i];
    requireObject(entry, key);
    rejectUnknownKeys(entry, key, {"principal", "token_sha256"});
    if (!entry.contains("principal")) fail(key + ".principal", "is required");
    if (!entry.contains("token_sha256")) fail(key + ".token_sha256", "is required");
    acl::TokenEntry token;
    token.principal = readString(entry["principal"], key + ".principal");
    if (token.principal.empty()) fail(key + ".principal", "must not be empty");
    token.tokenSha256Hex = readString(entry["token_sha256"], key + ".token_sha256");
    if (!acl::isSha256Hex(token.tokenSha256Hex)) {
      fail(key + ".token_sha256",
           "expected 64 hex digits (printf %s TOKEN | sha256sum), got " + shown(entry["token_sha256"]));
    }
    for (char& c : token.tokenSha256Hex) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (size_t j = 0; j < tokens.size(); ++j) {
      if (tokens[j].tokenSha256Hex == token.tokenSha256Hex) {
        fail(key + ".token_sha256", "the same token is already configured in auth.tokens[" + std::to_string(j) + "]");
      }
    }
    tokens.push_back(std::move(token));
  }
}

void parseFiles(const json& object, FilesConfig& files) {
  requireObject(object, "files");
  rejectUnknownKeys(object, "files", {"dirs"});
  if (!object.contains("dirs")) return;
  const json& list = object["dirs"];
  if (!list.is_array()) fail("files.dirs", "expected a list of directories, got " + shown(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = "files.dirs[" + std::to_string(i) + "]";
    const std::string dir = readString(list[i], key);
    if (dir.empty()) fail(key, "must not be empty");
    files.dirs.emplace_back(dir);
  }
}

void parseMetrics(const json& object, MetricsConfig& metrics) {
  requireObject(object, "metrics");
  rejectUnknownKeys(object, "metrics", {"enabled", "listen", "allow_remote", "device_time_interval_ms"});
  if (object.contains("enabled")) metrics.enabled = readBool(object["enabled"], "metrics.enabled");
  if (object.contains("listen")) {
    metrics.listen = parseHostPort(readString(object["listen"], "metrics.listen"), "metrics.listen");
  }
  if (object.contains("allow_remote")) metrics.allowRemote = readBool(object["allow_remote"], "metrics.allow_remote");
  if (object.contains("device_time_interval_ms")) {
    metrics.deviceTimeIntervalMs =
        uint32_t(readUintInRange(object["device_time_interval_ms"], "metrics.device_time_interval_ms", 0, 60000));
  }
  if (metrics.enabled && !metrics.listen.isLoopback() && !metrics.allowRemote) {
    fail("metrics.listen", "the non-loopback address " + metrics.listen.str() +
                               " is refused: the endpoint has no authentication and shows every principal's name and "
                               "use; listen on a loopback address or set metrics.allow_remote to true");
  }
}

void parseNodeCredentials(const json& object, NodeCredentials& credentials) {
  const std::string key = "groups.node_credentials";
  requireObject(object, key);
  rejectUnknownKeys(object, key, {"token", "cert_file", "key_file", "ca_file"});
  if (object.contains("token")) credentials.token = readString(object["token"], key + ".token");
  if (object.contains("cert_file")) credentials.certFile = readString(object["cert_file"], key + ".cert_file");
  if (object.contains("key_file")) credentials.keyFile = readString(object["key_file"], key + ".key_file");
  if (object.contains("ca_file")) credentials.caFile = readString(object["ca_file"], key + ".ca_file");
  if (credentials.certFile.empty() != credentials.keyFile.empty()) {
    fail(key, "cert_file and key_file go together (a client certificate and its key)");
  }
  if (credentials.token.empty() && credentials.certFile.empty()) {
    fail(key, "expected a token, or a cert_file and key_file (how this daemon authenticates to its peers)");
  }
}

void parseGroups(const json& object, GroupsConfig& groups) {
  requireObject(object, "groups");
  rejectUnknownKeys(object, "groups", {"timeout_ms", "chunk_bytes", "node_credentials", "static"});
  if (object.contains("timeout_ms")) {
    groups.timeoutMs = uint32_t(readUintInRange(object["timeout_ms"], "groups.timeout_ms", 1, 3600000));
  }
  if (object.contains("chunk_bytes")) {
    const json& v = object["chunk_bytes"];
    groups.chunkBytes = uint32_t(readUintInRange(v, "groups.chunk_bytes", 4096, uint64_t(1) << 30));
    if (groups.chunkBytes % 16 != 0) fail("groups.chunk_bytes", "expected a multiple of 16, got " + shown(v));
  }
  if (object.contains("node_credentials")) parseNodeCredentials(object["node_credentials"], groups.credentials.emplace());
  if (!object.contains("static")) return;
  const json& list = object["static"];
  if (!list.is_array()) fail("groups.static", "expected a list of {\"name\", \"members\", \"rank\"}, got " + shown(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = "groups.static[" + std::to_string(i) + "]";
    requireObject(list[i], key);
    rejectUnknownKeys(list[i], key, {"name", "members", "rank"});
    for (const char* needed : {"name", "members", "rank"}) {
      if (!list[i].contains(needed)) fail(join(key, needed), "is required");
    }
    StaticGroup group;
    group.name = readString(list[i]["name"], key + ".name");
    if (std::string problem = groupNameProblem(group.name); !problem.empty()) fail(key + ".name", problem);
    for (const auto& other : groups.staticGroups) {
      if (other.name == group.name) fail(key + ".name", "group \"" + group.name + "\" is listed twice");
    }
    const json& members = list[i]["members"];
    if (!members.is_array() || members.empty()) {
      fail(key + ".members", "expected a non-empty list of \"HOST:PORT\" or \"tls://HOST:PORT\", got " + shown(members));
    }
    for (size_t m = 0; m < members.size(); ++m) {
      const std::string memberKey = key + ".members[" + std::to_string(m) + "]";
      std::string text = readString(members[m], memberKey);
      parseHostPort(std::string_view(text).substr(text.starts_with("tls://") ? 6 : 0), memberKey);
      group.members.push_back(std::move(text));
    }
    group.rank = uint32_t(readUintInRange(list[i]["rank"], key + ".rank", 0, group.members.size() - 1));
    groups.staticGroups.push_back(std::move(group));
  }
}

bool isLogLevel(std::string_view level) {
  for (std::string_view l : {"trace", "debug", "info", "warn", "error"}) {
    if (l == level) return true;
  }
  return false;
}

}  // namespace

std::string groupNameProblem(std::string_view name) {
  if (name.empty()) return "a group name must not be empty";
  if (name.size() > 128) return "a group name has at most 128 characters, got " + std::to_string(name.size());
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == '/';
    if (!ok) return "group name \"" + std::string(name) + "\" has the character '" + std::string(1, c) +
                    "'; expected letters, digits and _ - . /";
  }
  return "";
}

std::string HostPort::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool HostPort::isLoopback() const {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

HostPort parseHostPort(std::string_view text, std::string_view key) {
  const std::string got = "\"" + std::string(text) + "\"";
  auto bad = [&](std::string_view why) -> HostPort {
    fail(key, std::string(why) + " (e.g. 127.0.0.1:7450 or [::1]:7450), got " + got);
  };
  std::string host;
  std::string_view portText;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("expected [IPV6]:PORT");
    }
    host = std::string(text.substr(1, close - 1));
    portText = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("expected HOST:PORT");
    host = std::string(text.substr(0, colon));
    portText = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("an IPv6 address needs brackets");
  }
  if (host.empty()) return bad("the host is empty");
  if (portText.empty() || portText.size() > 5) return bad("expected a port from 0 to 65535");
  uint32_t port = 0;
  for (char c : portText) {
    if (c < '0' || c > '9') return bad("expected a port from 0 to 65535");
    port = port * 10 + uint32_t(c - '0');
  }
  if (port > 65535) return bad("expected a port from 0 to 65535");
  return HostPort{host, uint16_t(port)};
}

Config parseConfig(std::string_view jsonText) {
  json root = acl::parseJsonText<ConfigError>(jsonText, "config");
  requireObject(root, "");
  rejectUnknownKeys(root, "",
                    {"listen", "allow_remote_plaintext", "device", "state_dir", "cache_dir", "log_level", "limits",
                     "staging", "device_sharing", "matmul_f32", "auth", "tls", "auth_timeout_ms", "policy_file",
                     "audit_log", "files", "metrics", "groups", "kernels"});
  Config config;
  if (root.contains("listen")) config.listen = parseHostPort(readString(root["listen"], "listen"), "listen");
  if (root.contains("allow_remote_plaintext")) {
    config.allowRemotePlaintext = readBool(root["allow_remote_plaintext"], "allow_remote_plaintext");
  }
  if (root.contains("device")) {
    const json& v = root["device"];
    if (v.is_number_unsigned()) {
      config.device = std::to_string(v.get<uint64_t>());
    } else if (v.is_string()) {
      config.device = v.get<std::string>();
    } else {
      fail("device",
           "expected a string (\"\" for automatic, an index such as \"1\", or a name substring), got " + shown(v));
    }
  }
  if (root.contains("state_dir")) config.stateDir = readString(root["state_dir"], "state_dir");
  if (root.contains("cache_dir")) config.cacheDir = readString(root["cache_dir"], "cache_dir");
  if (root.contains("device_sharing")) {
    const std::string sharing = readString(root["device_sharing"], "device_sharing");
    if (sharing != "fair" && sharing != "fifo") {
      fail("device_sharing", "expected \"fair\" or \"fifo\", got " + shown(root["device_sharing"]));
    }
    config.fairSharing = sharing == "fair";
  }
  if (root.contains("matmul_f32")) {
    const std::string mode = readString(root["matmul_f32"], "matmul_f32");
    if (mode != "tensor_cores" && mode != "fma") {
      fail("matmul_f32", "expected \"tensor_cores\" or \"fma\", got " + shown(root["matmul_f32"]));
    }
    config.f32ProductsOnTensorCores = mode == "tensor_cores";
  }
  if (root.contains("log_level")) {
    config.logLevel = readString(root["log_level"], "log_level");
    if (!isLogLevel(config.logLevel)) {
      fail("log_level", "expected one of trace, debug, info, warn, error, got " + shown(root["log_level"]));
    }
  }
  if (root.contains("limits")) parseLimits(root["limits"], config.limits);
  if (root.contains("staging")) parseStaging(root["staging"], config.staging);
  if (!root.contains("auth")) fail("auth.tokens", "at least one entry is required");
  parseAuth(root["auth"], config.tokens, config.certificates);
  if (root.contains("tls")) parseTls(root["tls"], config.tls.emplace());
  if (root.contains("policy_file")) {
    config.policyFile = readString(root["policy_file"], "policy_file");
    if (config.policyFile.empty()) fail("policy_file", "must not be empty (leave the key out to run without a policy)");
  }
  if (root.contains("audit_log")) {
    config.auditLog = readString(root["audit_log"], "audit_log");
    if (config.auditLog.empty()) fail("audit_log", "must not be empty (leave the key out to audit into the main log)");
  }
  if (root.contains("files")) parseFiles(root["files"], config.files);
  if (root.contains("metrics")) parseMetrics(root["metrics"], config.metrics);
  if (root.contains("groups")) parseGroups(root["groups"], config.groups);
  if (root.contains("kernels")) {
    const json& kernels = root["kernels"];
    requireObject(kernels, "kernels");
    rejectUnknownKeys(kernels, "kernels", {"max_dispatch_ms"});
    if (kernels.contains("max_dispatch_ms")) {
      config.kernelMaxDispatchMs =
          uint32_t(readUintInRange(kernels["max_dispatch_ms"], "kernels.max_dispatch_ms", 1, 3600000));
    }
  }
  if (!config.groups.staticGroups.empty() && !config.groups.credentials) {
    fail("groups.node_credentials", "is required with groups.static (how this daemon authenticates to its peers)");
  }
  if (root.contains("auth_timeout_ms")) {
    config.authTimeoutMs = uint32_t(readUintInRange(root["auth_timeout_ms"], "auth_timeout_ms", 1, 3600000));
  }
  if (!config.certificates.empty() && (!config.tls || config.tls->clientAuth == ClientAuth::kNone)) {
    fail("auth.certificates", "needs tls.client_ca_file: client certificates are only seen over mutual TLS");
  }
  checkListenPolicy(config);
  return config;
}

Config loadConfigFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open config file: " + std::string(std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError("cannot read config file: " + std::string(std::strerror(errno)));
  return parseConfig(text.str());
}

void applyListenOverride(Config& config, std::string_view hostPort) {
  config.listen = parseHostPort(hostPort, "--listen");
  checkListenPolicy(config, "--listen");
}

void applyLogLevelOverride(Config& config, std::string_view level) {
  if (!isLogLevel(level)) {
    fail("--log-level", "expected one of trace, debug, info, warn, error, got \"" + std::string(level) + "\"");
  }
  config.logLevel = std::string(level);
}

void checkListenPolicy(const Config& config, std::string_view listenKey) {
  if (config.tls || config.listen.isLoopback() || config.allowRemotePlaintext) return;
  fail(listenKey, "plain TCP on the non-loopback address " + config.listen.str() +
                      " is refused: tokens and data would cross the network unencrypted; listen on a loopback "
                      "address or set allow_remote_plaintext to true");
}

std::optional<std::string> processEnv(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

namespace {

std::filesystem::path resolveOne(const std::filesystem::path& configured, std::string_view key,
                                 const std::filesystem::path& baseDir, const GetEnv& getEnv, const char* systemdVar,
                                 const char* xdgVar, const char* homeSuffix) {
  if (!configured.empty()) return configured.is_absolute() ? configured : baseDir / configured;
  if (auto fromSystemd = getEnv(systemdVar)) {
    // systemd passes a colon-separated list when the unit names several.
    return std::filesystem::path(fromSystemd->substr(0, fromSystemd->find(':')));
  }
  if (auto xdg = getEnv(xdgVar); xdg && std::filesystem::path(*xdg).is_absolute()) {
    return std::filesystem::path(*xdg) / "tensord";
  }
  if (auto home = getEnv("HOME")) return std::filesystem::path(*home) / homeSuffix / "tensord";
  fail(key, std::string("is empty and cannot be derived: none of $") + systemdVar + ", $" + xdgVar +
                " or $HOME is set; set " + std::string(key) + " in the config");
}

void createOne(const std::filesystem::path& dir, std::string_view key) {
  std::error_code error;
  if (std::filesystem::is_directory(dir, error)) return;
  const auto parent = dir.parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    fail(key, "cannot create directory " + dir.string() + ": " + std::strerror(errno));
  }
  if (!std::filesystem::is_directory(dir, error)) fail(key, dir.string() + " exists and is not a directory");
}

}  // namespace

void resolvePolicyPaths(Config& config, const std::filesystem::path& baseDir) {
  for (auto* path : {&config.policyFile, &config.auditLog}) {
    if (!path->empty() && path->is_relative()) *path = baseDir / *path;
  }
}

void resolveDirectories(Config& config, const std::filesystem::path& baseDir, const GetEnv& getEnv) {
  config.stateDir =
      resolveOne(config.stateDir, "state_dir", baseDir, getEnv, "STATE_DIRECTORY", "XDG_STATE_HOME", ".local/state");
  config.cacheDir =
      resolveOne(config.cacheDir, "cache_dir", baseDir, getEnv, "CACHE_DIRECTORY", "XDG_CACHE_HOME", ".cache");
  resolvePolicyPaths(config, baseDir);
  for (size_t i = 0; i < config.files.dirs.size(); ++i) {
    auto& dir = config.files.dirs[i];
    if (dir.is_relative()) dir = baseDir / dir;
    dir = dir.lexically_normal();
    // Clients write there: the daemon's own files (named tensors, shader
    // and pipeline caches) must stay out of reach.
    for (const auto& [key, own] : {std::pair{"state_dir", config.stateDir}, std::pair{"cache_dir", config.cacheDir}}) {
      const auto inside = own.lexically_normal().lexically_relative(dir.has_filename() ? dir : dir.parent_path());
      if (!inside.empty() && *inside.begin() != "..") {
        fail("files.dirs[" + std::to_string(i) + "]", dir.string() + " contains " + key + " " + own.string() +
                                                          "; clients must not reach the daemon's own files");
      }
    }
  }
  if (config.tls) {
    for (auto* path : {&config.tls->certFile, &config.tls->keyFile, &config.tls->clientCaFile}) {
      if (!path->empty() && path->is_relative()) *path = baseDir / *path;
    }
  }
  if (auto& node = config.groups.credentials) {
    for (auto* path : {&node->certFile, &node->keyFile, &node->caFile}) {
      if (!path->empty() && path->is_relative()) *path = baseDir / *path;
    }
  }
}

void createDirectories(const Config& config) {
  createOne(config.stateDir, "state_dir");
  createOne(config.cacheDir, "cache_dir");
}

}  // namespace tensord::server
