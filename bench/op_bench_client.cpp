#include "bench/op_bench_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "tensord/client.h"
#include "tests/integration/daemon_process.h"

namespace tensord::bench {

using Clock = std::chrono::steady_clock;

struct ClientTimer::Impl {
  testing::DaemonProcess daemon;
  Client client;

  static testing::DaemonOptions options(const std::filesystem::path& binary) {
    testing::DaemonOptions d;
    d.binary = binary;
    d.token = "bench-token";
    d.principal = "bench";
    return d;
  }
  explicit Impl(const std::filesystem::path& binary)
      : daemon(options(binary)), client(ConnectOptions{.address = daemon.address(), .token = daemon.token()}) {}

  // Waits until `t` is computed. A call's answer comes once the daemon has
  // queued its work, so Tensor::wait() would not: this reads one element
  // of it back, which waits for the device.
  void finish(const Tensor& t) {
    Tensor flat = client.call1("flatten", {t});
    client.call1("narrow", {flat}, {{"dim", int64_t(0)}, {"start", int64_t(0)}, {"length", int64_t(1)}}).bytes();
  }

  std::vector<Tensor> makeInputs(const ClientCase& c) {
    std::vector<Tensor> in;
    for (const auto& [dtype, shape] : c.inputs) {
      if (in.empty() && c.fillFirst) {
        in.push_back(client.call1("full", {}, {{"size", shape}, {"fill_value", *c.fillFirst}, {"dtype", dtype}}));
      } else {
        in.push_back(client.call1("randn", {}, {{"size", shape}, {"dtype", dtype}}));
      }
    }
    for (const Tensor& t : in) t.wait();
    return in;
  }
};

ClientTimer::ClientTimer(const std::filesystem::path& daemon) : impl_(std::make_unique<Impl>(daemon)) {}
ClientTimer::~ClientTimer() = default;

double ClientTimer::secondsPerCall(const ClientCase& c, int repeats, double minTrialMs) {
  Client& client = impl_->client;
  const Attrs attrs(c.attrs.begin(), c.attrs.end());
  // A trial of `units` units (calls; chains of c.chain calls; rounds of
  // c.independent calls): its wall time and the calls it made.
  std::function<std::pair<double, int>(int)> trial;
  std::vector<std::vector<Tensor>> sets;
  if (c.independent > 0) {
    for (int i = 0; i < c.independent; ++i) sets.push_back(impl_->makeInputs(c));
    trial = [&](int rounds) {
      const auto t0 = Clock::now();
      Tensor last;
      for (int r = 0; r < rounds; ++r) {
        for (const auto& in : sets) last = client.call(c.op, in, attrs).front();
      }
      impl_->finish(last);
      return std::pair{std::chrono::duration<double>(Clock::now() - t0).count(), rounds * c.independent};
    };
  } else {
    sets.push_back(impl_->makeInputs(c));
    const std::vector<Tensor>& in = sets.front();
    trial = [&](int units) {
      const auto t0 = Clock::now();
      Tensor last;
      for (int u = 0; u < units; ++u) {
        if (c.chain > 0) {
          Tensor y = in[0];
          for (int i = 0; i < c.chain; ++i) {
            std::vector<Tensor> args{y};
            if (in.size() > 1) args.push_back(in[1]);
            y = client.call(c.op, std::move(args), attrs).front();  // the previous output is dropped
          }
          last = std::move(y);
        } else {
          last = client.call(c.op, in, attrs).front();
        }
      }
      impl_->finish(last);
      return std::pair{std::chrono::duration<double>(Clock::now() - t0).count(), units * std::max(c.chain, 1)};
    };
  }
  trial(1);  // compiles the pipelines, allocates
  int units = c.chain > 0 ? 5 : std::max(repeats, 1);
  const double first = trial(units).first;
  if (first < minTrialMs * 1e-3) units = int(std::min(std::ceil(units * minTrialMs * 1e-3 / first), 100000.0));
  trial(units);  // a warm-up as long as a trial
  std::vector<double> times;
  for (int t = 0; t < 5; ++t) {
    auto [seconds, calls] = trial(units);
    times.push_back(seconds / calls);
  }
  std::sort(times.begin(), times.end());
  return times[2];
}

}  // namespace tensord::bench
