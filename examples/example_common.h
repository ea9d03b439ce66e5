#pragma once
// What the training examples share: command-line options, seeded parameter
// initialisation (PyTorch's default for Linear and Conv: uniform in
// +-1/sqrt(fan_in)), uploads, and the per-epoch report. Each example trains
// through the public client library only (tensord/client.h, tensord/optim.h).
//
// Options:  --connect ADDR  --token TOKEN  --epochs N  --dump DIR
//           --batch B  --hidden H  (sizes, where an example has them)
// --dump writes the initial parameters, the data and the loss of every step
// as .npy files, for examples/compare_torch.py to replay the same model in
// PyTorch.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "client/npy.h"
#include "tensord/client.h"
#include "tensord/optim.h"

namespace example {

using tensord::Client;
using tensord::DType;
using tensord::Shape;
using tensord::Tensor;

struct Options {
  tensord::ConnectOptions connect;
  int epochs = 0;
  std::string dump;
  int64_t batch = 0, hidden = 0;  // 0: the example's default
};

inline Options parseOptions(int argc, char** argv, int defaultEpochs) {
  Options o;
  if (const char* a = std::getenv("TENSORD_ADDR")) o.connect.address = a;
  if (const char* t = std::getenv("TENSORD_TOKEN")) o.connect.token = t;
  o.epochs = defaultEpochs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--connect") o.connect.address = value();
    else if (arg == "--token") o.connect.token = value();
    else if (arg == "--epochs") o.epochs = std::stoi(value());
    else if (arg == "--dump") o.dump = value();
    else if (arg == "--batch") o.batch = std::stoll(value());
    else if (arg == "--hidden") o.hidden = std::stoll(value());
    else {
      std::fprintf(stderr, "usage: %s [--connect ADDR] [--token TOKEN] [--epochs N] [--dump DIR] [--batch B] [--hidden H]\n", argv[0]);
      std::exit(2);
    }
  }
  return o;
}

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Uploads host data (and, with --dump, writes it as DIR/NAME.npy).
class Session {
 public:
  explicit Session(const Options& o) : client(o.connect), dump_(o.dump), rng_(1234) {}

  Tensor floats(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    dumpNpy(name, DType::F32, shape, std::as_bytes(std::span(v)));
    return client.upload(shape, v);
  }
  Tensor indices(const std::string& name, const Shape& shape, const std::vector<int64_t>& v) {
    dumpNpy(name, DType::I64, shape, std::as_bytes(std::span(v)));
    return client.upload(DType::I64, shape, std::as_bytes(std::span(v)));
  }
  // A trainable parameter, uniform in +-bound (PyTorch's init for fan_in = 1/bound^2).
  Tensor param(const std::string& name, const Shape& shape, double bound) {
    std::uniform_real_distribution<float> u(float(-bound), float(bound));
    std::vector<float> v(size_t(numel(shape)));
    for (auto& x : v) x = u(rng_);
    Tensor t = floats(name, shape, v);
    t.setRequiresGrad();
    return t;
  }
  Tensor constant(const std::string& name, const Shape& shape, float value) {
    return floats(name, shape, std::vector<float>(size_t(numel(shape)), value));
  }
  std::mt19937& rng() { return rng_; }

  void recordLoss(float loss) { losses_.push_back(loss); }
  void finish() {
    if (!dump_.empty()) {
      dumpNpy("losses", DType::F32, {int64_t(losses_.size())}, std::as_bytes(std::span(losses_)));
    }
  }

  Client client;

 private:
  void dumpNpy(const std::string& name, DType dtype, const Shape& shape, std::span<const std::byte> bytes) {
    if (!dump_.empty()) tensord::npy::write(dump_ + "/" + name + ".npy", dtype, shape, bytes);
  }
  std::string dump_;
  std::mt19937 rng_;
  std::vector<float> losses_;
};

// Times an epoch and prints its line: mean loss, calls and round trips per
// step, and wall time per step (each step ends by reading its loss).
class EpochReport {
 public:
  explicit EpochReport(Client& client) : client_(client), before_(client.stats()), start_(std::chrono::steady_clock::now()) {}
  void print(int epoch, double meanLoss, int steps) const {
    auto after = client_.stats();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    std::printf("epoch %d loss %.6f calls/step %.1f round-trips/step %.1f ms/step %.3f\n", epoch, meanLoss,
                double(after.calls - before_.calls) / steps, double(after.roundTrips - before_.roundTrips) / steps,
                ms / steps);
    std::fflush(stdout);
  }

 private:
  Client& client_;
  tensord::CallStats before_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace example
