// tensord_bench: drives a real tensord over loopback and prints, from one
// run, its figures next to a bare Cap'n Proto floor measured in the same run:
//   - tiny-op round trip p50/p99 vs a trivial Cap'n Proto call, and the
//     fixed cost of a transfer (4 bytes up, 4 bytes down) vs the same call.
//     A call's round trip ends with its answer, which the daemon sends once
//     the op is queued on the device, as a CUDA launch returns before its
//     kernel runs; so the tiny op is also timed with its result read back,
//     which waits for the device;
//   - a 100-op pipelined chain, the same chain in one Batch, the chain
//     captured once as a Graph and run (also with its result read back),
//     and 100 sequential round trips, vs one bare round trip; the pipelined
//     chain also vs a chain of 100 bare calls, each taking the result of the
//     one before, pipelined the same way;
//   - 8 and 64 clients at once issuing tiny ops: throughput and p99;
//   - upload/download GB/s vs a bare `-> stream` of the same bytes; downloads
//     both into a fresh vector (bytes()) and into a reused buffer (bytesInto());
//   - the tiny op and transfers again over TLS, on a second daemon started
//     with a throwaway certificate, vs the same floor over TLS.
// The floor's samples are taken alternately with tensord's (in rounds of
// the tiny op's calls, repeat by repeat for chains and transfers), so that
// both sides of a ratio see the host as it was at the time.
// It starts its own daemons on 127.0.0.1:0 unless --connect names one (TLS
// is then not measured). The figures are printed as a table and as one JSON
// document (a line at the end, or --json FILE).

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/echo_floor.h"
#include "bench/stats.h"
#include "tensord/client.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/self_signed.h"

namespace tensord::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr int kChainLength = 100;
constexpr int kClientCounts[] = {8, 64};

struct Options {
  std::string connect;  // "" = start a daemon
  std::string token{kDefaultToken};
  std::string tensord;  // daemon binary; "" = next to this program's build
  int iterations = 2000;
  int chainRepeats = 20;
  std::vector<uint64_t> sizes = {1ull << 20, 64ull << 20, 1ull << 30};
  std::vector<uint64_t> tlsSizes = {1ull << 20, 64ull << 20};
  bool tls = true;  // measure over TLS too (own daemons only)
  int repeats = 0;  // 0 = by size
  bool floorTensordWindow = true;  // the floor streams with tensord's window
  std::string json;  // "" = the JSON document goes to stdout, after the table
};

void usage(const char* argv0) {
  std::printf(
      "usage: %s [--quick] [--connect HOST:PORT] [--token T] [--tensord PATH]\n"
      "          [--iterations N] [--chain-repeats N] [--sizes 1M,64M,1G] [--repeats N]\n"
      "          [--tls-sizes 1M,64M] [--no-tls] [--floor-window tensord|capnp] [--json FILE]\n"
      "  --quick           200 tiny calls, 5 chains, sizes 1M,64M\n"
      "  --connect ADDR    use a running daemon (default: start one on 127.0.0.1:0)\n"
      "  --token T         token for --connect (default: the shipped default credential)\n"
      "  --tensord PATH    daemon binary to start (default: ../server/tensord next to this program)\n"
      "  --iterations N    tiny-op and bare calls timed (default 2000)\n"
      "  --chain-repeats N chains of 100 timed each way (default 20)\n"
      "  --sizes LIST      transfer sizes, K/M/G suffixes are binary (default 1M,64M,1G)\n"
      "  --repeats N       transfers per size (default 20 up to 1 MiB, 5 up to 64 MiB, else 2)\n"
      "  --tls-sizes LIST  transfer sizes over TLS (default 1M,64M)\n"
      "  --no-tls          skip the TLS daemon and its floor\n"
      "  --floor-window W  the floor's stream window: tensord's (default) or Cap'n Proto's\n"
      "                    default, the socket's send buffer\n"
      "  --json FILE       write the JSON document to FILE instead of stdout\n",
      argv0);
}

uint64_t parseSize(const std::string& text) {
  size_t used = 0;
  uint64_t value = std::stoull(text, &used);
  std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k") return value << 10;
  if (suffix == "M" || suffix == "m") return value << 20;
  if (suffix == "G" || suffix == "g") return value << 30;
  if (suffix.empty()) return value;
  throw std::invalid_argument("bad size '" + text + "' (use e.g. 64M)");
}

std::vector<uint64_t> parseSizes(const std::string& list) {
  std::vector<uint64_t> sizes;
  for (size_t at = 0; at < list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    sizes.push_back(parseSize(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return sizes;
}

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--quick") {
      o.iterations = 200;
      o.chainRepeats = 5;
      o.sizes = {1ull << 20, 64ull << 20};
    } else if (arg == "--connect") {
      o.connect = value();
    } else if (arg == "--token") {
      o.token = value();
    } else if (arg == "--tensord") {
      o.tensord = value();
    } else if (arg == "--iterations") {
      o.iterations = std::stoi(value());
    } else if (arg == "--chain-repeats") {
      o.chainRepeats = std::stoi(value());
    } else if (arg == "--repeats") {
      o.repeats = std::stoi(value());
    } else if (arg == "--sizes") {
      o.sizes = parseSizes(value());
    } else if (arg == "--tls-sizes") {
      o.tlsSizes = parseSizes(value());
    } else if (arg == "--no-tls") {
      o.tls = false;
    } else if (arg == "--json") {
      o.json = value();
    } else if (arg == "--floor-window") {
      std::string window = value();
      if (window != "tensord" && window != "capnp") throw std::invalid_argument("--floor-window takes tensord or capnp");
      o.floorTensordWindow = window == "tensord";
    } else if (arg == "--help" || arg == "-h") {
      usage(argv[0]);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + arg + "'");
    }
  }
  for (const auto* list : {&o.sizes, &o.tlsSizes}) {
    for (uint64_t s : *list) {
      if (s == 0 || s % 4 != 0) throw std::invalid_argument("transfer sizes must be positive multiples of 4 bytes");
    }
  }
  if (o.sizes.empty()) throw std::invalid_argument("--sizes needs at least one size");
  return o;
}

int repeatsFor(const Options& o, uint64_t bytes) {
  if (o.repeats > 0) return o.repeats;
  return bytes <= (1ull << 20) ? 20 : bytes <= (64ull << 20) ? 5 : 2;
}

std::string hostCpu() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// `clients` connections on threads of their own, each timing `calls` tiny
// adds (each waited for). Returns every latency and the wall time of all.
struct ManyClients {
  std::vector<double> latencies;
  double seconds = 0;
};
ManyClients runClients(const ConnectOptions& connect, int clients, int calls) {
  std::vector<std::vector<double>> per(static_cast<size_t>(clients));
  std::vector<std::string> errors(static_cast<size_t>(clients));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        Client client(connect);
        Tensor one = client.upload(Shape{1}, std::vector<float>{1.0f});
        for (int i = 0; i < 10; ++i) (one + one).wait();
        ++ready;
        while (!go) std::this_thread::yield();
        for (int i = 0; i < calls; ++i) {
          auto start = Clock::now();
          (one + one).wait();
          per[size_t(c)].push_back(since(start));
        }
      } catch (const std::exception& e) {
        errors[size_t(c)] = e.what();
        ++ready;
      }
    });
  }
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  ManyClients out{.seconds = since(start)};
  for (size_t c = 0; c < per.size(); ++c) {
    if (!errors[c].empty()) throw std::runtime_error("client " + std::to_string(c) + ": " + errors[c]);
    out.latencies.insert(out.latencies.end(), per[c].begin(), per[c].end());
  }
  return out;
}

// A size's transfers: tensord's, and the floor's taken alternately with them.
struct TransferTimes {
  std::vector<double> upload, download, downloadInto;
  std::vector<double> floorUpload, floorDownload;
};

// The floor's samples are taken alternately with tensord's, in rounds (a
// round of each, then the next), so that what drifts on a host over a run
// (a neighbour's load, the clock) lands on both sides of a ratio.
constexpr int kRounds = 10;

// `total` samples of each of `ways` (each a function of how many to take),
// one after another in kRounds rounds, after `warmup` of each not kept.
using Sampler = std::function<std::vector<double>(int)>;
std::vector<std::vector<double>> alternately(int warmup, int total, const std::vector<Sampler>& ways) {
  for (const auto& way : ways) way(warmup);
  std::vector<std::vector<double>> out(ways.size());
  for (int r = 0; r < kRounds; ++r) {
    const int n = total * (r + 1) / kRounds - total * r / kRounds;
    for (size_t w = 0; w < ways.size(); ++w) {
      for (double t : ways[w](n)) out[w].push_back(t);
    }
  }
  return out;
}

// Tiny adds on `one`, each waited for: the latency of each.
std::vector<double> timeTinyOps(const Tensor& one, int iterations) {
  std::vector<double> tiny;
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    Tensor sum = one + one;
    sum.wait();
    tiny.push_back(since(start));
  }
  return tiny;
}

// The daemon's own trivial call, Tensor.info (a handle's metadata: no op,
// no device work), each waited for. Between it and the floor's call lies
// what a connection to the daemon costs; between it and the tiny op, the
// op's own way through the daemon.
std::vector<double> timeTrivialCalls(const Tensor& one, int iterations) {
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    TensorInfo info = one.info();
    times.push_back(since(start));
    if (info.shape != Shape{1}) throw std::runtime_error("Tensor.info returned a wrong shape");
  }
  return times;
}

// The tiny op, the daemon's trivial call and the floor's trivial call,
// alternately (`alternately`).
struct RoundTrips {
  std::vector<double> tiny, trivial, floor;
};
RoundTrips timeRoundTrips(const Tensor& one, Floor& floor, int warmup, int iterations) {
  auto t = alternately(warmup, iterations,
                       {[&](int n) { return timeTinyOps(one, n); }, [&](int n) { return timeTrivialCalls(one, n); },
                        [&](int n) { return floor.pings(n); }});
  return {std::move(t[0]), std::move(t[1]), std::move(t[2])};
}

// The same op with its 4-byte result read back, which waits for the device:
// the round trip above ends with the call's answer, which the daemon sends
// once the op is queued (as a CUDA launch returns before the kernel runs).
std::vector<double> timeTinyReads(const Tensor& one, int warmup, int iterations) {
  std::vector<double> times;
  float two = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    auto start = Clock::now();
    (one + one).toHostInto(std::span(&two, 1));
    if (i >= warmup) times.push_back(since(start));
    if (two != 2.0f) throw std::runtime_error("the tiny op read back " + std::to_string(two) + ", expected 2");
  }
  return times;
}

// f32 tensors of `bytes` from `source`, up then down `repeats` times, each
// download checked against what went up; after each repeat, the floor's
// upload and download of the same bytes.
TransferTimes timeTransfers(Client& client, Floor& floor, std::span<const std::byte> source, uint64_t bytes,
                            int repeats) {
  TransferTimes t;
  const auto sent = source.first(bytes);
  // The caller's buffer, reused by every repeat: its pages are faulted in
  // once, here, as a framework's pinned destination tensor would be.
  std::vector<std::byte> reused(bytes);
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    Tensor tensor = client.upload(DType::F32, Shape{int64_t(bytes / 4)}, sent);
    tensor.wait();
    t.upload.push_back(since(start));
    start = Clock::now();
    std::vector<std::byte> back = tensor.bytes();
    t.download.push_back(since(start));
    if (back.size() != bytes || std::memcmp(back.data(), sent.data(), bytes) != 0) {
      throw std::runtime_error("a downloaded tensor differs from the uploaded bytes");
    }
    std::memset(reused.data(), 0xA5, bytes);  // so a download that lands nothing cannot pass
    start = Clock::now();
    tensor.bytesInto(reused);
    t.downloadInto.push_back(since(start));
    if (std::memcmp(reused.data(), sent.data(), bytes) != 0) {
      throw std::runtime_error("a tensor downloaded into a reused buffer differs from the uploaded bytes");
    }
    t.floorUpload.push_back(floor.upload(sent));
    t.floorDownload.push_back(floor.download(bytes));
  }
  return t;
}

// The floor's connection: tensord's stream window unless --floor-window
// capnp; TLS with `tls`'s certificate where given.
Floor::Options floorOptions(const Options& o, const testing::SelfSignedCertificate* tls) {
  Floor::Options f{.tensordWindow = o.floorTensordWindow};
  if (tls) {
    f.tlsCertPem = tls->certPem();
    f.tlsKeyPem = tls->keyPem();
  }
  return f;
}

// The tiny op's p50 / p99 against the floor's: table rows and JSON.
nlohmann::json tinyRows(const std::string& label, const std::vector<double>& tiny, const std::vector<double>& floor) {
  nlohmann::json out = nlohmann::json::object();
  for (double p : {50.0, 99.0}) {
    double t = percentile(tiny, p), f = percentile(floor, p);
    const std::string name = "p" + std::to_string(int(p));
    row(label + " " + name, {micros(t), micros(f), ratio(t / f)});
    out[name] = {{"tensord_s", t}, {"floor_s", f}, {"ratio", t / f}};
  }
  return out;
}

// Transfer rates against the floor's: table rows and JSON.
nlohmann::json transferRows(const std::vector<uint64_t>& sizes, const std::vector<int>& repeats,
                            const std::vector<TransferTimes>& transfers) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t s = 0; s < sizes.size(); ++s) {
    const uint64_t bytes = sizes[s];
    const double up = median(transfers[s].upload), down = median(transfers[s].download);
    const double into = median(transfers[s].downloadInto);
    const double fUp = median(transfers[s].floorUpload), fDown = median(transfers[s].floorDownload);
    const std::string repeatsNote = " (x" + std::to_string(repeats[s]) + ")";
    row("upload " + sizeName(bytes) + repeatsNote, {gbps(bytes, up), gbps(bytes, fUp), ratio(fUp / up)});
    row("download " + sizeName(bytes) + repeatsNote, {gbps(bytes, down), gbps(bytes, fDown), ratio(fDown / down)});
    row("download into reused " + sizeName(bytes) + repeatsNote,
        {gbps(bytes, into), gbps(bytes, fDown), ratio(fDown / into)});
    auto rate = [bytes](double seconds) { return double(bytes) / seconds / 1e9; };
    out.push_back({{"bytes", bytes},
                   {"repeats", repeats[s]},
                   {"upload_gbps", rate(up)},
                   {"download_gbps", rate(down)},
                   {"download_into_gbps", rate(into)},
                   {"floor_upload_gbps", rate(fUp)},
                   {"floor_download_gbps", rate(fDown)},
                   {"upload_ratio", fUp / up},
                   {"download_ratio", fDown / down},
                   {"download_into_ratio", fDown / into}});
  }
  return out;
}

const char* floorWindowName(const Options& o) { return o.floorTensordWindow ? "tensord's" : "Cap'n Proto's default"; }

// Over TLS: a daemon of its own with a throwaway certificate, the tiny op and
// the transfers of --tls-sizes, and the floor over TLS.
struct TlsRun {
  RoundTrips roundTrips;
  std::vector<int> repeats;
  std::vector<TransferTimes> transfers;
};

TlsRun measureTls(const Options& o, int warmup, std::span<const std::byte> source) {
  testing::SelfSignedCertificate certificate;
  testing::DaemonOptions d;
  d.binary = o.tensord.empty() ? defaultDaemonBinary() : std::filesystem::path(o.tensord);
  d.token = "bench-token";
  d.principal = "bench";
  d.extra["tls"] = {{"cert_file", certificate.certFile().string()}, {"key_file", certificate.keyFile().string()}};
  testing::DaemonProcess daemon(d);
  TlsRun run;
  {
    Floor floor(floorOptions(o, &certificate));
    Client client({.address = "tls://" + daemon.address(), .token = d.token, .caFile = certificate.certFile().string()});
    Tensor one = client.upload(Shape{1}, std::vector<float>{1.0f});
    one.wait();
    run.roundTrips = timeRoundTrips(one, floor, warmup, o.iterations);
    for (uint64_t bytes : o.tlsSizes) {
      run.repeats.push_back(repeatsFor(o, bytes));
      run.transfers.push_back(timeTransfers(client, floor, source, bytes, run.repeats.back()));
    }
  }
  auto status = daemon.stop();
  if (!status || *status != 0) {
    throw std::runtime_error("the TLS daemon did not exit cleanly on SIGTERM; its log:\n" + daemon.log());
  }
  return run;
}

int run(const Options& o) {
  std::unique_ptr<testing::DaemonProcess> daemon;
  ConnectOptions connectOptions{.address = o.connect, .token = o.token};
  if (o.connect.empty()) {
    testing::DaemonOptions d;
    d.binary = o.tensord.empty() ? defaultDaemonBinary() : std::filesystem::path(o.tensord);
    d.token = "bench-token";
    d.principal = "bench";
    daemon = std::make_unique<testing::DaemonProcess>(d);
    connectOptions = {.address = daemon->address(), .token = d.token};
  }

  uint64_t maxBytes = *std::max_element(o.sizes.begin(), o.sizes.end());
  for (uint64_t bytes : o.tlsSizes) maxBytes = std::max(maxBytes, bytes);
  std::vector<std::byte> source(maxBytes);
  for (size_t i = 0; i < source.size(); ++i) source[i] = std::byte(uint8_t(i * 2654435761u >> 13));

  Client client(connectOptions);
  DaemonInfo info = client.info();
  Floor floor(floorOptions(o, nullptr));

  // Tiny op: add on 1-element tensors, each call waited for, alternately
  // with the floor's trivial call.
  Tensor one = client.upload(Shape{1}, std::vector<float>{1.0f});
  one.wait();
  int warmup = std::min(50, o.iterations);
  RoundTrips roundTrips = timeRoundTrips(one, floor, warmup, o.iterations);
  const std::vector<double>& tiny = roundTrips.tiny;
  const std::vector<double>& floorPings = roundTrips.floor;
  std::vector<double> tinyRead = timeTinyReads(one, warmup, o.iterations);

  // The fixed cost of a transfer, with no bytes to speak of: a 4-byte upload
  // waited for, and a 4-byte download into a reused buffer.
  std::vector<double> tinyUp, tinyDown;
  std::array<std::byte, 4> four{};
  Tensor small = client.upload(DType::U8, Shape{4}, std::span(source.data(), 4));
  for (int i = 0; i < warmup + o.iterations; ++i) {
    auto start = Clock::now();
    client.upload(DType::U8, Shape{4}, std::span(source.data(), 4)).wait();
    if (i >= warmup) tinyUp.push_back(since(start));
    start = Clock::now();
    small.bytesInto(four);
    if (i >= warmup) tinyDown.push_back(since(start));
    if (std::memcmp(four.data(), source.data(), 4) != 0) throw std::runtime_error("a 4-byte download differs");
  }

  // Chains of adds: all pipelined (one wait), held in one Batch (one
  // message, one wait), a captured Graph's run, and one round trip each.
  // Each way is timed in a loop of its own, so that the daemon's clean-up
  // of one way's results (freeing 100 intermediates) does not land in the
  // next way's timing.
  std::vector<double> pipelined, barePipelined, batched, graphed, sequential;
  Graph chain = client.capture({{DType::F32, Shape{1}}}, [&](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    for (int i = 0; i < kChainLength; ++i) x = x + one;
    return std::vector<Tensor>{x};
  });
  auto check = [&](const Tensor& t, const char* what) {
    if (t.toHost() != std::vector<float>{float(kChainLength + 1)}) {
      throw std::runtime_error(std::string("the ") + what + " chain computed a wrong value");
    }
  };
  // ... the pipelined one alternately with the same chain of bare calls.
  floor.chain(kChainLength);  // warm-up
  for (int r = 0; r < o.chainRepeats; ++r) {
    auto start = Clock::now();
    Tensor x = one;
    for (int i = 0; i < kChainLength; ++i) x = x + one;
    x.wait();
    pipelined.push_back(since(start));
    if (r == 0) check(x, "pipelined");
    barePipelined.push_back(floor.chain(kChainLength));
  }
  for (int r = 0; r < o.chainRepeats; ++r) {
    auto start = Clock::now();
    Tensor z = one;
    {
      Batch batch(client);
      for (int i = 0; i < kChainLength; ++i) z = z + one;
    }
    z.wait();
    batched.push_back(since(start));
    if (r == 0) check(z, "batched");
  }
  // A graph's run costs about one round trip: it is timed as often as a
  // tenth of the tiny ops, for a steadier median than --chain-repeats gives.
  const int graphRuns = std::max(o.chainRepeats, o.iterations / 10);
  for (int r = 0; r < graphRuns; ++r) {
    auto start = Clock::now();
    Tensor g = chain.run({one})[0];
    g.wait();
    graphed.push_back(since(start));
    if (r == 0) check(g, "captured");
  }
  // ... and with its result read back, which waits for the device.
  std::vector<double> graphedRead;
  for (int r = 0; r < graphRuns; ++r) {
    float result = 0;
    auto start = Clock::now();
    chain.run({one})[0].toHostInto(std::span(&result, 1));
    graphedRead.push_back(since(start));
    if (result != float(kChainLength + 1)) throw std::runtime_error("the captured chain read back a wrong value");
  }
  for (int r = 0; r < o.chainRepeats; ++r) {
    auto start = Clock::now();
    Tensor y = one;
    for (int i = 0; i < kChainLength; ++i) {
      y = y + one;
      y.wait();
    }
    sequential.push_back(since(start));
  }

  // Many clients at once.
  std::vector<ManyClients> many;
  for (int clients : kClientCounts) many.push_back(runClients(connectOptions, clients, std::max(20, o.iterations / clients)));

  // Transfers: f32 tensors of each size, up then down, and the floor's.
  std::vector<TransferTimes> transfers;
  std::vector<int> repeats;
  for (uint64_t bytes : o.sizes) {
    repeats.push_back(repeatsFor(o, bytes));
    transfers.push_back(timeTransfers(client, floor, source, bytes, repeats.back()));
  }

  // Over TLS, on a daemon of its own, once this one is idle.
  std::optional<TlsRun> tls;
  if (o.tls && daemon) tls = measureTls(o, warmup, source);

  // ---- report
  nlohmann::json json = {{"bench", "tensord"},
                         {"version", info.version},
                         {"protocol", info.protocolVersion},
                         {"device", {{"name", info.device.name}, {"kind", info.device.kind},
                                     {"driver", info.device.driver}, {"vulkan", info.device.apiVersion}}},
                         {"host", {{"cpu", hostCpu()}, {"threads", std::thread::hardware_concurrency()}}},
                         {"daemon_started", bool(daemon)},
                         {"iterations", o.iterations},
                         {"floor_window", o.floorTensordWindow ? "tensord" : "capnp"}};
  std::printf("tensord_bench: tensord %s, protocol %u\n", info.version.c_str(), info.protocolVersion);
  std::printf("  device: %s (%s; driver %s; Vulkan %s; %.1f GiB)\n", info.device.name.c_str(), info.device.kind.c_str(),
              info.device.driver.c_str(), info.device.apiVersion.c_str(),
              double(info.device.memoryBytes) / double(1ull << 30));
  std::printf("  host:   %s, %u hardware threads\n", hostCpu().c_str(), std::thread::hardware_concurrency());
  std::printf("  daemon: %s (%s), client and floor over loopback TCP\n\n", connectOptions.address.c_str(),
              daemon ? "started by this run" : "already running");

  std::printf("round trip (%d calls each)\n", o.iterations);
  row("", {"tensord", "capnp floor", "tensord/floor"});
  json["tiny_op"] = tinyRows("tiny op (add, 1 element)", tiny, floorPings);
  json["trivial_call"] = tinyRows("trivial call (Tensor.info)", roundTrips.trivial, floorPings);
  json["tiny_op_read"] = tinyRows("... its result read back", tinyRead, floorPings);
  for (const auto& [label, key, times] : {std::tuple{"upload 4 bytes + wait p50", "upload_4_bytes", &tinyUp},
                                          {"download 4 bytes p50", "download_4_bytes", &tinyDown}}) {
    double t = percentile(*times, 50), f = percentile(floorPings, 50);
    row(label, {micros(t), micros(f), ratio(t / f)});
    json[key] = {{"tensord_p50_s", t}, {"floor_p50_s", f}, {"ratio", t / f}};
  }

  std::printf("\nchain of %d ops (add, 1 element), median of %d (graph runs: %d)\n", kChainLength, o.chainRepeats,
              graphRuns);
  row("", {"tensord", "capnp floor", "ratio"});
  const double pipe = median(pipelined), seq = median(sequential);
  const double bare = percentile(floorPings, 50);
  row("pipelined, one wait (/ floor)", {millis(pipe), micros(bare), ratio(pipe / bare)});
  // The same chain of bare Cap'n Proto calls: what pipelining 100 calls
  // costs with nothing behind them.
  const double barePipe = median(barePipelined);
  row("pipelined (/ capnp's pipelined chain)", {millis(pipe), millis(barePipe), ratio(pipe / barePipe)});
  const double batch = median(batched);
  row("in one Batch, one wait (/ floor)", {millis(batch), micros(bare), ratio(batch / bare)});
  const double graph = median(graphed);
  row("captured Graph, run, one wait (/ floor)", {millis(graph), micros(bare), ratio(graph / bare)});
  const double graphRead = median(graphedRead);
  row("... its result read back (/ floor)", {millis(graphRead), micros(bare), ratio(graphRead / bare)});
  row("sequential (/ pipelined)", {millis(seq), "", ratio(seq / pipe)});
  json["chain"] = {{"ops", kChainLength},
                   {"floor_s", bare},
                   {"pipelined_s", pipe},
                   {"pipelined_ratio", pipe / bare},
                   {"floor_pipelined_s", barePipe},
                   {"pipelined_floor_ratio", pipe / barePipe},
                   {"batched_s", batch},
                   {"batched_ratio", batch / bare},
                   {"graph_s", graph},
                   {"graph_ratio", graph / bare},
                   {"graph_read_s", graphRead},
                   {"graph_read_ratio", graphRead / bare},
                   {"sequential_s", seq}};

  std::printf("\nclients at once, each: tiny op (add, 1 element), waited for\n");
  row("", {"calls/s", "p50", "p99"});
  json["clients"] = nlohmann::json::array();
  for (size_t i = 0; i < many.size(); ++i) {
    const auto& m = many[i];
    const double rate = double(m.latencies.size()) / m.seconds;
    const double p50 = percentile(m.latencies, 50), p99 = percentile(m.latencies, 99);
    row(std::to_string(kClientCounts[i]) + " clients", {format("%.0f", rate), micros(p50), micros(p99)});
    json["clients"].push_back({{"clients", kClientCounts[i]}, {"calls_per_s", rate}, {"p50_s", p50}, {"p99_s", p99}});
  }

  std::printf(
      "\ntransfers (GB = 1e9 bytes; floor: `-> stream` in 1 MiB chunks, %s window), median;\n"
      "\"download\" lands in a fresh vector (bytes()), \"into reused\" in one buffer (bytesInto())\n",
      floorWindowName(o));
  row("", {"tensord", "capnp floor", "tensord/floor"});
  json["transfers"] = transferRows(o.sizes, repeats, transfers);

  if (tls) {
    std::printf("\nover TLS (a second daemon, a self-signed certificate; the floor over the same TLS stream)\n");
    row("", {"tensord", "capnp floor", "tensord/floor"});
    json["tls"] = {
        {"tiny_op", tinyRows("tiny op (add, 1 element)", tls->roundTrips.tiny, tls->roundTrips.floor)},
        {"trivial_call", tinyRows("trivial call (Tensor.info)", tls->roundTrips.trivial, tls->roundTrips.floor)},
        {"transfers", transferRows(o.tlsSizes, tls->repeats, tls->transfers)}};
  } else {
    std::printf("\nover TLS: not measured (%s)\n", daemon ? "--no-tls" : "--connect: TLS runs on daemons it starts");
    json["tls"] = nullptr;
  }
  std::fflush(stdout);

  if (o.json.empty()) {
    std::printf("%s\n", json.dump().c_str());
  } else {
    std::ofstream out(o.json);
    out << json.dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write " + o.json);
  }

  if (daemon) {
    auto status = daemon->stop();
    if (!status || *status != 0) {
      std::fprintf(stderr, "tensord did not exit cleanly on SIGTERM; its log:\n%s", daemon->log().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tensord::bench

int main(int argc, char** argv) {
  try {
    return tensord::bench::run(tensord::bench::parseOptions(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "tensord_bench: %s\n", e.what());
    tensord::bench::usage(argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensord_bench: %s\n", e.what());
    return 1;
  }
}
