// tensorctl: the command-line client of tensord.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "client/attr_parse.h"
#include "client/commands.h"
#include "client/npy.h"
#include "format/safetensors.h"

namespace {

using tensord::cli::Connector;
using tensord::cli::Options;

int dispatch(const Options& options) {
  using Command = int (*)(const Options&, Connector&);
  static const std::map<std::string, Command> commands = {
      {"info", tensord::cli::cmdInfo}, {"whoami", tensord::cli::cmdWhoami}, {"ops", tensord::cli::cmdOps},
      {"ls", tensord::cli::cmdLs},     {"rm", tensord::cli::cmdRm},         {"put", tensord::cli::cmdPut},
      {"get", tensord::cli::cmdGet},   {"call", tensord::cli::cmdCall},
      {"load", tensord::cli::cmdLoad},   {"save", tensord::cli::cmdSave},
      {"admin", tensord::cli::cmdAdmin},       {"stat", tensord::cli::cmdStat},
      {"kernel", tensord::cli::cmdKernel},
      {"group", tensord::cli::cmdGroup},       {"allreduce", tensord::cli::cmdCollective},
      {"broadcast", tensord::cli::cmdCollective}, {"barrier", tensord::cli::cmdCollective},
  };
  Connector connector(options);
  return commands.at(options.command)(options, connector);
}

int fail(int code, const char* message) {
  std::fprintf(stderr, "tensorctl: %s\n", message);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A daemon that goes away mid-write must surface as an error, not kill us.
  std::signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> args(argv + 1, argv + argc);
  Options options;
  try {
    options = tensord::cli::parseArgs(args, [](const char* name) { return std::getenv(name); });
  } catch (const tensord::cli::UsageError& e) {
    std::fprintf(stderr, "tensorctl: %s\nRun 'tensorctl --help' for usage.\n", e.what());
    return 2;
  }
  if (options.help) {
    std::fputs(tensord::cli::usage().c_str(), stdout);
    return 0;
  }
  if (options.version) {
    std::printf("tensorctl %s\n", TENSORD_VERSION);
    return 0;
  }

  try {
    return dispatch(options);
  } catch (const tensord::cli::UsageError& e) {
    std::fprintf(stderr, "tensorctl: %s\nRun 'tensorctl --help' for usage.\n", e.what());
    return 2;
  } catch (const tensord::cli::AttrError& e) {
    return fail(2, e.what());
  } catch (const tensord::cli::ConnectError& e) {
    return fail(3, e.what());
  } catch (const tensord::npy::NpyError& e) {
    return fail(4, e.what());
  } catch (const tensord::safetensors::FormatError& e) {
    return fail(4, e.what());
  } catch (const tensord::Error& e) {
    return fail(1, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
