// Trains a small CNN (conv2d, batch_norm, relu, max_pool2d, linear,
// cross_entropy) on generated 8x8 images of four patterns (a horizontal bar,
// a vertical bar, a diagonal, a ring) with noise, on a remote tensord with
// autograd and Adam. One round trip per step (reading the loss).

#include "examples/example_common.h"

using namespace example;

namespace {

float pattern(int64_t cls, int64_t r, int64_t col, int64_t shift) {
  switch (cls) {
    case 0: return r == 2 + shift ? 1.0f : 0.0f;                             // horizontal bar
    case 1: return col == 2 + shift ? 1.0f : 0.0f;                           // vertical bar
    case 2: return r == col ? 1.0f : 0.0f;                                   // diagonal
    default: return (r == 1 || r == 6 || col == 1 || col == 6) ? 1.0f : 0.0f;  // ring
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parseOptions(argc, argv, 15);
  const int64_t N = 128, B = 32, C = 4, K = 8, S = 8;
  Session s(o);

  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_int_distribution<int64_t> shift(0, 3);
  std::vector<Tensor> xs, ys;
  for (int64_t b = 0; b < N / B; ++b) {
    std::vector<float> x(static_cast<size_t>(B * S * S));
    std::vector<int64_t> y(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      int64_t cls = (b * B + i) % C, sh = shift(s.rng());
      y[size_t(i)] = cls;
      for (int64_t r = 0; r < S; ++r) {
        for (int64_t col = 0; col < S; ++col) x[size_t((i * S + r) * S + col)] = pattern(cls, r, col, sh) + noise(s.rng());
      }
    }
    xs.push_back(s.floats("x" + std::to_string(b), {B, 1, S, S}, x));
    ys.push_back(s.indices("y" + std::to_string(b), {B}, y));
  }

  Tensor conv_w = s.param("conv_w", {K, 1, 3, 3}, 1 / 3.0), conv_b = s.param("conv_b", {K}, 1 / 3.0);
  Tensor bn_w = s.constant("bn_w", {K}, 1.0f), bn_b = s.constant("bn_b", {K}, 0.0f);
  bn_w.setRequiresGrad();
  bn_b.setRequiresGrad();
  Tensor running_mean = s.constant("running_mean", {K}, 0.0f), running_var = s.constant("running_var", {K}, 1.0f);
  const int64_t F = K * (S / 2) * (S / 2);
  Tensor fc_w = s.param("fc_w", {C, F}, 1 / std::sqrt(double(F))), fc_b = s.param("fc_b", {C}, 1 / std::sqrt(double(F)));
  tensord::optim::Adam opt({conv_w, conv_b, bn_w, bn_b, fc_w, fc_b}, {.lr = 1e-2});
  Client& c = s.client;

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double total = 0;
    EpochReport epochReport(c);
    for (size_t b = 0; b < xs.size(); ++b) {
      opt.zeroGrad();
      Tensor h = c.call1("conv2d", {xs[b], conv_w, conv_b}, {{"padding", std::vector<int64_t>{1, 1}}});
      h = c.call1("batch_norm", {h, running_mean, running_var, bn_w, bn_b}, {{"training", true}});
      h = c.call1("max_pool2d", {c.call1("relu", {h})}, {{"kernel_size", std::vector<int64_t>{2, 2}}});
      h = c.call1("flatten", {h}, {{"start_dim", int64_t(1)}});
      Tensor loss = c.call1("cross_entropy", {c.call1("linear", {h, fc_w, fc_b}), ys[b]});
      loss.backward();
      opt.step();
      float l = loss.toHost()[0];
      s.recordLoss(l);
      total += l;
    }
    epochReport.print(epoch, total / double(xs.size()), int(xs.size()));
  }
  s.finish();
  return 0;
}
