// Trains a two-layer MLP on a synthetic classification task (Gaussian blobs,
// 4 classes in 8 dims) on a remote tensord with autograd and AdamW. Every
// training step is one pipelined chain of calls: forward, backward, the
// optimizer step, and one round trip to read the loss.

#include "examples/example_common.h"

using namespace example;

int main(int argc, char** argv) {
  Options o = parseOptions(argc, argv, 30);
  const int64_t B = o.batch ? o.batch : 64, N = 4 * B, D = 8, H = o.hidden ? o.hidden : 32, C = 4;
  Session s(o);

  // Data: class c is a blob around a random centre.
  std::normal_distribution<float> noise(0.0f, 0.7f);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<float> centres(size_t(C * D));
  for (auto& c : centres) c = sign(s.rng()) ? 1.5f : -1.5f;
  std::vector<Tensor> xs, ys;
  for (int64_t b = 0; b < N / B; ++b) {
    std::vector<float> x(static_cast<size_t>(B * D));
    std::vector<int64_t> y(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      y[size_t(i)] = (b * B + i) % C;
      for (int64_t d = 0; d < D; ++d) x[size_t(i * D + d)] = centres[size_t(y[size_t(i)] * D + d)] + noise(s.rng());
    }
    xs.push_back(s.floats("x" + std::to_string(b), {B, D}, x));
    ys.push_back(s.indices("y" + std::to_string(b), {B}, y));
  }

  Tensor w1 = s.param("w1", {H, D}, 1 / std::sqrt(double(D))), b1 = s.param("b1", {H}, 1 / std::sqrt(double(D)));
  Tensor w2 = s.param("w2", {C, H}, 1 / std::sqrt(double(H))), b2 = s.param("b2", {C}, 1 / std::sqrt(double(H)));
  tensord::optim::AdamW opt({w1, b1, w2, b2}, {.lr = 1e-2});
  Client& c = s.client;

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double total = 0;
    EpochReport epochReport(c);
    for (size_t b = 0; b < xs.size(); ++b) {
      opt.zeroGrad();
      Tensor h = c.call1("relu", {c.call1("linear", {xs[b], w1, b1})});
      Tensor loss = c.call1("cross_entropy", {c.call1("linear", {h, w2, b2}), ys[b]});
      loss.backward();
      opt.step();
      float l = loss.toHost()[0];  // the step's one round trip
      s.recordLoss(l);
      total += l;
    }
    epochReport.print(epoch, total / double(xs.size()), int(xs.size()));
  }
  s.finish();
  return 0;
}
