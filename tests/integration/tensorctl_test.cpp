// The tensorctl binary against a real daemon: the README session (put, put,
// call matmul, get, compare with a CPU matmul), ls/rm, exit codes and the
// TENSORD_ADDR / TENSORD_TOKEN environment variables.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/daemon_test.h"
#include "tests/integration/npy.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {
namespace fs = std::filesystem;

class IntegrationTensorctl : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    work_ = daemon().dir() / "files";
    fs::create_directories(work_);
  }

  // Runs tensorctl with explicit --connect/--token (and no TENSORD_* env).
  CommandResult ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {"--connect", daemon().address(), "--token", daemon().token()};
    argv.insert(argv.end(), args.begin(), args.end());
    return ctlRaw(argv, {{"TENSORD_ADDR", std::nullopt}, {"TENSORD_TOKEN", std::nullopt}});
  }

  CommandResult ctlRaw(const std::vector<std::string>& args, const EnvChanges& env) {
    std::vector<std::string> argv = {(buildDir() / "client" / "tensorctl").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return runCommand(argv, env);
  }

  fs::path file(const std::string& name) const { return work_ / name; }

 private:
  fs::path work_;
};

std::string describe(const CommandResult& r) {
  return "exit " + std::to_string(r.exitCode) + (r.timedOut ? " (timed out)" : "") + "\nstdout: " + r.out +
         "\nstderr: " + r.err;
}

// True when some object in `j` has "name" == name, or some string equals it.
bool jsonNames(const nlohmann::json& j, const std::string& name) {
  if (j.is_string()) return j.get<std::string>() == name;
  if (j.is_object() && j.contains("name") && j["name"] == name) return true;
  if (j.is_structured()) {
    for (const auto& item : j) {
      if (jsonNames(item, name)) return true;
    }
  }
  return false;
}

bool hasUsableNumpy() {
  auto r = runCommand({"/usr/bin/python3", "-c", "import numpy"}, {}, std::chrono::seconds(60));
  return r.exitCode == 0;
}

// A loopback port nothing listens on: bound, read back, closed.
uint16_t closedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(IntegrationTensorctl, ReadmeSessionMatchesCpuMatmul) {
  constexpr int64_t m = 512, k = 256, n = 384;
  auto a = randomFloats(size_t(m * k), 41);
  auto b = randomFloats(size_t(k * n), 42);
  writeNpyF32(file("a.npy"), {m, k}, a);
  writeNpyF32(file("b.npy"), {k, n}, b);

  for (auto args : std::vector<std::vector<std::string>>{{"put", "a", file("a.npy")},
                                                         {"put", "b", file("b.npy")},
                                                         {"call", "matmul", "a", "b", "--out", "c"},
                                                         {"get", "c", file("c.npy")}}) {
    auto r = ctl(args);
    ASSERT_EQ(r.exitCode, 0) << args[0] << ": " << describe(r);
  }

  NpyF32 c = readNpyF32(file("c.npy"));
  ASSERT_EQ(c.shape, (std::vector<int64_t>{m, n}));
  MatmulReference ref = matmulReference(a, b, m, k, n);
  double maxRef = 0, maxErr = 0;
  for (size_t e = 0; e < ref.value.size(); ++e) {
    maxRef = std::max(maxRef, std::abs(ref.value[e]));
    maxErr = std::max(maxErr, std::abs(c.data[e] - ref.value[e]));
  }
  // Within 1e-4 relative to the result's scale (what numpy's a @ b is checked against).
  EXPECT_LE(maxErr, 1e-4 * maxRef) << "max |c - a@b| = " << maxErr << ", max |a@b| = " << maxRef;

  // The files tensorctl writes are real .npy: numpy reads them, when it is there.
  if (hasUsableNumpy()) {
    std::string script =
        "import numpy as np, sys\n"
        "a = np.load(sys.argv[1]); b = np.load(sys.argv[2]); c = np.load(sys.argv[3])\n"
        "ref = a.astype(np.float64) @ b.astype(np.float64)\n"
        "err = np.abs(c - ref).max() / np.abs(ref).max()\n"
        "assert c.dtype == np.float32 and c.shape == (512, 384), (c.dtype, c.shape)\n"
        "assert err <= 1e-4, err\n";
    auto r = runCommand({"/usr/bin/python3", "-c", script, file("a.npy"), file("b.npy"), file("c.npy")});
    EXPECT_EQ(r.exitCode, 0) << describe(r);
  }
}

// Names in a `ls --json` listing, in order.
std::vector<std::string> listedNames(const CommandResult& r) {
  std::vector<std::string> names;
  for (const auto& item : nlohmann::json::parse(r.out)) names.push_back(item["name"].get<std::string>());
  return names;
}

TEST_F(IntegrationTensorctl, LsFiltersByPrefixAndPagesWithLimit) {
  writeNpyF32(file("x.npy"), {1}, {1});
  for (const char* name : {"run/b", "other", "run/a", "run/c", "zz"}) {
    ASSERT_EQ(ctl({"put", name, file("x.npy")}).exitCode, 0) << name;
  }
  auto all = ctl({"ls", "--json"});
  ASSERT_EQ(all.exitCode, 0) << describe(all);
  EXPECT_EQ(listedNames(all), (std::vector<std::string>{"other", "run/a", "run/b", "run/c", "zz"}));
  EXPECT_EQ(all.err, "");

  auto prefixed = ctl({"ls", "run/", "--json"});
  ASSERT_EQ(prefixed.exitCode, 0) << describe(prefixed);
  EXPECT_EQ(listedNames(prefixed), (std::vector<std::string>{"run/a", "run/b", "run/c"}));

  // --limit shows the first N and says how to go on; --after goes on.
  auto first = ctl({"ls", "run/", "--limit", "2", "--json"});
  ASSERT_EQ(first.exitCode, 0) << describe(first);
  EXPECT_EQ(listedNames(first), (std::vector<std::string>{"run/a", "run/b"}));
  EXPECT_EQ(first.err, "tensorctl: more tensors follow; go on with: tensorctl ls run/ --limit 2 --after run/b\n");
  auto rest = ctl({"ls", "run/", "--limit", "2", "--after", "run/b", "--json"});
  ASSERT_EQ(rest.exitCode, 0) << describe(rest);
  EXPECT_EQ(listedNames(rest), (std::vector<std::string>{"run/c"}));
  EXPECT_EQ(rest.err, "");

  auto table = ctl({"ls", "run/", "--limit", "1"});
  ASSERT_EQ(table.exitCode, 0) << describe(table);
  EXPECT_NE(table.out.find("run/a"), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find("run/b"), std::string::npos) << table.out;

  auto bad = ctl({"ls", "--limit", "0"});
  EXPECT_EQ(bad.exitCode, 2) << describe(bad);
  EXPECT_NE(bad.err.find("--limit: expected a whole number from 1 to 4294967295, got '0'"), std::string::npos)
      << bad.err;
  auto badPrefix = ctl({"ls", "bad prefix"});
  EXPECT_EQ(badPrefix.exitCode, 1) << describe(badPrefix);
  EXPECT_NE(badPrefix.err.find("listTensors: prefix: tensor name 'bad prefix' has a character outside"),
            std::string::npos)
      << badPrefix.err;
}

TEST_F(IntegrationTensorctl, LsShowsNamesAndRmRemoves) {
  writeNpyF32(file("x.npy"), {3}, {1, 2, 3});
  ASSERT_EQ(ctl({"put", "x", file("x.npy")}).exitCode, 0);
  ASSERT_EQ(ctl({"put", "y", file("x.npy")}).exitCode, 0);

  auto ls = ctl({"ls", "--json"});
  ASSERT_EQ(ls.exitCode, 0) << describe(ls);
  nlohmann::json listed = nlohmann::json::parse(ls.out);
  EXPECT_TRUE(jsonNames(listed, "x")) << ls.out;
  EXPECT_TRUE(jsonNames(listed, "y")) << ls.out;

  auto rm = ctl({"rm", "x"});
  ASSERT_EQ(rm.exitCode, 0) << describe(rm);
  ls = ctl({"ls", "--json"});
  ASSERT_EQ(ls.exitCode, 0) << describe(ls);
  listed = nlohmann::json::parse(ls.out);
  EXPECT_FALSE(jsonNames(listed, "x")) << ls.out;
  EXPECT_TRUE(jsonNames(listed, "y")) << ls.out;

  auto plain = ctl({"ls"});
  EXPECT_EQ(plain.exitCode, 0) << describe(plain);
  EXPECT_NE(plain.out.find("y"), std::string::npos) << plain.out;

  auto get = ctl({"get", "y", file("y.npy")});
  ASSERT_EQ(get.exitCode, 0) << describe(get);
  EXPECT_EQ(readNpyF32(file("y.npy")).data, (std::vector<float>{1, 2, 3}));
}

TEST_F(IntegrationTensorctl, InfoOpsAndWhoami) {
  auto info = ctl({"info"});
  EXPECT_EQ(info.exitCode, 0) << describe(info);
  auto ops = ctl({"ops", "--json"});
  ASSERT_EQ(ops.exitCode, 0) << describe(ops);
  nlohmann::json opList = nlohmann::json::parse(ops.out);
  for (const char* op : {"add", "sub", "mul", "div", "neg", "exp", "log", "relu", "sum", "mean", "matmul"}) {
    EXPECT_TRUE(jsonNames(opList, op)) << "ops --json lacks " << op;
  }
  auto who = ctl({"whoami"});
  EXPECT_EQ(who.exitCode, 0) << describe(who);
  EXPECT_NE(who.out.find(daemon().principal()), std::string::npos) << who.out;
}

TEST_F(IntegrationTensorctl, OpsDescribesTheOpLibrary) {
  auto json = ctl({"ops", "--json"});
  ASSERT_EQ(json.exitCode, 0) << describe(json);
  nlohmann::json opList = nlohmann::json::parse(json.out);
  nlohmann::json add, reshape;
  for (const auto& op : opList) {
    if (op["name"] == "add") add = op;
    if (op["name"] == "reshape") reshape = op;
  }
  ASSERT_TRUE(add.is_object()) << json.out.substr(0, 2000);
  EXPECT_EQ(add["signature"], "add(input, other?, *, alpha=1, other: scalar?)");
  ASSERT_EQ(add["input_specs"].size(), 2u);
  EXPECT_EQ(add["input_specs"][1], nlohmann::json({{"name", "other"}, {"role", "data"}, {"optional", true},
                                                   {"variadic", false}}));
  EXPECT_EQ(add["view"], false);
  EXPECT_EQ(add["mutates"], nlohmann::json::array());
  EXPECT_EQ(add["differentiable"], true);
  EXPECT_EQ(add["backward"], "add_backward");
  ASSERT_TRUE(reshape.is_object()) << "no reshape op";
  EXPECT_EQ(reshape["view"], true);

  auto table = ctl({"ops"});
  ASSERT_EQ(table.exitCode, 0) << describe(table);
  EXPECT_NE(table.out.find("add(input, other?, *, alpha=1, other: scalar?)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("SIGNATURE"), std::string::npos) << table.out;

  auto one = ctl({"ops", "add"});
  ASSERT_EQ(one.exitCode, 0) << describe(one);
  EXPECT_EQ(one.out.rfind("add(input, other?, *, alpha=1, other: scalar?)\n", 0), 0u) << one.out;
  for (const char* part : {"inputs:", "attrs:", "multiplier of other", "default 1", "differentiable:  yes"}) {
    EXPECT_NE(one.out.find(part), std::string::npos) << part << " missing from:\n" << one.out;
  }
  auto oneJson = ctl({"ops", "add", "--json"});
  ASSERT_EQ(oneJson.exitCode, 0) << describe(oneJson);
  EXPECT_EQ(nlohmann::json::parse(oneJson.out)["name"], "add");

  auto unknown = ctl({"ops", "frobnicate"});
  EXPECT_EQ(unknown.exitCode, 1) << describe(unknown);
  EXPECT_NE(unknown.err.find("unknown op 'frobnicate'"), std::string::npos) << unknown.err;
}

TEST_F(IntegrationTensorctl, BackwardOpsAreCalledLikeAnyOp) {
  writeNpyF32(file("x.npy"), {4}, {-1.5f, 0.5f, -0.25f, 2.0f});
  writeNpyF32(file("g.npy"), {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  ASSERT_EQ(ctl({"put", "x", file("x.npy")}).exitCode, 0);
  ASSERT_EQ(ctl({"put", "g", file("g.npy")}).exitCode, 0);
  auto r = ctl({"call", "relu_backward", "g", "x", "--out", "gx"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  ASSERT_EQ(ctl({"get", "gx", file("gx.npy")}).exitCode, 0);
  EXPECT_EQ(readNpyF32(file("gx.npy")).data, (std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f}));

  auto relu = ctl({"ops", "relu"});
  EXPECT_NE(relu.out.find("differentiable:  yes (backward: relu_backward)"), std::string::npos) << relu.out;
  auto backward = ctl({"ops", "relu_backward", "--json"});
  ASSERT_EQ(backward.exitCode, 0) << describe(backward);
  EXPECT_EQ(nlohmann::json::parse(backward.out)["differentiable"], false);
  auto argmax = ctl({"ops", "argmax", "--json"});
  EXPECT_EQ(nlohmann::json::parse(argmax.out)["differentiable"], false);
  EXPECT_EQ(nlohmann::json::parse(argmax.out)["backward"], "");

  // A gradient of the wrong shape is refused with both shapes named.
  writeNpyF32(file("g3.npy"), {3}, {1.0f, 2.0f, 3.0f});
  ASSERT_EQ(ctl({"put", "g3", file("g3.npy")}).exitCode, 0);
  auto bad = ctl({"call", "relu_backward", "g3", "x", "--out", "bad"});
  EXPECT_EQ(bad.exitCode, 1) << describe(bad);
  EXPECT_NE(bad.err.find("relu_backward"), std::string::npos) << bad.err;
}

TEST_F(IntegrationTensorctl, ScalarAttrCall) {
  writeNpyF32(file("x.npy"), {2, 2}, {-1.5f, 0.0f, 2.25f, 10.0f});
  ASSERT_EQ(ctl({"put", "x", file("x.npy")}).exitCode, 0);
  auto r = ctl({"call", "add", "x", "--attr", "other=2.5", "--out", "y"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  r = ctl({"call", "sub", "x", "--attr", "other=2", "--attr", "alpha=2", "--out", "z"});
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  ASSERT_EQ(ctl({"get", "y", file("y.npy")}).exitCode, 0);
  ASSERT_EQ(ctl({"get", "z", file("z.npy")}).exitCode, 0);
  EXPECT_EQ(readNpyF32(file("y.npy")).data, (std::vector<float>{1.0f, 2.5f, 4.75f, 12.5f}));
  EXPECT_EQ(readNpyF32(file("z.npy")).data, (std::vector<float>{-5.5f, -4.0f, -1.75f, 6.0f}));
  auto bad = ctl({"call", "add", "x", "--attr", "other=two", "--out", "w"});
  EXPECT_EQ(bad.exitCode, 2) << describe(bad);
  EXPECT_NE(bad.err.find("other"), std::string::npos) << bad.err;
}

TEST_F(IntegrationTensorctl, ExitCodes) {
  // 1: the daemon refused the request.
  auto unknown = ctl({"get", "no_such_tensor", file("out.npy")});
  EXPECT_EQ(unknown.exitCode, 1) << describe(unknown);
  EXPECT_NE(unknown.err.find("no_such_tensor"), std::string::npos) << unknown.err;
  writeNpyF32(file("x.npy"), {2, 2}, {1, 2, 3, 4});
  ASSERT_EQ(ctl({"put", "x", file("x.npy")}).exitCode, 0);
  auto badCall = ctl({"call", "matmul", "x", "no_such_tensor", "--out", "z"});
  EXPECT_EQ(badCall.exitCode, 1) << describe(badCall);

  // 2: usage.
  auto usage = ctl({"frobnicate"});
  EXPECT_EQ(usage.exitCode, 2) << describe(usage);
  auto missingArg = ctl({"put", "x"});
  EXPECT_EQ(missingArg.exitCode, 2) << describe(missingArg);

  // 3: cannot connect / authenticate.
  auto refused =
      ctlRaw({"--connect", "127.0.0.1:" + std::to_string(closedPort()), "info"}, {{"TENSORD_TOKEN", daemon().token()}});
  EXPECT_EQ(refused.exitCode, 3) << describe(refused);
  auto badToken = ctlRaw({"--connect", daemon().address(), "--token", "wrong", "info"}, {});
  EXPECT_EQ(badToken.exitCode, 3) << describe(badToken);

  // 4: local file errors.
  std::ofstream(file("bad.npy")) << "this is not a numpy file";
  auto malformed = ctl({"put", "bad", file("bad.npy")});
  EXPECT_EQ(malformed.exitCode, 4) << describe(malformed);
  EXPECT_NE(malformed.err.find("bad.npy"), std::string::npos) << malformed.err;
  auto missing = ctl({"put", "gone", file("does-not-exist.npy")});
  EXPECT_EQ(missing.exitCode, 4) << describe(missing);
  {
    // A truncated file: header says 2x2 f32, data holds 2 floats.
    writeNpyF32(file("short.npy"), {2, 2}, {1, 2, 3, 4});
    fs::resize_file(file("short.npy"), fs::file_size(file("short.npy")) - 8);
    auto truncated = ctl({"put", "short", file("short.npy")});
    EXPECT_EQ(truncated.exitCode, 4) << describe(truncated);
  }
  // None of the failures left a tensor behind.
  auto ls = ctl({"ls", "--json"});
  ASSERT_EQ(ls.exitCode, 0) << describe(ls);
  nlohmann::json listed = nlohmann::json::parse(ls.out);
  for (const char* name : {"bad", "gone", "short", "z"}) EXPECT_FALSE(jsonNames(listed, name)) << ls.out;
}

TEST_F(IntegrationTensorctl, EnvironmentGivesAddressAndToken) {
  writeNpyF32(file("x.npy"), {2}, {5, 6});
  EnvChanges env = {{"TENSORD_ADDR", daemon().address()}, {"TENSORD_TOKEN", daemon().token()}};
  auto put = ctlRaw({"put", "from_env", file("x.npy")}, env);
  ASSERT_EQ(put.exitCode, 0) << describe(put);
  auto ls = ctlRaw({"ls", "--json"}, env);
  ASSERT_EQ(ls.exitCode, 0) << describe(ls);
  EXPECT_TRUE(jsonNames(nlohmann::json::parse(ls.out), "from_env")) << ls.out;

  // The environment's token is what authenticates: a wrong one is refused.
  auto wrong = ctlRaw({"ls"}, {{"TENSORD_ADDR", daemon().address()}, {"TENSORD_TOKEN", "wrong"}});
  EXPECT_EQ(wrong.exitCode, 3) << describe(wrong);
  // Flags win over the environment.
  auto flags =
      ctlRaw({"--token", daemon().token(), "ls"}, {{"TENSORD_ADDR", daemon().address()}, {"TENSORD_TOKEN", "wrong"}});
  EXPECT_EQ(flags.exitCode, 0) << describe(flags);
}

}  // namespace
}  // namespace tensord::testing
