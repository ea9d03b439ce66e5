// Data-parallel training of examples/mlp.cpp's MLP over several daemons:
// each daemon holds a replica of the model and a shard of every batch; the
// gradients are averaged between the daemons (an all-reduce per bucket,
// started while backward() is still issuing the earlier layers' calls) and
// each daemon applies AdamW to its replica. No gradient passes through this
// program. The data and the initial parameters are mlp.cpp's, so with a
// batch the number of daemons divides, the losses follow the single-daemon
// run's. At the end the replicas are downloaded and compared bit for bit.
//
//   example_ddp --connect HOST:PORT,HOST:PORT,HOST:PORT [--token T] [--epochs N] [--batch B]
//
// The daemons must be able to dial each other (their config's
// groups.node_credentials); they form the group "ddp" at the start.

#include "examples/example_common.h"
#include "tensord/distributed.h"

using namespace example;

int main(int argc, char** argv) {
  Options o = parseOptions(argc, argv, 30);
  std::vector<std::string> members;
  for (size_t at = 0;;) {
    size_t comma = o.connect.address.find(',', at);
    members.push_back(o.connect.address.substr(at, comma == std::string::npos ? comma : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  const int64_t n = int64_t(members.size());
  const int64_t B = o.batch ? o.batch : 64 / n * n, D = 8, H = o.hidden ? o.hidden : 32, C = 4, N = 4 * B;
  if (B % n != 0) {
    std::fprintf(stderr, "--batch %lld: must be a multiple of the %lld daemons\n", (long long)B, (long long)n);
    return 2;
  }
  const int64_t shard = B / n;

  // mlp.cpp's data and initial parameters (same generator, same order).
  std::mt19937 rng(1234);
  std::normal_distribution<float> noise(0.0f, 0.7f);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<float> centres(size_t(C * D));
  for (auto& c : centres) c = sign(rng) ? 1.5f : -1.5f;
  std::vector<std::vector<float>> xs;
  std::vector<std::vector<int64_t>> ys;
  for (int64_t b = 0; b < N / B; ++b) {
    xs.emplace_back(size_t(B * D));
    ys.emplace_back(size_t(B));
    for (int64_t i = 0; i < B; ++i) {
      ys[b][size_t(i)] = (b * B + i) % C;
      for (int64_t d = 0; d < D; ++d) xs[b][size_t(i * D + d)] = centres[size_t(ys[b][size_t(i)] * D + d)] + noise(rng);
    }
  }
  auto init = [&](int64_t count, double bound) {
    std::uniform_real_distribution<float> u(float(-bound), float(bound));
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = u(rng);
    return v;
  };
  const std::vector<std::vector<float>> initial = {init(H * D, 1 / std::sqrt(double(D))), init(H, 1 / std::sqrt(double(D))),
                                                   init(C * H, 1 / std::sqrt(double(H))), init(C, 1 / std::sqrt(double(H)))};
  const std::vector<Shape> shapes = {{H, D}, {H}, {C, H}, {C}};

  // One replica per daemon: its shard of each batch, its parameters, its optimizer.
  struct Replica {
    std::unique_ptr<Client> client;
    std::unique_ptr<tensord::ProcessGroup> group;
    std::vector<Tensor> xs, ys, params;
    std::unique_ptr<tensord::DistributedDataParallel> ddp;
    std::unique_ptr<tensord::optim::AdamW> opt;
  };
  std::vector<Replica> replicas(static_cast<size_t>(n));
  std::vector<Client*> clients;
  for (int64_t r = 0; r < n; ++r) {
    tensord::ConnectOptions c = o.connect;
    c.address = members[size_t(r)];
    replicas[size_t(r)].client = std::make_unique<Client>(c);
    clients.push_back(replicas[size_t(r)].client.get());
  }
  tensord::formGroup(clients, "ddp", members);
  for (int64_t r = 0; r < n; ++r) {
    Replica& rep = replicas[size_t(r)];
    Client& c = *rep.client;
    for (size_t b = 0; b < xs.size(); ++b) {
      auto x = std::span(xs[b]).subspan(size_t(r * shard * D), size_t(shard * D));
      auto y = std::span(ys[b]).subspan(size_t(r * shard), size_t(shard));
      rep.xs.push_back(c.upload(DType::F32, {shard, D}, std::as_bytes(x)));
      rep.ys.push_back(c.upload(DType::I64, {shard}, std::as_bytes(y)));
    }
    for (size_t p = 0; p < shapes.size(); ++p) {
      rep.params.push_back(c.upload(shapes[p], initial[p]));
      rep.params.back().setRequiresGrad();
    }
    rep.group = std::make_unique<tensord::ProcessGroup>(c, "ddp");
    // Every replica was uploaded from the same values: no broadcast from rank 0 needed.
    rep.ddp = std::make_unique<tensord::DistributedDataParallel>(*rep.group, rep.params,
                                                                  tensord::DdpOptions{.broadcastParameters = false});
    rep.opt = std::make_unique<tensord::optim::AdamW>(rep.params, tensord::optim::AdamWOptions{.lr = 1e-2});
  }

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double total = 0;
    auto start = std::chrono::steady_clock::now();
    for (size_t b = 0; b < xs.size(); ++b) {
      std::vector<Tensor> losses;
      for (Replica& rep : replicas) {  // issued on every daemon without waiting
        Client& c = *rep.client;
        const auto& w = rep.params;
        rep.opt->zeroGrad();
        Tensor h = c.call1("relu", {c.call1("linear", {rep.xs[b], w[0], w[1]})});
        losses.push_back(c.call1("cross_entropy", {c.call1("linear", {h, w[2], w[3]}), rep.ys[b]}));
        losses.back().backward();    // starts each bucket's all-reduce as its gradients are issued
        rep.ddp->finishGradients();  // the rest; grad() is now the mean over the daemons
        rep.opt->step();
      }
      double step = 0;
      for (const Tensor& l : losses) step += l.toHost()[0];
      total += step / double(n);  // equal shards: the mean of the shards' losses is the batch's
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("epoch %d loss %.6f ms/step %.3f\n", epoch, total / double(xs.size()), ms / double(xs.size()));
    std::fflush(stdout);
  }

  // The replicas must have stayed bit-identical.
  bool identical = true;
  for (size_t p = 0; p < shapes.size(); ++p) {
    std::vector<std::byte> first = replicas[0].params[p].bytes();
    for (size_t r = 1; r < replicas.size(); ++r) identical = identical && replicas[r].params[p].bytes() == first;
  }
  std::printf("parameters identical on %lld daemons: %s\n", (long long)n, identical ? "yes" : "no");
  for (Replica& rep : replicas) rep.client->groupDelete("ddp");
  return identical ? 0 : 1;
}
