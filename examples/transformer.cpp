// Trains a tiny transformer block (token and position embeddings,
// layer_norm, causal scaled_dot_product_attention with two heads, a gelu
// MLP, residual connections) on a synthetic sequence task: predict the
// previous token. Autograd and AdamW through the client library; one round
// trip per step.

#include "examples/example_common.h"

using namespace example;

int main(int argc, char** argv) {
  Options o = parseOptions(argc, argv, 20);
  const int64_t V = 8, T = 8, E = 16, Hh = 2, Dh = E / Hh, B = 32, N = 128;
  Session s(o);

  std::uniform_int_distribution<int64_t> token(0, V - 1);
  std::vector<Tensor> xs, ys;
  for (int64_t b = 0; b < N / B; ++b) {
    std::vector<int64_t> x(size_t(B * T)), y(size_t(B * T));
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t t = 0; t < T; ++t) x[size_t(i * T + t)] = token(s.rng());
      for (int64_t t = 0; t < T; ++t) y[size_t(i * T + t)] = x[size_t(i * T + (t > 0 ? t - 1 : 0))];
    }
    xs.push_back(s.indices("x" + std::to_string(b), {B, T}, x));
    ys.push_back(s.indices("y" + std::to_string(b), {B * T}, y));
  }

  const double e = 1 / std::sqrt(double(E)), f = 1 / std::sqrt(double(4 * E));
  std::vector<Tensor> params;
  auto param = [&](const std::string& name, const Shape& shape, double bound) {
    params.push_back(s.param(name, shape, bound));
    return params.back();
  };
  auto ones = [&](const std::string& name, int64_t n, float v) {
    Tensor t = s.constant(name, {n}, v);
    t.setRequiresGrad();
    params.push_back(t);
    return t;
  };
  Tensor tok = param("tok_emb", {V, E}, 1.0), pos = param("pos_emb", {T, E}, 1.0);
  Tensor ln1_w = ones("ln1_w", E, 1), ln1_b = ones("ln1_b", E, 0);
  Tensor wq = param("wq", {E, E}, e), bq = param("bq", {E}, e);
  Tensor wk = param("wk", {E, E}, e), bk = param("bk", {E}, e);
  Tensor wv = param("wv", {E, E}, e), bv = param("bv", {E}, e);
  Tensor wo = param("wo", {E, E}, e), bo = param("bo", {E}, e);
  Tensor ln2_w = ones("ln2_w", E, 1), ln2_b = ones("ln2_b", E, 0);
  Tensor w1 = param("w1", {4 * E, E}, e), b1 = param("b1", {4 * E}, e);
  Tensor w2 = param("w2", {E, 4 * E}, f), b2 = param("b2", {E}, f);
  Tensor wout = param("wout", {V, E}, e), bout = param("bout", {V}, e);
  tensord::optim::AdamW opt(params, {.lr = 1e-2, .weightDecay = 0.0});
  Client& c = s.client;

  const tensord::Attrs norm = {{"normalized_shape", std::vector<int64_t>{E}}};
  auto heads = [&](const Tensor& x) {  // [B, T, E] -> [B, Hh, T, Dh]
    Tensor r = c.call1("reshape", {x}, {{"shape", std::vector<int64_t>{B, T, Hh, Dh}}});
    return c.call1("transpose", {r}, {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}});
  };

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double total = 0;
    EpochReport epochReport(c);
    for (size_t b = 0; b < xs.size(); ++b) {
      opt.zeroGrad();
      Tensor h = c.call1("add", {c.call1("embedding", {tok, xs[b]}), pos});
      Tensor a = c.call1("layer_norm", {h, ln1_w, ln1_b}, norm);
      Tensor q = heads(c.call1("linear", {a, wq, bq})), k = heads(c.call1("linear", {a, wk, bk}));
      Tensor v = heads(c.call1("linear", {a, wv, bv}));
      Tensor att = c.call1("scaled_dot_product_attention", {q, k, v}, {{"is_causal", true}});
      att = c.call1("reshape", {c.call1("transpose", {att}, {{"dim0", int64_t(1)}, {"dim1", int64_t(2)}})},
                    {{"shape", std::vector<int64_t>{B, T, E}}});
      h = c.call1("add", {h, c.call1("linear", {att, wo, bo})});
      Tensor m = c.call1("layer_norm", {h, ln2_w, ln2_b}, norm);
      m = c.call1("linear", {c.call1("gelu", {c.call1("linear", {m, w1, b1})}), w2, b2});
      h = c.call1("add", {h, m});
      Tensor logits = c.call1("reshape", {c.call1("linear", {h, wout, bout})}, {{"shape", std::vector<int64_t>{B * T, V}}});
      Tensor loss = c.call1("cross_entropy", {logits, ys[b]});
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
