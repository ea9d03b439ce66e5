// User kernels below the server: the description language (JSON, shape and
// grid expressions), SPIR-V reflection, and a kernel built and run by the
// engine on the test device with robust buffer access.

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <future>

#include "compute/engine.h"
#include "compute/error.h"
#include "compute/kernel_cache.h"
#include "compute/op_table.h"
#include "compute/user_kernel_desc.h"
#include "compute/user_kernels.h"

namespace tensord::compute {
namespace {

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ComputeError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int64_t eval(const std::string& text, const std::vector<Shape>& shapes, std::vector<int64_t> attrs = {},
             std::vector<std::string> attrNames = {}) {
  std::vector<std::string> names;
  std::vector<const Shape*> pointers;
  for (size_t i = 0; i < shapes.size(); ++i) {
    names.push_back(std::string(1, char('a' + i)));
    pointers.push_back(&shapes[i]);
  }
  auto expr = KernelExpr::parse(text, "test", names, attrNames);
  return expr.eval({pointers, attrs});
}

TEST(UserKernelExpr, Arithmetic) {
  const std::vector<Shape> shapes = {{2, 3, 5}, {7}};
  EXPECT_EQ(eval("1 + 2 * 3", shapes), 7);
  EXPECT_EQ(eval("(1 + 2) * 3", shapes), 9);
  EXPECT_EQ(eval("-7 / 2", shapes), -4);  // floor division
  EXPECT_EQ(eval("-7 % 2", shapes), 1);
  EXPECT_EQ(eval("ceil_div(10, 4) + min(3, 9) + max(3, 9)", shapes), 3 + 3 + 9);
  EXPECT_EQ(eval("dim(a, 0) * dim(a, -1) + numel(b) + rank(a)", shapes), 2 * 5 + 7 + 3);
  EXPECT_EQ(eval("numel(a) / k", shapes, {3}, {"k"}), 10);
}

TEST(UserKernelExpr, ErrorsNameTheExpression) {
  const std::vector<Shape> shapes = {{2, 3}};
  EXPECT_TRUE(contains(errorOf([&] { eval("dim(z, 0)", shapes); }), "test: 'dim(z, 0)': unknown tensor 'z'"));
  EXPECT_TRUE(contains(errorOf([&] { eval("foo(1, 2)", shapes); }), "unknown function 'foo'"));
  EXPECT_TRUE(contains(errorOf([&] { eval("n + 1", shapes); }), "unknown name 'n'"));
  EXPECT_TRUE(contains(errorOf([&] { eval("1 +", shapes); }), "expression ends early"));
  EXPECT_TRUE(contains(errorOf([&] { eval("(1", shapes); }), "expected ')'"));
  EXPECT_TRUE(contains(errorOf([&] { eval("4 / (2 - 2)", shapes); }), "division by zero"));
  EXPECT_TRUE(
      contains(errorOf([&] { eval("dim(a, 2)", shapes); }), "dim index 2 is out of range for a tensor of rank 2"));
}

TEST(UserKernelDesc, ParsesEveryPart) {
  UserKernelDesc d = parseUserKernelDesc(R"X({
    "doc": "d",
    "inputs": [{"name": "a", "dtype": "f32"}, {"name": "b", "dtype": "i32", "binding": 5}],
    "outputs": [{"name": "c", "dtype": "f16", "shape": ["dim(a, 0)", 4, "n"]}],
    "attrs": [{"name": "n", "type": "int", "default": 3}, {"name": "s", "type": "float"},
              {"name": "on", "type": "bool", "default": true}],
    "push": ["numel(c)"], "workgroup": [8, 8], "grid": ["dim(c, 1)", "dim(c, 0)"]
  })X",
                                         "user.k");
  EXPECT_EQ(d.inputs[0].binding, 0u);
  EXPECT_EQ(d.inputs[1].binding, 5u);
  EXPECT_EQ(d.outputs[0].binding, 2u);
  EXPECT_EQ(d.outputs[0].dtype, DType::F16);
  EXPECT_EQ(d.pushBytes(), 16u);
  EXPECT_EQ(*d.workgroup, (std::array<uint32_t, 3>{8, 8, 1}));
  ASSERT_EQ(d.grid.size(), 2u);
  Shape a{6, 2}, b{1}, c{6, 4, 3};
  const Shape* shapes[] = {&a, &b, &c};
  const int64_t attrs[] = {3, 0, 1};
  EXPECT_EQ(d.outputs[0].shape[0].eval({shapes, attrs}), 6);
  EXPECT_EQ(d.outputs[0].shape[2].eval({shapes, attrs}), 3);
  EXPECT_EQ(d.push[0].eval({shapes, attrs}), 72);
  // The default grid is one invocation per element of output 0.
  UserKernelDesc plain = parseUserKernelDesc(R"X({"inputs": [{"name": "x", "dtype": "f32"}],
      "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}]})X",
                                             "user.k");
  EXPECT_EQ(plain.grid[0].text(), "numel(y)");
  EXPECT_EQ(plain.outputs[0].sameAs, 0u);
}

TEST(UserKernelDesc, ErrorsNameTheKey) {
  auto err = [](const std::string& json) { return errorOf([&] { parseUserKernelDesc(json, "user.k"); }); };
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f64", "shape": [1]}]})X"),
                       "user.k: description: outputs[0].dtype: unknown dtype 'f64'"));
  EXPECT_TRUE(contains(err(R"X({"outputs": []})X"), "outputs: a kernel needs at least one output"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32"}]})X"), "outputs[0].shape: missing"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32", "shape": "q"}]})X"), "'q' is not an input"));
  EXPECT_TRUE(contains(err(R"X({"inputs": [{"name": "x", "dtype": "f32"}, {"name": "x", "dtype": "f32"}],
                              "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}]})X"),
                       "inputs[1].name: 'x' is used twice"));
  EXPECT_TRUE(contains(err(R"X({"inputs": [{"name": "x", "dtype": "f32", "binding": 1}],
                              "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}]})X"),
                       "outputs[0].binding: binding 1 is taken by another buffer"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32", "shape": [1]}], "colour": 1})X"),
                       "colour: unknown key"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32", "shape": [1]}],
                              "attrs": [{"name": "t", "type": "text"}]})X"),
                       "attrs[0].type: unknown type 'text'"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32", "shape": [1]}], "workgroup": [0]})X"),
                       "workgroup[0]: expected 1 to 1024"));
  EXPECT_TRUE(contains(err(R"X({"outputs": [{"name": "y", "dtype": "f32", "shape": [1]}],
                              "grid": ["numel(y) / s"], "attrs": [{"name": "s", "type": "float"}]})X"),
                       "unknown name 's'"));  // float attributes cannot size anything
}

constexpr const char* kReflected = R"X(#version 450
layout(local_size_x = 32, local_size_y = 2) in;
layout(binding = 0) readonly buffer In { float a[]; };
layout(binding = 3) buffer Out { int b[]; };
layout(push_constant) uniform Push { float s; int n; int m; };
void main() { b[gl_GlobalInvocationID.x] = int(a[0] * s) + n + m; }
)X";

TEST(UserKernelReflection, ReadsEntryPointLocalSizeBindingsAndPushBlock) {
  SpirvReflection r = reflectSpirv(compileGlsl("reflected", kReflected), "user.r");
  ASSERT_EQ(r.entryPoints.size(), 1u);
  EXPECT_EQ(r.entryPoints[0].name, "main");
  EXPECT_EQ(r.entryPoints[0].model, 5u);
  EXPECT_EQ(*r.localSize, (std::array<uint32_t, 3>{32, 2, 1}));
  ASSERT_EQ(r.buffers.size(), 2u);
  for (const auto& b : r.buffers) {
    EXPECT_TRUE(b.storageBlock);
    EXPECT_EQ(b.set, 0u);
    if (b.binding == 0) {
      EXPECT_TRUE(b.readOnly);
      EXPECT_TRUE(b.elementFloat);
    } else {
      EXPECT_EQ(b.binding, 3u);
      EXPECT_FALSE(b.readOnly);
      EXPECT_FALSE(b.elementFloat);
    }
    EXPECT_EQ(b.elementBits, 32u);
  }
  EXPECT_EQ(r.pushBytes, 12u);
  EXPECT_TRUE(contains(errorOf([] { reflectSpirv({1, 2, 3}, "user.r"); }), "user.r: not a SPIR-V module"));
}

class UserKernelEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* device = std::getenv("TENSORD_TEST_DEVICE");
    engine_ = std::make_unique<Engine>(EngineOptions{
        .device = device ? device : "",
        .logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>())});
  }

  void run(const OpSpec& spec, std::vector<TensorView> in, std::vector<TensorView> out, Attrs attrs) {
    std::promise<std::exception_ptr> done;
    engine_->enqueueOp("test", spec, in, out, attrs, [&](std::exception_ptr e) { done.set_value(e); });
    auto error = done.get_future().get();
    if (error) std::rethrow_exception(error);
  }

  std::vector<float> download(const TensorView& v) {
    auto slot = engine_->tryAcquireStaging();
    std::promise<void> done;
    engine_->enqueueDownload("test", v.buffer, 0, v.buffer->bytes(), *slot,
                             [&](std::exception_ptr) { done.set_value(); });
    done.get_future().wait();
    std::vector<float> out(v.buffer->bytes() / 4);
    std::memcpy(out.data(), slot->data, v.buffer->bytes());
    engine_->releaseStaging(*slot);
    return out;
  }

  TensorView upload(const std::vector<float>& values) {
    TensorView v{{DType::F32, {int64_t(values.size())}}, engine_->allocate(values.size() * 4, "test")};
    auto slot = engine_->tryAcquireStaging();
    std::memcpy(slot->data, values.data(), values.size() * 4);
    std::promise<void> done;
    engine_->enqueueUpload("test", *slot, values.size() * 4, v.buffer, 0,
                           [&](std::exception_ptr) { done.set_value(); });
    done.get_future().wait();
    engine_->releaseStaging(*slot);
    return v;
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(UserKernelEngine, BuildsAndRunsAKernelWithRobustBufferAccess) {
  auto kernel = engine_->buildUserKernel({.name = "user.shift",
                                          .language = "glsl",
                                          .source = R"X(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { int offset; float scale; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  y[i] = scale * x[i + uint(offset)];   // no bounds check: robust access does it
}
)X",
                                          .description = R"X({"inputs": [{"name": "x", "dtype": "f32"}],
      "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
      "attrs": [{"name": "offset", "type": "int", "default": 0}, {"name": "scale", "type": "float", "default": 1}],
      "grid": ["numel(y) + 256"]})X"});
  const OpSpec& spec = kernel->spec();
  EXPECT_EQ(spec.category, "user");
  TensorView x = upload({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  TensorView canary = upload(std::vector<float>(64, 42.0f));
  Attrs attrs = validateAttrs(spec, {{"offset", int64_t(4)}, {"scale", 2.0}});
  auto outs = inferOutputs(spec, std::vector<TensorDesc>{x.desc}, attrs);
  ASSERT_EQ(outs.size(), 1u);
  TensorView y{outs[0], engine_->allocate(outs[0].bytes(), "test")};
  run(spec, {x}, {y}, attrs);
  EXPECT_EQ(download(y), (std::vector<float>{10, 12, 14, 16, 18, 20, 0, 0, 0, 0}));
  EXPECT_EQ(download(canary), std::vector<float>(64, 42.0f));
  // An attribute that does not fit the 32-bit push constant fails at inference.
  Attrs big = validateAttrs(spec, {{"offset", int64_t(1) << 40}});
  EXPECT_TRUE(contains(errorOf([&] { inferOutputs(spec, std::vector<TensorDesc>{x.desc}, big); }),
                       "attribute 'offset' is 1099511627776; expected a 32-bit int"));
}

TEST_F(UserKernelEngine, ABatchWithAUserKernelKeepsEveryBarrier) {
  // A user kernel's batch is timed, its run checked against a time limit:
  // every job of it waits for the one before, called alone or in a graph.
  auto kernel = engine_->buildUserKernel({.name = "user.copy",
                                          .language = "glsl",
                                          .source = R"X(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
void main() { y[gl_GlobalInvocationID.x] = x[gl_GlobalInvocationID.x]; }
)X",
                                          .description = R"X({"inputs": [{"name": "x", "dtype": "f32"}],
      "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}], "grid": ["numel(y)"]})X"});
  const OpSpec& copy = kernel->spec();
  const OpSpec& add = *engine_->ops().find("add");
  const Attrs none = validateAttrs(add, {});
  const Attrs copyAttrs = validateAttrs(copy, {});
  std::vector<TensorView> x, y;
  for (int i = 0; i < 3; ++i) {
    x.push_back(upload(std::vector<float>(256, float(i))));
    y.push_back({x.back().desc, engine_->allocate(x.back().desc.bytes(), "test")});
  }
  // Three independent jobs in one batch, the last as given; how many of
  // them ran alongside the ones before.
  auto overlapped = [&](const std::function<void()>& last) {
    engine_->waitIdle();
    const uint64_t before = engine_->jobOrdering().overlapped;
    engine_->holdSubmits();
    engine_->enqueueOp("test", add, {x[0], x[0]}, {y[0]}, none, nullptr);
    engine_->enqueueOp("test", add, {x[1], x[1]}, {y[1]}, none, nullptr);
    last();
    engine_->releaseSubmits();
    engine_->waitIdle();
    return engine_->jobOrdering().overlapped - before;
  };
  EXPECT_EQ(overlapped([&] { engine_->enqueueOp("test", add, {x[2], x[2]}, {y[2]}, none, nullptr); }), 2u);
  EXPECT_EQ(overlapped([&] { engine_->enqueueOp("test", copy, {x[2]}, {y[2]}, copyAttrs, nullptr); }), 0u);
  EXPECT_EQ(overlapped([&] {
              engine_->enqueueOps("test", "graph", {{.spec = &copy, .attrs = &copyAttrs, .inputs = {x[2]}, .outputs = {y[2]}}},
                                  nullptr, nullptr);
            }),
            0u);
  EXPECT_EQ(download(y[2]), std::vector<float>(256, 2.0f));
}

}  // namespace
}  // namespace tensord::compute
