// Conformance of the optimizer ops (ops_optim.cpp) against CPU references in
// double written from torch.optim's single-tensor algorithms: three
// consecutive steps on the device, every parameter and state tensor compared
// after each. References round what the device stores (params, states) to
// the tensors' dtype, as the device does.

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "compute/op_table.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(optim, "sgd", "adam", "adamw", "sgd_multi", "adam_multi", "adamw_multi", "clip_grad_norm_", "zero_");

using Attr = std::vector<std::pair<std::string, AttrValue>>;
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- references

struct Sgd {
  double lr = 0.1, momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false;

  size_t groupSize() const { return momentum != 0 ? 3 : 2; }
  Attr attrs(int64_t step) const {
    return {{"lr", lr},
            {"momentum", momentum},
            {"dampening", dampening},
            {"weight_decay", weightDecay},
            {"nesterov", nesterov},
            {"maximize", maximize},
            {"step", step}};
  }
  // torch.optim.SGD on the group t[first] (param), t[first + 1] (grad), t[first + 2] (momentum_buffer).
  void step(std::vector<HostTensor>& t, size_t first, int64_t step) const {
    HostTensor& param = t[first];
    const HostTensor& grad = t[first + 1];
    DType d = param.dtype;
    for (size_t i = 0; i < param.values.size(); ++i) {
      double g = maximize ? -grad.values[i] : grad.values[i];
      g += weightDecay * param.values[i];
      if (momentum != 0) {
        double& buf = t[first + 2].values[i];
        buf = roundTo(d, step == 1 ? g : momentum * buf + (1 - dampening) * g);
        g = nesterov ? g + momentum * buf : buf;
      }
      param.values[i] = roundTo(d, param.values[i] - lr * g);
    }
  }
};

// The amsgrad cases take a small beta2, so that exp_avg_sq shrinks between
// steps and its running maximum differs from it.
struct Adam {
  double lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;  // decoupled: AdamW

  size_t groupSize() const { return amsgrad ? 5 : 4; }
  Attr attrs(int64_t step) const {
    return {{"lr", lr},           {"beta1", beta1},       {"beta2", beta2}, {"eps", eps}, {"weight_decay", weightDecay},
            {"amsgrad", amsgrad}, {"maximize", maximize}, {"step", step}};
  }
  // Adam / AdamW on param, grad, exp_avg, exp_avg_sq (, max_exp_avg_sq) from t[first]. As
  // torch's implementation, amsgrad keeps the maximum of the raw exp_avg_sq.
  void step(std::vector<HostTensor>& t, size_t first, int64_t step) const {
    HostTensor& param = t[first];
    DType d = param.dtype;
    double bc1 = 1 - std::pow(beta1, double(step)), bc2 = 1 - std::pow(beta2, double(step));
    for (size_t i = 0; i < param.values.size(); ++i) {
      double w = param.values[i];
      double g = maximize ? -t[first + 1].values[i] : t[first + 1].values[i];
      if (decoupled) {
        w = roundTo(d, w * (1 - lr * weightDecay));
      } else {
        g += weightDecay * w;
      }
      double& m = t[first + 2].values[i];
      double& v = t[first + 3].values[i];
      m = roundTo(d, beta1 * m + (1 - beta1) * g);
      v = roundTo(d, beta2 * v + (1 - beta2) * g * g);
      double vt = v;
      if (amsgrad) {
        double& vmax = t[first + 4].values[i];
        vmax = std::max(vmax, v);
        vt = vmax;
      }
      param.values[i] = roundTo(d, w - lr * (m / bc1) / (std::sqrt(vt / bc2) + eps));
    }
  }
};

// A random gradient with |elements| in [0.1, 1]: f16 states then hold no
// subnormals, which some devices flush to zero (a tiny m over a v flushed
// to 0 would make an update of m / eps).
HostTensor gradTensor(DType dtype, const Shape& shape) {
  HostTensor g = randomTensor(dtype, shape);
  for (auto& x : g.values) x = roundTo(dtype, std::copysign(0.1 + 0.9 * std::abs(x), x));
  return g;
}

// A group of fresh tensors for a param of `shape`: param and grad random,
// states zero (as torch.optim creates them).
std::vector<HostTensor> group(DType dtype, const Shape& shape, size_t size) {
  std::vector<HostTensor> g{randomTensor(dtype, shape), gradTensor(dtype, shape)};
  int64_t n = g[0].numel();
  while (g.size() < size) g.push_back(makeTensor(dtype, shape, std::vector<double>(size_t(n), 0.0)));
  return g;
}

class OptimTest : public ConformanceTest {
 protected:
  // Runs `op` on `tensors` for steps 1, 2, 3, with a new gradient at each
  // position in `grads` every step, and compares every tensor with what
  // `reference` makes of the host copies after each step.
  static std::vector<TensorView> threeSteps(const std::string& op, std::vector<HostTensor> tensors,
                                            const std::vector<size_t>& grads, const std::function<Attr(int64_t)>& attrs,
                                            const std::function<void(std::vector<HostTensor>&, int64_t)>& reference,
                                            const std::string& what) {
    std::vector<TensorView> views;
    for (const auto& t : tensors) views.push_back(put(t));
    for (int64_t step = 1; step <= 3; ++step) {
      if (step > 1) {
        for (size_t k : grads) {
          tensors[k] = gradTensor(tensors[k].dtype, tensors[k].shape);
          views[k] = put(tensors[k]);
        }
      }
      EXPECT_TRUE(run(op, views, attrs(step)).empty()) << op << " returns nothing";
      reference(tensors, step);
      for (size_t k = 0; k < views.size(); ++k) {
        expectClose(get(views[k]), tensors[k],
                    what + ", step " + std::to_string(step) + ", tensor " + std::to_string(k));
      }
    }
    return views;
  }

  static void sgdCase(const Sgd& o, DType dtype, const std::string& what) {
    Shape shape{3, 5};
    threeSteps(
        "sgd", group(dtype, shape, o.groupSize()), {1}, [&](int64_t s) { return o.attrs(s); },
        [&](std::vector<HostTensor>& t, int64_t s) { o.step(t, 0, s); }, "sgd " + what);
  }

  static void adamCase(const std::string& op, const Adam& o, DType dtype, const std::string& what) {
    Shape shape{4, 3};
    threeSteps(
        op, group(dtype, shape, o.groupSize()), {1}, [&](int64_t s) { return o.attrs(s); },
        [&](std::vector<HostTensor>& t, int64_t s) { o.step(t, 0, s); }, op + " " + what);
  }

  // NAME_multi over params of several shapes (one of several tiles, one
  // empty) against the reference, and against NAME called once per param on
  // the device alongside: the same kernel and constants, so bit-identical.
  template <typename Options>
  static void multiCase(const std::string& single, const Options& o, DType dtype) {
    const std::vector<Shape> shapes = {{2, 3}, {2500}, {0}, {3, 1, 4}};
    const size_t size = o.groupSize();
    std::vector<HostTensor> all;
    std::vector<size_t> grads;
    for (const auto& shape : shapes) {
      grads.push_back(all.size() + 1);
      for (auto& t : group(dtype, shape, size)) all.push_back(std::move(t));
    }
    const std::string what = single + "_multi " + std::string(dtypeName(dtype));
    std::vector<std::vector<TensorView>> singles(shapes.size());
    auto multi = threeSteps(
        single + "_multi", all, grads, [&](int64_t s) { return o.attrs(s); },
        [&](std::vector<HostTensor>& t, int64_t s) {
          // t holds this step's grads and the states before it.
          for (size_t first = 0; first < t.size(); first += size) {
            std::vector<TensorView>& views = singles[first / size];
            if (s == 1) {
              for (size_t k = 0; k < size; ++k) views.push_back(put(t[first + k]));
            }
            views[1] = put(t[first + 1]);
            run(single, views, o.attrs(s));
            o.step(t, first, s);
          }
        },
        what);
    for (size_t first = 0; first < all.size(); first += size) {
      for (size_t k = 0; k < size; ++k) {
        expectClose(
            get(multi[first + k]), get(singles[first / size][k]),
            what + " vs " + single + ", group " + std::to_string(first / size) + ", tensor " + std::to_string(k), 1,
            {0, 0});
      }
    }
  }
};

// ---------------------------------------------------------------- sgd

TEST_F(OptimTest, Sgd) {
  sgdCase({}, DType::F32, "plain");
  sgdCase({.momentum = 0.9, .dampening = 0.1}, DType::F32, "momentum + dampening");
  sgdCase({.momentum = 0.9, .nesterov = true}, DType::F32, "nesterov");
  sgdCase({.weightDecay = 0.05}, DType::F32, "weight_decay");
  sgdCase({.momentum = 0.8, .weightDecay = 0.05, .maximize = true}, DType::F32, "momentum + weight_decay, maximize");
  sgdCase({.momentum = 0.9, .nesterov = true}, DType::F16, "nesterov f16");
}

TEST_F(OptimTest, Adam) {
  adamCase("adam", {}, DType::F32, "plain");
  adamCase("adam", {.weightDecay = 0.1}, DType::F32, "weight_decay");
  adamCase("adam", {.beta2 = 0.5, .amsgrad = true}, DType::F32, "amsgrad");
  adamCase("adam", {.weightDecay = 0.1, .maximize = true}, DType::F32, "maximize");
  adamCase("adam", {.beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3}, DType::F32, "other betas, eps");
  adamCase("adam", {.beta2 = 0.5, .amsgrad = true}, DType::F16, "amsgrad f16");
}

TEST_F(OptimTest, AdamW) {
  adamCase("adamw", {.weightDecay = 0.01, .decoupled = true}, DType::F32, "plain");
  adamCase("adamw", {.beta2 = 0.5, .weightDecay = 0.3, .amsgrad = true, .decoupled = true}, DType::F32, "amsgrad");
  adamCase("adamw", {.weightDecay = 0.1, .maximize = true, .decoupled = true}, DType::BF16, "maximize bf16");
  // weight_decay defaults to 0.01 (PyTorch's), unlike adam's 0.
  Adam o{.weightDecay = 0.01, .decoupled = true};
  auto t = group(DType::F32, {6}, 4);
  std::vector<TensorView> views;
  for (const auto& x : t) views.push_back(put(x));
  run("adamw", views, {{"lr", 0.1}, {"step", int64_t(1)}});
  o.step(t, 0, 1);
  expectClose(get(views[0]), t[0], "adamw default weight_decay");
}

// ---------------------------------------------------------------- multi-tensor forms

TEST_F(OptimTest, MultiAgreesWithSingleCalls) {
  multiCase("sgd", Sgd{.momentum = 0.9, .dampening = 0.2, .weightDecay = 0.01}, DType::F32);
  multiCase("sgd", Sgd{}, DType::F32);
  multiCase("adam", Adam{.beta2 = 0.5, .weightDecay = 0.1, .amsgrad = true}, DType::F32);
  multiCase("adamw", Adam{.weightDecay = 0.05, .decoupled = true}, DType::F32);
  multiCase("adamw", Adam{.beta2 = 0.5, .weightDecay = 0.05, .amsgrad = true, .decoupled = true}, DType::F16);
}

TEST_F(OptimTest, MultiMixesDTypesAcrossGroups) {
  Adam o{.beta2 = 0.5, .amsgrad = true};
  std::vector<HostTensor> all = group(DType::F32, {5}, 5);
  for (auto& t : group(DType::BF16, {2, 2}, 5)) all.push_back(std::move(t));
  for (auto& t : group(DType::F16, {3}, 5)) all.push_back(std::move(t));
  threeSteps(
      "adam_multi", all, {1, 6, 11}, [&](int64_t s) { return o.attrs(s); },
      [&](std::vector<HostTensor>& t, int64_t s) {
        for (size_t first = 0; first < t.size(); first += 5) o.step(t, first, s);
      },
      "adam_multi f32 + bf16 + f16");
}

TEST_F(OptimTest, MultiUpdatesAParamGivenTwiceTwice) {
  // As PyTorch's loop: the second group sees the first group's update.
  Sgd o{.momentum = 0.5};
  auto g = group(DType::F32, {2100}, 3);
  std::vector<HostTensor> host = g;
  std::vector<TensorView> views;
  for (const auto& t : g) views.push_back(put(t));
  std::vector<TensorView> twice = {views[0], views[1], views[2], views[0], views[1], views[2]};
  run("sgd_multi", twice, o.attrs(2));
  o.step(host, 0, 2);
  o.step(host, 0, 2);
  expectClose(get(views[0]), host[0], "sgd_multi param given twice");
  expectClose(get(views[2]), host[2], "sgd_multi momentum_buffer given twice");
}

// ---------------------------------------------------------------- clip_grad_norm_

// torch.nn.utils.clip_grad_norm_ on host copies: returns total_norm, scales `grads`.
double clipReference(std::vector<HostTensor>& grads, double maxNorm, double p) {
  double acc = 0;
  for (const auto& g : grads) {
    for (double x : g.values) {
      if (std::isinf(p))
        acc = std::isnan(x) || std::isnan(acc) ? kNaN : std::max(acc, std::abs(x));
      else
        acc += std::pow(std::abs(x), p);
    }
  }
  double total = std::isinf(p) ? acc : std::pow(acc, 1 / p);
  double coef = maxNorm / (total + 1e-6);
  if (coef > 1) coef = 1;
  for (auto& g : grads) {
    for (auto& x : g.values) x = roundTo(g.dtype, x * double(float(coef)));
  }
  return total;
}

TEST_F(OptimTest, ClipGradNorm) {
  struct Case {
    double maxNorm, p;
    std::vector<DType> dtypes;
    std::string what;
  };
  const std::vector<Shape> shapes = {{3, 4}, {1500}, {0}, {2, 2, 2}};
  for (const Case& c :
       std::vector<Case>{{1000, 2, {DType::F32}, "2-norm below max_norm"},
                         {1.5, 2, {DType::F32}, "2-norm above max_norm"},
                         {0.5, kInf, {DType::F32}, "inf-norm"},
                         {2, 1, {DType::F32}, "1-norm"},
                         {2, 3, {DType::F32}, "3-norm"},
                         {1, 2, {DType::F32, DType::F16, DType::BF16, DType::F16}, "2-norm, mixed dtypes"}}) {
    std::vector<HostTensor> grads;
    std::vector<TensorView> views;
    for (size_t k = 0; k < shapes.size(); ++k) {
      grads.push_back(randomTensor(c.dtypes[k % c.dtypes.size()], shapes[k], -2, 2));
      views.push_back(put(grads.back()));
    }
    auto out = run("clip_grad_norm_", views, {{"max_norm", c.maxNorm}, {"norm_type", c.p}});
    double total = clipReference(grads, c.maxNorm, c.p);
    ASSERT_EQ(out.size(), 1u);
    expectClose(get(out[0]), makeTensor(DType::F32, {}, {total}), "clip_grad_norm_ total_norm, " + c.what, 10);
    for (size_t k = 0; k < views.size(); ++k) {
      expectClose(get(views[k]), grads[k], "clip_grad_norm_ grad " + std::to_string(k) + ", " + c.what);
    }
  }
}

TEST_F(OptimTest, ClipGradNormNonFinite) {
  // An infinite element: total inf, coefficient 0, so inf * 0 = NaN and the rest 0 (as PyTorch).
  auto g = makeTensor(DType::F32, {3}, {1, kInf, -2});
  auto out = call("clip_grad_norm_", {g}, {{"max_norm", 1.0}});
  EXPECT_EQ(get(put(out[0])).values[0], kInf);
  std::vector<TensorView> views{put(g)};
  run("clip_grad_norm_", views, {{"max_norm", 1.0}});
  auto scaled = get(views[0]);
  EXPECT_EQ(scaled.values[0], 0);
  EXPECT_TRUE(std::isnan(scaled.values[1]));
  EXPECT_EQ(scaled.values[2], 0);
  // A NaN anywhere makes the total NaN, for every norm.
  for (double p : {2.0, kInf}) {
    auto n = makeTensor(DType::F32, {4}, {1, 2, kNaN, 3});
    auto total = call("clip_grad_norm_", {randomTensor(DType::F32, {5}), n}, {{"max_norm", 1.0}, {"norm_type", p}});
    EXPECT_TRUE(std::isnan(total[0].values[0])) << "norm_type " << p;
  }
  EXPECT_EQ(
      errorOf("clip_grad_norm_", {randomTensor(DType::F32, {2}), g}, {{"max_norm", 1.0}, {"error_if_nonfinite", true}}),
      "clip_grad_norm_: the total norm of order 2 of the gradients is inf (non-finite), so it cannot clip them; "
      "set error_if_nonfinite=false to scale them by it anyway");
  EXPECT_EQ(errorOf("clip_grad_norm_", {makeTensor(DType::F16, {2}, {kNaN, 1})},
                    {{"max_norm", 1.0}, {"norm_type", kInf}, {"error_if_nonfinite", true}}),
            "clip_grad_norm_: the total norm of order inf of the gradients is nan (non-finite), so it cannot clip "
            "them; set error_if_nonfinite=false to scale them by it anyway");
  // Finite: error_if_nonfinite changes nothing.
  auto ok =
      call("clip_grad_norm_", {makeTensor(DType::F32, {2}, {3, 4})}, {{"max_norm", 1.0}, {"error_if_nonfinite", true}});
  expectClose(ok[0], makeTensor(DType::F32, {}, {5}), "clip_grad_norm_ finite with error_if_nonfinite");
}

// ---------------------------------------------------------------- zero_

TEST_F(OptimTest, Zero) {
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    if (!engine().dtypeSupported(dtype)) continue;
    for (const Shape& shape : {Shape{3, 700}, Shape{}, Shape{0}}) {
      auto x = randomTensor(dtype, shape, 1, 9);
      std::vector<TensorView> views{put(x)};
      EXPECT_TRUE(run("zero_", views).empty());
      expectClose(get(views[0]), makeTensor(dtype, shape, std::vector<double>(x.values.size(), 0.0)),
                  "zero_ " + dimsName(shape) + " " + std::string(dtypeName(dtype)));
    }
  }
}

// ---------------------------------------------------------------- errors and the table

TEST_F(OptimTest, Errors) {
  auto t = [](const Shape& s, DType d = DType::F32) { return randomTensor(d, s); };
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2})}, {{"momentum", 0.9}}),
            "sgd: momentum != 0 needs input 'momentum_buffer' (a state tensor of param's shape and dtype)");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2}), t({2})}),
            "sgd: input 'momentum_buffer' is given, but momentum is 0 (plain SGD keeps no state); leave it off");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2})}, {{"nesterov", true}}),
            "sgd: nesterov=true requires momentum > 0 and dampening 0; got momentum 0, dampening 0");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2}), t({2})}, {{"nesterov", true}, {"momentum", 0.9}, {"dampening", 0.1}}),
            "sgd: nesterov=true requires momentum > 0 and dampening 0; got momentum 0.9, dampening 0.1");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2})}, {{"lr", -0.1}}), "sgd: attribute 'lr' is -0.1; expected >= 0");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2})}, {{"step", int64_t(0)}}),
            "sgd: attribute 'step' is 0; expected the 1-based number of this step (>= 1)");
  EXPECT_EQ(errorOf("sgd", {t({2}), t({2}, DType::F16)}),
            "sgd: input 'grad' has dtype f16; expected f32 like the op's other inputs");
  EXPECT_EQ(errorOf("adam", {t({2, 3}), t({3, 2}), t({2, 3}), t({2, 3})}, {{"step", int64_t(1)}}),
            "adam: input 'grad' has shape [3, 2]; expected [2, 3] like 'param'");
  EXPECT_EQ(errorOf("adam", {t({2, 3}), t({2, 3}), t({2, 3}), t({3})}, {{"step", int64_t(1)}}),
            "adam: input 'exp_avg_sq' has shape [3]; expected [2, 3] like 'param'");
  EXPECT_EQ(errorOf("adam", {t({2}), t({2}), t({2}), t({2})}), "adam: missing required attribute 'step'");
  EXPECT_EQ(errorOf("adam", {t({2}), t({2}), t({2}), t({2})}, {{"step", int64_t(0)}}),
            "adam: attribute 'step' is 0; expected the 1-based number of this step (>= 1)");
  EXPECT_EQ(errorOf("adamw", {t({2}), t({2}), t({2}), t({2})}, {{"step", int64_t(1)}, {"amsgrad", true}}),
            "adamw: amsgrad=true needs input 'max_exp_avg_sq' (a state tensor of param's shape and dtype)");
  EXPECT_EQ(errorOf("adam", {t({2}), t({2}), t({2}), t({2})}, {{"step", int64_t(1)}, {"beta1", 1.0}}),
            "adam: attribute 'beta1' is 1; expected a value in [0, 1)");
  EXPECT_EQ(errorOf("adam", {t({2}), t({2}), t({2}), t({2})}, {{"step", int64_t(1)}, {"eps", -1.0}}),
            "adam: attribute 'eps' is -1; expected >= 0");

  EXPECT_EQ(errorOf("adam_multi", {t({2}), t({2}), t({2}), t({2}), t({3}), t({3})}, {{"step", int64_t(1)}}),
            "adam_multi: input 'tensors' holds 6 tensors; expected groups of 4 (param, grad, exp_avg, exp_avg_sq), "
            "so a multiple of 4");
  EXPECT_EQ(errorOf("sgd_multi", {t({2}), t({2}), t({5}), t({4})}),
            "sgd_multi: group 1 of 'tensors' (tensors[2..3]): 'grad' has shape [4]; expected [5] like its 'param'");
  EXPECT_EQ(errorOf("sgd_multi", {t({2}), t({2}), t({2}), t({5}), t({5}), t({5}, DType::BF16)}, {{"momentum", 0.9}}),
            "sgd_multi: group 1 of 'tensors' (tensors[3..5]): 'momentum_buffer' has dtype bf16; expected f32 like its "
            "'param'");
  EXPECT_EQ(errorOf("sgd_multi", {t({2}, DType::I32), t({2}, DType::I32)}),
            "sgd_multi: group 0 of 'tensors' (tensors[0..1]): 'param' has dtype i32; expected f32, f16 or bf16");

  EXPECT_EQ(errorOf("clip_grad_norm_", {t({2})}), "clip_grad_norm_: missing required attribute 'max_norm'");
  EXPECT_EQ(errorOf("clip_grad_norm_", {t({2})}, {{"max_norm", 1.0}, {"norm_type", 0.0}}),
            "clip_grad_norm_: attribute 'norm_type' is 0; expected a positive number or inf");
  EXPECT_EQ(errorOf("clip_grad_norm_", {t({2}), t({2}, DType::I32)}, {{"max_norm", 1.0}}),
            "clip_grad_norm_: input 'grads' [1] has dtype i32; expected f32, f16 or bf16");
}

TEST(OptimSpec, InPlaceOpsDeclareWhatTheyWrite) {
  OpTable table;
  for (const char* name : {"sgd", "adam", "adamw", "sgd_multi", "adam_multi", "adamw_multi", "zero_"}) {
    const OpSpec* op = table.find(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(op->category, "optim") << name;
    EXPECT_TRUE(op->outputs.empty()) << name;
    EXPECT_FALSE(op->differentiable) << name;
    EXPECT_NE(std::find(op->mutates.begin(), op->mutates.end(), op->inputName(0)), op->mutates.end()) << name;
  }
  // Every tensor of a list is written (the server asks write access for each).
  for (const char* name : {"sgd_multi", "adam_multi", "clip_grad_norm_"}) {
    const OpSpec* op = table.find(name);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_NE(std::find(op->mutates.begin(), op->mutates.end(), op->inputName(i)), op->mutates.end()) << name;
    }
  }
  const OpSpec* sgd = table.find("sgd");
  EXPECT_EQ(sgd->mutates, (std::vector<std::string>{"param", "momentum_buffer"}));
  const OpSpec* adam = table.find("adam");
  EXPECT_EQ(adam->mutates, (std::vector<std::string>{"param", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  EXPECT_EQ(table.find("clip_grad_norm_")->outputs, std::vector<std::string>{"total_norm"});
}

}  // namespace
}  // namespace tensord::compute::testing
