// tensorctl's grammar for groups and collectives: group create/ls/rm,
// allreduce, broadcast, barrier and their options.

#include <gtest/gtest.h>

#include "client/cli_args.h"

namespace tensord::cli {
namespace {

// No environment and no credentials file ($HOME unset): only the flags count.
Options parse(const std::vector<std::string>& args) {
  return parseArgs(args, [](const char*) -> const char* { return nullptr; });
}

std::string usageErrorOf(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CliGroupArgs, GroupCreateTakesMembersByRank) {
  Options o = parse({"group", "create", "g", "--members", "127.0.0.1:1,tls://h:2,[::1]:3", "--timeout", "500"});
  EXPECT_EQ(o.command, "group");
  EXPECT_EQ(o.args, (std::vector<std::string>{"create", "g"}));
  EXPECT_EQ(o.members, (std::vector<std::string>{"127.0.0.1:1", "tls://h:2", "[::1]:3"}));
  EXPECT_EQ(o.timeoutMs, 500u);
}

TEST(CliGroupArgs, GroupSubcommandsAndTheirArguments) {
  EXPECT_EQ(parse({"group", "ls", "--json"}).args, std::vector<std::string>{"ls"});
  EXPECT_EQ(parse({"group", "rm", "g"}).args, (std::vector<std::string>{"rm", "g"}));
  EXPECT_NE(usageErrorOf({"group", "create", "g"}).find("--members"), std::string::npos);
  EXPECT_NE(usageErrorOf({"group", "rm", "g", "--members", "a:1"}).find("only valid for 'group create'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"group", "ls", "g"}).find("usage: tensorctl group ls"), std::string::npos);
  EXPECT_NE(usageErrorOf({"group", "rm"}).find("usage: tensorctl group rm NAME"), std::string::npos);
  EXPECT_NE(usageErrorOf({"group", "join", "g"}).find("unknown group command 'join'"), std::string::npos);
  EXPECT_NE(usageErrorOf({"group"}).find("usage: tensorctl group"), std::string::npos);
  EXPECT_NE(usageErrorOf({"group", "create", "g", "--members", "a:1,,b:2"}).find("empty member"), std::string::npos);
  EXPECT_NE(usageErrorOf({"ls", "--members", "a:1"}).find("only valid for 'group create'"), std::string::npos);
}

TEST(CliGroupArgs, CollectivesNeedAGroup) {
  Options o = parse({"allreduce", "--group", "g", "w", "b", "--op", "mean"});
  EXPECT_EQ(o.command, "allreduce");
  EXPECT_EQ(o.group, "g");
  EXPECT_EQ(o.args, (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(o.reduceOp, "mean");
  EXPECT_EQ(parse({"allreduce", "--group", "g", "w"}).reduceOp, "");  // the daemon's default, sum

  o = parse({"broadcast", "--group=g", "w", "--root", "2"});
  ASSERT_TRUE(o.root.has_value());
  EXPECT_EQ(*o.root, 2u);
  EXPECT_TRUE(parse({"barrier", "--group", "g"}).args.empty());

  EXPECT_NE(usageErrorOf({"allreduce", "w"}).find("allreduce needs --group NAME"), std::string::npos);
  EXPECT_NE(usageErrorOf({"allreduce", "--group", "g"}).find("usage: tensorctl allreduce"), std::string::npos);
  EXPECT_NE(usageErrorOf({"barrier", "--group", "g", "x"}).find("usage: tensorctl barrier"), std::string::npos);
  EXPECT_NE(usageErrorOf({"allreduce", "--group", "g", "w", "--op", "prod"})
                .find("--op: expected sum, mean, max or min, got 'prod'"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"broadcast", "--group", "g", "w"}).find("--root"), std::string::npos);
  EXPECT_NE(usageErrorOf({"broadcast", "--group", "g", "w", "--root", "-1"}).find("--root: expected a whole number"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"allreduce", "--group", "g", "w", "--root", "1"}).find("--root is only valid"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"broadcast", "--group", "g", "w", "--root", "0", "--op", "sum"}).find("--op is only valid"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"ls", "--group", "g"}).find("--group is only valid"), std::string::npos);
  EXPECT_NE(usageErrorOf({"barrier", "--group", "g", "--timeout", "0"}).find("--timeout: expected a whole number"),
            std::string::npos);
  EXPECT_NE(usageErrorOf({"ls", "--timeout", "10"}).find("--timeout is only valid"), std::string::npos);
}

}  // namespace
}  // namespace tensord::cli
