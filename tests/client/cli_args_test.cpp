// tensorctl's command-line grammar.

#include "client/cli_args.h"

#include <gtest/gtest.h>

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
  EXPECT_EQ(usageErrorOf({"put", "a"}), "usage: tensorctl put NAME FILE.npy");
  EXPECT_EQ(usageErrorOf({"get", "a", "b", "c"}), "usage: tensorctl get NAME FILE.npy");
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

}  // namespace
}  // namespace tensord::cli
