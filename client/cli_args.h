#pragma once
// tensorctl's command line, parsed by hand. Internal to tensorctl.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensord::cli {

// A command line that does not fit the grammar (exit code 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// kernel add: the parts of a kernel's description, as given (commands_kernel.cpp
// builds the JSON), or a file with the whole description.
struct KernelFlags {
  std::string inputs, outputs, attrs, push, workgroup, grid, doc;
  std::string descriptionFile;  // --description FILE.json
  bool replace = false;
  bool given = false;  // any of these flags appeared
};

struct Options {
  std::string address;  // --connect, else $TENSORD_ADDR, else kDefaultAddress
  std::string token;    // --token, else $TENSORD_TOKEN, else the credentials file, else kDefaultToken
                        // ("" with a client certificate)
  std::string caFile;    // --ca, else $TENSORD_CA
  std::string certFile;  // --cert, else $TENSORD_CERT
  std::string keyFile;   // --key, else $TENSORD_KEY
  bool json = false;
  bool help = false;
  bool version = false;
  std::string command;             // "info", "put", ...; "" only with help/version
  std::vector<std::string> args;   // positionals after the command
  std::vector<std::string> attrs;  // call: --attr key=value, in order
  std::vector<std::string> outs;   // call: --out names (repeated or comma-separated)
  uint32_t limit = 0;              // ls: --limit N, show at most N (0 = all)
  std::string after;               // ls: --after NAME, start after NAME (a previous --limit's next)
  std::string prefix;              // load, save: --prefix P
  bool hasPrefix = false;
  KernelFlags kernel;              // kernel add
  std::vector<std::string> members;  // group create: --members HOST:PORT,... (by rank)
  std::string group;                 // allreduce, broadcast, barrier: --group NAME
  std::string reduceOp;              // allreduce: --op sum|mean|max|min ("" = sum)
  std::optional<uint32_t> root;      // broadcast: --root R
  uint32_t timeoutMs = 0;            // group create and collectives: --timeout MS (0 = the daemon's)
};

// ~/.config/tensord/credentials: `key = value` lines (token, connect, ca,
// cert, key; '#' comments). Each setting applies only where neither its flag
// nor its environment variable is given.
struct Credentials {
  std::optional<std::string> token, connect, ca, cert, key;
};

// $XDG_CONFIG_HOME/tensord/credentials, else $HOME/.config/tensord/credentials
// ("" when neither variable is set).
std::filesystem::path credentialsPath(const std::function<const char*(const char*)>& env);

// nullopt when the file does not exist. Throws UsageError when it is
// readable or writable by group or others, or does not parse.
std::optional<Credentials> readCredentials(const std::filesystem::path& path);

// Parses the arguments after argv[0]. `env` looks up environment variables
// (std::getenv in tensorctl). Throws UsageError naming the problem.
Options parseArgs(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env);

// The --help text.
std::string usage();

}  // namespace tensord::cli
