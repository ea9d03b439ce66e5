// load_bench: what a server-side checkpoint load (Session.loadFile) costs
// the daemon's other clients.
//
// It writes a safetensors file of --bytes (tensors of at most 256 MiB) into
// a directory the daemon's config lists under files.dirs, starts the daemon,
// and times a light client's tiny op (an add on one element, read back), one
// call at a time: first on an idle daemon, then while another client, on its
// own connection and thread, has the daemon load the file. The file was just
// written, so it is read from the page cache: the figure is about the event
// loop and the staging pool, not the disk. A whoami per sample shows the
// event loop alone (no device work). Prints p50/p99 in both states and the
// load's throughput, as a table and as one JSON line.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "format/safetensors.h"
#include "tensord/client.h"
#include "tests/integration/daemon_process.h"

namespace tensord::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Options {
  std::string tensord;  // "" = next to this program's build
  uint64_t bytes = uint64_t(1) << 30;
  int samples = 200;  // tiny calls timed on the idle daemon
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--tensord PATH] [--bytes N] [--samples S]\n"
      "  --bytes N     size of the checkpoint's tensor data (default 1073741824)\n"
      "  --samples S   tiny calls timed on the idle daemon (default 200); during the\n"
      "                load, as many as fit\n",
      argv0);
}

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--tensord")
      o.tensord = value();
    else if (arg == "--bytes")
      o.bytes = std::stoull(value());
    else if (arg == "--samples")
      o.samples = std::stoi(value());
    else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown option " + arg);
    }
  }
  if (o.bytes < 4 || o.samples < 1) throw std::invalid_argument("--bytes and --samples must be positive");
  return o;
}

// F32 tensors "t0", "t1", ... of at most 256 MiB, --bytes in all.
void writeCheckpoint(const std::filesystem::path& path, uint64_t bytes) {
  constexpr uint64_t kPiece = uint64_t(256) << 20;
  std::vector<safetensors::TensorEntry> tensors;
  for (uint64_t left = bytes / 4 * 4, i = 0; left > 0; ++i) {
    const uint64_t n = std::min(left, kPiece);
    tensors.push_back({"t" + std::to_string(i), safetensors::DType::F32, {int64_t(n / 4)}});
    left -= n;
  }
  const std::string header = safetensors::encodeHeader(tensors, {});
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(header.data(), std::streamsize(header.size()));
  std::vector<char> block(8 << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = char(i * 2654435761u >> 24);
  for (uint64_t left = tensors.back().end; left > 0;) {
    const uint64_t n = std::min<uint64_t>(left, block.size());
    out.write(block.data(), std::streamsize(n));
    left -= n;
  }
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
}

// One tiny op, read back: what an interactive client waits for.
double tinyCall(Client& client, const Tensor& one) {
  const auto start = Clock::now();
  (void)client.call1("add", {one, one}).toHost();
  return since(start);
}

// A request the event loop answers alone, with no device work: if the load
// blocked the loop, this is what would show it.
double loopCall(Client& client) {
  const auto start = Clock::now();
  (void)client.whoami();
  return since(start);
}

int run(const Options& o) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "tensord-load-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{dir};
  writeCheckpoint(dir / "ckpt.safetensors", o.bytes);

  testing::DaemonOptions options;
  options.binary = o.tensord.empty() ? defaultDaemonBinary() : fs::path(o.tensord);
  // The loader is a principal of its own, so the device queue shares its
  // turns between the two (device_sharing "fair").
  options.extra = {{"files", {{"dirs", {dir.string()}}}},
                   {"auth",
                    {{"tokens",
                      {{{"principal", options.principal}, {"token_sha256", testing::sha256Hex(options.token)}},
                       {{"principal", "loader"}, {"token_sha256", testing::sha256Hex("loader-token")}}}}}}};
  testing::DaemonProcess daemon(options);
  const ConnectOptions connect{.address = daemon.address(), .token = daemon.token()};
  const ConnectOptions loaderConnect{.address = daemon.address(), .token = "loader-token"};

  Client light(connect);
  const std::vector<float> value = {1.0f};
  Tensor one = light.upload({1}, value);
  for (int i = 0; i < 20; ++i) tinyCall(light, one);  // warm: kernels, connection
  std::vector<double> idle, idleLoop;
  for (int i = 0; i < o.samples; ++i) {
    idle.push_back(tinyCall(light, one));
    idleLoop.push_back(loopCall(light));
  }

  std::atomic<bool> loading{true};
  double loadSeconds = 0;
  std::string loadError;
  std::thread loader([&] {
    try {
      Client heavy(loaderConnect);
      const auto start = Clock::now();
      heavy.loadFile("ckpt.safetensors", "ckpt/");
      loadSeconds = since(start);
    } catch (const std::exception& e) {
      loadError = e.what();
    }
    loading = false;
  });
  std::vector<double> during, duringLoop;
  while (loading) {
    during.push_back(tinyCall(light, one));
    duringLoop.push_back(loopCall(light));
  }
  loader.join();
  if (!loadError.empty()) throw std::runtime_error("load failed: " + loadError);

  std::printf("checkpoint load of %s (%s of data): a light client's latency\n", sizeName(o.bytes).c_str(),
              format("%.0f MB", double(o.bytes) / 1e6).c_str());
  row("", {"p50", "p99", "samples"});
  row("tiny op (add, read back), idle",
      {micros(median(idle)), micros(percentile(idle, 99)), std::to_string(idle.size())});
  row("tiny op during the load",
      {micros(median(during)), micros(percentile(during, 99)), std::to_string(during.size())});
  const double p99Ratio = percentile(during, 99) / percentile(idle, 99);
  row("tiny op p99 during / idle", {"", ratio(p99Ratio), ""});
  row("whoami (loop only), idle", {micros(median(idleLoop)), micros(percentile(idleLoop, 99)), ""});
  row("whoami during the load", {micros(median(duringLoop)), micros(percentile(duringLoop, 99)), ""});
  const double loopRatio = percentile(duringLoop, 99) / percentile(idleLoop, 99);
  row("whoami p99 during / idle", {"", ratio(loopRatio), ""});
  row("load", {millis(loadSeconds), gbps(o.bytes, loadSeconds), ""});
  nlohmann::json line = {{"bench", "load"},
                         {"bytes", o.bytes},
                         {"idle_p50_s", median(idle)},
                         {"idle_p99_s", percentile(idle, 99)},
                         {"load_p50_s", median(during)},
                         {"load_p99_s", percentile(during, 99)},
                         {"samples_during_load", during.size()},
                         {"p99_ratio", p99Ratio},
                         {"idle_loop_p99_s", percentile(idleLoop, 99)},
                         {"load_loop_p99_s", percentile(duringLoop, 99)},
                         {"loop_p99_ratio", loopRatio},
                         {"load_seconds", loadSeconds}};
  std::printf("%s\n", line.dump().c_str());
  for (const auto& info : light.list("ckpt/")) light.remove(info.name);  // no 1 GiB state file at stop
  daemon.stop();
  return 0;
}

}  // namespace
}  // namespace tensord::bench

int main(int argc, char** argv) {
  try {
    return tensord::bench::run(tensord::bench::parseOptions(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "load_bench: %s\n", e.what());
    return 1;
  }
}
