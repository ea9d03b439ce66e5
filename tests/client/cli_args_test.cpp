// tensorctl's command-line grammar.

#include "client/cli_args.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "tensord/client.h"

namespace tensord::cli {
namespace {

Options parse(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  return parseArgs(args, [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string usageErrorOf(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CliArgs, TlsFilesFromFlagsOrEnvironment) {
  Options o = parse({"info"});
  EXPECT_EQ(o.caFile, "");
  EXPECT_EQ(o.certFile, "");
  o = parse({"--connect", "tls://h:1", "--ca", "ca.pem", "info"});
  EXPECT_EQ(o.address, "tls://h:1");
  EXPECT_EQ(o.caFile, "ca.pem");
  EXPECT_EQ(o.token, kDefaultToken);  // no certificate: the token as before
  // A certificate and no token: authenticate with the certificate.
  o = parse({"--cert=c.pem", "--key", "c.key", "info"}, {{"TENSORD_CA", "env-ca.pem"}});
  EXPECT_EQ(o.caFile, "env-ca.pem");
  EXPECT_EQ(o.certFile, "c.pem");
  EXPECT_EQ(o.keyFile, "c.key");
  EXPECT_EQ(o.token, "");
  o = parse({"info"}, {{"TENSORD_CERT", "e.pem"}, {"TENSORD_KEY", "e.key"}, {"TENSORD_TOKEN", "t"}});
  EXPECT_EQ(o.certFile, "e.pem");
  EXPECT_EQ(o.token, "t");  // a token still wins
  EXPECT_EQ(usageErrorOf({"--cert", "c.pem", "info"}), "--cert needs --key (or $TENSORD_KEY) too");
  EXPECT_EQ(usageErrorOf({"--key", "c.key", "info"}), "--key needs --cert (or $TENSORD_CERT) too");
  EXPECT_EQ(usageErrorOf({"--ca", "", "info"}), "--ca needs a file name");
}

TEST(CliArgs, DefaultsThenEnvThenFlags) {
  Options o = parse({"info"});
  EXPECT_EQ(o.address, kDefaultAddress);
  EXPECT_EQ(o.token, kDefaultToken);
  EXPECT_FALSE(o.json);
  o = parse({"info"}, {{"TENSORD_ADDR", "10.0.0.1:1"}, {"TENSORD_TOKEN", "t"}});
  EXPECT_EQ(o.address, "10.0.0.1:1");
  EXPECT_EQ(o.token, "t");
  o = parse({"--connect", "h:2", "--token=u", "info"}, {{"TENSORD_ADDR", "10.0.0.1:1"}, {"TENSORD_TOKEN", "t"}});
  EXPECT_EQ(o.address, "h:2");
  EXPECT_EQ(o.token, "u");
  o = parse({"info"}, {{"TENSORD_ADDR", ""}});
  EXPECT_EQ(o.address, kDefaultAddress);
}

TEST(CliArgs, GlobalFlagsAnywhere) {
  Options o = parse({"ls", "--json", "--connect=h:3"});
  EXPECT_EQ(o.command, "ls");
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.address, "h:3");
  o = parse({"--json", "ops"});
  EXPECT_TRUE(o.json);
}

TEST(CliArgs, Call) {
  Options o = parse({"call", "sum", "x", "--attr", "dim=-1", "--attr=keepdim=true", "--out", "y"});
  EXPECT_EQ(o.command, "call");
  EXPECT_EQ(o.args, (std::vector<std::string>{"sum", "x"}));
  EXPECT_EQ(o.attrs, (std::vector<std::string>{"dim=-1", "keepdim=true"}));
  EXPECT_EQ(o.outs, (std::vector<std::string>{"y"}));
  o = parse({"call", "split", "x", "--out", "a,b", "--out", "c"});
  EXPECT_EQ(o.outs, (std::vector<std::string>{"a", "b", "c"}));
  o = parse({"call", "neg", "--out", "y", "--", "-x", "--json"});
  EXPECT_EQ(o.args, (std::vector<std::string>{"neg", "-x", "--json"}));
  EXPECT_FALSE(o.json);
}

TEST(CliArgs, PutGetRm) {
  EXPECT_EQ(parse({"put", "a", "a.npy"}).args, (std::vector<std::string>{"a", "a.npy"}));
  EXPECT_EQ(parse({"get", "a", "a.npy"}).command, "get");
  EXPECT_EQ(parse({"rm", "a", "b"}).args.size(), 2u);
}

TEST(CliArgs, LoadSaveAndSafetensorsPutGet) {
  Options o = parse({"load", "m.safetensors", "--prefix", "m/"});
  EXPECT_EQ(o.args, (std::vector<std::string>{"m.safetensors"}));
  EXPECT_EQ(o.prefix, "m/");
  EXPECT_TRUE(o.hasPrefix);
  o = parse({"save", "out.safetensors", "a", "b", "--prefix=m/"});
  EXPECT_EQ(o.args, (std::vector<std::string>{"out.safetensors", "a", "b"}));
  EXPECT_EQ(o.prefix, "m/");
  EXPECT_FALSE(parse({"save", "all.safetensors"}).hasPrefix);
  EXPECT_EQ(parse({"get", "a", "b", "c", "x.safetensors"}).args.size(), 4u);
}

TEST(CliArgs, LsPrefixLimitAfter) {
  Options o = parse({"ls"});
  EXPECT_TRUE(o.args.empty());
  EXPECT_EQ(o.limit, 0u);
  EXPECT_EQ(o.after, "");
  o = parse({"ls", "run/", "--limit", "50", "--after=run/x"});
  EXPECT_EQ(o.args, (std::vector<std::string>{"run/"}));
  EXPECT_EQ(o.limit, 50u);
  EXPECT_EQ(o.after, "run/x");
  const std::string expected = "--limit: expected a whole number from 1 to 4294967295, got ";
  EXPECT_EQ(usageErrorOf({"ls", "--limit", "0"}), expected + "'0'");
  EXPECT_EQ(usageErrorOf({"ls", "--limit", "5x"}), expected + "'5x'");
  EXPECT_EQ(usageErrorOf({"ls", "--limit", "4294967296"}), expected + "'4294967296'");
  EXPECT_EQ(usageErrorOf({"ls", "--after="}), "--after needs a tensor name");
  EXPECT_EQ(usageErrorOf({"ls", "a", "b"}), "usage: tensorctl ls [PREFIX] [--limit N] [--after NAME] [--json]");
  EXPECT_EQ(usageErrorOf({"info", "--limit", "3"}), "--limit is only valid for 'ls'");
  EXPECT_EQ(usageErrorOf({"rm", "a", "--after", "b"}), "--after is only valid for 'ls'");
}

TEST(CliArgs, HelpAndVersion) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"put", "--help"}).help);
  EXPECT_TRUE(parse({"--version"}).version);
  EXPECT_NE(usage().find("call OP IN... [--attr key=value]... --out NAME"), std::string::npos);
}

TEST(CliArgs, UsageErrors) {
  EXPECT_EQ(usageErrorOf({}), "no command given");
  EXPECT_EQ(usageErrorOf({"frobnicate"}), "unknown command 'frobnicate'");
  EXPECT_EQ(usageErrorOf({"info", "--frob"}), "unknown option '--frob'");
  EXPECT_EQ(usageErrorOf({"put", "a"}), "usage: tensorctl put NAME FILE.npy|FILE.safetensors");
  EXPECT_EQ(usageErrorOf({"get", "a"}), "usage: tensorctl get NAME... FILE.npy|FILE.safetensors");
  EXPECT_EQ(usageErrorOf({"get", "a", "b", "c.npy"}),
            "get: several names need a .safetensors file (a .npy file holds one tensor)");
  EXPECT_EQ(usageErrorOf({"load"}), "usage: tensorctl load FILE.safetensors [--prefix P]");
  EXPECT_EQ(usageErrorOf({"ls", "--prefix", "p"}), "--prefix is only valid for 'load' and 'save'");
  EXPECT_EQ(usageErrorOf({"info", "x"}), "usage: tensorctl info");
  EXPECT_EQ(usageErrorOf({"rm"}), "usage: tensorctl rm NAME...");
  EXPECT_EQ(usageErrorOf({"call", "matmul", "a", "b"}), "call needs --out NAME (the name to save the output under)");
  EXPECT_EQ(usageErrorOf({"call", "--out", "c"}), "usage: tensorctl call OP IN... [--attr key=value]... --out NAME");
  EXPECT_EQ(usageErrorOf({"ls", "--out", "c"}), "--out is only valid for 'call'");
  EXPECT_EQ(usageErrorOf({"info", "--connect"}), "--connect needs a value");
  EXPECT_EQ(usageErrorOf({"info", "--connect="}), "--connect needs HOST:PORT");
  EXPECT_EQ(usageErrorOf({"info", "--json=1"}), "--json takes no value");
  EXPECT_EQ(usageErrorOf({"call", "f", "--out", "a,,b"}), "--out: empty tensor name in 'a,,b'");
}

// ~/.config/tensord/credentials: flag > environment > file > default, and a
// file others may read is refused.
class CredentialsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tensorctl-creds-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ / "tensord");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string& text, std::filesystem::perms mode) {
    auto path = dir_ / "tensord" / "credentials";
    std::ofstream(path) << text;
    std::filesystem::permissions(path, mode);
    return path;
  }
  std::map<std::string, std::string> env() const { return {{"XDG_CONFIG_HOME", dir_.string()}}; }

  std::filesystem::path dir_;
};

constexpr auto kOwnerOnly = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;

TEST_F(CredentialsFile, PrecedenceFlagThenEnvThenFileThenDefault) {
  EXPECT_EQ(parse({"info"}, env()).token, kDefaultToken);  // no file: the default
  write("# mine\ntoken = file-token\nconnect = tls://db:7451\nca = ca.pem\n", kOwnerOnly);
  Options o = parse({"info"}, env());
  EXPECT_EQ(o.token, "file-token");
  EXPECT_EQ(o.address, "tls://db:7451");
  EXPECT_EQ(o.caFile, (dir_ / "tensord" / "ca.pem").string());  // relative to the file
  auto e = env();
  e["TENSORD_TOKEN"] = "env-token";
  e["TENSORD_ADDR"] = "envhost:1";
  o = parse({"info"}, e);
  EXPECT_EQ(o.token, "env-token");
  EXPECT_EQ(o.address, "envhost:1");
  o = parse({"--token", "flag-token", "--connect", "flaghost:2", "info"}, e);
  EXPECT_EQ(o.token, "flag-token");
  EXPECT_EQ(o.address, "flaghost:2");
}

TEST_F(CredentialsFile, HomeWithoutXdg) {
  std::filesystem::create_directories(dir_ / ".config" / "tensord");
  auto path = dir_ / ".config" / "tensord" / "credentials";
  std::ofstream(path) << "token = home-token\n";
  std::filesystem::permissions(path, kOwnerOnly);
  EXPECT_EQ(parse({"info"}, {{"HOME", dir_.string()}}).token, "home-token");
}

TEST_F(CredentialsFile, GroupOrOtherAccessRefused) {
  for (auto extra : {std::filesystem::perms::group_read, std::filesystem::perms::others_read,
                     std::filesystem::perms::group_write}) {
    auto path = write("token = t\n", kOwnerOnly | extra);
    try {
      parse({"info"}, env());
      ADD_FAILURE() << "accepted a credentials file with group/other access";
    } catch (const UsageError& err) {
      std::string m = err.what();
      EXPECT_NE(m.find(path.string()), std::string::npos) << m;
      EXPECT_NE(m.find("accessible by group or others"), std::string::npos) << m;
      EXPECT_NE(m.find("chmod 600"), std::string::npos) << m;
    }
  }
  // A flag or variable for everything: the file is not needed, so not read.
  auto e = env();
  e["TENSORD_CA"] = "c";
  Options o = parse({"--token", "x", "--connect", "h:1", "--cert", "c", "--key", "k", "info"}, e);
  EXPECT_EQ(o.token, "x");
}

TEST_F(CredentialsFile, BadLinesNamed) {
  write("token = t\nfrobnicate = 1\n", kOwnerOnly);
  try {
    parse({"info"}, env());
    ADD_FAILURE() << "accepted an unknown key";
  } catch (const UsageError& err) {
    EXPECT_NE(std::string(err.what()).find("credentials:2: unknown key 'frobnicate'"), std::string::npos) << err.what();
  }
}

TEST(CliArgs, KernelCommands) {
  Options o = parse({"kernel", "add", "gelu", "g.comp", "--inputs", "x:f32", "--outputs", "y:f32",
                     "--attrs=alpha:float=1.702", "--grid", "numel(y)", "--replace"});
  EXPECT_EQ(o.command, "kernel");
  EXPECT_EQ(o.args, (std::vector<std::string>{"add", "gelu", "g.comp"}));
  EXPECT_EQ(o.kernel.inputs, "x:f32");
  EXPECT_EQ(o.kernel.attrs, "alpha:float=1.702");
  EXPECT_EQ(o.kernel.grid, "numel(y)");
  EXPECT_TRUE(o.kernel.replace);
  EXPECT_EQ(parse({"kernel", "add", "g", "g.spv", "--description", "d.json"}).kernel.descriptionFile, "d.json");
  EXPECT_EQ(parse({"kernel", "rm", "a", "b"}).args.size(), 3u);
  EXPECT_NE(usageErrorOf({"kernel", "add", "g", "g.comp"}).find("kernel add needs --outputs"), std::string::npos);
  EXPECT_NE(usageErrorOf({"kernel", "add", "g", "g.comp", "--outputs", "y:f32", "--description", "d.json"})
                .find("cannot be combined"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"kernel", "ls", "--grid", "1"}).find("only valid for 'kernel add'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"info", "--inputs", "x:f32"}).find("only valid for 'kernel add'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"kernel", "frob"}).find("unknown kernel command 'frob'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"kernel", "show"}).find("usage: tensorctl kernel show NAME"), std::string::npos);
}

TEST(CliArgs, AdminReload) {
  EXPECT_EQ(parse({"admin", "reload"}).command, "admin");
  EXPECT_NE(usageErrorOf({"admin", "frob"}).find("unknown admin command 'frob'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"admin"}).find("usage: tensorctl admin reload"), std::string::npos);
}

}  // namespace
}  // namespace tensord::cli
