// Elementwise fusion (compute/template_fused.h): a fused kernel computes
// what its calls compute one by one, for every op that fuses, through both
// of the kernel's paths (dense and broadcast), with f16/bf16 intermediates
// rounded as if stored.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compute/error.h"
#include "compute/op_spec.h"
#include "compute/template_fused.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

class FusionTest : public ConformanceTest {
 protected:
  // The descriptors of `tensors`.
  static std::vector<TensorDesc> descs(const std::vector<HostTensor>& tensors) {
    std::vector<TensorDesc> out;
    for (const auto& t : tensors) out.push_back(TensorDesc{t.dtype, t.shape});
    return out;
  }

  // Runs `fused` on `inputs` and downloads its outputs.
  static std::vector<HostTensor> runFused(const OpSpec& fused, const std::vector<HostTensor>& inputs) {
    std::vector<TensorView> views;
    for (const auto& t : inputs) views.push_back(put(t));
    std::vector<HostTensor> out;
    for (const auto& v : runSpec(fused, views, Attrs{})) out.push_back(get(v));
    return out;
  }

  // "" when `got` and `want` hold the same bits, else the first difference.
  static std::string firstDifference(const HostTensor& got, const HostTensor& want) {
    if (got.values.size() != want.values.size()) return "sizes differ";
    for (size_t i = 0; i < got.values.size(); ++i) {
      if (std::isnan(got.values[i]) && std::isnan(want.values[i])) continue;  // NaN payloads may differ
      if (std::memcmp(&got.values[i], &want.values[i], sizeof(double)) != 0) {
        return "element " + std::to_string(i) + ": " + std::to_string(got.values[i]) + " fused, " +
               std::to_string(want.values[i]) + " one by one";
      }
    }
    return "";
  }
};

// Each fusable op twice in a row, op(op(x, y..), y..), fused and one by one.
TEST_F(FusionTest, EveryFusableOpComputesFusedWhatItComputesAlone) {
  const Shape shape{37};
  const HostTensor x = randomTensor(DType::F32, shape, 0.1, 0.9);
  const HostTensor y = randomTensor(DType::F32, shape, 0.1, 0.9);
  size_t fused = 0;
  for (const OpSpec& op : engine().ops().all()) {
    if (std::find(op.dtypes.begin(), op.dtypes.end(), DType::F32) == op.dtypes.end()) continue;
    Attrs attrs;
    std::vector<HostTensor> inputs{x};
    try {
      attrs = validateAttrs(op, {});
      if (op.variadic() || op.inputs.empty()) continue;
      while (inputs.size() < op.inputs.size()) inputs.push_back(y);  // optional operands as tensors too
      inferOutputs(op, descs(inputs), attrs);
    } catch (const ComputeError&) {
      continue;  // needs attributes or inputs of other dtypes
    }
    if (!fusable(op, descs(inputs), attrs)) continue;
    SCOPED_TRACE(op.name);
    const HostTensor once = call(op.name, inputs)[0];
    std::vector<HostTensor> again = inputs;
    again[0] = once;
    const HostTensor twice = call(op.name, again)[0];

    FusedCall first{.spec = &op, .attrs = &attrs, .inputDescs = descs(inputs)};
    FusedCall second{.spec = &op, .attrs = &attrs, .inputDescs = descs(inputs)};
    for (size_t k = 0; k < inputs.size(); ++k) {
      first.inputs.push_back(k == 0 ? 0 : 1);
      second.inputs.push_back(k == 0 ? -1 : 1);
    }
    auto spec = fuseElementwise({first, second}, descs({x, y}), {0, 1}, shape);
    const auto out = runFused(*spec, {x, y});
    ASSERT_EQ(out.size(), 2u);
    expectClose(out[0], once, op.name + " once, fused");
    expectClose(out[1], twice, op.name + " twice, fused");
    ++fused;
  }
  // Unary and binary math, activations, arithmetic: most of the table.
  EXPECT_GE(fused, 60u);
}

// Adding 1e-4 to a number in [1, 2) changes nothing in f16 or bf16 (half an
// ulp there is 5e-4 or more): the calls one by one give back the input
// after 50 adds, and so does the fused kernel, because it rounds each result
// as a store would. Without that rounding it would return about x + 0.005.
// A chain of multiplies and divides stays within one rounding per call (the
// compiler may narrow such a chain's arithmetic to f16 on some devices, as
// it may in the calls one by one).
TEST_F(FusionTest, HalfPrecisionIntermediatesRoundAsIfStored) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    if (!engine().dtypeSupported(dtype)) continue;
    SCOPED_TRACE(std::string(dtypeName(dtype)));
    const Shape shape{64};
    const HostTensor x = randomTensor(dtype, shape, 1.0, 1.9);
    const OpSpec& add = *engine().ops().find("add");
    const Attrs tiny = validateAttrs(add, {{"other", 1e-4}});
    std::vector<FusedCall> adds;
    HostTensor want = x;
    for (int j = 0; j < 50; ++j) {
      want = call("add", {want}, {{"other", 1e-4}})[0];
      adds.push_back({.spec = &add, .attrs = &tiny, .inputs = {j == 0 ? 0 : -j}, .inputDescs = descs({x})});
    }
    EXPECT_EQ(firstDifference(runFused(*fuseElementwise(adds, descs({x}), {49}, shape), {x})[0], want), "")
        << "fused " << dtypeName(dtype) << " adds, calls one by one";

    const OpSpec& mul = *engine().ops().find("mul");
    const OpSpec& div = *engine().ops().find("div");
    const Attrs up = validateAttrs(mul, {{"other", 1.1}});
    const Attrs down = validateAttrs(div, {{"other", 1.07}});
    std::vector<FusedCall> calls;
    want = x;
    for (int j = 0; j < 12; ++j) {
      const bool odd = j % 2;
      want = call(odd ? "div" : "mul", {want}, {{"other", odd ? 1.07 : 1.1}})[0];
      calls.push_back(FusedCall{.spec = odd ? &div : &mul, .attrs = odd ? &down : &up, .inputs = {j == 0 ? 0 : -j},
                                .inputDescs = descs({x})});
    }
    const Tolerance t = tolerance(dtype);
    expectClose(runFused(*fuseElementwise(calls, descs({x}), {11}, shape), {x})[0], want, "fused mul/div chain", 1,
                {t.atol, t.rtol * 12});
  }
}

// The rounding of an f32 value to f16 inside a fused kernel, at its edges:
// ties to even, the largest finite f16 and past it, subnormals, signed zero,
// infinities and NaN. cast to f16, then subtract the f32 input: the result
// is the rounding error, 0 everywhere if the kernel skipped the rounding.
TEST_F(FusionTest, RoundingToF16MatchesAStoreAtTheEdges) {
  if (!engine().dtypeSupported(DType::F16)) GTEST_SKIP() << "the device has no f16 storage";
  const double tie = std::ldexp(1.0, -11);  // half an f16 ulp at 1
  const HostTensor x = makeTensor(DType::F32, {18},
                                  {1 + tie, 1 + 3 * tie, 1 + tie * 1.001, 65504, 65519, 65520, 65535, 1e5, -7e4,
                                   std::ldexp(1.0, -25), std::ldexp(3.0, -25), 6.1e-5, 6.103e-5, -1e-7, -0.0,
                                   INFINITY, -INFINITY, NAN});
  const OpTable& ops = engine().ops();
  const Attrs toHalf = validateAttrs(*ops.find("to"), {{"dtype", std::string("f16")}});
  const Attrs subAttrs = validateAttrs(*ops.find("sub"), {});
  const HostTensor half = call("to", {x}, {{"dtype", std::string("f16")}})[0];
  const HostTensor want = call("sub", {half, x})[0];
  std::vector<FusedCall> calls{
      {.spec = ops.find("to"), .attrs = &toHalf, .inputs = {0}, .inputDescs = descs({x})},
      {.spec = ops.find("sub"), .attrs = &subAttrs, .inputs = {-1, 0}, .inputDescs = descs({half, x})},
  };
  const auto out = runFused(*fuseElementwise(calls, descs({x}), {0, 1}, Shape{18}), {x});
  EXPECT_EQ(firstDifference(out[0], half), "") << "the f16 values";
  EXPECT_EQ(firstDifference(out[1], want), "") << "their rounding errors";
}

// Inputs of other shapes broadcast (the kernel's strided path), a 0-d
// tensor, scalar attributes, three results written, and an input that is
// not f32 (a bool condition).
TEST_F(FusionTest, BroadcastInputsScalarsAndSeveralOutputs) {
  const HostTensor x = randomTensor(DType::F32, {3, 1, 5});
  const HostTensor y = randomTensor(DType::F32, {4, 5});
  const HostTensor z = makeTensor(DType::F32, {}, {0.75});
  std::vector<double> pattern(60);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = i % 3 == 0;
  const HostTensor cond = makeTensor(DType::Bool, {3, 4, 5}, pattern);
  const Shape shape{3, 4, 5};

  const HostTensor a = call("add", {x, y}, {{"alpha", 2.0}})[0];
  const HostTensor b = call("mul", {a, z})[0];
  const HostTensor c = call("leaky_relu", {b}, {{"negative_slope", 0.2}})[0];
  const HostTensor d = call("where", {cond, c, x})[0];
  const HostTensor e = call("clamp", {d}, {{"min", -0.5}})[0];

  const OpTable& ops = engine().ops();
  const Attrs addAttrs = validateAttrs(*ops.find("add"), {{"alpha", 2.0}});
  const Attrs none;
  const Attrs leaky = validateAttrs(*ops.find("leaky_relu"), {{"negative_slope", 0.2}});
  const Attrs whereAttrs = validateAttrs(*ops.find("where"), {});
  const Attrs clampAttrs = validateAttrs(*ops.find("clamp"), {{"min", -0.5}});
  std::vector<FusedCall> calls{
      {.spec = ops.find("add"), .attrs = &addAttrs, .inputs = {0, 1}, .inputDescs = descs({x, y})},
      {.spec = ops.find("mul"), .attrs = &none, .inputs = {-1, 2}, .inputDescs = descs({a, z})},
      {.spec = ops.find("leaky_relu"), .attrs = &leaky, .inputs = {-2}, .inputDescs = descs({b})},
      {.spec = ops.find("where"), .attrs = &whereAttrs, .inputs = {3, -3, 0}, .inputDescs = descs({cond, c, x})},
      {.spec = ops.find("clamp"), .attrs = &clampAttrs, .inputs = {-4}, .inputDescs = descs({d})},
  };
  auto spec = fuseElementwise(calls, descs({x, y, z, cond}), {0, 2, 4}, shape);
  const auto out = runFused(*spec, {x, y, z, cond});
  ASSERT_EQ(out.size(), 3u);
  expectClose(out[0], a, "add");
  expectClose(out[1], c, "leaky_relu");
  expectClose(out[2], e, "clamp");
}

TEST_F(FusionTest, RefusesWhatItCannotFuse) {
  const OpTable& ops = engine().ops();
  const Attrs none;
  const TensorDesc f32{DType::F32, {4}};
  // A comparison's result is bool, not a float.
  EXPECT_FALSE(fusable(*ops.find("lt"), std::vector<TensorDesc>{f32, f32}, none));
  // Integer math is not fused.
  EXPECT_FALSE(fusable(*ops.find("add"), std::vector<TensorDesc>{{DType::I32, {4}}, {DType::I32, {4}}}, none));
  // Not elementwise.
  EXPECT_FALSE(fusable(*ops.find("sum"), std::vector<TensorDesc>{f32}, validateAttrs(*ops.find("sum"), {})));
  // A result of another shape than the fused one.
  FusedCall neg{.spec = ops.find("neg"), .attrs = &none, .inputs = {0}, .inputDescs = {f32}};
  EXPECT_THROW(fuseElementwise({neg}, {f32}, {0}, Shape{8}), std::logic_error);
  // Too many outputs.
  EXPECT_THROW(fuseElementwise({neg, neg, neg, neg, neg}, {f32}, {0, 1, 2, 3, 4}, Shape{4}), std::logic_error);
}

}  // namespace
}  // namespace tensord::compute::testing
