// Conformance of the nn ops (ops_nn.cpp) against CPU references in double:
// softmax / log_softmax, the norms, embedding, dropout, the losses and
// scaled_dot_product_attention.

#include <cmath>
#include <functional>
#include <limits>

#include "compute/template_nn.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(nn, "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "embedding",
               "dropout", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy",
               "binary_cross_entropy_with_logits", "kl_div", "nll_loss", "cross_entropy",
               "scaled_dot_product_attention");

using Attr = std::vector<std::pair<std::string, AttrValue>>;
constexpr DType kFloats[] = {DType::F32, DType::F16, DType::BF16};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

HostTensor like(DType dtype, const Shape& shape, std::vector<double> values) { return makeTensor(dtype, shape, std::move(values)); }

HostTensor scalar(DType dtype, double v) { return makeTensor(dtype, {}, {v}); }

// ---------------------------------------------------------------- softmax

HostTensor softmaxRef(const HostTensor& x, int64_t dim, bool log) {
  const Shape& s = x.shape;
  size_t d0 = s.empty() ? 0 : size_t(dim < 0 ? dim + int64_t(s.size()) : dim);
  int64_t d = s.empty() ? 1 : s[d0], inner = 1;
  for (size_t k = d0 + 1; k < s.size(); ++k) inner *= s[k];
  std::vector<double> y(x.values.size());
  int64_t rows = d == 0 ? 0 : x.numel() / d;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = (r / inner) * d * inner + r % inner;
    double m = -INFINITY, sum = 0;
    for (int64_t k = 0; k < d; ++k) m = std::max(m, x.values[size_t(base + k * inner)]);
    for (int64_t k = 0; k < d; ++k) sum += std::exp(x.values[size_t(base + k * inner)] - m);
    for (int64_t k = 0; k < d; ++k) {
      double v = x.values[size_t(base + k * inner)] - m;
      y[size_t(base + k * inner)] = log ? v - std::log(sum) : std::exp(v) / sum;
    }
  }
  return like(x.dtype, s, y);
}

class NnSoftmax : public ConformanceTest {};

TEST_F(NnSoftmax, MatchesReference) {
  struct Case {
    Shape shape;
    int64_t dim;
    DType dtype;
  };
  for (const Case& c : {Case{{3, 5}, -1, DType::F32}, Case{{4, 300}, 1, DType::F32}, Case{{2, 3, 4}, 1, DType::F32},
                        Case{{2, 3, 4}, 0, DType::F32}, Case{{}, 0, DType::F32}, Case{{0, 4}, 1, DType::F32},
                        Case{{1, 1}, 0, DType::F32}, Case{{5, 200, 3}, 1, DType::F32},  // team, strided
                        Case{{4, 300}, 1, DType::F16}, Case{{2, 3, 4}, 1, DType::F16},
                        Case{{4, 300}, -1, DType::BF16}, Case{{2, 3, 4}, 2, DType::BF16},
                        Case{{2, 5000}, 1, DType::F32},  // rows longer than the register cache: three passes
                        Case{{66'000, 65}, 1, DType::F32}}) {  // > 65535 workgroups, one per row
    auto x = randomTensor(c.dtype, c.shape, -4, 4);
    for (bool log : {false, true}) {
      if (log && numel(c.shape) > 1'000'000) continue;  // one large case is enough
      std::string what = std::string(log ? "log_softmax " : "softmax ") + dimsName(c.shape) + " dim " +
                         std::to_string(c.dim) + " " + std::string(dtypeName(c.dtype));
      auto y = call(log ? "log_softmax" : "softmax", {x}, {{"dim", c.dim}});
      expectClose(y[0], softmaxRef(x, c.dim, log), what, 10);
    }
  }
}

TEST_F(NnSoftmax, InfinitiesAndErrors) {
  auto x = makeTensor(DType::F32, {2, 3}, {-INFINITY, 0, 1, -INFINITY, -INFINITY, -INFINITY});
  auto y = call("softmax", {x});
  EXPECT_EQ(y[0].values[0], 0);
  EXPECT_TRUE(std::isnan(y[0].values[3]));  // PyTorch: a row of -inf is NaN
  EXPECT_EQ(errorOf("softmax", {x}, {{"dim", int64_t(2)}}),
            "softmax: attribute 'dim' is 2; expected a dim in [-2, 1] for a rank-2 input");
  EXPECT_EQ(errorOf("softmax", {makeTensor(DType::I32, {2}, {1, 2})}),
            "softmax: input 'input' has dtype i32; expected one of f32, f16, bf16");
}

// ---------------------------------------------------------------- norms

// Normalizes rows of `d` contiguous elements; aff(row, k) gives the affine index.
HostTensor normRef(const HostTensor& x, int64_t d, bool rms, double eps, const HostTensor* w, const HostTensor* b,
                   const std::function<int64_t(int64_t, int64_t)>& aff) {
  std::vector<double> y(x.values.size());
  for (int64_t r = 0; r * d < x.numel(); ++r) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < d; ++k) mean += x.values[size_t(r * d + k)];
    mean /= double(d);
    for (int64_t k = 0; k < d; ++k) {
      double v = x.values[size_t(r * d + k)] - (rms ? 0 : mean);
      var += v * v;
    }
    var /= double(d);
    for (int64_t k = 0; k < d; ++k) {
      double v = (x.values[size_t(r * d + k)] - (rms ? 0 : mean)) / std::sqrt(var + eps);
      if (w) v *= w->values[size_t(aff(r, k))];
      if (b) v += b->values[size_t(aff(r, k))];
      y[size_t(r * d + k)] = v;
    }
  }
  return like(x.dtype, x.shape, y);
}

class NnNorm : public ConformanceTest {};

TEST_F(NnNorm, LayerAndRmsNorm) {
  struct Case {
    Shape shape;
    std::vector<int64_t> ns;
    int params;  // 0 none, 1 weight, 2 weight + bias
    DType dtype;
  };
  for (const Case& c : {Case{{4, 6}, {6}, 2, DType::F32}, Case{{2, 3, 70}, {3, 70}, 2, DType::F32},
                        Case{{5, 1}, {1}, 2, DType::F32}, Case{{3, 100}, {100}, 0, DType::F32},
                        Case{{7}, {7}, 1, DType::F32}, Case{{0, 5}, {5}, 2, DType::F32},
                        Case{{3, 100}, {100}, 2, DType::F16}, Case{{4, 6}, {6}, 1, DType::BF16},
                        Case{{2, 3, 70}, {70}, 2, DType::BF16},
                        Case{{2, 4500}, {4500}, 2, DType::F32}}) {
    // (Rows past 65535 workgroups: FOR_ROWS in norm_rows.glsl, covered by NnSoftmax's large case.)
    auto x = randomTensor(c.dtype, c.shape, -2, 2);
    auto w = randomTensor(c.dtype, c.ns, 0.5, 1.5), b = randomTensor(c.dtype, c.ns);
    int64_t d = numel(c.ns);
    std::vector<HostTensor> in{x};
    if (c.params > 0) in.push_back(w);
    if (c.params > 1) in.push_back(b);
    auto aff = [](int64_t, int64_t k) { return k; };
    std::string what = dimsName(c.shape) + " " + std::string(dtypeName(c.dtype)) + " params " + std::to_string(c.params);
    auto y = call("layer_norm", in, {{"normalized_shape", c.ns}});
    expectClose(y[0], normRef(x, d, false, 1e-5, c.params > 0 ? &w : nullptr, c.params > 1 ? &b : nullptr, aff),
                "layer_norm " + what, 10);
    if (c.params > 1) in.pop_back();
    double eps = c.dtype == DType::F32 ? std::numeric_limits<float>::epsilon() : c.dtype == DType::F16 ? 0.0009765625 : 0.0078125;
    auto z = call("rms_norm", in, {{"normalized_shape", c.ns}});
    expectClose(z[0], normRef(x, d, true, eps, c.params > 0 ? &w : nullptr, nullptr, aff), "rms_norm " + what, 10);
  }
  auto x = randomTensor(DType::F32, {2, 8});
  auto y = call("rms_norm", {x}, {{"normalized_shape", std::vector<int64_t>{8}}, {"eps", 0.5}});
  expectClose(y[0], normRef(x, 8, true, 0.5, nullptr, nullptr, nullptr), "rms_norm eps 0.5");
  EXPECT_EQ(errorOf("layer_norm", {x}, {{"normalized_shape", std::vector<int64_t>{4}}}),
            "layer_norm: attribute 'normalized_shape' is [4]; expected a non-empty shape matching the trailing dims "
            "of input f32[2, 8]");
  EXPECT_EQ(errorOf("layer_norm", {x, randomTensor(DType::F32, {4})}, {{"normalized_shape", std::vector<int64_t>{8}}}),
            "layer_norm: input 'weight' has shape [4]; expected [8] (normalized_shape)");
}

TEST_F(NnNorm, GroupNorm) {
  struct Case {
    Shape shape;
    int64_t groups;
    bool params;
    DType dtype;
  };
  for (const Case& c : {Case{{2, 6, 5}, 3, true, DType::F32}, Case{{2, 4, 3, 3}, 2, false, DType::F32},
                        Case{{1, 4}, 4, true, DType::F32}, Case{{3, 8, 20}, 2, true, DType::F32},
                        Case{{2, 6, 5}, 6, true, DType::F16}, Case{{2, 4, 3, 3}, 1, true, DType::BF16}}) {
    auto x = randomTensor(c.dtype, c.shape, -2, 2);
    int64_t C = c.shape[1], hw = numel(c.shape) / (c.shape[0] * C), d = C / c.groups * hw;
    auto w = randomTensor(c.dtype, {C}, 0.5, 1.5), b = randomTensor(c.dtype, {C});
    std::vector<HostTensor> in{x};
    if (c.params) in = {x, w, b};
    auto y = call("group_norm", in, {{"num_groups", c.groups}});
    auto aff = [&](int64_t r, int64_t k) { return ((r % c.groups) * d + k) / hw; };
    expectClose(y[0], normRef(x, d, false, 1e-5, c.params ? &w : nullptr, c.params ? &b : nullptr, aff),
                "group_norm " + dimsName(c.shape) + " " + std::string(dtypeName(c.dtype)), 10);
  }
  EXPECT_EQ(errorOf("group_norm", {randomTensor(DType::F32, {2, 6, 5})}, {{"num_groups", int64_t(4)}}),
            "group_norm: attribute 'num_groups' is 4; expected a positive divisor of the channel count 6");
}

TEST_F(NnNorm, BatchNorm) {
  for (DType dtype : kFloats) {
    for (Shape shape : {Shape{4, 3, 5}, Shape{6, 2}, Shape{2, 3, 2, 2}}) {
      auto x = randomTensor(dtype, shape, -2, 2);
      int64_t N = shape[0], C = shape[1], hw = numel(shape) / (N * C), d = N * hw;
      auto rm = randomTensor(dtype, {C}), rv = randomTensor(dtype, {C}, 0.5, 2);
      auto w = randomTensor(dtype, {C}, 0.5, 1.5), b = randomTensor(dtype, {C});
      std::string what = dimsName(shape) + " " + std::string(dtypeName(dtype));
      // Batch statistics per channel.
      std::vector<double> mean(size_t(C), 0), var(size_t(C), 0);
      auto at = [&](int64_t c, int64_t k) { return size_t((k / hw) * C * hw + c * hw + k % hw); };
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t k = 0; k < d; ++k) mean[size_t(c)] += x.values[at(c, k)] / double(d);
        for (int64_t k = 0; k < d; ++k) var[size_t(c)] += std::pow(x.values[at(c, k)] - mean[size_t(c)], 2) / double(d);
      }
      auto ref = [&](bool training) {
        std::vector<double> y(x.values.size());
        for (int64_t c = 0; c < C; ++c) {
          double m = training ? mean[size_t(c)] : rm.values[size_t(c)];
          double v = training ? var[size_t(c)] : rv.values[size_t(c)];
          for (int64_t k = 0; k < d; ++k) {
            y[at(c, k)] = (x.values[at(c, k)] - m) / std::sqrt(v + 1e-5) * w.values[size_t(c)] + b.values[size_t(c)];
          }
        }
        return like(dtype, shape, y);
      };
      auto y = call("batch_norm", {x, rm, rv, w, b});
      expectClose(y[0], ref(false), "batch_norm eval " + what, 10);
      // Training: the output, and the running stats updated in place on the device.
      std::vector<TensorView> views{put(x), put(rm), put(rv), put(w), put(b)};
      auto out = run("batch_norm", views, {{"training", true}, {"momentum", 0.2}});
      expectClose(get(out[0]), ref(true), "batch_norm training " + what, 10);
      std::vector<double> wantM(static_cast<size_t>(C)), wantV(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        wantM[size_t(c)] = 0.8 * rm.values[size_t(c)] + 0.2 * mean[size_t(c)];
        wantV[size_t(c)] = 0.8 * rv.values[size_t(c)] + 0.2 * var[size_t(c)] * double(d) / double(d - 1);
      }
      expectClose(get(views[1]), like(dtype, {C}, wantM), "batch_norm running_mean " + what, 10);
      expectClose(get(views[2]), like(dtype, {C}, wantV), "batch_norm running_var " + what, 10);
      // Training without running stats.
      auto z = call("batch_norm", {x}, {{"training", true}});
      std::vector<double> zr(x.values.size());
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t k = 0; k < d; ++k) zr[at(c, k)] = (x.values[at(c, k)] - mean[size_t(c)]) / std::sqrt(var[size_t(c)] + 1e-5);
      }
      expectClose(z[0], like(dtype, shape, zr), "batch_norm training, no stats " + what, 10);
    }
  }
  EXPECT_EQ(errorOf("batch_norm", {randomTensor(DType::F32, {1, 3})}, {{"training", true}}),
            "batch_norm: expected more than 1 value per channel when training, got input f32[1, 3]");
  EXPECT_EQ(errorOf("batch_norm", {randomTensor(DType::F32, {2, 3})}),
            "batch_norm: eval mode (training=false) needs inputs 'running_mean' and 'running_var'");
  EXPECT_EQ(errorOf("batch_norm", {randomTensor(DType::F32, {2, 3}), randomTensor(DType::F32, {2}),
                                   randomTensor(DType::F32, {3})}),
            "batch_norm: input 'running_mean' has shape [2]; expected [3] (one per channel)");
}

// ---------------------------------------------------------------- embedding, dropout

class NnEmbedding : public ConformanceTest {};

TEST_F(NnEmbedding, GathersRows) {
  for (DType dtype : kFloats) {
    for (DType index : {DType::I64, DType::I32}) {
      for (Shape ishape : {Shape{2, 3}, Shape{5}, Shape{}, Shape{0}}) {
        auto w = randomTensor(dtype, {10, 4});
        std::vector<double> idx;
        for (int64_t i = 0; i < numel(ishape); ++i) idx.push_back(double((i * 7 + 3) % 10));
        auto ix = makeTensor(index, ishape, idx);
        Shape oshape = ishape;
        oshape.push_back(4);
        std::vector<double> want;
        for (double i : idx) {
          for (int j = 0; j < 4; ++j) want.push_back(w.values[size_t(i * 4 + j)]);
        }
        auto y = call("embedding", {w, ix}, {{"padding_idx", int64_t(0)}});
        expectClose(y[0], like(dtype, oshape, want), "embedding " + dimsName(ishape), 1, {0, 0});
      }
    }
  }
  auto w = randomTensor(DType::F32, {10, 4});
  EXPECT_EQ(errorOf("embedding", {w, makeTensor(DType::I64, {3}, {1, 12, 2})}),
            "embedding: index 12 is out of range for a table of 10 rows");
  EXPECT_EQ(errorOf("embedding", {w, makeTensor(DType::I32, {2}, {-1, 2})}),
            "embedding: index -1 is out of range for a table of 10 rows");
  EXPECT_EQ(errorOf("embedding", {w, makeTensor(DType::F32, {2}, {1, 2})}),
            "embedding: input 'indices' has dtype f32; expected i64 or i32 (indices)");
}

class NnDropout : public ConformanceTest {};

TEST_F(NnDropout, ReproducesTheHashMask) {
  struct Case {
    Shape shape;
    double p;
    int64_t seed;
    DType dtype;
  };
  for (const Case& c : {Case{{1000}, 0.3, 42, DType::F32}, Case{{7, 9}, 0.5, -5, DType::F16},
                        Case{{333}, 0.9, 1LL << 40, DType::BF16}, Case{{10}, 1.0, 1, DType::F32},
                        Case{{0}, 0.5, 1, DType::F32},
                        Case{{16'777'473}, 0.5, 7, DType::F16}}) {  // > 65535 workgroups of 256
    auto x = randomTensor(c.dtype, c.shape);
    auto y = call("dropout", {x}, {{"p", c.p}, {"seed", c.seed}});
    std::vector<double> want(x.values.size());
    uint32_t threshold = dropoutThreshold(c.p);
    double scale = c.p >= 1 ? 0 : double(float(1.0 / (1.0 - c.p)));
    size_t kept = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      bool keep = dropoutHash(uint64_t(c.seed), uint32_t(i)) >= threshold;
      kept += keep;
      want[i] = keep ? x.values[i] * scale : 0;
    }
    expectClose(y[0], like(c.dtype, c.shape, want), "dropout " + dimsName(c.shape));
    if (want.size() >= 1000) {
      EXPECT_NEAR(double(kept) / double(want.size()), 1 - c.p, 0.05);
    }
  }
  auto x = randomTensor(DType::F32, {50});
  expectClose(call("dropout", {x}, {{"p", 0.0}})[0], x, "dropout p=0", 1, {0, 0});
  expectClose(call("dropout", {x}, {{"training", false}})[0], x, "dropout eval", 1, {0, 0});
  EXPECT_EQ(errorOf("dropout", {x}, {{"p", 1.5}}), "dropout: attribute 'p' is 1.5; expected a probability in [0, 1]");
}

// ---------------------------------------------------------------- losses

// Reduces per-item losses `l` with weights `w` (mean denominators) as the op's reduction.
HostTensor reduceRef(DType dtype, const Shape& itemShape, const std::vector<double>& l, const std::vector<double>& w,
                     const std::string& reduction, double batch = 1) {
  if (reduction == "none") return like(dtype, itemShape, l);
  double s = 0, sw = 0;
  for (size_t i = 0; i < l.size(); ++i) s += l[i], sw += w[i];
  if (reduction == "sum") return scalar(dtype, s);
  if (reduction == "batchmean") return scalar(dtype, s / batch);
  return scalar(dtype, s / sw);
}

class NnLoss : public ConformanceTest {};

TEST_F(NnLoss, Elementwise) {
  struct Case {
    Shape shape;
    DType dtype;
  };
  for (const Case& c : {Case{{3, 7}, DType::F32}, Case{{}, DType::F32}, Case{{0}, DType::F32}, Case{{1, 1}, DType::F32},
                        Case{{4, 5}, DType::F16}, Case{{4, 5}, DType::BF16}}) {
    auto x = randomTensor(c.dtype, c.shape, -2, 2), t = randomTensor(c.dtype, c.shape, -2, 2);
    auto px = randomTensor(c.dtype, c.shape, 0.02, 0.98), pt = randomTensor(c.dtype, c.shape, 0, 1);
    Shape last = c.shape.empty() ? Shape{} : Shape{c.shape.back()};
    auto w = randomTensor(c.dtype, last, 0.5, 1.5), pw = randomTensor(c.dtype, last, 0.5, 2);
    auto bw = [&](const HostTensor& v, size_t i) { return v.values[size_t(broadcastIndex(v.shape, c.shape, int64_t(i)))]; };
    size_t n = x.values.size();
    std::vector<double> ones(n, 1.0);
    struct L {
      const char* op;
      std::vector<HostTensor> in;
      Attr attrs;
      std::function<double(size_t)> f;
    };
    const double beta = 0.5;
    std::vector<L> losses{
        {"mse_loss", {x, t}, {}, [&](size_t i) { return std::pow(x.values[i] - t.values[i], 2); }},
        {"l1_loss", {x, t}, {}, [&](size_t i) { return std::abs(x.values[i] - t.values[i]); }},
        {"smooth_l1_loss", {x, t}, {{"beta", beta}},
         [&](size_t i) {
           double d = std::abs(x.values[i] - t.values[i]);
           return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
         }},
        {"binary_cross_entropy", {px, pt, w}, {},
         [&](size_t i) {
           double a = px.values[i], b = pt.values[i];
           return -bw(w, i) * (b * std::max(std::log(a), -100.0) + (1 - b) * std::max(std::log(1 - a), -100.0));
         }},
        {"binary_cross_entropy_with_logits", {x, pt, w, pw}, {},
         [&](size_t i) {
           double a = x.values[i], b = pt.values[i];
           double lw = (bw(pw, i) - 1) * b + 1;
           return bw(w, i) * ((1 - b) * a + lw * (std::log1p(std::exp(-std::abs(a))) + std::max(-a, 0.0)));
         }},
        {"binary_cross_entropy_with_logits", {x, pt}, {},
         [&](size_t i) {
           double a = x.values[i], b = pt.values[i];
           return (1 - b) * a + std::log1p(std::exp(-std::abs(a))) + std::max(-a, 0.0);
         }},
        {"kl_div", {x, pt}, {},
         [&](size_t i) { double b = pt.values[i]; return (b > 0 ? b * std::log(b) : 0.0) - b * x.values[i]; }},
        {"kl_div", {x, t}, {{"log_target", true}},
         [&](size_t i) { return std::exp(t.values[i]) * (t.values[i] - x.values[i]); }},
    };
    for (const auto& loss : losses) {
      std::vector<double> l(n);
      for (size_t i = 0; i < n; ++i) l[i] = loss.f(i);
      std::vector<std::string> reductions{"none", "sum", "mean"};
      if (std::string(loss.op) == "kl_div") reductions.push_back("batchmean");
      for (const auto& red : reductions) {
        Attr attrs = loss.attrs;
        attrs.push_back({"reduction", red});
        auto y = call(loss.op, loss.in, attrs);
        double batch = c.shape.empty() ? 1 : double(c.shape[0]);
        expectClose(y[0], reduceRef(c.dtype, c.shape, l, ones, red, batch),
                    std::string(loss.op) + " " + red + " " + dimsName(c.shape) + " " + std::string(dtypeName(c.dtype)) +
                        " inputs " + std::to_string(loss.in.size()),
                    red == "none" ? 4 : 4 * double(std::max<size_t>(n, 1)));
      }
    }
  }
  // A reduction over many workgroups (partials, then a final pass).
  auto x = randomTensor(DType::F32, {1'100'000}), t = randomTensor(DType::F32, {1'100'000});
  double s = 0;
  for (size_t i = 0; i < x.values.size(); ++i) s += std::pow(x.values[i] - t.values[i], 2);
  expectClose(call("mse_loss", {x, t}, {{"reduction", std::string("sum")}})[0], scalar(DType::F32, s), "mse_loss sum 1.1M",
              1, {1e-3, 1e-5});
  expectClose(call("mse_loss", {x, t})[0], scalar(DType::F32, s / 1.1e6), "mse_loss mean 1.1M", 1, {1e-6, 1e-5});
  EXPECT_EQ(errorOf("mse_loss", {x, randomTensor(DType::F32, {3})}),
            "mse_loss: input 'target' has shape [3]; expected [1100000] like 'input'");
  EXPECT_EQ(errorOf("l1_loss", {randomTensor(DType::F32, {3}), randomTensor(DType::F32, {3})},
                    {{"reduction", std::string("avg")}}),
            "l1_loss: attribute 'reduction' is 'avg'; expected 'mean', 'sum' or 'none'");
}

// nll_loss / cross_entropy reference: per-sample losses and weights.
struct ClassRef {
  std::vector<double> l, w;
};
ClassRef classRef(const HostTensor& x, const HostTensor& t, const HostTensor* weight, int64_t ignore, double smoothing,
                  bool logits) {
  const Shape& s = x.shape;
  int64_t C = s.size() == 1 ? s[0] : s[1], inner = 1;
  for (size_t k = 2; k < s.size(); ++k) inner *= s[k];
  ClassRef r;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t n = i / inner, pos = i % inner, c = int64_t(t.values[size_t(i)]);
    auto at = [&](int64_t k) { return x.values[size_t(n * C * inner + k * inner + pos)]; };
    if (c == ignore) {
      r.l.push_back(0);
      r.w.push_back(0);
      continue;
    }
    double wc = weight ? weight->values[size_t(c)] : 1;
    double lse = 0;
    if (logits) {
      double m = -INFINITY, sum = 0;
      for (int64_t k = 0; k < C; ++k) m = std::max(m, at(k));
      for (int64_t k = 0; k < C; ++k) sum += std::exp(at(k) - m);
      lse = m + std::log(sum);
    }
    double l = -wc * (at(c) - lse);
    if (smoothing > 0) {
      double sm = 0;
      for (int64_t k = 0; k < C; ++k) sm -= (weight ? weight->values[size_t(k)] : 1) * (at(k) - lse);
      l = (1 - smoothing) * l + smoothing / double(C) * sm;
    }
    r.l.push_back(l);
    r.w.push_back(wc);
  }
  return r;
}

TEST_F(NnLoss, NllAndCrossEntropy) {
  struct Case {
    Shape shape;  // input
    DType dtype, index;
    bool weight;
    int64_t ignore;
    double smoothing;
  };
  for (const Case& c : {Case{{6, 5}, DType::F32, DType::I64, false, -100, 0}, Case{{6, 5}, DType::F32, DType::I64, true, 2, 0},
                        Case{{3, 4, 2, 3}, DType::F32, DType::I32, true, 1, 0.1},
                        Case{{7}, DType::F32, DType::I64, false, -100, 0}, Case{{0, 4}, DType::F32, DType::I64, false, -100, 0},
                        Case{{4, 300}, DType::F32, DType::I64, false, -100, 0.2},
                        Case{{6, 5}, DType::F16, DType::I64, true, -100, 0.3}, Case{{5, 3, 4}, DType::BF16, DType::I32, false, 0, 0},
                        Case{{3000, 3}, DType::F32, DType::I64, true, -100, 0}}) {
    auto x = randomTensor(c.dtype, c.shape, -3, 3);
    int64_t C = c.shape.size() == 1 ? c.shape[0] : c.shape[1];
    Shape ts = c.shape;
    if (ts.size() == 1) ts.clear();
    else ts.erase(ts.begin() + 1);
    std::vector<double> tv;
    for (int64_t i = 0; i < numel(ts); ++i) tv.push_back(double(std::uniform_int_distribution<int64_t>(0, C - 1)(rngForTests())));
    auto t = makeTensor(c.index, ts, tv);
    auto w = randomTensor(c.dtype, {C}, 0.2, 2);
    std::vector<HostTensor> in{x, t};
    if (c.weight) in.push_back(w);
    for (bool ce : {false, true}) {
      ClassRef ref = classRef(x, t, c.weight ? &w : nullptr, c.ignore, ce ? c.smoothing : 0, ce);
      for (std::string red : {"none", "sum", "mean"}) {
        Attr attrs{{"reduction", red}, {"ignore_index", c.ignore}};
        if (ce) attrs.push_back({"label_smoothing", c.smoothing});
        auto y = call(ce ? "cross_entropy" : "nll_loss", in, attrs);
        expectClose(y[0], reduceRef(c.dtype, ts, ref.l, ref.w, red),
                    std::string(ce ? "cross_entropy " : "nll_loss ") + red + " " + dimsName(c.shape) + " " +
                        std::string(dtypeName(c.dtype)),
                    4 * double(C) * (red == "none" ? 1 : double(std::max<int64_t>(numel(ts), 1))));
      }
    }
  }
  // Negative i32 targets: the default ignore_index -100.
  {
    auto x = randomTensor(DType::F32, {4, 3});
    auto t = makeTensor(DType::I32, {4}, {0, -100, 2, -100});
    auto w = randomTensor(DType::F32, {3}, 0.5, 1.5);
    for (bool ce : {false, true}) {
      ClassRef ref = classRef(x, t, &w, -100, 0, ce);
      auto y = call(ce ? "cross_entropy" : "nll_loss", {x, t, w});
      expectClose(y[0], reduceRef(DType::F32, {4}, ref.l, ref.w, "mean"), "ignore_index -100, i32 target", 10);
    }
  }
  auto x = randomTensor(DType::F32, {3, 10});
  EXPECT_EQ(errorOf("nll_loss", {x, makeTensor(DType::I32, {3}, {1, -7, 2})}),
            "nll_loss: target -7 is out of range for 10 classes (and is not ignore_index)");
  EXPECT_EQ(errorOf("cross_entropy", {x, makeTensor(DType::I64, {3}, {1, 12, 2})}),
            "cross_entropy: target 12 is out of range for 10 classes (and is not ignore_index)");
  EXPECT_EQ(errorOf("nll_loss", {x, makeTensor(DType::I64, {3}, {1, -1, 2})}),
            "nll_loss: target -1 is out of range for 10 classes (and is not ignore_index)");
  EXPECT_EQ(errorOf("nll_loss", {x, makeTensor(DType::I64, {4}, {1, 1, 2, 3})}),
            "nll_loss: input 'target' has shape [4]; expected [3] (input's shape [3, 10] without the class dim)");
  EXPECT_EQ(errorOf("cross_entropy", {x, makeTensor(DType::I64, {3}, {1, 1, 2}), randomTensor(DType::F32, {3})}),
            "cross_entropy: input 'weight' has shape [3]; expected [10] (one per class)");
}

// ---------------------------------------------------------------- attention

HostTensor attentionRef(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor* mask,
                        bool causal, double scale) {
  Shape bq(q.shape.begin(), q.shape.end() - 2), bk(k.shape.begin(), k.shape.end() - 2), bv(v.shape.begin(), v.shape.end() - 2);
  Shape batch = bq.size() >= bk.size() ? bq : bk;
  if (bv.size() > batch.size()) batch = bv;
  for (size_t i = 0; i < batch.size(); ++i) {
    auto dimOf = [&](const Shape& s) { size_t off = batch.size() - s.size(); return i < off ? 1 : s[i - off]; };
    batch[i] = std::max({dimOf(bq), dimOf(bk), dimOf(bv)});
  }
  int64_t L = q.shape[q.shape.size() - 2], E = q.shape.back(), S = k.shape[k.shape.size() - 2], Ev = v.shape.back();
  Shape out = batch;
  out.push_back(L);
  out.push_back(Ev);
  Shape full = batch;
  full.push_back(L);
  full.push_back(S);
  std::vector<double> o;
  for (int64_t b = 0; b < numel(batch); ++b) {
    int64_t oq = broadcastIndex(bq, batch, b), ok = broadcastIndex(bk, batch, b), ov = broadcastIndex(bv, batch, b);
    for (int64_t l = 0; l < L; ++l) {
      std::vector<double> sc(static_cast<size_t>(S));
      double m = -INFINITY;
      for (int64_t s = 0; s < S; ++s) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q.values[size_t((oq * L + l) * E + e)] * k.values[size_t((ok * S + s) * E + e)];
        double x = dot * scale;
        if (causal && s > l) x = -INFINITY;
        if (mask) {
          double mv = mask->values[size_t(broadcastIndex(mask->shape, full, (b * L + l) * S + s))];
          if (mask->dtype == DType::Bool) x = mv != 0 ? x : -INFINITY;
          else x += mv;
        }
        sc[size_t(s)] = x;
        m = std::max(m, x);
      }
      double sum = 0;
      for (auto& x : sc) sum += (x = m == -INFINITY ? 0 : std::exp(x - m));
      for (int64_t j = 0; j < Ev; ++j) {
        double acc = 0;
        for (int64_t s = 0; s < S; ++s) acc += sc[size_t(s)] * v.values[size_t((ov * S + s) * Ev + j)];
        o.push_back(sum > 0 ? acc / sum : 0);
      }
    }
  }
  return like(q.dtype, out, o);
}

class NnAttention : public ConformanceTest {};

TEST_F(NnAttention, MatchesReference) {
  struct Case {
    Shape q, k, v;
    int mask;  // 0 none, 1 bool [L, S], 2 float [1, L, S]
    bool causal;
    DType dtype;
  };
  for (const Case& c : {Case{{2, 3, 4, 8}, {2, 3, 6, 8}, {2, 3, 6, 5}, 0, false, DType::F32},
                        Case{{5, 8}, {5, 8}, {5, 3}, 0, true, DType::F32},
                        Case{{2, 4, 8}, {6, 8}, {6, 5}, 1, false, DType::F32},
                        Case{{2, 3, 4, 8}, {3, 6, 8}, {1, 6, 5}, 2, false, DType::F32},
                        Case{{1, 2, 8}, {1, 300, 8}, {1, 300, 130}, 0, false, DType::F32},  // S, Ev > workgroup
                        Case{{1100, 1, 4}, {1100, 3, 4}, {1100, 3, 2}, 0, false, DType::F32},  // more rows than groups
                        Case{{0, 3, 4}, {0, 2, 4}, {0, 2, 4}, 0, false, DType::F32},
                        Case{{2, 4, 8}, {2, 6, 8}, {2, 6, 5}, 1, false, DType::F16},
                        Case{{4, 4, 8}, {4, 4, 8}, {4, 4, 8}, 0, true, DType::BF16}}) {
    auto q = randomTensor(c.dtype, c.q), k = randomTensor(c.dtype, c.k), v = randomTensor(c.dtype, c.v);
    int64_t L = c.q[c.q.size() - 2], S = c.k[c.k.size() - 2];
    HostTensor mask;
    std::vector<HostTensor> in{q, k, v};
    if (c.mask == 1) {
      std::vector<double> mv;
      for (int64_t i = 0; i < L * S; ++i) mv.push_back(i % 3 != 1 && i / S != 1 ? 1 : 0);  // row 1 fully masked
      mask = makeTensor(DType::Bool, {L, S}, mv);
    } else if (c.mask == 2) {
      mask = randomTensor(c.dtype, {1, L, S}, -2, 2);
    }
    if (c.mask) in.push_back(mask);
    double scale = 1 / std::sqrt(double(c.q.back()));
    auto y = call("scaled_dot_product_attention", in, {{"is_causal", c.causal}});
    expectClose(y[0], attentionRef(q, k, v, c.mask ? &mask : nullptr, c.causal, scale),
                "sdpa " + dimsName(c.q) + " " + dimsName(c.k) + " " + std::string(dtypeName(c.dtype)), 10);
  }
  auto q = randomTensor(DType::F32, {3, 4}), k = randomTensor(DType::F32, {5, 4}), v = randomTensor(DType::F32, {5, 2});
  auto y = call("scaled_dot_product_attention", {q, k, v}, {{"scale", 0.7}});
  expectClose(y[0], attentionRef(q, k, v, nullptr, false, 0.7), "sdpa scale 0.7", 10);
  EXPECT_EQ(errorOf("scaled_dot_product_attention", {q, k, v}, {{"dropout_p", 0.1}}),
            "scaled_dot_product_attention: attribute 'dropout_p' is 0.1; tensord supports only 0 (apply dropout "
            "to the output separately)");
  EXPECT_EQ(errorOf("scaled_dot_product_attention", {q, randomTensor(DType::F32, {5, 3}), v}),
            "scaled_dot_product_attention: input 'key' has shape [5, 3]; expected last dim 4 like query's");
  EXPECT_EQ(errorOf("scaled_dot_product_attention", {q, k, v, makeTensor(DType::Bool, {3, 5}, std::vector<double>(15, 1))},
                    {{"is_causal", true}}),
            "scaled_dot_product_attention: attn_mask and is_causal=true cannot be given together");
  EXPECT_EQ(errorOf("scaled_dot_product_attention", {q, k, v, randomTensor(DType::F32, {4, 5})}),
            "scaled_dot_product_attention: input 'attn_mask' has shape [4, 5]; expected a shape that broadcasts to [3, 5]");
}

}  // namespace
}  // namespace tensord::compute::testing
