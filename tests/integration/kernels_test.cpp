// User kernels against a real daemon: a GLSL and a SPIR-V kernel called in
// pipelined chains with built-in ops, every registration error leaving
// nothing behind, robust buffer access protecting a canary tensor, the
// @kernel right, persistence across a restart, and tensorctl kernel.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/integration/daemon_test.h"
#include "tests/integration/npy.h"
#include "tests/integration/policy_daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

// x * sigmoid(alpha * x), the fused activation of the README.
constexpr const char* kQuickGelu = R"X(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { float alpha; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= x.length()) return;
  float v = x[i];
  y[i] = v / (1.0 + exp(-alpha * v));
}
)X";

constexpr const char* kQuickGeluDesc = R"X({
  "doc": "x * sigmoid(alpha * x)",
  "inputs": [{"name": "x", "dtype": "f32"}],
  "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
  "attrs": [{"name": "alpha", "type": "float", "default": 1.702}]
})X";

// out[i, j] = a * x[i, j] + b[j]: two inputs, a float attr, a shape rule,
// a 2-D grid and an int push constant (the row length).
constexpr const char* kAxpyRows = R"X(#version 450
layout(local_size_x = 16, local_size_y = 4) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) readonly buffer B { float b[]; };
layout(binding = 2) buffer Out { float o[]; };
layout(push_constant) uniform Push { float a; int cols; int rows; };
void main() {
  uint j = gl_GlobalInvocationID.x, i = gl_GlobalInvocationID.y;
  if (j >= uint(cols) || i >= uint(rows)) return;
  o[i * cols + j] = a * x[i * cols + j] + b[j];
}
)X";

constexpr const char* kAxpyRowsDesc = R"X({
  "inputs": [{"name": "x", "dtype": "f32"}, {"name": "b", "dtype": "f32"}],
  "outputs": [{"name": "out", "dtype": "f32", "shape": ["dim(x, 0)", "dim(b, -1)"]}],
  "attrs": [{"name": "a", "type": "float"}],
  "push": ["dim(x, 1)", "dim(x, 0)"],
  "workgroup": [16, 4, 1],
  "grid": ["dim(out, 1)", "dim(out, 0)"]
})X";

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// glslang's command-line compiler (glslang-tools), found on PATH.
std::string glslangValidator() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin";
  for (size_t at = 0; at <= dirs.size();) {
    size_t colon = dirs.find(':', at);
    if (colon == std::string::npos) colon = dirs.size();
    fs::path candidate = fs::path(dirs.substr(at, colon - at)) / "glslangValidator";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    at = colon + 1;
  }
  throw std::runtime_error("glslangValidator is not on PATH (package glslang-tools)");
}

// Compiles GLSL to a SPIR-V module with glslang's command-line compiler.
std::string spirvOf(const fs::path& dir, const std::string& glsl, const std::vector<std::string>& extra = {}) {
  const fs::path src = dir / "kernel.comp", out = dir / "kernel.spv";
  std::ofstream(src) << glsl;
  std::vector<std::string> argv = {glslangValidator(), "-V", "--target-env", "vulkan1.2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {src.string(), "-o", out.string()});
  auto r = runCommand(argv);
  if (r.exitCode != 0) throw std::runtime_error("glslangValidator failed: " + r.out + r.err);
  return readAll(out);
}

std::span<const std::byte> bytesOf(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool hasOp(Client& client, const std::string& name) {
  for (const auto& op : client.ops()) {
    if (op.name == name) return true;
  }
  return false;
}

double quickGelu(double v, double alpha) { return v / (1.0 + std::exp(-alpha * v)); }

class IntegrationKernels : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    work_ = daemon().dir() / "kernel-files";
    fs::create_directories(work_);
  }
  fs::path work_;
};

TEST_F(IntegrationKernels, GlslKernelInAPipelinedChainMatchesTheReference) {
  auto client = connect();
  KernelInfo info = client->kernelAdd("quick_gelu", kQuickGelu, kQuickGeluDesc);
  EXPECT_EQ(info.name, "user.quick_gelu");
  EXPECT_EQ(info.owner, daemon().principal());
  EXPECT_EQ(info.spec.category, "user");
  ASSERT_EQ(info.spec.attrs.size(), 1u);
  EXPECT_EQ(info.spec.attrs[0].name, "alpha");
  EXPECT_TRUE(hasOp(*client, "user.quick_gelu"));

  const int64_t n = 1000;  // not a multiple of the local size
  auto xs = randomFloats(size_t(n), 7, -4.0f, 4.0f);
  auto shift = randomFloats(size_t(n), 8, -1.0f, 1.0f);
  Tensor x = client->upload({n}, xs);
  Tensor s = client->upload({n}, shift);
  // Built-in -> user kernel -> built-in, all before anything is read back.
  Tensor sum = client->call1("add", {x, s});
  Tensor act = client->call1("user.quick_gelu", {sum});
  Tensor act2 = client->call1("user.quick_gelu", {sum}, {{"alpha", 1.0}});
  Tensor out = client->call1("mul", {act, act2});
  auto got = out.toHost();
  ASSERT_EQ(got.size(), size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    double v = double(xs[i]) + double(shift[i]);
    double want = quickGelu(v, 1.702) * quickGelu(v, 1.0);
    ASSERT_NEAR(got[i], want, 1e-4 * (1 + std::abs(want))) << "at " << i;
  }
  // Input dtype and attribute errors name the op and the argument.
  Tensor ints = client->call1("to", {x}, {{"dtype", std::string("i32")}});
  EXPECT_TRUE(contains(errorOf([&] { client->call1("user.quick_gelu", {ints}).wait(); }),
                       "user.quick_gelu: input 'x' has dtype i32; expected"));
  EXPECT_TRUE(contains(errorOf([&] {
                         client->call1("user.quick_gelu", {x}, {{"beta", 1.0}}).wait();
                       }),
                       "unknown attribute 'beta'"));
}

TEST_F(IntegrationKernels, SpirvKernelWithShapeRulesAndPushConstants) {
  auto client = connect();
  std::string spv = spirvOf(work_, kAxpyRows);
  KernelInfo info = client->kernelAdd("user.axpy_rows", "spirv", bytesOf(spv), kAxpyRowsDesc);
  EXPECT_EQ(info.language, "spirv");
  EXPECT_EQ(info.spec.inputs, (std::vector<std::string>{"x", "b"}));

  const int64_t rows = 37, cols = 50;
  auto xs = randomFloats(size_t(rows * cols), 1);
  auto bs = randomFloats(size_t(cols), 2);
  Tensor x = client->upload({rows, cols}, xs);
  Tensor b = client->upload({cols}, bs);
  // The user kernel's input is a pipelined output, and its output feeds relu.
  Tensor neg = client->call1("neg", {x});
  Tensor y = client->call1("user.axpy_rows", {neg, b}, {{"a", 2.5}});
  Tensor r = client->call1("relu", {y});
  auto got = r.toHost();
  EXPECT_EQ(r.shape(), (Shape{rows, cols}));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double want = std::max(0.0, 2.5 * -double(xs[i * cols + j]) + bs[j]);
      ASSERT_NEAR(got[i * cols + j], want, 1e-5) << i << "," << j;
    }
  }
  // A required attribute left out.
  EXPECT_TRUE(contains(errorOf([&] {
                         client->call1("user.axpy_rows", {x, b}).wait();
                       }),
                       "missing required attribute 'a'"));
}

TEST_F(IntegrationKernels, BadKernelsAreRefusedWithClearErrorsAndNothingRegistered) {
  auto client = connect();
  struct Case {
    std::string what, language, source, description, expected;
  };
  const std::string badGlsl =
      std::string(kQuickGelu).replace(std::string(kQuickGelu).find("float v = x[i];"), 15, "float v = x[i] +;");
  std::string wrongEntry = spirvOf(work_, kQuickGelu, {"-e", "entry", "--source-entrypoint", "main"});
  std::string good = spirvOf(work_, kQuickGelu);
  std::string truncated = good.substr(0, good.size() / 2 / 4 * 4);
  std::vector<Case> cases = {
      {"compile error", "glsl", badGlsl, kQuickGeluDesc, "kernel 'user.bad' does not compile"},
      {"compile error line", "glsl", badGlsl, kQuickGeluDesc, "user.bad:9:"},
      {"binding mismatch", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f32"}, {"name": "z", "dtype": "f32"}],
           "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
           "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]})X",
       "binding 1 ('Y') is input 'z' but the shader may write it"},
      {"missing binding", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f32"}],
           "outputs": [{"name": "y", "dtype": "f32", "shape": "x", "binding": 2}],
           "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]})X",
       "the shader declares a buffer at binding 1 ('Y') that the description does not mention"},
      {"element type", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "i64"}],
           "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
           "attrs": [{"name": "alpha", "type": "float", "default": 1.0}]})X",
       "binding 0 ('X') is input 'x' of dtype i64 but the shader's elements are float32"},
      {"push constants", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f32"}], "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}]})X",
       "push-constant block is 4 bytes; the description provides 0"},
      {"wrong entry point", "spirv", wrongEntry, kQuickGeluDesc,
       "no compute entry point named 'main' (the module has entry point(s) 'entry' (compute))"},
      {"malformed SPIR-V", "spirv", truncated, kQuickGeluDesc, "user.bad: SPIR-V"},
      {"not SPIR-V", "spirv", std::string(64, 'x'), kQuickGeluDesc, "not a SPIR-V module"},
      {"unknown dtype", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f64"}], "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}]})X",
       "inputs[0].dtype: unknown dtype 'f64'"},
      {"bad shape rule", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f32"}],
           "outputs": [{"name": "y", "dtype": "f32", "shape": ["dim(w, 0)"]}]})X",
       "outputs[0].shape[0]: 'dim(w, 0)': unknown tensor 'w'"},
      {"not JSON", "glsl", kQuickGelu, "{inputs", "description is not valid JSON"},
      {"workgroup", "glsl", kQuickGelu,
       R"X({"inputs": [{"name": "x", "dtype": "f32"}], "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
           "attrs": [{"name": "alpha", "type": "float", "default": 1.0}], "workgroup": [32]})X",
       "workgroup [32, 1, 1] differs from the shader's local size [64, 1, 1]"},
  };
  for (const auto& c : cases) {
    std::string message = errorOf([&] { client->kernelAdd("bad", c.language, bytesOf(c.source), c.description); });
    EXPECT_TRUE(contains(message, c.expected)) << c.what << ": " << message;
  }
  // An unknown dtype is UNIMPLEMENTED on the wire, as for ops.
  try {
    client->kernelAdd("bad", kQuickGelu, R"X({"inputs": [{"name": "x", "dtype": "f64"}], "outputs": []})X");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kUnimplemented) << e.what();
  }
  EXPECT_TRUE(contains(errorOf([&] { client->kernelAdd("user.no-dash", kQuickGelu, kQuickGeluDesc); }),
                       "NAME in user.NAME must be 1 to 64 letters, digits or '_'"));
  EXPECT_TRUE(client->kernelList().empty());
  EXPECT_FALSE(hasOp(*client, "user.bad"));
  // A built-in's name is no clash: user kernels live in the user. namespace.
  EXPECT_EQ(client->kernelAdd("relu", kQuickGelu, kQuickGeluDesc).name, "user.relu");
  client->kernelRemove("relu");
  // Registering twice needs replace.
  client->kernelAdd("twice", kQuickGelu, kQuickGeluDesc);
  EXPECT_TRUE(
      contains(errorOf([&] { client->kernelAdd("twice", kQuickGelu, kQuickGeluDesc); }), "kernel 'user.twice' exists"));
  client->kernelAdd("twice", kQuickGelu, kQuickGeluDesc, /*replace=*/true);
  // The daemon keeps serving.
  Tensor x = client->upload({3}, std::vector<float>{1, -2, 3});
  EXPECT_EQ(client->call1("relu", {x}).toHost(), (std::vector<float>{1, 0, 3}));
}

// Out-of-range indices in a user kernel stay inside its own buffers: writes
// past the end of its output are dropped and reads past the end of its
// input read zeros, so a tensor allocated next to them is untouched.
TEST_F(IntegrationKernels, OutOfBoundsKernelCannotTouchACanaryTensor) {
  auto client = connect();
  constexpr const char* kWild = R"X(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) buffer Y { float y[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;   // 0 .. 65535: far past both buffers
  y[i] = 99.0 + x[i + 16u];           // x has 16 elements: x[i + 16] is always out of range
  y[i + 1000u] = -1.0;
}
)X";
  client->kernelAdd("wild", kWild, R"X({"inputs": [{"name": "x", "dtype": "f32"}],
      "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}], "grid": ["65536"]})X");
  std::vector<Tensor> canaries;
  std::vector<float> pattern(4096);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = float(i) + 0.5f;
  // Canaries allocated before and after the kernel's tensors, so some lie next to them.
  for (int k = 0; k < 4; ++k) canaries.push_back(client->upload({4096}, pattern));
  Tensor x = client->upload({16}, std::vector<float>(16, 5.0f));
  std::vector<Tensor> outs;
  for (int k = 0; k < 4; ++k) outs.push_back(client->call1("user.wild", {x}));
  for (int k = 0; k < 4; ++k) canaries.push_back(client->upload({4096}, pattern));
  for (auto& out : outs) EXPECT_EQ(out.toHost(), std::vector<float>(16, 99.0f));  // 99 + 0 (reads out of range give 0)
  for (auto& canary : canaries) EXPECT_EQ(canary.toHost(), pattern);
  EXPECT_EQ(x.toHost(), std::vector<float>(16, 5.0f));
}

TEST_F(IntegrationKernels, RemovingAKernelWhileItsCallsAreQueuedIsSafe) {
  auto client = connect();
  client->kernelAdd("quick_gelu", kQuickGelu, kQuickGeluDesc);
  auto xs = randomFloats(4096, 3);
  Tensor x = client->upload({4096}, xs);
  std::vector<Tensor> outs;
  for (int i = 0; i < 20; ++i) outs.push_back(client->call1("user.quick_gelu", {x}));
  auto other = connect();
  other->kernelRemove("quick_gelu");  // another connection, while the calls may still be queued
  for (auto& out : outs) {
    auto got = out.toHost();
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(got[i], quickGelu(xs[i], 1.702), 1e-5);
  }
  EXPECT_FALSE(hasOp(*client, "user.quick_gelu"));
  EXPECT_TRUE(contains(errorOf([&] { client->call1("user.quick_gelu", {x}).wait(); }), "unknown op 'user.quick_gelu'"));
  EXPECT_TRUE(contains(errorOf([&] { client->kernelRemove("quick_gelu"); }), "no kernel named 'user.quick_gelu'"));
}

class IntegrationKernelsSlow : public IntegrationKernels {
 protected:
  DaemonOptions daemonOptions() override {
    DaemonOptions options;
    options.extra = {{"kernels", {{"max_dispatch_ms", 1}}}};
    return options;
  }
};

TEST_F(IntegrationKernelsSlow, ADispatchOverMaxDispatchMsIsReported) {
  auto client = connect();
  constexpr const char* kSlow = R"X(#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { int steps; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= x.length()) return;
  float v = x[i];
  for (int k = 0; k < steps; ++k) v = v * 0.999 + 0.001;
  y[i] = v;
}
)X";
  client->kernelAdd("slow", kSlow, R"X({"inputs": [{"name": "x", "dtype": "f32"}],
      "outputs": [{"name": "y", "dtype": "f32", "shape": "x"}],
      "attrs": [{"name": "steps", "type": "int", "default": 20000}]})X");
  Tensor x = client->upload({4096}, randomFloats(4096, 4));
  client->call1("user.slow", {x}).wait();
  EXPECT_TRUE(waitUntil([&] { return contains(daemon().log(), "kernel user.slow ran "); }, std::chrono::seconds(10)))
      << daemon().log();
  EXPECT_TRUE(contains(daemon().log(), "ms on the device; kernels.max_dispatch_ms is 1"));
  // Reported while it ran, too: 1 ms after it was queued it had not finished.
  EXPECT_TRUE(contains(daemon().log(), "kernel user.slow has not finished 1 ms after it was queued"));
}

class IntegrationKernelPolicy : public PolicyDaemonTest {
 protected:
  IntegrationKernelPolicy()
      : PolicyDaemonTest({"admin", "alice", "bob"}, R"X({
          "principals": {"admin": {"roles": ["admin"]},
                         "alice": {"rules": ["+@all"]},
                         "bob": {"rules": ["+@elementwise"]}},
          "roles": {"admin": {"rules": ["+@all", "+@kernel"]}}})X") {}
};

TEST_F(IntegrationKernelPolicy, RegistrationNeedsAtKernelAndCallsNeedTheirOpRight) {
  auto alice = as("alice");
  std::string denied = errorOf([&] { alice->kernelAdd("quick_gelu", kQuickGelu, kQuickGeluDesc); });
  EXPECT_TRUE(contains(denied,
                       "permission denied: principal 'alice' may not register or remove the kernel "
                       "'user.quick_gelu': no rule grants @kernel"))
      << denied;
  EXPECT_TRUE(contains(audit(), "principal=alice")) << audit();
  EXPECT_TRUE(contains(audit(), "action=kernel resource=user.quick_gelu")) << audit();
  EXPECT_TRUE(alice->kernelList().empty());

  auto admin = as("admin");
  admin->kernelAdd("quick_gelu", kQuickGelu, kQuickGeluDesc);
  // alice may call it (+@all covers category @user); bob (+@elementwise) may not.
  Tensor x = alice->upload({2}, std::vector<float>{1, -1});
  auto got = alice->call1("user.quick_gelu", {x}).toHost();
  EXPECT_NEAR(got[0], quickGelu(1, 1.702), 1e-6);
  auto bob = as("bob");
  Tensor y = bob->upload({2}, std::vector<float>{1, -1});
  EXPECT_TRUE(contains(errorOf([&] { bob->call1("user.quick_gelu", {y}).wait(); }),
                       "may not call op 'user.quick_gelu' (category @user)"));
  // Only the owner or @kernel removes it.
  EXPECT_TRUE(contains(errorOf([&] { alice->kernelRemove("quick_gelu"); }), "no rule grants @kernel"));
  admin->kernelRemove("quick_gelu");
  EXPECT_TRUE(admin->kernelList().empty());
}

// Daemons on one state directory, started and stopped by the test.
TEST(IntegrationKernelRestart, KernelsSurviveARestart) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-kernels-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path scratch = tmpl;
  DaemonOptions options;
  options.extra = {{"state_dir", (scratch / "state").string()}, {"cache_dir", (scratch / "cache").string()}};
  auto xs = randomFloats(300, 5);
  {
    DaemonProcess daemon(options);
    Client client({.address = daemon.address(), .token = daemon.token()});
    client.kernelAdd("quick_gelu", kQuickGelu, kQuickGeluDesc);
    client.kernelAdd("axpy_rows", "spirv", bytesOf(spirvOf(scratch, kAxpyRows)), kAxpyRowsDesc);
    client.kernelAdd("gone", kQuickGelu, kQuickGeluDesc);
    client.kernelRemove("gone");
    auto status = daemon.stop();
    ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
  }
  {
    DaemonProcess daemon(options);
    EXPECT_TRUE(contains(daemon.log(), "loaded 2 user kernel(s)")) << daemon.log();
    Client client({.address = daemon.address(), .token = daemon.token()});
    auto kernels = client.kernelList();
    ASSERT_EQ(kernels.size(), 2u);
    EXPECT_EQ(kernels[0].name, "user.axpy_rows");
    EXPECT_EQ(kernels[0].language, "spirv");
    EXPECT_EQ(kernels[1].name, "user.quick_gelu");
    EXPECT_EQ(kernels[1].owner, daemon.principal());
    EXPECT_EQ(client.kernelShow("quick_gelu").source, kQuickGelu);
    Tensor x = client.upload({300}, xs);
    auto got = client.call1("user.quick_gelu", {x}).toHost();
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(got[i], quickGelu(xs[i], 1.702), 1e-5);
    Tensor m = client.upload({3, 100}, xs);
    Tensor b = client.upload({100}, std::vector<float>(100, 1.0f));
    auto rows = client.call1("user.axpy_rows", {m, b}, {{"a", 2.0}}).toHost();
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(rows[i], 2.0 * xs[i] + 1.0, 1e-5);
    auto status = daemon.stop();
    ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
  }
  std::error_code ignored;
  fs::remove_all(scratch, ignored);
}

TEST_F(IntegrationKernels, TensorctlKernelAddLsShowCallRm) {
  auto ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {(buildDir() / "client" / "tensorctl").string(), "--connect", daemon().address(),
                                     "--token", daemon().token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runCommand(argv, {{"TENSORD_ADDR", std::nullopt}, {"TENSORD_TOKEN", std::nullopt}});
  };
  auto describe = [](const CommandResult& r) { return "exit " + std::to_string(r.exitCode) + "\n" + r.out + r.err; };
  // The README's kernel and command.
  const fs::path comp = fs::path(TENSORD_SOURCE_DIR) / "examples" / "kernels" / "quick_gelu.comp";
  auto add = ctl({"kernel", "add", "quick_gelu", comp.string(), "--inputs", "x:f32", "--outputs", "y:f32", "--attrs",
                  "alpha:float=1.702", "--doc", "x * sigmoid(alpha * x)"});
  ASSERT_EQ(add.exitCode, 0) << describe(add);
  EXPECT_TRUE(contains(add.out, "registered user.quick_gelu: user.quick_gelu(x, *, alpha=")) << add.out;

  auto ls = ctl({"kernel", "ls"});
  ASSERT_EQ(ls.exitCode, 0) << describe(ls);
  EXPECT_TRUE(contains(ls.out, "user.quick_gelu")) << ls.out;
  EXPECT_TRUE(contains(ls.out, daemon().principal())) << ls.out;
  auto lsJson = ctl({"kernel", "ls", "--json"});
  ASSERT_EQ(lsJson.exitCode, 0) << describe(lsJson);
  auto parsed = nlohmann::json::parse(lsJson.out);
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0]["description"]["attrs"][0]["default"], 1.702);

  auto ops = ctl({"ops"});
  EXPECT_TRUE(contains(ops.out, "user.quick_gelu")) << ops.out;
  auto show = ctl({"kernel", "show", "user.quick_gelu"});
  ASSERT_EQ(show.exitCode, 0) << describe(show);
  EXPECT_TRUE(contains(show.out, "y[i] = v / (1.0 + exp(-alpha * v));")) << show.out;
  EXPECT_TRUE(contains(show.out, "x * sigmoid(alpha * x)")) << show.out;

  // put, call with an attribute, get.
  std::vector<float> xs = {-2, -0.5f, 0, 0.5f, 2};
  writeNpyF32(work_ / "x.npy", {5}, xs);
  ASSERT_EQ(ctl({"put", "x", (work_ / "x.npy").string()}).exitCode, 0);
  auto call = ctl({"call", "user.quick_gelu", "x", "--attr", "alpha=1.0", "--out", "y"});
  ASSERT_EQ(call.exitCode, 0) << describe(call);
  ASSERT_EQ(ctl({"get", "y", (work_ / "y.npy").string()}).exitCode, 0);
  auto y = readNpyF32(work_ / "y.npy");
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(y.data[i], quickGelu(xs[i], 1.0), 1e-6);

  // A compile error: exit 1 and the line in the message.
  const fs::path broken = work_ / "broken.comp";
  std::ofstream(broken) << "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { nope(); }\n";
  auto bad = ctl({"kernel", "add", "broken", broken.string(), "--outputs", "y:f32:[4]"});
  EXPECT_EQ(bad.exitCode, 1) << describe(bad);
  EXPECT_TRUE(contains(bad.err, ":3:")) << bad.err;
  auto usage = ctl({"kernel", "add", "x", comp.string()});
  EXPECT_EQ(usage.exitCode, 2) << describe(usage);

  auto rm = ctl({"kernel", "rm", "quick_gelu"});
  ASSERT_EQ(rm.exitCode, 0) << describe(rm);
  auto after = ctl({"kernel", "ls", "--json"});
  EXPECT_EQ(nlohmann::json::parse(after.out).size(), 0u) << after.out;
}

}  // namespace
}  // namespace tensord::testing
