// tensorctl argument parsing.

#include "client/cli_args.h"

#include <sys/stat.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
      {"whoami", {0, 0, "whoami [--json]"}},
      {"admin", {1, 1, "admin reload"}},
      {"ops", {0, 1, "ops [NAME] [--json]"}},
      {"put", {2, 2, "put NAME FILE.npy|FILE.safetensors"}},
      {"get", {2, SIZE_MAX, "get NAME... FILE.npy|FILE.safetensors"}},
      {"load", {1, 1, "load FILE.safetensors [--prefix P]"}},
      {"save", {1, SIZE_MAX, "save FILE.safetensors [NAME...] [--prefix P]"}},
      {"call", {1, SIZE_MAX, "call OP IN... [--attr key=value]... --out NAME"}},
      {"ls", {0, 1, "ls [PREFIX] [--limit N] [--after NAME] [--json]"}},
      {"rm", {1, SIZE_MAX, "rm NAME..."}},
      {"stat", {0, 0, "stat [--json]"}},
      {"kernel", {1, SIZE_MAX,
                  "kernel add NAME FILE.comp|FILE.spv (--inputs ... --outputs ... | --description FILE.json) | "
                  "kernel ls | kernel show NAME | kernel rm NAME..."}},
      {"group", {1, 2, "group create NAME --members HOST:PORT,... | group ls | group rm NAME"}},
      {"allreduce", {1, SIZE_MAX, "allreduce --group G NAME... [--op sum|mean|max|min]"}},
      {"broadcast", {1, SIZE_MAX, "broadcast --group G NAME... --root R"}},
      {"barrier", {0, 0, "barrier --group G"}},
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

// A whole number in [min, UINT32_MAX] for `option`.
uint32_t parseCount(const std::string& option, const std::string& text, uint32_t min) {
  uint32_t n = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || n < min) {
    throw UsageError(option + ": expected a whole number from " + std::to_string(min) + " to " +
                     std::to_string(UINT32_MAX) + ", got '" + text + "'");
  }
  return n;
}

uint32_t parseLimit(const std::string& text) {
  uint32_t n = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || n == 0) {
    throw UsageError("--limit: expected a whole number from 1 to " + std::to_string(UINT32_MAX) + ", got '" + text +
                     "'");
  }
  return n;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

}  // namespace

std::filesystem::path credentialsPath(const std::function<const char*(const char*)>& env) {
  if (const char* xdg = env("XDG_CONFIG_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "tensord" / "credentials";
  if (const char* home = env("HOME"); home && *home) {
    return std::filesystem::path(home) / ".config" / "tensord" / "credentials";
  }
  return {};
}

std::optional<Credentials> readCredentials(const std::filesystem::path& path) {
  if (path.empty()) return std::nullopt;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;  // no file: nothing to use
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw UsageError(path.string() + ": credentials file is accessible by group or others (mode " + mode +
                     "); refusing to use it: run chmod 600 " + path.string());
  }
  std::ifstream in(path);
  if (!in) throw UsageError(path.string() + ": cannot read the credentials file");
  Credentials out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string text = trim(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string where = path.string() + ":" + std::to_string(number) + ": ";
    size_t eq = text.find('=');
    if (eq == std::string::npos) throw UsageError(where + "expected 'key = value', got '" + text + "'");
    std::string key = trim(std::string_view(text).substr(0, eq));
    std::string value = trim(std::string_view(text).substr(eq + 1));
    if (value.empty()) throw UsageError(where + "'" + key + "' needs a value");
    auto file = [&] {  // relative file names are relative to the credentials file
      std::filesystem::path p(value);
      return p.is_absolute() ? value : (path.parent_path() / p).string();
    };
    if (key == "token") {
      out.token = value;
    } else if (key == "connect") {
      out.connect = value;
    } else if (key == "ca") {
      out.ca = file();
    } else if (key == "cert") {
      out.cert = file();
    } else if (key == "key") {
      out.key = file();
    } else {
      throw UsageError(where + "unknown key '" + key + "' (expected token, connect, ca, cert or key)");
    }
  }
  return out;
}

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
    } else if (name == "--limit") {
      options.limit = parseLimit(value());
    } else if (name == "--prefix") {
      options.prefix = value();
      options.hasPrefix = true;
    } else if (name == "--members") {
      std::string list = value();
      for (size_t at = 0;;) {
        size_t comma = list.find(',', at);
        std::string member = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (member.empty()) throw UsageError("--members: empty member in '" + list + "' (expected HOST:PORT,...)");
        options.members.push_back(std::move(member));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    } else if (name == "--group") {
      options.group = value();
      if (options.group.empty()) throw UsageError("--group needs a group name");
    } else if (name == "--op") {
      options.reduceOp = value();
      if (options.reduceOp != "sum" && options.reduceOp != "mean" && options.reduceOp != "max" &&
          options.reduceOp != "min") {
        throw UsageError("--op: expected sum, mean, max or min, got '" + options.reduceOp + "'");
      }
    } else if (name == "--root") {
      options.root = parseCount("--root", value(), 0);
    } else if (name == "--timeout") {
      options.timeoutMs = parseCount("--timeout", value(), 1);
    } else if (name == "--inputs" || name == "--outputs" || name == "--attrs" || name == "--push" ||
               name == "--workgroup" || name == "--grid" || name == "--doc" || name == "--description") {
      std::string text = value();
      if (text.empty()) throw UsageError(name + " needs a value");
      KernelFlags& k = options.kernel;
      (name == "--inputs"      ? k.inputs
       : name == "--outputs"   ? k.outputs
       : name == "--attrs"     ? k.attrs
       : name == "--push"      ? k.push
       : name == "--workgroup" ? k.workgroup
       : name == "--grid"      ? k.grid
       : name == "--doc"       ? k.doc
                               : k.descriptionFile) = std::move(text);
      k.given = true;
    } else if (name == "--replace") {
      noValue();
      options.kernel.replace = true;
      options.kernel.given = true;
    } else if (name == "--after") {
      options.after = value();
      if (options.after.empty()) throw UsageError("--after needs a tensor name");
    } else {
      throw UsageError("unknown option '" + name + "'");
    }
  }

  // Each setting: the flag, else the environment, else the credentials file,
  // else the default. The file is read only when something falls back to it.
  auto set = [&](const char* variable) {
    const char* v = env(variable);
    return v && *v;
  };
  const bool needFile = !(haveConnect || set("TENSORD_ADDR")) || !(haveToken || set("TENSORD_TOKEN")) ||
                        !(ca || set("TENSORD_CA")) || !(cert || set("TENSORD_CERT")) || !(key || set("TENSORD_KEY"));
  Credentials file;
  if (needFile && !options.help && !options.version) {
    if (auto read = readCredentials(credentialsPath(env))) file = std::move(*read);
  }
  if (haveConnect) {
    options.address = connect;
  } else if (const char* v = env("TENSORD_ADDR"); v && *v) {
    options.address = v;
  } else if (file.connect) {
    options.address = *file.connect;
  } else {
    options.address = std::string(kDefaultAddress);
  }
  auto fromEnv = [&](std::optional<std::string>& flag, const char* variable,
                     const std::optional<std::string>& fromFile) -> std::string {
    if (flag) return *flag;
    const char* v = env(variable);
    if (v && *v) return std::string(v);
    return fromFile.value_or(std::string());
  };
  options.caFile = fromEnv(ca, "TENSORD_CA", file.ca);
  options.certFile = fromEnv(cert, "TENSORD_CERT", file.cert);
  options.keyFile = fromEnv(key, "TENSORD_KEY", file.key);
  if (options.certFile.empty() != options.keyFile.empty()) {
    throw UsageError(options.certFile.empty() ? "--key needs --cert (or $TENSORD_CERT) too"
                                              : "--cert needs --key (or $TENSORD_KEY) too");
  }
  if (haveToken) {
    options.token = token;
  } else if (const char* v = env("TENSORD_TOKEN"); v && *v) {
    options.token = v;
  } else if (file.token) {
    options.token = *file.token;
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
  if (options.command != "ls" && (options.limit != 0 || !options.after.empty())) {
    throw UsageError(std::string(options.limit != 0 ? "--limit" : "--after") + " is only valid for 'ls'");
  }
  if (options.hasPrefix && options.command != "load" && options.command != "save") {
    throw UsageError("--prefix is only valid for 'load' and 'save'");
  }
  if (options.command == "get" && options.args.size() > 2 && !options.args.back().ends_with(".safetensors")) {
    throw UsageError("get: several names need a .safetensors file (a .npy file holds one tensor)");
  }
  if (options.command == "kernel") {
    const std::string& sub = options.args[0];
    const size_t n = options.args.size();
    if (sub == "add") {
      if (n != 3) throw UsageError("usage: tensorctl kernel add NAME FILE.comp|FILE.spv --inputs ... --outputs ...");
      const KernelFlags& k = options.kernel;
      const bool flags = !k.inputs.empty() || !k.outputs.empty() || !k.attrs.empty() || !k.push.empty() ||
                         !k.workgroup.empty() || !k.grid.empty() || !k.doc.empty();
      if (!k.descriptionFile.empty() && flags) {
        throw UsageError("kernel add: --description FILE.json holds the whole description; it cannot be combined "
                         "with --inputs, --outputs, --attrs, --push, --workgroup, --grid or --doc");
      }
      if (k.descriptionFile.empty() && k.outputs.empty()) {
        throw UsageError("kernel add needs --outputs NAME:DTYPE[:SHAPE],... (and usually --inputs NAME:DTYPE,...), "
                         "or --description FILE.json");
      }
    } else if (sub == "ls") {
      if (n != 1) throw UsageError("usage: tensorctl kernel ls [--json]");
    } else if (sub == "show") {
      if (n != 2) throw UsageError("usage: tensorctl kernel show NAME [--json]");
    } else if (sub == "rm") {
      if (n < 2) throw UsageError("usage: tensorctl kernel rm NAME...");
    } else {
      throw UsageError("unknown kernel command '" + sub + "' (expected add, ls, show or rm)");
    }
    if (sub != "add" && options.kernel.given) {
      throw UsageError("--inputs, --outputs, --attrs, --push, --workgroup, --grid, --doc, --description and "
                       "--replace are only valid for 'kernel add'");
    }
  } else if (options.kernel.given) {
    throw UsageError("--inputs, --outputs, --attrs, --push, --workgroup, --grid, --doc, --description and "
                     "--replace are only valid for 'kernel add'");
  }
  if (options.command == "admin" && options.args[0] != "reload") {
    throw UsageError("unknown admin command '" + options.args[0] + "' (usage: tensorctl admin reload)");
  }
  const bool collective = options.command == "allreduce" || options.command == "broadcast" ||
                          options.command == "barrier";
  if (options.command == "group") {
    const std::string& sub = options.args[0];
    if (sub != "create" && sub != "ls" && sub != "rm") {
      throw UsageError("unknown group command '" + sub + "' (expected create, ls or rm)");
    }
    if ((sub == "ls") != (options.args.size() == 1)) {
      throw UsageError(sub == "ls" ? "usage: tensorctl group ls" : "usage: tensorctl group " + sub + " NAME");
    }
    if ((sub == "create") != !options.members.empty()) {
      throw UsageError(sub == "create" ? "group create needs --members HOST:PORT,... (every member, by rank)"
                                       : "--members is only valid for 'group create'");
    }
  } else if (!options.members.empty()) {
    throw UsageError("--members is only valid for 'group create'");
  }
  if (collective && options.group.empty()) throw UsageError(options.command + " needs --group NAME");
  if (!collective && !options.group.empty()) throw UsageError("--group is only valid for allreduce, broadcast and barrier");
  if (!options.reduceOp.empty() && options.command != "allreduce") throw UsageError("--op is only valid for 'allreduce'");
  if (options.root && options.command != "broadcast") throw UsageError("--root is only valid for 'broadcast'");
  if (options.command == "broadcast" && !options.root) throw UsageError("broadcast needs --root R (the rank to copy from)");
  if (options.timeoutMs != 0 && !collective && !(options.command == "group" && options.args[0] == "create")) {
    throw UsageError("--timeout is only valid for group create, allreduce, broadcast and barrier");
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
the token defaults to $TENSORD_TOKEN, else the credentials file, else the
shipped default credential (with a client certificate and no token: the
certificate authenticates).

commands:
  info                          daemon version, device, memory and counters
  whoami [--json]               the principal the token authenticates as, its
                                roles and its quota use
  admin reload                  have the daemon re-read its tokens and policy
                                (as SIGHUP does; needs the &admin:reload right)
  ops [--json]                  the ops the daemon offers: signature, dtypes, notes
                                (view: shares its input's memory; grad: has a
                                backward op, NAME_backward; writes X: in place)
  ops NAME [--json]             one op in full: inputs, attrs with defaults and docs,
                                dtypes, outputs, view/mutates/differentiable
  put NAME FILE.npy             upload a .npy file and save it as NAME (replaces NAME)
  put NAME FILE.safetensors     upload every tensor T of the file as NAME/T
  get NAME FILE.npy             download the tensor NAME into a .npy file
  get NAME... FILE.safetensors  download into one file: a NAME that names a tensor
                                goes in under that name, any other NAME stands for
                                the tensors under NAME/, without it (put's inverse)
  load FILE.safetensors [--prefix P]
                                the daemon reads a file on its own disk (inside its
                                config's files.dirs) into named tensors: T becomes
                                P+T, replacing existing names (needs &files:load)
  save FILE.safetensors [NAME...] [--prefix P]
                                the daemon writes the tensors P+NAME (no NAME: all
                                you may read starting with P) into a file on its
                                disk, named without P; replaces the file
                                (needs &files:save)
  call OP IN... [--attr key=value]... --out NAME
                                call OP on the named tensors IN... and save its
                                output as NAME (several outputs: --out a,b or
                                repeated --out); attr values: 3, 0.5, true,
                                text, 0,1 (int or float lists); a scalar
                                operand: add x --attr other=2.5
  ls [PREFIX] [--json]          named tensors (those starting with PREFIX): name,
                                dtype, shape, bytes, owner
     [--limit N] [--after NAME] at most N of them, starting after NAME; when
                                more follow, says how to go on (on stderr)
  rm NAME...                    delete named tensors
  kernel add NAME FILE.comp|FILE.spv --inputs x:f32,... --outputs y:f32[:SHAPE],...
       [--attrs alpha:float=1.5,...] [--push EXPR,...] [--workgroup X[,Y,Z]]
       [--grid EXPR[,EXPR,EXPR]] [--doc TEXT] [--replace]
                                register a GLSL (.comp, .glsl) or SPIR-V (.spv)
                                compute kernel as op user.NAME; SHAPE: an input's
                                name (default: the first input) or [EXPR, ...];
                                or --description FILE.json instead of the flags
                                (docs/kernels.md; needs @kernel)
  kernel ls [--json]            the registered kernels: name, owner, signature
  kernel show NAME [--json]     one kernel: description and source
  kernel rm NAME...             remove kernels (yours, or any with @kernel)
  stat [--json]                 the daemon's load: uptime, device memory, connections,
                                queue, bytes moved, use per principal, and per op
                                calls and latency percentiles (needs &admin:usage)
  group create NAME --members HOST:PORT,... [--timeout MS]
                                form group NAME of daemons (each member's listener,
                                by rank; tls://HOST:PORT for TLS): connects to every
                                member with these credentials and has each join at
                                once (needs &group:create on each)
  group ls [--json]             the groups the daemon belongs to: rank, size,
                                state, members
  group rm NAME                 every member of NAME (as the daemon knows them)
                                leaves it
  allreduce --group G NAME... [--op sum|mean|max|min] [--timeout MS]
                                all-reduce the named tensors in place on every
                                member of G at once (members from the daemon's
                                view of G; each member's tensor of that name)
  broadcast --group G NAME... --root R [--timeout MS]
                                copy rank R's named tensors over every member's
  barrier --group G [--timeout MS]
                                returns once every member of G reached it

options:
  --connect HOST:PORT           daemon address; tls://HOST:PORT for TLS (the daemon's
                                certificate must be valid for HOST)
  --token TOKEN                 bearer token
  --ca FILE                     PEM CA that signed the daemon's certificate
                                ($TENSORD_CA; default: the system trust store)
  --cert FILE, --key FILE       PEM client certificate and key for mutual TLS
                                ($TENSORD_CERT, $TENSORD_KEY)
  --json                        machine-readable output on stdout
  --timeout MS                  group create and collectives: give up after MS
                                milliseconds (default: the daemon's groups.timeout_ms)
  --help, --version

credentials file: $XDG_CONFIG_HOME/tensord/credentials (default
~/.config/tensord/credentials), mode 0600 or stricter, lines 'key = value':
  token = TOKEN      connect = [tls://]HOST:PORT
  ca = FILE          cert = FILE          key = FILE
Flags beat environment variables, which beat the file.

.npy dtypes: float32, float16, int32, int64, uint8, bool (little-endian, C order).
.safetensors dtypes: F32, F16, BF16, I32, I64, U8, BOOL.

exit codes: 0 ok; 1 the daemon refused or failed the request; 2 usage error;
3 cannot connect or authenticate; 4 local file error (bad .npy or .safetensors,
unreadable file).
)";
}

}  // namespace tensord::cli
