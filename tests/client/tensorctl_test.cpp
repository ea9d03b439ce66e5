// The tensorctl binary against the in-process fake daemon: output, exit codes.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "client/npy.h"
#include "fake_daemon.h"

namespace tensord {
namespace {

namespace fs = std::filesystem;
using testing::FakeDaemon;

struct Outcome {
  int code = -1;
  std::string out, err;
};

class TensorctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tensord_tensorctl_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  }

  // Runs tensorctl with `args` (and `env` prepended, e.g. "TENSORD_TOKEN=x").
  Outcome run(const std::vector<std::string>& args, const std::string& env = "") const {
    std::string command = "env -u TENSORD_ADDR -u TENSORD_TOKEN XDG_CONFIG_HOME=" + quote(path("xdg")) + " " + env + " " +
                          quote(TENSORCTL_PATH);
    for (const auto& a : args) command += " " + quote(a);
    command += " >" + quote(path("out.txt")) + " 2>" + quote(path("err.txt")) + " </dev/null";
    int status = std::system(command.c_str());
    Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    auto slurp = [](const std::string& p) {
      std::ifstream in(p);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    r.out = slurp(path("out.txt"));
    r.err = slurp(path("err.txt"));
    return r;
  }

  Outcome ctl(const FakeDaemon& daemon, std::vector<std::string> args) const {
    args.insert(args.begin(), {"--connect", daemon.address(), "--token", FakeDaemon::kToken});
    return run(args);
  }

  std::string writeF32(const std::string& name, const Shape& shape, const std::vector<float>& values) const {
    npy::write(path(name), DType::F32, shape, std::as_bytes(std::span(values)));
    return path(name);
  }

  std::vector<float> readF32(const std::string& name) const {
    npy::Array a = npy::read(path(name));
    EXPECT_EQ(a.dtype, DType::F32);
    std::vector<float> out(a.data.size() / 4);
    std::memcpy(out.data(), a.data.data(), a.data.size());
    return out;
  }

  fs::path dir_;
};

TEST_F(TensorctlTest, PutCallGet) {
  FakeDaemon daemon;
  std::string a = writeF32("a.npy", {2, 2}, {1, 2, 3, 4});
  Outcome put = ctl(daemon, {"put", "a", a});
  ASSERT_EQ(put.code, 0) << put.err;
  EXPECT_EQ(put.out, "a: f32[2, 2] (16 B)\n");

  Outcome call = ctl(daemon, {"call", "add", "a", "a", "--out", "c"});
  ASSERT_EQ(call.code, 0) << call.err;
  EXPECT_EQ(call.out, "c: f32[2, 2] (16 B)\n");
  EXPECT_EQ(daemon.calls(), 1u);

  Outcome get = ctl(daemon, {"get", "c", path("c.npy")});
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_EQ(readF32("c.npy"), (std::vector<float>{2, 4, 6, 8}));

  // put replaces an existing name.
  ASSERT_EQ(ctl(daemon, {"put", "a", writeF32("a2.npy", {1}, {9})}).code, 0);
  ASSERT_EQ(ctl(daemon, {"get", "a", path("back.npy")}).code, 0);
  EXPECT_EQ(readF32("back.npy"), std::vector<float>{9});
}

TEST_F(TensorctlTest, CallWithAttrsAndSeveralOutputs) {
  FakeDaemon daemon;
  ASSERT_EQ(ctl(daemon, {"put", "x", writeF32("x.npy", {3}, {1, 2, 3})}).code, 0);
  Outcome scaled = ctl(daemon, {"call", "scale", "x", "--attr", "factor=3", "--attr", "bias=-1", "--attr", "axes=0,1",
                                "--attr", "flip=true", "--attr", "tag=hello world", "--out", "y"});
  ASSERT_EQ(scaled.code, 0) << scaled.err;
  ASSERT_EQ(ctl(daemon, {"get", "y", path("y.npy")}).code, 0);
  EXPECT_EQ(readF32("y.npy"), (std::vector<float>{2, 5, 8}));

  Outcome split = ctl(daemon, {"--json", "call", "split2", "x", "--out", "p,q"});
  ASSERT_EQ(split.code, 0) << split.err;
  auto json = nlohmann::json::parse(split.out);
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[1]["name"], "q");
  EXPECT_EQ(json[1]["shape"], nlohmann::json::array({3}));
  ASSERT_EQ(ctl(daemon, {"get", "q", path("q.npy")}).code, 0);
  EXPECT_EQ(readF32("q.npy"), (std::vector<float>{-1, -2, -3}));

  Outcome tooMany = ctl(daemon, {"call", "neg", "x", "--out", "a,b"});
  EXPECT_EQ(tooMany.code, 2);
  EXPECT_NE(tooMany.err.find("neg has 1 output; got 2 --out names"), std::string::npos) << tooMany.err;
}

TEST_F(TensorctlTest, BadAttrsAreUsageErrors) {
  FakeDaemon daemon;
  ASSERT_EQ(ctl(daemon, {"put", "x", writeF32("x.npy", {1}, {1})}).code, 0);
  Outcome unknownName = ctl(daemon, {"call", "scale", "x", "--attr", "nope=1", "--out", "y"});
  EXPECT_EQ(unknownName.code, 2);
  EXPECT_NE(unknownName.err.find("scale has no attr 'nope'; its attrs: factor (float), bias (float)"),
            std::string::npos)
      << unknownName.err;
  Outcome wrongType = ctl(daemon, {"call", "scale", "x", "--attr", "factor=big", "--out", "y"});
  EXPECT_EQ(wrongType.code, 2);
  EXPECT_NE(wrongType.err.find("scale: attr 'factor' expects a number; got 'big'"), std::string::npos);
  EXPECT_EQ(daemon.calls(), 0u);
}

TEST_F(TensorctlTest, DaemonErrorsExitOne) {
  FakeDaemon daemon;
  ASSERT_EQ(ctl(daemon, {"put", "x", writeF32("x.npy", {2}, {1, 2})}).code, 0);
  ASSERT_EQ(ctl(daemon, {"put", "y", writeF32("y.npy", {3}, {1, 2, 3})}).code, 0);
  Outcome shapes = ctl(daemon, {"call", "add", "x", "y", "--out", "z"});
  EXPECT_EQ(shapes.code, 1);
  EXPECT_EQ(shapes.err, "tensorctl: add: input 'b' has shape [3]; expected [2] (a's shape)\n");
  Outcome missing = ctl(daemon, {"call", "add", "x", "nothere", "--out", "z"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.err, "tensorctl: restore: no tensor named 'nothere'\n");
  Outcome unknownOp = ctl(daemon, {"call", "frob", "x", "--out", "z"});
  EXPECT_EQ(unknownOp.code, 1);
  EXPECT_EQ(unknownOp.err, "tensorctl: unknown op 'frob'\n");
  Outcome get = ctl(daemon, {"get", "nothere", path("n.npy")});
  EXPECT_EQ(get.code, 1);
  EXPECT_FALSE(fs::exists(path("n.npy")));
  Outcome rm = ctl(daemon, {"rm", "nothere"});
  EXPECT_EQ(rm.code, 1);
  EXPECT_EQ(rm.err, "tensorctl: delete: no tensor named 'nothere'\n");
}

TEST_F(TensorctlTest, ListingsAndRemove) {
  FakeDaemon daemon;
  ASSERT_EQ(ctl(daemon, {"put", "b", writeF32("b.npy", {2, 3}, {1, 2, 3, 4, 5, 6})}).code, 0);
  ASSERT_EQ(ctl(daemon, {"put", "a", writeF32("a.npy", {1}, {1})}).code, 0);
  Outcome ls = ctl(daemon, {"ls"});
  ASSERT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out,
            "NAME  DTYPE  SHAPE   BYTES  OWNER\n"
            "a     f32    [1]     4      tester\n"
            "b     f32    [2, 3]  24     tester\n");
  Outcome json = ctl(daemon, {"ls", "--json"});
  ASSERT_EQ(json.code, 0);
  auto list = nlohmann::json::parse(json.out);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["name"], "b");
  EXPECT_EQ(list[1]["dtype"], "f32");
  EXPECT_EQ(list[1]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(list[1]["bytes"], 24);
  EXPECT_EQ(list[1]["owner"], "tester");

  // The fake daemon predates paging (it ignores the prefix): the client
  // filters, and --limit cuts the one page it gets.
  Outcome prefixed = ctl(daemon, {"ls", "b", "--json"});
  ASSERT_EQ(prefixed.code, 0) << prefixed.err;
  ASSERT_EQ(nlohmann::json::parse(prefixed.out).size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(prefixed.out)[0]["name"], "b");
  Outcome limited = ctl(daemon, {"ls", "--limit", "1", "--json"});
  ASSERT_EQ(limited.code, 0) << limited.err;
  ASSERT_EQ(nlohmann::json::parse(limited.out).size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(limited.out)[0]["name"], "a");
  EXPECT_EQ(limited.err, "tensorctl: more tensors follow; go on with: tensorctl ls --limit 1 --after a\n");

  ASSERT_EQ(ctl(daemon, {"rm", "a"}).code, 0);
  EXPECT_EQ(nlohmann::json::parse(ctl(daemon, {"ls", "--json"}).out).size(), 1u);
}

TEST_F(TensorctlTest, InfoWhoamiOps) {
  FakeDaemon daemon;
  Outcome who = ctl(daemon, {"whoami"});
  EXPECT_EQ(who.code, 0);
  EXPECT_NE(who.out.find("principal:  tester\n"), std::string::npos) << who.out;
  Outcome info = ctl(daemon, {"info", "--json"});
  ASSERT_EQ(info.code, 0) << info.err;
  auto json = nlohmann::json::parse(info.out);
  EXPECT_EQ(json["version"], "fake-1");
  EXPECT_EQ(json["device"]["name"], "fake device");
  Outcome human = ctl(daemon, {"info"});
  EXPECT_EQ(human.code, 0);
  EXPECT_NE(human.out.find("tensord fake-1 (protocol 9)"), std::string::npos) << human.out;
  Outcome ops = ctl(daemon, {"ops"});
  EXPECT_EQ(ops.code, 0);
  EXPECT_EQ(ops.out.rfind("OP      CATEGORY  SIGNATURE ", 0), 0u) << ops.out;
  for (const char* line : {"add     test      add(a, b?, *, other: scalar?) ", "neg     test      neg(x: any) ",
                           "oom     test      oom(x) ", "split2  test      split2(x...) -> (same, negated) ",
                           "scale(x, *, factor=1, bias=0, tag='', axes=[], flip=false)"}) {
    EXPECT_NE(ops.out.find(line), std::string::npos) << line << " not in\n" << ops.out;
  }
  EXPECT_NE(ops.out.find("f32     view\n"), std::string::npos) << ops.out;
  EXPECT_NE(ops.out.find("f32     writes x\n"), std::string::npos) << ops.out;
  auto opsJson = nlohmann::json::parse(ctl(daemon, {"ops", "--json"}).out);
  ASSERT_EQ(opsJson.size(), 5u);
  EXPECT_EQ(opsJson[0]["name"], "add");
  EXPECT_EQ(opsJson[0]["inputs"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(opsJson[0]["signature"], "add(a, b?, *, other: scalar?)");
  EXPECT_EQ(opsJson[0]["input_specs"],
            nlohmann::json::parse(R"([{"name": "a", "role": "data", "optional": false, "variadic": false},
                                      {"name": "b", "role": "data", "optional": true, "variadic": false}])"));
  EXPECT_EQ(opsJson[0]["attrs"][0]["type"], "scalar");
  EXPECT_EQ(opsJson[0]["attrs"][0]["optional"], true);
  EXPECT_FALSE(opsJson[0]["attrs"][0].contains("default"));
  EXPECT_EQ(opsJson[0]["differentiable"], true);
  EXPECT_EQ(opsJson[1]["view"], true);
  EXPECT_EQ(opsJson[3]["attrs"][0]["default"], 1.0);  // scale
  EXPECT_EQ(opsJson[4]["mutates"], nlohmann::json::array({"x"}));  // split2
  // A protocol 1 op: input specs made from the names.
  EXPECT_EQ(opsJson[2]["input_specs"][0]["role"], "data");
}

TEST_F(TensorctlTest, OpsNameDescribesOneOp) {
  FakeDaemon daemon;
  Outcome add = ctl(daemon, {"ops", "add"});
  ASSERT_EQ(add.code, 0) << add.err;
  EXPECT_EQ(add.out,
            "add(a, b?, *, other: scalar?)\n"
            "  a + b\n"
            "\n"
            "category:        test\n"
            "inputs:\n"
            "  a  data (f32)  required\n"
            "  b  data (f32)  optional\n"
            "attrs:\n"
            "  other  scalar  optional  the other operand as a number\n"
            "outputs:         out\n"
            "dtypes:          f32\n"
            "view:            no\n"
            "mutates:         nothing\n"
            "differentiable:  yes\n");
  Outcome split = ctl(daemon, {"ops", "split2"});
  ASSERT_EQ(split.code, 0) << split.err;
  EXPECT_NE(split.out.find("  x  data (f32)  one or more\n"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("outputs:         same, negated\n"), std::string::npos) << split.out;
  EXPECT_NE(split.out.find("mutates:         x (written in place; needs write access)\n"), std::string::npos)
      << split.out;
  Outcome scale = ctl(daemon, {"ops", "scale"});
  EXPECT_NE(scale.out.find("  factor  float  default 1\n"), std::string::npos) << scale.out;
  Outcome neg = ctl(daemon, {"ops", "neg"});
  EXPECT_NE(neg.out.find("view:            yes"), std::string::npos) << neg.out;
  EXPECT_NE(neg.out.find("attrs:           none\n"), std::string::npos) << neg.out;
  auto json = nlohmann::json::parse(ctl(daemon, {"ops", "neg", "--json"}).out);
  EXPECT_EQ(json["name"], "neg");
  EXPECT_EQ(json["view"], true);
  Outcome unknown = ctl(daemon, {"ops", "frob"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err, "tensorctl: unknown op 'frob' (tensorctl ops lists them)\n");
  Outcome tooMany = ctl(daemon, {"ops", "add", "neg"});
  EXPECT_EQ(tooMany.code, 2);
}

TEST_F(TensorctlTest, EnvironmentSuppliesAddressAndToken) {
  FakeDaemon daemon;
  Outcome who = run({"whoami"}, "TENSORD_ADDR=" + daemon.address() + " TENSORD_TOKEN=" + FakeDaemon::kToken);
  EXPECT_EQ(who.code, 0) << who.err;
  EXPECT_NE(who.out.find("principal:  tester\n"), std::string::npos) << who.out;
}

TEST_F(TensorctlTest, ConnectAndAuthFailuresExitThree) {
  std::string address;
  {
    FakeDaemon daemon;
    address = daemon.address();
    Outcome wrongToken = run({"--connect", address, "--token", "nope", "whoami"});
    EXPECT_EQ(wrongToken.code, 3);
    EXPECT_NE(wrongToken.err.find("invalid token"), std::string::npos) << wrongToken.err;
  }
  Outcome refused = run({"--connect", address, "info"});
  EXPECT_EQ(refused.code, 3);
  EXPECT_NE(refused.err.find("cannot connect to tensord at " + address), std::string::npos) << refused.err;
}

TEST_F(TensorctlTest, LocalFileErrorsExitFour) {
  // No daemon needed: the file is read before connecting.
  std::ofstream(path("bad.npy")) << "not numpy";
  Outcome bad = run({"--connect", "127.0.0.1:1", "put", "x", path("bad.npy")});
  EXPECT_EQ(bad.code, 4);
  EXPECT_NE(bad.err.find("bad.npy: not a .npy file"), std::string::npos) << bad.err;
  Outcome missing = run({"--connect", "127.0.0.1:1", "put", "x", path("missing.npy")});
  EXPECT_EQ(missing.code, 4);

  FakeDaemon daemon;
  ASSERT_EQ(ctl(daemon, {"put", "x", writeF32("x.npy", {1}, {1})}).code, 0);
  Outcome unwritable = ctl(daemon, {"get", "x", path("no/such/dir/x.npy")});
  EXPECT_EQ(unwritable.code, 4);
  EXPECT_NE(unwritable.err.find("cannot create"), std::string::npos) << unwritable.err;
}

TEST_F(TensorctlTest, UsageErrorsExitTwo) {
  Outcome none = run({});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no command given"), std::string::npos);
  EXPECT_EQ(run({"put", "x"}).code, 2);
  EXPECT_EQ(run({"call", "add", "a", "b"}).code, 2);
  EXPECT_EQ(run({"--bogus", "info"}).code, 2);
  Outcome help = run({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("usage: tensorctl"), std::string::npos);
}

}  // namespace
}  // namespace tensord
