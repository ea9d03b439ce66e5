// fairness_bench: how long a light client's tiny op waits while a heavy
// client keeps the device saturated.
//
// For each way of sharing the device (device_sharing "fifo", then "fair") it
// starts a daemon with two principals. The light client times a tiny add,
// one call at a time: first on an idle device, then while the heavy client,
// on its own connection and thread, keeps rounds of --inflight matmuls of
// N x N queued on the device.
// It prints p50/p99 of the light op in both states and the heavy client's
// matmul throughput, as a table and as one JSON line.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "tensord/client.h"
#include "tests/integration/daemon_process.h"

namespace tensord::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Options {
  std::string tensord;  // "" = next to this program's build
  int64_t n = 512;      // heavy matmul size
  int inflight = 64;    // heavy calls kept queued
  int samples = 200;    // light calls timed per state
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--tensord PATH] [--n N] [--inflight K] [--samples S]\n"
      "  --n N          the heavy client's matmuls are N x N f32 (default 512; 4096 on a big GPU)\n"
      "  --inflight K   matmuls per round the heavy client queues (default 64)\n"
      "  --samples S    light calls timed per state (default 200)\n",
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
    if (arg == "--tensord") o.tensord = value();
    else if (arg == "--n") o.n = std::stoll(value());
    else if (arg == "--inflight") o.inflight = std::stoi(value());
    else if (arg == "--samples") o.samples = std::stoi(value());
    else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "'");
    }
  }
  if (o.n <= 0 || o.inflight <= 0 || o.samples <= 0) throw std::invalid_argument("--n, --inflight, --samples must be > 0");
  return o;
}

// Latencies of `samples` tiny adds, each until its result is read back (a
// call returns once queued; the download waits for the device).
std::vector<double> timeLight(const Tensor& one, int samples) {
  std::vector<double> out;
  for (int i = 0; i < samples; ++i) {
    auto start = Clock::now();
    std::vector<float> sum = (one + one).toHost();
    out.push_back(since(start));
    if (sum != std::vector<float>{2.0f}) throw std::runtime_error("the light client's add computed a wrong value");
  }
  return out;
}

// The heavy client: keeps `inflight` matmuls queued until `stop`.
class Heavy {
 public:
  Heavy(ConnectOptions connect, int64_t n, int inflight) : inflight_(inflight) {
    thread_ = std::thread([this, connect, n, inflight] {
      try {
        Client client(connect);
        std::vector<float> data(size_t(n * n));
        for (size_t i = 0; i < data.size(); ++i) data[i] = float(i % 7) * 0.01f;
        Tensor a = client.upload(Shape{n, n}, data);
        // Rounds of `inflight` matmuls, each round ended by reading one
        // element of its last result. A call returns once its op is queued,
        // and anything that waits for the device (this read) queues behind
        // everything before it, so rounds keep between 0 and `inflight`
        // matmuls queued (about half on average) with the device kept busy.
        while (!stop_) {
          Tensor last;
          for (int i = 0; i < inflight; ++i) last = matmul(a, a);
          client.call1("narrow", {client.call1("flatten", {last})},
                       {{"dim", int64_t(0)}, {"start", int64_t(0)}, {"length", int64_t(1)}})
              .toHost();
          if (done_ == 0) started_ = Clock::now();
          else elapsedRounds_ = since(started_);
          done_ += inflight;
          saturated_ = true;
        }
        elapsed_ = elapsedRounds_;
      } catch (const std::exception& e) {
        error_ = e.what();
        saturated_ = true;
      }
    });
  }
  ~Heavy() { finish(); }

  void waitSaturated() const {
    while (!saturated_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!error_.empty()) throw std::runtime_error("heavy client: " + error_);
  }
  // Stops issuing, waits for what is queued; returns matmuls per second.
  double finish() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
    if (!error_.empty()) throw std::runtime_error("heavy client: " + error_);
    // The first round is not timed.
    return elapsed_ > 0 ? double(done_ - inflight_) / elapsed_ : 0;
  }

 private:
  const int inflight_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> saturated_{false};
  std::atomic<int64_t> done_{0};
  Clock::time_point started_ = Clock::now();
  double elapsed_ = 0;
  double elapsedRounds_ = 0;  // from the end of the first round to the end of the last
  std::string error_;
  std::thread thread_;
};

struct Result {
  std::string sharing;
  std::vector<double> idle, loaded;
  double heavyPerSecond = 0;
};

Result measure(const Options& o, const std::string& sharing, std::string* deviceName) {
  testing::DaemonOptions d;
  d.binary = o.tensord.empty() ? defaultDaemonBinary() : std::filesystem::path(o.tensord);
  d.principal = "light";
  d.token = "light-token";
  nlohmann::json tokens = nlohmann::json::array();
  for (const char* name : {"light", "heavy"}) {
    tokens.push_back({{"principal", name}, {"token_sha256", testing::sha256Hex(std::string(name) + "-token")}});
  }
  d.extra = {{"auth", {{"tokens", tokens}}}, {"device_sharing", sharing}};
  testing::DaemonProcess daemon(d);

  Client light({.address = daemon.address(), .token = "light-token"});
  *deviceName = light.info().device.name;
  Tensor one = light.upload(Shape{1}, std::vector<float>{1.0f});
  one.wait();
  Result r{.sharing = sharing};
  timeLight(one, 20);  // warm-up: pipelines compiled, connection hot
  r.idle = timeLight(one, o.samples);
  {
    Heavy heavy({.address = daemon.address(), .token = "heavy-token"}, o.n, o.inflight);
    heavy.waitSaturated();
    r.loaded = timeLight(one, o.samples);
    r.heavyPerSecond = heavy.finish();
  }
  daemon.stop();
  return r;
}

int run(const Options& o) {
  std::string device;
  std::vector<Result> results;
  for (const char* sharing : {"fifo", "fair"}) results.push_back(measure(o, sharing, &device));

  const double flopsPerMatmul = 2.0 * double(o.n) * double(o.n) * double(o.n);
  std::printf("fairness_bench: device %s\n", device.c_str());
  std::printf("  light: add of 1-element tensors, one call at a time, %d samples per state\n", o.samples);
  std::printf("  heavy: matmul %lld x %lld f32, rounds of %d calls queued, on its own connection\n\n", (long long)o.n,
              (long long)o.n, o.inflight);
  row("device_sharing", {"idle p50", "idle p99", "loaded p50", "loaded p99", "p99 ratio", "heavy GFLOP/s"});
  nlohmann::json json = {{"bench", "fairness"}, {"device", device}, {"n", o.n}, {"inflight", o.inflight}};
  for (const Result& r : results) {
    const double idle99 = percentile(r.idle, 99), loaded99 = percentile(r.loaded, 99);
    row(r.sharing, {millis(median(r.idle)), millis(idle99), millis(median(r.loaded)), millis(loaded99),
                    ratio(loaded99 / idle99), format("%.1f", r.heavyPerSecond * flopsPerMatmul / 1e9)});
    json[r.sharing] = {{"idle_p50_s", median(r.idle)},     {"idle_p99_s", idle99},
                       {"loaded_p50_s", median(r.loaded)}, {"loaded_p99_s", loaded99},
                       {"heavy_matmuls_per_s", r.heavyPerSecond}};
  }
  std::printf("\n  loaded p99, fifo / fair: %.1fx\n", percentile(results[0].loaded, 99) / percentile(results[1].loaded, 99));
  std::printf("%s\n", json.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tensord::bench

int main(int argc, char** argv) {
  try {
    return tensord::bench::run(tensord::bench::parseOptions(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fairness_bench: %s\n", e.what());
    return 1;
  }
}
