// collective_bench: allreduce between tensord daemons on loopback, in
// nccl-tests' terms, next to the same allreduce through torch.distributed's
// gloo backend measured in the same run; then the step time of data-parallel
// training with and without overlapping the gradient all-reduce with the
// backward pass (DistributedDataParallel).
//
//   collective_bench [--ranks 2,3,4] [--min-bytes 1K] [--max-bytes 1G] [--seconds S] [--iters N]
//                    [--connect A,B,...] [--token T] [--no-torch] [--no-ddp] [--ddp-steps N]
//                    [--json FILE] [--chunk-bytes B] [--daemon-log-level L --daemon-logs FILE]
//
// Without --connect it starts the daemons itself, n for each n of --ranks
// (a config with groups.node_credentials so they can dial each other); with
// --connect it uses those (one n: their count). Sizes go up by 4x from
// --min-bytes to --max-bytes. Each size: a tensor of f32 zeros on every
// daemon, one warm-up allreduce (sum, in place), then I back-to-back
// allreduces issued on every daemon and waited for at the end; time = the
// wall time / I, I = --iters or as many as fit in about --seconds.
//   algbw = bytes / time;  busbw = algbw * 2(n-1)/n   (nccl-tests' allreduce)
// The daemons are BUILD/server/tensord, next to this binary. The torch
// reference is bench/torch_gloo_allreduce.py run with /usr/bin/python3
// (Debian's python3-torch); skipped with a note when torch is missing.
// Prints a table per n and a JSON document (stdout, or --json FILE).
// --chunk-bytes sets the started daemons' groups.chunk_bytes.
// --daemon-log-level starts the daemons with that log_level (trace shows
// every chunk) and --daemon-logs appends their logs to FILE at the end.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "tensord/distributed.h"
#include "tensord/optim.h"
#include "tests/integration/daemon_cluster.h"
#include "tests/integration/process.h"

namespace tensord::bench {
namespace {

using Clock = std::chrono::steady_clock;
using testing::DaemonCluster;

struct Args {
  std::vector<size_t> ranks = {2, 3, 4};
  uint64_t minBytes = 1 << 10, maxBytes = uint64_t(1) << 30;
  double seconds = 1.0;
  int iters = 0;
  std::vector<std::string> connect;
  std::string token = "integration-test-token";
  bool torch = true, ddp = true;
  int ddpSteps = 8;
  std::string jsonFile;
  uint64_t chunkBytes = 0;     // 0: the daemons' default
  std::string daemonLogLevel;  // "": the default
  std::string daemonLogs;      // file the daemons' logs go to, or ""
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "collective_bench: %s\nusage: collective_bench [--ranks 2,3,4] [--min-bytes 1K] [--max-bytes 1G] "
               "[--seconds S] [--iters N] [--connect A,B,...] [--token T] [--no-torch] [--no-ddp] [--ddp-steps N] "
               "[--json FILE] [--chunk-bytes B] [--daemon-log-level L] [--daemon-logs FILE]\n",
               problem.c_str());
  std::exit(2);
}

uint64_t parseBytes(const std::string& text) {
  size_t end = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(text, &end);
  } catch (const std::exception&) {
    usage("expected a size like 4096, 64K, 16M or 1G, got '" + text + "'");
  }
  std::string unit = text.substr(end);
  if (unit == "K") n <<= 10;
  else if (unit == "M") n <<= 20;
  else if (unit == "G") n <<= 30;
  else if (!unit.empty()) usage("unknown size unit in '" + text + "' (K, M or G)");
  if (n < 4 || n % 4 != 0) usage("sizes must be positive multiples of 4 bytes, got '" + text + "'");
  return n;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--ranks") {
      a.ranks.clear();
      for (const auto& r : split(value())) a.ranks.push_back(std::stoul(r));
    } else if (arg == "--min-bytes") a.minBytes = parseBytes(value());
    else if (arg == "--max-bytes") a.maxBytes = parseBytes(value());
    else if (arg == "--seconds") a.seconds = std::stod(value());
    else if (arg == "--iters") a.iters = std::stoi(value());
    else if (arg == "--connect") a.connect = split(value());
    else if (arg == "--token") a.token = value();
    else if (arg == "--no-torch") a.torch = false;
    else if (arg == "--no-ddp") a.ddp = false;
    else if (arg == "--ddp-steps") a.ddpSteps = std::stoi(value());
    else if (arg == "--json") a.jsonFile = value();
    else if (arg == "--daemon-log-level") a.daemonLogLevel = value();
    else if (arg == "--chunk-bytes") a.chunkBytes = parseBytes(value());
    else if (arg == "--daemon-logs") a.daemonLogs = value();
    else usage("unknown argument '" + arg + "'");
  }
  if (!a.connect.empty()) a.ranks = {a.connect.size()};
  for (size_t n : a.ranks) {
    if (n < 2) usage("--ranks: a group needs at least 2 daemons");
  }
  if (a.minBytes > a.maxBytes) usage("--min-bytes is larger than --max-bytes");
  return a;
}

std::vector<uint64_t> sizes(const Args& a) {
  std::vector<uint64_t> out;
  for (uint64_t s = a.minBytes; s <= a.maxBytes; s *= 4) out.push_back(s);
  if (out.back() != a.maxBytes) out.push_back(a.maxBytes);
  return out;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%llu GiB", (unsigned long long)(bytes >> 30));
  else if (bytes >= (1 << 20)) std::snprintf(buf, sizeof buf, "%llu MiB", (unsigned long long)(bytes >> 20));
  else if (bytes >= (1 << 10)) std::snprintf(buf, sizeof buf, "%llu KiB", (unsigned long long)(bytes >> 10));
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

// The daemons of one n: started here, or given with --connect.
struct Members {
  std::unique_ptr<DaemonCluster> cluster;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Client*> ptrs;
  std::vector<std::string> addresses;
};

Members open(const Args& a, size_t n) {
  Members m;
  if (a.connect.empty()) {
    testing::ClusterOptions options{.binary = defaultDaemonBinary()};
    if (!a.daemonLogLevel.empty()) options.extra["log_level"] = a.daemonLogLevel;
    options.chunkBytes = a.chunkBytes;
    m.cluster = std::make_unique<DaemonCluster>(n, options);
    m.addresses = m.cluster->members();
  } else {
    m.addresses = a.connect;
  }
  for (size_t r = 0; r < n; ++r) {
    m.clients.push_back(std::make_unique<Client>(
        ConnectOptions{.address = m.addresses[r], .token = m.cluster ? m.cluster->at(r).token() : a.token}));
    m.ptrs.push_back(m.clients.back().get());
  }
  formGroup(m.ptrs, "bench", m.addresses);
  return m;
}

struct Row {
  uint64_t bytes = 0;
  int iters = 0;
  double time = 0, algbw = 0, busbw = 0;
  double torchTime = 0, torchBusbw = 0;  // 0: not measured
};

// Per-op seconds of `iters` back-to-back in-place allreduces of `tensors`.
double timeAllreduce(Members& m, const std::vector<Tensor>& tensors, int iters) {
  const Attrs attrs = {{"op", std::string("sum")}, {"in_place", true}};
  auto start = Clock::now();
  std::vector<Tensor> last(m.ptrs.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t r = 0; r < m.ptrs.size(); ++r) last[r] = m.ptrs[r]->collective("bench", "allreduce", {tensors[r]}, attrs).front();
  }
  for (const Tensor& t : last) t.wait();
  return seconds(Clock::now() - start) / iters;
}

std::vector<Row> allreduceSweep(const Args& a, Members& m) {
  const size_t n = m.ptrs.size();
  std::vector<Row> rows;
  for (uint64_t bytes : sizes(a)) {
    std::vector<Tensor> tensors;
    for (Client* c : m.ptrs) {
      tensors.push_back(c->call1("full", {}, {{"size", std::vector<int64_t>{int64_t(bytes / 4)}},
                                              {"fill_value", 0.0}, {"dtype", std::string("f32")}}));
    }
    for (const Tensor& t : tensors) t.wait();
    timeAllreduce(m, tensors, 1);               // warm-up
    double one = timeAllreduce(m, tensors, 1);  // the estimate the iteration count comes from
    Row row;
    row.bytes = bytes;
    row.iters = a.iters > 0 ? a.iters : int(std::clamp(a.seconds / std::max(one, 1e-6), 2.0, 100.0));
    row.time = timeAllreduce(m, tensors, row.iters);
    row.algbw = double(bytes) / row.time / 1e9;
    row.busbw = row.algbw * 2.0 * double(n - 1) / double(n);
    rows.push_back(row);
    std::fprintf(stderr, "  tensord n=%zu %s: %.3f ms\n", n, human(bytes).c_str(), row.time * 1e3);
  }
  return rows;
}

// bench/torch_gloo_allreduce.py next to this binary's source; false when torch is missing.
bool torchSweep(const Args& a, size_t n, std::vector<Row>& rows, std::string& note) {
  const std::string script = std::string(TENSORD_SOURCE_DIR) + "/bench/torch_gloo_allreduce.py";
  std::string list;
  for (const Row& r : rows) list += (list.empty() ? "" : ",") + std::to_string(r.bytes);
  std::vector<std::string> argv = {"/usr/bin/python3", script, "--ranks", std::to_string(n), "--sizes", list,
                                   "--seconds", std::to_string(a.seconds)};
  if (a.iters > 0) argv.insert(argv.end(), {"--iters", std::to_string(a.iters)});
  auto result = testing::runCommand(argv, {}, std::chrono::seconds(3600));
  if (result.exitCode != 0) {
    note = "torch/gloo reference not run: " +
           (result.err.find("No module named 'torch'") != std::string::npos
                ? std::string("python3-torch is not installed")
                : "exit " + std::to_string(result.exitCode) + ": " + result.err.substr(0, 400));
    return false;
  }
  std::map<uint64_t, double> times;
  std::istringstream in(result.out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line);
    times[j["bytes"].get<uint64_t>()] = j["seconds"].get<double>();
  }
  for (Row& r : rows) {
    if (auto it = times.find(r.bytes); it != times.end()) {
      r.torchTime = it->second;
      r.torchBusbw = double(r.bytes) / r.torchTime / 1e9 * 2.0 * double(n - 1) / double(n);
    }
  }
  return true;
}

// Data-parallel MLP training: per-step wall time with and without overlap.
struct DdpCase {
  std::string name;
  int64_t batch, in, hidden, layers, classes;
  uint64_t bucketBytes;
};

struct DdpResult {
  DdpCase c;
  uint64_t paramBytes = 0;
  size_t buckets = 0;
  double overlapMs = 0, syncMs = 0;
};

DdpResult ddpSteps(const Args& a, Members& m, const DdpCase& c) {
  const size_t n = m.ptrs.size();
  struct Replica {
    std::vector<Tensor> params;
    Tensor x, y;
    std::unique_ptr<ProcessGroup> group;
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<optim::AdamW> opt;
  };
  std::vector<Replica> reps(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  auto values = [&](size_t count) {
    std::vector<float> v(count);
    for (auto& x : v) x = u(rng);
    return v;
  };
  DdpResult result{c};
  for (size_t r = 0; r < n; ++r) {
    Client& cl = *m.ptrs[r];
    int64_t fanIn = c.in;
    for (int64_t l = 0; l < c.layers; ++l) {
      int64_t out = l + 1 == c.layers ? c.classes : c.hidden;
      reps[r].params.push_back(cl.upload({out, fanIn}, values(size_t(out * fanIn))));
      reps[r].params.push_back(cl.upload({out}, values(size_t(out))));
      if (r == 0) result.paramBytes += uint64_t(out * fanIn + out) * 4;
      fanIn = out;
    }
    for (Tensor& p : reps[r].params) p.setRequiresGrad();
    reps[r].x = cl.upload({c.batch, c.in}, values(size_t(c.batch * c.in)));
    std::vector<int64_t> labels(static_cast<size_t>(c.batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i) % c.classes;
    reps[r].y = cl.upload(DType::I64, {c.batch}, std::as_bytes(std::span(labels)));
    reps[r].group = std::make_unique<ProcessGroup>(cl, "bench");
    reps[r].ddp = std::make_unique<DistributedDataParallel>(*reps[r].group, reps[r].params,
                                                            DdpOptions{.bucketBytes = c.bucketBytes});
    reps[r].opt = std::make_unique<optim::AdamW>(reps[r].params, optim::AdamWOptions{.lr = 1e-3});
  }
  result.buckets = reps[0].ddp->buckets().size();
  auto run = [&](bool overlap, int steps) {
    for (auto& rep : reps) rep.ddp->setOverlap(overlap);
    auto start = Clock::now();
    for (int s = 0; s < steps; ++s) {
      std::vector<Tensor> losses;
      for (size_t r = 0; r < n; ++r) {
        Client& cl = *m.ptrs[r];
        Replica& rep = reps[r];
        rep.opt->zeroGrad();
        Tensor h = rep.x;
        for (size_t l = 0; l < rep.params.size(); l += 2) {
          h = cl.call1("linear", {h, rep.params[l], rep.params[l + 1]});
          if (l + 2 < rep.params.size()) h = cl.call1("relu", {h});
        }
        losses.push_back(cl.call1("cross_entropy", {h, rep.y}));
        losses.back().backward();
        if (overlap) rep.ddp->finishGradients();
        else rep.ddp->syncGradients();
        rep.opt->step();
      }
      for (const Tensor& l : losses) l.toHost();
    }
    return seconds(Clock::now() - start) / steps * 1e3;
  };
  run(true, 2);  // warm-up: pipelines compiled, memory cached
  run(false, 2);
  // Alternate, so drift on a shared machine hits both alike.
  for (int round = 0; round < 2; ++round) {
    result.overlapMs += run(true, a.ddpSteps) / 2;
    result.syncMs += run(false, a.ddpSteps) / 2;
  }
  return result;
}

}  // namespace
}  // namespace tensord::bench

int main(int argc, char** argv) {
  using namespace tensord::bench;
  Args a = parseArgs(argc, argv);
  nlohmann::json report = {{"allreduce", nlohmann::json::array()}, {"ddp", nlohmann::json::array()}};
  try {
    for (size_t n : a.ranks) {
      Members m = open(a, n);
      std::vector<Row> rows = allreduceSweep(a, m);
      std::string note;
      bool torch = a.torch && torchSweep(a, n, rows, note);
      std::printf("\nallreduce f32 sum, %zu daemons (%s), in place\n", n,
                  a.connect.empty() ? "started on loopback" : "given with --connect");
      std::printf("%10s %6s %12s %12s %12s %14s %8s\n", "size", "iters", "time (ms)", "algbw GB/s", "busbw GB/s",
                  "gloo busbw", "ratio");
      for (const Row& r : rows) {
        std::printf("%10s %6d %12.3f %12.3f %12.3f", human(r.bytes).c_str(), r.iters, r.time * 1e3, r.algbw, r.busbw);
        if (r.torchTime > 0) std::printf(" %14.3f %8.2f\n", r.torchBusbw, r.busbw / r.torchBusbw);
        else std::printf(" %14s %8s\n", "-", "-");
        nlohmann::json j = {{"ranks", n},   {"bytes", r.bytes}, {"iters", r.iters},
                            {"seconds", r.time}, {"algbw_gbps", r.algbw}, {"busbw_gbps", r.busbw}};
        if (r.torchTime > 0) {
          j["gloo_seconds"] = r.torchTime;
          j["gloo_busbw_gbps"] = r.torchBusbw;
          j["ratio"] = r.busbw / r.torchBusbw;
        }
        report["allreduce"].push_back(j);
      }
      if (!torch) std::printf("(%s)\n", a.torch ? note.c_str() : "torch/gloo reference off (--no-torch)");

      if (a.ddp) {
        std::printf("\ndata-parallel MLP training step, %zu daemons (DistributedDataParallel, AdamW)\n", n);
        std::printf("%-12s %10s %8s %14s %14s %8s\n", "model", "params", "buckets", "overlap ms", "no overlap ms",
                    "speedup");
        for (const DdpCase& c : {DdpCase{"example", 64, 8, 32, 2, 4, uint64_t(25) << 20},
                                 DdpCase{"wide", 64, 256, 512, 4, 10, uint64_t(1) << 20}}) {
          DdpResult d = ddpSteps(a, m, c);
          std::printf("%-12s %10s %8zu %14.2f %14.2f %8.2f\n", c.name.c_str(), human(d.paramBytes).c_str(), d.buckets,
                      d.overlapMs, d.syncMs, d.syncMs / d.overlapMs);
          report["ddp"].push_back({{"ranks", n},
                                   {"model", c.name},
                                   {"batch_per_rank", c.batch},
                                   {"in", c.in},
                                   {"hidden", c.hidden},
                                   {"layers", c.layers},
                                   {"param_bytes", d.paramBytes},
                                   {"bucket_bytes", c.bucketBytes},
                                   {"buckets", d.buckets},
                                   {"overlap_ms", d.overlapMs},
                                   {"no_overlap_ms", d.syncMs}});
        }
      }
      std::fflush(stdout);
      for (tensord::Client* c : m.ptrs) c->groupDelete("bench");
      m.clients.clear();
      if (m.cluster) {
        std::string problems = m.cluster->stopAll();
        if (!a.daemonLogs.empty()) std::ofstream(a.daemonLogs, std::ios::app) << m.cluster->logs();
        if (!problems.empty()) std::fprintf(stderr, "collective_bench: %s\n", problems.c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_bench: %s\n", e.what());
    return 1;
  }
  if (a.jsonFile.empty()) {
    std::printf("\n%s\n", report.dump(2).c_str());
  } else {
    std::ofstream(a.jsonFile) << report.dump(2) << "\n";
  }
  return 0;
}
