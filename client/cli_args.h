#pragma once
// tensorctl's command line, parsed by hand. Internal to tensorctl.

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tensord::cli {

// A command line that does not fit the grammar (exit code 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string address;  // --connect, else $TENSORD_ADDR, else kDefaultAddress
  std::string token;    // --token, else $TENSORD_TOKEN, else kDefaultToken ("" with a client certificate)
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
};

// Parses the arguments after argv[0]. `env` looks up environment variables
// (std::getenv in tensorctl). Throws UsageError naming the problem.
Options parseArgs(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env);

// The --help text.
std::string usage();

}  // namespace tensord::cli
