// Gradcheck cases of the reduction family (see gradcheck.h), and the
// gradients finite differences cannot check: ties, zero norms, a left-off
// grad_mean, and the errors of a misfitting grad.

#include <cmath>

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;

StepAttrs dims(Ints d, bool keepdim = false) { return {{"dim", std::move(d)}, {"keepdim", keepdim}}; }

std::vector<GradCase> reductionCases() {
  std::vector<GradCase> c;
  // Every dim set: one, several (not adjacent, negative), all, with and without keepdim; a 0-d input.
  for (const char* op : {"sum", "mean", "logsumexp"}) {
    c.push_back({op, {uniform({3, 4})}, dims({1})});
    c.push_back({op, {uniform({2, 3, 4})}, dims({-1, 0}, true)});
    c.push_back({op, {uniform({2, 3})}, dims({}, false)});
  }
  c.push_back({"sum", {uniform({})}});
  c.push_back({"mean", {uniform({2, 3})}, dims({}, true)});
  c.push_back({"logsumexp", {uniform({3, 4}, -3, 3)}, dims({0}, true)});

  c.push_back({"prod", {uniform({3, 4}, 0.5, 1.5)}, dims({1})});
  c.push_back({"prod", {uniform({2, 3, 2}, 0.5, 1.5)}, dims({0, 2}, true)});  // reduced dims moved last
  c.push_back({"prod", {uniform({2, 3}, 0.5, 1.5)}});
  // One zero in a row (its gradient is the product of the others), two
  // zeros in another (all 0), none in the third.
  c.push_back({"prod", {values({3, 3}, {1.5, 0.0, -0.7, 0.0, 0.8, 0.0, 0.9, -1.2, 1.1})}, dims({1})});
  c.push_back({"prod", {values({2, 2}, {0.0, 1.3, -0.6, 0.7})}});

  for (const char* op : {"amax", "amin"}) {
    c.push_back({op, {distinct({3, 4})}, dims({1})});
    c.push_back({op, {distinct({2, 3, 2})}, dims({0, -1}, true)});
    c.push_back({op, {distinct({2, 3})}});
  }
  for (const char* op : {"max", "min"}) {
    c.push_back({op, {distinct({3, 4})}, {{"dim", int64_t(1)}}});
    c.push_back({op, {distinct({2, 3, 2})}, {{"dim", int64_t(-2)}, {"keepdim", true}}});
    c.push_back({op, {distinct({2, 3})}});  // no dim: the 0-d extreme, no indices
  }

  // Mixed signs, no ties in |x|, away from 0 (the kink of |x|).
  const GradInput signs = values({3, 4}, {0.3, -0.9, 0.55, -0.25, 0.8, -0.45, 0.7, 0.35, -0.6, 0.95, -0.2, 0.5});
  c.push_back({"norm", {uniform({3, 4})}, dims({1})});
  c.push_back({"norm", {signs}, {{"p", 1.0}}});
  c.push_back({"norm", {signs}, {{"p", 3.0}, {"dim", Ints{0}}, {"keepdim", true}}});
  c.push_back({"norm", {signs}, {{"p", 0.5}, {"dim", Ints{-1}}}});
  c.push_back({"norm", {signs}, {{"p", 0.0}, {"dim", Ints{1}}}});
  c.push_back({"norm", {signs}, {{"p", INFINITY}, {"dim", Ints{1}}}});
  c.push_back({"norm", {signs}, {{"p", -INFINITY}}});

  for (const char* op : {"var", "std", "var_mean"}) {
    c.push_back({op, {uniform({3, 4})}, dims({1})});
    c.push_back({op, {uniform({2, 3, 2})}, {{"dim", Ints{0, 2}}, {"keepdim", true}, {"correction", 0.0}}});
    c.push_back({op, {uniform({2, 3})}, {{"correction", 2.0}}});
  }

  c.push_back({"cumsum", {uniform({3, 4})}, {{"dim", int64_t(1)}}});
  c.push_back({"cumsum", {uniform({2, 3, 2})}, {{"dim", int64_t(-3)}}});
  c.push_back({"cumsum", {uniform({})}, {{"dim", int64_t(0)}}});
  c.push_back({"cumprod", {uniform({3, 4}, 0.5, 1.5)}, {{"dim", int64_t(1)}}});
  c.push_back({"cumprod", {uniform({2, 3, 2}, -1.5, 1.5)}, {{"dim", int64_t(-2)}}});
  // Lines with one zero (first, middle, last), two zeros, and none.
  c.push_back({"cumprod",
               {values({5, 4}, {0.0, 1.2,  -0.8, 1.1,   //
                                0.9, 0.0,  1.3,  -0.7,  //
                                1.4, -0.6, 0.8,  0.0,   //
                                0.7, 0.0,  -1.1, 0.0,   //
                                1.1, 0.9,  -1.3, 0.6})},
               {{"dim", int64_t(1)}}});
  c.push_back({"cumprod", {values({3, 2}, {1.2, 0.0, 0.0, 0.8, -0.9, 1.1})}, {{"dim", int64_t(0)}}});

  c.push_back({"sort", {distinct({3, 4})}});
  c.push_back({"sort", {distinct({3, 4})}, {{"dim", int64_t(0)}, {"descending", true}}});
  c.push_back({"topk", {distinct({3, 5})}, {{"k", int64_t(2)}}});
  c.push_back({"topk", {distinct({4, 3})}, {{"k", int64_t(3)}, {"dim", int64_t(0)}, {"largest", false}}});
  return c;
}

const std::vector<GradCase> kReduction = reductionCases();
TENSORD_GRAD_CASES(reduction, kReduction);

TEST_F(GradcheckTest, Reduction) { checkAll(kReduction); }

HostTensor f32(Shape s, std::vector<double> v) { return makeTensor(DType::F32, s, std::move(v)); }

// Ties are where max is not differentiable: PyTorch's choice, checked by value.
TEST_F(GradcheckTest, ReductionTiesShareTheGradient) {
  HostTensor x = f32({2, 3}, {1, 3, 3, 2, 2, 2});
  auto amax = call("amax_backward", {f32({2}, {6, 9}), x, f32({2}, {3, 2})}, dims({1}));
  expectClose(amax[0], f32({2, 3}, {0, 3, 3, 3, 3, 3}), "amax_backward splits among ties");
  auto max = call("max_backward", {f32({}, {4}), x, f32({}, {3})});
  expectClose(max[0], f32({2, 3}, {0, 2, 2, 0, 0, 0}), "max_backward without dim splits among ties");
  // With dim: all of it to the returned index (the first of the ties).
  auto maxDim = call("max_backward", {f32({2}, {6, 9}), x, f32({2}, {3, 2}), makeTensor(DType::I64, {2}, {1, 0})},
                     {{"dim", int64_t(1)}});
  expectClose(maxDim[0], f32({2, 3}, {0, 6, 0, 9, 0, 0}), "max_backward with dim routes to the index");
  HostTensor nans = f32({4}, {1, NAN, 2, NAN});
  auto nanMax = call("amax_backward", {f32({}, {4}), nans, call("amax", {nans})[0]});
  expectClose(nanMax[0], f32({4}, {0, 2, 0, 2}), "a NaN maximum's gradient goes to the NaNs");
  auto inf = call("norm_backward", {f32({}, {4}), f32({4}, {-3, 1, 3, 2}), f32({}, {3})}, {{"p", INFINITY}});
  expectClose(inf[0], f32({4}, {-2, 0, 2, 0}), "inf norm splits among ties, with their signs");
}

TEST_F(GradcheckTest, ReductionZeroNormsGiveZeroGradients) {
  HostTensor zeros = f32({2, 3}, {0, 0, 0, 0.5, 0, -0.5});
  for (double p : {2.0, 1.0, 3.0, 0.5, double(INFINITY)}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    auto norm = call("norm", {zeros}, {{"p", p}, {"dim", Ints{1}}});
    auto g = call("norm_backward", {f32({2}, {1, 1}), zeros, norm[0]}, {{"p", p}, {"dim", Ints{1}}});
    ASSERT_EQ(g[0].values.size(), 6u);
    for (size_t i : {0, 1, 2, 4}) EXPECT_EQ(g[0].values[i], 0.0) << "element " << i;
    EXPECT_FALSE(std::isnan(g[0].values[3]));
  }
  auto stdOut = call("std", {zeros}, dims({1}));
  auto g = call("std_backward", {f32({2}, {1, 1}), zeros, stdOut[0]}, dims({1}));
  for (size_t i : {0, 1, 2}) EXPECT_EQ(g[0].values[i], 0.0) << "std of a constant row, element " << i;
}

TEST_F(GradcheckTest, ReductionVarMeanWithoutGradMean) {
  HostTensor x = randomTensor(DType::F32, {3, 4});
  HostTensor grad = randomTensor(DType::F32, {3});
  auto vm = call("var_mean", {x}, dims({1}));
  auto both = call("var_mean_backward", {grad, x, vm[1]}, dims({1}));
  auto var = call("var_backward", {grad, x}, dims({1}));
  expectClose(both[0], var[0], "var_mean_backward without grad_mean is var's gradient");
}

// Gradcheck runs in f32; the backward ops take f16 and bf16 too (their
// private kernels and the dtype of every step). Same inputs, results in
// the narrow dtype's tolerance of the f32 ones.
TEST_F(GradcheckTest, ReductionNarrowFloats) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtypeName(dtype)));
    HostTensor xn = randomTensor(dtype, {3, 4}, 0.5, 1.5), gn = randomTensor(dtype, {3}),
               gFull = randomTensor(dtype, {3, 4});
    auto as = [](DType d, const HostTensor& t) { return makeTensor(d, t.shape, t.values); };
    auto same = [&](const std::string& op, std::vector<HostTensor> inputs, const StepAttrs& attrs,
                    const std::string& forward = "") {
      SCOPED_TRACE(op);
      std::vector<HostTensor> narrow = inputs, wide;
      if (!forward.empty()) {
        auto out = call(forward, {narrow[1]}, attrs);
        narrow.insert(narrow.end(), out.begin(), out.end());
      }
      for (const auto& t : narrow) wide.push_back(t.dtype == dtype ? as(DType::F32, t) : t);
      auto got = call(op, narrow, attrs), want = call(op, wide, attrs);
      expectClose(got[0], as(dtype, want[0]), op + " in " + std::string(dtypeName(dtype)), 4);
    };
    same("prod_backward", {gn, xn}, dims({1}));
    same("sum_backward", {gn, xn}, dims({1}));
    same("amax_backward", {gn, xn}, dims({1}), "amax");
    same("norm_backward", {gn, xn}, {{"p", 3.0}, {"dim", Ints{1}}}, "norm");
    same("norm_backward", {gn, xn}, {{"p", INFINITY}, {"dim", Ints{1}}}, "norm");
    same("std_backward", {gn, xn}, dims({1}), "std");
    same("logsumexp_backward", {gn, xn}, dims({1}), "logsumexp");
    same("cumprod_backward", {gFull, xn}, {{"dim", int64_t(1)}}, "cumprod");
    same("cumsum_backward", {gFull}, {{"dim", int64_t(1)}});
  }
}

TEST_F(GradcheckTest, ReductionErrors) {
  HostTensor x = randomTensor(DType::F32, {3, 4});
  std::string e = errorOf("sum_backward", {randomTensor(DType::F32, {3}), x}, dims({1}, true));
  EXPECT_NE(e.find("sum_backward: input 'grad' has shape [3]; expected [3, 1]"), std::string::npos) << e;
  e = errorOf("mean_backward", {randomTensor(DType::F32, {4}), x}, dims({1}));
  EXPECT_NE(e.find("mean_backward: input 'grad' has shape [4]; expected [3]"), std::string::npos) << e;
  e = errorOf("logsumexp_backward", {randomTensor(DType::F32, {3}), x, randomTensor(DType::F32, {4})}, dims({1}));
  EXPECT_NE(e.find("logsumexp_backward: input 'out' has shape [4]; expected [3]"), std::string::npos) << e;
  e = errorOf("sum_backward", {randomTensor(DType::I64, {3}), randomTensor(DType::I64, {3, 4})}, dims({1}));
  EXPECT_NE(e.find("sum_backward: input 'grad' has dtype i64; expected one of f32, f16, bf16"), std::string::npos) << e;
  e = errorOf("max_backward", {randomTensor(DType::F32, {3}), x, randomTensor(DType::F32, {3})}, {{"dim", int64_t(1)}});
  EXPECT_NE(e.find("max_backward: input 'indices'"), std::string::npos) << e;
  e = errorOf("topk_backward",
              {randomTensor(DType::F32, {3, 3}), x, makeTensor(DType::I64, {3, 2}, {0, 1, 0, 1, 0, 1})},
              {{"k", int64_t(2)}});
  EXPECT_NE(e.find("topk_backward: input 'grad' has shape [3, 3]; expected [3, 2]"), std::string::npos) << e;
  e = errorOf("cumprod_backward", {randomTensor(DType::F32, {4, 3}), x, x}, {{"dim", int64_t(0)}});
  EXPECT_NE(e.find("cumprod_backward: input 'grad' has shape [4, 3]; expected [3, 4]"), std::string::npos) << e;
  e = errorOf("sum_backward", {randomTensor(DType::F32, {3}), x}, dims({2}));
  EXPECT_NE(e.find("sum_backward: attribute 'dim' is 2"), std::string::npos) << e;
}

}  // namespace
}  // namespace tensord::compute::testing
