// tensorctl argument parsing.

#include "client/cli_args.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

#include "tensord/client.h"

namespace tensord::cli {

namespace {

struct CommandShape {
  size_t minArgs;
  size_t maxArgs;
  const char* synopsis;
};

const std::map<std::string, CommandShape, std::less<>>& commands() {
  static const std::map<std::string, CommandShape, std::less<>> table = {
      {"info", {0, 0, "info"}},
      {"whoami", {0, 0, "whoami"}},
      {"ops", {0, 1, "ops [NAME] [--json]"}},
      {"put", {2, 2, "put NAME FILE.npy"}},
      {"get", {2, 2, "get NAME FILE.npy"}},
      {"call", {1, SIZE_MAX, "call OP IN... [--attr key=value]... --out NAME"}},
      {"ls", {0, 0, "ls [--json]"}},
      {"rm", {1, SIZE_MAX, "rm NAME..."}},
  };
  return table;
}

void splitInto(std::vector<std::string>& out, std::string_view list) {
  std::string_view rest = list;
  for (;;) {
    size_t comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    if (item.empty()) throw UsageError("--out: empty tensor name in '" + std::string(list) + "'");
    out.push_back(std::move(item));
    if (comma == std::string_view::npos) return;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace

Options parseArgs(const std::vector<std::string>& args, const std::function<const char*(const char*)>& env) {
  Options options;
  std::string connect, token;
  bool haveConnect = false, haveToken = false;
  std::optional<std::string> ca, cert, key;
  bool onlyPositionals = false;
  std::vector<std::string> positionals;

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (onlyPositionals || arg.size() < 2 || arg[0] != '-') {
      positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      onlyPositionals = true;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inlineValue;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      inlineValue = arg.substr(eq + 1);
    }
    auto value = [&]() -> std::string {
      if (inlineValue) return *inlineValue;
      if (i + 1 >= args.size()) throw UsageError(name + " needs a value");
      return args[++i];
    };
    auto noValue = [&] {
      if (inlineValue) throw UsageError(name + " takes no value");
    };
    if (name == "--connect") {
      connect = value();
      haveConnect = true;
      if (connect.empty()) throw UsageError("--connect needs HOST:PORT");
    } else if (name == "--token") {
      token = value();
      haveToken = true;
    } else if (name == "--ca" || name == "--cert" || name == "--key") {
      std::string path = value();
      if (path.empty()) throw UsageError(name + " needs a file name");
      (name == "--ca" ? ca : name == "--cert" ? cert : key) = std::move(path);
    } else if (name == "--json") {
      noValue();
      options.json = true;
    } else if (name == "--help" || name == "-h") {
      noValue();
      options.help = true;
    } else if (name == "--version") {
      noValue();
      options.version = true;
    } else if (name == "--attr") {
      options.attrs.push_back(value());
    } else if (name == "--out") {
      splitInto(options.outs, value());
    } else {
      throw UsageError("unknown option '" + name + "'");
    }
  }

  if (haveConnect) {
    options.address = connect;
  } else if (const char* v = env("TENSORD_ADDR"); v && *v) {
    options.address = v;
  } else {
    options.address = std::string(kDefaultAddress);
  }
  auto fromEnv = [&](std::optional<std::string>& flag, const char* variable) -> std::string {
    if (flag) return *flag;
    const char* v = env(variable);
    return v && *v ? std::string(v) : std::string();
  };
  options.caFile = fromEnv(ca, "TENSORD_CA");
  options.certFile = fromEnv(cert, "TENSORD_CERT");
  options.keyFile = fromEnv(key, "TENSORD_KEY");
  if (options.certFile.empty() != options.keyFile.empty()) {
    throw UsageError(options.certFile.empty() ? "--key needs --cert (or $TENSORD_CERT) too"
                                              : "--cert needs --key (or $TENSORD_KEY) too");
  }
  if (haveToken) {
    options.token = token;
  } else if (const char* v = env("TENSORD_TOKEN"); v && *v) {
    options.token = v;
  } else if (!options.certFile.empty()) {
    options.token.clear();  // authenticate with the client certificate
  } else {
    options.token = std::string(kDefaultToken);
  }

  if (positionals.empty()) {
    if (options.help || options.version) return options;
    throw UsageError("no command given");
  }
  options.command = positionals.front();
  options.args.assign(positionals.begin() + 1, positionals.end());
  if (options.help) return options;

  auto it = commands().find(options.command);
  if (it == commands().end()) throw UsageError("unknown command '" + options.command + "'");
  const CommandShape& shape = it->second;
  if (options.args.size() < shape.minArgs || options.args.size() > shape.maxArgs) {
    throw UsageError("usage: tensorctl " + std::string(shape.synopsis));
  }
  if (options.command != "call" && (!options.attrs.empty() || !options.outs.empty())) {
    throw UsageError(std::string(options.attrs.empty() ? "--out" : "--attr") + " is only valid for 'call'");
  }
  if (options.command == "call" && options.outs.empty()) {
    throw UsageError("call needs --out NAME (the name to save the output under)");
  }
  return options;
}

std::string usage() {
  return R"(usage: tensorctl [--connect [tls://]HOST:PORT] [--token TOKEN] [--ca FILE]
                 [--cert FILE --key FILE] [--json] COMMAND ...

Talks to a tensord daemon. HOST:PORT defaults to $TENSORD_ADDR, else )" +
         std::string(kDefaultAddress) + R"(;
the token defaults to $TENSORD_TOKEN, else the shipped default credential (with
a client certificate and no token: the certificate authenticates).

commands:
  info                          daemon version, device, memory and counters
  whoami                        the principal the token authenticates as
  ops [--json]                  the ops the daemon offers: signature, dtypes, notes
                                (view: shares its input's memory; writes X: in place)
  ops NAME [--json]             one op in full: inputs, attrs with defaults and docs,
                                dtypes, outputs, view/mutates/differentiable
  put NAME FILE.npy             upload a .npy file and save it as NAME (replaces NAME)
  get NAME FILE.npy             download the tensor NAME into a .npy file
  call OP IN... [--attr key=value]... --out NAME
                                call OP on the named tensors IN... and save its
                                output as NAME (several outputs: --out a,b or
                                repeated --out); attr values: 3, 0.5, true,
                                text, 0,1 (int or float lists); a scalar
                                operand: add x --attr other=2.5
  ls [--json]                   named tensors: name, dtype, shape, bytes, owner
  rm NAME...                    delete named tensors

options:
  --connect HOST:PORT           daemon address; tls://HOST:PORT for TLS (the daemon's
                                certificate must be valid for HOST)
  --token TOKEN                 bearer token
  --ca FILE                     PEM CA that signed the daemon's certificate
                                ($TENSORD_CA; default: the system trust store)
  --cert FILE, --key FILE       PEM client certificate and key for mutual TLS
                                ($TENSORD_CERT, $TENSORD_KEY)
  --json                        machine-readable output on stdout
  --help, --version

.npy dtypes: float32, float16, int32, int64, uint8, bool (little-endian, C order).

exit codes: 0 ok; 1 the daemon refused or failed the request; 2 usage error;
3 cannot connect or authenticate; 4 local file error (bad .npy, unreadable file).
)";
}

}  // namespace tensord::cli
